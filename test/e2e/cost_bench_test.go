package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/benchreport"
)

// Cost as the work grows: what a MB of rows costs the product binary in CPU
// time, and how fast it goes, as rows grow from 100 B to 15 KB and the
// stream pool from 1 to 8 streams.
//
//	go test ./test/e2e/ -run '^$' -bench CostByRowSize -benchtime 1x
//
// Each run is the built binary, generate → zerobus (pool of N streams,
// `streams: {min: N, max: N}`, everything else at the defaults) into the
// emulator binary run with --ack-only in its own process, so the emulator's
// CPU is not counted. CPU is the binary's user + system time from its
// rusage at exit, the whole process: the generate input, the engine and the
// output. The same rows into `drop` are run beside it, so
//
//   - cpu_per_MB is the whole pipeline's marginal CPU seconds per MB of rows
//     (the run's CPU less the CPU of a run of one row with the same config:
//     start-up, token, stream opens and shutdown are not per MB), and
//   - out_cpu_per_MB is the output's share: the same minus the drop run's
//     marginal CPU per MB (the input and the engine's cost of those rows).
//
// A row is about size bytes of JSON, `{"id":N,"msg":"xxx…"}`; MB = rows ×
// size / 1e6. MB/s is the steady rate between 10% and 90% of the rows acked
// by the emulator (start-up and the last batch left out).
//
// Targets: the output's cost per MB must not rise with row size, i.e.
// out_cpu_per_MB 15KB ÷ 1KB <= 1 and 1KB ÷ 100B <= 1 (at the default pool
// of 2 streams), and the same for the whole pipeline's cpu_per_MB. Every
// other figure is printed for the record, x_2_vs_1_streams (15 KB MB/s with
// 2 streams over 1) included: see below for why it has no target here.
//
// What limits each on the 2-core machine the figures were taken on:
//   - 100 B rows are bound by per-row and per-value work: Bloblang building
//     each message, the engine's per-message bookkeeping, the converter's
//     per-row parse. CPU, not bytes, so MB/s is low and CPU per MB high.
//   - 15 KB rows are bound by per-byte work: copying the payload from the
//     message into Arrow buffers, Arrow IPC framing and the socket write, and,
//     on the same two cores, the emulator reading and decoding it. Memory
//     bandwidth and the second process share the cores with the pipeline.
//   - The pool: the emulator does not model the service's ~100 MB/s per-stream
//     cap, and every stream's work lands on the same two cores, so here more
//     streams cannot add CPU, only spread it. What the benchmark can show is
//     that they do not cost (x_2_vs_1_streams near 1, cpu_per_MB flat across
//     pool sizes); against the real service a 15 KB table at 150 MB/s needs
//     the second stream because one stream carries at most 100 MB/s (the
//     seeds' worked example), which the pool sizing (peak_mb_per_sec ÷
//     per_stream_mb_per_sec) provides.

const costTable = "main.default.cost"

// costSize is one row size and the MB of rows a run carries: enough for a
// couple of seconds per run on a busy 2-core machine.
type costSize struct {
	name string
	size int     // bytes of JSON per row
	mb   float64 // MB of rows per run
}

var (
	costSizes = []costSize{
		{name: "100B", size: 100, mb: 25},
		{name: "1KB", size: 1 << 10, mb: 120},
		{name: "15KB", size: 15 << 10, mb: 400},
	}
	costPools = []int{1, 2, 4, 8}
)

// costReps is the number of runs of each case, interleaved.
const costReps = 3

// costRun is what one run of the binary measured.
type costRun struct {
	cpu  float64 // user + system seconds
	rate float64 // steady rows/s (zerobus only; 0 for drop)
}

// BenchmarkCostByRowSize runs every row size at every pool size, and into
// drop, costReps times interleaved, and prints MB/s and CPU per MB of each
// and the row-size ratios as benchreport TARGET lines.
func BenchmarkCostByRowSize(b *testing.B) {
	httpURL, grpcURL, _ := startEmulatorProcess(b, "--ack-only", "--table", costTable+":id BIGINT NOT NULL, msg STRING")
	outFor := func(pool int) string {
		if pool == 0 {
			return "drop: {}"
		}
		return zerobusOutput(grpcURL, httpURL, costTable, fmt.Sprintf("streams:\n  min: %d\n  max: %d", pool, pool))
	}
	// Pool 0 is drop.
	pools := append([]int{0}, costPools...)

	// The fixed cost of a run (start-up, token, stream opens, shutdown):
	// one row, per pool size, the best of two.
	fixed := map[int]float64{}
	for _, pool := range pools {
		for range 2 {
			r := runCost(b, httpURL, costConfig(b, costSizes[0], 1, outFor(pool)), 1, pool > 0)
			if v, ok := fixed[pool]; !ok || r.cpu < v {
				fixed[pool] = r.cpu
			}
		}
	}

	type key struct {
		size string
		pool int
	}
	cpuPerMB := map[key][]float64{}
	mbps := map[key][]float64{}
	for range b.N {
		for rep := range costReps {
			for _, s := range costSizes {
				rows := int(s.mb * 1e6 / float64(s.size))
				mb := float64(rows) * float64(s.size) / 1e6
				// Each rep starts at another pool size, so drift in the
				// machine's load does not always favour the same one.
				for i := range pools {
					pool := pools[(i+rep)%len(pools)]
					r := runCost(b, httpURL, costConfig(b, s, rows, outFor(pool)), rows, pool > 0)
					k := key{s.name, pool}
					cpuPerMB[k] = append(cpuPerMB[k], max(r.cpu-fixed[pool], 0)/mb)
					if pool > 0 {
						mbps[k] = append(mbps[k], r.rate*float64(s.size)/1e6)
					}
				}
			}
		}
	}

	// The output's share, run by run: the zerobus run's CPU per MB less the
	// drop run of the same rep.
	outCost := map[key][]float64{}
	for _, s := range costSizes {
		drop := cpuPerMB[key{s.name, 0}]
		benchreport.Report("cost/"+s.name+"/drop_cpu_ms_per_MB", scale(drop, 1e3), benchreport.Info, 0, "ms")
		for _, pool := range costPools {
			k := key{s.name, pool}
			for i, v := range cpuPerMB[k] {
				outCost[k] = append(outCost[k], v-drop[i])
			}
			p := fmt.Sprintf("cost/%s/%d_streams/", s.name, pool)
			benchreport.Report(p+"MB_per_s", mbps[k], benchreport.Info, 0, "")
			benchreport.Report(p+"cpu_ms_per_MB", scale(cpuPerMB[k], 1e3), benchreport.Info, 0, "ms")
			benchreport.Report(p+"out_cpu_ms_per_MB", scale(outCost[k], 1e3), benchreport.Info, 0, "ms")
			b.ReportMetric(benchreport.Median(mbps[k]), fmt.Sprintf("%s_%dst_MB/s", s.name, pool))
			b.ReportMetric(benchreport.Median(outCost[k])*1e3, fmt.Sprintf("%s_%dst_out_cpu_ms/MB", s.name, pool))
		}
	}
	// Targets, at the default pool of 2 streams: cost per MB does not rise
	// with row size (ratios of medians), for the output and the whole.
	const def = 2
	ratio := func(m map[key][]float64, num, den string) []float64 {
		n, d := m[key{num, def}], m[key{den, def}]
		var out []float64
		for i := range n {
			out = append(out, n[i]/d[i])
		}
		return out
	}
	r15 := benchreport.Report("cost/out_cpu_per_MB_15KB_vs_1KB", ratio(outCost, "15KB", "1KB"), benchreport.AtMost, 1.0, "")
	r1 := benchreport.Report("cost/out_cpu_per_MB_1KB_vs_100B", ratio(outCost, "1KB", "100B"), benchreport.AtMost, 1.0, "")
	benchreport.Report("cost/cpu_per_MB_15KB_vs_1KB", ratio(cpuPerMB, "15KB", "1KB"), benchreport.AtMost, 1.0, "")
	benchreport.Report("cost/cpu_per_MB_1KB_vs_100B", ratio(cpuPerMB, "1KB", "100B"), benchreport.AtMost, 1.0, "")
	var x21 []float64
	for i, v := range mbps[key{"15KB", 2}] {
		x21 = append(x21, v/mbps[key{"15KB", 1}][i])
	}
	// No target: see the doc comment (no per-stream cap in the emulator, two
	// cores shared with it), so this records whether it helps here.
	x := benchreport.Report("cost/15KB/x_2_vs_1_streams", x21, benchreport.Info, 0, "")
	b.ReportMetric(r15, "out_cost_15KB_vs_1KB")
	b.ReportMetric(r1, "out_cost_1KB_vs_100B")
	b.ReportMetric(x, "15KB_x_2_vs_1_streams")
}

func scale(v []float64, k float64) []float64 {
	out := make([]float64, len(v))
	for i := range v {
		out[i] = v[i] * k
	}
	return out
}

// costConfig writes a config of rows rows of s.size bytes into output and
// returns its path. Input batches are at most about 1 MiB (and 500 rows),
// as in the RSS benchmark.
func costConfig(b *testing.B, s costSize, rows int, output string) string {
	b.Helper()
	inBatch := min(max((1<<20)/s.size, 1), 500)
	// {"id":N,"msg":"…"} is 17 bytes plus the id's digits: about 24 with
	// ids up to 10^7.
	msgLen := max(s.size-24, 1)
	return writeConfig(b, "warn", repeatInput(rows, inBatch, msgLen), output)
}

// runCost runs the binary on cfg to its end and returns its CPU time and,
// when acked is set (a zerobus output), its steady rows/s from the
// emulator's count of rows acked into costTable, after checking every row
// was acked.
func runCost(b *testing.B, httpURL, cfg string, rows int, acked bool) costRun {
	b.Helper()
	var before int64
	if acked {
		before = rowsAckedIn(b, httpURL, costTable)
	}
	p := start(b, nil, "run", cfg)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	lo, hi := before+int64(0.1*float64(rows)), before+int64(0.9*float64(rows))
	var tLo, tHi time.Time
	var nLo, nHi int64
	for {
		select {
		case err := <-done:
			require.NoError(b, err, "pipeline failed:\n%s", p.out.String())
			r := costRun{cpu: (p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()).Seconds()}
			if !acked {
				return r
			}
			require.GreaterOrEqual(b, rowsAckedIn(b, httpURL, costTable)-before, int64(rows), "every row acked")
			if !tHi.IsZero() && tHi.After(tLo) {
				r.rate = float64(nHi-nLo) / tHi.Sub(tLo).Seconds()
			}
			return r
		case <-time.After(20 * time.Millisecond):
		}
		if !acked || !tHi.IsZero() {
			continue
		}
		n, now := rowsAckedIn(b, httpURL, costTable), time.Now()
		if tLo.IsZero() && n >= lo {
			tLo, nLo = now, n
		}
		if !tLo.IsZero() && n >= hi {
			tHi, nHi = now, n
		}
	}
}
