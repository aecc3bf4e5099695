package e2e

// Recovery, end to end and the way a user runs it: the built benthos-zerobus
// binary runs YAML pipelines against the zerobus-emulator binary (its own
// process, tables stored on disk) over real sockets. A Kafka-shaped generate
// input writes rows with coverage; zerobus_replay reads a window back
// through the Iceberg REST catalog into a file; the coverage table is checked
// against the rows the emulator stored (issue 11, item 7).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/coverage"
	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/plugin/zerobusreplay"
)

const (
	recoveryRows = 100_000 // rows of the first run: 3 partitions of ~33.3k offsets
	recoveryWH   = "wh-recovery"
)

// kafkaMapping is the generate mapping of a Kafka-shaped source: row n of
// topic "orders" is in partition n%3 at offset n/3, its body a JSON object
// whose every value follows from n (genOrder). first is the n of the first
// row and step the distance between consecutive rows' n.
func kafkaMapping(first, step int) string {
	return fmt.Sprintf(`let n = %d + (counter() - 1) * %d
root.id = $n
root.msg = "order " + $n.string()
root.amount = ($n %% 1000) / 4 + 0.125
root.paid = $n %% 2 == 0
meta kafka_topic = "orders"
meta kafka_partition = ($n %% 3).string()
meta kafka_offset = (($n - $n %% 3) / 3).int64().string()
`, first, step)
}

// genOrder is the body and position kafkaMapping gives row n.
func genOrder(n int64) (body map[string]any, source string, offset int64) {
	return map[string]any{
		"id": float64(n), "msg": fmt.Sprintf("order %d", n),
		"amount": float64(n%1000)/4 + 0.125, "paid": n%2 == 0,
	}, fmt.Sprintf("orders/%d", n%3), n / 3
}

// writerConfig is a product pipeline: generate (count rows of mapping) →
// zerobus with coverage by Kafka topic/partition and offset, the table
// provisioned as primary_raw, the output labelled label (the writer id).
func writerConfig(httpURL, grpcURL, table, label string, count, batch int, mapping string) string {
	return fmt.Sprintf(`http:
  enabled: false
logger:
  level: INFO
  format: logfmt
input:
  generate:
    count: %d
    interval: ""
    batch_size: %d
    mapping: |
%s
output:
  label: %s
  zerobus:
    endpoint: %s
    workspace_url: %s
    table: %s
    client_id: %s
    client_secret: %s
    catalog:
      provision: true
      warehouse_id: %s
      role: primary_raw
    coverage:
      source: '${! meta("kafka_topic") }/${! meta("kafka_partition") }'
      offset: '${! meta("kafka_offset") }'
`, count, batch, indentBy(mapping, 6), label, grpcURL, httpURL, table, emulator.DefaultClientID, emulator.DefaultClientSecret, recoveryWH)
}

// replayConfig is a product pipeline: zerobus_replay of table (extra input
// YAML, e.g. the where block) → a mapping that keeps the row and adds the
// reserved metadata under _meta → one JSON line per row in path.
func replayConfig(httpURL, table, extra, path string) string {
	return fmt.Sprintf(`http:
  enabled: false
logger:
  level: INFO
  format: logfmt
input:
  zerobus_replay:
    workspace_url: %s
    table: %s
    client_id: %s
    client_secret: %s
    warehouse_id: %s
    batch_size: 1000
%s
pipeline:
  processors:
    - mapping: |
        root = this
        root._meta = {"source": @_zb_source, "offset": @_zb_offset}
output:
  file:
    path: %s
    codec: lines
`, httpURL, table, emulator.DefaultClientID, emulator.DefaultClientSecret, recoveryWH, indentBy(extra, 4), path)
}

// runProduct runs the product binary on the YAML config until it exits by
// itself (at most 90s) and returns its output and exit status.
func runProduct(t *testing.T, config string) (string, int) {
	t.Helper()
	out, code, err := awaitProduct(startProduct(t, config), 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return out, code
}

// awaitProduct waits up to d for p to end by itself and returns its output
// and exit code; past d it kills p and says so. It never fails the test,
// so goroutines other than the test's can wait for processes the test
// goroutine started.
func awaitProduct(p *proc, d time.Duration) (string, int, error) {
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		<-done
		return p.out.String(), -1, fmt.Errorf("benthos-zerobus did not end by itself within %s:\n%s", d, tail(p.out.String(), 4000))
	}
	return p.out.String(), p.cmd.ProcessState.ExitCode(), nil
}

// startProduct starts the product binary on the YAML config.
func startProduct(t *testing.T, config string) *proc {
	t.Helper()
	f := filepath.Join(t.TempDir(), "pipeline.yaml")
	require.NoError(t, os.WriteFile(f, []byte(config), 0o600))
	return start(t, nil, "run", f)
}

// replayedLine is one line of the replay's file: the row and its metadata.
type replayedLine struct {
	body   map[string]any
	source string
	offset int64
}

// readReplayFile reads the replay's output file, sorted by offset.
func readReplayFile(t *testing.T, path string) []replayedLine {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var out []replayedLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		meta, ok := m["_meta"].(map[string]any)
		require.True(t, ok, "line without _meta: %s", sc.Text())
		delete(m, "_meta")
		var off int64
		_, err := fmt.Sscan(fmt.Sprint(meta["offset"]), &off)
		require.NoError(t, err, "offset metadata %v", meta["offset"])
		out = append(out, replayedLine{body: m, source: fmt.Sprint(meta["source"]), offset: off})
	}
	require.NoError(t, sc.Err())
	sort.Slice(out, func(i, j int) bool { return out[i].offset < out[j].offset })
	return out
}

// wantWindow is what a replay of source orders/1, offsets [from, to), must
// produce: the rows kafkaMapping generated there (n = 3·offset + 1).
func wantWindow(from, to int64) []replayedLine {
	var out []replayedLine
	for off := from; off < to; off++ {
		body, src, o := genOrder(off*3 + 1)
		out = append(out, replayedLine{body: body, source: src, offset: o})
	}
	return out
}

func window(from, to int64) string {
	return fmt.Sprintf("where:\n  source: orders/1\n  offset_from: %d\n  offset_to: %d\n", from, to)
}

// TestRecoveryWriteWithCoverageThenReplayAWindow: 100k Kafka-shaped rows
// (3 sources) written with coverage by the binary, one source's offset
// window replayed through Iceberg into a file by the binary, compared row by
// row and field by field; the coverage report says the window is complete,
// a window reaching past the written offsets is reported with its gap and
// refused with require_complete. Then the lag path: with the emulator's
// conversion an hour behind, tolerate replays only the visible rows and
// says how many are not, force converts and replays them all.
func TestRecoveryWriteWithCoverageThenReplayAWindow(t *testing.T) {
	t.Parallel()
	const table = "main.raw.orders"
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--iceberg-lag", "1h")
	began := time.Now()
	out, code := runProduct(t, writerConfig(httpURL, grpcURL, table, "kafka_writer", recoveryRows, 1000, kafkaMapping(0, 1)))
	require.Zero(t, code, "writer failed:\n%s", tail(out, 4000))
	t.Logf("wrote %d rows with coverage in %s", recoveryRows, time.Since(began).Round(time.Millisecond))
	require.EqualValues(t, recoveryRows, readTableInfo(t, httpURL, table).RowCount)
	cov, writers := coverageBySource(t, httpURL, table+"_zb_coverage")
	assert.Equal(t, map[string]bool{"kafka_writer": true}, writers)
	for p, end := range []int64{33_334, 33_333, 33_333} {
		src := fmt.Sprintf("orders/%d", p)
		require.Contains(t, cov, src)
		assert.Equal(t, []coverage.Range{{Start: 0, End: end}}, cov[src].Ranges(), "coverage of %s once the writer has ended", src)
	}

	dir := t.TempDir()
	replay := func(name, extra string) (string, int, []replayedLine) {
		t.Helper()
		path := filepath.Join(dir, name+".jsonl")
		began := time.Now()
		out, code := runProduct(t, replayConfig(httpURL, table, extra, path))
		t.Logf("replay %s: exit %d in %s", name, code, time.Since(began).Round(time.Millisecond))
		return out, code, readReplayFile(t, path)
	}

	// The window, with force (the conversion lags an hour: only MSCK makes
	// the rows and their coverage visible) and require_complete.
	out, code, got := replay("window", window(10_000, 20_000)+"consistency: force\nrequire_complete: true\n")
	require.Zero(t, code, "replay failed:\n%s", tail(out, 4000))
	assert.Equal(t, wantWindow(10_000, 20_000), got, "the window, every field and the source/offset metadata, exactly as generated")
	assert.Contains(t, out, "running MSCK REPAIR TABLE")
	assert.Contains(t, out, table+"_zb_coverage has no Iceberg metadata yet", "force converts the coverage table too")
	assert.Contains(t, out, `coverage of source \"orders/1\": durable [10000,20000)`)
	assert.Contains(t, out, "coverage complete for")
	assert.Contains(t, out, "replayed: 10000 rows")

	// Past the last written offset of orders/1 (33332): reported with its gap …
	out, code, got = replay("past", window(33_300, 33_400))
	require.Zero(t, code, "replay failed:\n%s", tail(out, 4000))
	assert.Equal(t, wantWindow(33_300, 33_333), got, "the rows there are")
	assert.Contains(t, out, `coverage of main.raw.orders has 1 gaps`)
	assert.Contains(t, out, `source \"orders/1\" offsets [33333,33400)`)
	// … and refused with require_complete: nothing replayed, exit status 3.
	out, code, got = replay("past_required", window(33_300, 33_400)+"require_complete: true\n")
	assert.Equal(t, zerobusreplay.RefusedExitCode, code, "a refused replay exits with its own status:\n%s", tail(out, 4000))
	assert.Empty(t, got)
	assert.Contains(t, out, "refused, nothing replayed")
	assert.Contains(t, out, `source \"orders/1\" offsets [33333,33400)`)

	// The lag path. 600 more rows of orders/1 (offsets 33333..33932) are
	// committed to Delta; the conversion does not reach them for an hour.
	out, code = runProduct(t, writerConfig(httpURL, grpcURL, table, "kafka_writer", 600, 100, kafkaMapping(recoveryRows, 3)))
	require.Zero(t, code, "second writer run failed:\n%s", tail(out, 4000))
	require.EqualValues(t, recoveryRows+600, readTableInfo(t, httpURL, table).RowCount)
	out, code, got = replay("tolerate", window(33_000, 33_933))
	require.Zero(t, code, "replay failed:\n%s", tail(out, 4000))
	assert.Equal(t, wantWindow(33_000, 33_333), got, "tolerate replays what the lagging snapshot shows")
	assert.Contains(t, out, "lags the Delta table")
	assert.Contains(t, out, "600 rows committed to Delta are not visible yet")
	out, code, got = replay("force", window(33_000, 33_933)+"consistency: force\nrequire_complete: true\n")
	require.Zero(t, code, "replay failed:\n%s", tail(out, 4000))
	assert.Equal(t, wantWindow(33_000, 33_933), got, "force converts first and replays every row")
	assert.Contains(t, out, "coverage complete for")
}

// coverageBySource reads a coverage table of the emulator process and
// returns, by source, the union of its ranges and the writers that recorded
// any.
func coverageBySource(t *testing.T, httpURL, table string) (map[string]*coverage.RangeSet, map[string]bool) {
	t.Helper()
	sets, writers := map[string]*coverage.RangeSet{}, map[string]bool{}
	for _, r := range readRows(t, httpURL, table) {
		start, end := r["start"].(float64), r["end"].(float64)
		src := fmt.Sprint(r["source"])
		if sets[src] == nil {
			sets[src] = &coverage.RangeSet{}
		}
		sets[src].Add(int64(start), int64(end))
		writers[fmt.Sprint(r["writer_id"])] = true
	}
	return sets, writers
}

// rawOffsets reads a raw table of the emulator process and returns the
// offsets of its stored rows by source, and the number of rows.
func rawOffsets(t *testing.T, httpURL, table string) (map[string]*coverage.RangeSet, int) {
	t.Helper()
	rows := readRows(t, httpURL, table)
	sets := map[string]*coverage.RangeSet{}
	for _, r := range rows {
		src, off := fmt.Sprint(r["_zb_source"]), r["_zb_offset"].(float64)
		require.Equal(t, off, math.Trunc(off))
		if sets[src] == nil {
			sets[src] = &coverage.RangeSet{}
		}
		sets[src].Add(int64(off), int64(off)+1)
	}
	return sets, len(rows)
}

// assertCoverageWithinRaw checks that every recorded range names only
// offsets with a stored raw row (coverage never ahead of the data).
func assertCoverageWithinRaw(t *testing.T, cov, raw map[string]*coverage.RangeSet) {
	t.Helper()
	for src, set := range cov {
		for _, r := range set.Ranges() {
			rs := raw[src]
			if rs == nil {
				rs = &coverage.RangeSet{}
			}
			assert.Empty(t, rs.Gaps(r.Start, r.End), "coverage range %s of %s names offsets with no stored raw row", r, src)
		}
	}
}

// TestRecoveryTwoWritersCoverageUnion: two product processes, different
// writer ids (their output labels), write the same table at once, each
// alternate blocks of 100 offsets of the same three sources. The coverage
// table holds both writers' ranges; their union, merged, is exactly the
// offsets stored in the raw table, and a replay of the whole source with
// require_complete finds it complete.
func TestRecoveryTwoWritersCoverageUnion(t *testing.T) {
	t.Parallel()
	const (
		table     = "main.raw.shared"
		perWriter = 15_000 // 5,000 offsets of each source per writer
	)
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--iceberg-lag", "-1s")
	// Writer w's row k: source k%3, the (k/3)th offset of its blocks
	// [200i + 100w, 200i + 100w + 100).
	mapping := func(w int) string {
		return fmt.Sprintf(`let k = counter() - 1
let j = ($k - $k %% 3) / 3
let off = ($j - $j %% 100) * 2 + %d + $j %% 100
root.id = $off * 3 + $k %% 3
root.writer = %d
meta kafka_topic = "orders"
meta kafka_partition = ($k %% 3).string()
meta kafka_offset = $off.int64().string()
`, w*100, w)
	}
	// Both writers start on the test goroutine (starting may fail the
	// test); only the waits run concurrently, and they never fail it.
	procs := make([]*proc, 2)
	for w := range 2 {
		procs[w] = startProduct(t, writerConfig(httpURL, grpcURL, table, fmt.Sprintf("writer_%c", 'a'+w), perWriter, 500, mapping(w)))
	}
	var wg sync.WaitGroup
	outs, codes, errs := make([]string, 2), make([]int, 2), make([]error, 2)
	for w := range 2 {
		wg.Go(func() { outs[w], codes[w], errs[w] = awaitProduct(procs[w], 90*time.Second) })
	}
	wg.Wait()
	for w := range 2 {
		require.NoError(t, errs[w], "writer %d", w)
		require.Zero(t, codes[w], "writer %d failed:\n%s", w, tail(outs[w], 4000))
	}

	raw, n := rawOffsets(t, httpURL, table)
	require.Equal(t, 2*perWriter, n)
	cov, writers := coverageBySource(t, httpURL, table+"_zb_coverage")
	assert.Equal(t, map[string]bool{"writer_a": true, "writer_b": true}, writers)
	require.Len(t, cov, 3)
	for src, set := range cov {
		assert.Equal(t, []coverage.Range{{Start: 0, End: 2 * perWriter / 3}}, set.Ranges(), "the union of both writers' ranges of %s, merged", src)
		assert.Equal(t, raw[src].Ranges(), set.Ranges(), "coverage of %s is exactly the stored offsets", src)
	}
	assertCoverageWithinRaw(t, cov, raw)

	out, code := runProduct(t, replayConfig(httpURL, table, "where:\n  source: orders/2\nrequire_complete: true\n", filepath.Join(t.TempDir(), "all.jsonl")))
	require.Zero(t, code, "replay failed:\n%s", tail(out, 4000))
	assert.Contains(t, out, `coverage of source \"orders/2\": durable [0,10000)`)
	assert.Contains(t, out, "coverage complete for")
}

// TestRecoveryCrashLeavesCoverageBehind: the emulator stalls the acks of the
// coverage table alone (a test-only per-table fault), so raw rows are acked
// while their coverage is not confirmed; the writer is killed with SIGKILL
// mid-run. Every range the coverage table then holds names only offsets
// whose raw rows are stored, and it covers fewer offsets than were stored:
// coverage behind the data, never ahead.
func TestRecoveryCrashLeavesCoverageBehind(t *testing.T) {
	t.Parallel()
	const table = "main.raw.crash"
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--iceberg-lag", "-1s")
	body, err := json.Marshal(map[string]any{"tables": map[string]any{table + "_zb_coverage": map[string]any{"ack_stall": true}}})
	require.NoError(t, err)
	putFaults(t, httpURL, string(body))

	p := startProduct(t, writerConfig(httpURL, grpcURL, table, "crashing_writer", 0, 500, kafkaMapping(0, 1)))
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	stored := func(tbl string) int64 {
		ti, err := fetchTableInfo(httpURL, tbl)
		if err != nil {
			return 0 // not readable yet: counts as nothing stored
		}
		return ti.RowCount
	}
	// Wait until coverage rows were written (the first flush, stored but
	// never acked) and raw rows kept coming after them.
	deadline := time.Now().Add(60 * time.Second)
	var covAt int64
	for {
		select {
		case err := <-exited:
			t.Fatalf("the writer ended before the kill (%v):\n%s", err, tail(p.out.String(), 4000))
		case <-time.After(50 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "no coverage row within 60s:\n%s", tail(p.out.String(), 4000))
		if covAt == 0 && stored(table+"_zb_coverage") > 0 {
			covAt = stored(table)
		}
		if covAt > 0 && stored(table) > covAt+20_000 {
			break
		}
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-exited
	require.NotNil(t, p.cmd.ProcessState)
	assert.False(t, p.cmd.ProcessState.Success(), "killed")

	// The coverage rows were received, never acknowledged: the writer died
	// with its coverage writes in flight, after the raw acks they record.
	stats := emulatorStats(t, httpURL)
	covStats := stats.Tables[table+"_zb_coverage"]
	assert.Positive(t, covStats.RowsReceived)
	assert.Zero(t, covStats.RowsAcked, "the coverage table's acks were stalled")
	assert.Positive(t, stats.Tables[table].RowsAcked)

	raw, n := rawOffsets(t, httpURL, table)
	cov, _ := coverageBySource(t, httpURL, table+"_zb_coverage")
	require.NotEmpty(t, cov)
	assertCoverageWithinRaw(t, cov, raw)
	var covered int64
	for _, set := range cov {
		covered += set.Count()
	}
	t.Logf("after SIGKILL: %d raw rows stored, %d offsets covered", n, covered)
	assert.Less(t, covered, int64(n), "coverage lags the data")
}

// TestReplayRefusalEndsThePipeline: a table that cannot be replayed ends
// the replay at once with one ERROR line naming every failed precondition
// and exit status 3 — whereas an unreachable workspace is retried with
// back-off and the pipeline keeps running.
func TestReplayRefusalEndsThePipeline(t *testing.T) {
	t.Parallel()
	binaries(t)
	began := time.Now()
	httpURL, _, _ := startEmulatorProcess(t)
	t.Logf("emulator up in %s", time.Since(began).Round(time.Millisecond))
	require.NoError(t, ucAt(t, httpURL, recoveryWH).Execute(context.Background(), "CREATE TABLE main.raw.plain (id BIGINT NOT NULL, msg STRING)"))

	for _, tc := range []struct {
		table string
		want  []string
	}{
		{"main.raw.plain", []string{catalog.PreIcebergReads, catalog.PreColumnMapping, catalog.PreDeletionVectors}},
		{"main.raw.missing", []string{"table main.raw.missing does not exist"}},
	} {
		began := time.Now()
		out, code := runProduct(t, replayConfig(httpURL, tc.table, "", filepath.Join(t.TempDir(), "out.jsonl")))
		assert.Equal(t, zerobusreplay.RefusedExitCode, code, "%s:\n%s", tc.table, tail(out, 4000))
		t.Logf("%s refused in %s", tc.table, time.Since(began).Round(time.Millisecond))
		assert.Less(t, time.Since(began), 20*time.Second, "refused at once, not retried")
		assert.Equal(t, 1, strings.Count(out, "refused, nothing replayed"), "logged once:\n%s", tail(out, 4000))
		assert.NotContains(t, out, "Failed to connect", "a refusal is not retried")
		for _, w := range tc.want {
			assert.Contains(t, out, w, "%s: the refusal names it", tc.table)
		}
	}

	// Unreachable: the engine retries Connect with back-off; the pipeline
	// stays up until stopped.
	closed := "http://" + freeAddr(t)
	retryBegan := time.Now()
	p := startProduct(t, replayConfig(closed, "main.raw.plain", "workspace_timeout: 1s\n", filepath.Join(t.TempDir(), "out.jsonl")))
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	retried := time.After(20 * time.Second)
	for strings.Count(p.out.String(), "Failed to connect") < 2 {
		select {
		case err := <-exited:
			t.Fatalf("an unreachable workspace ended the pipeline (%v):\n%s", err, tail(p.out.String(), 4000))
		case <-retried:
			t.Fatalf("Connect was not retried:\n%s", tail(p.out.String(), 4000))
		case <-time.After(50 * time.Millisecond):
		}
	}
	assert.NotContains(t, p.out.String(), "refused, nothing replayed")
	t.Logf("retried twice after %s", time.Since(retryBegan).Round(time.Millisecond))
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	defer func(began time.Time) { t.Logf("stopped in %s", time.Since(began).Round(time.Millisecond)) }(time.Now())
	select {
	case <-exited:
		assert.Zero(t, p.cmd.ProcessState.ExitCode(), "stopped, not refused")
	case <-time.After(15 * time.Second):
		t.Fatal("did not stop on SIGINT")
	}
}
