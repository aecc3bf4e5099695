package tablewriter

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// DefaultMaxInFlightBytes is the default byte budget of a Writer: the data
// of the batches it converts, sends and waits for at once. Like franz-go's
// MaxBufferedBytes it is conservative: a few batches of large rows, or
// dozens of small ones, keep the streams busy, and the process's memory
// stays far below what max_in_flight × batch size would allow for 15 KB or
// 1 MiB rows.
const DefaultMaxInFlightBytes = 64 << 20

// budget is a FIFO byte semaphore bounding the data in flight in a Writer.
// A reservation that does not fit waits, in arrival order, until earlier
// ones are released; one larger than the whole budget is admitted when
// nothing else is in flight, so a single big batch never deadlocks.
// Reservations may grow past the limit after admission (see resize): they
// are estimates corrected once the batch is converted.
type budget struct {
	limit int64

	mu      sync.Mutex
	used    int64
	waiters []*budgetWaiter // FIFO
}

type budgetWaiter struct {
	n     int64
	ready chan struct{} // closed when admitted
}

func newBudget(limit int64) *budget {
	if limit <= 0 {
		limit = DefaultMaxInFlightBytes
	}
	return &budget{limit: limit}
}

// fitsLocked reports whether n bytes may be admitted now.
func (b *budget) fitsLocked(n int64) bool { return b.used == 0 || b.used+n <= b.limit }

// acquire waits until n bytes are admitted or ctx ends.
func (b *budget) acquire(ctx context.Context, n int64) (*reservation, error) {
	b.mu.Lock()
	if len(b.waiters) == 0 && b.fitsLocked(n) {
		b.used += n
		b.mu.Unlock()
		return &reservation{b: b, n: n}, nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return &reservation{b: b, n: n}, nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready: // admitted meanwhile: give it back
		b.used -= n
	default:
		for i, o := range b.waiters {
			if o == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
	}
	// The head may have changed, or room appeared: let others in.
	b.admitLocked()
	return nil, fmt.Errorf("wait for %d bytes of the %d-byte in-flight budget (%d in use): %w", n, b.limit, b.used, ctx.Err())
}

// admitLocked admits waiters from the head of the queue while they fit.
func (b *budget) admitLocked() {
	for len(b.waiters) > 0 && b.fitsLocked(b.waiters[0].n) {
		w := b.waiters[0]
		b.waiters[0] = nil
		b.waiters = b.waiters[1:]
		b.used += w.n
		close(w.ready)
	}
}

// add changes the bytes in use by delta (a release when negative) and
// admits whoever fits.
func (b *budget) add(delta int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used += delta
	b.admitLocked()
}

// inUse returns the bytes reserved now, for tests and metrics.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// snapshot returns the bytes reserved and the reservations waiting for
// room, for health reports.
func (b *budget) snapshot() (used int64, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, len(b.waiters)
}

// reservation is one batch's share of the budget, held from before its
// conversion until it is settled (durable or failed).
type reservation struct {
	b        *budget
	n        int64
	released atomic.Bool
}

// resize replaces the reservation's estimate with n bytes (the converted
// batch's Arrow size). Growing never waits: the batch is admitted already,
// and waiting here while holding bytes could deadlock two growing batches.
func (r *reservation) resize(n int64) {
	if r == nil || r.released.Load() || n == r.n {
		return
	}
	r.b.add(n - r.n)
	r.n = n
}

// release gives the reservation back; later calls do nothing.
func (r *reservation) release() {
	if r != nil && r.released.CompareAndSwap(false, true) {
		r.b.add(-r.n)
	}
}
