package ingest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// streamCore is what ArrowStream and JSONStream share: one logical stream
// over one call at a time, with the send lock, the in-flight budget, the
// failure and close state, and the sequences that replace a call (rotation,
// the ack watchdog, recovery) and shut it down. Each stream kind embeds it and
// supplies through streamKind what differs: its calls, what "outstanding"
// means (rows or requests) and how to reconnect.
type streamCore struct {
	cfg   Config
	table string
	obs   Observer
	kind  streamKind
	verb  string // the sending method, for messages: "submit" or "ingest"
	unit  string // what is sent, for messages: "rows" or "requests"

	ctx    context.Context // cancelled by fail and Close
	cancel context.CancelFunc
	bg     sync.WaitGroup

	// sendMu serializes sends and call replacement, so data goes out in
	// logical order and offsets are consecutive per call. Recovery holds it
	// for as long as reconnecting takes, so senders wait for it under their
	// ctx.
	sendMu sendLock
	gen    uint64 // last call generation; under sendMu

	// lastProgress (unix nanos) is when the ack clock last restarted: an ack
	// advanced the watermark, a call was installed, or data was sent while
	// nothing was outstanding. The ack watchdog measures from it.
	lastProgress atomic.Int64

	// mu guards the fields below and the stream kind's pending data.
	mu            sync.Mutex
	inflightBytes int64 // reserved by senders, released by acks
	inflight      int   // batches or requests reserved
	failed        *Error
	dead          chan struct{} // closed by fail, never by Close; nil if the kind has none
	closed        bool
	notify        chan struct{} // see changedLocked; nil while nobody waits
	reconnects    int
}

// streamKind is what the shared sequences need from a stream kind.
type streamKind interface {
	// current returns the current call, nil before the first.
	current() *connState
	// outstanding returns the current call and whether something sent on
	// it is not yet acked.
	outstanding() (*connState, bool)
	// connEnded handles the end of c's responses (or its cut by the ack
	// watchdog) with the error that ended it.
	connEnded(c *connState, err error)
	// reconnectLocked opens a new call and resends what is not yet
	// durable. The caller holds sendMu.
	reconnectLocked() error
	// acceptErrLocked says why the stream refuses data, or nil. The
	// caller holds mu.
	acceptErrLocked() error
}

// init sets the stream up for table; kind is the stream embedding b.
func (b *streamCore) init(cfg Config, table string, kind streamKind, verb, unit string) {
	b.cfg = cfg
	b.table = table
	b.obs = cfg.Observer
	b.kind = kind
	b.verb = verb
	b.unit = unit
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.sendMu = newSendLock()
}

// connState is the part of one call both stream kinds share.
type connState struct {
	gen       uint64
	cancel    context.CancelFunc
	closeSend func() error
	rotating  atomic.Bool // close signal seen: send nothing more
	broken    atomic.Bool // a Send failed: the reader will see why
	// abandoned is set by whoever cancels the call to replace it (the ack
	// watchdog, a rotation cutting a stuck Send): they recover, the reader
	// does not.
	abandoned  atomic.Bool
	halfClosed atomic.Bool
	closeOnce  sync.Once
	done       chan struct{} // closed when the reader exits
}

func (c *connState) usable() bool { return !c.rotating.Load() && !c.broken.Load() }

// halfClose ends the client side of the call once. The caller holds sendMu.
func (c *connState) halfClose() {
	if c.halfClosed.CompareAndSwap(false, true) {
		_ = c.closeSend()
	}
}

// close cancels the call; the reader exits.
func (c *connState) close() { c.closeOnce.Do(c.cancel) }

// spawn runs f in a goroutine that Close waits for.
func (b *streamCore) spawn(f func()) {
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		f()
	}()
}

// callContext fetches a token and returns the context of a new call to the
// stream's table, carrying the auth and table headers. The call outlives ctx,
// but until it is ready ctx bounds it: starting a call blocks while the
// channel connects (up to gRPC's 20 s connect deadline), which must not hold
// up Close or an open the caller gave up on. stop detaches the call from ctx;
// it reports false if ctx ended first and cancelled the call.
func callContext(ctx context.Context, ts TokenSource, table string) (callCtx context.Context, cancel context.CancelFunc, stop func() bool, err error) {
	tok, err := ts.Token(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("token for %s: %w", table, &tokenSourceError{err})
	}
	callCtx, cancel = context.WithCancel(context.Background())
	callCtx = metadata.AppendToOutgoingContext(callCtx,
		HeaderAuthorization, "Bearer "+tok,
		HeaderTableName, table,
	)
	return callCtx, cancel, context.AfterFunc(ctx, cancel), nil
}

// withFreshToken runs open and, when the service refused the token (see
// serviceRejectedToken), drops it and runs open once more. Errors are
// classified *Error.
func withFreshToken[C any](ts TokenSource, open func() (C, error)) (C, error) {
	c, err := open()
	if err != nil && serviceRejectedToken(err) {
		ts.Invalidate()
		c, err = open()
	}
	if err != nil {
		var zero C
		return zero, Classify(err)
	}
	return c, nil
}

// clientStream is the client side of a bidirectional call.
type clientStream[Req, Resp any] interface {
	Send(Req) error
	Recv() (Resp, error)
}

// firstResponse sends first, the opening message (sent names it), on a new
// call and waits up to timeout for the service's first response (want names
// it), which check vets. cancel and stop are the call's, from callContext: on
// success the call is detached from ctx, on failure it is cancelled.
func firstResponse[Req, Resp any](ctx context.Context, call clientStream[Req, Resp], first Req, check func(Resp) error,
	cancel context.CancelFunc, stop func() bool, timeout time.Duration, table, sent, want string,
) (resp Resp, err error) {
	ready := false
	defer func() {
		if !ready {
			cancel()
			stop() // the call is cancelled already; drop the hook from ctx
		}
	}()
	if err := call.Send(first); err != nil {
		// The status, if any, comes from Recv.
		if _, rerr := call.Recv(); rerr != nil {
			err = rerr
		}
		return resp, fmt.Errorf("send %s for %s: %w", sent, table, err)
	}

	type result struct {
		resp Resp
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := call.Recv()
		if err == nil {
			err = check(resp)
		}
		got <- result{resp, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-got:
		if r.err != nil {
			return resp, fmt.Errorf("wait for %s on %s: %w", want, table, r.err)
		}
		if ready = stop(); !ready { // ctx ended meanwhile and cancelled the call
			return resp, fmt.Errorf("wait for %s on %s: %w", want, table, ctx.Err())
		}
		return r.resp, nil
	case <-timer.C:
		return resp, &Error{Class: Transient, Code: codes.DeadlineExceeded,
			Err: fmt.Errorf("no %s on %s within %s", want, table, timeout)}
	case <-ctx.Done():
		return resp, fmt.Errorf("wait for %s on %s: %w", want, table, ctx.Err())
	}
}

// connectFirst opens the first call with open, retrying transient failures
// within the recovery budget, and starts the ack watchdog. open runs under
// sendMu and installs the call it opened.
func (b *streamCore) connectFirst(ctx context.Context, open func(ctx context.Context, gen uint64) error) (err error) {
	defer func() {
		if err != nil {
			b.cancel() // the stream is discarded; release its context
		}
	}()
	var last *Error
	for attempt := 1; attempt <= b.cfg.RecoveryAttempts; attempt++ {
		if attempt > 1 {
			b.obs.OnRetry(b.table, attempt-1, last)
			if err := sleepCtx(ctx, b.cfg.RecoveryBackoff); err != nil {
				return Classify(err)
			}
		}
		b.sendMu.Lock()
		b.gen++
		err := open(ctx, b.gen)
		b.sendMu.Unlock()
		if err == nil {
			b.spawn(b.watchAcks)
			return nil
		}
		last = Classify(err)
		if last.Class != Transient || ctx.Err() != nil {
			return last
		}
	}
	return &Error{Class: Transient, Code: last.Code, ServiceCode: last.ServiceCode,
		Err: fmt.Errorf("%d connection attempts failed: %w", b.cfg.RecoveryAttempts, last)}
}

// admit lets a sender in: it reserves room for size bytes (see reserve), then
// takes sendMu and mu and checks again that the stream accepts data, so that
// what the sender assigns under mu goes out in that order under sendMu. On
// nil the caller holds sendMu and mu and owns the reservation; on an error it
// holds neither and the reservation is given back.
func (b *streamCore) admit(ctx context.Context, size int64) error {
	if err := b.reserve(ctx, size); err != nil {
		return err
	}
	if err := b.sendMu.LockCtx(ctx); err != nil {
		b.unreserve(size)
		return fmt.Errorf("%s to %s: wait to send: %w", b.verb, b.table, err)
	}
	b.mu.Lock()
	if err := b.kind.acceptErrLocked(); err != nil {
		b.unreserveLocked(size)
		b.mu.Unlock()
		b.sendMu.Unlock()
		return err
	}
	return nil
}

// reserve blocks until the stream has room for one more batch or request of
// size bytes. One always fits when nothing is in flight, however large it is.
func (b *streamCore) reserve(ctx context.Context, size int64) error {
	for {
		b.mu.Lock()
		if err := b.kind.acceptErrLocked(); err != nil {
			b.mu.Unlock()
			return err
		}
		if b.inflight == 0 ||
			(b.inflightBytes+size <= b.cfg.MaxInflightBytes && b.inflight < b.cfg.MaxInflightBatches) {
			b.inflightBytes += size
			b.inflight++
			b.mu.Unlock()
			return nil
		}
		ch := b.changedLocked()
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s to %s: wait for in-flight capacity: %w", b.verb, b.table, ctx.Err())
		}
	}
}

// unreserveLocked gives back a reservation that was not used and wakes a
// sender that may wait for it. The caller holds mu.
func (b *streamCore) unreserveLocked(size int64) {
	b.inflightBytes -= size
	b.inflight--
	b.broadcastLocked()
}

// unreserve is unreserveLocked taking mu.
func (b *streamCore) unreserve(size int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unreserveLocked(size)
}

// changedLocked returns a channel closed by the next state change. It is
// made only when someone waits, so that broadcastLocked, which every ack
// calls, costs no allocation while nobody does. The caller holds mu.
func (b *streamCore) changedLocked() <-chan struct{} {
	if b.notify == nil {
		b.notify = make(chan struct{})
	}
	return b.notify
}

// broadcastLocked wakes every waiter of changedLocked. The caller holds mu.
func (b *streamCore) broadcastLocked() {
	if b.notify != nil {
		close(b.notify)
		b.notify = nil
	}
}

// Reconnects returns how many times the stream replaced its call.
func (b *streamCore) Reconnects() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reconnects
}

// waitUntil blocks until reached (called under mu) is true, the stream fails,
// or ctx is done.
func (b *streamCore) waitUntil(ctx context.Context, reached func() bool) error {
	for {
		b.mu.Lock()
		if reached() {
			b.mu.Unlock()
			return nil
		}
		if b.failed != nil {
			err := b.failed
			b.mu.Unlock()
			return err
		}
		ch := b.changedLocked()
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stopped reports whether the stream failed or was closed.
func (b *streamCore) stopped() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stoppedLocked()
}

// stoppedLocked is stopped for a caller holding mu.
func (b *streamCore) stoppedLocked() bool { return b.failed != nil || b.closed }

// fail records the stream's terminal error, wakes every waiter and stops the
// call. Only the first failure counts.
func (b *streamCore) fail(err *Error) {
	b.mu.Lock()
	if b.failed != nil {
		b.mu.Unlock()
		return
	}
	b.failed = err
	// Report under mu, before any waiter can see the failure: whoever is
	// woken by it (a lane failing its items, a test) then finds the
	// failure already logged and counted.
	b.obs.OnFailure(b.table, err)
	if b.dead != nil {
		close(b.dead)
	}
	b.broadcastLocked()
	b.mu.Unlock()
	b.cancel()
	if c := b.kind.current(); c != nil {
		c.close()
	}
}

// failFrom fails the stream for an error seen on c, unless c was already
// replaced (a late error from an old call changes nothing).
func (b *streamCore) failFrom(c *connState, err *Error) {
	if b.kind.current() != c {
		c.close()
		return
	}
	b.fail(err)
}

// endCall handles the end of call c for reason: a fatal or poison reason
// fails the stream, any other replaces the call. An old call's end, or one
// after the stream stopped, changes nothing.
func (b *streamCore) endCall(c *connState, reason *Error) {
	if b.stopped() || b.kind.current() != c {
		return
	}
	switch reason.Class {
	case FatalConfig, Poison:
		b.fail(reason)
	default:
		b.spawn(func() { b.recover(c.gen, reason) })
	}
}

// watchAcks replaces a call that has data outstanding but sent no ack for
// AckTimeout, like the SDKs' server_lack_of_ack_timeout. Rotating calls have
// their own deadline and are left alone.
func (b *streamCore) watchAcks() {
	tick := max(b.cfg.AckTimeout/4, 5*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		c, outstanding := b.kind.outstanding()
		if c == nil || c.rotating.Load() || !outstanding {
			continue
		}
		idle := time.Since(time.Unix(0, b.lastProgress.Load()))
		if idle > b.cfg.AckTimeout && c.abandoned.CompareAndSwap(false, true) {
			b.kind.connEnded(c, &Error{Class: Transient, Code: codes.DeadlineExceeded,
				Err: fmt.Errorf("no ack from %s for %s with %s outstanding", b.table, idle.Round(time.Millisecond), b.unit)})
			// Recovery needs sendMu, which a Send stuck on flow control
			// holds when the server stopped reading (overload, or a
			// partition with the TCP connection still up): cancel the
			// call so that Send fails and lets recovery in.
			c.close()
		}
	}
}

// rotate honours the service's close signal for c: nothing more is sent on c
// (it is marked rotating), outstanding data gets up to wait to be acked
// (reached, called under mu, says when it is), then the call is half-closed
// and replaced.
func (b *streamCore) rotate(c *connState, wait time.Duration, reached func() bool) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		b.mu.Lock()
		done, ch := reached(), b.changedLocked()
		b.mu.Unlock()
		if done {
			break
		}
		select {
		case <-ch:
			continue
		case <-timer.C:
		case <-c.done:
		case <-b.ctx.Done():
			return
		}
		break
	}
	// Half-closing needs sendMu (never CloseSend concurrently with a Send),
	// which a Send stuck on flow control holds when the server stopped
	// reading, and the watchdog leaves rotating calls alone: give the Send
	// closeGrace, then cancel the call so it fails and lets go. The reader
	// must then leave recovery to us, or it would recover with a
	// cancellation as the reason and back off first.
	b.sendMu.lockOrCut(closeGrace, func() {
		c.abandoned.Store(true)
		c.close()
	})
	c.halfClose()
	b.sendMu.Unlock()
	b.recover(c.gen, rotationReason)
}

// recover replaces call gen (if it is still the current one) and resends
// everything not yet durable, retrying transient failures within the budget
// (see retryReconnect). When the budget runs out the stream is poisoned; a
// fatal error fails it at once; a concurrency reject poisons it at once with
// RetryAfter set, so the pool backs off before rebuilding instead of this
// stream retrying.
func (b *streamCore) recover(gen uint64, reason *Error) {
	b.sendMu.Lock()
	defer b.sendMu.Unlock()
	old := b.kind.current()
	if old == nil || old.gen != gen || b.stopped() {
		return
	}
	b.mu.Lock()
	b.reconnects++
	b.mu.Unlock()
	b.obs.OnReconnect(b.table, reason)
	old.close()

	if err := retryReconnect(b.ctx, b.cfg, b.table, b.obs, reason, b.kind.reconnectLocked, b.stopped); err != nil {
		b.fail(err)
	}
}

// shutdown closes the stream: what is not yet durable is abandoned (its
// waiters get an *Error wrapping ErrStreamClosed; dropLocked, called under
// mu, drops the kind's pending data), the current call is half-closed and
// given closeGrace to end, and shutdown waits for the stream's goroutines. It
// returns false if the stream was closed already.
func (b *streamCore) shutdown(dropLocked func()) bool {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return false
	}
	b.closed = true
	if b.failed == nil {
		b.failed = &Error{Class: Poison, Code: codes.Canceled, Err: ErrStreamClosed}
	}
	dropLocked()
	b.inflightBytes, b.inflight = 0, 0
	b.broadcastLocked()
	b.mu.Unlock()

	// Stop recovery first (its sleeps and opens watch ctx), then half-close
	// the current call under sendMu: CloseSend must not race a Send. A Send
	// stuck on flow control is cut loose by cancelling its call.
	b.cancel()
	b.sendMu.lockOrCut(closeGrace, func() {
		if c := b.kind.current(); c != nil {
			c.close()
		}
	})
	c := b.kind.current()
	if c != nil {
		c.halfClose()
	}
	b.sendMu.Unlock()
	if c != nil {
		select {
		case <-c.done:
		case <-time.After(closeGrace):
		}
		c.close()
	}
	b.bg.Wait()
	return true
}
