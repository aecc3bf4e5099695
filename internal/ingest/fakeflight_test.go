package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// This file is a small Arrow Flight DoPut server the socket tests control. It
// records every connection's headers, raw frames and decoded rows, and lets
// a test script acks, rotation and errors per connection and frame.

// rawFrame is what the server saw of one FlightData message.
type rawFrame struct {
	hasDescriptor bool
	header        []byte
	bodyLen       int
	appMetadata   string
}

// fakeConn is one DoPut call as the server saw it.
type fakeConn struct {
	index   int
	md      metadata.MD
	mu      sync.Mutex
	raw     []rawFrame // raw[0] is the schema frame
	offsets []int64    // offset_id of each batch frame
	ids     []int64    // the "id" column of every row, in arrival order
	rows    uint64

	sendMu sync.Mutex
	stream flight.FlightService_DoPutServer
}

// frameEvent is passed to the server's frame hook after each batch frame.
type frameEvent struct {
	conn  *fakeConn
	frame int    // 0-based batch frame index on this connection
	rows  uint64 // rows received on this connection so far
}

// reply is what the server does after a frame.
type reply struct {
	noAck    bool    // send no PutResult
	ackRows  *uint64 // ack this many rows instead of all received
	closeMs  *uint64 // add close_stream_duration_ms
	endAfter error   // then end the call with this error (nil: keep going)
}

type fakeFlightServer struct {
	flight.BaseFlightServer
	t *testing.T

	// setup runs when a call starts, before the ready signal; a non-nil
	// error ends the call with it. conn is 0-based across the server's life.
	setup func(conn int, md metadata.MD) error
	// noReady withholds the ready signal from these connections.
	noReady func(conn int) bool
	// onFrame decides the reply to each batch frame; nil acks everything.
	onFrame func(ev frameEvent) reply
	// onHalfClose runs when the client half-closed a call (after its last
	// frame); it may send acks, and its error ends the call (nil: OK).
	onHalfClose func(fc *fakeConn, rows uint64) error

	mu    sync.Mutex
	conns []*fakeConn
}

func uint64p(v uint64) *uint64 { return &v }

func (s *fakeFlightServer) DoPut(stream flight.FlightService_DoPutServer) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	s.mu.Lock()
	fc := &fakeConn{index: len(s.conns), md: md, stream: stream}
	s.conns = append(s.conns, fc)
	setup, noReady, onFrame, onHalfClose := s.setup, s.noReady, s.onFrame, s.onHalfClose
	s.mu.Unlock()

	if setup != nil {
		if err := setup(fc.index, md); err != nil {
			return err
		}
	}
	rec := &recordingReader{stream: stream, conn: fc}
	rdr, err := flight.NewRecordReader(rec)
	if err != nil {
		return fmt.Errorf("fake server: read schema: %w", err)
	}
	defer rdr.Release()
	if noReady != nil && noReady(fc.index) {
		// Hold the call open without a ready signal until the client leaves.
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	if err := fc.sendAck(-1, 0, nil); err != nil {
		return err
	}
	frame := 0
	for rdr.Next() {
		batch := rdr.RecordBatch()
		var meta struct {
			OffsetID *int64 `json:"offset_id"`
		}
		if err := json.Unmarshal(rdr.LatestAppMetadata(), &meta); err != nil || meta.OffsetID == nil {
			return fmt.Errorf("fake server: bad app_metadata %q", rdr.LatestAppMetadata())
		}
		ids := batch.Column(0).(*array.Int64).Int64Values()
		fc.mu.Lock()
		fc.offsets = append(fc.offsets, *meta.OffsetID)
		fc.ids = append(fc.ids, ids...)
		fc.rows += uint64(batch.NumRows())
		rows := fc.rows
		fc.mu.Unlock()

		r := reply{}
		if onFrame != nil {
			r = onFrame(frameEvent{conn: fc, frame: frame, rows: rows})
		}
		frame++
		if !r.noAck {
			ackRows := rows
			if r.ackRows != nil {
				ackRows = *r.ackRows
			}
			if err := fc.sendAck(*meta.OffsetID, ackRows, r.closeMs); err != nil {
				return err
			}
		}
		if r.endAfter != nil {
			return r.endAfter
		}
	}
	if err := rdr.Err(); err != nil || onHalfClose == nil {
		return err
	}
	fc.mu.Lock()
	rows := fc.rows
	fc.mu.Unlock()
	return onHalfClose(fc, rows)
}

// sendAck sends one PutResult; tests may call it from outside the handler.
func (fc *fakeConn) sendAck(offset int64, records uint64, closeMs *uint64) error {
	m := map[string]any{"ack_up_to_offset": offset, "ack_up_to_records": records}
	if closeMs != nil {
		m["close_stream_duration_ms"] = *closeMs
	}
	b, _ := json.Marshal(m)
	fc.sendMu.Lock()
	defer fc.sendMu.Unlock()
	return fc.stream.Send(&flight.PutResult{AppMetadata: b})
}

func (fc *fakeConn) snapshot() (raw []rawFrame, offsets, ids []int64) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return append([]rawFrame(nil), fc.raw...), append([]int64(nil), fc.offsets...), append([]int64(nil), fc.ids...)
}

// recordingReader records raw FlightData before the Flight reader decodes it.
type recordingReader struct {
	stream flight.FlightService_DoPutServer
	conn   *fakeConn
}

func (r *recordingReader) Recv() (*flight.FlightData, error) {
	fd, err := r.stream.Recv()
	if err != nil {
		return nil, err
	}
	r.conn.mu.Lock()
	r.conn.raw = append(r.conn.raw, rawFrame{
		hasDescriptor: fd.FlightDescriptor != nil,
		header:        append([]byte(nil), fd.DataHeader...),
		bodyLen:       len(fd.DataBody),
		appMetadata:   string(fd.AppMetadata),
	})
	r.conn.mu.Unlock()
	return fd, nil
}

func (s *fakeFlightServer) conn(i int) *fakeConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.conns) {
		return nil
	}
	return s.conns[i]
}

func (s *fakeFlightServer) connCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// allIDs returns every id the server received over all connections.
func (s *fakeFlightServer) allIDs() []int64 {
	s.mu.Lock()
	conns := append([]*fakeConn(nil), s.conns...)
	s.mu.Unlock()
	var out []int64
	for _, c := range conns {
		_, _, ids := c.snapshot()
		out = append(out, ids...)
	}
	return out
}

// startFake serves srv on a loopback port, with opts after its own, and
// returns its http:// endpoint.
func startFake(t *testing.T, srv *fakeFlightServer, opts ...grpc.ServerOption) string {
	t.Helper()
	srv.t = t
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20)}, opts...)...)
	flight.RegisterFlightServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return "http://" + lis.Addr().String()
}

// countingToken is a TokenSource that hands out tok-1, tok-2, ... and counts
// invalidations.
type countingToken struct {
	mu          sync.Mutex
	n           int
	cached      string
	invalidated int
}

func (c *countingToken) Token(context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cached == "" {
		c.n++
		c.cached = fmt.Sprintf("tok-%d", c.n)
	}
	return c.cached, nil
}

func (c *countingToken) Invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cached = ""
	c.invalidated++
}

// testSchema is the schema of every test batch: id is the logical row index
// the test expects, name pads rows.
var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.LargeString, Nullable: true},
}, nil)

// makeBatch returns rows with ids [from, from+n) and a name of nameLen bytes.
func makeBatch(from, n int64, nameLen int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, testSchema)
	defer b.Release()
	ids := b.Field(0).(*array.Int64Builder)
	names := b.Field(1).(*array.LargeStringBuilder)
	pad := make([]byte, nameLen)
	for i := range pad {
		pad[i] = 'a' + byte(i%7)
	}
	for i := from; i < from+n; i++ {
		ids.Append(i)
		names.Append(string(pad))
	}
	return b.NewRecordBatch()
}

// recordingObserver counts Observer events.
type recordingObserver struct {
	mu         sync.Mutex
	rotations  int
	reconnects []error
	retries    int
	failures   []*Error
}

func (o *recordingObserver) OnRotation(string) { o.mu.Lock(); o.rotations++; o.mu.Unlock() }
func (o *recordingObserver) OnReconnect(_ string, err error) {
	o.mu.Lock()
	o.reconnects = append(o.reconnects, err)
	o.mu.Unlock()
}
func (o *recordingObserver) OnRetry(string, int, error) { o.mu.Lock(); o.retries++; o.mu.Unlock() }
func (o *recordingObserver) OnFailure(_ string, err *Error) {
	o.mu.Lock()
	o.failures = append(o.failures, err)
	o.mu.Unlock()
}

func (o *recordingObserver) counts() (rotations, reconnects, retries, failures int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rotations, len(o.reconnects), o.retries, len(o.failures)
}

// testClient returns a client for endpoint with fast test timings.
func testClient(t *testing.T, endpoint string, mutate func(*Config)) *Client {
	t.Helper()
	cfg := Config{
		Endpoint:         endpoint,
		Token:            StaticToken("test-token"),
		UserAgent:        "benthos-zerobus/test",
		ReadyTimeout:     2 * time.Second,
		RecoveryAttempts: 4,
		RecoveryBackoff:  10 * time.Millisecond,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := NewClient(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func seq(from, to int64) []int64 {
	out := make([]int64, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}
