// Package backoff provides a capped exponential back-off with jitter, for
// retry loops that must slow down on permanent errors (bad credentials,
// missing grants) instead of hammering the service once a second.
package backoff

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Defaults: the first wait is about a second and waits double up to a minute
// (issue 7: "capped, e.g. 1 s → 60 s").
const (
	DefaultInitial = time.Second
	DefaultMax     = 60 * time.Second
	// DefaultJitter is the share of each wait that is randomised, so that
	// many writers failing together do not retry in lock-step.
	DefaultJitter = 0.2
)

// Backoff yields waits that double from Initial up to Max. Each wait is
// shortened by a random share of at most Jitter (0 ≤ Jitter < 1), so a wait is
// always within [d·(1−Jitter), d] of its nominal value d and never above Max.
// The zero value uses the defaults. It is safe for concurrent use.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Jitter  float64

	mu      sync.Mutex
	attempt int
	// rand returns a float in [0, 1); tests replace it.
	rand func() float64
}

// New returns a Backoff from initial to max with the default jitter.
func New(initial, max time.Duration) *Backoff {
	return &Backoff{Initial: initial, Max: max, Jitter: DefaultJitter}
}

// Next returns the wait before the next attempt and advances the sequence.
func (b *Backoff) Next() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	initial, max := b.Initial, b.Max
	if initial <= 0 {
		initial = DefaultInitial
	}
	if max <= 0 {
		max = DefaultMax
	}
	if max < initial {
		max = initial
	}
	d := Nominal(initial, max, b.attempt)
	b.attempt++
	r := b.rand
	if r == nil {
		r = rand.Float64
	}
	return Shorten(d, b.Jitter, r())
}

// Nominal is the wait before attempt n (from 0) of a sequence that doubles
// from initial up to max, before jitter.
func Nominal(initial, max time.Duration, n int) time.Duration {
	d := initial
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// Shorten takes a random share of at most jitter (0 ≤ jitter < 1) off d;
// r is a random float in [0, 1). Any other jitter leaves d as it is.
func Shorten(d time.Duration, jitter, r float64) time.Duration {
	if jitter <= 0 || jitter >= 1 {
		return d
	}
	return d - time.Duration(r*jitter*float64(d))
}

// Reset starts the sequence again from Initial, after a success.
func (b *Backoff) Reset() {
	b.mu.Lock()
	b.attempt = 0
	b.mu.Unlock()
}
