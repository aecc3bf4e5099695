package memlimit

import (
	"math"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fastRefresh makes the refresh loop run every 10 ms for the test, so that
// it is seen to follow the live heap within the test's time.
func fastRefresh(t *testing.T) {
	prev := refreshEvery
	refreshEvery = 10 * time.Millisecond
	t.Cleanup(func() { refreshEvery = prev })
}

// noLimit runs the test with no limit, no GOMEMLIMIT and a small live
// heap (below the floor's reach), and restores the process's limit after.
func noLimit(t *testing.T) {
	runtime.GC()
	require.Less(t, floor(liveHeap()), int64(Base), "a test's live heap leaves the floor below the estimates")
	t.Setenv("GOMEMLIMIT", "")
	prev := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		mu.Lock()
		stopLocked()
		mu.Unlock()
		debug.SetMemoryLimit(prev)
	})
}

func TestShareAtTheDefaults(t *testing.T) {
	// 64 MiB of converted data plus 16 batches of 1 MiB, four times over.
	assert.Equal(t, int64(64<<20+16*4<<20), Share(64<<20, 16, 1<<20))
	assert.Zero(t, Share(64<<20, 16, 0), "a count-only policy has no byte bound: no estimate")
}

func TestReserveSumsSharesAndReleasesThem(t *testing.T) {
	noLimit(t)
	limit, set, release1 := Reserve(100 << 20)
	require.True(t, set)
	assert.Equal(t, int64(Base+100<<20), limit)
	assert.Equal(t, limit, debug.SetMemoryLimit(-1))

	limit, set, release2 := Reserve(50 << 20)
	require.True(t, set, "a second output adds its share to the limit this package set")
	assert.Equal(t, int64(Base+150<<20), limit)

	release1()
	release1() // once only
	assert.Equal(t, int64(Base+50<<20), debug.SetMemoryLimit(-1))
	release2()
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "the last release lifts the limit")
}

func TestReserveLeavesTheUsersLimitAlone(t *testing.T) {
	noLimit(t)
	t.Setenv("GOMEMLIMIT", "off")
	limit, set, release := Reserve(100 << 20)
	assert.False(t, set, "GOMEMLIMIT in the environment wins")
	assert.Equal(t, int64(math.MaxInt64), limit)
	release()

	t.Setenv("GOMEMLIMIT", "")
	debug.SetMemoryLimit(1 << 30) // set by someone else in the process
	limit, set, _ = Reserve(100 << 20)
	assert.False(t, set)
	assert.Equal(t, int64(1<<30), limit)
	assert.Equal(t, int64(1<<30), debug.SetMemoryLimit(-1))
}

func TestReserveWithoutAnEstimateSetsNothing(t *testing.T) {
	noLimit(t)
	_, set, _ := Reserve(Share(64<<20, 16, 0))
	assert.False(t, set)
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1))
}

func TestTheLimitStaysAboveTheLiveHeap(t *testing.T) {
	noLimit(t)
	fastRefresh(t)
	limit, set, release := Reserve(1 << 20)
	require.True(t, set)
	assert.Equal(t, max(int64(Base+1<<20), floor(liveHeap())), limit)

	// The process grows past the estimate: the limit follows, so the
	// collector is never left running against it.
	ballast := make([]byte, 256<<20)
	for i := range ballast {
		if i%4096 == 0 {
			ballast[i] = 1
		}
	}
	runtime.GC()
	require.GreaterOrEqual(t, liveHeap(), int64(256<<20))
	var seen atomic.Int64 // the poller may still run when Eventually gives up
	if !assert.Eventually(t, func() bool {
		seen.Store(debug.SetMemoryLimit(-1))
		return seen.Load() >= floor(256<<20)
	}, 10*time.Second, 10*time.Millisecond) {
		t.Errorf("the limit stayed at %d, below the floor %d of a 256 MiB live heap", seen.Load(), floor(256<<20))
	}
	runtime.KeepAlive(ballast)
	release()
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1))
}

func TestSomeoneElsesLimitEndsOurs(t *testing.T) {
	noLimit(t)
	fastRefresh(t)
	_, set, release := Reserve(1 << 20)
	require.True(t, set)
	debug.SetMemoryLimit(3 << 30)
	time.Sleep(50 * time.Millisecond) // a few refreshes
	assert.Equal(t, int64(3<<30), debug.SetMemoryLimit(-1), "the refresh leaves a limit it did not set")
	release()
	assert.Equal(t, int64(3<<30), debug.SetMemoryLimit(-1), "and so does the release")
}
