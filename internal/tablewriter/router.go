package tablewriter

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// DefaultMaxOpenTables bounds the writers a Router keeps open.
const DefaultMaxOpenTables = 64

// DescribedTTL is how long an evicted writer's description of its table
// stands in for a describe when the table is written again.
const DescribedTTL = time.Minute

type describedTable struct {
	ts *catalog.TableState
	at time.Time
}

// Router keeps one Writer per target table for an output whose table is
// chosen per message: each distinct table gets its own lazily opened writer
// (catalog reconcile, pool, lanes), at most MaxOpen of them, the least
// recently used one closed — drained first — to make room. A writer in use
// by a Write is never evicted: a Write for a table without a writer waits
// while MaxOpen writers are in use (a Write holds one writer at a time, so
// this never deadlocks), which keeps the bound strict.
type Router struct {
	newWriter    func(table string) *Writer
	max          int
	closeTimeout time.Duration
	log          *slog.Logger

	mu      sync.Mutex
	idle    *sync.Cond // signalled when a writer stops being in use
	inUse   int        // writers with refs > 0
	lru     *list.List // of *routed, most recently used at the front
	byTable map[string]*list.Element
	closed  bool
	// described keeps the tables evicted writers described, for their next
	// writer: reopening an evicted table costs no describe (Unity Catalog's
	// API is rate limited) within DescribedTTL.
	described map[string]describedTable
	closing   sync.WaitGroup // evicted writers still closing
	evicted   int64          // writers closed to make room
	opened    int64          // writers created
}

// routed is one table's writer in the Router.
type routed struct {
	table string
	w     *Writer
	refs  int // Writes in progress
}

// NewRouter returns a router that makes a table's writer with newWriter
// (unopened) the first time the table is written, keeps at most max open
// (DefaultMaxOpenTables when max <= 0), and drains an evicted writer within
// closeTimeout.
func NewRouter(newWriter func(table string) *Writer, max int, closeTimeout time.Duration, log *slog.Logger) *Router {
	if max <= 0 {
		max = DefaultMaxOpenTables
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Router{newWriter: newWriter, max: max, closeTimeout: closeTimeout, log: log,
		lru: list.New(), byTable: map[string]*list.Element{}, described: map[string]describedTable{}}
	r.idle = sync.NewCond(&r.mu)
	return r
}

// Write writes rows into table through its writer, opening it first when
// needed; keyOf may be nil. It is Writer.Write, plus the writer's Open.
func (r *Router) Write(ctx context.Context, table string, rows []Row, keyOf KeyFunc) ([]RowError, error) {
	e, err := r.acquire(table)
	if err != nil {
		return nil, err
	}
	defer r.release(e)
	if err := e.w.Open(ctx); err != nil {
		if errors.Is(err, ErrNotOpen) {
			return nil, fmt.Errorf("table %s: %w", table, err)
		}
		return nil, fmt.Errorf("table %s: %w: %w", table, ErrNotOpen, err)
	}
	return e.w.Write(ctx, rows, keyOf)
}

// acquire returns table's entry, creating it, marked in use and most
// recently used; it evicts the least recently used idle writers beyond the
// bound.
func (r *Router) acquire(table string) (*routed, error) {
	r.mu.Lock()
	var e *routed
	for {
		if r.closed {
			r.mu.Unlock()
			return nil, ErrClosed
		}
		if el, ok := r.byTable[table]; ok {
			r.lru.MoveToFront(el)
			e = el.Value.(*routed)
			break
		}
		if r.inUse < r.max {
			e = &routed{table: table, w: r.newWriter(table)}
			if d, ok := r.described[table]; ok {
				delete(r.described, table)
				if time.Since(d.at) < DescribedTTL {
					e.w.Seed(d.ts)
				}
			}
			r.byTable[table] = r.lru.PushFront(e)
			r.opened++
			break
		}
		r.idle.Wait()
	}
	if e.refs == 0 {
		r.inUse++
	}
	e.refs++
	victims := r.victimsLocked()
	r.mu.Unlock()
	r.closeInBackground(victims)
	return e, nil
}

// victimsLocked unlinks idle writers from the back of the list until the
// bound holds, and returns them to be closed outside the lock.
func (r *Router) victimsLocked() []*routed {
	var out []*routed
	for el := r.lru.Back(); el != nil && r.lru.Len() > r.max; {
		prev := el.Prev()
		if e := el.Value.(*routed); e.refs == 0 {
			r.lru.Remove(el)
			delete(r.byTable, e.table)
			if ts := e.w.Described(); ts != nil {
				r.rememberLocked(e.table, ts)
			}
			out = append(out, e)
			r.evicted++
		}
		el = prev
	}
	return out
}

// rememberLocked keeps ts for table's next writer, forgetting stale
// entries when the map grows past a few times the bound.
func (r *Router) rememberLocked(table string, ts *catalog.TableState) {
	now := time.Now()
	if len(r.described) >= 4*r.max {
		for t, d := range r.described {
			if now.Sub(d.at) >= DescribedTTL {
				delete(r.described, t)
			}
		}
	}
	if len(r.described) < 4*r.max {
		r.described[table] = describedTable{ts: ts, at: now}
	}
}

func (r *Router) release(e *routed) {
	r.mu.Lock()
	e.refs--
	if e.refs == 0 {
		r.inUse--
		r.idle.Broadcast()
	}
	victims := r.victimsLocked()
	r.mu.Unlock()
	r.closeInBackground(victims)
}

// closeInBackground drains and closes evicted writers off the write path
// (a stream's close waits for the service to end its call); Close waits
// for them. What a writer could not make durable in time was already failed
// back to its Write.
func (r *Router) closeInBackground(victims []*routed) {
	if len(victims) == 0 {
		return
	}
	r.closing.Add(1)
	go func() {
		defer r.closing.Done()
		r.closeAll(victims)
	}()
}

func (r *Router) closeAll(victims []*routed) {
	for _, e := range victims {
		ctx, cancel := context.WithTimeout(context.Background(), r.closeTimeout)
		if err := e.w.Close(ctx); err != nil {
			r.log.Warn(fmt.Sprintf("closing the writer of table %s (least recently used): %v", e.table, err))
		}
		cancel()
	}
}

// Reconnect opens every writer the router holds that is not open (Open is
// a no-op on the others) and returns the first failure: the output's
// Connect after its writes found every table not open. A writer closed
// meanwhile (evicted) is skipped.
func (r *Router) Reconnect(ctx context.Context) error {
	for _, w := range r.writers() {
		if err := w.Open(ctx); err != nil && !errors.Is(err, ErrClosed) {
			return fmt.Errorf("table %s: %w", w.cfg.Table, err)
		}
	}
	return nil
}

// writers returns the writers the router holds now, most recently used
// first, copied under its lock so that callers can work on them (open them,
// snapshot them) without holding it.
func (r *Router) writers() []*Writer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writersLocked()
}

// writersLocked is writers with r.mu held.
func (r *Router) writersLocked() []*Writer {
	ws := make([]*Writer, 0, r.lru.Len())
	for el := r.lru.Front(); el != nil; el = el.Next() {
		ws = append(ws, el.Value.(*routed).w)
	}
	return ws
}

// AllNotOpen reports whether every one of n rows failed because its table's
// writer is not open (its streams stopped, or it could not open): the whole
// routed output is as good as not connected.
func AllNotOpen(errs []RowError, n int) bool {
	if n == 0 || len(errs) != n {
		return false
	}
	for _, re := range errs {
		var te *TableError
		if !errors.As(re.Err, &te) || !errors.Is(te.Err, ErrNotOpen) {
			return false
		}
	}
	return true
}

// Stats counts the writers made and evicted so far, and those open now.
func (r *Router) Stats() (opened, evicted int64, open int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.opened, r.evicted, r.lru.Len()
}

// Close closes every writer within ctx.
func (r *Router) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.idle.Broadcast()
	all := r.writersLocked()
	r.lru.Init()
	clear(r.byTable)
	r.mu.Unlock()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, w := range all {
		wg.Go(func() { errs[i] = w.Close(ctx) })
	}
	wg.Wait()
	r.closing.Wait()
	return errors.Join(errs...)
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TableFunc returns the target table of row i of a batch.
type TableFunc func(i int) (string, error)

// TableColumn names the table in the row error of a row whose table could
// not be computed or is not a valid name.
const TableColumn = "table"

// WriteRouted writes each row of a batch into the table tableOf names: a
// batch spanning tables splits into one Write per table, run concurrently.
// A row whose table cannot be computed or is no valid name fails alone
// (column TableColumn); a table whose writer fails fails its rows alone,
// with a *TableError (retry them; they are no dead letters). Row errors carry indices into rows.
func (r *Router) WriteRouted(ctx context.Context, rows []Row, tableOf TableFunc, keyOf KeyFunc) []RowError {
	var errs []RowError
	groups := map[string][]int{}
	var order []string
	for i := range rows {
		table, err := tableOf(i)
		if err == nil {
			err = typemap.CheckTableName(table)
		}
		if err != nil {
			errs = append(errs, RowError{Index: i, Column: TableColumn, Err: err})
			continue
		}
		if _, ok := groups[table]; !ok {
			order = append(order, table)
		}
		groups[table] = append(groups[table], i)
	}
	// Tables whose writers are open go first, and at most MaxOpen tables
	// are written at once, so a batch spanning more tables than the bound
	// never holds more writers open than it.
	r.mu.Lock()
	slices.SortStableFunc(order, func(a, b string) int {
		_, oa := r.byTable[a]
		_, ob := r.byTable[b]
		return boolRank(ob) - boolRank(oa)
	})
	r.mu.Unlock()
	results := make([][]RowError, len(order))
	sem := make(chan struct{}, r.max)
	var wg sync.WaitGroup
	for g, table := range order {
		idx := groups[table]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			sub := make([]Row, len(idx))
			for k, i := range idx {
				sub[k] = rows[i]
			}
			var subKey KeyFunc
			if keyOf != nil {
				subKey = func(k int) (string, error) { return keyOf(idx[k]) }
			}
			rowErrs, err := r.Write(ctx, table, sub, subKey)
			if err != nil {
				te := &TableError{Table: table, Err: err}
				for _, i := range idx {
					results[g] = append(results[g], RowError{Index: i, Err: te})
				}
				return
			}
			for _, re := range rowErrs {
				re.Index = idx[re.Index]
				results[g] = append(results[g], re)
			}
		})
	}
	wg.Wait()
	for _, res := range results {
		errs = append(errs, res...)
	}
	slices.SortStableFunc(errs, func(a, b RowError) int { return a.Index - b.Index })
	return errs
}
