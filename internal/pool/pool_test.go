package pool_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

const table = "main.default.events"

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fastConfig is a pool config with back-offs short enough for tests.
func fastConfig(streams int) pool.Config {
	cfg := pool.DefaultConfig()
	cfg.MinStreams, cfg.MaxStreams = streams, streams
	cfg.OpenBackoffInitial, cfg.OpenBackoffMax = time.Millisecond, 5*time.Millisecond
	cfg.PickTimeout = 10 * time.Second
	return cfg
}

// laneRecorder is an acklane.Observer for one stream.
type laneRecorder struct {
	mu         sync.Mutex
	bursts     []int
	maxPending int64
	poisoned   int
}

func (r *laneRecorder) ObserveBurst(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bursts = append(r.bursts, n)
}
func (r *laneRecorder) ObserveDeliveryLatency(time.Duration) {}
func (r *laneRecorder) SetPending(n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.maxPending = max(r.maxPending, n)
}
func (r *laneRecorder) IncRetry() {}
func (r *laneRecorder) IncPoisoned(error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.poisoned++
}

// observer is a pool.Observer that keeps everything.
type observer struct {
	mu       sync.Mutex
	lanes    map[int]*laneRecorder
	rebuilds map[int]int
	rejects  int
}

func newObserver() *observer {
	return &observer{lanes: map[int]*laneRecorder{}, rebuilds: map[int]int{}}
}

func (o *observer) StreamObserver(tbl string, index int) acklane.Observer {
	o.mu.Lock()
	defer o.mu.Unlock()
	if tbl != table {
		panic("observer scoped to the wrong table: " + tbl)
	}
	r := &laneRecorder{}
	o.lanes[index] = r
	return r
}

func (o *observer) IncRebuild(_ string, index int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rebuilds[index]++
}

func (o *observer) IncConcurrencyReject(string, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rejects++
}

func (o *observer) rebuildsOf(index int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rebuilds[index]
}

func (o *observer) rejectCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rejects
}

func (o *observer) lane(index int) *laneRecorder {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lanes[index]
}

func (r *laneRecorder) poisonedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.poisoned
}

// closeNow closes p without waiting for acks, for tests that leave rows
// unacknowledged on purpose.
func closeNow(p *pool.Pool) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = p.Close(ctx)
}

func rec(rows int) arrow.RecordBatch { return ingestfake.NewRecord(ingestfake.TestSchema, rows) }

func write(t *testing.T, ctx context.Context, p *pool.Pool, key string, rows int) *pool.Ticket {
	t.Helper()
	r := rec(rows)
	defer r.Release()
	tk, err := p.Write(ctx, key, r)
	require.NoError(t, err)
	return tk
}

// keyFor returns a key the pool maps to member index.
func keyFor(t *testing.T, p *pool.Pool, index int) string {
	t.Helper()
	for i := range 10_000 {
		if k := fmt.Sprintf("key-%d", i); p.Pick(k) == index {
			return k
		}
	}
	t.Fatalf("no key maps to member %d", index)
	return ""
}

// bind writes one batch with a distinctive row count to every member and
// returns the fake stream behind each member.
func bind(t *testing.T, ctx context.Context, p *pool.Pool, o *ingestfake.Opener) (map[int]*ingestfake.Stream, []*pool.Ticket) {
	t.Helper()
	streams := map[int]*ingestfake.Stream{}
	var tickets []*pool.Ticket
	for i := range p.Size() {
		rows := 1000 + i
		tk := write(t, ctx, p, keyFor(t, p, i), rows)
		require.Equal(t, i, tk.Stream)
		tickets = append(tickets, tk)
		for _, s := range o.Streams() {
			if !s.Closed() && s.Submitted() == uint64(rows) {
				streams[i] = s
			}
		}
		require.NotNil(t, streams[i], "no fake stream took member %d's batch", i)
	}
	return streams, tickets
}

func TestSize(t *testing.T) {
	const rowBytes, rowsPerSec = 15_000, 10_000
	cases := []struct {
		name string
		cfg  pool.Config
		want int
	}{
		{name: "defaults", cfg: pool.Config{}, want: 2},
		{name: "15 KB rows at 10k rows/s need two 100 MB/s streams",
			cfg: pool.Config{MinStreams: 1, PerStreamMBps: 100, PeakMBps: rowBytes * rowsPerSec / 1e6}, want: 2},
		{name: "small rows at the same rate fit one stream",
			cfg: pool.Config{MinStreams: 1, PerStreamMBps: 100, PeakMBps: 100 * rowsPerSec / 1e6}, want: 1},
		{name: "floored at min", cfg: pool.Config{MinStreams: 3, PeakMBps: 150}, want: 3},
		{name: "exact multiple does not round up", cfg: pool.Config{MinStreams: 1, PeakMBps: 300}, want: 3},
		{name: "float noise does not round up", cfg: pool.Config{MinStreams: 1, PerStreamMBps: 0.1, PeakMBps: 0.3}, want: 3},
		{name: "headroom per stream", cfg: pool.Config{MinStreams: 1, PerStreamMBps: 50, PeakMBps: 150}, want: 3},
		{name: "capped at max", cfg: pool.Config{MinStreams: 2, MaxStreams: 4, PeakMBps: 10_000}, want: 4},
		{name: "default max caps", cfg: pool.Config{PeakMBps: 10_000}, want: pool.DefaultConfig().MaxStreams},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, pool.Size(tc.cfg))
			p := pool.New(ingestfake.NewOpener(ingestfake.Config{}), table, ingestfake.TestSchema, tc.cfg, nil)
			assert.Equal(t, tc.want, p.Size())
			require.NoError(t, p.Close(testCtx(t)))
		})
	}
}

func TestConfigDefaultsAndValidate(t *testing.T) {
	d := pool.DefaultConfig()
	require.NoError(t, d.Validate())
	assert.Equal(t, 2, d.MinStreams)
	assert.Equal(t, 100.0, d.PerStreamMBps)
	assert.Equal(t, acklane.DefaultCapacity, d.AckChannelCapacity)
	assert.Positive(t, d.RebuildBudget)
	assert.Positive(t, d.PickTimeout)
	assert.GreaterOrEqual(t, d.OpenBackoffMax, ingest.PipelineBlockedBackoff, "back-off can reach a pipeline-blocked wait")

	bad := []struct {
		name string
		cfg  pool.Config
	}{
		{"min above max", pool.Config{MinStreams: 5, MaxStreams: 2}},
		{"negative streams", pool.Config{MinStreams: -1}},
		{"negative bandwidth", pool.Config{PeakMBps: -1}},
		{"negative capacity", pool.Config{AckChannelCapacity: -1}},
		{"negative duration", pool.Config{PickTimeout: -time.Second}},
		{"backoff inverted", pool.Config{OpenBackoffInitial: time.Minute, OpenBackoffMax: time.Second}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			assert.Error(t, tc.cfg.Validate())
		})
	}
	assert.NoError(t, pool.Config{}.Validate(), "unset fields take defaults")

	p := pool.New(ingestfake.NewOpener(ingestfake.Config{}), table, ingestfake.TestSchema, pool.Config{}, nil)
	d.SelfSizing = false // the one field whose zero value is a choice: a fixed size
	assert.Equal(t, d, p.Config())
}

func TestStreamsOpenLazilyAndOnce(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{})
	p := pool.New(o, table, ingestfake.TestSchema, fastConfig(3), nil)
	assert.Zero(t, o.OpenAttempts(), "nothing opens before the first write")

	for range 50 {
		require.NoError(t, write(t, ctx, p, "", 2).Wait(ctx))
	}
	require.NoError(t, p.Connect(ctx))
	assert.Equal(t, 3, o.Opens(), "a fixed pool: writes never open streams")
	assert.Equal(t, 3, o.OpenAttempts())
	require.NoError(t, p.Close(ctx))
	assert.Zero(t, o.Live())
}

func TestSelection(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{})
	p := pool.New(o, table, ingestfake.TestSchema, fastConfig(4), nil)
	defer p.Close(ctx)
	require.NoError(t, p.Connect(ctx))

	t.Run("round robin spreads evenly", func(t *testing.T) {
		counts := map[int]int{}
		for range 40 {
			tk := write(t, ctx, p, "", 1)
			require.NoError(t, tk.Wait(ctx))
			counts[tk.Stream]++
		}
		assert.Equal(t, map[int]int{0: 10, 1: 10, 2: 10, 3: 10}, counts)
	})

	t.Run("a key always maps to one stream", func(t *testing.T) {
		used := map[int]bool{}
		for i := range 32 {
			key := fmt.Sprintf("customer-%d", i)
			want := p.Pick(key)
			require.GreaterOrEqual(t, want, 0)
			require.Less(t, want, 4)
			used[want] = true
			for range 5 {
				tk := write(t, ctx, p, key, 1)
				assert.Equal(t, want, tk.Stream, "key %s moved", key)
				require.NoError(t, tk.Wait(ctx))
			}
		}
		assert.Len(t, used, 4, "32 keys should reach every stream")
		assert.Equal(t, -1, p.Pick(""))
	})

	t.Run("the mapping is a pure function of key and size", func(t *testing.T) {
		other := pool.New(ingestfake.NewOpener(ingestfake.Config{}), table, ingestfake.TestSchema, fastConfig(4), nil)
		defer other.Close(ctx)
		for i := range 100 {
			key := fmt.Sprintf("k%d", i)
			assert.Equal(t, p.Pick(key), other.Pick(key))
		}
	})
}

// A nil or zero Ticket stands for no submitted rows: waiting on it must be
// an error, never a confirmation that something is durable.
func TestTicketWaitOnNilOrZeroIsAnError(t *testing.T) {
	ctx := testCtx(t)
	var nilTicket *pool.Ticket
	assert.ErrorIs(t, nilTicket.Wait(ctx), acklane.ErrNoReceipt)
	assert.ErrorIs(t, (&pool.Ticket{}).Wait(ctx), acklane.ErrNoReceipt)
}

func TestTicketConfirmsOnlyAfterDurableAck(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{ManualAck: true})
	p := pool.New(o, table, ingestfake.TestSchema, fastConfig(2), nil)
	defer closeNow(p)
	require.NoError(t, p.Connect(ctx))
	streams, tickets := bind(t, ctx, p, o)

	tk := write(t, ctx, p, keyFor(t, p, 1), 7)
	s := streams[1]
	require.NoError(t, s.WaitWaitCalls(ctx, 1))
	for _, tk := range append(tickets, tk) {
		select {
		case <-tk.Done():
			t.Fatalf("ticket of stream %d settled before any ack", tk.Stream)
		default:
		}
	}
	s.AckAll()
	require.NoError(t, tickets[1].Wait(ctx))
	require.NoError(t, tk.Wait(ctx))
	assert.GreaterOrEqual(t, s.Durable(), tk.Span.To)
	select {
	case <-tickets[0].Done():
		t.Fatal("stream 0's ticket settled by stream 1's ack")
	default:
	}
	streams[0].AckAll()
	require.NoError(t, tickets[0].Wait(ctx))

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	pending := write(t, ctx, p, keyFor(t, p, 0), 1)
	assert.Error(t, pending.Wait(cancelled), "giving up is an error, never an ack")
}

// TestPoisonRebuildsWhileOthersServe poisons one member: its pending rows
// fail, the other members keep confirming while it is held in "opening",
// its keyed writes wait for it rather than moving, and after the rebuild no
// row span is confirmed twice or without a durable ack.
func TestPoisonRebuildsWhileOthersServe(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{ManualAck: true})
	obs := newObserver()
	p := pool.New(o, table, ingestfake.TestSchema, fastConfig(3), obs)
	defer p.Close(ctx)
	require.NoError(t, p.Connect(ctx))
	streams, first := bind(t, ctx, p, o)

	// Hold every re-open until the test lets it go.
	release := make(chan struct{})
	o.SetOpenHook(func(ctx context.Context, _ int, _ string, _ *arrow.Schema) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})

	type confirmed struct {
		stream int
		gen    uint64
		span   ingest.Span
	}
	seen := map[confirmed]bool{}
	confirm := func(tk *pool.Ticket, s *ingestfake.Stream) {
		t.Helper()
		require.NoError(t, tk.Wait(ctx))
		c := confirmed{tk.Stream, tk.Generation, tk.Span}
		assert.False(t, seen[c], "span confirmed twice: %+v", c)
		seen[c] = true
		assert.GreaterOrEqual(t, s.Durable(), tk.Span.To, "confirmed without a durable ack")
	}

	victim := streams[1]
	victim.Poison(ingestfake.ErrPoison("stream state lost"))
	err := first[1].Wait(ctx)
	require.Error(t, err)
	class, ok := ingest.ClassOf(err)
	require.True(t, ok)
	assert.Equal(t, ingest.Poison, class)
	require.NoError(t, victim.WaitClosed(ctx), "the dead stream is torn down")
	require.NoError(t, o.WaitOpenAttempts(ctx, 4), "a rebuild is under way")

	// The other members keep serving during the rebuild...
	streams[0].AckAll()
	streams[2].AckAll()
	confirm(first[0], streams[0])
	confirm(first[2], streams[2])
	for range 10 {
		tk := write(t, ctx, p, "", 3)
		require.NotEqual(t, 1, tk.Stream, "round-robin skips the rebuilding member")
		streams[tk.Stream].AckAll()
		confirm(tk, streams[tk.Stream])
	}
	// ...while a write keyed to the rebuilding member waits for it.
	keyed := make(chan *pool.Ticket, 1)
	key := keyFor(t, p, 1) // on the test goroutine: keyFor may t.Fatalf
	go func() {
		r := rec(5)
		defer r.Release()
		tk, err := p.Write(ctx, key, r)
		assert.NoError(t, err)
		keyed <- tk
	}()
	select {
	case tk := <-keyed:
		t.Fatalf("keyed write went to stream %d while its member was rebuilding", tk.Stream)
	default:
	}

	close(release)
	tk := <-keyed
	require.NotNil(t, tk)
	assert.Equal(t, 1, tk.Stream)
	assert.Equal(t, uint64(2), tk.Generation)
	all := o.Streams()
	rebuilt := all[len(all)-1]
	assert.Equal(t, ingest.Span{From: 0, To: 5}, tk.Span, "a rebuilt stream starts its own positions")
	rebuilt.AckAll()
	confirm(tk, rebuilt)

	st := p.Stats()
	assert.Equal(t, int64(1), st.Rebuilds)
	assert.Equal(t, int64(4), st.Opens)
	assert.Equal(t, 1, st.Members[1].Rebuilds)
	assert.Equal(t, uint64(1), st.Members[0].Generation)
	assert.Equal(t, uint64(2), st.Members[1].Generation)
	assert.Equal(t, 1, obs.rebuildsOf(1))
	assert.Equal(t, 1, obs.lane(1).poisonedCount())
	assert.Zero(t, obs.lane(0).poisonedCount())
	assert.Equal(t, 4, o.Opens(), "one new stream, no more")
}

func TestConcurrencyRejectBacksOffWithoutStorm(t *testing.T) {
	const retryAfter = 40 * time.Millisecond

	t.Run("reject then recover", func(t *testing.T) {
		ctx := testCtx(t)
		o := ingestfake.NewOpener(ingestfake.Config{})
		// The first open succeeds, the other member is refused twice.
		o.FailNextOpens(nil, ingestfake.ErrConcurrencyReject(retryAfter), ingestfake.ErrConcurrencyReject(retryAfter))
		obs := newObserver()
		p := pool.New(o, table, ingestfake.TestSchema, fastConfig(2), obs)
		defer p.Close(ctx)
		require.NoError(t, p.Connect(ctx), "one healthy member is enough to serve")

		for range 100 {
			require.NoError(t, write(t, ctx, p, "", 1).Wait(ctx), "writes go to the existing stream")
		}
		_, err := o.WaitOpens(ctx, 2)
		require.NoError(t, err)

		st := p.Stats()
		assert.Equal(t, int64(2), st.ConcurrencyRejects)
		assert.Equal(t, int64(4), st.OpenAttempts, "opens = size + rejected attempts")
		assert.Equal(t, 4, o.OpenAttempts())
		assert.Equal(t, 2, obs.rejectCount())
		times := o.AttemptTimes()
		require.Len(t, times, 4)
		assert.GreaterOrEqual(t, times[2].Sub(times[1]), retryAfter, "honours RetryAfter")
		assert.GreaterOrEqual(t, times[3].Sub(times[2]), retryAfter, "honours RetryAfter")
	})

	t.Run("persistent rejects never storm", func(t *testing.T) {
		ctx := testCtx(t)
		o := ingestfake.NewOpener(ingestfake.Config{})
		o.SetOpenHook(func(_ context.Context, attempt int, _ string, _ *arrow.Schema) error {
			if attempt == 1 {
				return nil
			}
			return ingestfake.ErrConcurrencyReject(retryAfter)
		})
		p := pool.New(o, table, ingestfake.TestSchema, fastConfig(3), nil)
		defer p.Close(ctx)
		require.NoError(t, p.Connect(ctx))

		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for range 20 {
					r := rec(1)
					tk, err := p.Write(ctx, "", r)
					r.Release()
					if assert.NoError(t, err) {
						assert.NoError(t, tk.Wait(ctx))
					}
				}
			})
		}
		wg.Wait()
		require.NoError(t, o.WaitOpenAttempts(ctx, 7))
		times := o.AttemptTimes()
		// One member opened; each of the two rejected members attempts at
		// most once per RetryAfter: 1 + 2×(1 + window/RetryAfter) at most.
		window := times[len(times)-1].Sub(times[0])
		assert.LessOrEqual(t, len(times), 3+2*int(window/retryAfter), "%d attempts in %s", len(times), window)
		assert.Equal(t, 1, o.Opens())
		assert.Equal(t, 1, o.MaxLive())
	})
}

func TestWriteWaitsBoundedWhenNoStreamIsUp(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{})
	o.SetOpenHook(func(context.Context, int, string, *arrow.Schema) error {
		return ingestfake.ErrConcurrencyReject(time.Hour)
	})
	cfg := fastConfig(2)
	cfg.PickTimeout = 30 * time.Millisecond
	p := pool.New(o, table, ingestfake.TestSchema, cfg, nil)
	defer p.Close(ctx)

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			r := rec(1)
			defer r.Release()
			_, err := p.Write(ctx, "", r)
			assert.ErrorIs(t, err, pool.ErrNoStream)
		})
	}
	wg.Wait()
	require.NoError(t, o.WaitOpenAttempts(ctx, 2))
	assert.Equal(t, 2, o.OpenAttempts(), "waiting writers open nothing")

	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	assert.Error(t, p.Connect(short))
}

func TestFatalConfigStopsWritesUntilReopen(t *testing.T) {
	t.Run("at open", func(t *testing.T) {
		ctx := testCtx(t)
		o := ingestfake.NewOpener(ingestfake.Config{})
		o.FailNextOpens(ingestfake.ErrFatalConfig("permission denied"))
		p := pool.New(o, table, ingestfake.TestSchema, fastConfig(2), nil)
		defer p.Close(ctx)

		err := p.Connect(ctx)
		class, _ := ingest.ClassOf(err)
		assert.Equal(t, ingest.FatalConfig, class, "%v", err)
		r := rec(1)
		defer r.Release()
		_, err = p.Write(ctx, "", r)
		class, _ = ingest.ClassOf(err)
		assert.Equal(t, ingest.FatalConfig, class, "%v", err)
		assert.Error(t, p.Stats().Fatal)
		require.Eventually(t, func() bool {
			st := p.Stats()
			return st.Members[0].Down && st.Members[1].Down
		}, 10*time.Second, time.Millisecond)
		// The first member opens alone; its refusal stops the pool before
		// the second opens: one open per attempt, not one per member.
		assert.Equal(t, 1, o.OpenAttempts(), "fatal errors are not retried, and the other members never open")

		require.NoError(t, p.Reopen(ctx, ingestfake.TestSchema))
		require.NoError(t, p.Connect(ctx))
		require.NoError(t, write(t, ctx, p, "", 1).Wait(ctx))
		assert.NoError(t, p.Stats().Fatal)
	})

	t.Run("from a durability wait", func(t *testing.T) {
		ctx := testCtx(t)
		o := ingestfake.NewOpener(ingestfake.Config{ManualAck: true})
		p := pool.New(o, table, ingestfake.TestSchema, fastConfig(2), nil)
		defer closeNow(p)
		require.NoError(t, p.Connect(ctx))
		streams, tickets := bind(t, ctx, p, o)
		streams[0].Poison(ingestfake.ErrFatalConfig("schema mismatch"))
		require.Error(t, tickets[0].Wait(ctx))
		require.Eventually(t, func() bool { return p.Stats().Fatal != nil }, 10*time.Second, time.Millisecond)
		r := rec(1)
		defer r.Release()
		_, err := p.Write(ctx, "", r)
		class, _ := ingest.ClassOf(err)
		assert.Equal(t, ingest.FatalConfig, class, "%v", err)
	})
}

func TestRebuildBudgetIsBounded(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{})
	cfg := fastConfig(1)
	cfg.RebuildBudget = 2
	p := pool.New(o, table, ingestfake.TestSchema, cfg, nil)
	defer p.Close(ctx)
	require.NoError(t, p.Connect(ctx))

	o.SetOpenHook(func(context.Context, int, string, *arrow.Schema) error {
		return ingestfake.ErrPoison("cannot set up stream")
	})
	o.Streams()[0].Poison(nil)
	r := rec(1)
	defer r.Release()
	_, err := p.Write(ctx, "", r) // the submit finds the stream dead
	require.Error(t, err)

	require.Eventually(t, func() bool { return p.Stats().Members[0].Down }, 10*time.Second, time.Millisecond)
	// The death, then two failed re-opens, exhaust a budget of 2.
	assert.Equal(t, 3, o.OpenAttempts())
	assert.Equal(t, int64(1), p.Stats().Rebuilds)
	start := time.Now()
	_, err = p.Write(ctx, "", r)
	require.Error(t, err)
	assert.NotErrorIs(t, err, pool.ErrNoStream, "a down member fails fast")
	assert.Less(t, time.Since(start), cfg.PickTimeout)
	assert.Equal(t, 3, o.OpenAttempts(), "no attempts after giving up")

	o.SetOpenHook(nil)
	require.NoError(t, p.Reopen(ctx, ingestfake.TestSchema))
	require.NoError(t, write(t, ctx, p, "", 1).Wait(ctx))
	assert.False(t, p.Stats().Members[0].Down)
}

func TestReopenReplacesOneAtATime(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{ManualAck: true})
	p := pool.New(o, table, ingestfake.TestSchema, fastConfig(3), nil)
	defer p.Close(ctx)
	require.NoError(t, p.Connect(ctx))
	streams, tickets := bind(t, ctx, p, o)

	wider := arrow.NewSchema(append(ingestfake.TestSchema.Fields(),
		arrow.Field{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true}), nil)
	reopened := make(chan error, 1)
	go func() { reopened <- p.Reopen(ctx, wider) }()

	// Pending rows of the old streams are drained, i.e. confirmed, not failed.
	for i := range 3 {
		streams[i].AckAll()
	}
	require.NoError(t, <-reopened)
	for i, tk := range tickets {
		require.NoError(t, tk.Wait(ctx), "ticket %d", i)
	}
	assert.Equal(t, 6, o.Opens())
	assert.LessOrEqual(t, o.MaxLive(), 3, "never more than Size streams at once")
	for i := range 3 {
		assert.True(t, streams[i].Closed())
	}

	nr := ingestfake.NewRecord(wider, 2)
	defer nr.Release()
	tk, err := p.Write(ctx, "", nr)
	require.NoError(t, err)
	all := o.Streams()
	for _, s := range all[3:] {
		s.AckAll()
		assert.Same(t, wider, s.Schema())
	}
	require.NoError(t, tk.Wait(ctx))

	old := rec(1)
	defer old.Release()
	_, err = p.Write(ctx, "", old)
	assert.ErrorIs(t, err, pool.ErrSchemaMismatch)
}

func TestCloseDrainsAndNacksTheRest(t *testing.T) {
	t.Run("acks arrive while closing", func(t *testing.T) {
		ctx := testCtx(t)
		o := ingestfake.NewOpener(ingestfake.Config{ManualAck: true})
		p := pool.New(o, table, ingestfake.TestSchema, fastConfig(2), nil)
		require.NoError(t, p.Connect(ctx))
		streams, tickets := bind(t, ctx, p, o)
		for range 10 {
			tickets = append(tickets, write(t, ctx, p, "", 2))
		}
		closed := make(chan error, 1)
		go func() { closed <- p.Close(ctx) }()
		for _, s := range streams {
			s.AckAll()
		}
		require.NoError(t, <-closed)
		for i, tk := range tickets {
			require.NoError(t, tk.Wait(ctx), "ticket %d", i)
		}
		assert.Zero(t, o.Live())
		r := rec(1)
		defer r.Release()
		_, err := p.Write(ctx, "", r)
		assert.ErrorIs(t, err, pool.ErrClosed)
		assert.NoError(t, p.Close(ctx), "idempotent")
	})

	t.Run("bounded by ctx when acks stall", func(t *testing.T) {
		ctx := testCtx(t)
		o := ingestfake.NewOpener(ingestfake.Config{ManualAck: true})
		p := pool.New(o, table, ingestfake.TestSchema, fastConfig(2), nil)
		require.NoError(t, p.Connect(ctx))
		streams, tickets := bind(t, ctx, p, o)
		streams[0].AckAll() // stream 0 is durable, stream 1 never acks
		require.NoError(t, tickets[0].Wait(ctx))
		stalled := []*pool.Ticket{tickets[1]}
		for range 5 {
			stalled = append(stalled, write(t, ctx, p, keyFor(t, p, 1), 1))
		}

		closeCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := p.Close(closeCtx)
		require.Error(t, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(start), 10*time.Second)
		for i, tk := range stalled {
			select {
			case <-tk.Done():
			default:
				t.Fatalf("ticket %d still unsettled after Close", i)
			}
			err := tk.Wait(ctx)
			assert.ErrorIs(t, err, acklane.ErrClosed, "ticket %d: not durable, so nacked", i)
		}
		for _, s := range o.Streams() {
			require.NoError(t, s.WaitClosed(ctx))
		}
	})
}

// TestSoakPipelines is the anti-regression harness for the inline-wait trap,
// through the pool: 64 concurrent Write+Wait loops against streams with ack
// latency must keep several items pending per lane and coalesce them.
func TestSoakPipelines(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{AckLatency: 2 * time.Millisecond})
	obs := newObserver()
	p := pool.New(o, table, ingestfake.TestSchema, fastConfig(2), obs)
	require.NoError(t, p.Connect(ctx))

	const writers, perWriter, rows = 64, 25, 10
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range perWriter {
				r := rec(rows)
				tk, err := p.Write(ctx, "", r)
				r.Release()
				if !assert.NoError(t, err) {
					return
				}
				if !assert.NoError(t, tk.Wait(ctx)) {
					return
				}
			}
		})
	}
	wg.Wait()
	st := p.Stats()
	require.NoError(t, p.Close(ctx))

	var total, bursts int
	var maxPending int64
	var delivered uint64
	for i := range p.Size() {
		lane := obs.lane(i)
		lane.mu.Lock()
		for _, b := range lane.bursts {
			total += b
		}
		bursts += len(lane.bursts)
		maxPending = max(maxPending, lane.maxPending)
		lane.mu.Unlock()
		delivered += st.Members[i].Delivered
	}
	mean := float64(total) / float64(bursts)
	t.Logf("items=%d bursts=%d mean coalesce=%.1f max pending=%d", total, bursts, mean, maxPending)
	assert.Equal(t, writers*perWriter, total)
	assert.Greater(t, maxPending, int64(1), "pending never climbed: not pipelining")
	assert.Greater(t, mean, 1.0, "coalesce ratio 1: a wait per batch")
	assert.Equal(t, uint64(writers*perWriter*rows), delivered)
	assert.Equal(t, 2, o.Opens())
}

func TestWriteErrors(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{})
	p := pool.New(o, table, ingestfake.TestSchema, fastConfig(2), nil)
	require.NoError(t, p.Connect(ctx))

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	r := rec(1)
	defer r.Release()
	_, err := p.Write(cancelled, "", r)
	assert.ErrorIs(t, err, context.Canceled)

	other := ingestfake.NewRecord(arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.BinaryTypes.String}}, nil), 1)
	defer other.Release()
	_, err = p.Write(ctx, "", other)
	assert.ErrorIs(t, err, pool.ErrSchemaMismatch)

	require.NoError(t, p.Close(ctx))
	_, err = p.Write(ctx, "", r)
	assert.ErrorIs(t, err, pool.ErrClosed)
	assert.ErrorIs(t, p.Connect(ctx), pool.ErrClosed)
	assert.ErrorIs(t, p.Reopen(ctx, ingestfake.TestSchema), pool.ErrClosed)
	assert.True(t, errors.Is(err, pool.ErrClosed))
}

// TestStaleFatalDuringReopenIsNotFatal: while Reopen replaces members, an
// old-schema stream rejected by the service (FatalConfig) is rebuilt on the
// new schema instead of stopping the pool.
func TestStaleFatalDuringReopenIsNotFatal(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{ManualAck: true})
	p := pool.New(o, table, ingestfake.TestSchema, fastConfig(2), nil)
	defer closeNow(p)
	require.NoError(t, p.Connect(ctx))
	streams, tickets := bind(t, ctx, p, o)

	wider := arrow.NewSchema(append(ingestfake.TestSchema.Fields(),
		arrow.Field{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true}), nil)
	reopened := make(chan error, 1)
	go func() { reopened <- p.Reopen(ctx, wider) }()
	// Member 0 is draining for the Reopen: the pool is on the new schema.
	require.Eventually(t, func() bool { return !p.Stats().Members[0].Healthy }, 10*time.Second, time.Millisecond)

	streams[1].Poison(ingestfake.ErrFatalConfig("schema mismatch"))
	require.Error(t, tickets[1].Wait(ctx), "its rows were not durable")
	opened, err := o.WaitOpens(ctx, 3)
	require.NoError(t, err)
	assert.Same(t, wider, opened[2].Schema(), "rebuilt on the new schema")
	assert.NoError(t, p.Stats().Fatal, "a stale stream's rejection is not fatal")

	streams[0].AckAll()
	require.NoError(t, tickets[0].Wait(ctx), "drained, so confirmed")
	require.NoError(t, <-reopened)
	assert.NoError(t, p.Stats().Fatal)

	nr := ingestfake.NewRecord(wider, 1)
	defer nr.Release()
	tk, err := p.Write(ctx, "", nr)
	require.NoError(t, err)
	for _, s := range o.Streams() {
		if !s.Closed() {
			s.AckAll()
		}
	}
	require.NoError(t, tk.Wait(ctx))
}

// TestFirstMemberOpensAlone pins the probe: the other members open only once
// the first member's first attempt has finished, and a refusal that retrying
// can fix (transient) releases them all the same.
func TestFirstMemberOpensAlone(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{})
	o.FailNextOpens(ingestfake.ErrTransient("unavailable"))
	p := pool.New(o, table, ingestfake.TestSchema, fastConfig(3), nil)
	defer p.Close(ctx)

	require.NoError(t, p.Connect(ctx))
	require.Eventually(t, func() bool {
		for _, m := range p.Stats().Members {
			if !m.Healthy {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "every member opens after a transient refusal of the first")
	// The refused attempt was the first member's alone: three opens and
	// its one retry, not a refusal for every member.
	assert.Equal(t, 4, o.OpenAttempts())
	require.NoError(t, write(t, ctx, p, "", 1).Wait(ctx))
}

// AnyConnected, the write path's cheap outage check, agrees with Health: a
// member up and connected makes it true; a pool stopped (fatal) or closed
// has none.
func TestAnyConnectedAgreesWithHealth(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{ManualAck: true})
	p := pool.New(o, table, ingestfake.TestSchema, fastConfig(2), nil)
	defer closeNow(p)
	assert.False(t, p.AnyConnected(), "nothing opened yet")
	require.NoError(t, p.Connect(ctx))
	require.True(t, p.AnyConnected())
	streams, tickets := bind(t, ctx, p, o)
	for _, s := range streams {
		s.Poison(ingestfake.ErrFatalConfig("permission denied"))
	}
	for _, tk := range tickets {
		require.Error(t, tk.Wait(ctx))
	}
	require.Eventually(t, func() bool { return p.Stats().Fatal != nil }, 10*time.Second, time.Millisecond)
	assert.False(t, p.AnyConnected(), "a stopped pool")
	for _, mh := range p.Health().Members {
		assert.NotEqual(t, pool.StateUp, mh.State)
	}
	_ = p.Close(ctx) // reports the stopped streams' failure
	assert.False(t, p.AnyConnected(), "a closed pool")
}
