package acklane_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// recorder is an Observer that keeps everything for assertions.
type recorder struct {
	mu         sync.Mutex
	bursts     []int
	latencies  int
	maxPending int64
	retries    int
	poisoned   int
}

func (r *recorder) ObserveBurst(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bursts = append(r.bursts, n)
}

func (r *recorder) ObserveDeliveryLatency(time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latencies++
}

func (r *recorder) SetPending(n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.maxPending = max(r.maxPending, n)
}

func (r *recorder) IncRetry() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retries++
}

func (r *recorder) IncPoisoned(error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.poisoned++
}

func (r *recorder) snapshot() (bursts []int, latencies int, maxPending int64, retries, poisoned int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.bursts...), r.latencies, r.maxPending, r.retries, r.poisoned
}

// testCtx bounds a test so a bug hangs nothing for long.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openStream(t *testing.T, cfg ingestfake.Config) *ingestfake.Stream {
	t.Helper()
	s, err := ingestfake.NewOpener(cfg).Open(testCtx(t), "main.default.t", ingestfake.TestSchema)
	require.NoError(t, err)
	return s.(*ingestfake.Stream)
}

// submit submits rows rows and enqueues their confirmation on lane.
func submit(t *testing.T, ctx context.Context, s *ingestfake.Stream, lane *acklane.Lane[acklane.RawAnchor], rows int) (ingest.Span, *acklane.Receipt) {
	t.Helper()
	rec := ingestfake.NewRecord(ingestfake.TestSchema, rows)
	defer rec.Release()
	span, err := s.Submit(ctx, rec)
	require.NoError(t, err)
	c, r := acklane.NewRawAnchor()
	require.NoError(t, lane.Enqueue(ctx, acklane.Pending[acklane.RawAnchor]{To: span.To, Confirm: c}))
	return span, r
}

func waitAll(t *testing.T, ctx context.Context, rs []*acklane.Receipt) {
	t.Helper()
	for i, r := range rs {
		require.NoError(t, r.Wait(ctx), "receipt %d", i)
	}
}

func TestOneWaitConfirmsEveryLesserItem(t *testing.T) {
	for _, n := range []int{2, 10, 100} {
		t.Run(fmt.Sprintf("burst of %d", n), func(t *testing.T) {
			ctx := testCtx(t)
			s := openStream(t, ingestfake.Config{ManualAck: true})
			obs := &recorder{}
			lane := acklane.New[acklane.RawAnchor](s, acklane.Config{Capacity: n}, obs)
			defer lane.Close()

			// The lane takes the first item and blocks on its wait...
			_, first := submit(t, ctx, s, lane, 1)
			require.NoError(t, s.WaitWaitCalls(ctx, 1))
			// ...while n more items queue up behind it.
			var rest []*acklane.Receipt
			for range n {
				_, r := submit(t, ctx, s, lane, 3)
				rest = append(rest, r)
			}
			s.AckUpTo(1)
			require.NoError(t, first.Wait(ctx))

			// The lane waits for the smallest queued item; one cumulative
			// ack covering the whole burst settles it with that one wait.
			require.NoError(t, s.WaitWaitCalls(ctx, 2))
			s.AckAll()
			waitAll(t, ctx, rest)

			total := uint64(1 + 3*n)
			assert.Equal(t, []uint64{1, 4}, s.WaitTargets(), "one WaitDurable per burst, on its smallest offset")
			assert.Equal(t, total, lane.Delivered())
			bursts, latencies, maxPending, _, _ := obs.snapshot()
			assert.Equal(t, []int{1, n}, bursts)
			assert.Equal(t, n+1, latencies)
			assert.GreaterOrEqual(t, maxPending, int64(n))
			require.NoError(t, lane.Drain(ctx)) // settled items leave the gauge
			assert.Zero(t, lane.Pending())
		})
	}
}

func TestConfirmsOnlyAfterDurableAckNeverOnSubmit(t *testing.T) {
	ctx := testCtx(t)
	s := openStream(t, ingestfake.Config{ManualAck: true})
	lane := acklane.New[acklane.RawAnchor](s, acklane.Config{}, nil)
	defer lane.Close()

	var spans []ingest.Span
	var rs []*acklane.Receipt
	for i := range 5 {
		span, r := submit(t, ctx, s, lane, 2)
		spans = append(spans, span)
		rs = append(rs, r)
		if i == 0 {
			// The lane's first burst is item 0 alone.
			require.NoError(t, s.WaitWaitCalls(ctx, 1))
		}
	}
	// Everything is submitted, nothing is durable: nothing may confirm.
	for i, r := range rs {
		assert.False(t, r.Settled(), "receipt %d settled before any durable ack", i)
	}
	assert.Zero(t, lane.Delivered())

	// A partial ack confirms the items it covers and nothing above it.
	s.AckUpTo(spans[0].To)
	require.NoError(t, rs[0].Wait(ctx))
	for i, r := range rs[1:] {
		assert.False(t, r.Settled(), "receipt %d settled above the durable watermark", i+1)
	}
	s.AckAll()
	waitAll(t, ctx, rs)
	assert.Equal(t, spans[len(spans)-1].To, lane.Delivered())
}

// TestDeliveredNeverDecreases runs concurrent writers against auto-acking
// streams with random latency and checks, from a concurrent poller, that
// Delivered never moves back, and that every confirmed item was durable.
func TestDeliveredNeverDecreases(t *testing.T) {
	for round := range 5 {
		seed := uint64(time.Now().UnixNano())
		t.Run(fmt.Sprintf("round %d seed %d", round, seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(round)))
			ctx := testCtx(t)
			latency := time.Duration(rng.IntN(300)) * time.Microsecond
			s := openStream(t, ingestfake.Config{AckLatency: latency})
			lane := acklane.New[acklane.RawAnchor](s, acklane.Config{Capacity: 1 + rng.IntN(16)}, nil)
			defer lane.Close()

			stop := make(chan struct{})
			var violations atomic.Int64
			pollerDone := make(chan struct{})
			go func() {
				defer close(pollerDone)
				var last uint64
				for {
					select {
					case <-stop:
						return
					default:
					}
					runtime.Gosched()
					d := lane.Delivered()
					if d < last {
						violations.Add(1)
					}
					last = d
				}
			}()

			writers, perWriter := 2+rng.IntN(14), 20+rng.IntN(40)
			var wg sync.WaitGroup
			var notDurable atomic.Int64
			for w := range writers {
				wg.Go(func() {
					rows := 1 + (w % 5)
					for range perWriter {
						rec := ingestfake.NewRecord(ingestfake.TestSchema, rows)
						span, err := s.Submit(ctx, rec)
						rec.Release()
						if !assert.NoError(t, err) {
							return
						}
						c, r := acklane.NewRawAnchor()
						if !assert.NoError(t, lane.Enqueue(ctx, acklane.Pending[acklane.RawAnchor]{To: span.To, Confirm: c})) {
							return
						}
						if !assert.NoError(t, r.Wait(ctx)) {
							return
						}
						if s.Durable() < span.To || lane.Delivered() < span.To {
							notDurable.Add(1)
						}
					}
				})
			}
			wg.Wait()
			close(stop)
			<-pollerDone

			require.NoError(t, lane.Drain(ctx))
			assert.Zero(t, violations.Load(), "delivered decreased")
			assert.Zero(t, notDurable.Load(), "an item confirmed before its rows were durable and delivered")
			assert.Equal(t, s.Submitted(), lane.Delivered())
			assert.Zero(t, lane.Pending())
		})
	}
}

func TestPoisonFailsPendingItemsAndConfirmsNone(t *testing.T) {
	cases := []struct {
		name       string
		partialAck bool
	}{
		{name: "nothing acked"},
		{name: "acked below the burst maximum", partialAck: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			s := openStream(t, ingestfake.Config{ManualAck: true})
			obs := &recorder{}
			lane := acklane.New[acklane.RawAnchor](s, acklane.Config{}, obs)
			defer lane.Close()

			_, first := submit(t, ctx, s, lane, 4)
			require.NoError(t, s.WaitWaitCalls(ctx, 1))
			var rs []*acklane.Receipt
			for range 3 {
				_, r := submit(t, ctx, s, lane, 4)
				rs = append(rs, r)
			}
			if tc.partialAck {
				s.AckUpTo(2) // below the first item's end: it must not confirm
			}
			s.Poison(ingestfake.ErrPoison("connection state lost"))

			for i, r := range append([]*acklane.Receipt{first}, rs...) {
				err := r.Wait(ctx)
				require.Error(t, err, "receipt %d confirmed on a dead stream", i)
				class, ok := ingest.ClassOf(err)
				assert.True(t, ok, "the stream error is kept: %v", err)
				assert.Equal(t, ingest.Poison, class)
			}
			<-lane.Failed()
			assert.Error(t, lane.Err())
			assert.Zero(t, lane.Delivered())

			// A failed lane refuses new work up front.
			c, r := acklane.NewRawAnchor()
			err := lane.Enqueue(ctx, acklane.Pending[acklane.RawAnchor]{To: 100, Confirm: c})
			require.Error(t, err)
			assert.False(t, r.Settled())
			_, _, _, _, poisoned := obs.snapshot()
			assert.Equal(t, 1, poisoned)
			assert.Error(t, lane.Drain(ctx), "Drain reports the failure")
			assert.Zero(t, lane.Pending())
		})
	}
}

func TestFullChannelIsBackpressure(t *testing.T) {
	ctx := testCtx(t)
	s := openStream(t, ingestfake.Config{ManualAck: true})
	lane := acklane.New[acklane.RawAnchor](s, acklane.Config{Capacity: 2}, nil)
	defer lane.Close()

	_, r0 := submit(t, ctx, s, lane, 1)
	require.NoError(t, s.WaitWaitCalls(ctx, 1)) // the lane holds item 0
	_, r1 := submit(t, ctx, s, lane, 1)
	_, r2 := submit(t, ctx, s, lane, 1) // the channel is now full

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	c, r3 := acklane.NewRawAnchor()
	err := lane.Enqueue(cancelled, acklane.Pending[acklane.RawAnchor]{To: 3, Confirm: c})
	require.ErrorIs(t, err, context.Canceled, "a full channel must block, not accept")
	assert.False(t, r3.Settled())

	// A blocked Enqueue proceeds once the lane makes room.
	enqueued := make(chan error, 1)
	go func() {
		c, _ := acklane.NewRawAnchor()
		enqueued <- lane.Enqueue(ctx, acklane.Pending[acklane.RawAnchor]{To: 3, Confirm: c})
	}()
	s.AckAll()
	require.NoError(t, <-enqueued)
	waitAll(t, ctx, []*acklane.Receipt{r0, r1, r2})
}

func TestAckTimeoutRetriesWithoutSettling(t *testing.T) {
	ctx := testCtx(t)
	s := openStream(t, ingestfake.Config{ManualAck: true})
	obs := &recorder{}
	lane := acklane.New[acklane.RawAnchor](s, acklane.Config{AckTimeout: time.Millisecond}, obs)
	defer lane.Close()

	span, r := submit(t, ctx, s, lane, 5)
	require.NoError(t, s.WaitWaitCalls(ctx, 4)) // the slow ack made the lane retry
	assert.False(t, r.Settled())
	assert.NoError(t, lane.Err(), "a slow ack is a symptom, not a stream failure")
	s.AckAll()
	require.NoError(t, r.Wait(ctx))

	for _, target := range s.WaitTargets() {
		assert.Equal(t, span.To, target, "retries wait for the same offset")
	}
	_, _, _, retries, poisoned := obs.snapshot()
	assert.GreaterOrEqual(t, retries, 3)
	assert.Zero(t, poisoned)
	assert.Equal(t, span.To, lane.Delivered())
}

func TestDrainWaitsForEverySettlement(t *testing.T) {
	ctx := testCtx(t)
	s := openStream(t, ingestfake.Config{ManualAck: true})
	lane := acklane.New[acklane.RawAnchor](s, acklane.Config{}, nil)
	defer lane.Close()

	_, r1 := submit(t, ctx, s, lane, 1)
	_, r2 := submit(t, ctx, s, lane, 1)

	short, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, lane.Drain(short), context.Canceled, "Drain gives up with ctx while acks stall")

	c, r3 := acklane.NewRawAnchor()
	require.ErrorIs(t, lane.Enqueue(ctx, acklane.Pending[acklane.RawAnchor]{To: 2, Confirm: c}), acklane.ErrClosed,
		"a draining lane accepts nothing new")
	assert.False(t, r3.Settled())

	s.AckAll()
	require.NoError(t, lane.Drain(ctx))
	assert.True(t, r1.Settled())
	assert.True(t, r2.Settled())
	waitAll(t, ctx, []*acklane.Receipt{r1, r2})
}

// TestCloseFailsUnsettledItems checks Close is bounded while acks stall, and
// that writers racing with it either get an error from Enqueue or a settled
// receipt: nothing hangs and nothing unacked is confirmed.
func TestCloseFailsUnsettledItems(t *testing.T) {
	ctx := testCtx(t)
	s := openStream(t, ingestfake.Config{ManualAck: true})
	lane := acklane.New[acklane.RawAnchor](s, acklane.Config{Capacity: 4}, nil)

	_, r := submit(t, ctx, s, lane, 1)
	require.NoError(t, s.WaitWaitCalls(ctx, 1))

	var wg sync.WaitGroup
	var accepted []*acklane.Receipt
	var mu sync.Mutex
	started := make(chan struct{})
	for i := range 16 {
		wg.Go(func() {
			if i == 0 {
				close(started)
			}
			c, r := acklane.NewRawAnchor()
			if err := lane.Enqueue(ctx, acklane.Pending[acklane.RawAnchor]{To: uint64(i), Confirm: c}); err != nil {
				assert.ErrorIs(t, err, acklane.ErrClosed)
				return
			}
			mu.Lock()
			accepted = append(accepted, r)
			mu.Unlock()
		})
	}
	<-started
	lane.Close()
	wg.Wait()

	require.ErrorIs(t, r.Wait(ctx), acklane.ErrClosed)
	for i, r := range accepted {
		require.ErrorIs(t, r.Wait(ctx), acklane.ErrClosed, "accepted item %d", i)
	}
	assert.Zero(t, lane.Pending())
	assert.Zero(t, lane.Delivered())
	lane.Close() // idempotent
}

func TestReceiptWait(t *testing.T) {
	ctx := testCtx(t)
	c, r := acklane.NewRawAnchor()
	assert.Same(t, r, c.Receipt())

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err := r.Wait(cancelled)
	require.ErrorIs(t, err, context.Canceled, "giving up is never a confirmation")
	assert.NoError(t, r.Err())
	assert.False(t, r.Settled())

	// A nil receipt confirms nothing: waiting on it is an error, not
	// "durable".
	var nilReceipt *acklane.Receipt
	assert.ErrorIs(t, nilReceipt.Wait(ctx), acklane.ErrNoReceipt)

	d, dr := acklane.NewDerivedCoverage()
	assert.Same(t, dr, d.Receipt())
	s := openStream(t, ingestfake.Config{})
	lane := acklane.New[acklane.DerivedCoverage](s, acklane.Config{}, nil)
	defer lane.Close()
	rec := ingestfake.NewRecord(ingestfake.TestSchema, 2)
	defer rec.Release()
	span, err := s.Submit(ctx, rec)
	require.NoError(t, err)
	require.NoError(t, lane.Enqueue(ctx, acklane.Pending[acklane.DerivedCoverage]{To: span.To, Confirm: d}))
	require.NoError(t, dr.Wait(ctx))
	assert.Equal(t, uint64(2), lane.Delivered())
}

// TestSoakPipelines is the anti-regression harness for the inline-wait trap:
// many writers submit and wait concurrently against a stream with real ack
// latency. If waiting were per batch, the lane would never see more than one
// pending item and every burst would be 1.
func TestSoakPipelines(t *testing.T) {
	ctx := testCtx(t)
	s := openStream(t, ingestfake.Config{AckLatency: 2 * time.Millisecond})
	obs := &recorder{}
	lane := acklane.New[acklane.RawAnchor](s, acklane.Config{Capacity: 256}, obs)
	defer lane.Close()

	const writers, perWriter = 64, 30
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range perWriter {
				rec := ingestfake.NewRecord(ingestfake.TestSchema, 10)
				span, err := s.Submit(ctx, rec)
				rec.Release()
				if !assert.NoError(t, err) {
					return
				}
				c, r := acklane.NewRawAnchor()
				if !assert.NoError(t, lane.Enqueue(ctx, acklane.Pending[acklane.RawAnchor]{To: span.To, Confirm: c})) {
					return
				}
				if !assert.NoError(t, r.Wait(ctx)) {
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, lane.Drain(ctx))

	bursts, latencies, maxPending, _, _ := obs.snapshot()
	sum := 0
	for _, b := range bursts {
		sum += b
	}
	mean := float64(sum) / float64(len(bursts))
	t.Logf("items=%d waits=%d mean coalesce=%.1f max pending=%d", sum, s.WaitDurableCalls(), mean, maxPending)
	assert.Equal(t, writers*perWriter, sum)
	assert.Equal(t, writers*perWriter, latencies)
	assert.Greater(t, maxPending, int64(1), "pending never climbed: not pipelining")
	assert.Greater(t, mean, 1.0, "coalesce ratio 1: a wait per batch")
	assert.Less(t, s.WaitDurableCalls(), writers*perWriter/2, "WaitDurable calls must be far fewer than items")
	assert.Equal(t, uint64(writers*perWriter*10), lane.Delivered())
}

func TestStreamErrorIsNotConfusedWithClose(t *testing.T) {
	ctx := testCtx(t)
	s := openStream(t, ingestfake.Config{ManualAck: true})
	lane := acklane.New[acklane.RawAnchor](s, acklane.Config{}, nil)
	defer lane.Close()
	_, r := submit(t, ctx, s, lane, 1)
	require.NoError(t, s.WaitWaitCalls(ctx, 1))
	require.NoError(t, s.Close()) // the stream goes away under the lane
	err := r.Wait(ctx)
	require.ErrorIs(t, err, ingestfake.ErrClosed)
	assert.False(t, errors.Is(err, acklane.ErrClosed))
	<-lane.Failed()
}

// TestFailedWaitConfirmsTheDurablePrefix checks that when a stream dies
// mid-burst, the items it had already made durable are confirmed (failing
// them would only cause redelivery duplicates) and only the rest fail.
func TestFailedWaitConfirmsTheDurablePrefix(t *testing.T) {
	ctx := testCtx(t)
	s := openStream(t, ingestfake.Config{ManualAck: true})
	lane := acklane.New[acklane.RawAnchor](s, acklane.Config{}, nil)
	defer lane.Close()

	_, r1 := submit(t, ctx, s, lane, 2)
	_, r2 := submit(t, ctx, s, lane, 3)
	span3, r3 := submit(t, ctx, s, lane, 4)

	s.AckUpTo(5) // the first two items are durable, the third is not
	s.Poison(ingestfake.ErrPoison("stream died"))

	require.NoError(t, r1.Wait(ctx))
	require.NoError(t, r2.Wait(ctx))
	require.Error(t, r3.Wait(ctx), "rows never made durable must fail, never confirm")
	assert.Equal(t, uint64(5), lane.Delivered())
	assert.Less(t, lane.Delivered(), span3.To)
}

// TestFailReportsTheStreamDeathOnce checks Fail, the path by which the pool
// reports a stream death a writer noticed before the lane: pending items fail
// with the stream's error (the durable prefix still confirms), later ones are
// refused with it, Close keeps it rather than ErrClosed, and the death counts
// as poisoned exactly once whichever path saw it first.
func TestFailReportsTheStreamDeathOnce(t *testing.T) {
	died := ingestfake.ErrPoison("stream state lost")

	t.Run("Fail first", func(t *testing.T) {
		ctx := testCtx(t)
		s := openStream(t, ingestfake.Config{ManualAck: true}) // healthy: the lane cannot see the death
		obs := &recorder{}
		lane := acklane.New[acklane.RawAnchor](s, acklane.Config{}, obs)
		defer lane.Close()
		_, durable := submit(t, ctx, s, lane, 2)
		_, lost := submit(t, ctx, s, lane, 3)
		s.AckUpTo(2)

		lane.Fail(died)
		require.NoError(t, durable.Wait(ctx), "rows durable before the death are confirmed")
		err := lost.Wait(ctx)
		require.ErrorIs(t, err, died)
		assert.NotErrorIs(t, err, acklane.ErrClosed)
		<-lane.Failed()
		assert.ErrorIs(t, lane.Err(), died)
		c, r := acklane.NewRawAnchor()
		require.ErrorIs(t, lane.Enqueue(ctx, acklane.Pending[acklane.RawAnchor]{To: 10, Confirm: c}), died)
		assert.False(t, r.Settled())

		lane.Fail(ingestfake.ErrPoison("seen again"))
		lane.Close()
		_, _, _, _, poisoned := obs.snapshot()
		assert.Equal(t, 1, poisoned)
		assert.ErrorIs(t, lane.Err(), died, "only the first failure is kept")
		assert.Zero(t, lane.Pending())
	})

	t.Run("lane first", func(t *testing.T) {
		ctx := testCtx(t)
		s := openStream(t, ingestfake.Config{ManualAck: true})
		obs := &recorder{}
		lane := acklane.New[acklane.RawAnchor](s, acklane.Config{}, obs)
		defer lane.Close()
		_, r := submit(t, ctx, s, lane, 2)
		s.Poison(died)
		require.ErrorIs(t, r.Wait(ctx), died)
		<-lane.Failed()

		lane.Fail(died) // a writer noticed too
		_, _, _, _, poisoned := obs.snapshot()
		assert.Equal(t, 1, poisoned)
	})

	t.Run("Close after Fail", func(t *testing.T) {
		ctx := testCtx(t)
		s := openStream(t, ingestfake.Config{ManualAck: true})
		lane := acklane.New[acklane.RawAnchor](s, acklane.Config{}, nil)
		var rs []*acklane.Receipt
		for range 5 {
			_, r := submit(t, ctx, s, lane, 1)
			rs = append(rs, r)
		}
		lane.Fail(died)
		lane.Close()
		for i, r := range rs {
			assert.ErrorIs(t, r.Wait(ctx), died, "item %d", i)
		}
	})
}

// Health follows the lane: the oldest submit it waits for, writers blocked
// on a full channel, pending rows; a confirmation stamps the last ack and
// clears the oldest pending before any waiter wakes.
func TestHealthFollowsTheLane(t *testing.T) {
	ctx := testCtx(t)
	s := openStream(t, ingestfake.Config{ManualAck: true})
	lane := acklane.New[acklane.RawAnchor](s, acklane.Config{Capacity: 1}, nil)
	defer lane.Close()
	assert.Equal(t, acklane.Health{Kind: acklane.KindRawAnchor}, lane.Health(), "a new lane waits for nothing and never acked")

	before := time.Now()
	_, r0 := submit(t, ctx, s, lane, 3)
	require.NoError(t, s.WaitWaitCalls(ctx, 1)) // the lane waits for item 0
	h := lane.Health()
	assert.False(t, h.OldestPending.Before(before), "the oldest pending is item 0's submit")
	assert.Equal(t, uint64(3), h.PendingRows)
	assert.Equal(t, int64(1), h.PendingItems)
	assert.True(t, h.LastAck.IsZero())

	_, r1 := submit(t, ctx, s, lane, 1) // fills the channel
	rec := ingestfake.NewRecord(ingestfake.TestSchema, 1)
	defer rec.Release()
	span, err := s.Submit(ctx, rec)
	require.NoError(t, err)
	c2, r2 := acklane.NewRawAnchor()
	blocked := make(chan error, 1)
	go func() { blocked <- lane.Enqueue(ctx, acklane.Pending[acklane.RawAnchor]{To: span.To, Confirm: c2}) }()
	require.Eventually(t, func() bool { return lane.Health().BlockedWriters == 1 }, 10*time.Second, time.Millisecond)

	s.AckAll()
	require.NoError(t, r0.Wait(ctx))
	h = lane.Health()
	assert.False(t, h.LastAck.IsZero(), "stamped before the waiter woke")
	require.NoError(t, <-blocked)
	assert.Zero(t, lane.Health().BlockedWriters)
	s.AckAll()
	waitAll(t, ctx, []*acklane.Receipt{r1, r2})
	assert.True(t, lane.Health().OldestPending.IsZero(), "nothing waits")
	assert.Zero(t, lane.Health().PendingRows)
}

// TestItemIsConfirmedByItsOwnAck checks that an item queued behind a later
// one is confirmed as soon as its own rows are durable: the lane does not
// hold it until the ack of the item submitted after it.
func TestItemIsConfirmedByItsOwnAck(t *testing.T) {
	ctx := testCtx(t)
	s := openStream(t, ingestfake.Config{ManualAck: true})
	obs := &recorder{}
	lane := acklane.New[acklane.RawAnchor](s, acklane.Config{}, obs)
	defer lane.Close()

	_, r0 := submit(t, ctx, s, lane, 2)
	require.NoError(t, s.WaitWaitCalls(ctx, 1)) // the lane waits for item 0...
	span1, r1 := submit(t, ctx, s, lane, 3)     // ...while items 1 and 2 queue up
	span2, r2 := submit(t, ctx, s, lane, 4)

	s.AckUpTo(2)
	require.NoError(t, r0.Wait(ctx))
	require.NoError(t, s.WaitWaitCalls(ctx, 2)) // the lane waits again...
	s.AckUpTo(span1.To)                         // ...and item 1's ack comes in; item 2's is not in
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, r1.Wait(wctx), "item 1 is durable: it must not wait for item 2's ack")
	assert.False(t, r2.Settled(), "item 2 is not durable yet")
	assert.Equal(t, span1.To, lane.Delivered())

	require.NoError(t, s.WaitWaitCalls(ctx, 3))
	s.AckUpTo(span2.To)
	require.NoError(t, r2.Wait(ctx))
	assert.Equal(t, []uint64{2, span1.To, span2.To}, s.WaitTargets())
	bursts, _, _, _, _ := obs.snapshot()
	assert.Equal(t, []int{1, 1, 1}, bursts)
}

// TestLaneAddsNoLatencyToTheAckLatency models the service at steady state:
// a batch every 20 ms, each acked 50 ms after it was submitted, so while the
// lane waits for one ack the next two batches queue up. Each must be
// confirmed about 50 ms after its submit, not when the last batch queued
// with it is acked (~70 ms: the ack latency plus the batch spacing). The
// bound leaves 15 ms for scheduling and lets two of the batches be late, so
// that a busy machine does not fail it; holding a batch for its successor's
// ack makes about half of them 20 ms late.
func TestLaneAddsNoLatencyToTheAckLatency(t *testing.T) {
	const (
		ack     = 50 * time.Millisecond
		spacing = 20 * time.Millisecond
		batches = 16
		slack   = 15 * time.Millisecond
	)
	ctx := testCtx(t)
	s := openStream(t, ingestfake.Config{AckLatency: ack})
	lane := acklane.New[acklane.RawAnchor](s, acklane.Config{}, nil)
	defer lane.Close()

	lat := make([]time.Duration, batches)
	var wg sync.WaitGroup
	tick := time.NewTicker(spacing)
	defer tick.Stop()
	for i := range batches {
		<-tick.C
		t0 := time.Now()
		_, r := submit(t, ctx, s, lane, 10)
		wg.Go(func() {
			assert.NoError(t, r.Wait(ctx))
			lat[i] = time.Since(t0)
		})
	}
	wg.Wait()
	late := 0
	for _, d := range lat {
		if d > ack+slack {
			late++
		}
	}
	t.Logf("submit → confirmed: %v", lat)
	assert.LessOrEqual(t, late, 2, "batches confirmed later than %v after submit: %v", ack+slack, lat)
}

// clockStream is a fake stream that also dates its acks, as
// ingest.ArrowStream does (acklane.AckClock).
type clockStream struct {
	*ingestfake.Stream
	mu    sync.Mutex
	acked map[uint64]time.Time // row → when the ack covering it arrived
}

func (c *clockStream) ackUpTo(row uint64, at time.Time) {
	c.mu.Lock()
	c.acked[row] = at
	c.mu.Unlock()
	c.AckUpTo(row)
}

func (c *clockStream) AckedAt(row uint64) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.acked[row]
	return at, ok
}

// lagRecorder is a recorder that also keeps the ack → confirmation lags.
type lagRecorder struct {
	recorder
	lagMu sync.Mutex
	lags  []time.Duration
}

func (r *lagRecorder) ObserveAckLag(d time.Duration) {
	r.lagMu.Lock()
	defer r.lagMu.Unlock()
	r.lags = append(r.lags, d)
}

// TestAckLagIsMeasuredFromEachItemsOwnAck checks the lane's own-latency
// metric: one observation per confirmed item, measured from the time its
// stream says the item's ack arrived.
func TestAckLagIsMeasuredFromEachItemsOwnAck(t *testing.T) {
	ctx := testCtx(t)
	s := &clockStream{Stream: openStream(t, ingestfake.Config{ManualAck: true}), acked: map[uint64]time.Time{}}
	obs := &lagRecorder{}
	lane := acklane.New[acklane.RawAnchor](s, acklane.Config{}, obs)
	defer lane.Close()

	var rs []*acklane.Receipt
	var spans []ingest.Span
	for range 2 {
		span, r := submit(t, ctx, s.Stream, lane, 2)
		rs, spans = append(rs, r), append(spans, span)
	}
	// Item 0's ack is dated an hour ago (a lane that sat on it), item 1's now.
	s.ackUpTo(spans[0].To, time.Now().Add(-time.Hour))
	require.NoError(t, rs[0].Wait(ctx))
	s.ackUpTo(spans[1].To, time.Now())
	require.NoError(t, rs[1].Wait(ctx))

	obs.lagMu.Lock()
	defer obs.lagMu.Unlock()
	require.Len(t, obs.lags, 2)
	assert.GreaterOrEqual(t, obs.lags[0], time.Hour)
	assert.Less(t, obs.lags[1], time.Hour)
	assert.GreaterOrEqual(t, obs.lags[1], time.Duration(0))
}

// The pending gauge climbs as rows are enqueued while the lane waits for a
// stalled ack, not only when a burst starts or ends.
func TestPendingClimbsLiveDuringAckStall(t *testing.T) {
	ctx := testCtx(t)
	s := openStream(t, ingestfake.Config{ManualAck: true})
	obs := &recorder{}
	lane := acklane.New[acklane.RawAnchor](s, acklane.Config{Capacity: 16}, obs)
	defer lane.Close()
	submit(t, ctx, s, lane, 1)
	require.NoError(t, s.WaitWaitCalls(ctx, 1)) // the lane waits; no ack comes
	for range 5 {
		submit(t, ctx, s, lane, 10)
	}
	_, _, maxPending, _, _ := obs.snapshot()
	assert.Equal(t, int64(51), maxPending, "every enqueued row is reported pending at once")
	assert.Equal(t, uint64(51), lane.PendingRows())
}
