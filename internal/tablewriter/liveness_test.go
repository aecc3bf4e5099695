package tablewriter

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// connStream is a fake stream that says whether its connection is alive.
type connStream struct {
	*ingestfake.Stream
	up *atomic.Bool
}

func (s connStream) Connected() bool { return s.up.Load() }

type connOpener struct {
	*ingestfake.Opener
	up *atomic.Bool
}

func (o connOpener) Open(ctx context.Context, table string, schema *arrow.Schema) (ingest.Stream, error) {
	s, err := o.Opener.Open(ctx, table, schema)
	if err != nil {
		return nil, err
	}
	return connStream{Stream: s.(*ingestfake.Stream), up: o.up}, nil
}

// Every stream's connection lost (the client reconnecting inside them):
// the streams show rebuilding at once, the table is unreachable past
// OutageGrace, new batches are held (ErrNotOpen) and Open waits; once a
// connection is back, Open and Write go through again.
func TestOutageHoldsBatchesUntilAStreamIsBack(t *testing.T) {
	cat := catalogfake.New()
	cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	var up atomic.Bool
	up.Store(true)
	w := New(Config{Table: testTable, Pool: testPoolConfig()}, connOpener{ingestfake.NewOpener(ingestfake.Config{}), &up}, cat, nil, nil)
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	require.NoError(t, w.Open(context.Background()))
	_, err := w.Write(context.Background(), rows(`{"id":1,"msg":"a"}`), nil)
	require.NoError(t, err)

	up.Store(false)
	lost := time.Now()
	th := w.Health()
	for _, s := range th.Streams {
		assert.Equal(t, StateRebuilding, s.State, "a lost connection shows at once")
		assert.NotEmpty(t, s.LastError)
	}
	require.Eventually(t, func() bool {
		_, err := w.Write(context.Background(), rows(`{"id":2,"msg":"b"}`), nil)
		return errors.Is(err, ErrNotOpen)
	}, 5*time.Second, 20*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(lost), OutageGrace, "not before the grace")
	assert.False(t, w.Health().Unreachable.IsZero())
	var we *WaitError
	require.ErrorAs(t, w.Open(context.Background()), &we)
	assert.True(t, we.Held)

	up.Store(true)
	require.NoError(t, w.Open(context.Background()))
	_, err = w.Write(context.Background(), rows(`{"id":2,"msg":"b"}`), nil)
	require.NoError(t, err)
	assert.True(t, w.Health().Unreachable.IsZero())
}

// The engine asks again within a second early in an outage, at most every
// five seconds in a long one.
func TestOutageWait(t *testing.T) {
	for age, want := range map[time.Duration]time.Duration{
		0: time.Second, 2 * time.Second: time.Second, 8 * time.Second: 2 * time.Second, time.Minute: 5 * time.Second,
	} {
		assert.Equal(t, want, outageWait(age), "outage of %s", age)
	}
}

// The moment a stream is connected again, writes go through: the outage
// signal raised while every stream was down does not hold a write until the
// outage watch next looks (it polls every outageWatchInterval).
func TestOutageSignalClearsOnceAStreamIsBack(t *testing.T) {
	cat := catalogfake.New()
	cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	var up atomic.Bool
	up.Store(true)
	w := New(Config{Table: testTable, Pool: testPoolConfig()}, connOpener{ingestfake.NewOpener(ingestfake.Config{}), &up}, cat, nil, nil)
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	require.NoError(t, w.Open(context.Background()))

	for round := range 3 {
		up.Store(false)
		require.Eventually(t, func() bool { return w.outageCtx().Err() != nil }, 5*time.Second, 5*time.Millisecond, "round %d: the outage signal was never raised", round)
		up.Store(true)
		back := time.Now()
		// What a submit waiting for room or a stream is released by.
		require.NoError(t, w.outageCtx().Err(), "round %d: the old outage signal is still raised after the stream came back", round)
		_, err := w.Write(context.Background(), rows(`{"id":1,"msg":"a"}`), nil)
		require.NoError(t, err, "round %d: a write %s after the stream came back", round, time.Since(back))
		assert.Less(t, time.Since(back), outageWatchInterval, "round %d: not held until the watch's next tick", round)
	}
}

// An outage while the writer is open (every stream reconnecting by itself)
// is explained once, with what to do, however long it lasts and however
// often the watch looks, and its end is reported once. An outage of the
// same cause soon after (a flapping connection) is not explained again;
// one after the streams stayed connected for outageQuiet is.
func TestOutageIsExplainedOncePerCause(t *testing.T) {
	cat := catalogfake.New()
	cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	var up atomic.Bool
	up.Store(true)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	w := New(Config{Table: testTable, Pool: testPoolConfig()}, connOpener{ingestfake.NewOpener(ingestfake.Config{}), &up}, cat, log, nil)
	var skew atomic.Int64 // the lifecycle's clock runs ahead by this
	w.life.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	require.NoError(t, w.Open(context.Background()))

	count := func(s string) int { return strings.Count(logs.String(), s) }
	outage := func(round, wantExplained, wantOver int) {
		t.Helper()
		up.Store(false)
		require.Eventually(t, func() bool { return w.outageCtx().Err() != nil }, 5*time.Second, 5*time.Millisecond, "round %d: no outage", round)
		// The watch looks every 250 ms: several looks, still one line.
		time.Sleep(4 * outageWatchInterval)
		assert.Equal(t, wantExplained, count("What to do"), "round %d:\n%s", round, logs.String())
		up.Store(true)
		require.Eventually(t, func() bool { return w.outageCtx().Err() == nil }, 5*time.Second, 5*time.Millisecond, "round %d: the outage never ended", round)
		time.Sleep(2 * outageWatchInterval)
		assert.Equal(t, wantOver, count("connected again"), "round %d:\n%s", round, logs.String())
	}
	outage(1, 1, 1)
	assert.Contains(t, logs.String(), "no stream is connected")
	assert.Contains(t, logs.String(), "workspace_url")
	outage(2, 1, 1) // flapping: the same problem
	skew.Store(int64(2 * outageQuiet))
	outage(3, 2, 2) // connected for longer than outageQuiet: explained anew
}
