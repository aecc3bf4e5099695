package catalog

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// TestDedupViewSQL pins the statement text: the emulator's tests and the
// DuckDB check of test/e2e run exactly this query.
func TestDedupViewSQL(t *testing.T) {
	q, err := DedupViewQuery("main.default.t")
	require.NoError(t, err)
	assert.Equal(t, "SELECT * FROM `main`.`default`.`t` QUALIFY `_zb_source` IS NULL OR `_zb_offset` IS NULL OR row_number() OVER (PARTITION BY `_zb_source`, `_zb_offset` ORDER BY `_zb_emit_ts`) = 1", q)
	c, err := DedupViewSQL("main.default.t_dedup", "main.default.t", true)
	require.NoError(t, err)
	assert.Equal(t, "CREATE VIEW `main`.`default`.`t_dedup` AS "+q, c)
	a, err := DedupViewSQL("main.default.t_dedup", "main.default.t", false)
	require.NoError(t, err)
	assert.Equal(t, "ALTER VIEW `main`.`default`.`t_dedup` AS "+q, a)
	_, err = DedupViewSQL("not a name", "main.default.t", true)
	assert.Error(t, err)
	assert.Equal(t, "main.default.t_dedup", DefaultDedupView("main.default.t"))
}

// TestUCDedupView: the view is created with the table, costs nothing while
// the table is unchanged (in this process or a fresh one), is redefined by
// ALTER VIEW when the table gains a column, and is refused, without failing
// the reconcile, when its name is a table's.
func TestUCDedupView(t *testing.T) {
	e := newEmulated(t, workspace.Options{IcebergLag: -1})
	ctx := context.Background()
	cov := []typemap.Column{
		{Name: "_zb_source", Type: typemap.Primitive(typemap.String), Nullable: true},
		{Name: "_zb_offset", Type: typemap.Primitive(typemap.Long), Nullable: true},
	}
	desired := func(extra ...arrow.Field) DesiredTable {
		d, err := DesiredFromArrow(tbl, eventsSchema(extra...), append([]typemap.Column{reservedEmitTS}, cov...)...)
		require.NoError(t, err)
		d.DedupView = DefaultDedupView(tbl)
		return d
	}
	out, err := e.uc.Reconcile(ctx, desired())
	require.NoError(t, err)
	assert.Equal(t, 2, out.Statements, "CREATE TABLE + CREATE VIEW")
	assert.Equal(t, 1, e.ws.Stats().ByKind[workspace.KindCreateView])
	v, ok := e.ws.View(DefaultDedupView(tbl))
	require.True(t, ok)
	assert.Len(t, v.Columns, len(out.State.Columns))
	q, _ := DedupViewQuery(tbl)
	assert.Equal(t, q, v.Definition)

	before := e.statements()
	for _, c := range []*UC{e.uc, e.client(t)} {
		out, err = c.Reconcile(ctx, desired())
		require.NoError(t, err)
		assert.Zero(t, out.Statements)
	}
	assert.Equal(t, before, e.statements(), "an up-to-date view costs no statement, even to a fresh process")

	out, err = e.uc.Reconcile(ctx, desired(arrow.Field{Name: "email", Type: arrow.BinaryTypes.String, Nullable: true}))
	require.NoError(t, err)
	assert.Equal(t, 1, e.ws.Stats().ByKind[workspace.KindAlterViewAs])
	v2, _ := e.ws.View(DefaultDedupView(tbl))
	assert.Equal(t, v.TableID, v2.TableID, "redefined in place: its grants stay")
	assert.Len(t, v2.Columns, len(v.Columns)+1)
	state, err := e.client(t).Describe(ctx, DefaultDedupView(tbl))
	require.NoError(t, err)
	assert.Equal(t, "VIEW", state.TableType)
	_, has := state.Column("email")
	assert.True(t, has, "the new column shows in the view")

	// A table under the view's name: logged, the reconcile of the table
	// itself succeeds.
	d := desired()
	d.DedupView = tbl + "_other"
	require.NoError(t, e.uc.Execute(ctx, "CREATE TABLE "+tbl+"_other (a INT)"))
	_, err = e.client(t).Reconcile(ctx, d)
	require.NoError(t, err)
	assert.Zero(t, e.ws.Stats().Failed, "no statement was tried over the table")
}
