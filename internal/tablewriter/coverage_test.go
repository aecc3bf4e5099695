package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/coverage"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

const testCoverageTable = testTable + CoverageSuffix

// covRow is a test row that carries its source and offset beside its body,
// as a Kafka message carries them in its metadata.
type covRow struct {
	testRow
	src, off string
}

func covRows(src string, from, to int64) []Row {
	var out []Row
	for o := from; o < to; o++ {
		out = append(out, covRow{testRow: testRow{b: []byte(fmt.Sprintf(`{"id":%d,"msg":"m"}`, o))}, src: src, off: itoa(o)})
	}
	return out
}

// coverageOn turns coverage on with flushes only when a test asks (Flush,
// Close).
func coverageOn(c *Config) {
	c.Provision = true
	c.Coverage = &CoverageConfig{
		Position: func(r Row) (string, string, error) {
			cr, ok := r.(covRow)
			if !ok {
				return "", "", errors.New("row has no position")
			}
			return cr.src, cr.off, nil
		},
		FlushInterval: time.Hour,
		FlushRanges:   1 << 30,
	}
}

// durableRows returns the rows of table the fake service made durable:
// those below each stream's durable watermark, stream by stream.
func durableRows(t *testing.T, o *ingestfake.Opener, table string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, s := range o.Streams() {
		if s.Table() != table {
			continue
		}
		durable, at := s.Durable(), uint64(0)
		for _, rec := range s.Records() {
			for r := 0; r < int(rec.NumRows()); r, at = r+1, at+1 {
				if at >= durable {
					break
				}
				row := map[string]any{}
				for c, f := range rec.Schema().Fields() {
					switch a := rec.Column(c).(type) {
					case *array.LargeString:
						row[f.Name] = a.Value(r)
					case *array.Int64:
						row[f.Name] = a.Value(r)
					}
				}
				out = append(out, row)
			}
		}
	}
	return out
}

// coverageSets union-merges the durable coverage rows by source (and, with
// writer != "", only that writer's).
func coverageSets(t *testing.T, o *ingestfake.Opener, writer string) map[string]*coverage.RangeSet {
	t.Helper()
	out := map[string]*coverage.RangeSet{}
	for _, r := range durableRows(t, o, testCoverageTable) {
		if writer != "" && r[coverage.ColWriterID] != writer {
			continue
		}
		src := r[coverage.ColSource].(string)
		if out[src] == nil {
			out[src] = &coverage.RangeSet{}
		}
		out[src].Add(r[coverage.ColStart].(int64), r[coverage.ColEnd].(int64))
	}
	return out
}

// rawSets is what the raw table durably holds, by source, from its
// _zb_source and _zb_offset columns.
func rawSets(t *testing.T, o *ingestfake.Opener) map[string]*coverage.RangeSet {
	t.Helper()
	out := map[string]*coverage.RangeSet{}
	for _, r := range durableRows(t, o, testTable) {
		src := r[arrowconv.SourceColumn].(string)
		if out[src] == nil {
			out[src] = &coverage.RangeSet{}
		}
		off := r[arrowconv.OffsetColumn].(int64)
		out[src].Add(off, off+1)
	}
	return out
}

// requireBehind asserts coverage never leads the data: every covered
// offset is durable in the raw table.
func requireBehind(t *testing.T, cov, raw map[string]*coverage.RangeSet) {
	t.Helper()
	for src, set := range cov {
		for _, r := range set.Ranges() {
			require.NotNil(t, raw[src], "coverage names source %s that has no durable row", src)
			require.Empty(t, raw[src].Gaps(r.Start, r.End), "coverage %s of %s names rows that are not durable", r, src)
		}
	}
}

func flush(t *testing.T, w *Writer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, w.Coverage().Flush(ctx))
}

// An existing table without the coverage columns gets them (provisioning);
// the coverage table is created; each row carries its source and offset;
// a row whose offset is not an integer, or whose position fails, fails
// alone naming why.
func TestCoverageStampsPositionsAndProvisions(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, coverageOn, nil)
	ts, err := h.cat.Describe(context.Background(), testTable)
	require.NoError(t, err)
	for _, name := range []string{arrowconv.SourceColumn, arrowconv.OffsetColumn} {
		_, ok := ts.Column(name)
		assert.True(t, ok, "the catalog added %s", name)
	}
	cts, err := h.cat.Describe(context.Background(), testCoverageTable)
	require.NoError(t, err)
	require.NotNil(t, cts, "the coverage table was provisioned")
	for _, name := range []string{"writer_id", "source", "start", "end", arrowconv.EmitTimestampColumn} {
		_, ok := cts.Column(name)
		assert.True(t, ok, "coverage table column %s", name)
	}
	assert.True(t, catalog.IcebergReadsOn(cts.Properties), "zerobus_replay reads the coverage table through Iceberg: %v", cts.Properties)

	batch := covRows("orders/0", 0, 3)
	batch = append(batch, covRow{testRow: testRow{b: []byte(`{"id":9,"msg":"x"}`)}, src: "orders/0", off: "nine"})
	batch = append(batch, testRow{b: []byte(`{"id":10,"msg":"y"}`)})
	failed := h.write(t, batch)
	require.Len(t, failed, 2)
	assert.Contains(t, failed[3], `coverage offset "nine" is not an integer`)
	assert.Contains(t, failed[3], arrowconv.OffsetColumn)
	assert.Contains(t, failed[4], "row has no position")

	raw := durableRows(t, h.opener, testTable)
	require.Len(t, raw, 3, "only the rows with a position landed")
	for _, r := range raw {
		assert.Equal(t, "orders/0", r[arrowconv.SourceColumn])
		assert.Equal(t, r["id"], r[arrowconv.OffsetColumn])
	}
	flush(t, h.w)
	cov := coverageSets(t, h.opener, "test")
	require.Contains(t, cov, "orders/0")
	assert.Equal(t, []coverage.Range{{Start: 0, End: 3}}, cov["orders/0"].Ranges())
}

// Without provisioning, a table lacking the coverage columns is refused at
// Open, naming the columns and the fix.
func TestCoverageColumnsMissingWithoutProvisioningFailsOpen(t *testing.T) {
	cat := catalogfake.New()
	cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	c := Config{Table: testTable, WriterID: "test", Pool: testPoolConfig()}
	coverageOn(&c)
	c.Provision = false
	w := New(c, ingestfake.NewOpener(ingestfake.Config{}), cat, nil, nil)
	defer func() { _ = w.Close(context.Background()) }()
	err := w.Open(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "_zb_source STRING")
	assert.Contains(t, err.Error(), "_zb_offset BIGINT")
	assert.Contains(t, err.Error(), "ADD COLUMNS")
	assert.Contains(t, err.Error(), "catalog.provision")
}

// A range advances only after the raw rows' durable ack: with the rows
// submitted but not acknowledged, a flush writes nothing; acknowledging one
// stream's batch covers exactly that batch.
func TestCoverageAdvancesOnlyAfterRawAck(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true, KeepRecords: true}, coverageOn, nil)
	// The coverage stream, opened at the first flush, acknowledges by itself.
	h.opener.SetConfig(ingestfake.Config{KeepRecords: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	results := make(chan error, 2)
	write := func(from, to int64) {
		go func() {
			_, err := h.w.Write(ctx, covRows("t/0", from, to), nil)
			results <- err
		}()
	}
	streamWith := func(rows uint64) *ingestfake.Stream {
		for _, s := range h.opener.Streams() {
			if s.Table() == testTable && s.Submitted() >= rows && s.Durable() < s.Submitted() {
				return s
			}
		}
		return nil
	}
	write(0, 10)
	require.Eventually(t, func() bool { return streamWith(10) != nil }, 10*time.Second, time.Millisecond)
	first := streamWith(10)

	flush(t, h.w)
	assert.Empty(t, h.w.Coverage().Covered("t/0"), "submitted is not durable: nothing covered")
	assert.Empty(t, coverageSets(t, h.opener, ""), "no coverage row before the raw ack")

	write(10, 20)
	require.Eventually(t, func() bool {
		var n uint64
		for _, s := range h.opener.Streams() {
			if s.Table() == testTable {
				n += s.Submitted()
			}
		}
		return n == 20
	}, 10*time.Second, time.Millisecond)
	first.AckAll()
	require.NoError(t, <-results)
	// Only the first batch's stream acknowledged: if both batches share it,
	// both are covered, else only the first.
	flush(t, h.w)
	cov := coverageSets(t, h.opener, "")
	requireBehind(t, cov, rawSets(t, h.opener))
	require.Contains(t, cov, "t/0")
	assert.True(t, cov["t/0"].Covers(0, 10))

	for _, s := range h.opener.Streams() {
		if s.Table() == testTable {
			s.AckAll()
		}
	}
	require.NoError(t, <-results)
	flush(t, h.w)
	cov = coverageSets(t, h.opener, "")
	assert.Equal(t, []coverage.Range{{Start: 0, End: 20}}, cov["t/0"].Ranges())
	requireBehind(t, cov, rawSets(t, h.opener))
}

// Two writers with different ids write overlapping sources at once; the
// coverage table's rows, union-merged, are exactly the offsets written, gap
// included, whichever writer flushed last (never last-write-wins).
func TestCoverageOfTwoConcurrentWritersUnionMerges(t *testing.T) {
	cat := catalogfake.New()
	cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	opener := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true, AckLatency: time.Millisecond})
	newW := func(id string) *Writer {
		c := Config{Table: testTable, WriterID: id, Pool: testPoolConfig()}
		coverageOn(&c)
		w := New(c, opener, cat, nil, nil)
		require.NoError(t, w.Open(context.Background()))
		return w
	}
	w1, w2 := newW("writer-1"), newW("writer-2")
	plan := map[*Writer][][3]any{
		w1: {{"t/0", int64(0), int64(100)}, {"t/1", int64(50), int64(150)}},
		w2: {{"t/0", int64(100), int64(150)}, {"t/0", int64(160), int64(200)}, {"t/1", int64(0), int64(60)}},
	}
	var wg sync.WaitGroup
	for w, spans := range plan {
		for _, sp := range spans {
			for lo := sp[1].(int64); lo < sp[2].(int64); lo += 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs, err := w.Write(context.Background(), covRows(sp[0].(string), lo, min(lo+10, sp[2].(int64))), nil)
					assert.NoError(t, err)
					assert.Empty(t, errs)
				}()
			}
		}
		// Flushes interleave with the writes: rows of one (writer, source)
		// are written more than once, growing.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				_ = w.Coverage().Flush(context.Background())
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, w1.Close(ctx))
	require.NoError(t, w2.Close(ctx))

	all := coverageSets(t, opener, "")
	assert.Equal(t, []coverage.Range{{Start: 0, End: 150}, {Start: 160, End: 200}}, all["t/0"].Ranges())
	assert.Equal(t, []coverage.Range{{Start: 150, End: 160}}, all["t/0"].Gaps(0, 200), "the offsets nobody wrote are a gap")
	assert.Equal(t, []coverage.Range{{Start: 0, End: 150}}, all["t/1"].Ranges())
	assert.Equal(t, []coverage.Range{{Start: 0, End: 100}}, coverageSets(t, opener, "writer-1")["t/0"].Ranges())
	assert.Equal(t, []coverage.Range{{Start: 0, End: 60}}, coverageSets(t, opener, "writer-2")["t/1"].Ranges())
	requireBehind(t, all, rawSets(t, opener))
	for src, set := range rawSets(t, opener) {
		assert.Equal(t, set.Ranges(), all[src].Ranges(), "after a clean close, coverage of %s is exactly the raw rows", src)
	}

	// Last-write-wins would lose ranges: the last row of a source alone is
	// not its coverage.
	rows := durableRows(t, opener, testCoverageTable)
	last := map[string]coverage.Range{}
	for _, r := range rows {
		last[r[coverage.ColSource].(string)] = coverage.Range{Start: r[coverage.ColStart].(int64), End: r[coverage.ColEnd].(int64)}
	}
	lastOnly := last["t/0"].Len() + last["t/1"].Len()
	assert.Less(t, lastOnly, all["t/0"].Count()+all["t/1"].Count(), "the union holds more than the last rows")
}

// A crash between the raw ack and the coverage write leaves coverage
// behind the data, never ahead: the rows are durable, the coverage table
// lacks their last ranges.
func TestCoverageCrashBetweenRawAckAndCoverageWriteLags(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, coverageOn, nil)
	require.Empty(t, h.write(t, covRows("t/0", 0, 50)))
	flush(t, h.w)
	assert.Equal(t, []coverage.Range{{Start: 0, End: 50}}, coverageSets(t, h.opener, "")["t/0"].Ranges())

	// The coverage service stops answering: its stream dies, and the one
	// the next flush opens never acknowledges.
	h.opener.SetConfig(ingestfake.Config{KeepRecords: true, ManualAck: true})
	for _, s := range h.opener.Streams() {
		if s.Table() == testCoverageTable {
			s.Poison(ingestfake.ErrTransient("coverage endpoint gone"))
		}
	}
	require.Empty(t, h.write(t, covRows("t/0", 50, 80)), "raw writes never wait on coverage")
	require.Empty(t, h.write(t, covRows("t/1", 0, 20)))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	require.NoError(t, h.w.Close(ctx), "a coverage failure never fails the raw writer")
	assert.Less(t, time.Since(start), 3*time.Second)

	raw := rawSets(t, h.opener)
	cov := coverageSets(t, h.opener, "")
	assert.Equal(t, []coverage.Range{{Start: 0, End: 80}}, raw["t/0"].Ranges(), "the raw rows are all durable")
	assert.Equal(t, []coverage.Range{{Start: 0, End: 20}}, raw["t/1"].Ranges())
	assert.Equal(t, []coverage.Range{{Start: 0, End: 50}}, cov["t/0"].Ranges(), "coverage lags: the last ranges are missing")
	assert.NotContains(t, cov, "t/1")
	requireBehind(t, cov, raw)
}

// With DedupView, every reconcile of the writer's table asks for its
// deduplicating view (named, or <table>_dedup), and none of the coverage
// table's does: the view deduplicates raw rows by their source position.
func TestDedupViewAskedForTheTableOnly(t *testing.T) {
	for _, name := range []string{"", "main.default.readers_view"} {
		h := newHarness(t, ingestfake.Config{}, func(c *Config) {
			coverageOn(c)
			c.DedupView, c.DedupViewName = true, name
		}, nil)
		want := name
		if want == "" {
			want = testTable + catalog.DedupViewSuffix
		}
		own, cov := 0, 0
		for _, d := range h.cat.Reconciled() {
			switch d.FullName {
			case testTable:
				own++
				assert.Equal(t, want, d.DedupView)
			case testCoverageTable:
				cov++
				assert.Empty(t, d.DedupView, "the coverage table has no view")
			}
		}
		assert.Positive(t, own, "the table was reconciled")
		assert.Positive(t, cov, "the coverage table was reconciled")
	}
	// A writer without coverage (the dead-letter table's, made from the
	// same config) asks for no view: its rows have no source position.
	h := newHarness(t, ingestfake.Config{}, func(c *Config) {
		c.Provision, c.DedupView = true, true
	}, nil)
	for _, d := range h.cat.Reconciled() {
		assert.Empty(t, d.DedupView, d.FullName)
	}
	assert.Positive(t, h.cat.ReconcileCount())
}
