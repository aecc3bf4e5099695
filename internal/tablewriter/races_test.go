package tablewriter

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/coverage"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// A reopen on a new schema that does not finish (its ctx ends while a
// stream drains rows not yet acknowledged) leaves the pool switched in part:
// no snapshot of the writer matches it. The writer stops those streams, so
// the next Open describes the table afresh and opens new ones, instead of
// failing every later batch on a schema mismatch.
func TestReopenCutShortStopsTheStreams(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true}, provisionCfg, nil)

	// B is submitted on v1 and never acknowledged: a reopen must drain it.
	bDone := writeUnacknowledged(t, h)

	// A carries a new field: the table evolves and the pool reopens, but
	// A's ctx ends while B's stream drains.
	actx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := h.w.Write(actx, rows(`{"id":2,"msg":"a","region":"eu"}`), nil)
	cancel()
	require.Error(t, err, "A's reopen was cut short")

	// From now on streams acknowledge by themselves; free B.
	h.opener.SetConfig(ingestfake.Config{})
	for _, s := range h.opener.Streams() {
		s.AckAll()
	}
	select {
	case <-bDone:
	case <-time.After(10 * time.Second):
		t.Fatal("B never settled")
	}

	// C, on the table's old columns, lands (after at most one Open).
	var rowErrs []RowError
	for attempt := 0; attempt < 3; attempt++ {
		rowErrs, err = h.w.Write(context.Background(), rows(`{"id":3,"msg":"c"}`), nil)
		if !errors.Is(err, ErrNotOpen) {
			break
		}
		skipWait(h.w)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		oerr := h.w.Open(ctx)
		cancel()
		require.NoError(t, oerr)
	}
	require.NoError(t, err, "a batch after the cut-short reopen is written")
	assert.Empty(t, rowErrs)
	assert.True(t, h.w.snapshot().has("region"), "the writer writes on the evolved table")
}

// sentHook is an Observer whose Sent (called once a part is confirmed
// durable, just before its coverage is recorded) runs hook first.
type sentHook struct {
	nopObserver
	hook func()
}

func (s sentHook) Sent(int, int64, int64) { s.hook() }

// Rows that Close's drain confirms durable have their coverage in the
// final flush: Close lets the writes it drained record it before the
// recorder closes, instead of dropping it (coverage lagging rows that were
// acknowledged, to be replayed again).
func TestCloseFinalFlushHasTheCoverageOfDrainedWrites(t *testing.T) {
	cat := catalogfake.New()
	cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	c := Config{Table: testTable, WriterID: "test", Pool: testPoolConfig()}
	coverageOn(&c)
	opener := ingestfake.NewOpener(ingestfake.Config{ManualAck: true, KeepRecords: true})
	closed := make(chan struct{})
	obs := sentHook{hook: func() {
		// Slow to record, as a goroutine the scheduler left behind: the
		// Close in progress either waits for it or has finished.
		select {
		case <-closed:
		case <-time.After(time.Second):
		}
	}}
	w := New(c, opener, cat, nil, obs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, w.Open(ctx))
	// The coverage stream, opened at the first flush, acknowledges by itself.
	opener.SetConfig(ingestfake.Config{KeepRecords: true})

	written := make(chan error, 1)
	go func() {
		rowErrs, err := w.Write(ctx, covRows("t/0", 0, 10), nil)
		if err == nil && len(rowErrs) > 0 {
			err = rowErrs[0]
		}
		written <- err
	}()
	rawStreams := func() []*ingestfake.Stream {
		var out []*ingestfake.Stream
		for _, s := range opener.Streams() {
			if s.Table() == testTable {
				out = append(out, s)
			}
		}
		return out
	}
	require.Eventually(t, func() bool {
		var n uint64
		for _, s := range rawStreams() {
			n += s.Submitted()
		}
		return n == 10
	}, 10*time.Second, time.Millisecond, "the batch is submitted")

	closeErr := make(chan error, 1)
	go func() {
		closeErr <- w.Close(ctx)
		close(closed)
	}()
	require.Eventually(t, func() bool { return w.Phase() == PhaseDraining }, 10*time.Second, time.Millisecond)
	for _, s := range rawStreams() {
		s.AckAll() // the drain confirms the batch
	}
	require.NoError(t, <-written, "the batch is durable")
	require.NoError(t, <-closeErr)

	cov := coverageSets(t, opener, "")
	require.NotNil(t, cov["t/0"], "the final flush wrote the batch's coverage")
	assert.Equal(t, []coverage.Range{{Start: 0, End: 10}}, cov["t/0"].Ranges())
}

// A table evicted by the router and written to again within DescribedTTL
// is opened on the description its previous writer handed over: no second
// describe, and the columns that writer evolved the table to.
func TestRouterSeedSkipsTheSecondDescribe(t *testing.T) {
	cat := catalogfake.New()
	for _, tb := range []string{"c.s.a", "c.s.b"} {
		cat.Put(tb, "id BIGINT NOT NULL, msg STRING", nil)
	}
	opener := ingestfake.NewOpener(ingestfake.Config{})
	r := NewRouter(func(table string) *Writer {
		return New(Config{Table: table, Provision: true, Pool: testPoolConfig()}, opener, cat, nil, nil)
	}, RouterConfig{MaxOpen: 1, CloseTimeout: time.Second})
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	to := func(table string) TableFunc { return func(int) (string, error) { return table, nil } }
	ctx := context.Background()

	// a evolves (a column added), then b evicts it.
	require.Empty(t, r.WriteRouted(ctx, rows(`{"id":1,"region":"eu"}`), to("c.s.a"), nil))
	require.Empty(t, r.WriteRouted(ctx, rows(`{"id":2}`), to("c.s.b"), nil))
	describes := cat.Describes()

	require.Empty(t, r.WriteRouted(ctx, rows(`{"id":3,"region":"us"}`), to("c.s.a"), nil))
	assert.Equal(t, describes, cat.Describes(), "a's new writer opened on the handed-over description")
	var cols []string
	for _, w := range r.writers() {
		for _, c := range w.Columns() {
			cols = append(cols, c.Name)
		}
	}
	assert.Contains(t, cols, "region", "the seed carries the evolved columns")
}

// Close racing the creation of the table from a first batch (coverage on):
// whichever comes first, once both return no stream is left open, the
// batch is acknowledged only if durable, and the coverage recorder and writer are gone.
func TestCloseRacingCreateFromBatchLeavesNothingOpen(t *testing.T) {
	cat := catalogfake.New() // the table does not exist
	c := Config{Table: testTable, WriterID: "test", Pool: testPoolConfig()}
	coverageOn(&c)
	opener := ingestfake.NewOpener(ingestfake.Config{})
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	opener.SetOpenHook(func(ctx context.Context, _ int, table string, _ *arrow.Schema) error {
		if table != testTable {
			return nil
		}
		once.Do(func() { close(entered) })
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	w := New(c, opener, cat, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, w.Open(ctx))
	require.Equal(t, PhaseWaitingForTable, w.Phase())

	written := make(chan error, 1)
	go func() {
		_, err := w.Write(ctx, covRows("t/0", 0, 3), nil)
		written <- err
	}()
	select {
	case <-entered: // the table is created; its first stream is opening
	case <-time.After(10 * time.Second):
		t.Fatal("the first batch never opened a stream")
	}
	closed := make(chan error, 1)
	go func() { closed <- w.Close(ctx) }()
	close(release)

	werr := <-written
	<-closed
	if werr == nil {
		// It got in before the drain: then it is durable.
		var durable uint64
		for _, s := range opener.Streams() {
			if s.Table() == testTable {
				durable += s.Durable()
			}
		}
		assert.EqualValues(t, 3, durable, "a batch acknowledged while racing Close is durable")
	}
	assert.Equal(t, PhaseClosed, w.Phase())
	assert.Zero(t, opener.Live(), "no stream left open")
	assert.Nil(t, w.Coverage())
	assert.Nil(t, w.CoverageWriter())
}

// Close is bounded by its ctx even while a change of the table holds the
// schema authority's lock and cannot finish (here a reopen draining a
// stream whose rows are never acknowledged, for a write whose own ctx never
// ends): the change is cut short when Close's ctx ends.
func TestCloseIsBoundedWhileASchemaChangeIsStuck(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true}, provisionCfg, nil)
	bDone := writeUnacknowledged(t, h)

	reconciles := h.cat.ReconcileCount()
	aDone := make(chan error, 1)
	go func() {
		_, err := h.w.Write(context.Background(), rows(`{"id":2,"msg":"a","region":"eu"}`), nil)
		aDone <- err
	}()
	// A evolved the table and, holding the authority's lock, reopens the
	// streams: the drain waits for B's ack, which never comes.
	require.Eventually(t, func() bool { return h.cat.ReconcileCount() > reconciles }, 10*time.Second, 5*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- h.w.Close(ctx) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		for _, s := range h.opener.Streams() {
			s.AckAll() // unwind
		}
		t.Fatal("Close waited past its ctx for the schema change")
	}
	for _, done := range []chan error{aDone, bDone} {
		select {
		case err := <-done:
			assert.Error(t, err, "nothing was acknowledged")
		case <-time.After(10 * time.Second):
			t.Fatal("a write never returned after Close")
		}
	}
	assert.Equal(t, PhaseClosed, h.w.Phase())
}

// writeUnacknowledged starts writing one row (B) that the streams never
// acknowledge (ManualAck) and returns once it is submitted; the channel
// receives its Write's result.
func writeUnacknowledged(t *testing.T, h *harness) chan error {
	t.Helper()
	bDone := make(chan error, 1)
	go func() {
		_, err := h.w.Write(context.Background(), rows(`{"id":1,"msg":"b"}`), nil)
		bDone <- err
	}()
	require.Eventually(t, func() bool {
		var n uint64
		for _, s := range h.opener.Streams() {
			n += s.Submitted()
		}
		return n > 0
	}, 10*time.Second, 5*time.Millisecond, "B submitted")
	return bDone
}
