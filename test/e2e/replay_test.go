package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

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
	return ucAt(tb, srv.HTTPURL(), replayWH)
}

// ucAt is a Unity Catalog client of the emulator (in process or not) at
// httpURL, with its default credentials, on warehouse.
func ucAt(tb testing.TB, httpURL, warehouse string) *catalog.UC {
	tb.Helper()
	uc, err := catalog.NewUC(catalog.UCConfig{Host: httpURL, ClientID: emulator.DefaultClientID, ClientSecret: emulator.DefaultClientSecret, AuthType: "oauth-m2m", WarehouseID: warehouse})
	require.NoError(tb, err)
	return uc
}

// createTable creates table with cols through uc, with the primary-raw
// properties when primaryRaw.
func createTable(tb testing.TB, uc *catalog.UC, table, cols string, primaryRaw bool) {
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
	require.NoError(tb, uc.Execute(context.Background(), stmt))
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
	t.Parallel()
	srv := startReplayEmulator(t)
	createTable(t, ucClient(t, srv), replayTable, replayCols, true)
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
	createTable(t, ucClient(t, srv), replayTable, replayCols, true)
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
	t.Parallel()
	// Storage credentials live 2s and the replay takes longer: the emulator
	// refuses expired ones, so the replay only completes if the input
	// reloads the table (new credentials) before they expire.
	srv := startReplayEmulator(t, func(c *emulator.Config) { c.CredentialTTL = 2 * time.Second })
	createTable(t, ucClient(t, srv), replayTable, replayCols, true)
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
