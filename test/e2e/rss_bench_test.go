package e2e

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/benchreport"
)

// Peak memory of the product binary by row size: generate → zerobus at the
// output's defaults into the emulator binary run with --ack-only (its own
// process, so only the pipeline's memory is measured). Each case prints
// the binary's peak RSS (VmHWM) and its rows/s:
//
//	go test ./test/e2e/ -run '^$' -bench PeakRSSByRowSize -benchtime 1x
//
// Target: peak RSS <= 256 MiB at the defaults, whatever the row size; each
// case prints it as a benchreport TARGET line (median and range over the
// b.N runs of the case).

// rssTargetMiB is the ceiling the issue sets for every row size.
const rssTargetMiB = 256

// rssCase is one row size and the rows generated for it: a few hundred MB
// at most, so each case takes seconds.
type rssCase struct {
	name  string
	size  int // bytes of the msg column per row
	rows  int
	extra string // output YAML beyond the defaults
}

var rssCases = []rssCase{
	{name: "100B", size: 100, rows: 400_000},
	{name: "1KB", size: 1 << 10, rows: 150_000},
	// The seeds' worked example: 60,000 rows of 15 KB.
	{name: "15KB", size: 15 << 10, rows: 60_000},
	{name: "1MiB", size: 1 << 20, rows: 300},
}

const rssTable = "main.default.rss"

// BenchmarkPeakRSSByRowSize runs every rssCase at the output's defaults and
// reports peak_rss_MiB, rows/s and MB/s per case.
func BenchmarkPeakRSSByRowSize(b *testing.B) {
	httpURL, grpcURL, _ := startEmulatorProcess(b, "--ack-only", "--table", rssTable+":id BIGINT NOT NULL, msg STRING")
	for _, c := range rssCases {
		b.Run(c.name, func(b *testing.B) {
			var peaks, rates []float64
			for range b.N {
				peak, rate := runRSSCase(b, httpURL, grpcURL, c)
				peaks, rates = append(peaks, float64(peak)/(1<<20)), append(rates, rate)
			}
			peak := benchreport.Report("rss/"+c.name+"/peak_rss_MiB", peaks, benchreport.AtMost, rssTargetMiB, "MiB")
			rate := benchreport.Median(rates)
			b.ReportMetric(peak, "peak_rss_MiB")
			b.ReportMetric(rate, "rows/s")
			b.ReportMetric(rate*float64(c.size)/1e6, "MB/s")
			b.ReportMetric(rssTargetMiB, "target_MiB")
		})
	}
}

// BenchmarkPeakRSS15KBInFlight compares the seeds' 15 KB rows at the
// defaults with the same rows at max_in_flight: 4, the setting that
// bounded memory before the output had a byte budget. x_vs_mif4 is the
// defaults' rows/s over max_in_flight 4's (target >= 1: the defaults are at
// least as fast).
func BenchmarkPeakRSS15KBInFlight(b *testing.B) {
	httpURL, grpcURL, _ := startEmulatorProcess(b, "--ack-only", "--table", rssTable+":id BIGINT NOT NULL, msg STRING")
	base := rssCases[2]
	mif4 := base
	mif4.extra = "max_in_flight: 4"
	var defRate, mifRate float64
	var defPeak, mifPeak int64
	var x, defPeaks []float64 // per run: the defaults' rows/s over max_in_flight 4's; their peak in MiB
	for range b.N {
		p, dr := runRSSCase(b, httpURL, grpcURL, base)
		defPeak, defRate = max(defPeak, p), max(defRate, dr)
		defPeaks = append(defPeaks, float64(p)/(1<<20))
		p, mr := runRSSCase(b, httpURL, grpcURL, mif4)
		mifPeak, mifRate = max(mifPeak, p), max(mifRate, mr)
		x = append(x, dr/mr)
	}
	benchreport.Report("rss/15KB/x_defaults_vs_mif4", x, benchreport.AtLeast, 1.0, "")
	benchreport.Report("rss/15KB/defaults_peak_rss_MiB", defPeaks, benchreport.AtMost, rssTargetMiB, "MiB")
	b.ReportMetric(float64(defPeak)/(1<<20), "defaults_peak_rss_MiB")
	b.ReportMetric(float64(mifPeak)/(1<<20), "mif4_peak_rss_MiB")
	b.ReportMetric(defRate, "defaults_rows/s")
	b.ReportMetric(mifRate, "mif4_rows/s")
	b.ReportMetric(defRate/mifRate, "x_vs_mif4")
}

// runRSSCase runs the product binary once for c and returns its peak RSS
// in bytes and its rows/s over the whole run (start-up included). It
// checks that the emulator acked every row.
func runRSSCase(b *testing.B, httpURL, grpcURL string, c rssCase) (int64, float64) {
	b.Helper()
	// Input batches of at most about 1 MiB (and 500 rows): the input's
	// batching is the input's memory, not the output's.
	inBatch := min(max((1<<20)/c.size, 1), 500)
	// ZEROBUS_BENCH_OUTPUT adds knobs to every case, for exploring them.
	out := zerobusOutput(grpcURL, httpURL, rssTable, c.extra, benchOutputExtra())
	cfg := writeConfig(b, "warn", repeatInput(c.rows, inBatch, c.size), out)

	before := rowsAcked(b, httpURL)
	hwm, took, _ := runForPeakRSS(b, cfg)
	require.GreaterOrEqual(b, rowsAcked(b, httpURL)-before, int64(c.rows), "every row acked")
	return hwm, float64(c.rows) / took.Seconds()
}

// rowsAcked reads the emulator's count of rows acked into rssTable.
func rowsAcked(b *testing.B, httpURL string) int64 {
	b.Helper()
	return rowsAckedIn(b, httpURL, rssTable)
}

// rowsAckedIn reads the emulator's count of rows acked into table.
func rowsAckedIn(b *testing.B, httpURL, table string) int64 {
	b.Helper()
	return emulatorStats(b, httpURL).Tables[table].RowsAcked
}
