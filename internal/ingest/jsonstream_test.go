package ingest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/benthos-zerobus/benthos-zerobus/internal/zbpb"
)

// fakeRecordServer is a minimal EphemeralStream server: it checks the
// create_stream-first lifecycle and sequential offsets, records what it got
// and acks cumulatively.
type fakeRecordServer struct {
	zbpb.UnimplementedZerobusServer

	setup func(conn int, md metadata.MD) error
	// ackAbove makes the server ack this offset after the first request.
	ackAbove *int64
	// closeAfter sends a close signal after this many requests of each
	// call (0: never).
	closeAfter int
	// fail, if set, is asked after the n-th request (from 1) of call conn is
	// recorded and before it is acked; a non-nil error ends the call with it.
	fail func(conn, n int) error
	// during, if set, runs just before fail with the call's stream, so a
	// test can send responses of its own (a close signal, say) or stop
	// reading.
	during func(conn, n int, stream zbpb.Zerobus_EphemeralStreamServer)

	mu      sync.Mutex
	conns   int
	creates []*zbpb.CreateIngestStreamRequest
	records []string
	kinds   []string // "record" or "batch" per request
	offsets []int64  // wire offset per request
	connOf  []int    // call per request
	reqRecs [][]string
	md      []metadata.MD
}

// callRecords returns the requests (their records) and wire offsets call
// conn received.
func (s *fakeRecordServer) callRecords(conn int) (reqs [][]string, offsets []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range s.connOf {
		if c == conn {
			reqs = append(reqs, s.reqRecs[i])
			offsets = append(offsets, s.offsets[i])
		}
	}
	return reqs, offsets
}

// received counts how many times each record arrived, over every call.
func (s *fakeRecordServer) received() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, r := range s.records {
		out[r]++
	}
	return out
}

func (s *fakeRecordServer) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

func (s *fakeRecordServer) EphemeralStream(stream zbpb.Zerobus_EphemeralStreamServer) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	s.mu.Lock()
	conn := s.conns
	s.conns++
	s.md = append(s.md, md)
	s.mu.Unlock()
	if s.setup != nil {
		if err := s.setup(conn, md); err != nil {
			return err
		}
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	create := first.GetCreateStream()
	if create == nil {
		return status.Error(codes.InvalidArgument, "first message must be create_stream")
	}
	s.mu.Lock()
	s.creates = append(s.creates, create)
	s.mu.Unlock()
	if err := stream.Send(&zbpb.EphemeralStreamResponse{Payload: &zbpb.EphemeralStreamResponse_CreateStreamResponse{
		CreateStreamResponse: &zbpb.CreateIngestStreamResponse{StreamId: proto.String(fmt.Sprintf("stream-%d", conn))},
	}}); err != nil {
		return err
	}
	var expect int64
	for n := 1; ; n++ {
		req, err := stream.Recv()
		if err != nil {
			return nil // client half-closed or left
		}
		var (
			offset int64
			recs   []string
		)
		s.mu.Lock()
		switch p := req.GetPayload().(type) {
		case *zbpb.EphemeralStreamRequest_IngestRecord:
			offset = p.IngestRecord.GetOffsetId()
			recs = []string{p.IngestRecord.GetJsonRecord()}
			s.kinds = append(s.kinds, "record")
		case *zbpb.EphemeralStreamRequest_IngestRecordBatch:
			offset = p.IngestRecordBatch.GetOffsetId()
			recs = p.IngestRecordBatch.GetJsonBatch().GetRecords()
			s.kinds = append(s.kinds, "batch")
		default:
			s.mu.Unlock()
			return status.Error(codes.InvalidArgument, "unexpected message")
		}
		s.records = append(s.records, recs...)
		s.reqRecs = append(s.reqRecs, recs)
		s.offsets = append(s.offsets, offset)
		s.connOf = append(s.connOf, conn)
		s.mu.Unlock()
		if s.during != nil {
			s.during(conn, n, stream)
		}
		if s.fail != nil {
			if err := s.fail(conn, n); err != nil {
				return err
			}
		}
		if offset != expect {
			return status.Errorf(codes.InvalidArgument, "Non-incremental offset: expected %d, actual %d", expect, offset)
		}
		expect++
		ack := offset
		if s.ackAbove != nil {
			ack = *s.ackAbove
		}
		if err := stream.Send(&zbpb.EphemeralStreamResponse{Payload: &zbpb.EphemeralStreamResponse_IngestRecordResponse{
			IngestRecordResponse: &zbpb.IngestRecordResponse{DurabilityAckUpToOffset: proto.Int64(ack)},
		}}); err != nil {
			return err
		}
		if s.closeAfter > 0 && n == s.closeAfter {
			if err := stream.Send(&zbpb.EphemeralStreamResponse{Payload: &zbpb.EphemeralStreamResponse_CloseStreamSignal{
				CloseStreamSignal: &zbpb.CloseStreamSignal{Duration: durationpb.New(30 * time.Second)},
			}}); err != nil {
				return err
			}
		}
	}
}

func startRecordFake(t *testing.T, srv *fakeRecordServer, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(opts...)
	zbpb.RegisterZerobusServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return "http://" + lis.Addr().String()
}

func TestCreateStreamRequestMatchesOfficialSDKBytes(t *testing.T) {
	got, err := proto.MarshalOptions{Deterministic: true}.Marshal(createStreamRequest("main.default.t1"))
	require.NoError(t, err)
	want := append([]byte{0x0a, 0x13, 0x0a, 0x0f}, "main.default.t1"...)
	want = append(want, 0x20, 0x02)
	assert.Equal(t, want, got)
}

func TestJSONStreamIngestAndAcks(t *testing.T) {
	srv := &fakeRecordServer{}
	c := testClient(t, startRecordFake(t, srv), nil)
	s, err := c.OpenJSONStream(waitCtx(t), testTable)
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, "stream-0", s.StreamID())

	off0, err := s.Ingest(context.Background(), []string{`{"id":1}`})
	require.NoError(t, err)
	off1, err := s.Ingest(context.Background(), []string{`{"id":2}`, `{"id":3}`})
	require.NoError(t, err)
	assert.Equal(t, int64(0), off0)
	assert.Equal(t, int64(1), off1)
	require.NoError(t, s.WaitForOffset(waitCtx(t), off1))
	assert.Equal(t, int64(1), s.Acked())

	srv.mu.Lock()
	defer srv.mu.Unlock()
	assert.Equal(t, []string{"record", "batch"}, srv.kinds)
	assert.Equal(t, []string{`{"id":1}`, `{"id":2}`, `{"id":3}`}, srv.records)
	assert.Equal(t, []int64{0, 1}, srv.offsets)
	require.Len(t, srv.creates, 1)
	assert.Equal(t, testTable, srv.creates[0].GetTableName())
	assert.Equal(t, zbpb.RecordType_JSON, srv.creates[0].GetRecordType())
	assert.Equal(t, []string{"Bearer test-token"}, srv.md[0].Get("authorization"))
	assert.Equal(t, []string{testTable}, srv.md[0].Get("x-databricks-zerobus-table-name"))
}

func TestJSONStreamManyRecordsConcurrently(t *testing.T) {
	srv := &fakeRecordServer{}
	c := testClient(t, startRecordFake(t, srv), nil)
	s, err := c.OpenJSONStream(waitCtx(t), testTable)
	require.NoError(t, err)
	defer s.Close()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 250; i++ {
				_, err := s.Ingest(context.Background(), []string{`{"x":1}`})
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	require.NoError(t, s.WaitForOffset(waitCtx(t), 999))
	srv.mu.Lock()
	defer srv.mu.Unlock()
	assert.Len(t, srv.records, 1000)
}

func TestJSONStreamErrors(t *testing.T) {
	t.Run("unauthenticated drops the token and retries once", func(t *testing.T) {
		srv := &fakeRecordServer{setup: func(_ int, md metadata.MD) error {
			if md.Get("authorization")[0] != "Bearer tok-2" {
				return status.Error(codes.Unauthenticated, "expired")
			}
			return nil
		}}
		tok := &countingToken{}
		c := testClient(t, startRecordFake(t, srv), func(cfg *Config) { cfg.Token = tok })
		s, err := c.OpenJSONStream(waitCtx(t), testTable)
		require.NoError(t, err)
		defer s.Close()
		assert.Equal(t, 1, tok.invalidated)
	})
	t.Run("not found is fatal", func(t *testing.T) {
		srv := &fakeRecordServer{setup: func(int, metadata.MD) error { return status.Error(codes.NotFound, "no table") }}
		c := testClient(t, startRecordFake(t, srv), nil)
		_, err := c.OpenJSONStream(waitCtx(t), testTable)
		class, ok := ClassOf(err)
		require.True(t, ok)
		assert.Equal(t, FatalConfig, class)
	})
	t.Run("ack above sent is poison", func(t *testing.T) {
		srv := &fakeRecordServer{ackAbove: new(int64)}
		*srv.ackAbove = 5
		c := testClient(t, startRecordFake(t, srv), nil)
		s, err := c.OpenJSONStream(waitCtx(t), testTable)
		require.NoError(t, err)
		defer s.Close()
		_, err = s.Ingest(context.Background(), []string{`{}`})
		require.NoError(t, err)
		err = s.WaitForOffset(waitCtx(t), 0)
		class, _ := ClassOf(err)
		assert.Equal(t, Poison, class)
	})
	t.Run("ingest after close", func(t *testing.T) {
		srv := &fakeRecordServer{}
		c := testClient(t, startRecordFake(t, srv), nil)
		s, err := c.OpenJSONStream(waitCtx(t), testTable)
		require.NoError(t, err)
		require.NoError(t, s.Close())
		_, err = s.Ingest(context.Background(), []string{`{}`})
		assert.ErrorIs(t, err, ErrStreamClosed)
	})
}

// ingestIDs ingests one single-record request {"id":i} per i in [from, to)
// and returns the offsets Ingest gave them.
func ingestIDs(t *testing.T, s *JSONStream, from, to int) []int64 {
	t.Helper()
	var offsets []int64
	for i := from; i < to; i++ {
		off, err := s.Ingest(context.Background(), []string{fmt.Sprintf(`{"id":%d}`, i)})
		require.NoError(t, err)
		offsets = append(offsets, off)
	}
	return offsets
}

func TestJSONStreamRecoversFromRotation(t *testing.T) {
	// Every call announces its end after its first request.
	srv := &fakeRecordServer{closeAfter: 1}
	obs := &recordingObserver{}
	c := testClient(t, startRecordFake(t, srv), func(cfg *Config) { cfg.Observer = obs })
	s, err := c.OpenJSONStream(waitCtx(t), testTable)
	require.NoError(t, err)
	defer s.Close()

	var offsets []int64
	for i := 0; i < 6; i++ {
		offsets = append(offsets, ingestIDs(t, s, i, i+1)...)
		// Let the close signal arrive now and then, so some requests are
		// held for the next call and some go out on a fresh one.
		if i%2 == 1 {
			require.Eventually(t, func() bool { closing, _ := s.Closing(); return closing || s.Reconnects() > i/2 },
				5*time.Second, time.Millisecond)
		}
	}
	assert.Equal(t, []int64{0, 1, 2, 3, 4, 5}, offsets, "offsets are logical: they do not restart per call")
	require.NoError(t, s.WaitForOffset(waitCtx(t), 5))
	assert.Equal(t, int64(5), s.Acked())
	assert.GreaterOrEqual(t, s.Reconnects(), 2)
	rotations, _, _, failures := obs.counts()
	assert.GreaterOrEqual(t, rotations, 2)
	assert.Zero(t, failures)

	got := srv.received()
	for i := 0; i < 6; i++ {
		assert.GreaterOrEqual(t, got[fmt.Sprintf(`{"id":%d}`, i)], 1, "record %d stored", i)
	}
	// The last ack's close signal may start one more call just now: wait
	// for its create_stream to be recorded before comparing.
	var calls int
	assert.Eventually(t, func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		calls = srv.conns
		return len(srv.creates) == calls
	}, 5*time.Second, time.Millisecond, "every call starts with create_stream")
	for conn := 0; conn < calls; conn++ {
		_, wire := srv.callRecords(conn)
		for i, w := range wire {
			assert.Equal(t, int64(i), w, "call %d: wire offsets restart at 0", conn)
		}
	}
}

func TestJSONStreamResendsUnackedRenumbered(t *testing.T) {
	// The first call acks requests 1 and 2, then fails on the third
	// without acking it.
	srv := &fakeRecordServer{fail: func(conn, n int) error {
		if conn == 0 && n == 3 {
			return status.Error(codes.Unavailable, "backend restarted")
		}
		return nil
	}}
	rec := &recordingObserver{}
	c := testClient(t, startRecordFake(t, srv), func(cfg *Config) { cfg.Observer = rec })
	s, err := c.OpenJSONStream(waitCtx(t), testTable)
	require.NoError(t, err)
	defer s.Close()

	offsets := ingestIDs(t, s, 0, 5)
	assert.Equal(t, []int64{0, 1, 2, 3, 4}, offsets)
	require.NoError(t, s.WaitForOffset(waitCtx(t), 4))
	assert.Equal(t, 1, s.Reconnects())
	assert.Equal(t, "stream-1", s.StreamID())

	reqs, wire := srv.callRecords(1)
	assert.Equal(t, [][]string{{`{"id":2}`}, {`{"id":3}`}, {`{"id":4}`}}, reqs,
		"the second call gets exactly the unacked requests, in order")
	assert.Equal(t, []int64{0, 1, 2}, wire, "renumbered from 0")
	got := srv.received()
	assert.Equal(t, 1, got[`{"id":0}`], "acked requests are not resent")
	assert.Equal(t, 1, got[`{"id":1}`], "acked requests are not resent")
	_, reconnects, _, _ := rec.counts()
	assert.Equal(t, 1, reconnects)
}

func TestJSONStreamRecoveryFailure(t *testing.T) {
	tests := []struct {
		name      string
		reconnect error // what every call after the first fails with
		class     Class
		calls     int
		contains  string
	}{
		{"budget exhausted poisons", status.Error(codes.Unavailable, "still down"), Poison, 1 + 4, "exhausted"},
		{"fatal error fails at once", status.Error(codes.NotFound, "table dropped"), FatalConfig, 2, "table dropped"},
		{"concurrency reject fails at once with retry-after", status.Error(codes.ResourceExhausted, "too many streams"), Poison, 2, "refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := &fakeRecordServer{
				setup: func(conn int, _ metadata.MD) error {
					if conn > 0 {
						return tc.reconnect
					}
					return nil
				},
				fail: func(_, n int) error {
					if n == 2 {
						return status.Error(codes.Unavailable, "backend restarted")
					}
					return nil
				},
			}
			c := testClient(t, startRecordFake(t, srv), nil)
			s, err := c.OpenJSONStream(waitCtx(t), testTable)
			require.NoError(t, err)
			defer s.Close()

			ingestIDs(t, s, 0, 2)
			err = s.WaitForOffset(waitCtx(t), 1)
			var ze *Error
			require.ErrorAs(t, err, &ze)
			assert.Equal(t, tc.class, ze.Class, "%v", err)
			assert.Contains(t, err.Error(), tc.contains)
			if tc.reconnect != nil && status.Code(tc.reconnect) == codes.ResourceExhausted {
				assert.Positive(t, ze.RetryAfter)
			}
			assert.Equal(t, int64(0), s.Acked(), "the first request stays acked")
			assert.Equal(t, tc.calls, srv.calls())
			_, err = s.Ingest(context.Background(), []string{`{}`})
			assert.ErrorAs(t, err, &ze, "a failed stream refuses ingest")
		})
	}
}

func TestJSONStreamAckTimeoutReconnects(t *testing.T) {
	// The first call accepts requests but never acks them.
	block := make(chan struct{})
	t.Cleanup(func() { close(block) }) // runs after the server stopped
	srv := &fakeRecordServer{fail: func(conn, _ int) error {
		if conn == 0 {
			<-block // never ack; the client's watchdog must give up
			return status.Error(codes.Unavailable, "test over")
		}
		return nil
	}}
	c := testClient(t, startRecordFake(t, srv), func(cfg *Config) { cfg.AckTimeout = 100 * time.Millisecond })
	s, err := c.OpenJSONStream(waitCtx(t), testTable)
	require.NoError(t, err)
	defer s.Close()
	ingestIDs(t, s, 0, 1)
	require.NoError(t, s.WaitForOffset(waitCtx(t), 0))
	assert.Equal(t, 1, s.Reconnects())
	reqs, _ := srv.callRecords(1)
	assert.Equal(t, [][]string{{`{"id":0}`}}, reqs)
}

func TestJSONStreamKeepsItsOwnCopyOfRecords(t *testing.T) {
	srv := &fakeRecordServer{fail: func(conn, n int) error {
		if conn == 0 && n == 1 {
			return status.Error(codes.Unavailable, "backend restarted")
		}
		return nil
	}}
	c := testClient(t, startRecordFake(t, srv), nil)
	s, err := c.OpenJSONStream(waitCtx(t), testTable)
	require.NoError(t, err)
	defer s.Close()
	recs := []string{`{"id":1}`}
	off, err := s.Ingest(context.Background(), recs)
	require.NoError(t, err)
	recs[0] = `{"id":"changed"}`
	require.NoError(t, s.WaitForOffset(waitCtx(t), off))
	reqs, _ := srv.callRecords(1)
	assert.Equal(t, [][]string{{`{"id":1}`}}, reqs, "the resend carries what was ingested")
}
