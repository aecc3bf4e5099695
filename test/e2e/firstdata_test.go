package e2e

// A new user's first real data meeting the table: the three configurations
// of issue 18 (dead letters under provisioning without payloads, mixed types
// in a new table's first batch, field names that need quoting), run through
// a generate input, whose nacked rows Benthos retries, so a good row sent
// twice would show up as a duplicate.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

// firstDataProvision is the catalog block of these runs.
const firstDataProvision = "catalog:\n  provision: true\n  warehouse_id: wh-e2e\n"

// runGenerated runs a pipeline of one generate batch of rows messages made
// by mapping into the zerobus output (extra under its key) until it has
// written them all or the bound passes, and returns whether it finished.
func runGenerated(t *testing.T, srv *emulator.Server, table string, rows int, mapping, extra string, bound time.Duration) bool {
	t.Helper()
	b := service.NewStreamBuilder()
	require.NoError(t, b.SetLoggerYAML("level: warn"))
	require.NoError(t, b.AddInputYAML(fmt.Sprintf("generate:\n  count: %d\n  interval: \"\"\n  batch_size: %d\n  mapping: |\n%s\n", rows, rows, indentBy(mapping, 4))))
	require.NoError(t, b.AddOutputYAML(outputYAML(srv, table, extra)))
	s, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	err = s.Run(ctx)
	if err != nil {
		_ = s.StopWithin(5 * time.Second)
	}
	return err == nil
}

// tableRows reads back every stored row of table (none when it is absent).
func tableRows(t *testing.T, srv *emulator.Server, table string) []map[string]any {
	t.Helper()
	if _, ok := srv.Registry().Get(table); !ok {
		return nil
	}
	rows, err := srv.TableRows(table, 0)
	require.NoError(t, err)
	return rows
}

// distinctIDs counts the distinct integer ids of rows.
func distinctIDs(rows []map[string]any) int {
	ids := map[int64]bool{}
	for _, r := range rows {
		if id, ok := asInt64(r["id"]); ok {
			ids[id] = true
		}
	}
	return len(ids)
}

// Dead letters without payloads under provisioning: the dead-letter table the
// output creates admits them (payload NULL), so the 20 bad rows of 200 land
// there and the 180 good rows land once each.
func TestFirstDataDeadLettersWithoutPayload(t *testing.T) {
	const table, dlq = "main.default.events", "main.default.events_dlq"
	srv := startEmulator(t, emulator.Faults{}, table+":id BIGINT NOT NULL, msg STRING")
	done := runGenerated(t, srv, table, 200, `let n = counter()
root.id = $n
root.msg = if $n % 10 == 0 { 5 } else { "ok" }`, firstDataProvision+"dead_letter:\n  table: "+dlq+"\n  include_payload: false\n", 30*time.Second)

	got, dead := tableRows(t, srv, table), tableRows(t, srv, dlq)
	t.Logf("target rows %d (distinct ids %d), dead letters %d, finished %v", len(got), distinctIDs(got), len(dead), done)
	require.True(t, done, "the pipeline wrote every message (good rows to the table, bad ones dead-lettered)")
	assert.Len(t, got, 180, "each good row lands exactly once")
	assert.Equal(t, 180, distinctIDs(got))
	require.Len(t, dead, 20)
	for _, d := range dead {
		assert.Nil(t, d["payload"], "include_payload false: no payload")
		assert.Equal(t, "msg", d["column_name"])
		assert.Equal(t, table, d["source_table"])
	}
}

// Mixed types in a new table's first batch: qty is "abc" in 4 of 200 rows.
// The column is created (the majority type, BIGINT), the 196 good rows land
// and the 4 others are dead letters naming qty.
func TestFirstDataMixedTypes(t *testing.T) {
	const table, dlq = "main.default.orders", "main.default.orders_dlq"
	srv := startEmulator(t, emulator.Faults{})
	done := runGenerated(t, srv, table, 200, `let n = counter()
root.id = $n
root.qty = if $n % 50 == 0 { "abc" } else { $n }`, firstDataProvision+"dead_letter:\n  table: "+dlq+"\n", 30*time.Second)

	got, dead := tableRows(t, srv, table), tableRows(t, srv, dlq)
	t.Logf("target rows %d (distinct ids %d), dead letters %d, finished %v", len(got), distinctIDs(got), len(dead), done)
	tbl, ok := srv.Registry().Get(table)
	require.True(t, ok)
	_, qty := tbl.Column("qty")
	require.GreaterOrEqual(t, qty, 0, "the conflicting field still gets its column")
	assert.Equal(t, "bigint", tbl.Columns[qty].Type.Text())
	require.True(t, done)
	assert.Len(t, got, 196)
	assert.Equal(t, 196, distinctIDs(got))
	for _, r := range got {
		id, _ := asInt64(r["id"])
		q, ok := asInt64(r["qty"])
		assert.True(t, ok && q == id, "row %d qty %v", id, r["qty"])
	}
	require.Len(t, dead, 4)
	for _, d := range dead {
		assert.Equal(t, "qty", d["column_name"])
		assert.Contains(t, d["payload"], `"abc"`)
	}
}

// A field name that needs quoting lands in the column created for it (by
// the one column-name rule), and so does a hostile one.
func TestFirstDataFieldNamesNeedingQuotes(t *testing.T) {
	const table, dlq = "main.default.quoted", "main.default.quoted_dlq"
	srv := startEmulator(t, emulator.Faults{})
	done := runGenerated(t, srv, table, 100, "root = {\"id\": counter(), \"my-field\": 2, \"a`b); DROP TABLE main.default.quoted; --\": \"h\"}",
		firstDataProvision+"dead_letter:\n  table: "+dlq+"\n", 30*time.Second)

	got, dead := tableRows(t, srv, table), tableRows(t, srv, dlq)
	t.Logf("target rows %d (distinct ids %d), dead letters %d, finished %v", len(got), distinctIDs(got), len(dead), done)
	require.True(t, done)
	assert.Empty(t, dead)
	require.Len(t, got, 100)
	assert.Equal(t, 100, distinctIDs(got))
	for _, r := range got {
		v, _ := asInt64(r["my_field"])
		assert.Equal(t, int64(2), v, "my-field lands in my_field: %v", r)
		assert.Equal(t, "h", r["a_b___DROP_TABLE_main_default_quoted____"], "the hostile name lands in its column: %v", r)
	}
}

// The rescue_column example: every row lands, the ones whose qty is not a
// number with qty NULL and {"qty": "n/a"} in the rescue column.
func TestBinaryExampleRescueColumn(t *testing.T) {
	t.Parallel()
	const table = "main.bronze.orders_rescued"
	httpURL, grpcURL, _ := startEmulatorProcess(t)
	runExample(t, httpURL, grpcURL, "rescue_column.yaml", "RESCUE_COUNT=1000")

	rows := readRows(t, httpURL, table)
	require.Len(t, rows, 1000)
	rescued := 0
	for _, r := range rows {
		id := int64(r["order_id"].(float64))
		if id%25 != 0 {
			assert.Nil(t, r["rescued"], "order %d", id)
			continue
		}
		rescued++
		assert.Nil(t, r["qty"], "order %d", id)
		assert.Equal(t, map[string]any{"qty": "n/a"}, r["rescued"], "order %d", id)
	}
	assert.Equal(t, 40, rescued)
}
