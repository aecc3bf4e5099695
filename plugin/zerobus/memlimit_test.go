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

// connectUnlimited connects an output (extraYAML added to its config) with
// GOMEMLIMIT set to gomemlimit and no soft memory limit in force, which is
// restored after the test.
func connectUnlimited(t *testing.T, gomemlimit, extraYAML string) *harness {
	t.Setenv("GOMEMLIMIT", gomemlimit)
	prev := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	runtime.GC()
	h := newHarness(t, ingestfake.Config{}, extraYAML, nil)
	h.connect(t)
	return h
}

func TestConnectSetsTheSoftMemoryLimitFromTheBounds(t *testing.T) {
	h := connectUnlimited(t, "", "")
	// 48 MiB + max_in_flight_bytes (64 MiB) + max_in_flight (16) × 4 ×
	// batching.byte_size (1 MiB), the defaults.
	assert.Equal(t, int64(176<<20), debug.SetMemoryLimit(-1))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, h.out.Close(ctx))
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "closing the output gives its share back")
}

func TestConnectLeavesTheMemoryLimitToGOMEMLIMIT(t *testing.T) {
	connectUnlimited(t, "1GiB", "")
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "the user's GOMEMLIMIT, read by the runtime at start, wins")
}

func TestConnectWithoutAByteBoundSetsNoLimit(t *testing.T) {
	connectUnlimited(t, "", "batching:\n  count: 500\n  period: 200ms\n")
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "a count-only batching bounds no batch's bytes: no estimate")
}
