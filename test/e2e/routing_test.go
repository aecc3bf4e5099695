package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

// One pipeline routes generated rows by a metadata field into three tables
// it provisions; each table holds exactly its rows.
func TestRoutingIntoThreeProvisionedTables(t *testing.T) {
	t.Parallel()
	srv := startEmulator(t, emulator.Faults{})
	const n = 300
	b := service.NewStreamBuilder()
	require.NoError(t, b.SetLoggerYAML("level: warn"))
	require.NoError(t, b.AddInputYAML(fmt.Sprintf(`generate:
  count: %d
  interval: ""
  batch_size: 50
  mapping: |
    root.id = counter() - 1
    root.msg = "row " + (counter() - 1).string()
    meta region = ["eu", "us", "ap"].index((counter() - 1) %% 3)
`, n)))
	require.NoError(t, b.AddOutputYAML(outputYAML(srv, `main.routed.events_${! meta("region") }`, "catalog:\n  provision: true\n  warehouse_id: wh-e2e\n")))
	s, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, s.Run(ctx), "the pipeline ends when generate is done")

	regions := []string{"eu", "us", "ap"}
	total := 0
	for r, region := range regions {
		table := "main.routed.events_" + region
		rows := rowsByID(t, srv, table)
		total += len(rows)
		for id := range rows {
			assert.Equal(t, r, int(id)%3, "row %d is in %s", id, table)
		}
		assert.Len(t, rows, n/3, "table %s holds exactly its rows", table)
	}
	assert.Equal(t, n, total)
}

// With a dead_letter table, an HTTP gateway request with a good and a bad
// row lands the good row, dead-letters the bad one with its error, and is
// answered 200 once: a client retrying until 200 duplicates nothing.
func TestDeadLetterTableGatewayAnswers200Once(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{}, eventsTable+":"+eventsCols)
	addr := freeAddr(t)
	b := service.NewStreamBuilder()
	require.NoError(t, b.SetLoggerYAML("level: warn"))
	require.NoError(t, b.AddInputYAML(fmt.Sprintf(`http_server:
  address: %s
  path: /ingest
  sync_response:
    status: "200"
processors:
  - unarchive:
      format: json_array
`, addr)))
	require.NoError(t, b.AddOutputYAML(outputYAML(srv, eventsTable, "batching:\n  count: 0\ndead_letter:\n  table: main.default.events_dlq\ncatalog:\n  provision: true\n  warehouse_id: wh-e2e\n")))
	_, stop := startStream(t, b)
	defer func() { _ = stop() }()

	body := `[{"id":1,"msg":"good"},{"id":"two","msg":"bad id"}]`
	var resp *http.Response
	require.Eventually(t, func() bool {
		r, err := http.Post("http://"+addr+"/ingest", "application/json", bytes.NewBufferString(body))
		if err != nil {
			return false
		}
		resp = r
		return true
	}, 10*time.Second, 50*time.Millisecond)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "one request, answered 200")

	rows := rowsByID(t, srv, eventsTable)
	assert.Len(t, rows, 1)
	assert.Contains(t, rows, int64(1))
	dl, err := srv.TableRows("main.default.events_dlq", 0)
	require.NoError(t, err)
	require.Len(t, dl, 1)
	assert.Equal(t, eventsTable, dl[0]["source_table"])
	assert.Equal(t, "id", dl[0]["column_name"])
	idx, _ := asInt64(dl[0]["message_index"])
	assert.Equal(t, int64(1), idx)
	var payload map[string]any
	require.NoError(t, json.Unmarshal([]byte(fmt.Sprint(dl[0]["payload"])), &payload))
	assert.Equal(t, "two", payload["id"])
	assert.True(t, strings.Contains(fmt.Sprint(dl[0]["error"]), "BIGINT"), "the error says why: %v", dl[0]["error"])
}

// A wrong secret read from the environment backs off with a message that
// names the credential and where it came from; once the environment holds
// the rotated secret, the output picks it up on reconnect and the rows
// land, with no restart.
func TestRotatedSecretFromEnvironmentHeals(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{}, eventsTable+":"+eventsCols)
	t.Setenv("DATABRICKS_CLIENT_ID", emulator.DefaultClientID)
	t.Setenv("DATABRICKS_CLIENT_SECRET", "an-expired-s3cret")
	out := fmt.Sprintf("zerobus:\n  endpoint: %s\n  workspace_url: %s\n  table: %s\n", srv.GRPCURL(), srv.HTTPURL(), eventsTable)
	b := service.NewStreamBuilder()
	logs := &syncBuffer{}
	b.SetLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	require.NoError(t, b.AddOutputYAML(out))
	produce, err := b.AddBatchProducerFunc()
	require.NoError(t, err)
	ctx, stop := startStream(t, b)
	defer func() { _ = stop() }()

	done := make(chan error, 1)
	go func() {
		done <- produce(ctx, service.MessageBatch{service.NewMessage([]byte(`{"id":1,"msg":"after rotation"}`))})
	}()
	eventually(t, 10*time.Second, 50*time.Millisecond, "the refusal never named where the secret came from", func() (bool, string) {
		l := logs.String()
		return strings.Contains(l, "DATABRICKS_CLIENT_SECRET"), l
	})
	assert.NotContains(t, logs.String(), "an-expired-s3cret", "the secret is never logged")
	select {
	case err := <-done:
		t.Fatalf("the write returned before the secret was fixed: %v", err)
	default:
	}
	require.NoError(t, os.Setenv("DATABRICKS_CLIENT_SECRET", emulator.DefaultClientSecret))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatalf("no write after the secret was rotated: %s", logs.String())
	}
	assert.Contains(t, rowsByID(t, srv, eventsTable), int64(1))
}

// A pipeline started while its writes are refused (the principal lacks
// MODIFY on the table) for 10 s logs what to grant, backs off, and lands all
// its rows once the grant is given, with no restart.
func TestWritesRefusedForTenSecondsLandAfterTheGrant(t *testing.T) {
	t.Parallel()
	p := emulator.DefaultClientID
	srv, err := emulator.Start(emulator.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(),
		Tables: []string{eventsTable + ":" + eventsCols},
		Grants: emulator.GrantsConfig{Strict: true, Grants: []emulator.Grant{
			{Principal: p, SecurableType: "CATALOG", FullName: "main", Privileges: []string{"USE CATALOG"}},
			{Principal: p, SecurableType: "SCHEMA", FullName: "main.default", Privileges: []string{"USE SCHEMA"}},
			{Principal: p, SecurableType: "TABLE", FullName: eventsTable, Privileges: []string{"SELECT"}},
		}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	b := service.NewStreamBuilder()
	logs := &syncBuffer{}
	b.SetLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	require.NoError(t, b.AddOutputYAML(outputYAML(srv, eventsTable, "batching:\n  count: 0\n")))
	produce, err := b.AddBatchProducerFunc()
	require.NoError(t, err)
	ctx, stop := startStream(t, b)
	defer func() { _ = stop() }()

	began := time.Now()
	done := make(chan error, 1)
	go func() {
		var batch service.MessageBatch
		for id := range 100 {
			batch = append(batch, service.NewMessage([]byte(fmt.Sprintf(`{"id":%d,"msg":"m"}`, id))))
		}
		done <- produce(ctx, batch)
	}()
	eventually(t, 10*time.Second, 50*time.Millisecond, "the refusal never said which grant to run", func() (bool, string) {
		l := logs.String()
		return strings.Contains(l, "MODIFY") && strings.Contains(l, "GRANT SELECT, MODIFY ON TABLE"), l
	})
	time.Sleep(time.Until(began.Add(10 * time.Second)))
	select {
	case err := <-done:
		t.Fatalf("the write returned while refused: %v", err)
	default:
	}
	require.NoError(t, srv.UpdateGrants(emulator.GrantChange{Principal: p, SecurableType: "TABLE", FullName: eventsTable, Add: []string{"MODIFY"}}))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("rows did not land after the grant: %s", logs.String())
	}
	assert.Len(t, rowsByID(t, srv, eventsTable), 100)
	t.Logf("refused for %s, rows landed %s after the start", 10*time.Second, time.Since(began).Round(time.Millisecond))
}

// Routing into far more tables than max_open_tables (60 tables, 4 open,
// provisioning on, 100-row batches each spanning the 60 tables, many
// batches in flight): every row lands once, in its table; the evictions
// are counted in zerobus_table_evictions_total, and one warning names
// max_open_tables, the distinct tables and the eviction rate.
func TestRoutingManyTablesFewOpenLandsEveryRowOnce(t *testing.T) {
	t.Parallel()
	srv := startEmulator(t, emulator.Faults{})
	const n, tables = 3000, 60
	mux := http.NewServeMux()
	b := service.NewStreamBuilder()
	b.SetHTTPMux(mux)
	logs := &syncBuffer{}
	b.SetLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	require.NoError(t, b.SetMetricsYAML("prometheus:\n  add_go_metrics: false\n  add_process_metrics: false\n"))
	require.NoError(t, b.AddInputYAML(fmt.Sprintf(`generate:
  count: %d
  interval: ""
  batch_size: 100
  mapping: |
    root.id = counter() - 1
    root.msg = "row " + (counter() - 1).string()
    meta t = ((counter() - 1) %% %d).string()
`, n, tables)))
	require.NoError(t, b.AddOutputYAML(outputYAML(srv, `main.fewopen.t${! meta("t") }`,
		"max_open_tables: 4\nbatching:\n  count: 0\ncatalog:\n  provision: true\n  warehouse_id: wh-e2e\n")))
	s, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	require.NoError(t, s.Run(ctx), "the pipeline ends when generate is done:\n%s", logs.String())

	total := 0
	for k := range tables {
		table := fmt.Sprintf("main.fewopen.t%d", k)
		got, err := srv.TableRows(table, 0)
		require.NoError(t, err)
		seen := map[int64]int{}
		for _, r := range got {
			id, ok := asInt64(r["id"])
			require.True(t, ok, "row without an integer id in %s: %v", table, r)
			seen[id]++
			assert.Equal(t, k, int(id)%tables, "row %d is in %s", id, table)
		}
		for id, c := range seen {
			assert.Equal(t, 1, c, "row %d of %s landed once", id, table)
		}
		assert.Len(t, seen, n/tables, "table %s holds every one of its rows", table)
		total += len(seen)
	}
	assert.Equal(t, n, total)

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	evictions, series := promSum(rec.Body.String(), "zerobus_table_evictions_total")
	assert.Equal(t, 1, series, "one output-wide series:\n%s", rec.Body.String())
	assert.Greater(t, evictions, float64(tables), "batches spanning 60 tables through 4 writers evict")
	l := logs.String()
	assert.Equal(t, 1, strings.Count(l, "table writers are evicted at"), "one thrash warning:\n%s", l)
	assert.Contains(t, l, "max_open_tables is 4")
	assert.Contains(t, l, "60 distinct tables were written in the last minute")
}
