package ingest

import (
	"context"
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
	require.Eventually(t, func() bool { return srv.connCount() >= 2 }, 10*time.Second, time.Millisecond,
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
	s := openStream(t, c)

	submitAll(t, s, makeBatch(0, 5, 1), makeBatch(5, 5, 1), makeBatch(10, 5, 1))
	require.Eventually(t, func() bool { return srv.connCount() >= 2 || s.Durable() >= 12 }, 10*time.Second, time.Millisecond)
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
	s := openStream(t, c)
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
	s := openStream(t, c)
	submitAll(t, s, makeBatch(0, 2, 1))
	ze := waitFailure(t, s, 2)
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
	s := openStream(t, c)

	start := time.Now()
	submitAll(t, s, makeBatch(0, 2, 1), makeBatch(2, 2, 1))
	require.Eventually(t, func() bool { r, _, _, _ := obs.counts(); return r == 1 }, 10*time.Second, time.Millisecond)
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
	s := openStream(t, c)

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
	s := openStream(t, c)
	submitAll(t, s, makeBatch(0, 1, 1))
	ze := waitFailure(t, s, 1)
	assert.Equal(t, Poison, ze.Class)
	assert.Equal(t, ResourceExhaustedBackoff, ze.RetryAfter)
	assert.Equal(t, 2, srv.connCount(), "no retry after a concurrency reject")
}

// The server announces rotation but acks nothing more before the announced
// wait is over; once the client half-closes it acks everything it stored and
// ends the call OK, as the service does. The stream must collect that last
// ack before it reconnects: resending those rows would store them twice.
// A Submit during the rotation queues and goes out on the next connection.
func TestArrowStreamRotationCollectsTheAckAfterHalfClose(t *testing.T) {
	halfClosed := make(chan struct{})
	srv := &fakeFlightServer{
		onFrame: func(ev frameEvent) reply {
			if ev.conn.index > 0 {
				return reply{}
			}
			if ev.frame == 2 {
				return reply{ackRows: uint64p(0), closeMs: uint64p(30)}
			}
			return reply{noAck: true}
		},
		onHalfClose: func(fc *fakeConn, rows uint64) error {
			if fc.index == 0 {
				close(halfClosed)
				time.Sleep(100 * time.Millisecond) // the service finishes storing
				return fc.sendAck(2, rows, nil)
			}
			return nil
		},
	}
	obs := &recordingObserver{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.Observer = obs })
	s, err := c.OpenArrowStream(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()

	submitAll(t, s, makeBatch(0, 5, 1), makeBatch(5, 5, 1), makeBatch(10, 5, 1))
	require.Eventually(t, func() bool { r, _, _, _ := obs.counts(); return r == 1 }, 10*time.Second, time.Millisecond)
	submitAll(t, s, makeBatch(15, 5, 1)) // during the rotation: queued, not refused
	<-halfClosed
	require.NoError(t, s.WaitDurable(waitCtx(t), 20))

	_, _, ids0 := srv.conn(0).snapshot()
	assert.Equal(t, seq(0, 15), ids0, "nothing sent on the rotating connection after the notice")
	_, off1, ids1 := srv.conn(1).snapshot()
	assert.Equal(t, seq(15, 20), ids1, "only the queued batch goes out again: the acked rows are not resent")
	assert.Equal(t, []int64{0}, off1)
	assert.Equal(t, 2, srv.connCount())
	assertRecoveredFromOneRotation(t, obs)
}
