// Package acklane is the per-stream durability lane: the background task that
// turns "rows submitted" into "rows durable" without any writer waiting inline
// for its own submit.
//
// Writers submit rows to a stream fire-and-forget, then Enqueue a Pending item
// carrying the end of their row span and a typed confirmation. The lane's one
// goroutine keeps the unsettled items in offset order and waits for the
// smallest; when the wait returns it takes whatever else was queued and
// confirms, in offset order and in one pass, every item the stream's durable
// watermark covers (acks are cumulative, so one wait settles every item its
// ack made durable: the burst), then advances Delivered. It never waits for
// an item's successor: an item is confirmed as soon as its own ack is in, so
// the lane adds no latency to the service's ack latency.
// Confirmations fire only from that goroutine and only after the stream
// reported the rows durable; a failed stream fails its pending items, it never
// confirms them.
//
// A lane serves exactly one stream and shares no state with any other lane.
// Lane kinds are types: Lane[RawAnchor] cannot be handed a DerivedCoverage.
package acklane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCapacity is the default bound of a lane's pending channel.
const DefaultCapacity = 2048

// ErrClosed is returned by Enqueue after Drain or Close, and is the failure
// of items still pending when a lane whose stream did not fail is closed.
var ErrClosed = errors.New("acklane: lane closed")

// Waiter is the part of a stream the lane needs; ingest.Stream satisfies it.
type Waiter interface {
	// WaitDurable blocks until every row below row is durable, the stream
	// fails, or ctx is done.
	WaitDurable(ctx context.Context, row uint64) error
}

// Config tunes a lane.
type Config struct {
	// Capacity bounds the pending channel; a full channel blocks Enqueue,
	// which is the backpressure on writers. Zero means DefaultCapacity. It
	// counts items; the rows and bytes they cover are bounded by whoever
	// enqueues (the table writer's byte budget holds each batch's bytes
	// until its item settles), not by the lane.
	Capacity int
	// AckTimeout bounds one WaitDurable attempt. When it elapses while the
	// stream is still healthy the lane counts a retry (the slow-ack symptom)
	// and waits again for the same offset; it never fails or confirms items
	// because of it. Zero means one unbounded attempt. A stream that stops
	// acking altogether fails by itself, which fails the lane.
	AckTimeout time.Duration
}

// Pending is one writer's claim on durability: rows below To on the lane's
// stream, and the confirmation to settle once they are durable.
type Pending[C Confirmation] struct {
	// To is the end (exclusive) of the writer's row span on the stream.
	To uint64
	// Confirm is settled by the lane: confirmed after To is durable, or
	// failed if the stream fails or the lane closes first.
	Confirm C
	// SubmittedAt is when the rows were submitted, for the delivery latency
	// metric. Zero means the time of Enqueue.
	SubmittedAt time.Time
}

// Lane is the ack lane of one stream for one confirmation kind.
type Lane[C Confirmation] struct {
	w   Waiter
	cfg Config
	obs Observer
	// clock and lag measure ack → confirmation; both nil unless the
	// Waiter is an AckClock and the Observer an AckLagObserver.
	clock AckClock
	lag   AckLagObserver
	// durable is w when it reports its durable watermark, else nil:
	// asserted once here rather than on every burst.
	durable durableReporter

	ch        chan Pending[C]
	pending   atomic.Int64  // enqueued (or being enqueued) minus settled
	delivered atomic.Uint64 // largest To confirmed; never decreases
	enqueued  atomic.Uint64 // largest To enqueued
	closing   atomic.Bool   // set by Drain and Close: no new items

	// For Health, never for durability: when the last burst was confirmed,
	// when the oldest item of the burst being waited for was submitted
	// (unix nanoseconds, 0: none), and how many Enqueue calls wait for room.
	lastAck, oldest, blocked atomic.Int64

	ctx      context.Context // cancelled by Close and by a failure; aborts WaitDurable
	cancel   context.CancelFunc
	stop     chan struct{} // closed by Close
	stopOnce sync.Once
	exited   chan struct{} // closed when the goroutine returns

	failed   chan struct{} // closed when the stream failed
	failOnce sync.Once
	err      error // written before failed is closed

	settled *signal // notified whenever pending decreases
}

// New starts a lane that waits on w. obs may be nil.
func New[C Confirmation](w Waiter, cfg Config, obs Observer) *Lane[C] {
	if cfg.Capacity <= 0 {
		cfg.Capacity = DefaultCapacity
	}
	if obs == nil {
		obs = nopObserver{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Lane[C]{
		w:       w,
		cfg:     cfg,
		obs:     obs,
		ch:      make(chan Pending[C], cfg.Capacity),
		ctx:     ctx,
		cancel:  cancel,
		stop:    make(chan struct{}),
		exited:  make(chan struct{}),
		failed:  make(chan struct{}),
		settled: newSignal(),
	}
	l.durable, _ = w.(durableReporter)
	clock, isClock := w.(AckClock)
	lag, isLag := obs.(AckLagObserver)
	if isClock && isLag {
		l.clock, l.lag = clock, lag
	}
	go l.run()
	return l
}

// Enqueue hands p to the lane. It blocks while the pending channel is full,
// until there is room, ctx is done, or the lane fails or closes. On a nil
// return the lane owns p.Confirm and will settle it exactly once; on an error
// it never touches p.Confirm.
func (l *Lane[C]) Enqueue(ctx context.Context, p Pending[C]) error {
	if err := l.Err(); err != nil {
		return err
	}
	l.pending.Add(1)
	if l.closing.Load() {
		l.release(1)
		return ErrClosed
	}
	if p.SubmittedAt.IsZero() {
		p.SubmittedAt = time.Now()
	}
	select {
	case l.ch <- p:
		l.noteEnqueued(p.To)
		return nil
	default:
	}
	// The lane is full: this writer waits (backpressure), counted for Health.
	l.blocked.Add(1)
	defer l.blocked.Add(-1)
	select {
	case l.ch <- p:
		l.noteEnqueued(p.To)
		return nil
	case <-ctx.Done():
		l.release(1)
		return fmt.Errorf("acklane: enqueue: %w", ctx.Err())
	case <-l.stop:
		l.release(1)
		return ErrClosed
	case <-l.failed:
		l.release(1)
		return l.err
	}
}

// Delivered returns the largest row offset the lane has confirmed: every row
// below it is durable. It never decreases.
func (l *Lane[C]) Delivered() uint64 { return l.delivered.Load() }

// noteEnqueued raises the enqueued high-water to to, and reports the rows
// now pending: the gauge climbs as rows are enqueued (live during an ack
// stall), not only when a burst starts or ends.
func (l *Lane[C]) noteEnqueued(to uint64) {
	for {
		cur := l.enqueued.Load()
		if to <= cur {
			return
		}
		if l.enqueued.CompareAndSwap(cur, to) {
			l.obs.SetPending(int64(l.PendingRows()))
			return
		}
	}
}

// PendingRows returns the rows enqueued and not yet confirmed durable: the
// enqueued high-water minus Delivered. It is what a Close at this moment
// would nack; never used to decide durability.
func (l *Lane[C]) PendingRows() uint64 {
	e, d := l.enqueued.Load(), l.delivered.Load()
	if e <= d {
		return 0
	}
	return e - d
}

// Pending returns the number of items enqueued and not yet settled. It feeds
// the pending gauge and is never used to decide durability.
func (l *Lane[C]) Pending() int64 { return l.pending.Load() }

// Health is a snapshot of a lane for health reports: atomics only, so it is
// cheap and never waits for the lane or its writers.
type Health struct {
	// Kind is the lane's confirmation kind (its type parameter).
	Kind Kind
	// PendingItems and PendingRows are Pending and PendingRows.
	PendingItems int64
	PendingRows  uint64
	// LastAck is when the lane last confirmed rows durable; zero: never.
	LastAck time.Time
	// OldestPending is when the oldest rows the lane waits for were
	// submitted; zero while it waits for nothing.
	OldestPending time.Time
	// BlockedWriters counts Enqueue calls waiting for room in a full lane:
	// the lane's backpressure on writers.
	BlockedWriters int64
}

// Health returns a snapshot of the lane.
func (l *Lane[C]) Health() Health {
	h := Health{Kind: KindOf[C](), PendingItems: l.pending.Load(), PendingRows: l.PendingRows(), BlockedWriters: l.blocked.Load()}
	if t := l.lastAck.Load(); t != 0 {
		h.LastAck = time.Unix(0, t)
	}
	if t := l.oldest.Load(); t != 0 {
		h.OldestPending = time.Unix(0, t)
	}
	return h
}

// Failed returns a channel closed when the lane's stream failed (seen by the
// lane, or reported by Fail); Err then returns the failure. The pool watches
// it to rebuild the stream.
func (l *Lane[C]) Failed() <-chan struct{} { return l.failed }

// Err returns the stream failure that failed the lane, or nil.
func (l *Lane[C]) Err() error {
	select {
	case <-l.failed:
		return l.err
	default:
		return nil
	}
}

// Drain stops accepting new items and waits until every enqueued item is
// settled (confirmed or failed) or ctx is done. It returns the lane's failure
// if the stream failed, ctx's error if it gave up, and nil otherwise. The
// lane keeps running: call Close afterwards.
func (l *Lane[C]) Drain(ctx context.Context) error {
	l.closing.Store(true)
	for {
		wake := l.settled.wait()
		if l.pending.Load() == 0 {
			return l.Err()
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return fmt.Errorf("acklane: drain with %d items pending: %w", l.pending.Load(), ctx.Err())
		}
	}
}

// Fail fails the lane for a failure of its stream noticed outside the lane,
// typically by a writer whose Submit found the stream dead: the current wait
// is aborted, unsettled items fail with err (except those the stream had
// already made durable, which are confirmed), and Enqueue refuses new ones.
// A stream dies once, whichever path notices it first: the failure is
// counted as poisoned only if the lane had not already seen one, and only
// the first failure is kept.
func (l *Lane[C]) Fail(err error) {
	l.setFailed(fmt.Errorf("acklane: stream failed: %w", err))
}

// Close stops the lane: it aborts the current wait, fails every unsettled
// item (with the lane's failure if it failed, ErrClosed otherwise), and
// returns once the goroutine has exited. It does not close the stream. Close
// is idempotent.
func (l *Lane[C]) Close() {
	l.closing.Store(true)
	l.stopOnce.Do(func() {
		close(l.stop)
		l.cancel()
	})
	<-l.exited
}

func (l *Lane[C]) release(n int64) {
	l.pending.Add(-n)
	l.settled.notify()
}

// setFailed records the lane's failure, counts it and stops the current
// wait. Counting here, once per lane, is what makes a stream death count
// once whether the lane's wait or Fail saw it first.
func (l *Lane[C]) setFailed(err error) {
	l.failOnce.Do(func() {
		l.err = err
		l.obs.IncPoisoned(err)
		close(l.failed)
		l.cancel()
	})
}

// stopErr is what items fail with once the lane stopped waiting: its failure
// if the stream failed, so the writer learns why, or ErrClosed.
func (l *Lane[C]) stopErr() error {
	if err := l.Err(); err != nil {
		return err
	}
	return ErrClosed
}

// run is the lane's only goroutine: the only place confirmations fire.
//
// It keeps the unsettled items sorted by To and waits once for the
// smallest; when that wait returns it takes whatever else was queued
// meanwhile and confirms, in one pass, every item the stream's durable
// watermark now covers (acks are cumulative: one ack settles all of them).
// Waiting on the smallest rather than the largest is what keeps an item's
// latency its own ack's: an item queued behind a later one is confirmed
// when its own ack arrives, not held until the later one's.
func (l *Lane[C]) run() {
	defer close(l.exited)
	pend := make([]Pending[C], 0, 64) // unsettled, sorted by To
	for {
		if len(pend) == 0 {
			select {
			case p := <-l.ch:
				pend = append(pend, p)
			case <-l.stop:
				l.flush()
				return
			}
		}
		pend = l.take(pend)
		if err := l.Err(); err != nil {
			l.failBurst(pend, err)
			pend = pend[:0]
			continue
		}
		if l.ctx.Err() != nil { // closed: fail, never confirm, what is left
			l.settle(pend, l.stopErr())
			pend = pend[:0]
			continue
		}
		l.obs.SetPending(int64(l.PendingRows()))
		target := pend[0].To
		l.oldest.Store(slices.MinFunc(pend, func(a, b Pending[C]) int { return a.SubmittedAt.Compare(b.SubmittedAt) }).SubmittedAt.UnixNano())
		if err := l.wait(target); err != nil {
			l.failBurst(pend, err) // what is queued meets the checks above
			pend = pend[:0]
			continue
		}
		// Items queued during the wait may be durable already.
		pend = l.take(pend)
		durable := target
		if l.durable != nil {
			durable = max(durable, l.durable.Durable())
		}
		n := upTo(pend, durable)
		l.obs.ObserveBurst(n)
		l.confirm(pend[:n])
		rest := copy(pend, pend[n:])
		clear(pend[rest:]) // drop the moved-out copies' receipts
		pend = pend[:rest]
	}
}

// take moves every item queued on the channel into pend, keeping it sorted
// by To (writers enqueue after their Submit returns, so two writers'
// items can arrive out of order), and returns pend.
func (l *Lane[C]) take(pend []Pending[C]) []Pending[C] {
	for {
		select {
		case p := <-l.ch:
			pend = slices.Insert(pend, upTo(pend, p.To), p)
		default:
			return pend
		}
	}
}

// upTo returns how many items of pend, sorted by To, end at or below row:
// those row covers, and where an item ending at row goes after its equals.
func upTo[C Confirmation](pend []Pending[C], row uint64) int {
	n, _ := slices.BinarySearchFunc(pend, row+1, func(p Pending[C], row uint64) int { return cmp.Compare(p.To, row) })
	return n
}

// wait waits once for target, retrying only after its own per-attempt
// timeout while the stream is otherwise healthy.
func (l *Lane[C]) wait(target uint64) error {
	// Already durable (the ack that settled the last burst may cover this
	// one too): no need to set up a wait.
	if l.durable != nil && l.durable.Durable() >= target {
		return nil
	}
	for {
		ctx, cancel := l.ctx, context.CancelFunc(func() {})
		if l.cfg.AckTimeout > 0 {
			ctx, cancel = context.WithTimeout(l.ctx, l.cfg.AckTimeout)
		}
		err := l.w.WaitDurable(ctx, target)
		timedOut := ctx.Err() != nil
		cancel()
		switch {
		case err == nil:
			return nil
		case l.ctx.Err() != nil: // closed, or failed by Fail
			return l.stopErr()
		case timedOut:
			l.obs.IncRetry()
			continue
		}
		l.setFailed(fmt.Errorf("acklane: stream failed before row %d was durable: %w", target, err))
		return l.Err() // Fail may have got there first
	}
}

// confirm advances delivered to the end of a durable, non-empty burst, then
// settles the burst in offset order, so that whoever sees a confirmation
// also sees Delivered() >= its To. burst is sorted by To, as run keeps it.
func (l *Lane[C]) confirm(burst []Pending[C]) {
	target := burst[len(burst)-1].To
	for {
		cur := l.delivered.Load()
		if target <= cur || l.delivered.CompareAndSwap(cur, target) {
			break
		}
	}
	now := time.Now()
	// Before any waiter wakes: whoever sees its rows durable sees them no
	// longer pending in Health.
	l.lastAck.Store(now.UnixNano())
	l.oldest.Store(0)
	// Observe before settling: once a waiter wakes, its batch's latency
	// is already recorded.
	for i := range burst {
		l.obs.ObserveDeliveryLatency(now.Sub(burst[i].SubmittedAt))
		if l.clock != nil {
			if at, ok := l.clock.AckedAt(burst[i].To); ok {
				l.lag.ObserveAckLag(now.Sub(at))
			}
		}
		burst[i].Confirm.receipt().settle(nil)
	}
	l.done(burst)
}

// durableReporter is the optional part of a Waiter that reports its durable
// watermark (ingest.Stream has it). It lets a failed wait still confirm the
// items that were durable before the stream failed.
type durableReporter interface{ Durable() uint64 }

// failBurst settles a burst whose wait failed. Items at or below the stream's
// durable watermark are durable whatever happened after them: they are
// confirmed, since failing them would only make the input redeliver rows the
// table already holds. The rest fail with err. burst is sorted by To, as
// run keeps it.
func (l *Lane[C]) failBurst(burst []Pending[C], err error) {
	if l.durable == nil {
		l.settle(burst, err)
		return
	}
	n := upTo(burst, l.durable.Durable())
	if n > 0 {
		l.confirm(burst[:n])
	}
	l.settle(burst[n:], err)
}

// settle fails every item of burst with err.
func (l *Lane[C]) settle(burst []Pending[C], err error) {
	l.oldest.Store(0)
	for i := range burst {
		burst[i].Confirm.receipt().settle(err)
	}
	l.done(burst)
}

func (l *Lane[C]) done(burst []Pending[C]) {
	clear(burst) // drop receipts so the reused slice does not pin them
	l.release(int64(len(burst)))
	l.obs.SetPending(int64(l.PendingRows()))
}

// flush fails everything still pending after Close, including items whose
// Enqueue is racing with it, and returns once nothing is pending.
func (l *Lane[C]) flush() {
	for {
		wake := l.settled.wait()
		if l.pending.Load() == 0 {
			return
		}
		select {
		case p := <-l.ch:
			p.Confirm.receipt().settle(l.stopErr())
			l.release(1)
		case <-wake:
		}
	}
}

// signal is a broadcast: wait returns a channel closed by the next notify.
// The channel is made only when someone waits, so that notify, which every
// settled burst calls, costs no allocation while nobody does.
type signal struct {
	mu sync.Mutex
	ch chan struct{} // nil while nobody waits
}

func newSignal() *signal { return &signal{} }

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) notify() {
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.mu.Unlock()
}
