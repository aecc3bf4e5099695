package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

func newRouter(t *testing.T, max int, tables ...string) (*Router, *ingestfake.Opener, *catalogfake.Catalog) {
	t.Helper()
	cat := catalogfake.New()
	for _, tb := range tables {
		cat.Put(tb, "id BIGINT NOT NULL, msg STRING", nil)
	}
	opener := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true})
	r := NewRouter(func(table string) *Writer {
		return New(Config{Table: table, Pool: testPoolConfig()}, opener, cat, nil, nil)
	}, RouterConfig{MaxOpen: max, CloseTimeout: time.Second})
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r, opener, cat
}

// Rows go to the table their message names; a batch spanning tables is one
// write per table; a bad table name fails its row alone; beyond
// max_open_tables the least recently used writer is drained and closed.
func TestRouterSplitsByTableAndEvictsLeastRecentlyUsed(t *testing.T) {
	r, opener, _ := newRouter(t, 2, "c.s.a", "c.s.b", "c.s.c")
	batch := rows(`{"id":1}`, `{"id":2}`, `{"id":3}`, `{"id":4}`)
	tableOf := func(i int) (string, error) {
		return []string{"c.s.a", "c.s.b", "c.s.a", "c.s.bad name"}[i], nil
	}
	errs := r.WriteRouted(context.Background(), batch, tableOf, nil)
	require.Len(t, errs, 1)
	assert.Equal(t, 3, errs[0].Index)
	assert.Equal(t, TableColumn, errs[0].Column)
	perTable := map[string]int64{}
	for _, s := range opener.Streams() {
		for _, rec := range s.Records() {
			perTable[s.Table()] += rec.NumRows()
		}
	}
	assert.Equal(t, map[string]int64{"c.s.a": 2, "c.s.b": 1}, perTable)

	// Write a again so b is the least recently used; a third table then
	// evicts b.
	require.Empty(t, r.WriteRouted(context.Background(), rows(`{"id":5}`), func(int) (string, error) { return "c.s.a", nil }, nil))
	require.Empty(t, r.WriteRouted(context.Background(), rows(`{"id":6}`), func(int) (string, error) { return "c.s.c", nil }, nil))
	opened, evicted, open := r.Stats()
	assert.Equal(t, int64(3), opened)
	assert.Equal(t, int64(1), evicted)
	assert.Equal(t, 2, open)
	// Evicted writers close in the background.
	require.Eventually(t, func() bool {
		for _, s := range opener.Streams() {
			if s.Table() == "c.s.b" && !s.Closed() {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "b's streams are closed")
	for _, s := range opener.Streams() {
		if s.Table() != "c.s.b" {
			assert.False(t, s.Closed(), "only b's streams are closed (%s)", s.Table())
		}
	}
}

// A table whose writer cannot open fails its own rows with a TableError
// (retried, never dead-lettered); the other tables' rows land.
func TestRouterTableFailureFailsOnlyItsRows(t *testing.T) {
	r, opener, _ := newRouter(t, 4, "c.s.a") // c.s.missing does not exist
	errs := r.WriteRouted(context.Background(), rows(`{"id":1}`, `{"id":2}`), func(i int) (string, error) {
		return []string{"c.s.a", "c.s.missing"}[i], nil
	}, nil)
	require.Len(t, errs, 1)
	assert.Equal(t, 1, errs[0].Index)
	var te *TableError
	require.True(t, errors.As(errs[0].Err, &te))
	assert.Equal(t, "c.s.missing", te.Table)
	assert.Contains(t, errs[0].Err.Error(), "does not exist")
	var n int64
	for _, s := range opener.Streams() {
		for _, rec := range s.Records() {
			n += rec.NumRows()
		}
	}
	assert.Equal(t, int64(1), n)
}

// Many tables written concurrently through a small bound: every row lands
// exactly once, and writers in use are never evicted under a Write.
func TestRouterConcurrentManyTables(t *testing.T) {
	var tables []string
	for i := range 12 {
		tables = append(tables, fmt.Sprintf("c.s.t%d", i))
	}
	r, opener, _ := newRouter(t, 3, tables...)
	errs := make(chan []RowError, 60)
	for k := range 60 {
		go func() {
			errs <- r.WriteRouted(context.Background(), rows(fmt.Sprintf(`{"id":%d}`, k)), func(int) (string, error) { return tables[k%len(tables)], nil }, nil)
		}()
	}
	for range 60 {
		assert.Empty(t, <-errs)
	}
	var n int64
	for _, s := range opener.Streams() {
		for _, rec := range s.Records() {
			n += rec.NumRows()
		}
	}
	assert.Equal(t, int64(60), n)
	_, _, open := r.Stats()
	assert.LessOrEqual(t, open, 3)
}

// to routes every row of a batch to table.
func to(table string) TableFunc { return func(int) (string, error) { return table, nil } }

// recordedRows counts the rows every stream of opener received, by table.
func recordedRows(opener *ingestfake.Opener) map[string]int64 {
	out := map[string]int64{}
	for _, s := range opener.Streams() {
		for _, rec := range s.Records() {
			out[s.Table()] += rec.NumRows()
		}
	}
	return out
}

// The victim is the writer idle longest, by the end of its last Write, not
// the one opened or acquired first: a writer whose long Write ends last is
// kept over one that finished earlier.
func TestRouterEvictsTheWriterIdleLongest(t *testing.T) {
	r, opener, _ := newRouter(t, 2, "c.s.a", "c.s.b", "c.s.c")
	ctx := context.Background()
	// a is acquired first and held (a long Write) while b is written and
	// released; a's use ends after b's.
	a, err := r.acquire(ctx, "c.s.a")
	require.NoError(t, err)
	require.Empty(t, r.WriteRouted(ctx, rows(`{"id":1}`), to("c.s.b"), nil))
	_, err = r.writeOn(ctx, a, rows(`{"id":2}`), nil)
	require.NoError(t, err)

	require.Empty(t, r.WriteRouted(ctx, rows(`{"id":3}`), to("c.s.c"), nil))
	r.mu.Lock()
	_, aOpen := r.byTable["c.s.a"]
	_, bOpen := r.byTable["c.s.b"]
	r.mu.Unlock()
	assert.True(t, aOpen, "a was used last: kept")
	assert.False(t, bOpen, "b was idle longest: evicted")
	assert.Equal(t, map[string]int64{"c.s.a": 1, "c.s.b": 1, "c.s.c": 1}, recordedRows(opener))
}

// A writer in use is never evicted: a table beyond the bound waits until a
// writer is released and has closed (evicted writers count against the
// bound while they close), and the streams open never exceed the bound ×
// the pool's size.
func TestRouterWaitsForRoomAndCountsClosingWriters(t *testing.T) {
	r, opener, _ := newRouter(t, 2, "c.s.a", "c.s.b", "c.s.c")
	ctx := context.Background()
	a, err := r.acquire(ctx, "c.s.a")
	require.NoError(t, err)
	b, err := r.acquire(ctx, "c.s.b")
	require.NoError(t, err)
	for _, e := range []*routed{a, b} {
		require.NoError(t, e.w.Open(ctx))
	}
	done := make(chan []RowError, 1)
	go func() { done <- r.WriteRouted(ctx, rows(`{"id":1}`), to("c.s.c"), nil) }()
	select {
	case errs := <-done:
		t.Fatalf("c was written while both writers were in use: %v", errs)
	case <-time.After(200 * time.Millisecond):
	}
	_, _, open := r.Stats()
	assert.Equal(t, 2, open)

	r.release(a) // a is now idle: evicted for c, closed, then c opens
	select {
	case errs := <-done:
		assert.Empty(t, errs)
	case <-time.After(10 * time.Second):
		t.Fatal("c was never written after a was released")
	}
	for _, s := range opener.Streams() {
		if s.Table() == "c.s.a" {
			assert.True(t, s.Closed(), "a's streams closed before c's opened")
		}
	}
	r.release(b)
	assert.LessOrEqual(t, opener.MaxLive(), 2*testPoolConfig().MaxStreams, "never more than max_open_tables writers' streams")
	opened, evicted, open := r.Stats()
	assert.Equal(t, int64(3), opened)
	assert.Equal(t, int64(1), evicted)
	assert.Equal(t, 2, open)
}

// The Writes of many batches waiting for one table share the one writer
// made for it, and go as one Write: one open and one request, not one of
// each per batch.
func TestRouterWaitersShareOneWriter(t *testing.T) {
	r, opener, _ := newRouter(t, 1, "c.s.a", "c.s.b")
	const batches = 8
	release, done := batchesInLine(t, r, "c.s.a", "c.s.b", batches)
	release()
	for range batches {
		assert.Empty(t, <-done)
	}
	opened, evicted, _ := r.Stats()
	assert.Equal(t, int64(2), opened, "a, then one writer for b shared by the %d batches", batches)
	assert.Equal(t, int64(1), evicted)
	assert.Equal(t, int64(batches), recordedRows(opener)["c.s.b"])
	var records int
	for _, s := range opener.Streams() {
		if s.Table() == "c.s.b" {
			records += len(s.Records())
		}
	}
	assert.LessOrEqual(t, records, testPoolConfig().MaxStreams, "one Write, split at most over the pool's streams")
}

// Shared writes keep each batch's outcome its own: a row that fails fails
// in its own batch, at its own index; a waiting batch whose ctx ends
// leaves the line and the others still land.
func TestRouterSharedWritesSplitTheOutcome(t *testing.T) {
	r, opener, _ := newRouter(t, 1, "c.s.a", "c.s.b")
	ctx := context.Background()
	a, err := r.acquire(ctx, "c.s.a")
	require.NoError(t, err)
	good := make(chan []RowError, 1)
	go func() { good <- r.WriteRouted(ctx, rows(`{"id":1}`, `{"id":2}`), to("c.s.b"), nil) }()
	bad := make(chan []RowError, 1)
	go func() { bad <- r.WriteRouted(ctx, rows(`{"id":3}`, `{"id":"four"}`), to("c.s.b"), nil) }()
	gone, cancel := context.WithCancel(ctx)
	left := make(chan []RowError, 1)
	go func() { left <- r.WriteRouted(gone, rows(`{"id":5}`), to("c.s.b"), nil) }()
	require.Eventually(t, sharedWaiting(r, "c.s.b", 3), 10*time.Second, time.Millisecond)
	cancel()
	errs := <-left
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0].Err, context.Canceled)
	require.Eventually(t, sharedWaiting(r, "c.s.b", 2), 10*time.Second, time.Millisecond)

	r.release(a)
	assert.Empty(t, <-good)
	errs = <-bad
	require.Len(t, errs, 1)
	assert.Equal(t, 1, errs[0].Index, "the bad row's index in its own batch")
	assert.Equal(t, "id", errs[0].Column)
	assert.Equal(t, int64(3), recordedRows(opener)["c.s.b"], "1, 2 and 3; not 5")
}

// A Write waiting for room gives up when its ctx ends, and leaves the line.
func TestRouterWaitEndsWithTheContext(t *testing.T) {
	r, _, _ := newRouter(t, 1, "c.s.a", "c.s.b")
	a, err := r.acquire(context.Background(), "c.s.a")
	require.NoError(t, err)
	defer r.release(a)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	errs := r.WriteRouted(ctx, rows(`{"id":1}`), to("c.s.b"), nil)
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0].Err, context.DeadlineExceeded)
	r.mu.Lock()
	defer r.mu.Unlock()
	assert.Zero(t, r.waiting.Len(), "nothing left waiting")
}

// A batch spanning more tables than the bound, many such batches at once:
// every row lands exactly once, the streams open never exceed the bound,
// and the tables of a batch that are open are not evicted under it.
func TestRouterManyTablesFewOpen(t *testing.T) {
	var tables []string
	for i := range 40 {
		tables = append(tables, fmt.Sprintf("c.s.t%d", i))
	}
	r, opener, _ := newRouter(t, 4, tables...)
	const batches, perBatch = 12, 100
	errs := make(chan []RowError, batches)
	for k := range batches {
		go func() {
			var bodies []string
			for i := range perBatch {
				bodies = append(bodies, fmt.Sprintf(`{"id":%d}`, k*perBatch+i))
			}
			errs <- r.WriteRouted(context.Background(), rows(bodies...), func(i int) (string, error) {
				return tables[(k*perBatch+i)%len(tables)], nil
			}, nil)
		}()
	}
	for range batches {
		assert.Empty(t, <-errs)
	}
	ids := map[string]map[int64]int{}
	for _, s := range opener.Streams() {
		for _, rec := range s.Records() {
			col := rec.Column(int(rec.Schema().FieldIndices("id")[0]))
			for i := range int(rec.NumRows()) {
				id := col.GetOneForMarshal(i)
				if ids[s.Table()] == nil {
					ids[s.Table()] = map[int64]int{}
				}
				ids[s.Table()][id.(int64)]++
			}
		}
	}
	total := 0
	for table, byID := range ids {
		for id, n := range byID {
			assert.Equal(t, 1, n, "row %d of %s landed once", id, table)
			assert.Equal(t, table, tables[int(id)%len(tables)], "row %d is in its table", id)
			total++
		}
	}
	assert.Equal(t, batches*perBatch, total)
	assert.LessOrEqual(t, opener.MaxLive(), 4*testPoolConfig().MaxStreams)
	_, evicted, open := r.Stats()
	assert.Positive(t, evicted)
	assert.LessOrEqual(t, open, 4)
}

// Shared writes keep each batch's ordering keys: a key that cannot be
// computed fails its row alone, at its index in its own batch.
func TestRouterSharedWritesKeepTheirKeys(t *testing.T) {
	r, opener, _ := newRouter(t, 1, "c.s.a", "c.s.b")
	ctx := context.Background()
	a, err := r.acquire(ctx, "c.s.a")
	require.NoError(t, err)
	first := make(chan []RowError, 1)
	go func() {
		first <- r.WriteRouted(ctx, rows(`{"id":1}`, `{"id":2}`), to("c.s.b"), func(int) (string, error) { return "k", nil })
	}()
	second := make(chan []RowError, 1)
	go func() {
		second <- r.WriteRouted(ctx, rows(`{"id":3}`, `{"id":4}`), to("c.s.b"), func(i int) (string, error) {
			if i == 1 {
				return "", errors.New("no key")
			}
			return "k", nil
		})
	}()
	require.Eventually(t, sharedWaiting(r, "c.s.b", 2), 10*time.Second, time.Millisecond)
	r.release(a)
	assert.Empty(t, <-first)
	errs := <-second
	require.Len(t, errs, 1)
	assert.Equal(t, 1, errs[0].Index)
	assert.Equal(t, OrderingKeyColumn, errs[0].Column)
	assert.Equal(t, int64(3), recordedRows(opener)["c.s.b"])
}

// sharedWaiting reports whether n batches' writes wait in line for table.
func sharedWaiting(r *Router, table string, n int) func() bool {
	return func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		el, ok := r.waitingBy[table]
		return ok && len(el.Value.(*waitingTable).subs) == n
	}
}

// refusingCatalog is the fake catalog, failing every reconcile that would
// add column: a change of the table one batch's rows ask for failing (the
// warehouse refused the statement).
type refusingCatalog struct {
	*catalogfake.Catalog
	column string
}

func (c refusingCatalog) Reconcile(ctx context.Context, d catalog.DesiredTable) (catalog.ReconcileOutcome, error) {
	for _, col := range d.Columns {
		if col.Name == c.column {
			return catalog.ReconcileOutcome{}, fmt.Errorf("add column %s: the warehouse refused the statement", c.column)
		}
	}
	return c.Catalog.Reconcile(ctx, d)
}

// Batches waiting for one table go as one Write; when that Write fails as
// a whole for one batch's own reason (its new field's column cannot be
// added), only that batch fails: the others are written again alone and
// land, each with its own outcome. Nothing is written twice.
func TestRouterSharedWriteFailureFailsOnlyItsBatch(t *testing.T) {
	cat := catalogfake.New()
	cat.Put("c.s.a", "id BIGINT NOT NULL, msg STRING", nil)
	cat.Put("c.s.b", "id BIGINT NOT NULL, msg STRING", nil)
	opener := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true})
	refusing := refusingCatalog{Catalog: cat, column: "bad"}
	r := NewRouter(func(table string) *Writer {
		return New(Config{Table: table, Pool: testPoolConfig(), Provision: true}, opener, refusing, nil, nil)
	}, RouterConfig{MaxOpen: 1, CloseTimeout: time.Second})
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	ctx := context.Background()
	a, err := r.acquire(ctx, "c.s.a")
	require.NoError(t, err)
	first := make(chan []RowError, 1)
	go func() { first <- r.WriteRouted(ctx, rows(`{"id":1}`, `{"id":2}`), to("c.s.b"), nil) }()
	require.Eventually(t, sharedWaiting(r, "c.s.b", 1), 10*time.Second, time.Millisecond)
	poisoned := make(chan []RowError, 1)
	go func() { poisoned <- r.WriteRouted(ctx, rows(`{"id":3,"bad":1}`), to("c.s.b"), nil) }()
	last := make(chan []RowError, 1)
	require.Eventually(t, sharedWaiting(r, "c.s.b", 2), 10*time.Second, time.Millisecond)
	go func() { last <- r.WriteRouted(ctx, rows(`{"id":4}`), to("c.s.b"), nil) }()
	require.Eventually(t, sharedWaiting(r, "c.s.b", 3), 10*time.Second, time.Millisecond, "three batches wait to go as one write")

	r.release(a)
	assert.Empty(t, <-first, "the first batch lands")
	assert.Empty(t, <-last, "the last batch lands")
	errs := <-poisoned
	require.Len(t, errs, 1, "the batch asking for the refused column fails, alone")
	assert.Equal(t, 0, errs[0].Index)
	var te *TableError
	require.ErrorAs(t, errs[0].Err, &te, "a table failure: retried, not dead-lettered")
	assert.Contains(t, errs[0].Err.Error(), "the warehouse refused the statement")
	assert.Equal(t, int64(3), recordedRows(opener)["c.s.b"], "rows 1, 2 and 4, each once")
}

// A merged write that fails for a reason every batch in it would meet
// alone (the table's writer cannot open) fails each batch with it, without
// trying each again.
func TestRouterSharedWriteNotOpenFailsEveryBatch(t *testing.T) {
	r, opener, cat := newRouter(t, 1, "c.s.a") // c.s.missing does not exist
	const batches = 3
	release, done := batchesInLine(t, r, "c.s.a", "c.s.missing", batches)
	describes := cat.Describes()
	release()
	for range batches {
		errs := <-done
		require.Len(t, errs, 1)
		assert.ErrorIs(t, errs[0].Err, ErrNotOpen)
		assert.Contains(t, errs[0].Err.Error(), "does not exist")
	}
	assert.Equal(t, describes+1, cat.Describes(), "one open for the merged write, none per batch")
	assert.Zero(t, recordedRows(opener)["c.s.missing"])
}

// batchesInLine holds held's writer (the router's only room) and starts n
// one-row batches to table, returning once all n wait in line for it; the
// batches' outcomes come on done once release gives the room back.
func batchesInLine(t *testing.T, r *Router, held, table string, n int) (release func(), done <-chan []RowError) {
	t.Helper()
	ctx := context.Background()
	a, err := r.acquire(ctx, held)
	require.NoError(t, err)
	out := make(chan []RowError, n)
	for k := range n {
		go func() { out <- r.WriteRouted(ctx, rows(fmt.Sprintf(`{"id":%d}`, k)), to(table), nil) }()
	}
	require.Eventually(t, sharedWaiting(r, table, n), 10*time.Second, time.Millisecond, "every batch waits for %s", table)
	return func() { r.release(a) }, out
}
