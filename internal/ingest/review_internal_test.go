package ingest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A late ack from the connection being replaced can land while the new one is
// opening. The new connection's base must be the durable watermark of the
// rows it actually resends, or its acks map to the wrong logical rows and the
// stream stalls with rows never confirmed.
func TestArrowStreamLateAckWhileReconnectingKeepsAckMapping(t *testing.T) {
	var (
		stream atomic.Pointer[ArrowStream]
		first  atomic.Pointer[flightConn]
	)
	srv := &fakeFlightServer{
		setup: func(conn int, _ metadata.MD) error {
			if conn == 1 {
				// The old reader delivered an ack it had already
				// received before the call was cancelled.
				require.Nil(t, stream.Load().advance(first.Load(), 10))
			}
			return nil
		},
		onFrame: func(ev frameEvent) reply {
			if ev.conn.index > 0 {
				return reply{}
			}
			if ev.frame == 1 {
				return reply{noAck: true, endAfter: status.Error(codes.Unavailable, "gone")}
			}
			return reply{noAck: true}
		},
	}
	c := testClient(t, startFake(t, srv), nil)
	s, err := c.OpenArrowStream(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()
	stream.Store(s)
	first.Store(s.cur.Load())

	submitAll(t, s, makeBatch(0, 10, 1), makeBatch(10, 10, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	require.NoError(t, s.WaitDurable(ctx, 20), "every row durable; durable=%d", s.Durable())
	assert.Equal(t, uint64(20), s.Durable())
	_, _, ids := srv.conn(1).snapshot()
	assert.Equal(t, seq(10, 20), ids, "the new connection resends the suffix past the late ack")
}

// doneHook reports when the code under test first asks for ctx.Done, which
// in reserve means it is about to block for capacity.
type doneHook struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func (c *doneHook) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

// An empty batch reserves in-flight capacity and gives it back at once; a
// Submit that blocked on that reservation must be woken, or it waits for an
// ack that will never come.
func TestArrowStreamEmptyBatchReleasesCapacity(t *testing.T) {
	srv := &fakeFlightServer{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.MaxInflightBatches = 1 })
	s, err := c.OpenArrowStream(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()

	s.sendMu.Lock() // hold the empty batch between reserve and send
	emptyDone := make(chan error, 1)
	go func() {
		empty := makeBatch(0, 0, 1)
		defer empty.Release()
		_, err := s.Submit(context.Background(), empty)
		emptyDone <- err
	}()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inflight == 1
	}, 5*time.Second, time.Millisecond)

	ctx := &doneHook{Context: context.Background(), waiting: make(chan struct{})}
	fullDone := make(chan error, 1)
	go func() {
		b := makeBatch(0, 1, 1)
		defer b.Release()
		_, err := s.Submit(ctx, b)
		fullDone <- err
	}()
	<-ctx.waiting
	s.sendMu.Unlock()
	require.NoError(t, <-emptyDone)

	select {
	case err := <-fullDone:
		require.NoError(t, err)
	case <-time.After(3 * time.Second):
		t.Fatal("Submit still waits for capacity the empty batch gave back")
	}
	require.NoError(t, s.WaitDurable(waitCtx(t), 1))
}

// silentEndpoint accepts TCP connections and never speaks HTTP/2, so a gRPC
// client stays "connecting" until its own connect deadline (20 s).
func silentEndpoint(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	return "http://" + lis.Addr().String()
}

// Opening a connection must honour ctx (the caller's on open, the stream's
// on reconnect, which Close cancels) from the start of the call, not only
// while waiting for the ready signal.
func TestOpenHonoursContextWhileConnecting(t *testing.T) {
	c := testClient(t, silentEndpoint(t), func(cfg *Config) { cfg.RecoveryAttempts = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.OpenArrowStream(ctx, testTable, testSchema)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second, "open returned long after its ctx ended")
}

// smallWindow keeps gRPC flow control at its 64 KiB floor (no BDP growth), so
// a server that stops reading blocks the client's Send quickly.
var smallWindow = []grpc.ServerOption{
	grpc.InitialWindowSize(64 << 10), grpc.InitialConnWindowSize(64 << 10),
	grpc.MaxRecvMsgSize(64 << 20),
}

// A server that stops reading (overloaded, or a partition with the TCP
// connection still up) blocks a Submit in Send while it holds sendMu. The ack
// watchdog must still replace the connection: recovery needs sendMu, so the
// watchdog has to cut the stuck call loose itself.
func TestArrowStreamWatchdogUnblocksSendStuckOnFlowControl(t *testing.T) {
	srv := &fakeFlightServer{onFrame: func(ev frameEvent) reply {
		if ev.conn.index == 0 {
			<-ev.conn.stream.Context().Done() // stop reading until the client leaves
			return reply{noAck: true}
		}
		return reply{}
	}}
	endpoint := startFake(t, srv, smallWindow...)

	c := testClient(t, endpoint, func(cfg *Config) { cfg.AckTimeout = 200 * time.Millisecond })
	s, err := c.OpenArrowStream(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)

	const batches, rows = 8, 100
	submitErrs := submitInBackground(t, s, batches, rows)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, s.WaitDurable(ctx, batches*rows), "durable=%d connections=%d", s.Durable(), srv.connCount())
	for err := range submitErrs {
		require.NoError(t, err)
	}
}

// While the stream reconnects it holds sendMu for up to RecoveryAttempts ×
// (ReadyTimeout + RecoveryBackoff), about two minutes with the defaults. A
// Submit waiting for it must still give up when its ctx ends, and give back
// the capacity it reserved.
func TestArrowStreamSubmitHonoursContextDuringReconnect(t *testing.T) {
	srv := &fakeFlightServer{
		noReady: func(conn int) bool { return conn > 0 },
		onFrame: func(frameEvent) reply {
			return reply{noAck: true, endAfter: status.Error(codes.Unavailable, "gone")}
		},
	}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.ReadyTimeout = 5 * time.Second })
	s, err := c.OpenArrowStream(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()
	submitAll(t, s, makeBatch(0, 1, 1))
	require.Eventually(t, func() bool { return srv.connCount() >= 2 }, 5*time.Second, time.Millisecond,
		"the stream is reconnecting")

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	b := makeBatch(1, 1, 1)
	defer b.Release()
	_, err = s.Submit(ctx, b)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 2*time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	assert.Equal(t, 1, s.inflight, "the refused batch gave its reservation back")
}

// The server announces rotation while a Submit is stuck in Send on flow
// control: it stopped reading (overload, or a partition with the TCP
// connection still up) and the stuck Send holds sendMu, which rotation needs
// to half-close. The ack watchdog leaves rotating connections alone, so
// rotation itself must cut the call loose after closeGrace and recover, or
// the stream hangs until the service ends the call.
func TestArrowStreamRotationUnblocksSendStuckOnFlowControl(t *testing.T) {
	const batches, rows = 6, 100
	var stream atomic.Pointer[ArrowStream]
	srv := &fakeFlightServer{onFrame: func(ev frameEvent) reply {
		if ev.conn.index > 0 {
			return reply{}
		}
		if ev.frame == 0 {
			// Once this handler stops reading, the second batch (~500 KB)
			// cannot get past the 64 KiB window, so the Send of the third
			// never returns. Announce rotation only when that Send has
			// started: rowsSent is counted before Send, under sendMu.
			ctx := ev.conn.stream.Context()
			for stream.Load().cur.Load().rowsSent.Load() < 3*rows {
				select {
				case <-ctx.Done():
					return reply{noAck: true}
				case <-time.After(time.Millisecond):
				}
			}
			_ = ev.conn.sendAck(0, rows, uint64p(50))
			<-ctx.Done() // stop reading until the client leaves
		}
		return reply{noAck: true}
	}}
	endpoint := startFake(t, srv, smallWindow...)

	obs := &recordingObserver{}
	c := testClient(t, endpoint, func(cfg *Config) { cfg.Observer = obs })
	s, err := c.OpenArrowStream(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	stream.Store(s)

	submitErrs := submitInBackground(t, s, batches, rows)
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace+5*time.Second)
	defer cancel()
	require.NoError(t, s.WaitDurable(ctx, batches*rows), "durable=%d connections=%d", s.Durable(), srv.connCount())
	for err := range submitErrs {
		require.NoError(t, err)
	}
	_, _, ids := srv.conn(1).snapshot()
	assert.Equal(t, seq(rows, batches*rows), ids, "the new connection resends everything past the ack")
	assertRecoveredFromOneRotation(t, obs)
}

// Failed lets the pool learn that an idle stream died (no WaitDurable is
// there to return the error): it closes when the stream fails, with Err the
// failure, and never because of Close.
func TestArrowStreamFailedChannel(t *testing.T) {
	t.Run("failure", func(t *testing.T) {
		srv := &fakeFlightServer{onFrame: func(ev frameEvent) reply { return reply{ackRows: uint64p(ev.rows + 1)} }}
		c := testClient(t, startFake(t, srv), nil)
		s, err := c.OpenArrowStream(waitCtx(t), testTable, testSchema)
		require.NoError(t, err)
		defer s.Close()
		require.NoError(t, s.Err())
		submitAll(t, s, makeBatch(0, 4, 1))
		select {
		case <-s.Failed():
		case <-waitCtx(t).Done():
			t.Fatal("Failed not closed after the stream failed")
		}
		class, ok := ClassOf(s.Err())
		require.True(t, ok, "Err is the *Error: %v", s.Err())
		assert.Equal(t, Poison, class)
	})
	t.Run("close", func(t *testing.T) {
		c := testClient(t, startFake(t, &fakeFlightServer{}), nil)
		s, err := c.OpenArrowStream(waitCtx(t), testTable, testSchema)
		require.NoError(t, err)
		require.NoError(t, s.Close())
		select {
		case <-s.Failed():
			t.Fatal("Close is not a failure")
		default:
		}
		assert.NoError(t, s.Err())
	})
}

// submitInBackground submits batches batches of rows rows (~500 KB each) to s
// from a goroutine and returns their errors on a channel closed after the
// last. At cleanup it closes s, which unblocks a Submit stuck if the test
// failed, and waits for the goroutine.
func submitInBackground(t *testing.T, s *ArrowStream, batches, rows int) <-chan error {
	errs := make(chan error, batches)
	go func() {
		defer close(errs)
		for i := range batches {
			b := makeBatch(int64(i*rows), int64(rows), 5000)
			_, err := s.Submit(context.Background(), b)
			b.Release()
			errs <- err
		}
	}()
	t.Cleanup(func() {
		_ = s.Close()
		for range errs {
		}
	})
	return errs
}

// assertRecoveredFromOneRotation asserts that obs saw one rotation, no
// failure, and one reconnect, with the rotation as its reason: the rotation
// recovered the call it cut itself.
func assertRecoveredFromOneRotation(t *testing.T, obs *recordingObserver) {
	t.Helper()
	rotations, reconnects, _, failures := obs.counts()
	assert.Equal(t, 1, rotations)
	assert.Zero(t, failures)
	if assert.Equal(t, 1, reconnects) {
		assert.True(t, Classify(obs.reconnects[0]).IsRotation(),
			"the rotation recovers the cut call itself: %v", obs.reconnects[0])
	}
}
