package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowipc"
	"google.golang.org/grpc/codes"
)

// ErrSchemaMismatch is returned by Submit when a batch's schema differs from
// the stream's (nullability included): open a stream with the new schema.
var ErrSchemaMismatch = errors.New("record batch schema differs from the stream's schema")

// ErrStreamClosed is the cause waiters see for rows abandoned by Close, and
// Submit returns after Drain or Close.
var ErrStreamClosed = errors.New("zerobus stream closed")

// closeGrace bounds how long Close waits for the server to end a half-closed
// call before cancelling it.
const closeGrace = 2 * time.Second

// rotationReason is what OnReconnect sees for a server-announced rotation.
var rotationReason = &Error{Class: Transient, Code: codes.Unavailable, ServiceCode: ServiceCodeStreamRotation,
	Err: errors.New("server announced stream rotation")}

// pendingBatch is a submitted batch not yet fully durable. The stream holds a
// reference to rec until every row of it is durable, to resend it after a
// reconnect.
type pendingBatch struct {
	rec   arrow.RecordBatch
	span  Span
	bytes int64
}

// ArrowStream is a logical Zerobus stream over Arrow Flight DoPut. It owns one
// connection (one DoPut call) at a time: logical row positions stay stable
// across the reconnects it performs on transient errors, on the ack watchdog
// and on rotation, and it resends the unacknowledged row suffix on each new
// connection. It implements Stream.
type ArrowStream struct {
	cfg     Config
	table   string
	obs     Observer
	encoder *frameEncoder
	schema  *arrow.Schema
	params  connParams

	ctx    context.Context // cancelled by fail and Close
	cancel context.CancelFunc
	bg     sync.WaitGroup

	// sendMu serializes sends and connection replacement, so data goes out
	// in logical order and offsets are consecutive per connection.
	// Recovery holds it for as long as reconnecting takes, so senders wait
	// for it under their ctx.
	sendMu sendLock
	gen    uint64                     // last connection generation; under sendMu
	cur    atomic.Pointer[flightConn] // written under sendMu

	durable atomic.Uint64
	// lastProgress (unix nanos) is when the ack clock last restarted: an ack
	// advanced the watermark, a connection was installed, or data was sent
	// while nothing was outstanding. The ack watchdog measures from it.
	lastProgress atomic.Int64

	// mu guards the fields below.
	mu            sync.Mutex
	inflightBytes int64 // reserved by senders, released by acks
	inflight      int   // batches reserved
	pending       []pendingBatch
	submitted     uint64
	draining      bool
	failed        *Error
	dead          chan struct{} // closed by fail, never by Close
	closed        bool
	notify        chan struct{} // see changedLocked; nil while nobody waits
	reconnects    int
	acks          ackClock // when the watermark reached its recent positions
}

var (
	_ Stream          = (*ArrowStream)(nil)
	_ FailureNotifier = (*ArrowStream)(nil)
)

func newArrowStream(c *Client, obs Observer, table string, schema *arrow.Schema, p connParams) *ArrowStream {
	s := &ArrowStream{
		cfg:     c.cfg,
		table:   table,
		obs:     obs,
		encoder: c.encoder,
		schema:  schema,
		params:  p,
		sendMu:  newSendLock(),
		dead:    make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// spawn runs f in a goroutine that Close waits for.
func (s *ArrowStream) spawn(f func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		f()
	}()
}

// connectFirst opens the first connection, retrying transient failures
// within the recovery budget, and starts the ack watchdog.
func (s *ArrowStream) connectFirst(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			s.cancel() // the stream is discarded; release its context
		}
	}()
	var last *Error
	attempts := firstConnectAttempts(ctx, s.cfg.RecoveryAttempts)
	for attempt := 1; attempt <= attempts; attempt++ {
		if attempt > 1 {
			s.obs.OnRetry(s.table, attempt-1, last)
			if err := sleepCtx(ctx, s.cfg.RecoveryBackoff); err != nil {
				return Classify(err)
			}
		}
		s.sendMu.Lock()
		s.gen++
		c, err := openFlightConn(ctx, s.params, s.gen)
		if err == nil {
			s.installLocked(c)
		}
		s.sendMu.Unlock()
		if err == nil {
			s.spawn(s.watchAcks)
			return nil
		}
		last = Classify(err)
		if last.Class != Transient || ctx.Err() != nil {
			return last
		}
	}
	if attempts == 1 {
		return last
	}
	return &Error{Class: Transient, Code: last.Code, ServiceCode: last.ServiceCode,
		Err: fmt.Errorf("%d connection attempts failed: %w", attempts, last)}
}

// installLocked makes c the current connection and starts its ack reader.
// The caller holds sendMu.
func (s *ArrowStream) installLocked(c *flightConn) {
	s.lastProgress.Store(time.Now().UnixNano())
	s.cur.Store(c)
	s.spawn(func() { s.readAcks(c) })
}

// Submit waits for in-flight capacity, assigns rec its logical span and
// sends it on the current connection, cut into frames (see encodeEach). It
// does not wait for durability. If the connection is rotating or broken the
// batch stays pending and goes out on the next connection.
//
// Frames are encoded one at a time and each sent at once, so a batch never
// exists encoded as a whole; capacity is reserved by the batch's in-memory
// size and corrected to its encoded size once sent. Only a batch with a row
// that may pass the frame cap (see mayRefuse) is encoded in full first, so
// that such a row is refused before the batch takes a span.
func (s *ArrowStream) Submit(ctx context.Context, rec arrow.RecordBatch) (Span, error) {
	if !rec.Schema().Equal(s.schema) {
		return Span{}, fmt.Errorf("submit to %s: %w", s.table, ErrSchemaMismatch)
	}
	rows := uint64(rec.NumRows())
	var frames []frame // encoded up front only when mayRefuse
	size := arrowipc.RecordBytes(rec)
	if rows > 0 && s.encoder.mayRefuse(rec, size) {
		var err error
		if frames, err = s.encoder.encode(rec); err != nil {
			return Span{}, fmt.Errorf("submit to %s: %w", s.table, err)
		}
		size = 0
		for _, f := range frames {
			size += int64(f.size())
		}
	}
	if err := s.admit(ctx, size); err != nil {
		releaseFrames(frames, s.encoder.pool)
		return Span{}, err
	}
	defer s.sendMu.Unlock()
	span := Span{From: s.submitted, To: s.submitted + rows}
	s.submitted = span.To
	if rows > 0 {
		rec.Retain()
		s.pending = append(s.pending, pendingBatch{rec: rec, span: span, bytes: size})
	} else {
		// Nothing to wait for: give the reservation back and wake a
		// Submit that blocked on it (no ack will).
		s.unreserveLocked(size)
	}
	s.mu.Unlock()

	c := s.cur.Load()
	if rows == 0 || c == nil || !c.usable() {
		// It goes out, encoded again, on the next connection.
		releaseFrames(frames, s.encoder.pool)
		return span, nil
	}
	if s.durable.Load() >= c.sentUpTo() {
		s.lastProgress.Store(time.Now().UnixNano())
	}
	// A send error marks the connection broken; its reader gets the status
	// and triggers recovery, which resends this batch.
	if frames != nil {
		_ = c.send(frames, s.encoder.pool)
		return span, nil
	}
	if sent, ok := s.sendEncoding(c, rec); ok {
		s.settleBytes(span, sent)
	}
	return span, nil
}

// sendEncoding encodes rec frame by frame on c, sending each as soon as it
// is encoded, and returns the bytes sent and whether all of rec went out. A
// send error marks c broken (recovery resends). An encode error fails the
// stream: part of the batch may be out already, and the encoder refuses
// nothing mayRefuse let through, so it is not a row's fault. The caller
// holds sendMu.
func (s *ArrowStream) sendEncoding(c *flightConn, rec arrow.RecordBatch) (int64, bool) {
	sent, sendErr, err := s.encodeAndSend(c, rec)
	if err != nil && sendErr == nil {
		s.fail(poisonf("encode rows for %s: %w", s.table, err))
	}
	return sent, err == nil
}

// encodeAndSend encodes rec frame by frame on c, sending each as soon as it
// is encoded (see encodeEach), and returns the bytes sent. err is the first
// error, encoding's or sending's; sendErr is set when it was a send (which
// marked c broken). The caller holds sendMu.
func (s *ArrowStream) encodeAndSend(c *flightConn, rec arrow.RecordBatch) (sent int64, sendErr, err error) {
	err = s.encoder.encodeEach(rec, func(f frame) error {
		sent += int64(f.size())
		sendErr = c.sendFrame(f, s.encoder.pool)
		return sendErr
	})
	return sent, sendErr, err
}

// settleBytes replaces the in-flight estimate of the pending batch at span
// with the bytes it was sent as, waking senders if that made room. A batch
// already released (acked, or the stream closed) is left alone.
func (s *ArrowStream) settleBytes(span Span, sent int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.pending) - 1; i >= 0; i-- {
		p := &s.pending[i]
		if p.span == span {
			s.inflightBytes += sent - p.bytes
			if sent < p.bytes {
				s.broadcastLocked()
			}
			p.bytes = sent
			return
		}
		if p.span.To <= span.From {
			return
		}
	}
}

// admit lets a sender in: it reserves room for size bytes (see reserve), then
// takes sendMu and mu and checks again that the stream accepts data, so that
// the span assigned under mu goes out in that order under sendMu. On nil the
// caller holds sendMu and mu and owns the reservation; on an error it holds
// neither and the reservation is given back.
func (s *ArrowStream) admit(ctx context.Context, size int64) error {
	if err := s.reserve(ctx, size); err != nil {
		return err
	}
	if err := s.sendMu.LockCtx(ctx); err != nil {
		s.unreserve(size)
		return fmt.Errorf("submit to %s: wait to send: %w", s.table, err)
	}
	s.mu.Lock()
	if err := s.acceptErrLocked(); err != nil {
		s.unreserveLocked(size)
		s.mu.Unlock()
		s.sendMu.Unlock()
		return err
	}
	return nil
}

// reserve blocks until the stream has room for one more batch of size bytes.
// One always fits when nothing is in flight, however large it is.
func (s *ArrowStream) reserve(ctx context.Context, size int64) error {
	for {
		s.mu.Lock()
		if err := s.acceptErrLocked(); err != nil {
			s.mu.Unlock()
			return err
		}
		if s.inflight == 0 ||
			(s.inflightBytes+size <= s.cfg.MaxInflightBytes && s.inflight < s.cfg.MaxInflightBatches) {
			s.inflightBytes += size
			s.inflight++
			s.mu.Unlock()
			return nil
		}
		ch := s.changedLocked()
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("submit to %s: wait for in-flight capacity: %w", s.table, ctx.Err())
		}
	}
}

// unreserveLocked gives back a reservation that was not used and wakes a
// sender that may wait for it. The caller holds mu.
func (s *ArrowStream) unreserveLocked(size int64) {
	s.inflightBytes -= size
	s.inflight--
	s.broadcastLocked()
}

// unreserve is unreserveLocked taking mu.
func (s *ArrowStream) unreserve(size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unreserveLocked(size)
}

// acceptErrLocked says why Submit must refuse, or nil. The caller holds mu.
func (s *ArrowStream) acceptErrLocked() error {
	switch {
	case s.failed != nil:
		return s.failed
	case s.closed || s.draining:
		return fmt.Errorf("submit to %s: %w", s.table, ErrStreamClosed)
	}
	return nil
}

// changedLocked returns a channel closed by the next state change. It is
// made only when someone waits, so that broadcastLocked, which every ack
// calls, costs no allocation while nobody does. The caller holds mu.
func (s *ArrowStream) changedLocked() <-chan struct{} {
	if s.notify == nil {
		s.notify = make(chan struct{})
	}
	return s.notify
}

// broadcastLocked wakes every waiter of changedLocked. The caller holds mu.
func (s *ArrowStream) broadcastLocked() {
	if s.notify != nil {
		close(s.notify)
		s.notify = nil
	}
}

// Durable returns the logical durable watermark.
func (s *ArrowStream) Durable() uint64 { return s.durable.Load() }

// Submitted returns the logical row position after the last submitted row.
// It is a high-water for diagnostics, never a durability signal.
func (s *ArrowStream) Submitted() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.submitted
}

// Reconnects returns how many times the stream replaced its connection.
func (s *ArrowStream) Reconnects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reconnects
}

// WaitDurable blocks until Durable() >= row, the stream fails, or ctx is done.
func (s *ArrowStream) WaitDurable(ctx context.Context, row uint64) error {
	for {
		s.mu.Lock()
		if s.durable.Load() >= row {
			s.mu.Unlock()
			return nil
		}
		if s.failed != nil {
			err := s.failed
			s.mu.Unlock()
			return err
		}
		ch := s.changedLocked()
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Failed returns a channel closed once the stream has failed: recovery gave
// up or the error was not recoverable. Close does not close it.
func (s *ArrowStream) Failed() <-chan struct{} { return s.dead }

// Err returns the stream's failure once Failed is closed, else nil.
func (s *ArrowStream) Err() error {
	select {
	case <-s.dead:
	default:
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// Drain stops accepting submits and waits until every submitted row is
// durable, the stream fails, or ctx is done.
func (s *ArrowStream) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	target := s.submitted
	s.broadcastLocked()
	s.mu.Unlock()
	if err := s.WaitDurable(ctx, target); err != nil {
		return fmt.Errorf("drain %s: %w", s.table, err)
	}
	return nil
}

// Close closes the stream: what is not yet durable is abandoned (its waiters
// get an *Error wrapping ErrStreamClosed), the current connection is
// half-closed and given closeGrace to end, and Close waits for the stream's
// goroutines.
func (s *ArrowStream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.failed == nil {
		s.failed = &Error{Class: Poison, Code: codes.Canceled, Err: ErrStreamClosed}
	}
	pending := s.pending
	s.pending = nil
	s.inflightBytes, s.inflight = 0, 0
	s.broadcastLocked()
	s.mu.Unlock()

	// Stop recovery first (its sleeps and opens watch ctx), then half-close
	// the current connection under sendMu: CloseSend must not race a Send.
	// A Send stuck on flow control is cut loose by cancelling its call.
	s.cancel()
	s.sendMu.lockOrCut(closeGrace, func() {
		if c := s.cur.Load(); c != nil {
			c.close()
		}
	})
	c := s.cur.Load()
	if c != nil {
		c.halfClose()
	}
	s.sendMu.Unlock()
	if c != nil {
		select {
		case <-c.done:
		case <-time.After(closeGrace):
		}
		c.close()
	}
	s.bg.Wait()
	for _, p := range pending {
		p.rec.Release()
	}
	return nil
}

// stopped reports whether the stream failed or was closed.
func (s *ArrowStream) stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stoppedLocked()
}

// stoppedLocked is stopped for a caller holding mu.
func (s *ArrowStream) stoppedLocked() bool { return s.failed != nil || s.closed }

// fail records the stream's terminal error, wakes every waiter and stops the
// connection. Only the first failure counts.
func (s *ArrowStream) fail(err *Error) {
	s.mu.Lock()
	if s.failed != nil {
		s.mu.Unlock()
		return
	}
	s.failed = err
	// Report under mu, before any waiter can see the failure: whoever is
	// woken by it (a lane failing its items, a test) then finds the
	// failure already logged and counted.
	s.obs.OnFailure(s.table, err)
	close(s.dead)
	s.broadcastLocked()
	s.mu.Unlock()
	s.cancel()
	if c := s.cur.Load(); c != nil {
		c.close()
	}
}

// failFrom fails the stream for an error seen on c, unless c was already
// replaced (a late error from an old connection changes nothing).
func (s *ArrowStream) failFrom(c *flightConn, err *Error) {
	if s.cur.Load() != c {
		c.close()
		return
	}
	s.fail(err)
}

// readAcks reads PutResults of one connection until it ends.
func (s *ArrowStream) readAcks(c *flightConn) {
	defer close(c.done)
	// The call is over once Recv failed: end its context, which gives its
	// channel reference back (a retired channel closes after its last call).
	defer c.close()
	for {
		res, err := c.call.Recv()
		if err != nil {
			if !c.abandoned.Load() { // else whoever cut it recovers
				s.endConn(c, Classify(err))
			}
			return
		}
		ack, perr := parseAck(res.GetAppMetadata())
		if perr != nil {
			s.failFrom(c, Classify(perr))
			return
		}
		if err := s.advance(c, ack.AckUpToRecords); err != nil {
			s.failFrom(c, err)
			return
		}
		if ack.CloseStreamDurationMs != nil && c.rotating.CompareAndSwap(false, true) {
			s.obs.OnRotation(s.table)
			wait := time.Duration(*ack.CloseStreamDurationMs) * time.Millisecond
			s.spawn(func() { s.rotate(c, wait) })
		}
	}
}

// advance maps a connection's cumulative ack to the logical watermark and
// releases fully durable batches. An ack above what was sent on the
// connection is a protocol error (docs/protocol.md#arrow-flight-doput: acks
// count the rows durable on this connection).
func (s *ArrowStream) advance(c *flightConn, records uint64) *Error {
	if sent := c.rowsSent.Load(); records > sent {
		return poisonf("ack of %d records on %s exceeds the %d rows sent on this connection", records, s.table, sent)
	}
	pos := c.base + records
	s.mu.Lock()
	defer s.mu.Unlock()
	if pos <= s.durable.Load() {
		return nil
	}
	now := time.Now()
	s.durable.Store(pos)
	s.lastProgress.Store(now.UnixNano())
	s.acks.record(pos, now)
	released := 0
	for released < len(s.pending) && s.pending[released].span.To <= pos {
		p := s.pending[released]
		p.rec.Release()
		s.inflightBytes -= p.bytes
		s.inflight--
		s.pending[released] = pendingBatch{}
		released++
	}
	s.pending = s.pending[released:]
	s.broadcastLocked()
	return nil
}

// endConn handles the end of connection c for reason: a fatal or poison
// reason fails the stream, any other replaces the connection. An old
// connection's end, or one after the stream stopped, changes nothing.
func (s *ArrowStream) endConn(c *flightConn, reason *Error) {
	if s.stopped() || s.cur.Load() != c {
		return
	}
	switch reason.Class {
	case FatalConfig, Poison:
		s.fail(reason)
	default:
		s.spawn(func() { s.recover(c.gen, reason) })
	}
}

// watchAcks replaces a connection that has rows outstanding but sent no ack
// for AckTimeout, like the SDKs' server_lack_of_ack_timeout (60 s by
// default, retryable: docs/protocol.md#errors-and-recovery). Rotating
// connections have their own deadline and are left alone.
func (s *ArrowStream) watchAcks() {
	tick := max(s.cfg.AckTimeout/4, 5*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		c := s.cur.Load()
		if c == nil || c.rotating.Load() || s.durable.Load() >= c.sentUpTo() {
			continue
		}
		idle := time.Since(time.Unix(0, s.lastProgress.Load()))
		if idle > s.cfg.AckTimeout && c.abandoned.CompareAndSwap(false, true) {
			s.endConn(c, &Error{Class: Transient, Code: codes.DeadlineExceeded,
				Err: fmt.Errorf("no ack from %s for %s with rows outstanding", s.table, idle.Round(time.Millisecond))})
			// Recovery needs sendMu, which a Send stuck on flow control
			// holds when the server stopped reading (overload, or a
			// partition with the TCP connection still up): cancel the
			// call so that Send fails and lets recovery in.
			c.close()
		}
	}
}

// rotate honours the service's close signal (close_stream_duration_ms,
// wait) for c without sending anything twice:
//
//  1. nothing more goes out on c: the reader marked it rotating before
//     spawning rotate, and Submit checks that under sendMu before sending;
//     taking sendMu once lets a Submit already past that check finish its
//     Send, so that the rows sent on c are final;
//  2. those rows get up to wait to be acked (Submits meanwhile queue: their
//     batches stay pending and go out on the next connection);
//  3. c is half-closed; if rows are still unacked, the server ends the call
//     after acking what it stored, and rotate waits up to closeGrace for
//     that end to collect those acks;
//  4. only then is c replaced and what is still unacked resent.
//
// Resending before 3 would resend rows the service stored and was about to
// ack: duplicates in the table.
func (s *ArrowStream) rotate(c *flightConn, wait time.Duration) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	cut := false
	// A Send stuck on flow control (the server stopped reading) holds
	// sendMu, and the watchdog leaves rotating connections alone: give it
	// closeGrace, then cancel the call so it fails and lets go. The reader
	// must then leave recovery to us, or it would recover with a
	// cancellation as the reason and back off first.
	s.sendMu.lockOrCut(closeGrace, func() {
		cut = true
		c.abandoned.Store(true)
		c.close()
	})
	target := c.sentUpTo()
	s.sendMu.Unlock()
	if !cut {
		if !s.awaitAcks(c, target, deadline.C) {
			return // the stream stopped
		}
		// From here on the call's end is ours to handle, whatever it is.
		c.abandoned.Store(true)
		// CloseSend runs under sendMu, like every CloseSend.
		s.sendMu.lockOrCut(closeGrace, c.close)
		c.halfClose()
		s.sendMu.Unlock()
		if s.durable.Load() < target {
			grace := time.NewTimer(closeGrace)
			select {
			case <-c.done: // the reader has applied every ack the server sent
			case <-grace.C:
			case <-s.ctx.Done():
			}
			grace.Stop()
		}
	}
	s.recover(c.gen, rotationReason)
}

// awaitAcks waits until the durable watermark reaches target, c's call ends,
// or deadline fires. It returns false if the stream stopped meanwhile.
func (s *ArrowStream) awaitAcks(c *flightConn, target uint64, deadline <-chan time.Time) bool {
	for {
		s.mu.Lock()
		done, ch := s.durable.Load() >= target, s.changedLocked()
		s.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return true
		case <-c.done:
			return true
		case <-s.ctx.Done():
			return false
		}
	}
}

// recover replaces connection gen (if it is still the current one) and
// resends everything not yet durable, retrying transient failures within the
// budget (see retryReconnect). When the budget runs out the stream is
// poisoned; a fatal error fails it at once; a concurrency reject poisons it
// at once with RetryAfter set, so the pool backs off before rebuilding
// instead of this stream retrying.
func (s *ArrowStream) recover(gen uint64, reason *Error) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	old := s.cur.Load()
	if old == nil || old.gen != gen || s.stopped() {
		return
	}
	s.mu.Lock()
	s.reconnects++
	s.mu.Unlock()
	s.obs.OnReconnect(s.table, reason)
	old.close()
	// A transport dead while gRPC takes it for healthy (see
	// transportSuspect) fails every call on it: the first stream to see it
	// replaces the shared channel, so that this reconnect, and the other
	// streams', dial a new connection instead of waiting on the dead one.
	s.params.suspect(old.chGen, reason)

	if err := s.retryReconnect(reason); err != nil {
		s.fail(err)
	}
}

// retryReconnect calls reconnectLocked until it succeeds, sleeping
// RecoveryBackoff before each attempt except the first after a rotation
// (which is planned, not a failure). It returns nil on success or once the
// stream stopped, else the error the stream must fail with: a fatal or
// poison error at once; a concurrency reject at once as Poison with
// RetryAfter, so the pool backs off before rebuilding instead of this stream
// hammering a service that refuses streams; Poison when the budget is
// exhausted. The caller holds sendMu.
func (s *ArrowStream) retryReconnect(reason *Error) *Error {
	last := reason
	for attempt := 1; attempt <= s.cfg.RecoveryAttempts; attempt++ {
		if attempt > 1 || !reason.IsRotation() {
			if sleepCtx(s.ctx, s.cfg.RecoveryBackoff) != nil {
				return nil
			}
		}
		err := s.reconnectLocked()
		if err == nil || s.stopped() {
			return nil
		}
		last = Classify(err)
		switch last.Class {
		case FatalConfig, Poison:
			return last
		case ConcurrencyReject:
			return &Error{Class: Poison, Code: last.Code, ServiceCode: last.ServiceCode,
				RetryAfter: last.RetryAfter, Err: fmt.Errorf("reconnect refused: %w", last)}
		}
		if attempt < s.cfg.RecoveryAttempts {
			s.obs.OnRetry(s.table, attempt, last)
		}
	}
	poisoned := exhausted(s.cfg.RecoveryAttempts, last)
	poisoned.RetryAfter = last.RetryAfter
	return poisoned
}

// reconnectLocked opens a connection based at the durable watermark and
// resends the unacknowledged suffix on it. The caller holds sendMu.
func (s *ArrowStream) reconnectLocked() error {
	s.gen++
	c, err := openFlightConn(s.ctx, s.params, s.gen)
	if err != nil {
		return err
	}

	// The base and the rows to resend are taken together, once the
	// connection is open: a late ack from the old connection may advance
	// durable and release batches at any time before that, and a base
	// older than the first resent row would map this connection's acks
	// below the rows it carries, so they would never be confirmed. Hold
	// references while encoding so a later late ack cannot release a batch
	// under us.
	s.mu.Lock()
	if s.stoppedLocked() {
		s.mu.Unlock()
		c.close()
		return ErrStreamClosed
	}
	base := s.durable.Load()
	c.base = base
	resend := make([]pendingBatch, 0, len(s.pending))
	for _, p := range s.pending {
		if p.span.To > base {
			p.rec.Retain()
			resend = append(resend, p)
		}
	}
	s.mu.Unlock()
	s.installLocked(c)
	defer func() {
		for _, p := range resend {
			p.rec.Release()
		}
	}()

	for _, p := range resend {
		rec := p.rec
		if p.span.From < base {
			rec = rec.NewSlice(int64(base-p.span.From), rec.NumRows())
		}
		_, sendErr, err := s.encodeAndSend(c, rec)
		if rec != p.rec {
			rec.Release()
		}
		if err != nil {
			c.close()
			if sendErr != nil {
				return fmt.Errorf("resend to %s: %w", s.table, err)
			}
			return poisonf("re-encode unacked rows of %s: %w", s.table, err)
		}
	}
	return nil
}

// sendLock is a mutex whose Lock can give up when a context ends.
type sendLock chan struct{}

func newSendLock() sendLock { return make(sendLock, 1) }

func (l sendLock) Lock() { l <- struct{}{} }

func (l sendLock) Unlock() { <-l }

// lockOrCut locks l, waiting at most grace before calling cut and then
// waiting for as long as it takes. The holder it waits for may be a Send
// blocked on flow control by a server that stopped reading; cut cancels that
// Send's call so it fails and unlocks.
func (l sendLock) lockOrCut(grace time.Duration, cut func()) {
	select {
	case l <- struct{}{}:
		return
	default:
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case l <- struct{}{}:
		return
	case <-t.C:
	}
	cut()
	l.Lock()
}

// LockCtx locks l, or returns ctx's error if ctx ends first.
func (l sendLock) LockCtx(ctx context.Context) error {
	select {
	case l <- struct{}{}:
		return nil
	default:
	}
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
