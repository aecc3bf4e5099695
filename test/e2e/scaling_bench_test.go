package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/benchreport"
	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

// smallTable holds rows of about 20 bytes: small rows reach a stream's row
// quota long before its byte quota.
const (
	smallTable = "main.default.small"
	smallCols  = "id BIGINT NOT NULL, msg STRING"
)

// The per-stream quota and the load of BenchmarkSelfSizing.
const (
	sizingQuota = 20_000 // rows/s per stream, enforced by the emulator
	sizingRows  = 600_000
)

// sizingStreams is the output's streams block under the quota: the
// workspace's quota, as its user configures it (the default,
// 100,000 rows/s, is the service's own; until 2026-12-03 it was 15,000,
// below this quota, so the runs needed no setting).
const sizingStreams = "streams:\n  per_stream_rows_per_sec: 20000\n"

// BenchmarkSelfSizing runs generate → zerobus with 600,000 rows of about
// 20 bytes, offered as fast as the pipeline takes them, against the
// emulator holding each stream to 20,000 rows/s (backpressure), twice per
// rep: with the default self-sizing pool, and with self-sizing off (the
// two-stream pool of the defaults, which needs 15 s at best), after a run
// without a quota (what the pipeline alone can do on this machine: the run
// time no pool size can beat). It prints
// each run's rows/s against the streams open (sampled from the emulator
// every 250 ms) as a table, and:
//
//   - self_sizing/run_seconds: the self-sizing run's wall time. Target <= 10.
//   - self_sizing/max_streams: the most streams it had open. Target >= 3
//     (past the default of two).
//   - self_sizing/x_vs_fixed: the fixed run's time over the self-sizing
//     run's: the same-run baseline.
//   - self_sizing/no_quota_run_seconds: the run without a quota, for
//     reading the first figure on a busy machine.
//
// Run it alone:
//
//	go test ./test/e2e/ -run '^$' -bench SelfSizing -benchtime 1x -timeout 10m
func BenchmarkSelfSizing(b *testing.B) {
	var secs, streams, ratios, fixedSecs, ceilSecs []float64
	for range b.N {
		ceiling := runSizingPipeline(b, 0, "streams:\n  self_sizing: false\n")
		auto := runSizingPipeline(b, sizingQuota, sizingStreams)
		fixed := runSizingPipeline(b, sizingQuota, sizingStreams+"  self_sizing: false\n")
		ceiling.print("ceiling: no quota, two streams")
		auto.print("self-sizing")
		fixed.print("fixed, self_sizing: false")
		ceilSecs = append(ceilSecs, ceiling.wall.Seconds())
		secs = append(secs, auto.wall.Seconds())
		fixedSecs = append(fixedSecs, fixed.wall.Seconds())
		streams = append(streams, float64(auto.maxStreams))
		ratios = append(ratios, fixed.wall.Seconds()/auto.wall.Seconds())
	}
	b.ReportMetric(benchreport.Report("self_sizing/run_seconds", secs, benchreport.AtMost, 10, "s"), "run_s")
	b.ReportMetric(benchreport.Report("self_sizing/max_streams", streams, benchreport.AtLeast, 3, ""), "max_streams")
	benchreport.Report("self_sizing/fixed_run_seconds", fixedSecs, benchreport.Info, 0, "s")
	benchreport.Report("self_sizing/no_quota_run_seconds", ceilSecs, benchreport.Info, 0, "s")
	b.ReportMetric(benchreport.Report("self_sizing/x_vs_fixed", ratios, benchreport.Info, 0, ""), "x_vs_fixed")
}

// sizingRun is one run of BenchmarkSelfSizing.
type sizingRun struct {
	quota      int64 // rows/s per stream; 0: none
	wall       time.Duration
	maxStreams int64
	// byStreams are the rows acked and the time spent with n streams open.
	byStreams map[int64]*streamsSpan
	rejected  int64
}

type streamsSpan struct {
	rows int64
	time time.Duration
}

// print writes the run's rows/s against streams open as a table.
func (r sizingRun) print(name string) {
	var b strings.Builder
	fmt.Fprintf(&b, "self_sizing %s: %d rows in %.2f s (quota %d rows/s per stream), %d streams at most, %d refused\n",
		name, sizingRows, r.wall.Seconds(), r.quota, r.maxStreams, r.rejected)
	fmt.Fprintf(&b, "  %-12s %8s %10s %10s %18s\n", "streams open", "seconds", "rows", "rows/s", "rows/s per stream")
	var keys []int64
	for n := range r.byStreams {
		keys = append(keys, n)
	}
	slices.Sort(keys)
	for _, n := range keys {
		s := r.byStreams[n]
		rate := float64(s.rows) / s.time.Seconds()
		per := 0.0
		if n > 0 {
			per = rate / float64(n)
		}
		fmt.Fprintf(&b, "  %-12d %8.2f %10d %10.0f %18.0f\n", n, s.time.Seconds(), s.rows, rate, per)
	}
	fmt.Fprint(benchreport.Out, b.String())
}

// benchLogLevel is the pipelines' log level: warn, or ZEROBUS_BENCH_LOG
// (debug shows the sizer's every hold).
func benchLogLevel() string {
	if l := os.Getenv("ZEROBUS_BENCH_LOG"); l != "" {
		return l
	}
	return "warn"
}

// runSizingPipeline runs one pipeline of sizingRows small rows into a fresh
// emulator holding streams to sizingQuota, with extra output YAML, and
// returns its wall time and what the emulator saw every 250 ms.
func runSizingPipeline(b *testing.B, quota int64, extra string) sizingRun {
	b.Helper()
	// Ack-only: the emulator counts and acks without storing, so that what
	// bounds the run is the quota, not the shared machine's CPU.
	srv := startEmulator(b, emulator.Faults{StreamMaxRowsPerSec: quota, AckOnly: true}, smallTable+":"+smallCols)
	sb := service.NewStreamBuilder()
	require.NoError(b, sb.SetLoggerYAML("level: "+benchLogLevel()))
	require.NoError(b, sb.AddInputYAML(fmt.Sprintf(`
generate:
  count: %d
  interval: ""
  batch_size: 500
  mapping: |
    root.id = counter()
    root.msg = "m"
`, sizingRows)))
	require.NoError(b, sb.AddOutputYAML(outputYAML(srv, smallTable, extra)))
	s, err := sb.Build()
	require.NoError(b, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	run := sizingRun{quota: quota, byStreams: map[int64]*streamsSpan{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		prev, prevAt := int64(0), time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				st := srv.Stats().Tables[smallTable]
				n := st.StreamsActive
				run.maxStreams = max(run.maxStreams, n)
				span := run.byStreams[n]
				if span == nil {
					span = &streamsSpan{}
					run.byStreams[n] = span
				}
				span.rows += st.RowsAcked - prev
				span.time += now.Sub(prevAt)
				prev, prevAt = st.RowsAcked, now
			}
		}
	})
	start := time.Now()
	require.NoError(b, s.Run(ctx))
	run.wall = time.Since(start)
	close(stop)
	wg.Wait()
	st := srv.Stats().Tables[smallTable]
	require.EqualValues(b, sizingRows, st.RowsAcked, "every row acked")
	run.rejected = st.StreamsRejected
	return run
}
