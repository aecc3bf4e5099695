package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/zerobusreplay"
)

const (
	replayTable = "main.raw.events"
	replayCols  = "id BIGINT NOT NULL, msg STRING, _zb_source STRING, _zb_offset BIGINT, _zb_emit_ts TIMESTAMP"
	replayWH    = "wh"
)

// startReplayEmulator starts an emulator whose Iceberg conversion lags by an
// hour, so only MSCK REPAIR TABLE … SYNC METADATA converts within a test.
func startReplayEmulator(tb testing.TB, mutate ...func(*emulator.Config)) *emulator.Server {
	tb.Helper()
	cfg := emulator.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: tb.TempDir(), IcebergLag: time.Hour}
	for _, m := range mutate {
		m(&cfg)
	}
	srv, err := emulator.Start(cfg)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = srv.Close() })
	return srv
}

// ucClient is a UC client on the emulator's workspace, for DDL and MSCK.
func ucClient(tb testing.TB, srv *emulator.Server) *catalog.UC {
	tb.Helper()
	uc, err := catalog.NewUC(catalog.UCConfig{Host: srv.HTTPURL(), ClientID: emulator.DefaultClientID, ClientSecret: emulator.DefaultClientSecret, AuthType: "oauth-m2m", WarehouseID: replayWH})
	require.NoError(tb, err)
	return uc
}

// createTable creates table with cols, with the primary-raw properties when
// primaryRaw.
func createTable(tb testing.TB, srv *emulator.Server, table, cols string, primaryRaw bool) {
	tb.Helper()
	stmt := fmt.Sprintf("CREATE TABLE %s (%s)", table, cols)
	if primaryRaw {
		var kv []string
		for k, v := range catalog.PrimaryRawProperties() {
			kv = append(kv, fmt.Sprintf("'%s' = '%s'", k, v))
		}
		sort.Strings(kv)
		stmt += " TBLPROPERTIES (" + strings.Join(kv, ", ") + ")"
	}
	require.NoError(tb, ucClient(tb, srv).Execute(context.Background(), stmt))
}

// forceConversion makes the emulator's catalog convert table now.
func forceConversion(tb testing.TB, srv *emulator.Server, table string) {
	tb.Helper()
	require.NoError(tb, ucClient(tb, srv).Execute(context.Background(), "MSCK REPAIR TABLE "+table+" SYNC METADATA"))
}

// rawRow is a row written to and replayed from replayTable.
type rawRow struct {
	ID     int64
	Msg    string
	Source string
	Offset int64
}

func rawRowFor(i int) rawRow {
	return rawRow{ID: int64(i), Msg: fmt.Sprintf("m-%d", i), Source: fmt.Sprintf("topic/%d", i%3), Offset: int64(i / 3)}
}

// writeRaw writes ids [from, to) through the zerobus output in batches of
// 1000 and returns once every row is acknowledged (durable).
func writeRaw(t testing.TB, srv *emulator.Server, from, to int) {
	t.Helper()
	b := newStream(t, outputYAML(srv, replayTable, "batching:\n  count: 0\n"))
	produce, ctx, stop := startProducer(t, b)
	for lo := from; lo < to; lo += 1000 {
		var batch service.MessageBatch
		for i := lo; i < min(lo+1000, to); i++ {
			r := rawRowFor(i)
			batch = append(batch, service.NewMessage(fmt.Appendf(nil, `{"id":%d,"msg":%q,"_zb_source":%q,"_zb_offset":%d}`, r.ID, r.Msg, r.Source, r.Offset)))
		}
		require.NoError(t, produce(ctx, batch))
	}
	require.NoError(t, stop())
}

// replayed is one message of a replay: its body row and metadata.
type replayed struct {
	row    rawRow
	emitTS time.Time
}

// runReplay runs a zerobus_replay pipeline with the extra input YAML until it
// ends by itself and returns the rows and the log text.
func runReplay(t testing.TB, srv *emulator.Server, table, extra string) ([]replayed, string, error) {
	return runReplaySlow(t, srv, table, extra, 0)
}

// runReplaySlow is runReplay with a consumer that pauses for pause after
// every 500th row.
func runReplaySlow(t testing.TB, srv *emulator.Server, table, extra string, pause time.Duration) ([]replayed, string, error) {
	t.Helper()
	y := fmt.Sprintf("zerobus_replay:\n  workspace_url: %s\n  table: %s\n  client_id: %s\n  client_secret: %s\n  batch_size: 500\n",
		srv.HTTPURL(), table, emulator.DefaultClientID, emulator.DefaultClientSecret)
	for _, l := range strings.Split(strings.TrimRight(extra, "\n"), "\n") {
		if l != "" {
			y += "  " + l + "\n"
		}
	}
	var logs bytes.Buffer
	var logMu sync.Mutex
	b := service.NewStreamBuilder()
	b.SetLogger(slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, &slog.HandlerOptions{Level: slog.LevelInfo})))
	require.NoError(t, b.AddInputYAML(y))
	var mu sync.Mutex
	var out []replayed
	require.NoError(t, b.AddConsumerFunc(func(_ context.Context, m *service.Message) error {
		body, err := m.AsBytes()
		if err != nil {
			return err
		}
		var r struct {
			ID  int64  `json:"id"`
			Msg string `json:"msg"`
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return fmt.Errorf("body %s: %w", body, err)
		}
		src, _ := m.MetaGet("_zb_source")
		off, _ := m.MetaGet("_zb_offset")
		ts, _ := m.MetaGet("_zb_emit_ts")
		var o int64
		fmt.Sscan(off, &o)
		et, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return fmt.Errorf("_zb_emit_ts metadata %q: %w", ts, err)
		}
		if pause > 0 && r.ID%500 == 0 {
			time.Sleep(pause)
		}
		mu.Lock()
		out = append(out, replayed{row: rawRow{ID: r.ID, Msg: r.Msg, Source: src, Offset: o}, emitTS: et})
		mu.Unlock()
		return nil
	}))
	st, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = st.Run(ctx)
	logMu.Lock()
	defer logMu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].row.ID < out[j].row.ID })
	return out, logs.String(), err
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func rowsOf(rs []replayed) []rawRow {
	out := make([]rawRow, len(rs))
	for i, r := range rs {
		out[i] = r.row
	}
	return out
}

func wantRaw(ids ...[2]int) []rawRow {
	var out []rawRow
	for _, r := range ids {
		for i := r[0]; i < r[1]; i++ {
			out = append(out, rawRowFor(i))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func TestReplayWholeTableAndWindows(t *testing.T) {
	srv := startReplayEmulator(t)
	createTable(t, srv, replayTable, replayCols, true)
	writeRaw(t, srv, 0, 3000)
	time.Sleep(5 * time.Millisecond)
	t1 := time.Now().UTC()
	writeRaw(t, srv, 3000, 6000)
	time.Sleep(5 * time.Millisecond)
	t2 := time.Now().UTC()
	writeRaw(t, srv, 6000, 9000)
	forceConversion(t, srv, replayTable)

	all, logs, err := runReplay(t, srv, replayTable, "")
	require.NoError(t, err)
	assert.Equal(t, wantRaw([2]int{0, 9000}), rowsOf(all), "the whole table, exactly as written")
	assert.Contains(t, logs, "coverage unknown")
	for _, r := range all {
		inWindow := !r.emitTS.Before(t1) && r.emitTS.Before(t2)
		require.Equal(t, r.row.ID >= 3000 && r.row.ID < 6000, inWindow, "row %d emitted at %s vs window [%s, %s)", r.row.ID, r.emitTS, t1, t2)
	}

	win, _, err := runReplay(t, srv, replayTable, fmt.Sprintf("where:\n  emit_ts_from: %s\n  emit_ts_to: %s\n", t1.Format(time.RFC3339Nano), t2.Format(time.RFC3339Nano)))
	require.NoError(t, err)
	assert.Equal(t, wantRaw([2]int{3000, 6000}), rowsOf(win), "the _zb_emit_ts window")

	src, _, err := runReplay(t, srv, replayTable, "where:\n  source: topic/1\n  offset_from: 100\n  offset_to: 110\n")
	require.NoError(t, err)
	var want []rawRow
	for off := 100; off < 110; off++ {
		want = append(want, rawRowFor(off*3+1))
	}
	assert.Equal(t, want, rowsOf(src), "the source/offset window")
}

func TestReplayLagToleratedAndForced(t *testing.T) {
	srv := startReplayEmulator(t)
	createTable(t, srv, replayTable, replayCols, true)
	writeRaw(t, srv, 0, 2000)
	forceConversion(t, srv, replayTable)
	writeRaw(t, srv, 2000, 2600) // committed to Delta, not converted yet

	got, logs, err := runReplay(t, srv, replayTable, "")
	require.NoError(t, err)
	assert.Equal(t, wantRaw([2]int{0, 2000}), rowsOf(got), "tolerate reads the older snapshot")
	assert.Contains(t, logs, "lags the Delta table")
	assert.Contains(t, logs, "600 rows committed to Delta are not visible yet")

	_, _, err = runReplay(t, srv, replayTable, "consistency: force\n")
	require.Error(t, err, "force without a warehouse is a config error")
	assert.Contains(t, err.Error(), "warehouse_id")

	got, logs, err = runReplay(t, srv, replayTable, "consistency: force\nwarehouse_id: "+replayWH+"\n")
	require.NoError(t, err)
	assert.Equal(t, wantRaw([2]int{0, 2600}), rowsOf(got), "force waits for the conversion and reads every row")
	assert.Contains(t, logs, "running MSCK REPAIR TABLE")
	assert.Contains(t, logs, "reached Delta version")

	// Now current: tolerate reports no lag.
	_, logs, err = runReplay(t, srv, replayTable, "")
	require.NoError(t, err)
	assert.Contains(t, logs, "is current")
	assert.NotContains(t, logs, "lags the Delta table")
}

func TestReplayRenewsVendedCredentials(t *testing.T) {
	// Storage credentials live 2s and the replay takes longer: the emulator
	// refuses expired ones, so the replay only completes if the input
	// reloads the table (new credentials) before they expire.
	srv := startReplayEmulator(t, func(c *emulator.Config) { c.CredentialTTL = 2 * time.Second })
	createTable(t, srv, replayTable, replayCols, true)
	for lo := 0; lo < 6000; lo += 1000 {
		writeRaw(t, srv, lo, lo+1000) // one data file each
	}
	forceConversion(t, srv, replayTable)
	start := time.Now()
	got, _, err := runReplaySlow(t, srv, replayTable, "credential_refresh_margin: 1500ms\n", 300*time.Millisecond)
	require.NoError(t, err)
	assert.Greater(t, time.Since(start), 3*time.Second, "the replay outlived the first credentials")
	assert.Equal(t, wantRaw([2]int{0, 6000}), rowsOf(got))
}

// BenchmarkReplay writes replayRows (1M) rows through the zerobus output,
// converts them, then replays the whole table through zerobus_replay
// (Iceberg REST catalog, vended S3 credentials, one message per row, JSON
// bodies) and, in the same run, reads the same Parquet data files directly
// with arrow-go's pqarrow. It reports rows/s and MB/s (of the Parquet files
// read) for both, the replay-vs-plain ratio, and the peak Go heap in use
// sampled during the replay (HeapInuse, not the process RSS).
func BenchmarkReplay(b *testing.B) {
	const replayRows = 1_000_000
	srv := startReplayEmulator(b)
	createTable(b, srv, replayTable, replayCols, true)
	for lo := 0; lo < replayRows; lo += 100_000 {
		writeRaw(b, srv, lo, lo+100_000)
	}
	forceConversion(b, srv, replayTable)
	files, err := doublestarParquet(srv.DataDir())
	require.NoError(b, err)
	require.NotEmpty(b, files)
	var parquetBytes int64
	for _, f := range files {
		st, err := os.Stat(f)
		require.NoError(b, err)
		parquetBytes += st.Size()
	}
	mb := float64(parquetBytes) / 1e6
	b.ResetTimer()
	for range b.N {
		// Plain Parquet read of the same files.
		start := time.Now()
		var plainRows int64
		for _, f := range files {
			plainRows += readParquetRows(b, f)
		}
		plain := time.Since(start)
		require.EqualValues(b, replayRows, plainRows)

		var peak atomic.Uint64
		done := make(chan struct{})
		go func() {
			var ms runtime.MemStats
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					runtime.ReadMemStats(&ms)
					if ms.HeapInuse > peak.Load() {
						peak.Store(ms.HeapInuse)
					}
				}
			}
		}()
		start = time.Now()
		var n atomic.Int64
		var bodyBytes atomic.Int64
		sb := service.NewStreamBuilder()
		require.NoError(b, sb.SetLoggerYAML("level: warn"))
		require.NoError(b, sb.AddInputYAML(fmt.Sprintf("zerobus_replay:\n  workspace_url: %s\n  table: %s\n  client_id: %s\n  client_secret: %s\n  batch_size: 1000\n",
			srv.HTTPURL(), replayTable, emulator.DefaultClientID, emulator.DefaultClientSecret)))
		require.NoError(b, sb.AddBatchConsumerFunc(func(_ context.Context, mb service.MessageBatch) error {
			n.Add(int64(len(mb)))
			for _, m := range mb {
				p, _ := m.AsBytes()
				bodyBytes.Add(int64(len(p)))
			}
			return nil
		}))
		st, err := sb.Build()
		require.NoError(b, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		require.NoError(b, st.Run(ctx))
		cancel()
		replay := time.Since(start)
		close(done)
		require.EqualValues(b, replayRows, n.Load())

		b.ReportMetric(float64(replayRows)/replay.Seconds(), "replay_rows/s")
		b.ReportMetric(mb/replay.Seconds(), "replay_parquet_MB/s")
		b.ReportMetric(float64(bodyBytes.Load())/1e6/replay.Seconds(), "replay_json_MB/s")
		b.ReportMetric(float64(replayRows)/plain.Seconds(), "plain_rows/s")
		b.ReportMetric(mb/plain.Seconds(), "plain_parquet_MB/s")
		b.ReportMetric(replay.Seconds()/plain.Seconds(), "x_replay_vs_plain_time")
		b.ReportMetric(float64(peak.Load())/(1<<20), "replay_peak_heap_inuse_MiB")
		b.Logf("%d rows, %d Parquet files, %.1f MB: replay %s, plain pqarrow read %s", replayRows, len(files), mb, replay, plain)
	}
}

// doublestarParquet finds every .parquet file under dir.
func doublestarParquet(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".parquet") {
			out = append(out, p)
		}
		return err
	})
	return out, err
}

// readParquetRows reads every record of one Parquet file with pqarrow and
// returns the row count.
func readParquetRows(tb testing.TB, path string) int64 {
	tb.Helper()
	f, err := os.Open(path)
	require.NoError(tb, err)
	defer f.Close()
	pr, err := file.NewParquetReader(f)
	require.NoError(tb, err)
	defer pr.Close()
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 1000}, memory.DefaultAllocator)
	require.NoError(tb, err)
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	require.NoError(tb, err)
	defer rr.Release()
	var n int64
	for rr.Next() {
		n += rr.RecordBatch().NumRows()
	}
	require.NoError(tb, rr.Err())
	return n
}
