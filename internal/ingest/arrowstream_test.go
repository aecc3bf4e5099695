package ingest

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const testTable = "main.default.t1"

func submitAll(t *testing.T, s Stream, batches ...arrow.RecordBatch) []Span {
	t.Helper()
	var spans []Span
	for _, b := range batches {
		sp, err := s.Submit(context.Background(), b)
		require.NoError(t, err)
		b.Release()
		spans = append(spans, sp)
	}
	return spans
}

func waitCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestArrowStreamWireShape(t *testing.T) {
	srv := &fakeFlightServer{}
	c := testClient(t, startFake(t, srv), nil)
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()

	spans := submitAll(t, s, makeBatch(0, 3, 5), makeBatch(3, 4, 5), makeBatch(7, 1, 5))
	assert.Equal(t, []Span{{0, 3}, {3, 7}, {7, 8}}, spans)
	require.NoError(t, s.WaitDurable(waitCtx(t), 8))
	assert.Equal(t, uint64(8), s.Durable())

	fc := srv.conn(0)
	assert.Equal(t, []string{"Bearer test-token"}, fc.md.Get("authorization"))
	assert.Equal(t, []string{testTable}, fc.md.Get("x-databricks-zerobus-table-name"))
	require.NotEmpty(t, fc.md.Get("user-agent"))
	assert.Regexp(t, `^benthos-zerobus/test`, fc.md.Get("user-agent")[0])

	raw, offsets, ids := fc.snapshot()
	require.Len(t, raw, 4)
	schemaFrame := raw[0]
	assert.False(t, schemaFrame.hasDescriptor, "no FlightDescriptor")
	assert.Empty(t, schemaFrame.appMetadata, "schema frame has no app_metadata")
	assert.Zero(t, schemaFrame.bodyLen, "schema frame has no body")
	wantHeader, err := c.encoder.schemaHeader(testSchema)
	require.NoError(t, err)
	assert.Equal(t, wantHeader, schemaFrame.header)
	for i, f := range raw[1:] {
		assert.False(t, f.hasDescriptor)
		assert.JSONEq(t, `{"offset_id":`+itoa(i)+`}`, f.appMetadata)
	}
	assert.Equal(t, []int64{0, 1, 2}, offsets)
	assert.Equal(t, seq(0, 8), ids)
	require.NoError(t, s.Drain(waitCtx(t)))
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestArrowStreamReadyTimeout(t *testing.T) {
	srv := &fakeFlightServer{noReady: func(int) bool { return true }}
	c := testClient(t, startFake(t, srv), func(cfg *Config) {
		cfg.ReadyTimeout = 150 * time.Millisecond
		cfg.RecoveryAttempts = 2
	})
	start := time.Now()
	_, err := c.Open(waitCtx(t), testTable, testSchema)
	elapsed := time.Since(start)
	require.Error(t, err)
	class, ok := ClassOf(err)
	require.True(t, ok)
	assert.Equal(t, Transient, class)
	assert.Contains(t, err.Error(), "no ready signal")
	assert.Equal(t, 2, srv.connCount(), "retried within the budget")
	assert.Less(t, elapsed, 2*time.Second)
	assert.GreaterOrEqual(t, elapsed, 300*time.Millisecond)
}

func TestArrowStreamCumulativeAcks(t *testing.T) {
	// The server acks nothing by itself; the test drives acks.
	srv := &fakeFlightServer{onFrame: func(frameEvent) reply { return reply{noAck: true} }}
	c := testClient(t, startFake(t, srv), nil)
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()
	submitAll(t, s, makeBatch(0, 5, 1), makeBatch(5, 5, 1))
	require.Eventually(t, func() bool { _, off, _ := srv.conn(0).snapshot(); return len(off) == 2 }, 5*time.Second, 5*time.Millisecond)

	waited := make(chan error, 1)
	go func() { waited <- s.WaitDurable(waitCtx(t), 10) }()

	require.NoError(t, srv.conn(0).sendAck(0, 3, nil))
	require.Eventually(t, func() bool { return s.Durable() == 3 }, 5*time.Second, time.Millisecond)
	select {
	case <-waited:
		t.Fatal("WaitDurable(10) returned at durable 3")
	case <-time.After(30 * time.Millisecond):
	}
	require.NoError(t, srv.conn(0).sendAck(0, 2, nil)) // stale acks never move it back
	require.NoError(t, srv.conn(0).sendAck(1, 10, nil))
	require.NoError(t, <-waited)
	assert.Equal(t, uint64(10), s.Durable())
}

func TestArrowStreamAckAboveSentIsPoison(t *testing.T) {
	srv := &fakeFlightServer{onFrame: func(ev frameEvent) reply { return reply{ackRows: uint64p(ev.rows + 1)} }}
	obs := &recordingObserver{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.Observer = obs })
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()
	submitAll(t, s, makeBatch(0, 4, 1))
	err = s.WaitDurable(waitCtx(t), 4)
	require.Error(t, err)
	var ze *Error
	require.ErrorAs(t, err, &ze)
	assert.Equal(t, Poison, ze.Class)
	assert.Contains(t, ze.Error(), "exceeds the 4 rows sent")
	_, _, _, failures := obs.counts()
	assert.Equal(t, 1, failures)
	_, err = s.Submit(context.Background(), makeBatch(4, 1, 1))
	assert.ErrorAs(t, err, &ze)
}

// TestArrowStreamRotationResendsUnackedSuffix: connection 0 acks only part of
// the third batch, announces rotation and ends with 6002. The stream must
// reconnect, resend from the first unacked row (slicing the partial batch)
// with offsets from 0, and end with every row durable.
func TestArrowStreamRotationResendsUnackedSuffix(t *testing.T) {
	srv := &fakeFlightServer{onFrame: func(ev frameEvent) reply {
		if ev.conn.index == 0 && ev.frame == 2 {
			return reply{
				ackRows:  uint64p(12), // batches are 5 rows: 2 full + 2 of the third
				closeMs:  uint64p(50),
				endAfter: status.Error(codes.Unavailable, "Stream timeout reached. Error Code: 6002"),
			}
		}
		return reply{}
	}}
	obs := &recordingObserver{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.Observer = obs })
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()

	submitAll(t, s, makeBatch(0, 5, 1), makeBatch(5, 5, 1), makeBatch(10, 5, 1))
	require.Eventually(t, func() bool { return srv.connCount() >= 2 || s.Durable() >= 12 }, 5*time.Second, time.Millisecond)
	submitAll(t, s, makeBatch(15, 5, 1), makeBatch(20, 5, 1))
	require.NoError(t, s.WaitDurable(waitCtx(t), 25))
	assert.Equal(t, uint64(25), s.Durable())

	assert.Equal(t, 2, srv.connCount(), "exactly one reconnect")
	_, off0, ids0 := srv.conn(0).snapshot()
	_, off1, ids1 := srv.conn(1).snapshot()
	assert.Equal(t, []int64{0, 1, 2}, off0)
	assert.Equal(t, seq(0, 15), ids0)
	require.NotEmpty(t, off1)
	assert.Equal(t, int64(0), off1[0], "offsets restart at 0 on the new connection")
	for i := range off1 {
		assert.Equal(t, int64(i), off1[i])
	}
	assert.Equal(t, seq(12, 25), ids1, "resend starts at the first unacked row, inside the partial batch")

	rotations, reconnects, _, failures := obs.counts()
	assert.Equal(t, 1, rotations)
	assert.Equal(t, 1, reconnects)
	assert.Zero(t, failures)
	assert.Equal(t, 1, s.(*ArrowStream).Reconnects())
}

func TestArrowStreamTransientErrorReconnects(t *testing.T) {
	srv := &fakeFlightServer{onFrame: func(ev frameEvent) reply {
		if ev.conn.index == 0 && ev.frame == 1 {
			return reply{noAck: true, endAfter: status.Error(codes.Internal, "boom")}
		}
		return reply{}
	}}
	c := testClient(t, startFake(t, srv), nil)
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()
	submitAll(t, s, makeBatch(0, 3, 1), makeBatch(3, 3, 1))
	submitAll(t, s, makeBatch(6, 3, 1))
	require.NoError(t, s.WaitDurable(waitCtx(t), 9))

	all := srv.allIDs()
	seen := map[int64]int{}
	for _, id := range all {
		seen[id]++
	}
	for id := int64(0); id < 9; id++ {
		assert.GreaterOrEqual(t, seen[id], 1, "row %d delivered at least once", id)
	}
	_, _, ids1 := srv.conn(1).snapshot()
	assert.Equal(t, int64(3), ids1[0], "batch 0 was acked on connection 0 and is not resent")
}

func TestArrowStreamBudgetExhaustedIsPoison(t *testing.T) {
	srv := &fakeFlightServer{
		setup: func(conn int, _ metadata.MD) error {
			if conn > 0 {
				return status.Error(codes.Unavailable, "down")
			}
			return nil
		},
		onFrame: func(ev frameEvent) reply {
			return reply{noAck: true, endAfter: status.Error(codes.Unavailable, "gone")}
		},
	}
	obs := &recordingObserver{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) {
		cfg.RecoveryAttempts = 3
		cfg.Observer = obs
	})
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()
	submitAll(t, s, makeBatch(0, 2, 1))
	err = s.WaitDurable(waitCtx(t), 2)
	var ze *Error
	require.ErrorAs(t, err, &ze)
	assert.Equal(t, Poison, ze.Class)
	assert.Equal(t, codes.Unavailable, ze.Code)
	assert.Contains(t, ze.Error(), "3 attempts")
	assert.Equal(t, 4, srv.connCount(), "first connection plus 3 reconnect attempts")
	_, reconnects, retries, failures := obs.counts()
	assert.Equal(t, 1, reconnects)
	assert.Equal(t, 2, retries)
	assert.Equal(t, 1, failures)
	assert.Equal(t, uint64(0), s.Durable())
}

func TestArrowStreamSetupErrors(t *testing.T) {
	schemaErr, err := status.New(codes.InvalidArgument, "schema mismatch").WithDetails(&errdetails.ErrorInfo{
		Reason: SchemaValidationReason, Domain: "zerobus.databricks.com",
		Metadata: map[string]string{"causes": "MISSING_REQUIRED_COLUMN", "error_code": "8001"},
	})
	require.NoError(t, err)
	tests := []struct {
		name      string
		err       error
		class     Class
		attempts  int
		causes    []string
		retryWait time.Duration
	}{
		{"not found", status.Error(codes.NotFound, "no such table"), FatalConfig, 1, nil, 0},
		{"schema mismatch", schemaErr.Err(), FatalConfig, 1, []string{"MISSING_REQUIRED_COLUMN"}, 0},
		{"concurrency reject", status.Error(codes.ResourceExhausted, "too many streams"), ConcurrencyReject, 1, nil, ResourceExhaustedBackoff},
		{"pipeline blocked", status.Error(codes.Unavailable, "blocked. Error Code: 6006"), ConcurrencyReject, 1, nil, PipelineBlockedBackoff},
		{"transient retried", status.Error(codes.Unavailable, "flaky"), Transient, 4, nil, 0},
		{"unauthenticated retried once", status.Error(codes.Unauthenticated, "bad token"), FatalConfig, 2, nil, 0},
		{"permission denied retried once", status.Error(codes.PermissionDenied, "no grant. Error Code: 4024"), FatalConfig, 2, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &fakeFlightServer{setup: func(int, metadata.MD) error { return tt.err }}
			c := testClient(t, startFake(t, srv), nil)
			_, err := c.Open(waitCtx(t), testTable, testSchema)
			var ze *Error
			require.ErrorAs(t, err, &ze)
			assert.Equal(t, tt.class, ze.Class, ze.Error())
			assert.Equal(t, tt.causes, ze.Causes)
			assert.Equal(t, tt.retryWait, ze.RetryAfter)
			assert.Equal(t, tt.attempts, srv.connCount())
		})
	}
}

func TestArrowStreamInvalidatesTokenOnUnauthenticated(t *testing.T) {
	srv := &fakeFlightServer{setup: func(_ int, md metadata.MD) error {
		if md.Get("authorization")[0] != "Bearer tok-2" {
			return status.Error(codes.Unauthenticated, "expired token")
		}
		return nil
	}}
	tok := &countingToken{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.Token = tok })
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, 1, tok.invalidated)
	assert.Equal(t, 2, srv.connCount())
	submitAll(t, s, makeBatch(0, 1, 1))
	require.NoError(t, s.WaitDurable(waitCtx(t), 1))
}

func TestArrowStreamSplitsAboveFrameCap(t *testing.T) {
	const maxFrame = 8 << 10
	srv := &fakeFlightServer{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.MaxFrameBytes = maxFrame })
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()

	spans := submitAll(t, s, makeBatch(0, 2000, 40), makeBatch(2000, 10, 40))
	assert.Equal(t, []Span{{0, 2000}, {2000, 2010}}, spans)
	require.NoError(t, s.WaitDurable(waitCtx(t), 2010))

	raw, offsets, ids := srv.conn(0).snapshot()
	assert.Greater(t, len(offsets), 10, "2000 rows of ~56 bytes need many 8 KiB frames")
	for i, o := range offsets {
		assert.Equal(t, int64(i), o)
	}
	for _, f := range raw[1:] {
		assert.LessOrEqual(t, len(f.header)+f.bodyLen, maxFrame)
	}
	assert.Equal(t, seq(0, 2010), ids)

	_, err = s.Submit(context.Background(), makeBatch(2010, 1, maxFrame))
	assert.ErrorIs(t, err, ErrRowTooLarge)
	assert.Equal(t, uint64(2010), s.(*ArrowStream).Submitted(), "a refused batch takes no span")
}

func TestArrowStreamCompression(t *testing.T) {
	for _, codec := range []string{"none", "lz4_frame", "zstd"} {
		t.Run(codec, func(t *testing.T) {
			srv := &fakeFlightServer{}
			c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.Compression = codec })
			s, err := c.Open(waitCtx(t), testTable, testSchema)
			require.NoError(t, err)
			defer s.Close()
			submitAll(t, s, makeBatch(0, 1000, 100))
			require.NoError(t, s.WaitDurable(waitCtx(t), 1000))
			raw, _, ids := srv.conn(0).snapshot()
			assert.Equal(t, seq(0, 1000), ids, "server decodes the rows")
			body := raw[1].bodyLen
			if codec == "none" {
				assert.Greater(t, body, 100_000)
			} else {
				assert.Less(t, body, 30_000, "repetitive rows compress well")
			}
		})
	}
	_, err := NewClient(Config{Endpoint: "http://127.0.0.1:1", Token: StaticToken("x"), Compression: "snappy"})
	assert.Error(t, err)
}

func TestArrowStreamBackpressure(t *testing.T) {
	srv := &fakeFlightServer{onFrame: func(frameEvent) reply { return reply{noAck: true} }}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.MaxInflightBatches = 2 })
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()
	submitAll(t, s, makeBatch(0, 1, 1), makeBatch(1, 1, 1))

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	third := makeBatch(2, 1, 1)
	defer third.Release()
	_, err = s.Submit(short, third)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	done := make(chan Span, 1)
	go func() {
		sp, err := s.Submit(context.Background(), third)
		assert.NoError(t, err)
		done <- sp
	}()
	select {
	case <-done:
		t.Fatal("submit passed the in-flight bound")
	case <-time.After(50 * time.Millisecond):
	}
	require.Eventually(t, func() bool { _, off, _ := srv.conn(0).snapshot(); return len(off) == 2 }, 5*time.Second, time.Millisecond)
	require.NoError(t, srv.conn(0).sendAck(0, 1, nil))
	select {
	case sp := <-done:
		assert.Equal(t, Span{2, 3}, sp)
	case <-time.After(5 * time.Second):
		t.Fatal("submit not released by the ack")
	}
}

func TestArrowStreamDrainAndClose(t *testing.T) {
	srv := &fakeFlightServer{onFrame: func(ev frameEvent) reply {
		if ev.frame == 2 {
			return reply{noAck: true}
		}
		return reply{}
	}}
	c := testClient(t, startFake(t, srv), nil)
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	submitAll(t, s, makeBatch(0, 2, 1), makeBatch(2, 2, 1), makeBatch(4, 2, 1))

	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.Drain(short), context.DeadlineExceeded, "the last batch is never acked")
	assert.Equal(t, uint64(4), s.Durable())
	_, err = s.Submit(context.Background(), makeBatch(6, 1, 1))
	require.ErrorIs(t, err, ErrStreamClosed, "draining refuses submits")

	waitErr := make(chan error, 1)
	go func() { waitErr <- s.WaitDurable(context.Background(), 6) }()
	require.NoError(t, s.Close())
	err = <-waitErr
	require.ErrorIs(t, err, ErrStreamClosed)
	require.NoError(t, s.Close(), "close is idempotent")
}

func TestArrowStreamSchemaMismatch(t *testing.T) {
	srv := &fakeFlightServer{}
	c := testClient(t, startFake(t, srv), nil)
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()
	other := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "name", Type: arrow.BinaryTypes.LargeString}}, nil)
	rec := makeBatch(0, 1, 1)
	defer rec.Release()
	mismatched := arrowRecordWithSchema(t, rec, other)
	defer mismatched.Release()
	_, err = s.Submit(context.Background(), mismatched)
	assert.ErrorIs(t, err, ErrSchemaMismatch, "nullability differs")
}

func TestArrowStreamConcurrentSubmits(t *testing.T) {
	srv := &fakeFlightServer{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.MaxInflightBatches = 8 })
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()

	var mu sync.Mutex
	var spans []Span
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				b := makeBatch(0, int64(1+i%5), 8)
				sp, err := s.Submit(context.Background(), b)
				b.Release()
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				spans = append(spans, sp)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Slice(spans, func(i, j int) bool { return spans[i].From < spans[j].From })
	var next uint64
	for _, sp := range spans {
		require.Equal(t, next, sp.From, "spans are contiguous and disjoint")
		next = sp.To
	}
	require.NoError(t, s.Drain(waitCtx(t)))
	assert.Equal(t, next, s.Durable())
	assert.Len(t, srv.allIDs(), int(next))
}

func TestDialTarget(t *testing.T) {
	tests := []struct {
		endpoint, target, proto string
		wantErr                 bool
	}{
		{"https://123.zerobus.us-west-2.cloud.databricks.com", "123.zerobus.us-west-2.cloud.databricks.com:443", "tls", false},
		{"https://host:8443", "host:8443", "tls", false},
		{"http://127.0.0.1:50051", "127.0.0.1:50051", "insecure", false},
		{"123.zerobus.x.cloud.databricks.com:443", "123.zerobus.x.cloud.databricks.com:443", "tls", false},
		{"ftp://x", "", "", true},
		{"", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.endpoint, func(t *testing.T) {
			target, creds, err := dialTarget(tt.endpoint)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.target, target)
			assert.Equal(t, tt.proto, creds.Info().SecurityProtocol)
		})
	}
}

func TestNewClientRequiresCredentials(t *testing.T) {
	_, err := NewClient(Config{Endpoint: "http://127.0.0.1:1"})
	assert.Error(t, err)
	c, err := NewClient(Config{Endpoint: "https://42.zerobus.r.cloud.databricks.com", WorkspaceURL: "https://w", ClientID: "a", ClientSecret: "b"})
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, "42", c.cfg.WorkspaceID)
	ts1, err := c.TokenSource("a.b.c")
	require.NoError(t, err)
	ts2, _ := c.TokenSource("a.b.c")
	ts3, _ := c.TokenSource("a.b.d")
	assert.Same(t, ts1, ts2)
	assert.NotSame(t, ts1, ts3, "tokens are table-scoped")
	_, err = c.Open(context.Background(), "a.b", testSchema)
	class, _ := ClassOf(err)
	assert.Equal(t, FatalConfig, class)
}

func arrowRecordWithSchema(t *testing.T, rec arrow.RecordBatch, schema *arrow.Schema) arrow.RecordBatch {
	t.Helper()
	return array.NewRecordBatch(schema, rec.Columns(), rec.NumRows())
}

// TestArrowStreamRotationWaitsForAcksThenHalfCloses: the server announces
// rotation with a long grace and keeps the call open. The client must send
// nothing more on it, and once every sent row is acked half-close it and move
// to a new connection long before the grace runs out.
func TestArrowStreamRotationWaitsForAcksThenHalfCloses(t *testing.T) {
	srv := &fakeFlightServer{onFrame: func(ev frameEvent) reply {
		if ev.conn.index == 0 && ev.frame == 1 {
			return reply{closeMs: uint64p(10_000)}
		}
		return reply{}
	}}
	obs := &recordingObserver{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.Observer = obs })
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()

	start := time.Now()
	submitAll(t, s, makeBatch(0, 2, 1), makeBatch(2, 2, 1))
	require.Eventually(t, func() bool { r, _, _, _ := obs.counts(); return r == 1 }, 5*time.Second, time.Millisecond)
	submitAll(t, s, makeBatch(4, 2, 1))
	require.NoError(t, s.WaitDurable(waitCtx(t), 6))
	assert.Less(t, time.Since(start), 5*time.Second, "did not sit out the rotation grace")

	_, off0, ids0 := srv.conn(0).snapshot()
	assert.Equal(t, []int64{0, 1}, off0, "nothing sent after the rotation notice")
	assert.Equal(t, seq(0, 4), ids0)
	_, off1, ids1 := srv.conn(1).snapshot()
	assert.Equal(t, []int64{0}, off1)
	assert.Equal(t, seq(4, 6), ids1)
}

// TestArrowStreamLackOfAckReconnects: a connection that takes rows but never
// acks is replaced after AckTimeout, and the rows are resent.
func TestArrowStreamLackOfAckReconnects(t *testing.T) {
	srv := &fakeFlightServer{onFrame: func(ev frameEvent) reply {
		return reply{noAck: ev.conn.index == 0}
	}}
	obs := &recordingObserver{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) {
		cfg.AckTimeout = 100 * time.Millisecond
		cfg.Observer = obs
	})
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()

	time.Sleep(250 * time.Millisecond) // idle with nothing outstanding: no timeout
	assert.Equal(t, 1, srv.connCount())

	submitAll(t, s, makeBatch(0, 3, 1))
	require.NoError(t, s.WaitDurable(waitCtx(t), 3))
	assert.Equal(t, 2, srv.connCount())
	_, _, ids1 := srv.conn(1).snapshot()
	assert.Equal(t, seq(0, 3), ids1)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Len(t, obs.reconnects, 1)
	class, _ := ClassOf(obs.reconnects[0])
	assert.Equal(t, Transient, class)
	assert.Contains(t, obs.reconnects[0].Error(), "no ack")
}

func TestArrowStreamConcurrencyRejectOnReconnectPoisonsWithRetryAfter(t *testing.T) {
	srv := &fakeFlightServer{
		setup: func(conn int, _ metadata.MD) error {
			if conn > 0 {
				return status.Error(codes.ResourceExhausted, "stream cap")
			}
			return nil
		},
		onFrame: func(frameEvent) reply {
			return reply{noAck: true, endAfter: status.Error(codes.Unavailable, "gone")}
		},
	}
	c := testClient(t, startFake(t, srv), nil)
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()
	submitAll(t, s, makeBatch(0, 1, 1))
	err = s.WaitDurable(waitCtx(t), 1)
	var ze *Error
	require.ErrorAs(t, err, &ze)
	assert.Equal(t, Poison, ze.Class)
	assert.Equal(t, ResourceExhaustedBackoff, ze.RetryAfter)
	assert.Equal(t, 2, srv.connCount(), "no retry after a concurrency reject")
}

func TestArrowStreamFirstResultMustBeReadySignal(t *testing.T) {
	srv := &fakeFlightServer{noReady: func(int) bool { return true }}
	c := testClient(t, startFake(t, srv), nil)
	opened := make(chan error, 1)
	go func() {
		_, err := c.Open(waitCtx(t), testTable, testSchema)
		opened <- err
	}()
	require.Eventually(t, func() bool {
		fc := srv.conn(0)
		if fc == nil {
			return false
		}
		raw, _, _ := fc.snapshot()
		return len(raw) == 1 // the schema frame arrived
	}, 5*time.Second, time.Millisecond)
	require.NoError(t, srv.conn(0).sendAck(3, 5, nil))
	err := <-opened
	class, ok := ClassOf(err)
	require.True(t, ok)
	assert.Equal(t, Poison, class)
	assert.Contains(t, err.Error(), "not the ready signal")
}
