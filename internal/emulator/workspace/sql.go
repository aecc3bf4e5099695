package workspace

import (
	"fmt"
	"strings"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// StatementKind names one statement of the DDL subset the emulator executes.
// The values are what Stats counts statements under.
type StatementKind string

// The statement kinds. KindUnsupported and KindInvalid count statements that
// failed before they could be classified.
const (
	KindCreateTable        StatementKind = "CREATE TABLE"
	KindAddColumns         StatementKind = "ALTER TABLE ADD COLUMNS"
	KindAlterColumnType    StatementKind = "ALTER TABLE ALTER COLUMN TYPE"
	KindAlterColumnComment StatementKind = "ALTER TABLE ALTER COLUMN COMMENT"
	KindDropNotNull        StatementKind = "ALTER TABLE ALTER COLUMN DROP NOT NULL"
	KindSetProperties      StatementKind = "ALTER TABLE SET TBLPROPERTIES"
	KindSetTags            StatementKind = "ALTER TABLE SET TAGS"
	KindCommentOnTable     StatementKind = "COMMENT ON TABLE"
	KindRepairSyncMetadata StatementKind = "MSCK REPAIR TABLE SYNC METADATA"
	KindDropTable          StatementKind = "DROP TABLE"
	KindCreateView         StatementKind = "CREATE VIEW"
	KindAlterViewAs        StatementKind = "ALTER VIEW AS"
	KindDropView           StatementKind = "DROP VIEW"
	KindUnsupported        StatementKind = "UNSUPPORTED"
	KindInvalid            StatementKind = "INVALID"
)

// property is one 'key'='value' pair, in statement order.
type property struct{ Key, Value string }

// statement is one parsed DDL statement. Only the fields of its kind are set.
type statement struct {
	Kind  StatementKind
	Table tableRef
	// CREATE TABLE
	IfNotExists bool
	// DROP TABLE
	IfExists   bool
	Columns    []typemap.Column // also ADD COLUMNS
	Comment    *string          // table comment (CREATE, COMMENT ON) or column comment
	Properties []property       // TBLPROPERTIES or TAGS
	// ALTER COLUMN
	Column  string
	NewType typemap.Type
	// CREATE [OR REPLACE] VIEW, ALTER VIEW … AS: the view's query.
	OrReplace bool
	Query     *viewQuery
}

// tableRef is a possibly partial table name as written (one to three parts).
type tableRef []string

// sqlError is a statement failure with Databricks' error class and SQLSTATE.
type sqlError struct {
	Class    string // e.g. TABLE_OR_VIEW_ALREADY_EXISTS; rendered as "[CLASS] msg"
	SQLState string
	Code     string // the Statement Execution error_code (ServiceErrorCode)
	Msg      string
}

func (e *sqlError) Error() string {
	if e.SQLState == "" {
		return fmt.Sprintf("[%s] %s", e.Class, e.Msg)
	}
	return fmt.Sprintf("[%s] %s SQLSTATE: %s", e.Class, e.Msg, e.SQLState)
}

func parseErr(format string, args ...any) *sqlError {
	return &sqlError{Class: "PARSE_SYNTAX_ERROR", SQLState: "42601", Code: "BAD_REQUEST", Msg: fmt.Sprintf(format, args...)}
}

func unsupported(format string, args ...any) *sqlError {
	return &sqlError{Class: "UNSUPPORTED_FEATURE", SQLState: "0A000", Code: "BAD_REQUEST",
		Msg: "unsupported statement: " + fmt.Sprintf(format, args...)}
}

type sqlTokKind int

const (
	sqlEOF sqlTokKind = iota
	sqlWord
	sqlQuoted // `identifier`
	sqlString
	sqlNumber
	sqlPunct
)

type sqlToken struct {
	kind       sqlTokKind
	text       string // unescaped value for identifiers and strings
	start, end int    // byte span in the source
}

func (t sqlToken) is(p string) bool { return t.kind == sqlPunct && t.text == p }

func (t sqlToken) isWord(w string) bool { return t.kind == sqlWord && strings.EqualFold(t.text, w) }

func (t sqlToken) describe() string {
	switch t.kind {
	case sqlEOF:
		return "end of input"
	case sqlQuoted:
		return typemap.QuoteIdent(t.text)
	case sqlString:
		return typemap.QuoteString(t.text)
	}
	return fmt.Sprintf("%q", t.text)
}

// tokenize splits a statement into tokens: words, `quoted identifiers`
// (doubled backticks escape a backtick), 'string literals' or "string
// literals" (a doubled quote or a backslash escapes), numbers and
// punctuation. "--" and "/* */" comments are skipped as SQL does. Quoted
// text is never interpreted, so a name such as "x'); DROP TABLE y; --" inside
// backticks or quotes stays one token.
func tokenize(src string) ([]sqlToken, *sqlError) {
	var toks []sqlToken
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '-' && i+1 < len(src) && src[i+1] == '-':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				return nil, parseErr("unterminated /* comment at position %d", i)
			}
			i += 2 + end + 2
		case c == '`':
			start := i
			var b strings.Builder
			i++
			closed := false
			for i < len(src) {
				if src[i] == '`' {
					if i+1 < len(src) && src[i+1] == '`' {
						b.WriteByte('`')
						i += 2
						continue
					}
					i++
					closed = true
					break
				}
				b.WriteByte(src[i])
				i++
			}
			if !closed {
				return nil, parseErr("unterminated quoted identifier at position %d", start)
			}
			toks = append(toks, sqlToken{kind: sqlQuoted, text: b.String(), start: start, end: i})
		case c == '\'' || c == '"':
			start := i
			s, n, ok := scanString(src[i:])
			if !ok {
				return nil, parseErr("unterminated string literal at position %d", start)
			}
			i += n
			toks = append(toks, sqlToken{kind: sqlString, text: s, start: start, end: i})
		case c >= '0' && c <= '9':
			start := i
			for i < len(src) && (src[i] >= '0' && src[i] <= '9' || src[i] == '.') {
				i++
			}
			toks = append(toks, sqlToken{kind: sqlNumber, text: src[start:i], start: start, end: i})
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			start := i
			for i < len(src) && (src[i] == '_' || src[i] >= 'a' && src[i] <= 'z' || src[i] >= 'A' && src[i] <= 'Z' || src[i] >= '0' && src[i] <= '9') {
				i++
			}
			toks = append(toks, sqlToken{kind: sqlWord, text: src[start:i], start: start, end: i})
		default:
			toks = append(toks, sqlToken{kind: sqlPunct, text: string(c), start: i, end: i + 1})
			i++
		}
	}
	toks = append(toks, sqlToken{kind: sqlEOF, start: len(src), end: len(src)})
	return toks, nil
}

// scanString reads a quoted literal at the start of s and returns its value
// and length. The opening quote character closes it; doubling it or a
// backslash escapes (\n, \t, \r, \0 and \b are control characters; any other
// escaped character stands for itself).
func scanString(s string) (string, int, bool) {
	quote := s[0]
	var b strings.Builder
	i := 1
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			switch e := s[i+1]; e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '0':
				b.WriteByte(0)
			case 'b':
				b.WriteByte('\b')
			default:
				b.WriteByte(e)
			}
			i += 2
		case c == quote && i+1 < len(s) && s[i+1] == quote:
			b.WriteByte(quote)
			i += 2
		case c == quote:
			return b.String(), i + 1, true
		default:
			b.WriteByte(c)
			i++
		}
	}
	return "", 0, false
}

type sqlParser struct {
	src  string
	toks []sqlToken
	pos  int
}

func (p *sqlParser) peek() sqlToken { return p.toks[p.pos] }

func (p *sqlParser) next() sqlToken {
	t := p.toks[p.pos]
	if t.kind != sqlEOF {
		p.pos++
	}
	return t
}

func (p *sqlParser) acceptWord(w string) bool {
	if p.peek().isWord(w) {
		p.pos++
		return true
	}
	return false
}

func (p *sqlParser) accept(punct string) bool {
	if p.peek().is(punct) {
		p.pos++
		return true
	}
	return false
}

func (p *sqlParser) expectWord(words ...string) *sqlError {
	for _, w := range words {
		if t := p.next(); !t.isWord(w) {
			return parseErr("expected %s, got %s", w, t.describe())
		}
	}
	return nil
}

func (p *sqlParser) expect(punct string) *sqlError {
	if t := p.next(); !t.is(punct) {
		return parseErr("expected %q, got %s", punct, t.describe())
	}
	return nil
}

// ident reads a bare or backtick-quoted identifier.
func (p *sqlParser) ident(what string) (string, *sqlError) {
	t := p.next()
	if t.kind != sqlWord && t.kind != sqlQuoted {
		return "", parseErr("expected %s, got %s", what, t.describe())
	}
	if t.kind == sqlQuoted && t.text == "" {
		return "", parseErr("empty %s", what)
	}
	return t.text, nil
}

// tableName reads a dotted name of one to three identifiers.
func (p *sqlParser) tableName() (tableRef, *sqlError) {
	var parts tableRef
	for {
		part, err := p.ident("a table name")
		if err != nil {
			return nil, err
		}
		parts = append(parts, part)
		if !p.accept(".") {
			break
		}
	}
	if len(parts) > 3 {
		return nil, &sqlError{Class: "REQUIRES_SINGLE_PART_NAMESPACE", SQLState: "42K05", Code: "BAD_REQUEST",
			Msg: fmt.Sprintf("table name %s has %d parts; at most catalog.schema.table", quoteRef(parts), len(parts))}
	}
	return parts, nil
}

func quoteRef(parts tableRef) string {
	q := make([]string, len(parts))
	for i, s := range parts {
		q[i] = typemap.QuoteIdent(s)
	}
	return strings.Join(q, ".")
}

// str reads a string literal.
func (p *sqlParser) str(what string) (string, *sqlError) {
	t := p.next()
	if t.kind != sqlString {
		return "", parseErr("expected a string literal for %s, got %s", what, t.describe())
	}
	return t.text, nil
}

// typeText reads one type (a name, optionally followed by a balanced (...) or
// <...> group) and parses its source text with typemap.Parse.
func (p *sqlParser) typeText() (typemap.Type, *sqlError) {
	first := p.next()
	if first.kind != sqlWord {
		return typemap.Type{}, parseErr("expected a type, got %s", first.describe())
	}
	end := first.end
	if open := p.peek(); open.is("(") || open.is("<") {
		closeCh := ")"
		if open.is("<") {
			closeCh = ">"
		}
		depth := 0
		for {
			t := p.next()
			switch {
			case t.kind == sqlEOF:
				return typemap.Type{}, parseErr("unbalanced %q in type %s", open.text, typemap.Elide(p.src[first.start:t.start], 200))
			case t.is(open.text):
				depth++
			case t.is(closeCh):
				depth--
			}
			if depth == 0 {
				end = t.end
				break
			}
		}
	}
	text := p.src[first.start:end]
	typ, err := typemap.Parse(text)
	if err != nil {
		return typemap.Type{}, &sqlError{Class: "UNSUPPORTED_DATATYPE", SQLState: "0A000", Code: "BAD_REQUEST",
			Msg: fmt.Sprintf("unsupported data type %s: %v", typemap.Elide(text, 200), err)}
	}
	return typ, nil
}

// columnDef reads "name TYPE [NOT NULL] [COMMENT '...']".
func (p *sqlParser) columnDef() (typemap.Column, *sqlError) {
	name, err := p.ident("a column name")
	if err != nil {
		return typemap.Column{}, err
	}
	typ, err := p.typeText()
	if err != nil {
		return typemap.Column{}, err
	}
	col := typemap.Column{Name: name, Type: typ, Nullable: true}
	for {
		switch t := p.peek(); {
		case t.isWord("NOT"):
			p.next()
			if err := p.expectWord("NULL"); err != nil {
				return col, err
			}
			col.Nullable = false
		case t.isWord("COMMENT"):
			p.next()
			c, err := p.str("COMMENT")
			if err != nil {
				return col, err
			}
			col.Comment = c
		case t.is(",") || t.is(")") || t.kind == sqlEOF:
			return col, nil
		default:
			return col, unsupported("column option %s of column %s", t.describe(), typemap.QuoteIdent(name))
		}
	}
}

// columnList reads "(coldef, ...)" or, when parens is false, "coldef, ...".
func (p *sqlParser) columnList(parens bool) ([]typemap.Column, *sqlError) {
	if parens {
		if err := p.expect("("); err != nil {
			return nil, err
		}
	}
	var cols []typemap.Column
	for {
		c, err := p.columnDef()
		if err != nil {
			return nil, err
		}
		cols = append(cols, c)
		if !p.accept(",") {
			break
		}
	}
	if parens {
		if err := p.expect(")"); err != nil {
			return nil, err
		}
	}
	return cols, nil
}

// propertyList reads "('k'='v', k2.sub = true, ...)". Keys are string
// literals or dotted identifiers; values are literals, numbers or words.
// With valueOptional a bare key (as SET TAGS allows) gets an empty value.
func (p *sqlParser) propertyList(valueOptional bool) ([]property, *sqlError) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	var props []property
	for {
		var key string
		switch t := p.next(); t.kind {
		case sqlString:
			key = t.text
		case sqlWord, sqlQuoted:
			key = t.text
			for p.accept(".") {
				part, err := p.ident("a property key")
				if err != nil {
					return nil, err
				}
				key += "." + part
			}
		default:
			return nil, parseErr("expected a property key, got %s", t.describe())
		}
		if key == "" {
			return nil, parseErr("empty property key")
		}
		var value string
		if p.accept("=") {
			switch t := p.next(); t.kind {
			case sqlString, sqlNumber, sqlWord:
				value = t.text
			default:
				return nil, parseErr("expected a value for property %s, got %s", typemap.QuoteString(key), t.describe())
			}
		} else if !valueOptional {
			return nil, parseErr("expected '=' after property key %s", typemap.QuoteString(key))
		}
		props = append(props, property{Key: key, Value: value})
		if !p.accept(",") {
			break
		}
	}
	if err := p.expect(")"); err != nil {
		return nil, err
	}
	return props, nil
}

// parseStatement parses one statement of the supported DDL subset. A single
// trailing semicolon is allowed; anything after it is refused, so one request
// can never carry a second statement.
func parseStatement(src string) (*statement, *sqlError) {
	toks, err := tokenize(src)
	if err != nil {
		return nil, err
	}
	p := &sqlParser{src: src, toks: toks}
	if p.peek().kind == sqlEOF {
		return nil, parseErr("empty statement")
	}
	var st *statement
	switch first := p.peek(); {
	case first.isWord("CREATE"):
		st, err = p.parseCreate()
	case first.isWord("ALTER"):
		st, err = p.parseAlter()
	case first.isWord("COMMENT"):
		st, err = p.parseCommentOn()
	case first.isWord("MSCK"):
		st, err = p.parseMSCK()
	case first.isWord("DROP"):
		st, err = p.parseDrop()
	default:
		return nil, unsupported("%s", firstWords(src))
	}
	if err != nil {
		return nil, err
	}
	p.accept(";")
	if t := p.peek(); t.kind != sqlEOF {
		if p.toks[p.pos-1].is(";") {
			return nil, unsupported("more than one statement in one request")
		}
		return nil, parseErr("unexpected %s after the end of the statement", t.describe())
	}
	return st, nil
}

// firstWords returns the leading words of src for an error message.
func firstWords(src string) string {
	f := strings.Fields(src)
	if len(f) > 4 {
		f = f[:4]
	}
	return strings.Join(f, " ")
}

func (p *sqlParser) parseCreate() (*statement, *sqlError) {
	p.next() // CREATE
	if p.peek().isWord("OR") || p.peek().isWord("VIEW") {
		return p.parseCreateView()
	}
	if !p.acceptWord("TABLE") {
		return nil, unsupported("CREATE %s (only CREATE TABLE and CREATE [OR REPLACE] VIEW are supported)", p.peek().describe())
	}
	st := &statement{Kind: KindCreateTable}
	if p.acceptWord("IF") {
		if err := p.expectWord("NOT", "EXISTS"); err != nil {
			return nil, err
		}
		st.IfNotExists = true
	}
	var err *sqlError
	if st.Table, err = p.tableName(); err != nil {
		return nil, err
	}
	if !p.peek().is("(") {
		return nil, unsupported("CREATE TABLE without a column list (AS SELECT, LIKE and CLONE are not supported)")
	}
	if st.Columns, err = p.columnList(true); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for {
		t := p.peek()
		if t.kind == sqlEOF || t.is(";") {
			return st, nil
		}
		clause := strings.ToUpper(t.text)
		if t.kind == sqlWord && seen[clause] {
			return nil, parseErr("duplicate %s clause", clause)
		}
		seen[clause] = true
		switch {
		case t.isWord("USING"):
			p.next()
			f := p.next()
			if !f.isWord("DELTA") {
				return nil, unsupported("USING %s (only DELTA tables are supported)", f.describe())
			}
		case t.isWord("COMMENT"):
			p.next()
			c, err := p.str("COMMENT")
			if err != nil {
				return nil, err
			}
			st.Comment = &c
		case t.isWord("TBLPROPERTIES"):
			p.next()
			if st.Properties, err = p.propertyList(false); err != nil {
				return nil, err
			}
		default:
			return nil, unsupported("CREATE TABLE clause %s", t.describe())
		}
	}
}

func (p *sqlParser) parseAlter() (*statement, *sqlError) {
	p.next() // ALTER
	if p.acceptWord("VIEW") {
		return p.parseAlterView()
	}
	if !p.acceptWord("TABLE") {
		return nil, unsupported("ALTER %s (only ALTER TABLE and ALTER VIEW … AS are supported)", p.peek().describe())
	}
	table, err := p.tableName()
	if err != nil {
		return nil, err
	}
	st := &statement{Table: table}
	switch t := p.next(); {
	case t.isWord("ADD"):
		if !p.acceptWord("COLUMNS") && !p.acceptWord("COLUMN") {
			return nil, unsupported("ALTER TABLE ADD %s", p.peek().describe())
		}
		st.Kind = KindAddColumns
		if st.Columns, err = p.columnList(p.peek().is("(")); err != nil {
			return nil, err
		}
	case t.isWord("ALTER"):
		p.acceptWord("COLUMN")
		if st.Column, err = p.ident("a column name"); err != nil {
			return nil, err
		}
		if p.peek().is(".") {
			return nil, unsupported("altering a nested field")
		}
		switch a := p.next(); {
		case a.isWord("TYPE"):
			st.Kind = KindAlterColumnType
			if st.NewType, err = p.typeText(); err != nil {
				return nil, err
			}
		case a.isWord("COMMENT"):
			st.Kind = KindAlterColumnComment
			c, err := p.str("COMMENT")
			if err != nil {
				return nil, err
			}
			st.Comment = &c
		case a.isWord("DROP"):
			if err := p.expectWord("NOT", "NULL"); err != nil {
				return nil, err
			}
			st.Kind = KindDropNotNull
		default:
			return nil, unsupported("ALTER TABLE ALTER COLUMN ... %s", a.describe())
		}
	case t.isWord("SET"):
		switch a := p.next(); {
		case a.isWord("TBLPROPERTIES"):
			st.Kind = KindSetProperties
			st.Properties, err = p.propertyList(false)
		case a.isWord("TAGS"):
			st.Kind = KindSetTags
			st.Properties, err = p.propertyList(true)
		default:
			return nil, unsupported("ALTER TABLE SET %s", a.describe())
		}
		if err != nil {
			return nil, err
		}
	default:
		return nil, unsupported("ALTER TABLE ... %s", t.describe())
	}
	return st, nil
}

func (p *sqlParser) parseCommentOn() (*statement, *sqlError) {
	p.next() // COMMENT
	if err := p.expectWord("ON"); err != nil {
		return nil, err
	}
	if !p.acceptWord("TABLE") {
		return nil, unsupported("COMMENT ON %s (only COMMENT ON TABLE is supported)", p.peek().describe())
	}
	table, err := p.tableName()
	if err != nil {
		return nil, err
	}
	if err := p.expectWord("IS"); err != nil {
		return nil, err
	}
	st := &statement{Kind: KindCommentOnTable, Table: table}
	if p.acceptWord("NULL") {
		empty := ""
		st.Comment = &empty
		return st, nil
	}
	c, err := p.str("COMMENT ON TABLE")
	if err != nil {
		return nil, err
	}
	st.Comment = &c
	return st, nil
}

func (p *sqlParser) parseMSCK() (*statement, *sqlError) {
	p.next() // MSCK
	if err := p.expectWord("REPAIR", "TABLE"); err != nil {
		return nil, err
	}
	table, err := p.tableName()
	if err != nil {
		return nil, err
	}
	if !p.acceptWord("SYNC") || !p.acceptWord("METADATA") {
		return nil, unsupported("MSCK REPAIR TABLE without SYNC METADATA")
	}
	return &statement{Kind: KindRepairSyncMetadata, Table: table}, nil
}

// parseDrop reads "DROP TABLE [IF EXISTS] name", the statement of the
// Databricks SQL reference (DROP TABLE: "DROP TABLE [ IF EXISTS ]
// table_name"), and "DROP VIEW [IF EXISTS] name" (DROP VIEW: "DROP VIEW [ IF
// EXISTS ] view_name"). Their other forms are refused as unsupported: DROP
// TEMPORARY TABLE (a session's temporary table, which a warehouse statement
// never names here), the FORCE clause (a base table of shallow clones, which
// the emulator has none of), and DROP of any other object (SCHEMA, …).
func (p *sqlParser) parseDrop() (*statement, *sqlError) {
	p.next() // DROP
	st := &statement{Kind: KindDropTable}
	switch {
	case p.acceptWord("VIEW"):
		st.Kind = KindDropView
	case !p.acceptWord("TABLE"):
		return nil, unsupported("DROP %s (only DROP TABLE and DROP VIEW are supported)", p.peek().describe())
	}
	if p.acceptWord("IF") {
		if err := p.expectWord("EXISTS"); err != nil {
			return nil, err
		}
		st.IfExists = true
	}
	var err *sqlError
	if st.Table, err = p.tableName(); err != nil {
		return nil, err
	}
	if t := p.peek(); st.Kind == KindDropTable && (t.isWord("FORCE") || t.isWord("PURGE")) {
		return nil, unsupported("DROP TABLE … %s", strings.ToUpper(t.text))
	}
	return st, nil
}
