package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

const exactTable = "main.default.exact"

func TestRowsLandExactlyAsSent(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{},
		exactTable+":id BIGINT NOT NULL, msg STRING, score DOUBLE, ok BOOLEAN, ts TIMESTAMP, tags ARRAY<STRING>")

	produce, ctx, stop := startProducer(t, newStream(t, outputYAML(srv, exactTable, "max_in_flight: 8\nbatching:\n  count: 37\n  period: 20ms\n")))

	const batches, perBatch = 20, 50
	want := map[int64]map[string]any{}
	var wg sync.WaitGroup
	for bi := 0; bi < batches; bi++ {
		var batch service.MessageBatch
		for j := 0; j < perBatch; j++ {
			id := int64(bi*perBatch + j)
			row := map[string]any{
				"id":    id,
				"msg":   fmt.Sprintf("row %d with ünïcode and \"quotes\"", id),
				"score": float64(id) / 4,
				"ok":    id%2 == 0,
				"ts":    time.Date(2026, 1, 2, 3, 4, 5, int(id)*1000, time.UTC).Format(time.RFC3339Nano),
				"tags":  []any{"a", fmt.Sprint(id)},
			}
			if id%10 == 0 {
				row["msg"] = nil // nullable column, explicit null
			}
			body, err := json.Marshal(row)
			require.NoError(t, err)
			batch = append(batch, service.NewMessage(body))
			want[id] = row
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.NoError(t, produce(ctx, batch))
		}()
	}
	wg.Wait()

	// Every producer call returned nil, so every row must already be
	// durable: read back without waiting.
	got := rowsByID(t, srv, exactTable)
	require.Len(t, got, batches*perBatch)
	for id, w := range want {
		g := got[id]
		require.NotNil(t, g, "row %d missing", id)
		assert.Equal(t, w["msg"], g["msg"], "row %d msg", id)
		assert.Equal(t, w["score"], toFloat(g["score"]), "row %d score", id)
		assert.Equal(t, w["ok"], g["ok"], "row %d ok", id)
		wantTS, _ := time.Parse(time.RFC3339Nano, w["ts"].(string))
		gotTS, err := time.Parse(time.RFC3339Nano, fmt.Sprint(g["ts"]))
		require.NoError(t, err, "row %d ts %v", id, g["ts"])
		assert.True(t, wantTS.Equal(gotTS), "row %d ts: want %s got %s", id, wantTS, gotTS)
		assert.Equal(t, w["tags"], g["tags"], "row %d tags", id)
	}
	require.NoError(t, stop())
}

func toFloat(v any) any {
	switch x := v.(type) {
	case float32:
		return float64(x)
	case int64:
		return float64(x)
	case int:
		return float64(x)
	}
	return v
}

// freeAddr returns a loopback address with a port free at the time of the
// call.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	addr := l.Addr().String()
	require.NoError(tb, l.Close())
	return addr
}

func TestHTTPGatewayAnswersOnlyAfterDurable(t *testing.T) {
	t.Parallel()
	const ackLatency = 300 * time.Millisecond
	srv := startEmulator(t, emulator.Faults{AckLatency: ackLatency}, eventsTable+":"+eventsCols)
	addr := freeAddr(t)

	b := service.NewStreamBuilder()
	require.NoError(t, b.SetLoggerYAML("level: warn"))
	require.NoError(t, b.SetYAML(fmt.Sprintf(`
http:
  enabled: false
input:
  http_server:
    address: %s
    path: /ingest
    allowed_verbs: [ POST ]
    timeout: 30s
    sync_response:
      status: "200"
  processors:
    - mapping: 'root = if this.type() == "array" { this } else { [ this ] }'
    - unarchive:
        format: json_array
output:
  %s
`, addr, strings.ReplaceAll(outputYAML(srv, eventsTable, "batching:\n  count: 100\n  period: 5ms\n"), "\n", "\n  "))))
	startStream(t, b) // stopped by the test's cleanup

	url := "http://" + addr + "/ingest"
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)

	for i := int64(1); i <= 5; i++ {
		body := fmt.Sprintf(`[{"id":%d,"msg":"post %d","level":"info","ts":"2026-01-01T00:00:00Z"},{"id":%d,"msg":"post %d b"}]`, i, i, 1000+i, i)
		start := time.Now()
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		elapsed := time.Since(start)
		require.Equal(t, http.StatusOK, resp.StatusCode)

		// At the moment the 200 arrives both rows must be readable.
		got := rowsByID(t, srv, eventsTable)
		assert.Contains(t, got, i, "row %d not readable when its 200 arrived", i)
		assert.Contains(t, got, 1000+i, "row %d not readable when its 200 arrived", 1000+i)
		assert.GreaterOrEqual(t, elapsed, ackLatency, "the 200 cannot precede the durable ack")
	}

	// A row that does not fit is refused, naming the column; nothing lands.
	resp, err := http.Post(url, "application/json", strings.NewReader(`{"id":"not a number"}`))
	require.NoError(t, err)
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.NotEqual(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(msg), "id")
}

func TestFallbackReceivesBadRowsWithError(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{}, eventsTable+":"+eventsCols)
	dead := writeWithFallback(t, srv, eventsTable, "", service.MessageBatch{
		service.NewMessage([]byte(`{"id":1,"msg":"good"}`)),
		service.NewMessage([]byte(`{"id":2,"msg":"bad","colour":"red"}`)),
		service.NewMessage([]byte(`{"id":3,"msg":"good too","level":"warn"}`)),
		service.NewMessage([]byte(`{"msg":"missing id"}`)),
		service.NewMessage([]byte(`{"id":99999999999999999999}`)),
	})

	got := rowsByID(t, srv, eventsTable)
	assert.Len(t, got, 2)
	assert.Contains(t, got, int64(1))
	assert.Contains(t, got, int64(3))

	require.Len(t, dead, 3)
	byMsg := map[string]string{}
	for _, d := range dead {
		byMsg[fmt.Sprint(d.Row["msg"])] = d.Error
	}
	assert.Contains(t, byMsg["bad"], "colour")
	assert.Contains(t, byMsg["bad"], "message 1")
	assert.Contains(t, byMsg["missing id"], "id")
	assert.Contains(t, byMsg["<nil>"], "id", "the out-of-range id is named")
}

func TestProvisioningCreatesAndEvolves(t *testing.T) {
	t.Parallel()
	srv := startEmulator(t, emulator.Faults{})
	const table = "main.bronze.orders"

	produce, ctx, stop := startProducer(t, newStream(t, outputYAML(srv, table, `catalog:
  provision: true
  warehouse_id: wh-e2e
  column_descriptions:
    order_id: Order number.
`)))

	_, exists := srv.Registry().Get(table)
	require.False(t, exists)

	require.NoError(t, produce(ctx, service.MessageBatch{
		service.NewMessage([]byte(`{"order_id":1,"customer":"c1","amount":12.5}`)),
		service.NewMessage([]byte(`{"order_id":2,"customer":"c2","amount":3}`)),
	}))
	tbl, exists := srv.Registry().Get(table)
	require.True(t, exists, "the absent table is created from the first batch")
	cols := map[string]typemap.Column{}
	for _, c := range tbl.Columns {
		cols[c.Name] = c
	}
	assert.Equal(t, typemap.Long, cols["order_id"].Type.Kind)
	assert.Equal(t, typemap.String, cols["customer"].Type.Kind)
	assert.Equal(t, typemap.Double, cols["amount"].Type.Kind)
	assert.Equal(t, "Order number.", stripManaged(cols["order_id"].Comment))
	_, hasRegion := cols["region"]
	assert.False(t, hasRegion)

	require.NoError(t, produce(ctx, service.MessageBatch{
		service.NewMessage([]byte(`{"order_id":3,"customer":"c3","amount":1,"region":"eu-west"}`)),
	}))
	tbl, _ = srv.Registry().Get(table)
	var region *typemap.Column
	for i := range tbl.Columns {
		if tbl.Columns[i].Name == "region" {
			region = &tbl.Columns[i]
		}
	}
	require.NotNil(t, region, "a new field adds its column")
	assert.Equal(t, typemap.String, region.Type.Kind)

	rows, err := srv.TableRows(table, 0)
	require.NoError(t, err)
	require.Len(t, rows, 3)
	var found bool
	for _, r := range rows {
		if id, _ := asInt64(r["order_id"]); id == 3 {
			found = true
			assert.Equal(t, "eu-west", r["region"])
		}
	}
	assert.True(t, found, "the row with the new field landed")

	require.NoError(t, stop())
}

// stripManaged removes a managed-comment marker the catalog may append.
func stripManaged(s string) string {
	if i := strings.Index(s, "\n"); i >= 0 {
		return s[:i]
	}
	return s
}

func TestExamplesLint(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "config", "examples")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 5)
	linter := service.GlobalEnvironment().FullConfigSchema("", "").NewStreamConfigLinter()
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			lints, err := linter.LintYAML(b)
			require.NoError(t, err)
			assert.Empty(t, lints)
			// Env interpolations resolve to their defaults: the example
			// parses into a runnable stream as well.
			sb := service.NewStreamBuilder()
			require.NoError(t, sb.SetYAML(string(bytes.TrimSpace(b))))
		})
	}
}

// promSum sums the samples of metric name (any labels) in a Prometheus
// text exposition, and counts the series.
func promSum(text, name string) (sum float64, series int) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		var v float64
		if _, err := fmt.Sscan(line[i+1:], &v); err == nil {
			sum += v
			series++
		}
	}
	return sum, series
}

// TestMetricsShowPipelining is the anti-regression soak for the inline
// per-batch wait: under load with a slow ack, many batches wait on each
// stream at once and one durability wait confirms several of them (mean
// coalesce ratio > 1). An output that waited inline per batch would show a
// ratio of exactly 1.
func TestMetricsShowPipelining(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{AckLatency: 100 * time.Millisecond}, eventsTable+":"+eventsCols)
	mux := http.NewServeMux()

	b := newStream(t, outputYAML(srv, eventsTable, "batching:\n  count: 0\n"))
	b.SetHTTPMux(mux)
	// Histograms in seconds (Redpanda Connect's default is summaries of
	// nanoseconds): the mean below is in seconds.
	require.NoError(t, b.SetMetricsYAML("prometheus:\n  use_histogram_timing: true\n"))
	produce, ctx, stop := startProducer(t, b)

	const writers, rounds, perBatch = 32, 4, 25
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				var batch service.MessageBatch
				for j := 0; j < perBatch; j++ {
					id := (w*rounds+r)*perBatch + j
					batch = append(batch, service.NewMessage([]byte(fmt.Sprintf(`{"id":%d,"msg":"m"}`, id))))
				}
				assert.NoError(t, produce(ctx, batch))
			}
		}()
	}
	wg.Wait()

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	text := rec.Body.String()

	rows, series := promSum(text, "zerobus_rows_sent_total")
	assert.Equal(t, float64(writers*rounds*perBatch), rows)
	assert.Equal(t, 2, series, "one series per stream of the default pool")
	assert.Regexp(t, `zerobus_rows_sent_total\{[^}]*stream="0",table="main.default.events"\}`, text)
	bytesSent, _ := promSum(text, "zerobus_bytes_sent_total")
	assert.Greater(t, bytesSent, 0.0)
	bursts, _ := promSum(text, "zerobus_ack_bursts_total")
	items, _ := promSum(text, "zerobus_ack_burst_items_total")
	require.Greater(t, bursts, 0.0)
	assert.Greater(t, items/bursts, 1.0, "mean coalesce ratio: batches must be pipelined, not waited for one by one")
	latencySum, _ := promSum(text, "zerobus_delivery_latency_sum")
	latencyCount, _ := promSum(text, "zerobus_delivery_latency_count")
	assert.GreaterOrEqual(t, latencySum/latencyCount, 0.1, "no batch is confirmed before the emulator's 100ms ack")
	_, latencySeries := promSum(text, "zerobus_delivery_latency_count")
	assert.Equal(t, 2, latencySeries)
	_, pendingSeries := promSum(text, "zerobus_pending_offsets")
	assert.Equal(t, 2, pendingSeries)
	// The ratio is a histogram of raw burst sizes (a *_ratio timer): one
	// _count series per stream.
	_, ratioSeries := promSum(text, "zerobus_ack_coalesce_ratio_count")
	assert.Equal(t, 2, ratioSeries)
	rowErrs, _ := promSum(text, "zerobus_row_errors_total")
	assert.Equal(t, 0.0, rowErrs)

	require.NoError(t, stop())
}

// produceIDs sends rows with ids [from, to) in batches of size per through
// produce, from a few concurrent writers.
func produceIDs(t *testing.T, ctx context.Context, produce service.MessageBatchHandlerFunc, from, to, per int) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for lo := from; lo < to; lo += per {
		var batch service.MessageBatch
		for id := lo; id < min(lo+per, to); id++ {
			batch = append(batch, service.NewMessage([]byte(fmt.Sprintf(`{"id":%d,"msg":"m%d"}`, id, id))))
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			assert.NoError(t, produce(ctx, batch))
		}()
	}
	wg.Wait()
}

// buildProducer starts a pipeline writing to output through a batch
// producer; stop stops it, asserting a clean stop.
func buildProducer(t *testing.T, output string) (service.MessageBatchHandlerFunc, context.Context, func()) {
	t.Helper()
	produce, ctx, stop := startProducer(t, newStream(t, output))
	return produce, ctx, func() { assert.NoError(t, stop()) }
}

func TestNoRowLostAcrossStreamRotation(t *testing.T) {
	t.Parallel()
	srv := startEmulator(t, emulator.Faults{StreamLifetime: 300 * time.Millisecond, RotationGrace: 100 * time.Millisecond},
		eventsTable+":"+eventsCols)
	produce, ctx, stop := buildProducer(t, outputYAML(srv, eventsTable, "batching:\n  count: 0\n"))
	defer stop()

	deadline := time.Now().Add(2 * time.Second) // span several rotations
	sent := 0
	for time.Now().Before(deadline) {
		produceIDs(t, ctx, produce, sent, sent+100, 25)
		sent += 100
		time.Sleep(20 * time.Millisecond)
	}
	rows, err := srv.TableRows(eventsTable, 0)
	require.NoError(t, err)
	seen := map[int64]int{}
	for _, r := range rows {
		id, _ := asInt64(r["id"])
		seen[id]++
	}
	for id := 0; id < sent; id++ {
		require.Contains(t, seen, int64(id), "row %d acknowledged upstream but not in the table", id)
	}
	dups := len(rows) - len(seen)
	t.Logf("%d rows sent across rotations, %d stored, %d duplicates (at-least-once)", sent, len(rows), dups)
	assert.Greater(t, srv.Stats().Tables[eventsTable].StreamsOpened, int64(2), "streams were rotated")
}

func TestConcurrencyRejectNoStreamStorm(t *testing.T) {
	t.Parallel()
	// The table admits one stream; the default pool wants two.
	srv := startEmulator(t, emulator.Faults{MaxStreamsPerTable: 1}, eventsTable+":"+eventsCols)
	produce, ctx, stop := buildProducer(t, outputYAML(srv, eventsTable, "batching:\n  count: 0\n"))
	defer stop()

	start := time.Now()
	produceIDs(t, ctx, produce, 0, 2000, 50)
	time.Sleep(time.Until(start.Add(3 * time.Second)))
	st := srv.Stats().Tables[eventsTable]
	elapsed := time.Since(start) // read after the stats: an upper bound of their window
	n, err := srv.TableRowCount(eventsTable)
	require.NoError(t, err)
	assert.Equal(t, int64(2000), n, "writes continue on the stream that was admitted")
	assert.Equal(t, int64(1), st.StreamsOpened)
	// 3 in the nominal 3 s window; more only if producing took longer.
	assert.LessOrEqual(t, st.StreamsRejected, maxBackedOffAttempts(elapsed), "a reject backs off; no storm of opens (%s window)", elapsed)
	t.Logf("streams opened %d, rejected %d in %s", st.StreamsOpened, st.StreamsRejected, elapsed.Round(time.Millisecond))
}

// maxBackedOffAttempts is the most open attempts one pool member can make
// within d under the pool's default back-off (internal/pool: equal jitter,
// so the k-th wait is at least 2^(k-1) × half of OpenBackoffInitial, 500 ms
// by default): one at once, then one per wait that fits.
func maxBackedOffAttempts(d time.Duration) int64 {
	n := int64(1)
	shortest := pool.DefaultConfig().OpenBackoffInitial / 2
	for wait, total := shortest, shortest; total <= d; wait, total = 2*wait, total+2*wait {
		n++
	}
	return n
}

func TestProvisionedPrimaryRawTableMeetsItsPreconditions(t *testing.T) {
	t.Parallel()
	srv := startEmulator(t, emulator.Faults{})
	const table = "main.raw.events"
	produce, ctx, stop := buildProducer(t, outputYAML(srv, table, `catalog:
  provision: true
  warehouse_id: wh
  role: primary_raw
  recheck_interval: 100ms
`))
	defer stop()
	require.NoError(t, produce(ctx, service.MessageBatch{service.NewMessage([]byte(`{"id":1,"msg":"raw"}`))}))
	tbl, ok := srv.Registry().Get(table)
	require.True(t, ok)
	assert.Equal(t, "false", tbl.Properties["delta.enableDeletionVectors"])
	assert.Equal(t, "true", tbl.Properties["delta.enableIcebergCompatV2"])
	n, err := srv.TableRowCount(table)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	// Writes keep flowing across re-checks.
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, produce(ctx, service.MessageBatch{service.NewMessage([]byte(`{"id":2,"msg":"raw"}`))}))
}
