package ingest_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/testnet"
)

// The "silent dead connection" fault: a connection that stops forwarding in
// both directions with no FIN and no RST (a NAT or load balancer that
// dropped its state, a crashed host). The client must notice, get a new TCP
// connection (a reconnect over the dead one waits for a ready signal that
// never comes), rebuild the streams and resend what was not durable.

// connEvents records the client's reconnects and connection replacements.
type connEvents struct {
	ingest.NopObserver
	mu         sync.Mutex
	reconnects []connEvent
	redials    []connEvent
}

type connEvent struct {
	at     time.Time
	table  string
	reason error
}

func (e *connEvents) OnReconnect(table string, reason error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reconnects = append(e.reconnects, connEvent{time.Now(), table, reason})
}

func (e *connEvents) OnRedial(_ uint64, reason error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.redials = append(e.redials, connEvent{at: time.Now(), reason: reason})
}

func (e *connEvents) snapshot() (reconnects, redials []connEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]connEvent(nil), e.reconnects...), append([]connEvent(nil), e.redials...)
}

// blackHoled starts an emulator and a black hole in front of its gRPC port,
// and a client through the hole configured by mutate.
func blackHoled(t *testing.T, mutate func(*ingest.Config)) (*emulator.Server, *testnet.BlackHole, *ingest.Client, *connEvents) {
	t.Helper()
	srv := startEmulator(t, emulator.Faults{})
	u, err := url.Parse(srv.GRPCURL())
	require.NoError(t, err)
	bh := testnet.StartBlackHole(t, u.Host)
	ev := &connEvents{}
	c := e2eClient(t, srv, func(cfg *ingest.Config) {
		cfg.Endpoint = "http://" + bh.Addr()
		cfg.Observer = ev
		mutate(cfg)
	})
	return srv, bh, c, ev
}

// runThroughBlackHole opens two streams through bh, makes rows durable on
// both, black-holes their connection, submits more rows and waits until
// every row is durable. It returns when the hole struck and each stream.
func runThroughBlackHole(t *testing.T, c *ingest.Client, bh *testnet.BlackHole, wait time.Duration) (struck time.Time, streams []ingest.Stream) {
	t.Helper()
	const rows = 100
	for i := 0; i < 2; i++ {
		s, err := c.Open(ctxTimeout(t, 10*time.Second), e2eTable, e2eSchema)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		streams = append(streams, s)
	}
	submit := func(s ingest.Stream, from int64) ingest.Span {
		b := e2eBatch(from, rows)
		defer b.Release()
		span, err := s.Submit(context.Background(), b)
		require.NoError(t, err)
		return span
	}
	for i, s := range streams {
		span := submit(s, int64(i)*10_000)
		require.NoError(t, s.WaitDurable(ctxTimeout(t, 10*time.Second), span.To))
	}
	require.Equal(t, 1, bh.Accepted(), "both streams share one connection")

	// Nothing is in flight: every row sent so far is acknowledged, so what
	// follows is exactly the rows the hole swallows.
	require.Equal(t, 1, bh.Silence())
	struck = time.Now()
	var spans []ingest.Span
	for i, s := range streams {
		spans = append(spans, submit(s, int64(i)*10_000+rows))
	}
	for i, s := range streams {
		require.NoError(t, s.WaitDurable(ctxTimeout(t, wait), spans[i].To), "stream %d healed", i)
	}
	return struck, streams
}

// assertStoredOnce checks that each stream's 200 rows are stored exactly once.
func assertStoredOnce(t *testing.T, srv *emulator.Server) {
	t.Helper()
	ids := storedIDs(t, srv)
	assert.Len(t, ids, 400, "distinct rows stored")
	for id, n := range ids {
		assert.Equal(t, 1, n, "row %d stored %d times", id, n)
	}
}

// TestDeadConnectionFoundByKeepalive: with the ack watchdog far away, only
// the keepalive can find the dead connection. It must, within Time +
// Timeout of the last frame read, and both streams must come back on one
// new TCP connection.
func TestDeadConnectionFoundByKeepalive(t *testing.T) {
	t.Parallel() // about 11 s of waiting, overlapped with the other waits
	// The defaults find a dead connection well within the 20 s the fault
	// matrix asks for.
	assert.LessOrEqual(t, ingest.Keepalive{}.DetectionBound(), 15*time.Second, "default keepalive detection bound")

	// grpc-go pings no more often than every 10 s; a short timeout keeps
	// the test at about 11 s.
	ka := ingest.Keepalive{Time: ingest.MinKeepaliveTime, Timeout: time.Second}
	srv, bh, c, ev := blackHoled(t, func(cfg *ingest.Config) {
		cfg.Keepalive = ka
		cfg.AckTimeout = 5 * time.Minute
	})
	struck, _ := runThroughBlackHole(t, c, bh, 30*time.Second)
	healed := time.Since(struck)

	reconnects, redials := ev.snapshot()
	require.NotEmpty(t, reconnects)
	detected := reconnects[0].at.Sub(struck)
	t.Logf("dead connection (keepalive %s/%s): detected after %s, healed after %s; reconnects=%d redials=%d accepted=%d",
		ka.Time, ka.Timeout, detected.Round(time.Millisecond), healed.Round(time.Millisecond), len(reconnects), len(redials), bh.Accepted())
	assert.LessOrEqual(t, detected, ka.DetectionBound()+2*time.Second, "found within Time + Timeout (and scheduling slack)")
	assert.Greater(t, detected, ka.Time/2, "found by the keepalive, not by something faster")
	assert.Equal(t, codes.Unavailable, ingest.Classify(reconnects[0].reason).Code, "reason: %v", reconnects[0].reason)
	assert.Contains(t, reconnects[0].reason.Error(), "keepalive", "found by the keepalive")
	// Keepalive made gRPC close the transport: the same channel dials a
	// new TCP connection for the rebuilt streams by itself.
	assert.Empty(t, redials, "a transport gRPC closed needs no channel replacement")
	assert.Equal(t, uint64(1), c.ConnectionGen())
	assert.Equal(t, 2, bh.Accepted(), "one new TCP connection, shared by the rebuilt streams")
	assertStoredOnce(t, srv)
}

// TestDeadConnectionFoundByAckWatchdogRedials: when the ack watchdog finds
// the connection dead first, the reconnect must not go over the dead
// transport (where no ready signal ever comes and the recovery budget runs
// out): the channel is replaced and the streams heal at once.
func TestDeadConnectionFoundByAckWatchdogRedials(t *testing.T) {
	t.Parallel()
	srv, bh, c, ev := blackHoled(t, func(cfg *ingest.Config) {
		cfg.AckTimeout = 500 * time.Millisecond
		cfg.ReadyTimeout = time.Second
		cfg.RecoveryAttempts = 3
		cfg.RecoveryBackoff = 100 * time.Millisecond
	})
	// Keepalive (15 s) would find it too, far later than the budget of
	// 3 × (1 s + 100 ms) lasts: healing before that is the redial's doing.
	struck, _ := runThroughBlackHole(t, c, bh, 5*time.Second)
	healed := time.Since(struck)

	reconnects, redials := ev.snapshot()
	require.NotEmpty(t, reconnects)
	t.Logf("dead connection (ack watchdog 500ms): detected after %s, healed after %s; reconnects=%d redials=%d accepted=%d",
		reconnects[0].at.Sub(struck).Round(time.Millisecond), healed.Round(time.Millisecond), len(reconnects), len(redials), bh.Accepted())
	assert.Equal(t, codes.DeadlineExceeded, ingest.Classify(reconnects[0].reason).Code, "reason: %v", reconnects[0].reason)
	require.Len(t, redials, 1, "two streams on one dead connection replace it once")
	assert.Equal(t, uint64(2), c.ConnectionGen())
	assert.Equal(t, 2, bh.Accepted(), "one new TCP connection")
	assertStoredOnce(t, srv)
}

// TestIdleConnectionPingsWithinServicePolicy: a stream left quiet for 35 s
// at the default keepalive is pinged at 10, 20 and 30 s, which the
// emulator permits (as the service is assumed to): the connection is never
// sent away. Under a gRPC server's default policy (no ping within 5
// minutes) the third ping would get GOAWAY too_many_pings and the stream
// would reconnect at about 30 s.
func TestIdleConnectionPingsWithinServicePolicy(t *testing.T) {
	t.Parallel() // 35 s of idling, overlapped with the other waits
	srv, bh, c, ev := blackHoled(t, func(*ingest.Config) {})
	s, err := c.Open(ctxTimeout(t, 10*time.Second), e2eTable, e2eSchema)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	write := func(from int64) {
		b := e2eBatch(from, 10)
		defer b.Release()
		span, err := s.Submit(context.Background(), b)
		require.NoError(t, err)
		require.NoError(t, s.WaitDurable(ctxTimeout(t, 10*time.Second), span.To))
	}
	write(0)
	idle := time.NewTimer(35 * time.Second) // the test is the wait: pings happen in it
	<-idle.C
	write(10)
	reconnects, _ := ev.snapshot()
	assert.Empty(t, reconnects, "the quiet connection was sent away")
	assert.Equal(t, 1, bh.Accepted(), "one TCP connection throughout")
	ids := storedIDs(t, srv)
	assert.Len(t, ids, 20)
}
