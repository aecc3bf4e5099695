package e2e

// Replay benchmarks: zerobus_replay's throughput against a plain Parquet
// read of the same files, and the peak memory of the product binary
// replaying a table, at two table sizes:
//
//	go test ./test/e2e/ -run '^$' -bench 'Replay' -benchtime 1x
//
// ZEROBUS_REPLAY_ROWS changes the rows of BenchmarkReplay (default 1M).

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/benchreport"
	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

const (
	// replayBenchRows is BenchmarkReplay's table size.
	replayBenchRows = 1_000_000
	// replayRounds is how many times the plain read and the replay
	// alternate; each figure is the median over the rounds.
	replayRounds = 3
	// replayRSSTargetMiB is the ceiling for the binary's peak RSS
	// while replaying, whatever the table size.
	replayRSSTargetMiB = 256
	// replayTargetFraction is the least fraction of a plain pqarrow read's
	// rows/s the replay must reach. The replay does everything the plain
	// read does (over the catalog and S3 rather than local files) and then
	// builds one Benthos message per row (a JSON body and three metadata
	// entries), which costs about five times the decoding in CPU: so an
	// eighth of the plain read, with room for a busy machine, is the
	// promise. Before issue 11 it was 1/25 (one scan per data file).
	replayTargetFraction = 0.12
)

func replayRowsForBench() int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("ZEROBUS_REPLAY_ROWS"), &n); err == nil && n > 0 {
		return n
	}
	return replayBenchRows
}

// BenchmarkReplay writes the rows through the zerobus output (one Parquet
// file per 1,000-row batch), converts them, then alternates, replayRounds
// times, a plain pqarrow read of the table's Parquet files with a replay of
// the whole table through zerobus_replay (Iceberg REST catalog, vended S3
// credentials, one message per row with its JSON body). It reports, as the
// median over the rounds, replay rows/s and MB/s (of the Parquet files),
// the plain read's, the replay's fraction of the plain read's rows/s
// (target replayTargetFraction), and the process CPU time of either.
func BenchmarkReplay(b *testing.B) {
	rows := replayRowsForBench()
	srv := startReplayEmulator(b)
	createTable(b, ucClient(b, srv), replayTable, replayCols, true)
	for lo := 0; lo < rows; lo += 100_000 {
		writeRaw(b, srv, lo, min(lo+100_000, rows))
	}
	forceConversion(b, srv, replayTable)
	files, err := parquetFiles(srv.DataDir())
	require.NoError(b, err)
	require.NotEmpty(b, files)
	var parquetBytes int64
	for _, f := range files {
		st, err := os.Stat(f)
		require.NoError(b, err)
		parquetBytes += st.Size()
	}
	mb := float64(parquetBytes) / 1e6
	// The emulator writes a table's Iceberg metadata when it is first
	// loaded: have that done by a replay that selects no row (its filter
	// prunes every file) before anything is timed.
	n, _ := replayAll(b, srv, "where:\n    offset_from: 1000000000000\n")
	require.Zero(b, n)
	b.ResetTimer()
	var replayRate, replayMB, jsonMB, plainRate, plainMB, frac, cpuX []float64
	for round := range replayRounds {
		cpu0 := cpuTime()
		start := time.Now()
		var plainRows int64
		for _, f := range files {
			plainRows += readParquetRows(b, f)
		}
		plain := time.Since(start)
		plainCPU := cpuTime() - cpu0
		require.EqualValues(b, rows, plainRows)

		cpu0 = cpuTime()
		start = time.Now()
		n, body := replayAll(b, srv, "")
		replay := time.Since(start)
		replayCPU := cpuTime() - cpu0
		require.EqualValues(b, rows, n, "every row replayed")

		replayRate = append(replayRate, float64(rows)/replay.Seconds())
		replayMB = append(replayMB, mb/replay.Seconds())
		jsonMB = append(jsonMB, float64(body)/1e6/replay.Seconds())
		plainRate = append(plainRate, float64(rows)/plain.Seconds())
		plainMB = append(plainMB, mb/plain.Seconds())
		frac = append(frac, plain.Seconds()/replay.Seconds())
		cpuX = append(cpuX, replayCPU.Seconds()/plainCPU.Seconds())
		b.Logf("round %d: %d rows, %d Parquet files, %.1f MB: replay %s (CPU %s), plain pqarrow read %s (CPU %s)",
			round+1, rows, len(files), mb, replay.Round(time.Millisecond), replayCPU.Round(time.Millisecond), plain.Round(time.Millisecond), plainCPU.Round(time.Millisecond))
	}
	benchreport.Report("replay/x_vs_plain_parquet", frac, benchreport.AtLeast, replayTargetFraction, "")
	benchreport.Report("replay/cpu_x_vs_plain_parquet", cpuX, benchreport.Info, 0, "")
	benchreport.Report("replay/rows_per_s", replayRate, benchreport.Info, 0, "rows/s")
	benchreport.Report("replay/parquet_MB_per_s", replayMB, benchreport.Info, 0, "MB/s")
	benchreport.Report("replay/json_MB_per_s", jsonMB, benchreport.Info, 0, "MB/s")
	benchreport.Report("replay/plain_parquet_rows_per_s", plainRate, benchreport.Info, 0, "rows/s")
	benchreport.Report("replay/plain_parquet_MB_per_s", plainMB, benchreport.Info, 0, "MB/s")
	b.ReportMetric(benchreport.Median(replayRate), "replay_rows/s")
	b.ReportMetric(benchreport.Median(frac), "x_vs_plain_parquet")
}

// replayAll replays replayTable (with the extra input YAML, indented for
// the input's fields) in this process into a consumer that reads every
// body, and returns the rows and body bytes.
func replayAll(b *testing.B, srv *emulator.Server, extra string) (rows, bodyBytes int64) {
	b.Helper()
	var n, body atomic.Int64
	sb := service.NewStreamBuilder()
	require.NoError(b, sb.SetLoggerYAML("level: warn"))
	require.NoError(b, sb.AddInputYAML(fmt.Sprintf("zerobus_replay:\n  workspace_url: %s\n  table: %s\n  client_id: %s\n  client_secret: %s\n  batch_size: 1000\n  %s",
		srv.HTTPURL(), replayTable, emulator.DefaultClientID, emulator.DefaultClientSecret, extra)))
	require.NoError(b, sb.AddBatchConsumerFunc(func(_ context.Context, mb service.MessageBatch) error {
		n.Add(int64(len(mb)))
		for _, m := range mb {
			p, err := m.AsBytes()
			if err != nil {
				return err
			}
			body.Add(int64(len(p)))
		}
		return nil
	}))
	st, err := sb.Build()
	require.NoError(b, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	require.NoError(b, st.Run(ctx))
	return n.Load(), body.Load()
}

// cpuTime is this process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// parquetFiles finds every .parquet file under dir.
func parquetFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".parquet") {
			out = append(out, p)
		}
		return err
	})
	sort.Strings(out)
	return out, err
}

// readParquetRows reads every record of one Parquet file with pqarrow, in
// batches of 1,000 rows as the replay does, and returns the row count.
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

// BenchmarkReplayPeakRSS measures the product binary's peak RSS (VmHWM)
// while it replays replayTable into drop, against the emulator run as its
// own process with no Iceberg lag. The table is written by the product
// binary too (generate → zerobus), first 250k rows, replayed, then topped up
// to 1M rows and replayed again: the peak must stay under
// replayRSSTargetMiB and must not grow with the table.
func BenchmarkReplayPeakRSS(b *testing.B) {
	httpURL, grpcURL, _ := startEmulatorProcess(b, "--iceberg-lag=-1s", "--s3", freeAddr(b))
	createTable(b, ucAt(b, httpURL, replayWH), replayTable, replayCols, true)

	var peaks []float64
	written := 0
	for _, size := range []int{250_000, 1_000_000} {
		writeWithBinary(b, httpURL, grpcURL, written, size)
		written = size
		peak, took, got, files := replayWithBinary(b, httpURL)
		require.EqualValues(b, size, got, "the binary replayed every row")
		peaks = append(peaks, float64(peak)/(1<<20))
		fmt.Printf("replay of %d rows (%d data files) by the product binary: peak RSS %.0f MiB, %s (%.0f rows/s, start-up included)\n",
			size, files, float64(peak)/(1<<20), took.Round(time.Millisecond), float64(size)/took.Seconds())
	}
	// For scale: the same binary generating 1,000 rows into drop.
	idleCfg := writeConfig(b, "warn", "generate:\n  count: 1000\n  interval: \"\"\n  mapping: root.id = counter()\n", "drop: {}")
	idle, _, _ := runForPeakRSS(b, idleCfg)
	fmt.Printf("the same binary generating 1,000 rows into drop: peak RSS %.0f MiB\n", float64(idle)/(1<<20))
	// The figure is the largest table's; the smaller one shows the peak does
	// not grow with the table.
	benchreport.Report("replay/peak_rss", peaks[len(peaks)-1:], benchreport.AtMost, replayRSSTargetMiB, "MiB")
	benchreport.Report("replay/peak_rss_growth_250k_to_1M", []float64{peaks[len(peaks)-1] - peaks[0]}, benchreport.Info, 0, "MiB")
	benchreport.Report("replay/peak_rss_over_idle_binary", []float64{peaks[len(peaks)-1] - float64(idle)/(1<<20)}, benchreport.Info, 0, "MiB")
	b.ReportMetric(peaks[len(peaks)-1], "peak_rss_MiB")
}

// writeWithBinary appends ids [from, to) to replayTable with the product
// binary (generate → zerobus at the output's defaults) and waits for it to
// exit, every row durable.
func writeWithBinary(b *testing.B, httpURL, grpcURL string, from, to int) {
	b.Helper()
	cfg := writeConfig(b, "warn", fmt.Sprintf(`generate:
  count: %d
  interval: ""
  batch_size: 1000
  mapping: |
    let n = counter() + %d - 1
    root.id = $n
    root.msg = "m-%%d".format($n)
    root._zb_source = "topic/%%d".format($n %% 3)
    root._zb_offset = ($n / 3).floor().int64()
`, to-from, from), zerobusOutput(grpcURL, httpURL, replayTable))
	p := start(b, nil, "run", cfg)
	require.NoError(b, p.cmd.Wait(), "writing rows [%d, %d) failed:\n%s", from, to, p.out.String())
}

var (
	replayedRowsRe = regexp.MustCompile(`replayed: (\d+) rows`)
	plannedFilesRe = regexp.MustCompile(`(\d+) data files selected`)
)

// replayWithBinary runs the product binary replaying replayTable into
// drop (runForPeakRSS) and returns its peak RSS in bytes, its run time, and
// the rows and data files it says it replayed.
func replayWithBinary(b *testing.B, httpURL string) (peak int64, took time.Duration, rows, files int64) {
	b.Helper()
	cfg := writeConfig(b, "info", fmt.Sprintf("zerobus_replay:\n  workspace_url: %s\n  table: %s\n  client_id: %s\n  client_secret: %s\n",
		httpURL, replayTable, emulator.DefaultClientID, emulator.DefaultClientSecret), "drop: {}")
	peak, took, out := runForPeakRSS(b, cfg)
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if m := replayedRowsRe.FindStringSubmatch(sc.Text()); m != nil {
			rows, _ = strconv.ParseInt(m[1], 10, 64)
		}
		if m := plannedFilesRe.FindStringSubmatch(sc.Text()); m != nil {
			files, _ = strconv.ParseInt(m[1], 10, 64)
		}
	}
	return peak, took, rows, files
}
