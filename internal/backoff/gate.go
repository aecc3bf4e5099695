package backoff

import (
	"sync"
	"time"
)

// Gate spaces the attempts of several workers that share one fate, such as
// the streams of one table writer, which reach one endpoint with one
// token: while their attempts fail, one attempt passes per wait, and the
// wait grows across failures whoever made them, from Initial up to Max
// (each shortened by at most Jitter, like Backoff's). A success opens the
// gate for everyone and starts the waits again from Initial.
//
// Without it each worker would back off on its own and start again from
// its first wait whenever it is replaced, so that N workers, or one worker
// rebuilt every few seconds, retry a dead endpoint far more often than
// one. A worker that passes while the gate is failing reserves the next
// wait before it tries, so attempts stay spaced even when a worker never
// reports (it was stopped). The zero value uses the defaults; it is safe
// for concurrent use.
type Gate struct {
	Initial, Max time.Duration
	Jitter       float64

	mu      sync.Mutex
	b       Backoff
	inited  bool
	failing bool
	next    time.Time
	opened  chan struct{} // closed when a success opens the gate
	// now and rand are replaced by tests.
	now  func() time.Time
	rand func() float64
}

// NewGate returns a gate whose waits grow from initial to max, shortened
// by at most jitter.
func NewGate(initial, max time.Duration, jitter float64) *Gate {
	return &Gate{Initial: initial, Max: max, Jitter: jitter}
}

// SetClock makes the gate read the time from now instead of time.Now: a
// test's clock, on which an hour of back-off passes in a moment. Call it
// before the gate's first use.
func (g *Gate) SetClock(now func() time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now = now
}

func (g *Gate) initLocked() {
	if g.inited {
		return
	}
	g.inited = true
	g.b = Backoff{Initial: g.Initial, Max: g.Max, Jitter: g.Jitter, rand: g.rand}
	g.opened = make(chan struct{})
	if g.now == nil {
		g.now = time.Now
	}
}

// Pass reports whether the caller may try now: always while the gate is
// open; while it is failing, once the current wait has passed, and then
// for this caller alone (the next one waits a full step more). Otherwise
// it returns how long is left of the wait, and a channel closed if a
// success opens the gate before then.
func (g *Gate) Pass() (ok bool, left time.Duration, opened <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.initLocked()
	if !g.failing {
		return true, 0, nil
	}
	now := g.now()
	if left = g.next.Sub(now); left > 0 {
		return false, left, g.opened
	}
	g.next = now.Add(g.b.Next())
	return true, 0, nil
}

// Failed records a failed attempt: the gate closes for a first wait if it
// was open, and stays closed for at least floor from now (a wait the
// service asked for), whatever it was.
func (g *Gate) Failed(floor time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.initLocked()
	now := g.now()
	if !g.failing {
		g.failing = true
		g.next = now.Add(g.b.Next())
	}
	if at := now.Add(floor); floor > 0 && g.next.Before(at) {
		g.next = at
	}
}

// Succeeded records a successful attempt: the gate opens for everyone
// and its waits start again from Initial.
func (g *Gate) Succeeded() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.initLocked()
	if !g.failing {
		return
	}
	g.failing = false
	g.b.Reset()
	close(g.opened)
	g.opened = make(chan struct{})
}

// Failing reports whether the last attempt failed, and since the gate
// opens when, at the earliest.
func (g *Gate) Failing() (bool, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failing, g.next
}
