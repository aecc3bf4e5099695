package memlimit

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGCPercentPutsTheHeapGoalAtTheFloor(t *testing.T) {
	for _, c := range []struct {
		live int64
		want int
	}{
		{0, maxGCPercent},
		{2 << 20, maxGCPercent}, // 2300 asked for, capped
		{8 << 20, 500},          // 8 + 40 = 48 MiB
		{16 << 20, 200},         // 16 + 32 = 48 MiB
		{HeapFloor / 2, 100},
		{HeapFloor, 100}, // live past half the floor: the default
		{1 << 30, 100},
	} {
		assert.Equal(t, c.want, gcPercentFor(c.live), "live %d MiB", c.live>>20)
	}
}

// waitPacing waits until the pacing's GC percent satisfies ok, forcing a
// collection at each try (the pacing runs after each).
func waitPacing(t *testing.T, ok func(int) bool, msg string) {
	t.Helper()
	require.Eventually(t, func() bool {
		runtime.GC()
		return ok(Pacing())
	}, 5*time.Second, 10*time.Millisecond, msg)
}

func TestReservePacesTheCollectorAfterEachCycle(t *testing.T) {
	noLimit(t)
	_, set, release := Reserve(1 << 20)
	require.True(t, set)
	require.Greater(t, Pacing(), 100, "a test's small live heap: the collector may wait for the floor")
	assert.Equal(t, Pacing(), gcPercent(), "and the runtime runs at the percent set")

	// Live data past half the floor: after the next cycle, the default.
	ballast := make([]byte, HeapFloor)
	waitPacing(t, func(p int) bool { return p == 100 }, "pacing follows a larger live heap back to the default")
	runtime.KeepAlive(ballast)
	ballast = nil
	waitPacing(t, func(p int) bool { return p > 100 }, "and raises the percent again once it is gone")

	release()
	assert.Zero(t, Pacing(), "the last release stops pacing")
	assert.Equal(t, 100, gcPercent(), "and puts the default back")
}

func TestReserveLeavesTheUsersGOGCAlone(t *testing.T) {
	noLimit(t)
	t.Setenv("GOGC", "100")
	_, set, release := Reserve(1 << 20)
	defer release()
	require.True(t, set, "the limit is still set: only GOMEMLIMIT decides that")
	assert.Zero(t, Pacing(), "GOGC in the environment, even the default: no pacing")
	assert.Equal(t, 100, gcPercent())
}

func TestSomeoneElsesGCPercentEndsPacing(t *testing.T) {
	noLimit(t)
	debug.SetGCPercent(300) // set by someone else before the output starts
	_, _, release := Reserve(1 << 20)
	assert.Zero(t, Pacing(), "a percent someone else set: no pacing")
	assert.Equal(t, 300, gcPercent())
	release()

	debug.SetGCPercent(100)
	_, _, release = Reserve(1 << 20)
	require.Greater(t, Pacing(), 100)
	debug.SetGCPercent(300) // set by someone else while pacing
	waitPacing(t, func(p int) bool { return p == 0 }, "the next cycle sees it and stops pacing")
	assert.Equal(t, 300, gcPercent(), "leaving theirs")
	release()
	assert.Equal(t, 300, gcPercent(), "the release too")
}
