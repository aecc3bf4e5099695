package pool_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

// A stream whose reconnect the service refused for concurrency fails as
// Poison with RetryAfter (see ingest.ArrowStream.recover): the member must
// not open a replacement before RetryAfter, or every reject costs one more
// open at the service that just asked us to back off.
func TestRebuildAfterRefusedReconnectHonoursRetryAfter(t *testing.T) {
	const retryAfter = 300 * time.Millisecond
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{ManualAck: true})
	p := pool.New(o, table, ingestfake.TestSchema, fastConfig(1), nil)
	defer closeNow(p)
	require.NoError(t, p.Connect(ctx))
	tk := write(t, ctx, p, "", 5)

	refused := &ingest.Error{Class: ingest.Poison, Code: codes.ResourceExhausted,
		ServiceCode: ingest.ServiceCodePipelineBlocked, RetryAfter: retryAfter,
		Err: errors.New("reconnect refused")}
	failedAt := time.Now()
	o.Streams()[0].Poison(refused)
	require.Error(t, tk.Wait(ctx))

	require.NoError(t, o.WaitOpenAttempts(ctx, 2))
	attempts := o.AttemptTimes()
	assert.GreaterOrEqual(t, attempts[1].Sub(failedAt), retryAfter,
		"the rebuild waited for the service's RetryAfter")
}

// A stream that fails while idle (no rows pending, so its lane never sees
// it) is found dead by the next Submit. Submit accepted nothing, so Write
// retries on a healthy or rebuilt member instead of failing the batch.
func TestWriteAfterIdleStreamDiedUsesARebuiltStream(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{})
	p := pool.New(o, table, ingestfake.TestSchema, fastConfig(1), nil)
	defer closeNow(p)
	require.NoError(t, p.Connect(ctx))
	o.Streams()[0].Poison(nil)

	tk := write(t, ctx, p, "", 3)
	require.NoError(t, tk.Wait(ctx))
	assert.Equal(t, uint64(2), tk.Generation, "the rows went to the rebuilt stream")
	assert.Equal(t, uint64(0), o.Streams()[0].Submitted(), "nothing was accepted by the dead stream")
}

// gatedStream holds every WaitDurable until gate closes, so a test decides
// which path sees a stream's death first: its lane's wait, or a writer's
// Submit. It embeds the interface, not the fake, so it does not offer
// ingest.FailureNotifier: the pool cannot learn of the death by itself.
type gatedStream struct {
	ingest.Stream
	gate <-chan struct{}
}

func (s gatedStream) WaitDurable(ctx context.Context, row uint64) error {
	select {
	case <-s.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Stream.WaitDurable(ctx, row)
}

// gatedOpener opens gatedStreams.
type gatedOpener struct {
	*ingestfake.Opener
	gate <-chan struct{}
}

func (o gatedOpener) Open(ctx context.Context, table string, schema *arrow.Schema) (ingest.Stream, error) {
	s, err := o.Opener.Open(ctx, table, schema)
	if err != nil {
		return nil, err
	}
	return gatedStream{Stream: s, gate: o.gate}, nil
}

// A stream death is the runbook's "our stream died" signal (the lane's
// poisoned counter) whichever path notices it first. When a writer's Submit
// finds the stream dead before its lane does, the member is torn down at
// once: the lane's pending items must still fail with the stream's error (so
// the write error says why, not just "lane closed") and the death must be
// counted exactly once.
func TestStreamDeathSeenByWriterFirstCountsAsPoisoned(t *testing.T) {
	t.Run("with items pending", func(t *testing.T) {
		ctx := testCtx(t)
		gate := make(chan struct{}) // never opened: the lane never sees the death itself
		o := ingestfake.NewOpener(ingestfake.Config{ManualAck: true})
		obs := newObserver()
		p := pool.New(gatedOpener{o, gate}, table, ingestfake.TestSchema, fastConfig(1), obs)
		defer closeNow(p)
		require.NoError(t, p.Connect(ctx))
		pending := write(t, ctx, p, "", 3)

		died := ingestfake.ErrPoison("stream state lost")
		o.Streams()[0].Poison(died)
		next := write(t, ctx, p, "", 2)
		assert.Equal(t, uint64(2), next.Generation, "the write went to the rebuilt stream")

		err := pending.Wait(ctx)
		require.Error(t, err)
		assert.ErrorIs(t, err, died, "the ticket says why its stream died")
		assert.NotErrorIs(t, err, acklane.ErrClosed)
		assert.Equal(t, 1, obs.lane(0).poisonedCount(), "the death counts once")
	})
	t.Run("idle", func(t *testing.T) {
		ctx := testCtx(t)
		gate := make(chan struct{})
		close(gate) // waits work; only the notifier is hidden
		o := ingestfake.NewOpener(ingestfake.Config{})
		obs := newObserver()
		p := pool.New(gatedOpener{o, gate}, table, ingestfake.TestSchema, fastConfig(1), obs)
		defer closeNow(p)
		require.NoError(t, p.Connect(ctx))
		o.Streams()[0].Poison(nil)

		tk := write(t, ctx, p, "", 3)
		require.NoError(t, tk.Wait(ctx))
		assert.Equal(t, uint64(2), tk.Generation, "the rows went to the rebuilt stream")
		assert.Equal(t, 1, obs.lane(0).poisonedCount(), "the death counts once")
	})
}

// A member whose stream dies while idle must not stay "healthy" in Stats (and
// uncounted) until some Write trips over it: the pool learns of the death from
// the stream itself, counts it once and rebuilds at once.
func TestIdleStreamDeathRebuildsWithoutAWrite(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{})
	obs := newObserver()
	p := pool.New(o, table, ingestfake.TestSchema, fastConfig(1), obs)
	defer closeNow(p)
	require.NoError(t, p.Connect(ctx))
	o.Streams()[0].Poison(nil)

	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := o.WaitOpens(waitCtx, 2)
	require.NoError(t, err, "the dead idle stream is rebuilt without waiting for a Write")
	require.NoError(t, o.Streams()[0].WaitClosed(ctx))
	assert.Equal(t, 1, obs.lane(0).poisonedCount(), "the death counts once")
	assert.Equal(t, 1, obs.rebuildsOf(0))
	assert.Equal(t, int64(1), p.Stats().Rebuilds)

	tk := write(t, ctx, p, "", 3)
	require.NoError(t, tk.Wait(ctx))
	assert.Equal(t, uint64(2), tk.Generation)
}
