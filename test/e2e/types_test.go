package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// A pipeline writes MAP<STRING,BIGINT>, VARIANT and nested STRUCT columns to
// the emulator, which checks the wire forms exactly as the service does
// (MAP as entries{keys,values}, VARIANT as the binary struct), and reads
// them back equal.
func TestMapVariantStructRoundTrip(t *testing.T) {
	const table = "main.default.complex"
	srv := startEmulator(t, emulator.Faults{},
		table+":id BIGINT NOT NULL, attrs MAP<STRING,BIGINT>, doc VARIANT, addr STRUCT<street: STRING, zip: INT, geo: STRUCT<lat: DOUBLE, lon: DOUBLE>>")
	produce, ctx, stop := startProducer(t, newStream(t, outputYAML(srv, table, "batching:\n  count: 10\n  period: 20ms\n")))

	docs := []string{
		`{"kind":"order","items":[1,2,3],"total":12.5,"nested":{"ok":true,"note":null}}`,
		`[1,"two",{"three":3}]`,
		`"just a string"`,
		`42`,
		`{"big":9007199254740993,"unicode":"ünïcode ✓"}`,
	}
	var batch service.MessageBatch
	want := map[int64]map[string]any{}
	for i := range 25 {
		id := int64(i)
		row := map[string]any{
			"id":    id,
			"attrs": map[string]any{"a": id, "b": id * 1000},
			"doc":   json.RawMessage(docs[i%len(docs)]),
			"addr":  map[string]any{"street": fmt.Sprintf("%d Main St", i), "zip": 10000 + i, "geo": map[string]any{"lat": 52.5 + float64(i)/100, "lon": 13.4}},
		}
		body, err := json.Marshal(row)
		require.NoError(t, err)
		batch = append(batch, service.NewMessage(body))
		var back map[string]any
		require.NoError(t, json.Unmarshal(body, &back))
		want[id] = back
	}
	require.NoError(t, produce(ctx, batch))

	got := rowsByID(t, srv, table)
	require.Len(t, got, len(want))
	for id, w := range want {
		g := got[id]
		require.NotNil(t, g, "row %d", id)
		assert.JSONEq(t, canon(t, w["attrs"]), canon(t, g["attrs"]), "row %d attrs", id)
		assert.JSONEq(t, canon(t, w["doc"]), canon(t, g["doc"]), "row %d doc", id)
		assert.JSONEq(t, canon(t, w["addr"]), canon(t, g["addr"]), "row %d addr", id)
	}
	require.NoError(t, stop())
}

// canon renders a read-back value as JSON: a string holding JSON (how a
// VARIANT may be read back) is taken as that JSON.
func canon(t *testing.T, v any) string {
	t.Helper()
	if s, ok := v.(string); ok && json.Valid([]byte(s)) && (strings.HasPrefix(s, "{") || strings.HasPrefix(s, "[")) {
		return s
	}
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// A table with a column the service cannot ingest (an ARRAY of MAPs) is
// refused at Connect, with a message naming the column, before any row.
func TestArrayOfMapRefusedAtConnect(t *testing.T) {
	t.Parallel()
	const table = "main.default.arrmap"
	srv := startEmulator(t, emulator.Faults{})
	// Unity Catalog creates such a table (DDL allows it); only the stream
	// open is refused.
	cols, err := typemap.ParseColumns("id BIGINT NOT NULL, xs ARRAY<MAP<STRING,BIGINT>>")
	require.NoError(t, err)
	_, err = srv.Registry().Create(workspace.Table{FullName: table, TableType: "MANAGED", Columns: cols})
	require.NoError(t, err)
	b := newStream(t, outputYAML(srv, table, ""))
	logs := &syncBuffer{}
	b.SetLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelError})))
	produce, ctx, stop := startProducer(t, b)
	defer func() { _ = stop() }()
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err = produce(pctx, service.MessageBatch{service.NewMessage([]byte(`{"id":1}`))})
	require.Error(t, err, "nothing can be written to such a table")
	if !assert.Eventually(t, func() bool {
		l := logs.String()
		return strings.Contains(l, "Failed to connect") && strings.Contains(l, `column \"xs\"`)
	}, 15*time.Second, 20*time.Millisecond) {
		t.Fatalf("the connect error never named the column; logs now: %s", logs.String())
	}
}
