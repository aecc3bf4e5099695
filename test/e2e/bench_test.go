package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/benchreport"
	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

// Benchmarks of whole pipelines. Each iteration runs complete pipelines, so
// run them once:
//
//	go test ./test/e2e/ -run '^$' -bench . -benchtime 1x -timeout 30m
//
// Rows per pipeline default to benchRows and can be changed with
// ZEROBUS_BENCH_ROWS. The machine is shared, so each ratio compares the
// best of benchReps interleaved runs of either side.

const (
	benchRows = 1_000_000
	benchReps = 3
)

// benchOutputExtra is extra zerobus output YAML for the benchmarks (for
// exploring knobs: ZEROBUS_BENCH_OUTPUT='max_in_flight: 128'); empty means
// the defaults.
func benchOutputExtra() string {
	return strings.ReplaceAll(os.Getenv("ZEROBUS_BENCH_OUTPUT"), `\n`, "\n")
}

func rowsForBench() int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("ZEROBUS_BENCH_ROWS"), &n); err == nil && n > 0 {
		return n
	}
	return benchRows
}

// benchInput generates rows for the events table as fast as it can, in
// input batches of 500.
func benchInput(rows int) string {
	return fmt.Sprintf(`
generate:
  count: %d
  interval: ""
  batch_size: 500
  mapping: |
    let n = counter()
    root.id = $n
    root.msg = "benchmark row number %%d with some payload text".format($n)
    root.level = "info"
    root.ts = "2026-01-02T03:04:05.123456Z"
`, rows)
}

// runPipeline runs generate → output to completion and returns its
// steady-state throughput in rows/s: rows acknowledged by the output
// (the engine's output_sent) between 10% and 90% of the run, which leaves
// out connecting at the start and the batcher's last period at the end.
func runPipeline(b *testing.B, rows int, output string) float64 {
	b.Helper()
	return runPipelineWith(b, rows, benchInput(rows), output, nil)
}

// runPipelineWith is runPipeline with its own input YAML producing rows
// messages; acked, when not nil, counts the rows acknowledged instead of the
// engine's output_sent (scraping every series of many tables each 10 ms
// would cost more than the pipeline being measured).
func runPipelineWith(b *testing.B, rows int, input, output string, acked func() float64) float64 {
	b.Helper()
	mux := http.NewServeMux()
	sb := service.NewStreamBuilder()
	sb.SetHTTPMux(mux)
	require.NoError(b, sb.SetLoggerYAML("level: warn"))
	require.NoError(b, sb.SetMetricsYAML("prometheus:\n  add_go_metrics: false\n  add_process_metrics: false\n"))
	require.NoError(b, sb.AddInputYAML(input))
	require.NoError(b, sb.AddOutputYAML(output))
	s, err := sb.Build()
	require.NoError(b, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	sent := acked
	if sent == nil {
		sent = func() float64 {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			n, _ := promSum(rec.Body.String(), "output_sent")
			return n
		}
	}
	lo, hi := 0.1*float64(rows), 0.9*float64(rows)
	var tLo, tHi time.Time
	var nLo, nHi float64
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for tHi.IsZero() {
		select {
		case err := <-done:
			require.NoError(b, err)
			b.Fatalf("pipeline ended before 90%% of %d rows were sent", rows)
		case <-tick.C:
		}
		n, now := sent(), time.Now()
		if tLo.IsZero() && n >= lo {
			tLo, nLo = now, n
		}
		if !tLo.IsZero() && n >= hi {
			tHi, nHi = now, n
		}
	}
	require.NoError(b, <-done)
	return (nHi - nLo) / tHi.Sub(tLo).Seconds()
}

// BenchmarkPipelineVsDrop compares generate → zerobus (emulator acking
// without storing) with generate → drop: the share of the bare pipeline's
// throughput the output keeps. Target: x_vs_drop >= 0.7.
func BenchmarkPipelineVsDrop(b *testing.B) {
	rows := rowsForBench()
	srv := startEmulator(b, emulator.Faults{AckOnly: true}, eventsTable+":"+eventsCols)
	out := outputYAML(srv, eventsTable, benchOutputExtra())
	// Warm up both paths (JIT-free Go still pays first-use costs: token,
	// streams, pools).
	runPipeline(b, rows/10, "drop: {}")
	runPipeline(b, rows/10, out)
	b.ResetTimer()
	var dropRate, zbRate float64
	for range b.N * benchReps {
		dropRate = max(dropRate, runPipeline(b, rows, "drop: {}"))
		zbRate = max(zbRate, runPipeline(b, rows, out))
	}
	b.ReportMetric(dropRate, "drop_rows/s")
	b.ReportMetric(zbRate, "zerobus_rows/s")
	b.ReportMetric(zbRate/dropRate, "x_vs_drop")
}

// BenchmarkAckLatencyTolerance compares throughput with 50 ms of injected
// ack latency to throughput with none: with the ack lanes pipelining, the
// latency is hidden. Target: x_vs_0ms >= 0.9.
func BenchmarkAckLatencyTolerance(b *testing.B) {
	rows := rowsForBench()
	srv := startEmulator(b, emulator.Faults{AckOnly: true}, eventsTable+":"+eventsCols)
	out := outputYAML(srv, eventsTable, benchOutputExtra())
	runPipeline(b, rows/10, out)
	b.ResetTimer()
	var fast, slow float64
	for range b.N * benchReps {
		require.NoError(b, srv.SetFaults(emulator.Faults{AckOnly: true}))
		fast = max(fast, runPipeline(b, rows, out))
		require.NoError(b, srv.SetFaults(emulator.Faults{AckOnly: true, AckLatency: 50 * time.Millisecond}))
		slow = max(slow, runPipeline(b, rows, out))
	}
	b.ReportMetric(fast, "0ms_rows/s")
	b.ReportMetric(slow, "50ms_rows/s")
	b.ReportMetric(slow/fast, "x_vs_0ms")
}

// BenchmarkPeakRSS runs the built binary at the output's defaults under
// sustained load (the emulator, acking without storing, runs in this test
// process so it is not counted) and reports the binary's peak resident set
// (VmHWM). Target: <= 256 MiB.
func BenchmarkPeakRSS(b *testing.B) {
	rows := 5 * rowsForBench()
	srv := startEmulator(b, emulator.Faults{AckOnly: true}, eventsTable+":"+eventsCols)
	cfg := filepath.Join(b.TempDir(), "load.yaml")
	require.NoError(b, os.WriteFile(cfg, []byte(fmt.Sprintf(`
http:
  enabled: false
logger:
  level: warn
input:
%s
output:
%s
`, indent(benchInput(rows)), indent(outputYAML(srv, eventsTable, "")))), 0o600))
	var peak int64
	var rate float64
	for range b.N {
		hwm, took := runForPeakRSS(b, cfg)
		rate = float64(rows) / took.Seconds()
		peak = max(peak, hwm)
		require.GreaterOrEqual(b, srv.Stats().Tables[eventsTable].RowsAcked, int64(rows))
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak_rss_MiB")
	b.ReportMetric(rate, "rows/s")
}

func indent(s string) string {
	var out []string
	for _, l := range strings.Split(strings.Trim(s, "\n"), "\n") {
		out = append(out, "  "+l)
	}
	return strings.Join(out, "\n")
}

// BenchmarkManyTables offers 1,000 rows/s to one table and then spread
// evenly over 200 tables with max_open_tables: 64 (the least recently used
// writer drained and closed to make room), and compares the rows/s the
// output keeps up with. Target: x_vs_single >= 0.9 (a benchreport TARGET
// line over the b.N runs), with the stream opens
// counted (an open storm would show as opens far above evictions × pool
// size).
func BenchmarkManyTables(b *testing.B) {
	const tables, rate, seconds = 200, 1000, 10
	var specs []string
	for i := range tables {
		specs = append(specs, fmt.Sprintf("main.many.t%d:id BIGINT NOT NULL, msg STRING, level STRING, ts TIMESTAMP", i))
	}
	srv := startEmulator(b, emulator.Faults{AckOnly: true}, append(specs, eventsTable+":"+eventsCols)...)
	input := func(routed bool) string {
		meta := ""
		if routed {
			meta = fmt.Sprintf("    meta t = ($n %% %d).string()\n", tables)
		}
		return fmt.Sprintf(`
generate:
  count: %d
  interval: 10ms
  batch_size: %d
  mapping: |
    let n = counter()
    root.id = $n
    root.msg = "row %%d".format($n)
    root.level = "info"
    root.ts = "2026-01-02T03:04:05Z"
%s`, rate*seconds, rate/100, meta)
	}
	opens := func() (n int64) {
		for _, t := range srv.Stats().Tables {
			n += t.StreamsOpened
		}
		return n
	}
	// Rows the emulator acknowledged, over every table: the same count for
	// both runs, without scraping the metrics of 200 tables every 10 ms.
	var base float64
	acked := func() float64 {
		var n int64
		for _, t := range srv.Stats().Tables {
			n += t.RowsAcked
		}
		return float64(n) - base
	}
	var single, many, roomy float64
	var manyOpens, roomyOpens int64
	var x []float64 // per run: 200 tables' rows/s over one table's
	for range b.N {
		base = 0
		base = acked()
		single = runPipelineWith(b, rate*seconds, input(false), outputYAML(srv, eventsTable, ""), acked)
		before := opens()
		base = 0
		base = acked()
		many = runPipelineWith(b, rate*seconds, input(true), outputYAML(srv, `main.many.t${! meta("t") }`, "max_open_tables: 64\n"), acked)
		manyOpens = opens() - before
		// The same load with room for every table: no eviction, so the
		// opens are the 200 tables' first ones.
		before = opens()
		base = 0
		base = acked()
		roomy = runPipelineWith(b, rate*seconds, input(true), outputYAML(srv, `main.many.t${! meta("t") }`, "max_open_tables: 256\n"), acked)
		roomyOpens = opens() - before
		x = append(x, many/single)
	}
	benchreport.Report("many_tables/x_vs_single", x, benchreport.AtLeast, 0.9, "")
	benchreport.Report("many_tables/stream_opens_per_s", []float64{float64(manyOpens) / seconds}, benchreport.Info, 0, "")
	b.ReportMetric(single, "single_rows/s")
	b.ReportMetric(many, "200_tables_rows/s")
	b.ReportMetric(many/single, "x_vs_single")
	b.ReportMetric(float64(manyOpens), "stream_opens")
	b.ReportMetric(float64(manyOpens)/seconds, "stream_opens/s")
	b.ReportMetric(roomy/single, "x_vs_single_256_open")
	b.ReportMetric(float64(roomyOpens), "stream_opens_256_open")
}
