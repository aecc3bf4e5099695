package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
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
// connection at a time: logical row positions stay stable across the
// reconnects it performs on transient errors and rotation, and it resends the
// unacknowledged row suffix on each new connection. It implements Stream.
type ArrowStream struct {
	streamCore // its mu guards pending, submitted and draining
	encoder    *frameEncoder
	schema     *arrow.Schema
	params     connParams

	cur     atomic.Pointer[flightConn] // written under sendMu
	durable atomic.Uint64

	pending   []pendingBatch
	submitted uint64
	draining  bool
}

var (
	_ Stream          = (*ArrowStream)(nil)
	_ FailureNotifier = (*ArrowStream)(nil)
)

func newArrowStream(c *Client, table string, schema *arrow.Schema, p connParams) *ArrowStream {
	s := &ArrowStream{encoder: c.encoder, schema: schema, params: p}
	s.init(c.cfg, table, s, "submit", "rows")
	s.dead = make(chan struct{})
	return s
}

// connectFirst opens the first connection, retrying transient failures
// within the recovery budget.
func (s *ArrowStream) connectFirst(ctx context.Context) error {
	return s.streamCore.connectFirst(ctx, func(ctx context.Context, gen uint64) error {
		c, err := openFlightConn(ctx, s.params, gen)
		if err != nil {
			return err
		}
		s.installLocked(c)
		return nil
	})
}

// installLocked makes c the current connection and starts its ack reader.
// The caller holds sendMu.
func (s *ArrowStream) installLocked(c *flightConn) {
	s.lastProgress.Store(time.Now().UnixNano())
	s.cur.Store(c)
	s.spawn(func() { s.readAcks(c) })
}

// current, outstanding, connEnded, reconnectLocked and acceptErrLocked make
// ArrowStream a streamKind.
func (s *ArrowStream) current() *connState {
	if c := s.cur.Load(); c != nil {
		return &c.connState
	}
	return nil
}

func (s *ArrowStream) outstanding() (*connState, bool) {
	c := s.cur.Load()
	if c == nil {
		return nil, false
	}
	return &c.connState, s.durable.Load() < c.sentUpTo()
}

// Submit encodes rec (splitting it above the frame cap), waits for in-flight
// capacity, assigns its logical span and sends it on the current connection.
// It does not wait for durability. If the connection is rotating or broken
// the batch stays pending and goes out on the next connection.
func (s *ArrowStream) Submit(ctx context.Context, rec arrow.RecordBatch) (Span, error) {
	if !rec.Schema().Equal(s.schema) {
		return Span{}, fmt.Errorf("submit to %s: %w", s.table, ErrSchemaMismatch)
	}
	rows := uint64(rec.NumRows())
	frames, err := s.encoder.encode(rec)
	if err != nil {
		return Span{}, fmt.Errorf("submit to %s: %w", s.table, err)
	}
	var size int64
	for _, f := range frames {
		size += int64(f.size())
	}
	if err := s.admit(ctx, size); err != nil {
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

	if c := s.cur.Load(); rows > 0 && c != nil && c.usable() {
		if s.durable.Load() >= c.sentUpTo() {
			s.lastProgress.Store(time.Now().UnixNano())
		}
		// A send error marks the connection broken; its reader gets the
		// status and triggers recovery, which resends this batch.
		_ = c.send(frames)
	}
	return span, nil
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

// Durable returns the logical durable watermark.
func (s *ArrowStream) Durable() uint64 { return s.durable.Load() }

// Submitted returns the logical row position after the last submitted row.
// It is a high-water for diagnostics, never a durability signal.
func (s *ArrowStream) Submitted() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.submitted
}

// WaitDurable blocks until Durable() >= row, the stream fails, or ctx is done.
func (s *ArrowStream) WaitDurable(ctx context.Context, row uint64) error {
	return s.waitUntil(ctx, func() bool { return s.durable.Load() >= row })
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

// Close half-closes the connection, waits briefly for the server to end it,
// and releases everything. Rows not yet durable are abandoned: their waiters
// get an *Error wrapping ErrStreamClosed.
func (s *ArrowStream) Close() error {
	var pending []pendingBatch
	if s.shutdown(func() { pending, s.pending = s.pending, nil }) {
		for _, p := range pending {
			p.rec.Release()
		}
	}
	return nil
}

// readAcks reads PutResults of one connection until it ends.
func (s *ArrowStream) readAcks(c *flightConn) {
	defer close(c.done)
	for {
		res, err := c.call.Recv()
		if err != nil {
			if !c.abandoned.Load() { // else whoever cut it recovers
				s.connEnded(&c.connState, err)
			}
			return
		}
		ack, perr := parseAck(res.GetAppMetadata())
		if perr != nil {
			s.failFrom(&c.connState, Classify(perr))
			return
		}
		if err := s.advance(c, ack.AckUpToRecords); err != nil {
			s.failFrom(&c.connState, err)
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
// connection is a protocol error.
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
	s.durable.Store(pos)
	s.lastProgress.Store(time.Now().UnixNano())
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

// connEnded handles the end of a connection's ack stream.
func (s *ArrowStream) connEnded(c *connState, err error) { s.endCall(c, Classify(err)) }

// rotate honours close_stream_duration_ms: see streamCore.rotate.
func (s *ArrowStream) rotate(c *flightConn, wait time.Duration) {
	target := c.sentUpTo()
	s.streamCore.rotate(&c.connState, wait, func() bool { return s.durable.Load() >= target })
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
		frames, err := s.encoder.encode(rec)
		if rec != p.rec {
			rec.Release()
		}
		if err != nil {
			c.close()
			return poisonf("re-encode unacked rows of %s: %w", s.table, err)
		}
		if err := c.send(frames); err != nil {
			c.close()
			return fmt.Errorf("resend to %s: %w", s.table, err)
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

// retryReconnect runs the recovery budget both stream kinds share: it calls
// reconnect until it succeeds, sleeping RecoveryBackoff before each attempt
// except the first after a rotation (which is planned, not a failure). It
// returns nil on success or once the stream stopped (stopped, or ctx done),
// else the error the stream must fail with: a fatal or poison error at once;
// a concurrency reject at once as Poison with RetryAfter, so the pool backs
// off before rebuilding instead of this stream hammering a service that
// refuses streams; Poison when the budget is exhausted.
func retryReconnect(ctx context.Context, cfg Config, table string, obs Observer, reason *Error, reconnect func() error, stopped func() bool) *Error {
	last := reason
	for attempt := 1; attempt <= cfg.RecoveryAttempts; attempt++ {
		if attempt > 1 || !reason.IsRotation() {
			if sleepCtx(ctx, cfg.RecoveryBackoff) != nil {
				return nil
			}
		}
		err := reconnect()
		if err == nil || stopped() {
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
		if attempt < cfg.RecoveryAttempts {
			obs.OnRetry(table, attempt, last)
		}
	}
	poisoned := exhausted(cfg.RecoveryAttempts, last)
	poisoned.RetryAfter = last.RetryAfter
	return poisoned
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
