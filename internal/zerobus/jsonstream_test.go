package zerobus

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

	"github.com/benthos-zerobus/benthos-zerobus/internal/zerobus/zbpb"
)

// fakeRecordServer is a minimal EphemeralStream server: it checks the
// create_stream-first lifecycle and sequential offsets, records what it got
// and acks cumulatively.
type fakeRecordServer struct {
	zbpb.UnimplementedZerobusServer

	setup func(conn int, md metadata.MD) error
	// ackAbove makes the server ack this offset after the first request.
	ackAbove *int64
	// closeAfter sends a close signal after this many requests (0: never).
	closeAfter int

	mu      sync.Mutex
	conns   int
	creates []*zbpb.CreateIngestStreamRequest
	records []string
	kinds   []string // "record" or "batch" per request
	offsets []int64
	md      []metadata.MD
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
		var offset int64
		s.mu.Lock()
		switch p := req.GetPayload().(type) {
		case *zbpb.EphemeralStreamRequest_IngestRecord:
			offset = p.IngestRecord.GetOffsetId()
			s.records = append(s.records, p.IngestRecord.GetJsonRecord())
			s.kinds = append(s.kinds, "record")
		case *zbpb.EphemeralStreamRequest_IngestRecordBatch:
			offset = p.IngestRecordBatch.GetOffsetId()
			s.records = append(s.records, p.IngestRecordBatch.GetJsonBatch().GetRecords()...)
			s.kinds = append(s.kinds, "batch")
		default:
			s.mu.Unlock()
			return status.Error(codes.InvalidArgument, "unexpected message")
		}
		s.offsets = append(s.offsets, offset)
		s.mu.Unlock()
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

func startRecordFake(t *testing.T, srv *fakeRecordServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
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
	t.Run("close signal refuses further ingest as rotation", func(t *testing.T) {
		srv := &fakeRecordServer{closeAfter: 1}
		c := testClient(t, startRecordFake(t, srv), nil)
		s, err := c.OpenJSONStream(waitCtx(t), testTable)
		require.NoError(t, err)
		defer s.Close()
		off, err := s.Ingest(context.Background(), []string{`{}`})
		require.NoError(t, err)
		require.NoError(t, s.WaitForOffset(waitCtx(t), off))
		require.Eventually(t, func() bool { closing, _ := s.Closing(); return closing }, 5*time.Second, time.Millisecond)
		_, d := s.Closing()
		assert.Equal(t, 30*time.Second, d)
		_, err = s.Ingest(context.Background(), []string{`{}`})
		var ze *Error
		require.ErrorAs(t, err, &ze)
		assert.Equal(t, Transient, ze.Class)
		assert.True(t, ze.IsRotation())
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
