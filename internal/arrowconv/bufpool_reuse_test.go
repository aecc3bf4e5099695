//go:build !race

package arrowconv

import (
	"runtime"
	"runtime/debug"
	"slices"
	"testing"

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
	size := 0
	for _, col := range res.Record.Columns() {
		for _, b := range col.Data().Buffers() {
			if b != nil {
				size += b.Len()
			}
		}
	}
	res.Record.Release()

	// A collection empties sync.Pools (over two cycles): keep the GC out of
	// the measurement so that it counts what the pool fails to recycle.
	// sync.Pool may still miss now and then (an item put on one P is not
	// seen from another), so the median batch is judged.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	perBatch := make([]int, 21)
	for i := range perBatch {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		res, err := c.ConvertJSON(rows)
		require.NoError(t, err)
		res.Record.Release()
		runtime.ReadMemStats(&after)
		perBatch[i] = int(after.TotalAlloc - before.TotalAlloc)
	}
	slices.Sort(perBatch)
	median := perBatch[len(perBatch)/2]
	require.Less(t, median, size/4, "allocated %d bytes in the median batch for a %d-byte record", median, size)
}

// TestStructuredRowsAllocateNothingPerRow checks that converting structured
// rows (json.Number numbers, a MAP column) reads their strings in place: the
// median batch makes far fewer allocations than it has rows (copying each
// number or map key made about five per row).
func TestStructuredRowsAllocateNothingPerRow(t *testing.T) {
	c := mustConverter(t, benchDefs, Options{})
	rows := structuredRows(t, benchRows(2048))
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // see TestReleasedStorageIsReused
	perBatch := make([]int, 11)
	for i := range perBatch {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		res, err := c.ConvertStructured(rows)
		require.NoError(t, err)
		require.Empty(t, res.RowErrors)
		res.Record.Release()
		runtime.ReadMemStats(&after)
		perBatch[i] = int(after.Mallocs - before.Mallocs)
	}
	slices.Sort(perBatch)
	median := perBatch[len(perBatch)/2]
	require.Less(t, median, len(rows)/8, "%d allocations in the median batch of %d rows", median, len(rows))
}
