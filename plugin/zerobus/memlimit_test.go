package zerobus

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/memlimit"
)

// unlimited runs the test with no soft memory limit, GOGC unset and the
// default GC percent, and restores the process's limit and percent after.
func unlimited(t *testing.T) {
	t.Setenv("GOGC", "")
	prev, prevPct := debug.SetMemoryLimit(math.MaxInt64), debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetMemoryLimit(prev); debug.SetGCPercent(prevPct) })
	runtime.GC()
}

func TestConnectSetsTheSoftMemoryLimitFromTheBounds(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	unlimited(t)
	h := newHarness(t, ingestfake.Config{}, "", nil)
	h.connect(t)
	// 48 MiB + max_in_flight_bytes (64 MiB) + max_in_flight (16) × 4 ×
	// batching.byte_size (1 MiB), the defaults.
	assert.Equal(t, int64(176<<20), debug.SetMemoryLimit(-1))
	paced := memlimit.Pacing()
	assert.Greater(t, paced, 100, "GOGC unset and a test's small live heap: the collector is paced")
	assert.Equal(t, paced, debug.SetGCPercent(paced), "at the percent the runtime runs")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, h.out.Close(ctx))
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "closing the output gives its share back")
	assert.Equal(t, 100, debug.SetGCPercent(100), "and ends the pacing")
}

func TestConnectLeavesTheCollectorToGOGC(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	unlimited(t)
	t.Setenv("GOGC", "100")
	h := newHarness(t, ingestfake.Config{}, "", nil)
	h.connect(t)
	assert.Equal(t, int64(176<<20), debug.SetMemoryLimit(-1), "the limit is GOMEMLIMIT's business only")
	assert.Zero(t, memlimit.Pacing(), "GOGC in the environment: no pacing")
	assert.Equal(t, 100, debug.SetGCPercent(100))
}

func TestConnectLeavesTheMemoryLimitToGOMEMLIMIT(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "1GiB")
	unlimited(t)
	h := newHarness(t, ingestfake.Config{}, "", nil)
	h.connect(t)
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "the user's GOMEMLIMIT, read by the runtime at start, wins")
}

func TestConnectWithoutAByteBoundSetsNoLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	unlimited(t)
	h := newHarness(t, ingestfake.Config{}, "batching:\n  count: 500\n  period: 200ms\n", nil)
	h.connect(t)
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "a count-only batching bounds no batch's bytes: no estimate")
}
