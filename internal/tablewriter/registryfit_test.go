package tablewriter

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	cs "github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// qtyOptional is a registry schema with id required and qty optional (v2
// of a schema whose v1 had qty required).
func qtyOptional() cs.Schema {
	return cs.Schema{Name: "order", Type: cs.Object, Children: []cs.Schema{
		{Name: "id", Type: cs.Int64},
		{Name: "qty", Type: cs.Int32, Optional: true},
	}}
}

// qtyRequired is v1 of it: every field required.
func qtyRequired() cs.Schema {
	return cs.Schema{Name: "order", Type: cs.Object, Children: []cs.Schema{
		{Name: "id", Type: cs.Int64},
		{Name: "qty", Type: cs.Int32},
	}}
}

func qtyTable(c *catalogfake.Catalog) { c.Put(testTable, "id BIGINT NOT NULL, qty INT NOT NULL", nil) }

// The fit of a schema making a NOT NULL column's field optional relaxes
// the column with provisioning, and only that one: the required id is left
// NOT NULL, and nothing is added, widened or refused. Without provisioning
// the fit asks nothing (the converter fails the nulls), and a required
// field on a nullable column never asks for NOT NULL.
func TestRegistryFitRelaxesNotNull(t *testing.T) {
	h := newHarness(t, ingestfake.Config{}, registryCfg, qtyTable)
	a := h.w.schema
	s := qtyOptional()
	f := a.fit(a.current(), compileSchema(&s, nil), "schema id 8")
	require.Len(t, f.relax, 1, "%+v", f)
	assert.Equal(t, relaxing{column: "qty", field: "qty", sample: "schema id 8"}, f.relax[0])
	assert.Empty(t, f.add)
	assert.Empty(t, f.widen)
	assert.Empty(t, f.refused)
	assert.Contains(t, describeChanges(nil, nil, f.relax), `dropping NOT NULL on column "qty"`)

	bare := newHarness(t, ingestfake.Config{}, func(c *Config) { c.SchemaMetadata = testSchemaKey }, qtyTable)
	f = bare.w.schema.fit(bare.w.schema.current(), compileSchema(&s, nil), "")
	assert.Empty(t, f.relax, "no provisioning, no DDL")
	assert.Empty(t, f.refused)

	loose := newHarness(t, ingestfake.Config{}, registryCfg, func(c *catalogfake.Catalog) { c.Put(testTable, "id BIGINT, qty INT", nil) })
	req := qtyRequired()
	f = loose.w.schema.fit(loose.w.schema.current(), compileSchema(&req, nil), "")
	assert.Empty(t, f.relax)
	assert.Empty(t, f.add)
	assert.Empty(t, f.refused)
}

// With provisioning, a batch whose schema makes qty optional drops NOT
// NULL on qty before its rows are converted: one reconcile naming qty,
// no row fails (the null lands), rows of the schema that still requires qty
// land beside it, and the next batch asks nothing more. A schema making qty
// required again never puts NOT NULL back.
func TestRegistrySchemaOptionalFieldDropsNotNullBeforeRows(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, registryCfg, qtyTable)
	before := h.cat.ReconcileCount()
	row := func(id int, qty any, s cs.Schema, version int) Row {
		return registryRow(map[string]any{"id": int64(id), "qty": qty}, s, "orders-value", version, 6+version)
	}
	require.Empty(t, h.write(t, []Row{row(1, nil, qtyOptional(), 2), row(2, int32(5), qtyRequired(), 1)}))
	require.Equal(t, before+1, h.cat.ReconcileCount(), "one reconcile")
	d := h.cat.Reconciled()[before]
	assert.Equal(t, []string{"qty"}, d.DropNotNull)
	st, err := h.cat.Describe(context.Background(), testTable)
	require.NoError(t, err)
	qty, _ := st.Column("qty")
	id, _ := st.Column("id")
	assert.True(t, qty.Nullable, "qty dropped NOT NULL")
	assert.False(t, id.Nullable, "id stays NOT NULL")
	sent, _ := submittedColumn(t, h.opener, "qty")
	assert.Equal(t, []string{"<null>", "5"}, sent)

	require.Empty(t, h.write(t, []Row{row(3, nil, qtyOptional(), 2), row(4, int32(6), qtyRequired(), 1)}))
	assert.Equal(t, before+1, h.cat.ReconcileCount(), "relaxed once: nothing more to do")
	st, _ = h.cat.Describe(context.Background(), testTable)
	qty, _ = st.Column("qty")
	assert.True(t, qty.Nullable, "a required field adds no NOT NULL")
}

// Without provisioning the table is left alone: the row carrying null for
// qty fails alone, naming the field and NOT NULL; the others land.
func TestRegistrySchemaOptionalFieldWithoutProvisionFailsNulls(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, func(c *Config) { c.SchemaMetadata = testSchemaKey }, qtyTable)
	before := h.cat.ReconcileCount()
	failed := h.write(t, []Row{
		registryRow(map[string]any{"id": int64(1), "qty": nil}, qtyOptional(), "orders-value", 2, 8),
		registryRow(map[string]any{"id": int64(2), "qty": int32(5)}, qtyOptional(), "orders-value", 2, 8),
	})
	require.Len(t, failed, 1, "%v", failed)
	require.Contains(t, failed, 0)
	msg := failed[0]
	assert.True(t, strings.Contains(msg, "qty") && strings.Contains(msg, "NOT NULL"), msg)
	assert.Equal(t, before, h.cat.ReconcileCount(), "no DDL")
}

// The JSON (inferred) path never relaxes a column: a JSON value declares no
// nullability, so its null for a NOT NULL column fails the row, even with
// provisioning, and nothing asks the catalog to drop NOT NULL.
func TestInferredNullNeverDropsNotNull(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, func(c *Config) { c.Provision = true }, qtyTable)
	failed := h.write(t, rows(`{"id":1,"qty":null}`, `{"id":2,"qty":3}`))
	require.Len(t, failed, 1, "%v", failed)
	assert.Contains(t, failed[0], "qty")
	for _, d := range h.cat.Reconciled() {
		assert.Empty(t, d.DropNotNull)
	}
	st, _ := h.cat.Describe(context.Background(), testTable)
	qty, _ := st.Column("qty")
	assert.False(t, qty.Nullable)
}

// Another writer dropped NOT NULL meanwhile (the writer's snapshot still
// says NOT NULL): the reconcile finds nothing to do, the writer takes the
// table as it is now, and the null lands.
func TestRegistrySchemaDropNotNullAlreadyDoneElsewhere(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, registryCfg, qtyTable)
	h.cat.Put(testTable, "id BIGINT NOT NULL, qty INT", nil) // relaxed by another writer
	before := h.cat.ReconcileCount()
	failed := h.write(t, []Row{registryRow(map[string]any{"id": int64(1), "qty": nil}, qtyOptional(), "orders-value", 2, 8)})
	require.Empty(t, failed)
	sent, _ := submittedColumn(t, h.opener, "qty")
	assert.Equal(t, []string{"<null>"}, sent)
	require.Equal(t, before+1, h.cat.ReconcileCount(), "one look")
	require.True(t, h.w.schema.current().table.Columns[1].Nullable, "the snapshot follows the table")
}
