package zerobus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/benthos-zerobus/benthos-zerobus/internal/zerobus/zbpb"
)

// JSONStream is one connection of the record path
// (/databricks.zerobus.Zerobus/EphemeralStream) carrying JSON records. It is
// deliberately thin: offsets are per connection (from 0, +1 per request),
// and it does not reconnect. After a close signal (rotation) or an error the
// caller opens a new stream and resends what WaitForOffset did not confirm.
// Its methods are safe for concurrent use.
type JSONStream struct {
	table    string
	streamID string
	call     zbpb.Zerobus_EphemeralStreamClient
	cancel   context.CancelFunc
	done     chan struct{}

	sendMu     sync.Mutex   // serializes Send and offset assignment
	nextOffset atomic.Int64 // next offset to assign; raised before Send

	mu       sync.Mutex
	acked    int64 // highest durable offset, -1 before the first ack
	closing  bool  // close_stream_signal seen
	failed   *Error
	closed   bool
	notify   chan struct{}
	closeDur time.Duration
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

// OpenJSONStream opens a JSON record stream to table: it sends create_stream
// and waits (bounded by the ready timeout) for the stream id. On
// UNAUTHENTICATED or PERMISSION_DENIED it drops the token and tries once more.
// Errors are *Error.
func (c *Client) OpenJSONStream(ctx context.Context, table string) (*JSONStream, error) {
	if _, _, _, err := splitTable(table); err != nil {
		return nil, &Error{Class: FatalConfig, Code: codes.InvalidArgument, Err: err}
	}
	ts, err := c.TokenSource(table)
	if err != nil {
		return nil, &Error{Class: FatalConfig, Code: codes.InvalidArgument, Err: err}
	}
	s, err := c.openJSONOnce(ctx, table, ts)
	if err != nil {
		if serviceRejectedToken(err) {
			ts.Invalidate()
			s, err = c.openJSONOnce(ctx, table, ts)
		}
	}
	if err != nil {
		return nil, Classify(fmt.Errorf("open JSON stream to %s: %w", table, err))
	}
	return s, nil
}

func (c *Client) openJSONOnce(ctx context.Context, table string, ts TokenSource) (*JSONStream, error) {
	tok, err := ts.Token(ctx)
	if err != nil {
		return nil, fmt.Errorf("token: %w", &tokenSourceError{err})
	}
	callCtx, cancel := context.WithCancel(context.Background())
	callCtx = metadata.AppendToOutgoingContext(callCtx,
		HeaderAuthorization, "Bearer "+tok,
		HeaderTableName, table,
	)
	call, err := zbpb.NewZerobusClient(c.conn).EphemeralStream(callCtx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("start EphemeralStream: %w", err)
	}
	if err := call.Send(createStreamRequest(table)); err != nil {
		_, rerr := call.Recv()
		cancel()
		if rerr != nil {
			err = rerr
		}
		return nil, fmt.Errorf("send create_stream: %w", err)
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
	timer := time.NewTimer(c.cfg.ReadyTimeout)
	defer timer.Stop()
	var resp *zbpb.EphemeralStreamResponse
	select {
	case r := <-got:
		if r.err != nil {
			cancel()
			return nil, fmt.Errorf("wait for create_stream_response: %w", r.err)
		}
		resp = r.resp
	case <-timer.C:
		cancel()
		return nil, &Error{Class: Transient, Code: codes.DeadlineExceeded,
			Err: fmt.Errorf("no create_stream_response within %s", c.cfg.ReadyTimeout)}
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
	created := resp.GetCreateStreamResponse()
	if created == nil {
		cancel()
		return nil, poisonf("first response is not create_stream_response: %v", resp)
	}
	s := &JSONStream{
		table:    table,
		streamID: created.GetStreamId(),
		call:     call,
		cancel:   cancel,
		done:     make(chan struct{}),
		acked:    -1,
		notify:   make(chan struct{}),
	}
	go s.readAcks()
	return s, nil
}

// StreamID returns the id the service assigned in create_stream_response.
func (s *JSONStream) StreamID() string { return s.streamID }

// Ingest sends records as one request: a single record as ingest_record,
// several as ingest_record_batch. It returns the request's offset; the
// records are durable once WaitForOffset(offset) returns nil.
func (s *JSONStream) Ingest(ctx context.Context, records []string) (int64, error) {
	if len(records) == 0 {
		return 0, errors.New("ingest: no records")
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if err := s.acceptErr(); err != nil {
		return 0, err
	}
	offset := s.nextOffset.Load()
	var req *zbpb.EphemeralStreamRequest
	if len(records) == 1 {
		req = &zbpb.EphemeralStreamRequest{Payload: &zbpb.EphemeralStreamRequest_IngestRecord{
			IngestRecord: &zbpb.IngestRecordRequest{
				OffsetId: proto.Int64(offset),
				Record:   &zbpb.IngestRecordRequest_JsonRecord{JsonRecord: records[0]},
			},
		}}
	} else {
		req = &zbpb.EphemeralStreamRequest{Payload: &zbpb.EphemeralStreamRequest_IngestRecordBatch{
			IngestRecordBatch: &zbpb.IngestRecordBatchRequest{
				OffsetId: proto.Int64(offset),
				Batch:    &zbpb.IngestRecordBatchRequest_JsonBatch{JsonBatch: &zbpb.JsonRecordBatch{Records: records}},
			},
		}}
	}
	// Raise the offset before Send so a fast ack is never "above sent".
	s.nextOffset.Store(offset + 1)
	if err := s.call.Send(req); err != nil {
		// The status arrives on Recv; wait briefly for the reader to see it.
		select {
		case <-s.done:
		case <-time.After(time.Second):
		}
		if ferr := s.failure(); ferr != nil {
			return 0, ferr
		}
		return 0, Classify(fmt.Errorf("ingest offset %d: %w", offset, err))
	}
	return offset, nil
}

func (s *JSONStream) acceptErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.failed != nil:
		return s.failed
	case s.closed:
		return &Error{Class: Poison, Code: codes.Canceled, Err: ErrStreamClosed}
	case s.closing:
		return &Error{Class: Transient, Code: codes.Unavailable, ServiceCode: ServiceCodeStreamRotation,
			Err: fmt.Errorf("stream to %s is closing (rotation): open a new one", s.table)}
	}
	return nil
}

func (s *JSONStream) failure() *Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// Acked returns the highest durable offset, -1 before the first ack.
func (s *JSONStream) Acked() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// Closing reports whether the service announced the end of this stream and
// how long it keeps it open for outstanding acks.
func (s *JSONStream) Closing() (bool, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing, s.closeDur
}

// WaitForOffset blocks until every request up to offset is durable, the
// stream fails, or ctx is done.
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

func (s *JSONStream) readAcks() {
	defer close(s.done)
	for {
		resp, err := s.call.Recv()
		if err != nil {
			s.mu.Lock()
			if s.failed == nil {
				if s.closed && (errors.Is(err, io.EOF) || Classify(err).Code == codes.Canceled) {
					s.failed = &Error{Class: Poison, Code: codes.Canceled, Err: ErrStreamClosed}
				} else {
					if errors.Is(err, io.EOF) {
						err = fmt.Errorf("server ended the stream without status: %w", err)
					}
					s.failed = Classify(fmt.Errorf("JSON stream to %s: %w", s.table, err))
				}
			}
			close(s.notify)
			s.notify = make(chan struct{})
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
		switch p := resp.GetPayload().(type) {
		case *zbpb.EphemeralStreamResponse_IngestRecordResponse:
			off := p.IngestRecordResponse.GetDurabilityAckUpToOffset()
			if off >= s.nextOffset.Load() {
				s.failed = poisonf("ack of offset %d on %s is above the last sent offset", off, s.table)
				s.cancel()
			} else if off > s.acked {
				s.acked = off
			}
		case *zbpb.EphemeralStreamResponse_CloseStreamSignal:
			s.closing = true
			s.closeDur = p.CloseStreamSignal.GetDuration().AsDuration()
		}
		close(s.notify)
		s.notify = make(chan struct{})
		s.mu.Unlock()
	}
}

// Close half-closes the stream, waits briefly for the server to end it and
// releases it. Requests not yet acked are abandoned.
func (s *JSONStream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.sendMu.Lock()
	_ = s.call.CloseSend()
	s.sendMu.Unlock()
	select {
	case <-s.done:
	case <-time.After(closeGrace):
	}
	s.cancel()
	<-s.done
	return nil
}
