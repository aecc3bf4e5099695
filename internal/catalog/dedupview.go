// The deduplicating view: a view beside a table written with coverage that
// returns each source position (_zb_source, _zb_offset) once, so that readers
// get exactly once from an at-least-once writer.

package catalog

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// The reserved columns the view partitions and orders by: the source
// position the converter stamps with coverage on, and the emit time it
// stamps on every row (arrowconv.SourceColumn, OffsetColumn and
// EmitTimestampColumn; catalog does not import the converter).
const (
	dedupSourceColumn = "_zb_source"
	dedupOffsetColumn = "_zb_offset"
	dedupOrderColumn  = "_zb_emit_ts"
)

// DedupViewSuffix names a table's deduplicating view when no name is
// configured: the table's name with this suffix, in the table's schema.
const DedupViewSuffix = "_dedup"

// DefaultDedupView is the deduplicating view of table when none is named:
// catalog.schema.<table>_dedup.
func DefaultDedupView(table string) string { return table + DedupViewSuffix }

// DedupViewQuery is the deduplicating view's query over table, in Databricks
// SQL:
//
//	SELECT * FROM `c`.`s`.`t`
//	QUALIFY `_zb_source` IS NULL OR `_zb_offset` IS NULL
//	  OR row_number() OVER (PARTITION BY `_zb_source`, `_zb_offset` ORDER BY `_zb_emit_ts`) = 1
//
// (on one line). QUALIFY filters on a window function's result in the query
// that computes it (Databricks SQL reference, "QUALIFY clause", and the
// ranking window function row_number, "row_number ranking window
// function"); of the rows sharing a source position it keeps the one
// emitted first. Rows without a source position (coverage off when they were
// written, or a source or offset that evaluated to NULL) pass through: a
// partition of NULLs would otherwise collapse them all into one row.
func DedupViewQuery(table string) (string, error) {
	t, err := QuoteTableName(table)
	if err != nil {
		return "", err
	}
	src, off, ord := typemap.QuoteIdent(dedupSourceColumn), typemap.QuoteIdent(dedupOffsetColumn), typemap.QuoteIdent(dedupOrderColumn)
	return fmt.Sprintf("SELECT * FROM %s QUALIFY %s IS NULL OR %s IS NULL OR row_number() OVER (PARTITION BY %s, %s ORDER BY %s) = 1",
		t, src, off, src, off, ord), nil
}

// DedupViewSQL is the statement that defines view over table: CREATE VIEW
// for a view that does not exist, else ALTER VIEW … AS, which redefines it
// and, unlike CREATE OR REPLACE VIEW, keeps the privileges granted on it
// (Databricks SQL reference, "CREATE VIEW": "Replacing an existing view does
// not preserve privileges granted on the original view … Use ALTER VIEW to
// preserve privileges"; "ALTER VIEW": "AS query").
func DedupViewSQL(view, table string, create bool) (string, error) {
	v, err := QuoteTableName(view)
	if err != nil {
		return "", fmt.Errorf("view: %w", err)
	}
	q, err := DedupViewQuery(table)
	if err != nil {
		return "", err
	}
	if create {
		return "CREATE VIEW " + v + " AS " + q, nil
	}
	return "ALTER VIEW " + v + " AS " + q, nil
}

// DedupViewGrants says what the deduplicating view needs, for messages and
// docs: the writer defines it, its readers only read it (Databricks, "Create
// and manage views", Required permissions).
const DedupViewGrants = "the output's principal needs USE CATALOG on the catalog, USE SCHEMA and CREATE TABLE on the view's schema and SELECT on the table (it owns the view it creates); a reader needs USE CATALOG, USE SCHEMA and SELECT on the view"

// viewRetry is how long after a failed definition ensureView waits before
// trying again: Reconcile runs at start-up and on every change of the
// table, and a missing grant should not cost a statement each time.
const viewRetry = time.Minute

// viewState is what ensureView last did for a view: the signature of the
// table's columns it defined the view over, or when it failed.
type viewState struct {
	columns  string
	failedAt time.Time
}

// columnsSignature identifies a column list by names and types, in order:
// a view's columns are fixed when it is defined ("*" is expanded then), so
// the view must be redefined when this changes.
func columnsSignature(cols []typemap.Column) string {
	var b strings.Builder
	for _, c := range cols {
		b.WriteString(strings.ToLower(c.Name))
		b.WriteByte(' ')
		b.WriteString(c.Type.DDL())
		b.WriteByte(',')
	}
	return b.String()
}

// ensureView brings view in line with the table ts: created when absent,
// redefined when its columns or query are not the table's. It remembers
// the columns it defined the view over, so a Reconcile with nothing
// changed costs nothing. A failure is logged with what to do, never
// returned: the view is the readers' convenience, and the rows keep flowing
// into the table; it is tried again at a later Reconcile, viewRetry after
// the failure. It returns the statements it executed.
func (u *UC) ensureView(ctx context.Context, view string, ts *TableState) int {
	sig := columnsSignature(ts.Columns)
	u.mu.Lock()
	st := u.views[view]
	u.mu.Unlock()
	if st.columns == sig || (!st.failedAt.IsZero() && time.Since(st.failedAt) < viewRetry) {
		return 0
	}
	n, err := u.defineView(ctx, view, ts, sig)
	u.mu.Lock()
	if err != nil {
		u.views[view] = viewState{failedAt: time.Now()}
	} else {
		u.views[view] = viewState{columns: sig}
	}
	u.mu.Unlock()
	if err != nil {
		u.log.Error("catalog: the deduplicating view is not defined; the rows keep flowing into the table, and the view is tried again at the next reconcile after "+viewRetry.String(),
			"view", view, "table", ts.FullName, "error", err, "hint", DedupViewGrants)
	}
	return n
}

// defineView describes view and creates or redefines it over ts.
func (u *UC) defineView(ctx context.Context, view string, ts *TableState, sig string) (int, error) {
	query, err := DedupViewQuery(ts.FullName)
	if err != nil {
		return 0, err
	}
	live, err := u.Describe(ctx, view)
	if err != nil {
		return 0, err
	}
	n := 0
	switch {
	case live == nil:
		stmt, err := DedupViewSQL(view, ts.FullName, true)
		if err != nil {
			return 0, err
		}
		u.log.Info("catalog: creating the deduplicating view", "view", view, "table", ts.FullName, "sql", stmt)
		err = u.Execute(ctx, stmt)
		n++
		if !IsAlreadyExists(err) {
			return n, err
		}
		// Another writer created it meanwhile: redefine it over our columns.
	case !strings.EqualFold(live.TableType, "VIEW"):
		return 0, fmt.Errorf("%s is a %s, not a view: name another view (catalog.dedup_view_name) or drop that object", view, live.TableType)
	case columnsSignature(live.Columns) == sig && strings.TrimSpace(live.ViewDefinition) == query:
		u.log.Debug("catalog: deduplicating view up to date", "view", view, "table", ts.FullName)
		return 0, nil
	}
	stmt, err := DedupViewSQL(view, ts.FullName, false)
	if err != nil {
		return n, err
	}
	u.log.Info("catalog: redefining the deduplicating view over the table's columns", "view", view, "table", ts.FullName, "sql", stmt)
	return n + 1, u.Execute(ctx, stmt)
}
