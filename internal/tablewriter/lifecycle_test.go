package tablewriter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Decide, class by class, across open→fail cycles.
func TestDecide(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		class  FaultClass
		hint   time.Duration
		cycles int
		action Action
		wait   time.Duration
	}{
		{FaultTransient, 0, 1, RetryNow, 0},
		{FaultTransient, 0, 2, BackOff, 500 * time.Millisecond},
		{FaultTransient, 0, 3, BackOff, s},
		{FaultTransient, 0, 5, BackOff, 4 * s},
		{FaultTransient, 0, 12, BackOff, 30 * s},
		{FaultTransient, 0, 1000, BackOff, 30 * s},
		{FaultThrottled, 7 * s, 1, BackOff, 7 * s},
		{FaultThrottled, 7 * s, 9, BackOff, 7 * s},
		{FaultThrottled, 0, 1, BackOff, ingest.ResourceExhaustedBackoff},
		{FaultThrottled, 60 * s, 3, BackOff, 60 * s},
		{FaultPermanent, 0, 0, BackOff, s},
		{FaultPermanent, 0, 1, BackOff, s},
		{FaultPermanent, 0, 2, BackOff, 2 * s},
		{FaultPermanent, 0, 3, BackOff, 4 * s},
		{FaultPermanent, 0, 6, BackOff, 32 * s},
		{FaultPermanent, 0, 7, BackOff, 60 * s},
		{FaultPermanent, 0, 500, BackOff, 60 * s},
		{FaultClosed, 0, 1, GiveUp, 0},
		{FaultClosed, 0, 40, GiveUp, 0},
	} {
		t.Run(fmt.Sprintf("%s/hint=%s/cycles=%d", tc.class, tc.hint, tc.cycles), func(t *testing.T) {
			v := Decide(Fault{Class: tc.class, Hint: tc.hint}, History{Cycles: tc.cycles})
			assert.Equal(t, tc.action, v.Action)
			assert.Equal(t, tc.wait, v.Wait)
		})
	}
}

// Classify sorts the service's and the workspace's errors into the classes
// and names what to do.
func TestClassify(t *testing.T) {
	const table = "main.default.events"
	for _, tc := range []struct {
		name   string
		err    error
		class  FaultClass
		advice string
	}{
		{"unavailable", status.Error(codes.Unavailable, "connection refused"), FaultTransient, "retrying"},
		{"deadline", status.Error(codes.DeadlineExceeded, "slow"), FaultTransient, "retrying"},
		{"internal", status.Error(codes.Internal, "oops"), FaultTransient, "retrying"},
		{"endpoint does not resolve", fmt.Errorf("open streams: %w", unresolvedEndpoint), FaultTransient, "check `endpoint`: host 123.zerobus.nope.invalid does not resolve"},
		{"workspace refuses", fmt.Errorf("describe: %w", &url.Error{Op: "Get", URL: "https://adb-1.example/api/2.1/unity-catalog/tables/x",
			Err: &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 443}, Err: syscall.ECONNREFUSED}}), FaultTransient, "check `workspace_url`: nothing accepts connections at 10.0.0.1:443"},
		{"no healthy stream", fmt.Errorf("write: %w", pool.ErrNoStream), FaultTransient, "retrying"},
		{"resource exhausted", status.Error(codes.ResourceExhausted, "too many streams"), FaultThrottled, "streams.max"},
		{"reconnect refused for concurrency", fmt.Errorf("pool: stream 1: acklane: stream failed: %w", &ingest.Error{Class: ingest.Poison, Code: codes.ResourceExhausted,
			Err: fmt.Errorf("reconnect refused: %w", &ingest.Error{Class: ingest.ConcurrencyReject, Code: codes.ResourceExhausted, Err: errors.New("refused")})}), FaultThrottled, "streams.max"},
		{"open refused for concurrency", &OpenError{Table: table, Rejects: 2, Err: errors.New("no stream up")}, FaultThrottled, "streams.max"},
		{"permission denied", status.Error(codes.PermissionDenied, "User does not have MODIFY"), FaultPermanent, "MODIFY"},
		{"permission denied mid-stream", fmt.Errorf("pool: %w", &ingest.Error{Class: ingest.FatalConfig, Code: codes.PermissionDenied, Err: errors.New("denied")}), FaultPermanent, "GRANT"},
		{"unauthenticated", status.Error(codes.Unauthenticated, "bad token"), FaultPermanent, "client_secret"},
		{"not found", status.Error(codes.NotFound, "no such table"), FaultPermanent, "catalog.provision"},
		{"table missing", fmt.Errorf("table %s: %w", table, errTableMissing), FaultPermanent, "catalog.provision: true"},
		{"invalid name", &typemap.TableNameError{Name: "a.b", Rule: "want three parts"}, FaultPermanent, "fix the table name"},
		{"closed", ErrClosed, FaultClosed, ""},
		{"pool closed", fmt.Errorf("x: %w", pool.ErrClosed), FaultClosed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Classify(table, tc.err)
			assert.Equal(t, tc.class, f.Class, "%v", tc.err)
			assert.Contains(t, f.Advice, tc.advice)
			assert.NotEmpty(t, f.Cause)
		})
	}
	assert.Equal(t, 7*time.Second, Classify(table, &ingest.Error{Class: ingest.ConcurrencyReject, RetryAfter: 7 * time.Second}).Hint, "the service's hint")
}

// fakeClock is a lifecycle clock moved by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newTestLifecycle(t *testing.T) (*lifecycle, *fakeClock, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	l := newLifecycle(testTable, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l.now, l.rand = c.now, func() float64 { return 0 } // no jitter
	return l, c, &buf
}

// Across open→fail cycles of a permanent fault, the waits double to a
// minute; an Open before the wait has passed opens nothing; the cause is
// explained once, again only when it changes; progress clears the history
// and says the writer is writing again.
func TestLifecycleCycles(t *testing.T) {
	l, clock, logs := newTestLifecycle(t)
	denied := Classify(testTable, status.Error(codes.PermissionDenied, "User does not have MODIFY"))
	assert.Equal(t, PhaseIdle, l.Phase())

	var waits []time.Duration
	for range 8 {
		require.NoError(t, l.beginOpen(false))
		assert.Equal(t, PhaseOpening, l.Phase())
		l.opened(false)
		assert.True(t, l.writable())
		v := l.failed(denied) // the streams opened, then every batch was refused
		assert.Equal(t, PhaseBackingOff, l.Phase())
		assert.False(t, l.writable())
		waits = append(waits, v.Wait)

		// Before the wait has passed, Open is held: nothing is tried.
		clock.advance(v.Wait / 2)
		err := l.beginOpen(false)
		var we *WaitError
		require.ErrorAs(t, err, &we)
		assert.True(t, we.Held)
		assert.Equal(t, v.Wait-v.Wait/2, we.Wait)
		assert.Equal(t, PhaseBackingOff, l.Phase())
		require.ErrorIs(t, l.notOpen(), ErrNotOpen)
		clock.advance(v.Wait - v.Wait/2)
	}
	s := time.Second
	assert.Equal(t, []time.Duration{s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 60 * s, 60 * s}, waits)
	assert.Equal(t, 1, strings.Count(logs.String(), "What to do"), "one explanation for one cause:\n%s", logs)
	assert.Contains(t, logs.String(), "GRANT SELECT, MODIFY ON TABLE "+testTable)

	// Another cause: explained too, the history goes on.
	require.NoError(t, l.beginOpen(false))
	v := l.failed(Classify(testTable, status.Error(codes.Unauthenticated, "bad token")))
	assert.Equal(t, 60*s, v.Wait)
	assert.Equal(t, 2, strings.Count(logs.String(), "What to do"), "explained again on a change of cause")

	clock.advance(v.Wait)
	require.NoError(t, l.beginOpen(false))
	l.opened(false)
	l.progress()
	assert.Contains(t, logs.String(), "writing again after 9 failed attempts")
	v = l.failed(denied)
	assert.Equal(t, s, v.Wait, "after progress the history starts over")
	assert.Equal(t, 3, strings.Count(logs.String(), "What to do"), "a cause back after healing is explained again")
}

// A transient failure retries at once, then backs off; streams that lived
// longer than the longest wait start a new history.
func TestLifecycleTransientAndLongLived(t *testing.T) {
	l, clock, _ := newTestLifecycle(t)
	down := Classify(testTable, status.Error(codes.Unavailable, "connection refused"))
	require.NoError(t, l.beginOpen(false))
	v := l.failed(down)
	assert.Equal(t, RetryNow, v.Action)
	require.NoError(t, l.beginOpen(false), "retry now: the next Open tries at once")
	v = l.failed(down)
	assert.Equal(t, BackOff, v.Action)
	assert.Equal(t, 500*time.Millisecond, v.Wait)

	clock.advance(v.Wait)
	require.NoError(t, l.beginOpen(false))
	l.opened(false)
	clock.advance(PermanentBackoffMax + time.Second)
	v = l.failed(down)
	assert.Equal(t, RetryNow, v.Action, "streams that lived long made progress of a kind")
}

// Closing ends the lifecycle: Open is refused, failures give up.
func TestLifecycleClosed(t *testing.T) {
	l, _, _ := newTestLifecycle(t)
	require.True(t, l.draining())
	assert.False(t, l.draining(), "once")
	assert.ErrorIs(t, l.beginOpen(false), ErrClosed)
	assert.Equal(t, GiveUp, l.failed(Classify(testTable, errors.New("x"))).Action)
	l.closed()
	assert.Equal(t, PhaseClosed, l.Phase())
	assert.ErrorIs(t, l.notOpen(), ErrClosed)
}

// The writer asks its lifecycle: a table that does not exist (provisioning
// off) is refused with a back-off growing across Opens, and Opens within
// the wait describe nothing.
func TestWriterMissingTableBacksOff(t *testing.T) {
	cat := catalogfake.New() // no table
	w := New(Config{Table: testTable, Pool: testPoolConfig()}, ingestfake.NewOpener(ingestfake.Config{}), cat, nil, nil)
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	err := w.Open(context.Background())
	wait, ok := RetryAfter(err)
	require.True(t, ok, "%v", err)
	assert.InDelta(t, float64(time.Second), float64(wait), float64(time.Second)/4)
	assert.Contains(t, err.Error(), "does not exist")
	describes := cat.Describes()
	err = w.Open(context.Background())
	var we *WaitError
	require.ErrorAs(t, err, &we)
	assert.True(t, we.Held)
	assert.Equal(t, describes, cat.Describes(), "no describe while backing off")
	skipWait(w)
	wait2, _ := RetryAfter(w.Open(context.Background()))
	assert.Greater(t, wait2, wait, "the wait grows across cycles")
	assert.Equal(t, PhaseBackingOff, w.Phase())
	th := w.Health()
	assert.Equal(t, "backing off", th.Phase, "health names the phase")
	assert.Equal(t, StateStopped, th.State)
	assert.Contains(t, th.Reason, "does not exist")
	_, err = w.Write(context.Background(), rows(`{"id":1}`), nil)
	assert.ErrorIs(t, err, ErrNotOpen)

	cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	skipWait(w)
	require.NoError(t, w.Open(context.Background()), "healed once the table exists")
	assert.Equal(t, PhaseOpen, w.Phase())
}

// An outage whose streams the service refuses for concurrency (a rotation
// whose reconnect it refused) is explained as throttling, with its own
// advice, not as a network fault.
func TestOutageOfRefusedReconnectsIsThrottling(t *testing.T) {
	l, _, logs := newTestLifecycle(t)
	refused := fmt.Errorf("acklane: stream failed: %w", &ingest.Error{Class: ingest.Poison, Code: codes.ResourceExhausted, RetryAfter: 10 * time.Second,
		Err: fmt.Errorf("reconnect refused: %w", &ingest.Error{Class: ingest.ConcurrencyReject, Code: codes.ResourceExhausted, Err: errors.New("refused")})})
	f := Classify(testTable, refused)
	require.Equal(t, FaultThrottled, f.Class)
	assert.Equal(t, 10*time.Second, f.Hint, "the service's wait")
	l.outage(f, 2*time.Second)
	assert.Contains(t, logs.String(), "streams.max")
	assert.NotContains(t, logs.String(), "firewall")
}
