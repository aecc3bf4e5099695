//go:build !race

package arrowconv

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/require"
)

// This test is left out of race-detector builds, where sync.Pool drops a
// share of what it is given on purpose (to shake out misuse), so that reuse
// is not what it measures there; TestReleaseReturnsStorage runs in both.

// TestReleasedStorageIsReused checks that batches whose records are released
// recycle their column storage: the bytes allocated per batch are a small
// fraction of the record's size (without the pool they exceed it).
func TestReleasedStorageIsReused(t *testing.T) {
	c := mustConverter(t, benchDefs, Options{})
	rows := benchRows(4096)
	res, err := c.ConvertJSON(rows)
	require.NoError(t, err)
	size := storage(res.Record, (*memory.Buffer).Len)
	res.Record.Release()

	median := medianBatch(21, heapBytes, func() {
		res, err := c.ConvertJSON(rows)
		require.NoError(t, err)
		res.Record.Release()
	})
	require.Less(t, median, size/4, "allocated %d bytes in the median batch for a %d-byte record", median, size)
}

// TestFullBatchAfterASmallOneReusesStorage checks that a batch sized by the
// engine's count after a small one (flushed by the batching period) takes
// string storage for its own rows from the pool: sized by the small batch's
// bytes, its 128-byte messages outgrew a 16 KiB buffer by appends, about
// 1 MB of fresh memory each time.
func TestFullBatchAfterASmallOneReusesStorage(t *testing.T) {
	c := mustConverter(t, kafkaRowDefs, Options{})
	small, full := kafkaRows(100), kafkaRows(4000)
	convert := func(rows [][]byte) {
		res, err := c.ConvertJSON(rows)
		require.NoError(t, err)
		require.Empty(t, res.RowErrors)
		res.Record.Release()
	}
	convert(full) // fill the pool
	median := medianBatch(21, heapBytes, func() {
		convert(small)
		convert(full)
	})
	require.Less(t, median, 128<<10, "allocated %d bytes in the median pair of batches of 100 and 4,000 rows", median)
}

// TestStateKeepsItsSizesOverCollections checks that a batch converted after
// two collections allocates its string data once, at the size the last
// batch needed: with the conversion states in a sync.Pool, the collections
// took the state and its sizes with them, and each string column grew from
// nothing by appends (about twice its data allocated). The collections
// empty the storage pool too, so the batch allocates its record once: the
// bound is the record's size and a quarter.
func TestStateKeepsItsSizesOverCollections(t *testing.T) {
	c := mustConverter(t, kafkaRowDefs, Options{})
	rows := kafkaRows(4000)
	for range 2 { // the first sizes the second
		res, err := c.ConvertJSON(rows)
		require.NoError(t, err)
		res.Record.Release()
	}
	res, err := c.ConvertJSON(rows)
	require.NoError(t, err)
	size := storage(res.Record, (*memory.Buffer).Cap)
	res.Record.Release()
	median := medianBatch(5, heapBytes, func() {
		runtime.GC()
		runtime.GC()
		res, err := c.ConvertJSON(rows)
		require.NoError(t, err)
		res.Record.Release()
	})
	require.Less(t, median, size+size/4, "allocated %d bytes in the median batch after two collections, for a record of %d bytes of storage", median, size)
}

// TestStructuredRowsAllocateNothingPerRow checks that converting structured
// rows (json.Number numbers, a MAP column) reads their strings in place: the
// median batch makes far fewer allocations than it has rows (copying each
// number or map key made about five per row).
func TestStructuredRowsAllocateNothingPerRow(t *testing.T) {
	c := mustConverter(t, benchDefs, Options{})
	requireFewMallocsPerRow(t, c, structuredRows(t, benchRows(2048)))
}

// TestStructuredMapsAllocateNothingPerRow checks that putting a Go map of
// more than a couple of entries into a MAP column sorts its entries without
// allocating per row (a fresh key slice per map made one allocation a row).
func TestStructuredMapsAllocateNothingPerRow(t *testing.T) {
	c := mustConverter(t, "m MAP<STRING, STRING>", Options{})
	rows := make([]StructuredRow, 2048)
	for i := range rows {
		m := map[string]any{"e": "5", "d": "4", "c": "3", "b": "2", "a": "1", "f": fmt.Sprint(i)}
		rows[i] = msg{structured: map[string]any{"m": m}, hasStruct: true}
	}
	requireFewMallocsPerRow(t, c, rows)
}

// requireFewMallocsPerRow converts rows with c in 11 batches, each without
// row errors, and requires the median batch to make fewer allocations than
// an eighth of its rows.
func requireFewMallocsPerRow(t *testing.T, c *Converter, rows []StructuredRow) {
	t.Helper()
	median := medianBatch(11, mallocs, func() {
		res, err := c.ConvertStructured(rows)
		require.NoError(t, err)
		require.Empty(t, res.RowErrors)
		res.Record.Release()
	})
	require.Less(t, median, len(rows)/8, "%d allocations in the median batch of %d rows", median, len(rows))
}

// storage sums the buffers of rec's columns, each counted by size (its
// length or its capacity).
func storage(rec arrow.RecordBatch, size func(*memory.Buffer) int) int {
	n := 0
	for _, col := range rec.Columns() {
		for _, b := range col.Data().Buffers() {
			if b != nil {
				n += size(b)
			}
		}
	}
	return n
}

// medianBatch runs batch the given number of times and returns the median
// growth of stat (a runtime.MemStats counter) over one run.
//
// A collection empties sync.Pools (over two cycles): the GC is kept out of
// the measurement so that it counts what the pools fail to recycle.
// sync.Pool may still miss now and then (an item put on one P is not seen
// from another), so the median batch is judged.
func medianBatch(batches int, stat func(*runtime.MemStats) uint64, batch func()) int {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	perBatch := make([]int, batches)
	for i := range perBatch {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		batch()
		runtime.ReadMemStats(&after)
		perBatch[i] = int(stat(&after) - stat(&before))
	}
	slices.Sort(perBatch)
	return perBatch[len(perBatch)/2]
}

// heapBytes and mallocs are the MemStats counters of bytes and of heap
// objects allocated.
func heapBytes(m *runtime.MemStats) uint64 { return m.TotalAlloc }
func mallocs(m *runtime.MemStats) uint64   { return m.Mallocs }
