package coverage

import (
	"context"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

const covTable = "main.default.events_zb_coverage"

func newTestRecorder(t *testing.T, o *ingestfake.Opener) *Recorder {
	t.Helper()
	cols := append(Columns(), typemap.Column{Name: arrowconv.EmitTimestampColumn, Type: typemap.Primitive(typemap.Timestamp), Nullable: true})
	r, err := NewRecorder(Config{Table: covTable, WriterID: "w1", Columns: cols, FlushInterval: time.Hour, FlushRanges: 1 << 30}, o, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func set(rs ...Range) map[string]*RangeSet {
	var s RangeSet
	for _, r := range rs {
		s.AddRange(r)
	}
	return map[string]*RangeSet{"t/0": &s}
}

// written returns the (start, end) rows the coverage streams made durable.
func written(o *ingestfake.Opener) [][2]int64 {
	var out [][2]int64
	for _, s := range o.Streams() {
		at := uint64(0)
		for _, rec := range s.Records() {
			st := rec.Column(rec.Schema().FieldIndices(ColStart)[0]).(*array.Int64)
			en := rec.Column(rec.Schema().FieldIndices(ColEnd)[0]).(*array.Int64)
			for i := 0; i < int(rec.NumRows()); i, at = i+1, at+1 {
				if at < s.Durable() {
					out = append(out, [2]int64{st.Value(i), en.Value(i)})
				}
			}
		}
	}
	return out
}

// A flush writes, per source, the merged durable ranges that a change
// touched: the rows grow coarser, and the union of all rows is the durable
// set.
func TestRecorderFlushWritesTheMergedRangesThatChanged(t *testing.T) {
	o := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true})
	r := newTestRecorder(t, o)
	ctx := context.Background()
	require.NoError(t, r.Flush(ctx), "nothing to write")
	assert.Empty(t, o.Streams(), "no stream opened for nothing")

	r.Durable(set(Range{0, 10}))
	require.NoError(t, r.Flush(ctx))
	r.Durable(set(Range{10, 20}, Range{30, 40}))
	require.NoError(t, r.Flush(ctx))
	r.Durable(set(Range{50, 60}))
	require.NoError(t, r.Flush(ctx))
	assert.Equal(t, [][2]int64{{0, 10}, {0, 20}, {30, 40}, {50, 60}}, written(o))
	assert.Equal(t, []Range{{0, 20}, {30, 40}, {50, 60}}, r.Covered("t/0"))
	assert.Equal(t, int64(4), r.Stats().Written)
	require.Len(t, o.Streams(), 1, "one stream for all flushes")
	assert.Equal(t, covTable, o.Streams()[0].Table())
}

// A failed coverage write keeps the changes: the next flush, on a new
// stream, writes them.
func TestRecorderKeepsChangesAcrossAFailedWrite(t *testing.T) {
	o := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true})
	r := newTestRecorder(t, o)
	ctx := context.Background()
	r.Durable(set(Range{0, 5}))
	require.NoError(t, r.Flush(ctx))
	o.Streams()[0].Poison(ingestfake.ErrTransient("gone"))
	o.FailNextOpens(ingestfake.ErrTransient("still gone"))

	r.Durable(set(Range{5, 8}))
	require.Error(t, r.Flush(ctx), "the dead stream fails the submit")
	require.Error(t, r.Flush(ctx), "the reopen fails")
	assert.Equal(t, int64(2), r.Stats().Failures)
	assert.Equal(t, 1, r.Stats().Pending)
	require.NoError(t, r.Flush(ctx))
	assert.Equal(t, [][2]int64{{0, 5}, {0, 8}}, written(o))
	assert.Equal(t, 0, r.Stats().Pending)
}

// A coverage table without the expected columns is refused, naming the
// column and the fix.
func TestRecorderRefusesATableWithoutItsColumns(t *testing.T) {
	_, err := NewRecorder(Config{Table: covTable, Columns: Columns()[:2]}, ingestfake.NewOpener(ingestfake.Config{}), nil)
	require.ErrorContains(t, err, "lacks column start BIGINT")
	assert.ErrorContains(t, err, "catalog.provision")
}
