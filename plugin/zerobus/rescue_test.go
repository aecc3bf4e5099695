package zerobus

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// variantObject reads back a VARIANT value holding an object.
func variantObject(t *testing.T, v any) map[string]any {
	t.Helper()
	if v == nil {
		return nil
	}
	var b []byte
	if s, ok := v.(string); ok {
		b = []byte(s)
	} else {
		var err error
		b, err = json.Marshal(v)
		require.NoError(t, err)
	}
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "%s", b)
	return m
}

// With provisioning, the rescue column is created with the table; a value
// that does not fit its column goes there, and the rest of its row lands.
func TestRescueColumnCreatedAndFilled(t *testing.T) {
	const table = "main.default.orders"
	e := startEmulated(t, table, "catalog:\n  provision: true\n  warehouse_id: wh\nrescue_column: rescued\n")
	var batch service.MessageBatch
	for i := 0; i < 200; i++ {
		qty := "7"
		if i%50 == 0 {
			qty = `"abc"`
		}
		batch = append(batch, service.NewMessage([]byte(`{"id":`+itoa(int64(i))+`,"qty":`+qty+`,"note":"n"}`)))
	}
	require.Empty(t, e.write(t, batch), "no row fails: the misfits are rescued")

	tbl, ok := e.srv.Registry().Get(table)
	require.True(t, ok)
	c, i := tbl.Column("rescued")
	require.GreaterOrEqual(t, i, 0)
	assert.Equal(t, typemap.Variant, c.Type.Kind)
	assert.True(t, c.Nullable)

	rows := e.rows(t, table)
	require.Len(t, rows, 200)
	rescued := 0
	for _, r := range rows {
		id := r["id"].(int64)
		assert.Equal(t, "n", r["note"], "row %d: its other fields land", id)
		if id%50 == 0 {
			rescued++
			assert.Nil(t, r["qty"], "row %d", id)
			assert.Equal(t, map[string]any{"qty": "abc"}, variantObject(t, r["rescued"]), "row %d", id)
			continue
		}
		assert.Equal(t, int64(7), r["qty"])
		assert.Nil(t, r["rescued"], "row %d: nothing to rescue is NULL", id)
	}
	assert.Equal(t, 4, rescued)
}

// Without provisioning, an unknown field and a misfit value of one row go
// into one rescue object; a row failing for another reason still fails. A
// table lacking the column is refused at connect, saying how to add it.
func TestRescueColumnWithoutProvisioning(t *testing.T) {
	const table = "main.default.events"
	e := startEmulated(t, table, "rescue_column: rescued\n", table+":id BIGINT NOT NULL, n INT, rescued VARIANT", "main.default.plain:id BIGINT")
	failed := e.write(t, service.MessageBatch{
		service.NewMessage([]byte(`{"id":1,"n":5000000000,"extra":{"a":[1,2]},"my-x":true}`)),
		service.NewMessage([]byte(`{"id":2,"n":3}`)),
		service.NewMessage([]byte(`{"n":3}`)), // id is NOT NULL: nothing to rescue
	})
	require.Len(t, failed, 1)
	require.Contains(t, failed, 2)
	assert.Contains(t, failed[2].Error(), "NOT NULL")
	byID := map[int64]map[string]any{}
	for _, r := range e.rows(t, table) {
		byID[r["id"].(int64)] = r
	}
	require.Len(t, byID, 2)
	assert.Nil(t, byID[1]["n"])
	assert.Equal(t, map[string]any{"n": float64(5000000000), "extra": map[string]any{"a": []any{float64(1), float64(2)}}, "my-x": true},
		variantObject(t, byID[1]["rescued"]))
	assert.Equal(t, int64(3), int64(byID[2]["n"].(int32)))
	assert.Nil(t, byID[2]["rescued"])

	cfg, err := parseYAML(t, strings.Replace(e.yaml, "table: "+table, "table: main.default.plain", 1))
	require.NoError(t, err)
	o, err := newOutput(cfg, service.MockResources(), deps{})
	require.NoError(t, err)
	defer o.Close(context.Background())
	err = o.Connect(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "lacks the rescue column rescued")
	assert.Contains(t, err.Error(), "ADD COLUMNS (`rescued` VARIANT)")
}

// A message field named like the rescue column is not taken for the rescue
// column: it is rescued under its own name, with the row's other misfits,
// and never overwritten by them.
func TestRescueColumnFieldNamedLikeIt(t *testing.T) {
	const table = "main.default.events"
	e := startEmulated(t, table, "rescue_column: rescued\n", table+":id BIGINT NOT NULL, n INT, rescued VARIANT")
	require.Empty(t, e.write(t, service.MessageBatch{
		service.NewMessage([]byte(`{"id":1,"n":1,"rescued":5}`)),
		service.NewMessage([]byte(`{"id":2,"n":"x","Rescued":"mine"}`)),
		service.NewMessage([]byte(`{"id":3,"n":3}`)),
	}))
	byID := map[int64]map[string]any{}
	for _, r := range e.rows(t, table) {
		byID[r["id"].(int64)] = r
	}
	require.Len(t, byID, 3)
	assert.Equal(t, map[string]any{"rescued": float64(5)}, variantObject(t, byID[1]["rescued"]))
	assert.Equal(t, map[string]any{"n": "x", "Rescued": "mine"}, variantObject(t, byID[2]["rescued"]))
	assert.Nil(t, byID[3]["rescued"])
}

// With provisioning, an existing table gains the rescue column at connect.
func TestRescueColumnAddedToExistingTable(t *testing.T) {
	const table = "main.default.events"
	e := startEmulated(t, table, "catalog:\n  provision: true\n  warehouse_id: wh\nrescue_column: rescued\n", table+":id BIGINT NOT NULL")
	tbl, _ := e.srv.Registry().Get(table)
	c, i := tbl.Column("rescued")
	require.GreaterOrEqual(t, i, 0, "added at connect")
	assert.Equal(t, typemap.Variant, c.Type.Kind)
	failed := e.write(t, service.MessageBatch{service.NewMessage([]byte(`{"id":"x1"}`)), service.NewMessage([]byte(`{"id":2,"more":"m"}`))})
	require.Len(t, failed, 1, "a NOT NULL column's value is never rescued")
	assert.Contains(t, failed[0].Error(), "BIGINT", "the row keeps its own error")
	rows := e.rows(t, table)
	require.Len(t, rows, 1)
	assert.Equal(t, "m", rows[0]["more"], "provisioning adds a column for a new field: nothing to rescue")
	assert.Nil(t, rows[0]["rescued"])
}

// The rescue column must be a name Zerobus writes, outside the output's
// reserved namespace, and cannot go with Iceberg reads (no VARIANT).
func TestRescueColumnValidation(t *testing.T) {
	for y, want := range map[string]string{
		"rescue_column: _zb_rescue\n":                             "reserved _zb_ namespace",
		"rescue_column: rescued\ncatalog:\n  role: primary_raw\n": "needs a VARIANT column",
	} {
		_, err := parseYAML(t, minimalYAML+y)
		require.Error(t, err, y)
		assert.Contains(t, err.Error(), "field rescue_column: ")
		assert.Contains(t, err.Error(), want)
	}
	cfg, err := parseYAML(t, minimalYAML+"rescue_column: rescued\n")
	require.NoError(t, err)
	assert.Contains(t, knobsLine(cfg.knobs(2)), "rescue_column=rescued", "logged at start-up")
}

// A field no column can be made for (an array of arrays: no stream could
// carry it) fails only its rows, saying why; the others land.
func TestUncreatableFieldFailsOnlyItsRows(t *testing.T) {
	const table = "main.default.nested"
	e := startEmulated(t, table, "catalog:\n  provision: true\n  warehouse_id: wh\n")
	failed := e.write(t, service.MessageBatch{
		service.NewMessage([]byte(`{"id":1,"grid":[[1,2],[3]]}`)),
		service.NewMessage([]byte(`{"id":2,"my-field":"x"}`)),
	})
	require.Len(t, failed, 1)
	require.Contains(t, failed, 0)
	assert.Contains(t, failed[0].Error(), `column "grid": unknown field`)
	assert.Contains(t, failed[0].Error(), "array of arrays")
	rows := e.rows(t, table)
	require.Len(t, rows, 1)
	assert.Equal(t, "x", rows[0]["my_field"])
}
