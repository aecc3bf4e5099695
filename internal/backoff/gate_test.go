package backoff

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// While attempts fail, one caller passes per wait, the wait growing across
// failures whoever made them; a success opens the gate for all and starts
// the waits again.
func TestGateSpacesFailingAttemptsAcrossCallers(t *testing.T) {
	now := time.Unix(0, 0)
	g := &Gate{Initial: time.Second, Max: 8 * time.Second, now: func() time.Time { return now }, rand: func() float64 { return 0 }}
	ok, _, _ := g.Pass()
	require.True(t, ok, "open: everyone passes")
	ok, _, _ = g.Pass()
	require.True(t, ok)
	g.Failed(0)
	g.Failed(0) // a second caller's failure of the same round: no extra step
	ok, left, opened := g.Pass()
	assert.False(t, ok)
	assert.Equal(t, time.Second, left)
	require.NotNil(t, opened)

	var gaps []time.Duration
	last := now
	for range 6 {
		_, left, _ := g.Pass()
		now = now.Add(left)
		ok, _, _ := g.Pass()
		require.True(t, ok, "the turn has come")
		ok, _, _ = g.Pass()
		assert.False(t, ok, "one caller per turn")
		g.Failed(0)
		gaps = append(gaps, now.Sub(last))
		last = now
	}
	s := time.Second
	assert.Equal(t, []time.Duration{s, 2 * s, 4 * s, 8 * s, 8 * s, 8 * s}, gaps, "doubling to Max across callers")

	g.Failed(30 * time.Second)
	_, left, _ = g.Pass()
	assert.Equal(t, 30*time.Second, left, "a floor (the service's wait) is honoured")

	g.Succeeded()
	select {
	case <-opened:
	default:
		t.Fatal("a success wakes the waiters")
	}
	ok, _, _ = g.Pass()
	assert.True(t, ok, "open again")
	g.Failed(0)
	_, left, _ = g.Pass()
	assert.Equal(t, time.Second, left, "the waits start again from Initial")
}
