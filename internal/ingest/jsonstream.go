package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/benthos-zerobus/benthos-zerobus/internal/zbpb"
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
	streamCore // its mu guards pending, next and acked
	conn       zbpb.ZerobusClient
	token      TokenSource

	cur atomic.Pointer[jsonConn] // written under sendMu

	pending []jsonRequest // unacknowledged requests, logical order
	next    int64         // next logical offset to assign
	acked   int64         // highest durable logical offset, -1 before any
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
	connState
	call     zbpb.Zerobus_EphemeralStreamClient
	streamID string
	base     int64
	// sent counts requests sent on this call: the next wire offset. It is
	// raised before Send so that a fast ack is never "above sent".
	sent     atomic.Int64
	closeDur atomic.Int64 // announced close_stream_signal duration
}

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
	s := &JSONStream{
		conn:  zbpb.NewZerobusClient(c.conn),
		token: ts,
		acked: -1,
	}
	s.init(c.cfg, table, s, "ingest", "requests")
	if err := s.connectFirst(ctx); err != nil {
		return nil, fmt.Errorf("open JSON stream to %s: %w", table, err)
	}
	return s, nil
}

// connectFirst opens the first call, retrying transient failures within the
// recovery budget, and starts the ack watchdog.
func (s *JSONStream) connectFirst(ctx context.Context) error {
	return s.streamCore.connectFirst(ctx, func(ctx context.Context, gen uint64) error {
		c, err := s.openConn(ctx, gen)
		if err != nil {
			return err
		}
		s.installLocked(c)
		return nil
	})
}

// openConn starts an EphemeralStream call, sends create_stream and waits for
// create_stream_response. The call outlives ctx, which bounds only the wait.
// Errors are classified *Error (see withFreshToken).
func (s *JSONStream) openConn(ctx context.Context, gen uint64) (*jsonConn, error) {
	return withFreshToken(s.token, func() (*jsonConn, error) { return s.openConnOnce(ctx, gen) })
}

func (s *JSONStream) openConnOnce(ctx context.Context, gen uint64) (*jsonConn, error) {
	callCtx, cancel, stop, err := callContext(ctx, s.token, s.table)
	if err != nil {
		return nil, err
	}
	call, err := s.conn.EphemeralStream(callCtx)
	if err != nil {
		cancel()
		stop()
		return nil, fmt.Errorf("start EphemeralStream for %s: %w", s.table, err)
	}
	isCreated := func(resp *zbpb.EphemeralStreamResponse) error {
		if resp.GetCreateStreamResponse() == nil {
			return poisonf("first response on %s is not create_stream_response: %v", s.table, resp)
		}
		return nil
	}
	resp, err := firstResponse(ctx, call, createStreamRequest(s.table), isCreated,
		cancel, stop, s.cfg.ReadyTimeout, s.table, "create_stream", "create_stream_response")
	if err != nil {
		return nil, err
	}
	return &jsonConn{
		connState: connState{gen: gen, cancel: cancel, closeSend: call.CloseSend, done: make(chan struct{})},
		call:      call,
		streamID:  resp.GetCreateStreamResponse().GetStreamId(),
	}, nil
}

// installLocked makes c the current call and starts its ack reader. The
// caller holds sendMu and has set c.base.
func (s *JSONStream) installLocked(c *jsonConn) {
	s.lastProgress.Store(time.Now().UnixNano())
	s.cur.Store(c)
	s.spawn(func() { s.readAcks(c) })
}

// current, outstanding, connEnded, reconnectLocked and acceptErrLocked make
// JSONStream a streamKind.
func (s *JSONStream) current() *connState {
	if c := s.cur.Load(); c != nil {
		return &c.connState
	}
	return nil
}

func (s *JSONStream) outstanding() (*connState, bool) {
	c := s.cur.Load()
	if c == nil {
		return nil, false
	}
	return &c.connState, s.Acked() < c.lastSent()
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
	if err := s.admit(ctx, size); err != nil {
		return 0, err
	}
	defer s.sendMu.Unlock()
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

// WaitForOffset blocks until every request up to the logical offset is
// durable, the stream fails, or ctx is done.
func (s *JSONStream) WaitForOffset(ctx context.Context, offset int64) error {
	return s.waitUntil(ctx, func() bool { return s.acked >= offset })
}

// readAcks reads the responses of one call until it ends.
func (s *JSONStream) readAcks(c *jsonConn) {
	defer close(c.done)
	for {
		resp, err := c.call.Recv()
		if err != nil {
			if !c.abandoned.Load() { // else whoever cut it recovers
				s.connEnded(&c.connState, err)
			}
			return
		}
		switch p := resp.GetPayload().(type) {
		case *zbpb.EphemeralStreamResponse_IngestRecordResponse:
			if err := s.advance(c, p.IngestRecordResponse.GetDurabilityAckUpToOffset()); err != nil {
				s.failFrom(&c.connState, err)
				return
			}
		case *zbpb.EphemeralStreamResponse_CloseStreamSignal:
			c.closeDur.Store(int64(p.CloseStreamSignal.GetDuration().AsDuration()))
			if c.rotating.CompareAndSwap(false, true) {
				s.obs.OnRotation(s.table)
				wait := time.Duration(c.closeDur.Load())
				s.spawn(func() { s.rotate(c, wait) })
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
		s.inflight--
		s.pending[released] = jsonRequest{}
		released++
	}
	s.pending = s.pending[released:]
	s.broadcastLocked()
	return nil
}

// connEnded handles the end of a call's response stream.
func (s *JSONStream) connEnded(c *connState, err error) {
	var ce *Error
	switch {
	case errors.Is(err, io.EOF) && c.rotating.Load():
		ce = rotationReason
	case errors.Is(err, io.EOF):
		ce = Classify(fmt.Errorf("JSON stream to %s: server ended the call without status: %w", s.table, err))
	default:
		ce = Classify(fmt.Errorf("JSON stream to %s: %w", s.table, err))
	}
	s.endCall(c, ce)
}

// rotate honours close_stream_signal: see streamCore.rotate.
func (s *JSONStream) rotate(c *jsonConn, wait time.Duration) {
	target := c.lastSent()
	s.streamCore.rotate(&c.connState, wait, func() bool { return s.acked >= target })
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
	if s.stoppedLocked() {
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
	s.shutdown(func() { s.pending = nil })
	return nil
}
