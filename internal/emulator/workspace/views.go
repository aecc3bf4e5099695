// Views: CREATE [OR REPLACE] VIEW, ALTER VIEW … AS and DROP VIEW of the one
// view query the output defines (the deduplicating view of a table with
// coverage, catalog.DedupViewQuery), their Unity Catalog entries (table_type
// VIEW, view_definition, the columns bound at definition) and their rows,
// by evaluating the query over the table's rows. Views are kept beside the
// tables (viewstore.go), persisted with them.
//
// Grammar (Databricks SQL reference, "CREATE VIEW", "ALTER VIEW", "DROP
// VIEW", "QUALIFY clause"), of which the emulator executes:
//
//	CREATE [ OR REPLACE ] VIEW view_name AS query
//	ALTER VIEW view_name AS query
//	DROP VIEW [ IF EXISTS ] view_name
//	query: SELECT * FROM table_name
//	       QUALIFY [ column IS NULL OR ] ... row_number() OVER (
//	         PARTITION BY column [, ...] ORDER BY column [ ASC | DESC ] ) = 1
//
// Every other form the service accepts (TEMPORARY, IF NOT EXISTS, a column
// list, WITH SCHEMA, COMMENT, TBLPROPERTIES, any other query) is refused as
// UNSUPPORTED_FEATURE, saying so, never accepted and ignored; text that is
// not SQL at all is a PARSE_SYNTAX_ERROR (SQLSTATE 42601), as the service
// answers it.

package workspace

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// viewQuery is a parsed deduplicating view query.
type viewQuery struct {
	// Text is the query as written (after AS, without a trailing ';'): the
	// view_definition Unity Catalog reports.
	Text  string
	Table tableRef
	// PassNull are the columns of the "column IS NULL OR" terms: a row with
	// any of them NULL is kept whatever its row number.
	PassNull  []string
	Partition []string
	Order     string
	Desc      bool
}

// View is one view as the workspace holds it.
type View struct {
	FullName string // catalog.schema.view, lower case
	TableID  string
	// Source is the table the query reads, resolved and lower case.
	Source string
	// Columns are the source table's columns when the view was defined:
	// "*" is expanded then, and a view's columns change only when it is
	// defined again (CREATE OR REPLACE, ALTER VIEW … AS).
	Columns    []typemap.Column
	Definition string
	Owner      string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	query      viewQuery
}

// CatalogName returns the catalog part of FullName.
func (v View) CatalogName() string { return namePart(v.FullName, 0) }

// SchemaName returns the schema part of FullName.
func (v View) SchemaName() string { return namePart(v.FullName, 1) }

// Name returns the view part of FullName.
func (v View) Name() string { return namePart(v.FullName, 2) }

// parseCreateView reads "[OR REPLACE] VIEW name AS query" after CREATE.
func (p *sqlParser) parseCreateView() (*statement, *sqlError) {
	st := &statement{Kind: KindCreateView}
	if p.acceptWord("OR") {
		if err := p.expectWord("REPLACE"); err != nil {
			return nil, err
		}
		st.OrReplace = true
	}
	if p.peek().isWord("TABLE") {
		return nil, unsupported("CREATE OR REPLACE TABLE (only CREATE TABLE [IF NOT EXISTS] is supported)")
	}
	if t := p.peek(); t.isWord("TEMPORARY") || t.isWord("GLOBAL") {
		return nil, unsupported("CREATE … %s VIEW (a session's view; the emulator keeps Unity Catalog views only)", strings.ToUpper(t.text))
	}
	if err := p.expectWord("VIEW"); err != nil {
		return nil, err
	}
	if p.peek().isWord("IF") {
		return nil, unsupported("CREATE VIEW IF NOT EXISTS (the emulator executes CREATE [OR REPLACE] VIEW name AS query)")
	}
	return p.viewBody(st)
}

// parseAlterView reads "name AS query" after ALTER VIEW.
func (p *sqlParser) parseAlterView() (*statement, *sqlError) {
	return p.viewBody(&statement{Kind: KindAlterViewAs})
}

// viewBody reads "name AS query".
func (p *sqlParser) viewBody(st *statement) (*statement, *sqlError) {
	var err *sqlError
	if st.Table, err = p.tableName(); err != nil {
		return nil, err
	}
	if t := p.peek(); !t.isWord("AS") {
		if t.kind == sqlEOF {
			return nil, parseErr("expected AS, got end of input")
		}
		return nil, unsupported("%s clause %s (the emulator executes … VIEW name AS query)", st.Kind, t.describe())
	}
	p.next()
	if st.Query, err = p.viewQuery(); err != nil {
		return nil, err
	}
	return st, nil
}

// viewQuery reads the deduplicating query (see the file comment).
func (p *sqlParser) viewQuery() (*viewQuery, *sqlError) {
	start := p.peek().start
	if err := p.expectWord("SELECT"); err != nil {
		return nil, err
	}
	if !p.accept("*") {
		return nil, unsupported("view query SELECT %s (the emulator's views are SELECT * … QUALIFY row_number() … = 1)", p.peek().describe())
	}
	if t := p.peek(); !t.isWord("FROM") {
		if t.isWord("EXCEPT") { // star clause: Databricks SQL reference, "SELECT", star_clause
			return nil, unsupported("SELECT * EXCEPT in a view query")
		}
		return nil, parseErr("expected FROM, got %s", t.describe())
	}
	p.next()
	q := &viewQuery{}
	var err *sqlError
	if q.Table, err = p.tableName(); err != nil {
		return nil, err
	}
	if t := p.peek(); !t.isWord("QUALIFY") {
		if t.kind == sqlEOF || t.is(";") {
			return nil, unsupported("a view query without QUALIFY row_number() … = 1 (the emulator's views are the deduplicating view)")
		}
		return nil, unsupported("view query clause %s (the emulator's views are SELECT * FROM table QUALIFY …)", t.describe())
	}
	p.next()
	for p.peek().kind == sqlWord && !p.peek().isWord("row_number") || p.peek().kind == sqlQuoted {
		col, err := p.ident("a column name")
		if err != nil {
			return nil, err
		}
		if !p.acceptWord("IS") {
			return nil, unsupported("QUALIFY term on %s other than IS NULL", typemap.QuoteIdent(col))
		}
		if p.acceptWord("NOT") {
			return nil, unsupported("QUALIFY %s IS NOT NULL", typemap.QuoteIdent(col))
		}
		if err := p.expectWord("NULL"); err != nil {
			return nil, err
		}
		if !p.acceptWord("OR") {
			return nil, unsupported("QUALIFY %s IS NULL without OR row_number() … = 1", typemap.QuoteIdent(col))
		}
		q.PassNull = append(q.PassNull, col)
	}
	if t := p.next(); !t.isWord("row_number") {
		return nil, unsupported("QUALIFY %s (the emulator evaluates row_number() … = 1)", t.describe())
	}
	if err := p.expect("("); err != nil {
		return nil, err
	}
	if err := p.expect(")"); err != nil {
		return nil, err
	}
	if err := p.expectWord("OVER"); err != nil {
		return nil, err
	}
	if err := p.expect("("); err != nil {
		return nil, err
	}
	if !p.acceptWord("PARTITION") {
		return nil, unsupported("row_number() OVER without PARTITION BY")
	}
	if err := p.expectWord("BY"); err != nil {
		return nil, err
	}
	for {
		col, err := p.ident("a column name")
		if err != nil {
			return nil, err
		}
		q.Partition = append(q.Partition, col)
		if !p.accept(",") {
			break
		}
	}
	if !p.acceptWord("ORDER") {
		// "The OVER clause of the window function must include an ORDER BY
		// clause" (Databricks SQL reference, row_number); Apache Spark's
		// analyzer refuses it with this class and text (a legacy class,
		// without an SQLSTATE).
		return nil, &sqlError{Class: "_LEGACY_ERROR_TEMP_1037", Code: "BAD_REQUEST",
			Msg: "Window function row_number() requires window to be ordered, please add ORDER BY clause. For example SELECT row_number()(value_expr) OVER (PARTITION BY window_partition ORDER BY window_ordering) from table."}
	}
	if err := p.expectWord("BY"); err != nil {
		return nil, err
	}
	if q.Order, err = p.ident("a column name"); err != nil {
		return nil, err
	}
	switch {
	case p.acceptWord("DESC"):
		q.Desc = true
	case p.acceptWord("ASC"):
	}
	if t := p.peek(); !t.is(")") {
		if t.is(",") || t.isWord("NULLS") || t.isWord("ROWS") || t.isWord("RANGE") {
			return nil, unsupported("window %s (the emulator orders by one column, ASC or DESC)", t.describe())
		}
		return nil, parseErr("expected \")\", got %s", t.describe())
	}
	p.next()
	if err := p.expect("="); err != nil {
		return nil, err
	}
	if t := p.next(); t.kind != sqlNumber || t.text != "1" {
		return nil, unsupported("row_number() … = %s (the emulator evaluates = 1)", t.describe())
	}
	if t := p.peek(); t.kind != sqlEOF && !t.is(";") {
		return nil, unsupported("view query continues with %s after QUALIFY … = 1", t.describe())
	}
	q.Text = strings.TrimSpace(p.src[start:p.peek().start])
	return q, nil
}

// parseViewQuery parses a view's stored query text alone.
func parseViewQuery(text string) (*viewQuery, *sqlError) {
	toks, err := tokenize(text)
	if err != nil {
		return nil, err
	}
	p := &sqlParser{src: text, toks: toks}
	q, err := p.viewQuery()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != sqlEOF {
		return nil, parseErr("unexpected %s after the view's query", t.describe())
	}
	return q, nil
}

// Errors of a statement naming an object of the other kind: Apache Spark's
// error classes, which Databricks SQL reports (Spark error-conditions:
// WRONG_COMMAND_FOR_OBJECT_TYPE, EXPECT_VIEW_NOT_TABLE, EXPECT_TABLE_NOT_VIEW,
// all SQLSTATE 42809).
func wrongCommand(op, name, found, alternative string) *sqlError {
	required := "TABLE"
	if found == "TABLE" {
		required = "VIEW"
	}
	return &sqlError{Class: "WRONG_COMMAND_FOR_OBJECT_TYPE", SQLState: "42809", Code: "BAD_REQUEST",
		Msg: fmt.Sprintf("The operation %s requires a %s. But %s is a %s. Use %s instead.", op, required, name, found, alternative)}
}

func expectViewNotTable(name, op string) *sqlError {
	return &sqlError{Class: "EXPECT_VIEW_NOT_TABLE.NO_ALTERNATIVE", SQLState: "42809", Code: "BAD_REQUEST",
		Msg: fmt.Sprintf("The table %s does not support %s.", name, op)}
}

func expectTableNotView(name, op string) *sqlError {
	return &sqlError{Class: "EXPECT_TABLE_NOT_VIEW.USE_ALTER_VIEW", SQLState: "42809", Code: "BAD_REQUEST",
		Msg: fmt.Sprintf("'%s' expects a table but %s is a view. Please use ALTER VIEW instead.", op, name)}
}

// View returns the view named fullName, if there is one.
func (w *Workspace) View(fullName string) (View, bool) { return w.reg.views.get(fullName) }

// Views lists the views, sorted by name.
func (w *Workspace) Views() []View { return w.reg.views.list() }

func (w *Workspace) isView(name string) bool {
	_, ok := w.View(name)
	return ok
}

// bindView resolves the query's table and checks its columns: the table
// must exist (a view over a missing table is TABLE_OR_VIEW_NOT_FOUND, as
// the service resolves a view's query when it is defined) and hold every
// column the query names.
func (w *Workspace) bindView(name string, q *viewQuery, catalog, schema string) (View, *sqlError) {
	src, serr := resolveName(q.Table, catalog, schema)
	if serr != nil {
		return View{}, serr
	}
	if w.isView(src) {
		return View{}, unsupported("a view over the view %s (the emulator's views read a table)", src)
	}
	t, ok := w.reg.Get(src)
	if !ok {
		return View{}, notFound(src)
	}
	for _, c := range append(append(append([]string(nil), q.PassNull...), q.Partition...), q.Order) {
		if _, i := t.Column(c); i < 0 {
			return View{}, columnNotFound(c, src)
		}
	}
	return View{FullName: name, Source: src, Columns: cloneColumns(t.Columns), Definition: q.Text, query: *q}, nil
}

// createView runs CREATE [OR REPLACE] VIEW. The name is shared with tables:
// over a table it is TABLE_OR_VIEW_ALREADY_EXISTS, or with OR REPLACE
// EXPECT_VIEW_NOT_TABLE; over a view without OR REPLACE it is
// TABLE_OR_VIEW_ALREADY_EXISTS ("CREATE VIEW": OR REPLACE "If a view of the
// same name already exists, it is replaced"). A replaced view is a new
// object (a new table id), as the reference says ("equivalent to DROP VIEW
// IF EXISTS view_name followed by CREATE VIEW view_name"). The name is
// checked against the tables again as the view is stored, under the
// registry's lock (Registry.changeView): a CREATE TABLE of the same name
// run meanwhile cannot succeed too.
func (w *Workspace) createView(name string, st *statement, catalog, schema string) *sqlError {
	tableTaken := func() *sqlError {
		if st.OrReplace {
			return expectViewNotTable(name, "CREATE OR REPLACE VIEW")
		}
		return alreadyExists(name)
	}
	if _, ok := w.reg.Get(name); ok {
		return tableTaken()
	}
	v, serr := w.bindView(name, st.Query, catalog, schema)
	if serr != nil {
		return serr
	}
	now := w.opts.Now()
	v.TableID, v.Owner, v.CreatedAt, v.UpdatedAt = NewUUID(), w.opts.Owner, now, now
	return w.reg.changeView(name, func(table bool, _ View, exists bool) (*View, bool, *sqlError) {
		switch {
		case table:
			return nil, false, tableTaken()
		case exists && !st.OrReplace:
			return nil, false, alreadyExists(name)
		}
		return &v, false, nil
	})
}

// alterView runs ALTER VIEW … AS: the view keeps its id, owner and grants
// and takes the new query and the columns it yields now. A missing view is
// TABLE_OR_VIEW_NOT_FOUND; a table is EXPECT_VIEW_NOT_TABLE (ALTER TABLE is
// the statement for it).
func (w *Workspace) alterView(name string, st *statement, catalog, schema string) *sqlError {
	if _, ok := w.reg.Get(name); ok {
		return &sqlError{Class: "EXPECT_VIEW_NOT_TABLE.USE_ALTER_TABLE", SQLState: "42809", Code: "BAD_REQUEST",
			Msg: fmt.Sprintf("The table %s does not support ALTER VIEW. Please use ALTER TABLE instead.", name)}
	}
	v, serr := w.bindView(name, st.Query, catalog, schema)
	if serr != nil {
		return serr
	}
	return w.reg.views.change(name, func(old View, ok bool) (*View, bool, *sqlError) {
		if !ok {
			return nil, false, notFound(name)
		}
		v.TableID, v.Owner, v.CreatedAt, v.UpdatedAt = old.TableID, old.Owner, old.CreatedAt, w.opts.Now()
		return &v, false, nil
	})
}

// dropView runs DROP VIEW [IF EXISTS]: a missing view is
// TABLE_OR_VIEW_NOT_FOUND unless IF EXISTS, a table is
// WRONG_COMMAND_FOR_OBJECT_TYPE (Databricks SQL reference, "DROP VIEW").
func (w *Workspace) dropView(name string, st *statement) *sqlError {
	if _, ok := w.reg.Get(name); ok {
		return wrongCommand("DROP VIEW", name, "TABLE", "DROP TABLE")
	}
	return w.reg.views.change(name, func(_ View, ok bool) (*View, bool, *sqlError) {
		if !ok && !st.IfExists {
			return nil, false, notFound(name)
		}
		return nil, ok, nil
	})
}

// DropView drops a view (UC's DELETE of a table entry that is a view). A
// missing view gives ErrNotFound (wrapped).
func (w *Workspace) DropView(fullName string) error {
	name := NormalizeName(fullName)
	serr := w.reg.views.change(name, func(_ View, ok bool) (*View, bool, *sqlError) {
		if !ok {
			return nil, false, notFound(name)
		}
		return nil, true, nil
	})
	switch {
	case serr == nil:
		return nil
	case serr.Class == "TABLE_OR_VIEW_NOT_FOUND":
		return fmt.Errorf("view %s: %w", name, ErrNotFound)
	default: // the view could not be removed from storage
		return fmt.Errorf("view %s: %w", name, serr)
	}
}

// Evaluate computes the view's rows from its table's rows (raw, in storage
// order) and the table t as it is now: the rows QUALIFY keeps, with the
// view's columns only. Of the rows of one partition it keeps the first in
// the ORDER BY column's order (NULLs first when ascending, last when
// descending: Databricks SQL's default null ordering, "ORDER BY clause"),
// the earlier-stored one on a tie, where the service's choice among equal
// rows is arbitrary. A column the view was defined with that the table no
// longer has is an error, as a query of such a view is on the service.
func (v View) Evaluate(raw []map[string]any, t Table) ([]map[string]any, error) {
	for _, c := range v.Columns {
		if _, i := t.Column(c.Name); i < 0 {
			return nil, fmt.Errorf("view %s: its column %s is gone from table %s: define the view again", v.FullName, typemap.QuoteIdent(c.Name), v.Source)
		}
	}
	q := v.query
	orderCol, _ := t.Column(q.Order)
	field := func(row map[string]any, name string) any {
		if val, ok := row[name]; ok {
			return val
		}
		for k, val := range row {
			if strings.EqualFold(k, name) {
				return val
			}
		}
		return nil
	}
	keep := make([]bool, len(raw))
	best := map[string]int{} // partition key → index of the row kept so far
	for i, row := range raw {
		pass := false
		for _, c := range q.PassNull {
			if field(row, c) == nil {
				pass = true
			}
		}
		if pass {
			keep[i] = true
			continue
		}
		var key strings.Builder
		for _, c := range q.Partition {
			val := field(row, c)
			fmt.Fprintf(&key, "%T:%v\x00", val, val)
		}
		k := key.String()
		j, seen := best[k]
		if !seen {
			best[k], keep[i] = i, true
			continue
		}
		c := compareValues(field(row, q.Order), field(raw[j], q.Order), orderCol.Type)
		if q.Desc {
			c = -c
		}
		if c < 0 {
			keep[j], keep[i], best[k] = false, true, i
		}
	}
	var out []map[string]any
	for i, row := range raw {
		if !keep[i] {
			continue
		}
		r := make(map[string]any, len(v.Columns))
		for _, c := range v.Columns {
			r[c.Name] = field(row, c.Name)
		}
		out = append(out, r)
	}
	return out, nil
}

// compareValues orders two values of a column of type t as the rows
// endpoint renders them (numbers, strings, timestamps as RFC 3339 text):
// NULL first, then by value.
func compareValues(a, b any, t typemap.Type) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	if t.Kind == typemap.String {
		return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
	}
	if t.Kind == typemap.Timestamp || t.Kind == typemap.TimestampNTZ {
		ta, ea := parseRowTime(a)
		tb, eb := parseRowTime(b)
		if ea == nil && eb == nil {
			return ta.Compare(tb)
		}
	}
	fa, oka := number(a)
	fb, okb := number(b)
	if oka && okb {
		switch {
		case fa < fb:
			return -1
		case fa > fb:
			return 1
		}
		return 0
	}
	return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
}

func parseRowTime(v any) (time.Time, error) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, fmt.Errorf("not a timestamp: %v", v)
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Parse("2006-01-02T15:04:05.999999999", s)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int8:
		return float64(n), true
	case int16:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case float64:
		return n, !math.IsNaN(n)
	case float32:
		return float64(n), true
	case string:
		f, err := strconv.ParseFloat(n, 64)
		return f, err == nil
	}
	return 0, false
}
