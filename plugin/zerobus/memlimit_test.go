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
)

// unlimited runs the test with no soft memory limit and restores the
// process's after.
func unlimited(t *testing.T) {
	prev := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
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

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, h.out.Close(ctx))
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "closing the output gives its share back")
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
