package backoff

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBackoffDoublesToCapAndResets(t *testing.T) {
	b := &Backoff{Initial: time.Second, Max: 60 * time.Second}
	var got []time.Duration
	for range 9 {
		got = append(got, b.Next())
	}
	s := time.Second
	assert.Equal(t, []time.Duration{s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 60 * s, 60 * s, 60 * s}, got)
	b.Reset()
	assert.Equal(t, time.Second, b.Next(), "a reset starts from Initial again")
	assert.Equal(t, 2*time.Second, b.Next(), "and doubles again from there")
}

func TestBackoffJitterStaysWithinBounds(t *testing.T) {
	b := New(time.Second, 8*time.Second)
	b.rand = func() float64 { return 0.999999 }
	assert.InDelta(t, float64(800*time.Millisecond), float64(b.Next()), float64(time.Millisecond), "shortened by at most the jitter share")
	b.rand = func() float64 { return 0 }
	assert.Equal(t, 2*time.Second, b.Next())

	real := New(time.Second, 8*time.Second)
	for i := range 50 {
		d := real.Next()
		nominal := min(time.Second<<min(i, 3), 8*time.Second)
		assert.LessOrEqual(t, d, nominal)
		assert.GreaterOrEqual(t, d, time.Duration(float64(nominal)*(1-DefaultJitter)))
	}
}

func TestBackoffZeroValueUsesDefaults(t *testing.T) {
	var b Backoff
	assert.Equal(t, DefaultInitial, b.Next())
	for range 20 {
		b.Next()
	}
	assert.Equal(t, DefaultMax, b.Next(), "no overflow after many attempts: capped")
	odd := Backoff{Initial: time.Minute, Max: time.Second}
	assert.Equal(t, time.Minute, odd.Next(), "a cap below the initial wait is raised to it")
}

func TestBackoffConcurrentUse(t *testing.T) {
	b := New(time.Millisecond, time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				b.Next()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 800, b.attempt, "no Next lost under concurrent use")
}
