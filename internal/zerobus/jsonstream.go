package zerobus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/benthos-zerobus/benthos-zerobus/internal/zerobus/zbpb"
)

// JSONStream is a logical stream of JSON records over the record path
// (/databricks.zerobus.Zerobus/EphemeralStream). Like ArrowStream it owns one
// call at a time and hides the calls it replaces: offsets returned by Ingest
// are logical (from 0 when the stream is opened, +1 per request) and stay
// stable across reconnects. The service's offsets restart at 0 on every call,
// so the stream keeps every request until it is acknowledged and, after a
// close signal (rotation) or a transient error, opens a new call
// (create_stream again), resends the unacknowledged requests renumbered from
// 0 and maps the new call's acks back to logical offsets. Delivery is
// at-least-once: a request whose ack was lost with its call is stored again.
//
// Reconnects are bounded by Config.RecoveryAttempts with
// Config.RecoveryBackoff between attempts; when the budget runs out, or on a
// fatal error, the stream fails and WaitForOffset and Ingest return the
// *Error. Its methods are safe for concurrent use.
type JSONStream struct {
	cfg   Config
	table string
	conn  zbpb.ZerobusClient
	token TokenSource
	obs   Observer

	ctx    context.Context // cancelled by fail and Close
	cancel context.CancelFunc
	bg     sync.WaitGroup

	// sendMu serializes sends and call replacement, so requests go out in
	// logical order and wire offsets are consecutive per call. Recovery
	// holds it while reconnecting, so Ingest waits for it under its ctx.
	sendMu sendLock
	gen    uint64                   // last call generation; under sendMu
	cur    atomic.Pointer[jsonConn] // written under sendMu

	// lastProgress (unix nanos) is when the ack clock last restarted; the
	// ack watchdog measures from it (see ArrowStream.lastProgress).
	lastProgress atomic.Int64

	mu            sync.Mutex
	pending       []jsonRequest // unacknowledged requests, logical order
	next          int64         // next logical offset to assign
	acked         int64         // highest durable logical offset, -1 before any
	inflightBytes int64         // reserved by Ingest, released by acks
	inflightReqs  int
	failed        *Error
	closed        bool
	notify        chan struct{} // closed and replaced on every state change
	reconnects    int
}

// jsonRequest is an ingested request kept until it is durable.
type jsonRequest struct {
	offset  int64 // logical
	records []string
	bytes   int64
}

// jsonConn is one EphemeralStream call. Its wire offsets start at 0; base is
// the logical offset that wire offset 0 stands for.
type jsonConn struct {
	gen      uint64
	call     zbpb.Zerobus_EphemeralStreamClient
	cancel   context.CancelFunc
	streamID string
	base     int64
	// sent counts requests sent on this call: the next wire offset. It is
	// raised before Send so that a fast ack is never "above sent".
	sent       atomic.Int64
	rotating   atomic.Bool  // close_stream_signal seen
	closeDur   atomic.Int64 // announced close_stream_signal duration
	broken     atomic.Bool  // a Send failed; the reader sees the status
	abandoned  atomic.Bool  // cut by the watchdog or a rotation, which recover it
	halfClosed atomic.Bool
	closeOnce  sync.Once
	done       chan struct{} // closed when the reader exits
}

func (c *jsonConn) usable() bool { return !c.rotating.Load() && !c.broken.Load() }

// lastSent is the logical offset of the last request sent on c (base-1 when
// none was).
func (c *jsonConn) lastSent() int64 { return c.base + c.sent.Load() - 1 }

// send writes req with the next wire offset. The caller holds the stream's
// sendMu.
func (c *jsonConn) send(req jsonRequest) error {
	wire := c.sent.Load()
	c.sent.Store(wire + 1)
	if err := c.call.Send(ingestRequest(wire, req.records)); err != nil {
		c.broken.Store(true)
		return fmt.Errorf("send offset %d (wire %d): %w", req.offset, wire, err)
	}
	return nil
}

// halfClose ends the sending side once. The caller holds sendMu.
func (c *jsonConn) halfClose() {
	if c.halfClosed.CompareAndSwap(false, true) {
		_ = c.call.CloseSend()
	}
}

// close cancels the call; the reader exits.
func (c *jsonConn) close() { c.closeOnce.Do(c.cancel) }

// createStreamRequest is the first message of a JSON stream.
func createStreamRequest(table string) *zbpb.EphemeralStreamRequest {
	return &zbpb.EphemeralStreamRequest{Payload: &zbpb.EphemeralStreamRequest_CreateStream{
		CreateStream: &zbpb.CreateIngestStreamRequest{
			TableName:  proto.String(table),
			RecordType: zbpb.RecordType_JSON.Enum(),
		},
	}}
}

// ingestRequest is one request at wire offset: a single record as
// ingest_record, several as ingest_record_batch.
func ingestRequest(offset int64, records []string) *zbpb.EphemeralStreamRequest {
	if len(records) == 1 {
		return &zbpb.EphemeralStreamRequest{Payload: &zbpb.EphemeralStreamRequest_IngestRecord{
			IngestRecord: &zbpb.IngestRecordRequest{
				OffsetId: proto.Int64(offset),
				Record:   &zbpb.IngestRecordRequest_JsonRecord{JsonRecord: records[0]},
			},
		}}
	}
	return &zbpb.EphemeralStreamRequest{Payload: &zbpb.EphemeralStreamRequest_IngestRecordBatch{
		IngestRecordBatch: &zbpb.IngestRecordBatchRequest{
			OffsetId: proto.Int64(offset),
			Batch:    &zbpb.IngestRecordBatchRequest_JsonBatch{JsonBatch: &zbpb.JsonRecordBatch{Records: records}},
		},
	}}
}

// OpenJSONStream opens a JSON record stream to table: it sends create_stream
// and waits (bounded by the ready timeout) for the stream id. Transient
// failures are retried within the recovery budget; on UNAUTHENTICATED or
// PERMISSION_DENIED the token is dropped and the call tried once more. Errors
// wrap an *Error.
func (c *Client) OpenJSONStream(ctx context.Context, table string) (*JSONStream, error) {
	if _, _, _, err := splitTable(table); err != nil {
		return nil, &Error{Class: FatalConfig, Code: codes.InvalidArgument, Err: err}
	}
	ts, err := c.TokenSource(table)
	if err != nil {
		return nil, &Error{Class: FatalConfig, Code: codes.InvalidArgument, Err: err}
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &JSONStream{
		cfg:    c.cfg,
		table:  table,
		conn:   zbpb.NewZerobusClient(c.conn),
		token:  ts,
		obs:    c.cfg.Observer,
		ctx:    sctx,
		cancel: cancel,
		acked:  -1,
		sendMu: newSendLock(),
		notify: make(chan struct{}),
	}
	if err := s.connectFirst(ctx); err != nil {
		return nil, fmt.Errorf("open JSON stream to %s: %w", table, err)
	}
	return s, nil
}

// connectFirst opens the first call, retrying transient failures within the
// recovery budget, and starts the ack watchdog.
func (s *JSONStream) connectFirst(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			s.cancel() // the stream is discarded; release its context
		}
	}()
	var last *Error
	for attempt := 1; attempt <= s.cfg.RecoveryAttempts; attempt++ {
		if attempt > 1 {
			s.obs.OnRetry(s.table, attempt-1, last)
			if err := sleepCtx(ctx, s.cfg.RecoveryBackoff); err != nil {
				return Classify(err)
			}
		}
		s.sendMu.Lock()
		s.gen++
		c, err := s.openConn(ctx, s.gen)
		if err == nil {
			s.installLocked(c)
			s.sendMu.Unlock()
			s.bg.Add(1)
			go func() {
				defer s.bg.Done()
				s.watchAcks()
			}()
			return nil
		}
		s.sendMu.Unlock()
		last = Classify(err)
		if last.Class != Transient || ctx.Err() != nil {
			return last
		}
	}
	return &Error{Class: Transient, Code: last.Code, ServiceCode: last.ServiceCode,
		Err: fmt.Errorf("%d connection attempts failed: %w", s.cfg.RecoveryAttempts, last)}
}

// openConn starts one call, dropping the token and trying once more when
// the service refuses it. Errors are *Error.
func (s *JSONStream) openConn(ctx context.Context, gen uint64) (*jsonConn, error) {
	c, err := s.openConnOnce(ctx, gen)
	if err != nil && serviceRejectedToken(err) {
		s.token.Invalidate()
		c, err = s.openConnOnce(ctx, gen)
	}
	if err != nil {
		return nil, Classify(err)
	}
	return c, nil
}

// openConnOnce starts an EphemeralStream call, sends create_stream and waits
// for create_stream_response. The call outlives ctx, which bounds only the
// wait.
func (s *JSONStream) openConnOnce(ctx context.Context, gen uint64) (*jsonConn, error) {
	tok, err := s.token.Token(ctx)
	if err != nil {
		return nil, fmt.Errorf("token for %s: %w", s.table, &tokenSourceError{err})
	}
	callCtx, cancel := context.WithCancel(context.Background())
	callCtx = metadata.AppendToOutgoingContext(callCtx,
		HeaderAuthorization, "Bearer "+tok,
		HeaderTableName, s.table,
	)
	// Until the call is created ctx bounds it too (see openFlightConnOnce).
	stop := context.AfterFunc(ctx, cancel)
	ready := false
	defer func() {
		if !ready {
			stop() // the call is cancelled already; drop the hook from ctx
		}
	}()
	call, err := s.conn.EphemeralStream(callCtx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("start EphemeralStream for %s: %w", s.table, err)
	}
	if err := call.Send(createStreamRequest(s.table)); err != nil {
		// The status, if any, comes from Recv.
		_, rerr := call.Recv()
		cancel()
		if rerr != nil {
			err = rerr
		}
		return nil, fmt.Errorf("send create_stream for %s: %w", s.table, err)
	}

	type result struct {
		resp *zbpb.EphemeralStreamResponse
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := call.Recv()
		got <- result{resp, err}
	}()
	timer := time.NewTimer(s.cfg.ReadyTimeout)
	defer timer.Stop()
	var resp *zbpb.EphemeralStreamResponse
	select {
	case r := <-got:
		if r.err != nil {
			cancel()
			return nil, fmt.Errorf("wait for create_stream_response on %s: %w", s.table, r.err)
		}
		resp = r.resp
	case <-timer.C:
		cancel()
		return nil, &Error{Class: Transient, Code: codes.DeadlineExceeded,
			Err: fmt.Errorf("no create_stream_response on %s within %s", s.table, s.cfg.ReadyTimeout)}
	case <-ctx.Done():
		cancel()
		return nil, fmt.Errorf("wait for create_stream_response on %s: %w", s.table, ctx.Err())
	}
	created := resp.GetCreateStreamResponse()
	if created == nil {
		cancel()
		return nil, poisonf("first response on %s is not create_stream_response: %v", s.table, resp)
	}
	if ready = stop(); !ready { // ctx ended meanwhile and cancelled the call
		return nil, fmt.Errorf("wait for create_stream_response on %s: %w", s.table, ctx.Err())
	}
	return &jsonConn{gen: gen, call: call, cancel: cancel, streamID: created.GetStreamId(), done: make(chan struct{})}, nil
}

// installLocked makes c the current call and starts its ack reader. The
// caller holds sendMu and has set c.base.
func (s *JSONStream) installLocked(c *jsonConn) {
	s.lastProgress.Store(time.Now().UnixNano())
	s.cur.Store(c)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.readAcks(c)
	}()
}

// StreamID returns the id the service assigned to the current call in
// create_stream_response; it changes when the stream reconnects.
func (s *JSONStream) StreamID() string {
	if c := s.cur.Load(); c != nil {
		return c.streamID
	}
	return ""
}

// Ingest sends records as one request: a single record as ingest_record,
// several as ingest_record_batch. It returns the request's logical offset;
// the records are durable once WaitForOffset(offset) returns nil. It blocks
// while the stream holds MaxInflightBatches requests or MaxInflightBytes of
// records unacknowledged. If the current call is rotating or broken the
// request is kept and goes out on the next call; Ingest fails only when the
// stream has failed or is closed.
func (s *JSONStream) Ingest(ctx context.Context, records []string) (int64, error) {
	if len(records) == 0 {
		return 0, errors.New("ingest: no records")
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var size int64
	for _, r := range records {
		size += int64(len(r))
	}
	if err := s.reserve(ctx, size); err != nil {
		return 0, err
	}

	if err := s.sendMu.LockCtx(ctx); err != nil {
		s.mu.Lock()
		s.inflightBytes -= size
		s.inflightReqs--
		s.broadcastLocked()
		s.mu.Unlock()
		return 0, fmt.Errorf("ingest to %s: wait for the call: %w", s.table, err)
	}
	defer s.sendMu.Unlock()
	s.mu.Lock()
	if err := s.acceptErrLocked(); err != nil {
		s.inflightBytes -= size
		s.inflightReqs--
		s.broadcastLocked()
		s.mu.Unlock()
		return 0, err
	}
	// The stream may resend the request long after Ingest returns: keep a
	// copy the caller cannot change under it.
	req := jsonRequest{offset: s.next, records: slices.Clone(records), bytes: size}
	s.next++
	s.pending = append(s.pending, req)
	idle := s.acked >= req.offset-1
	s.mu.Unlock()

	if c := s.cur.Load(); c != nil && c.usable() {
		if idle {
			s.lastProgress.Store(time.Now().UnixNano())
		}
		// A send error marks the call broken; its reader gets the status
		// and triggers recovery, which resends this request.
		_ = c.send(req)
	}
	return req.offset, nil
}

// reserve blocks until the stream has room for one more request of size
// bytes. A request always fits when nothing is unacknowledged.
func (s *JSONStream) reserve(ctx context.Context, size int64) error {
	for {
		s.mu.Lock()
		if err := s.acceptErrLocked(); err != nil {
			s.mu.Unlock()
			return err
		}
		if s.inflightReqs == 0 ||
			(s.inflightBytes+size <= s.cfg.MaxInflightBytes && s.inflightReqs < s.cfg.MaxInflightBatches) {
			s.inflightBytes += size
			s.inflightReqs++
			s.mu.Unlock()
			return nil
		}
		ch := s.notify
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("ingest to %s: wait for in-flight capacity: %w", s.table, ctx.Err())
		}
	}
}

// acceptErrLocked says why Ingest must refuse, or nil. The caller holds mu.
func (s *JSONStream) acceptErrLocked() error {
	switch {
	case s.failed != nil:
		return s.failed
	case s.closed:
		return &Error{Class: Poison, Code: codes.Canceled, Err: ErrStreamClosed}
	}
	return nil
}

func (s *JSONStream) broadcastLocked() {
	close(s.notify)
	s.notify = make(chan struct{})
}

// Acked returns the highest durable logical offset, -1 before the first ack.
func (s *JSONStream) Acked() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// Closing reports whether the service announced the end of the current call
// (rotation) and how long it keeps that call open for outstanding acks. The
// stream replaces the call by itself; this is informational.
func (s *JSONStream) Closing() (bool, time.Duration) {
	c := s.cur.Load()
	if c == nil || !c.rotating.Load() {
		return false, 0
	}
	return true, time.Duration(c.closeDur.Load())
}

// Reconnects returns how many times the stream replaced its call.
func (s *JSONStream) Reconnects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reconnects
}

// WaitForOffset blocks until every request up to the logical offset is
// durable, the stream fails, or ctx is done.
func (s *JSONStream) WaitForOffset(ctx context.Context, offset int64) error {
	for {
		s.mu.Lock()
		if s.acked >= offset {
			s.mu.Unlock()
			return nil
		}
		if s.failed != nil {
			err := s.failed
			s.mu.Unlock()
			return err
		}
		ch := s.notify
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// readAcks reads the responses of one call until it ends.
func (s *JSONStream) readAcks(c *jsonConn) {
	defer close(c.done)
	for {
		resp, err := c.call.Recv()
		if err != nil {
			if !c.abandoned.Load() { // else whoever cut it recovers
				s.connEnded(c, err)
			}
			return
		}
		switch p := resp.GetPayload().(type) {
		case *zbpb.EphemeralStreamResponse_IngestRecordResponse:
			if err := s.advance(c, p.IngestRecordResponse.GetDurabilityAckUpToOffset()); err != nil {
				s.failFrom(c, err)
				return
			}
		case *zbpb.EphemeralStreamResponse_CloseStreamSignal:
			c.closeDur.Store(int64(p.CloseStreamSignal.GetDuration().AsDuration()))
			if c.rotating.CompareAndSwap(false, true) {
				s.obs.OnRotation(s.table)
				wait := time.Duration(c.closeDur.Load())
				s.bg.Add(1)
				go func() {
					defer s.bg.Done()
					s.rotate(c, wait)
				}()
			}
		}
	}
}

// advance maps a call's cumulative ack (a wire offset) to the logical
// watermark and drops the requests it covers. An ack above what was sent on
// the call is a protocol error.
func (s *JSONStream) advance(c *jsonConn, wire int64) *Error {
	if sent := c.sent.Load(); wire >= sent {
		return poisonf("ack of offset %d on %s is above the last offset sent on this call (%d)", wire, s.table, sent-1)
	}
	pos := c.base + wire
	s.mu.Lock()
	defer s.mu.Unlock()
	if pos <= s.acked {
		return nil
	}
	s.acked = pos
	s.lastProgress.Store(time.Now().UnixNano())
	released := 0
	for released < len(s.pending) && s.pending[released].offset <= pos {
		s.inflightBytes -= s.pending[released].bytes
		s.inflightReqs--
		s.pending[released] = jsonRequest{}
		released++
	}
	s.pending = s.pending[released:]
	s.broadcastLocked()
	return nil
}

// fail records the stream's terminal error, wakes every waiter and stops the
// call. Only the first failure counts.
func (s *JSONStream) fail(err *Error) {
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
	s.broadcastLocked()
	s.mu.Unlock()
	s.cancel()
	if c := s.cur.Load(); c != nil {
		c.close()
	}
}

// failFrom fails the stream for an error seen on c, unless c was already
// replaced (a late error from an old call changes nothing).
func (s *JSONStream) failFrom(c *jsonConn, err *Error) {
	if s.cur.Load() != c {
		c.close()
		return
	}
	s.fail(err)
}

func (s *JSONStream) stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed != nil || s.closed
}

// connEnded handles the end of a call's response stream.
func (s *JSONStream) connEnded(c *jsonConn, err error) {
	if s.stopped() || s.cur.Load() != c {
		return
	}
	var ce *Error
	switch {
	case errors.Is(err, io.EOF) && c.rotating.Load():
		ce = rotationReason
	case errors.Is(err, io.EOF):
		ce = Classify(fmt.Errorf("JSON stream to %s: server ended the call without status: %w", s.table, err))
	default:
		ce = Classify(fmt.Errorf("JSON stream to %s: %w", s.table, err))
	}
	switch ce.Class {
	case FatalConfig, Poison:
		s.fail(ce)
	default:
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			s.recover(c.gen, ce)
		}()
	}
}

// watchAcks replaces a call that has requests outstanding but sent no ack
// for AckTimeout (see ArrowStream.watchAcks). Rotating calls have their own
// deadline and are left alone.
func (s *JSONStream) watchAcks() {
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
		if c == nil || c.rotating.Load() || s.Acked() >= c.lastSent() {
			continue
		}
		idle := time.Since(time.Unix(0, s.lastProgress.Load()))
		if idle > s.cfg.AckTimeout && c.abandoned.CompareAndSwap(false, true) {
			s.connEnded(c, &Error{Class: Transient, Code: codes.DeadlineExceeded,
				Err: fmt.Errorf("no ack from %s for %s with requests outstanding", s.table, idle.Round(time.Millisecond))})
			// Recovery needs sendMu, which a Send stuck on flow control
			// holds when the server stopped reading (overload, or a
			// partition with the TCP connection still up): cancel the
			// call so that Send fails and lets recovery in.
			c.close()
		}
	}
}

// rotate honours close_stream_signal: nothing more is sent on c (it is
// marked rotating), outstanding requests get up to wait to be acked, then the
// call is half-closed and replaced.
func (s *JSONStream) rotate(c *jsonConn, wait time.Duration) {
	target := c.lastSent()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		acked, ch := s.acked, s.notify
		s.mu.Unlock()
		if acked >= target {
			break
		}
		select {
		case <-ch:
			continue
		case <-timer.C:
		case <-c.done:
		case <-s.ctx.Done():
			return
		}
		break
	}
	// Half-closing needs sendMu, which a Send stuck on flow control may
	// hold: cut it loose after closeGrace (see ArrowStream.rotate).
	s.sendMu.lockOrCut(closeGrace, func() {
		c.abandoned.Store(true)
		c.close()
	})
	c.halfClose()
	s.sendMu.Unlock()
	s.recover(c.gen, rotationReason)
}

// recover replaces call gen (if it is still the current one) and resends
// every unacknowledged request, retrying transient failures within the
// budget, as ArrowStream.recover does: the stream fails when the budget runs
// out (Poison), at once on a fatal error, and at once on a concurrency reject
// (Poison with RetryAfter, so the caller backs off before rebuilding).
func (s *JSONStream) recover(gen uint64, reason *Error) {
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

	if err := retryReconnect(s.ctx, s.cfg, s.table, s.obs, reason, s.reconnectLocked, s.stopped); err != nil {
		s.fail(err)
	}
}

// reconnectLocked opens a new call based at the first unacknowledged logical
// offset and resends the unacknowledged requests on it with wire offsets from
// 0. The caller holds sendMu.
func (s *JSONStream) reconnectLocked() error {
	s.gen++
	c, err := s.openConn(s.ctx, s.gen)
	if err != nil {
		return err
	}
	// The base and the requests to resend are taken together, so a late
	// ack from the old call cannot shift one against the other.
	s.mu.Lock()
	if s.failed != nil || s.closed {
		s.mu.Unlock()
		c.close()
		return ErrStreamClosed
	}
	c.base = s.acked + 1
	resend := append([]jsonRequest(nil), s.pending...)
	s.mu.Unlock()
	s.installLocked(c)

	for _, req := range resend {
		if err := c.send(req); err != nil {
			c.close()
			return fmt.Errorf("resend to %s: %w", s.table, err)
		}
	}
	return nil
}

// Close half-closes the current call, waits briefly for the server to end it
// and releases the stream. Requests not yet acked are abandoned: their
// waiters get an *Error wrapping ErrStreamClosed.
func (s *JSONStream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.failed == nil {
		s.failed = &Error{Class: Poison, Code: codes.Canceled, Err: ErrStreamClosed}
	}
	s.pending = nil
	s.inflightBytes, s.inflightReqs = 0, 0
	s.broadcastLocked()
	s.mu.Unlock()

	// Stop recovery first (its sleeps and opens watch ctx), then half-close
	// the current call under sendMu: CloseSend must not race a Send. A Send
	// stuck on flow control is cut loose by cancelling its call.
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
	return nil
}
