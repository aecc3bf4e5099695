package tablewriter

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// DefaultMaxOpenTables bounds the writers a Router keeps open.
const DefaultMaxOpenTables = 64

// DescribedTTL is how long an evicted writer's description of its table
// stands in for a describe when the table is written again.
const DescribedTTL = time.Minute

// describedMin is the least number of descriptions the router keeps for
// evicted tables (at least 4 × max_open_tables): enough for the tables a
// thrashing router cycles through, so that reopening one costs no describe.
// One is a table's columns and properties: a few KiB at most.
const describedMin = 1024

type describedTable struct {
	ts *catalog.TableState
	at time.Time
}

// Router keeps one Writer per target table for an output whose table is
// chosen per message: each distinct table gets its own lazily opened writer
// (catalog reconcile, pool, lanes).
//
// The bound: at most max writers hold streams at any moment, counting the
// evicted ones still closing; a table's new writer is made only once an
// evicted one has finished closing. The writers in use by a Write are never
// evicted; the victim is the idle writer whose last Write ended longest ago
// (least recently used). Tables waiting for a writer are served first come,
// first served, and the rows of every batch waiting for the same table are
// written as one Write through the one writer made for it: with many
// batches in flight, a table's rows of all of them cost one open and one
// request instead of one of each per batch. A Write holds one writer at a
// time, so waiting never deadlocks.
type Router struct {
	newWriter    func(table string) *Writer
	max          int
	closeTimeout time.Duration
	log          *slog.Logger
	evictions    Counter
	thrash       *thrashWatch

	mu sync.Mutex
	// byTable holds the writers open now, in use or idle.
	byTable map[string]*routed
	// idle holds the writers no Write uses, the most recently released at
	// the front: the victims are taken from the back.
	idle *list.List
	// waiting holds the tables waiting for a writer, oldest first.
	waiting   *list.List
	waitingBy map[string]*list.Element
	// closingN counts the evicted writers still closing: they still hold
	// streams, so they count against max.
	closingN int
	closed   bool
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
	table  string
	w      *Writer
	refs   int           // Writes using it
	idleAt *list.Element // its place in Router.idle while refs == 0
}

// waitingTable is a table waiting for a writer: the callers of acquire
// and the shared writes waiting, and the writer granted to all of them at
// once.
type waitingTable struct {
	table string
	n     int            // acquire callers waiting
	subs  []*sharedWrite // writes to make as one, the first one leading
	e     *routed        // granted; nil while waiting or when the router closed
	// settled is set, under the router's lock, once the table got its
	// writer or the router closed: the waiters are then fixed.
	settled bool
	ready   chan struct{}
}

// sharedWrite is one batch's rows for a table, waiting for the table's
// writer with those of other batches: once the writer is granted, the
// leading one writes the rows of all in one Writer.Write (one request and
// one commit instead of one each) and hands each its share of the outcome.
type sharedWrite struct {
	ctx   context.Context
	rows  []Row
	keyOf KeyFunc
	lead  chan struct{} // closed when it leads
	done  chan struct{} // closed once errs and err are set
	errs  []RowError
	err   error
}

// RouterConfig is what a Router needs besides how to make a writer.
type RouterConfig struct {
	// MaxOpen bounds the writers holding streams (DefaultMaxOpenTables when
	// <= 0).
	MaxOpen int
	// CloseTimeout bounds the drain and close of an evicted writer.
	CloseTimeout time.Duration
	// Log receives the eviction-rate warning and the close failures; nil:
	// none.
	Log *slog.Logger
	// Evictions counts the writers evicted (zerobus_table_evictions_total);
	// nil: not counted.
	Evictions Counter
	// now is the thrash watch's clock (tests); nil: time.Now.
	now func() time.Time
}

// NewRouter returns a router that makes a table's writer with newWriter
// (unopened) the first time the table is written.
func NewRouter(newWriter func(table string) *Writer, cfg RouterConfig) *Router {
	if cfg.MaxOpen <= 0 {
		cfg.MaxOpen = DefaultMaxOpenTables
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Router{newWriter: newWriter, max: cfg.MaxOpen, closeTimeout: cfg.CloseTimeout, log: cfg.Log,
		evictions: cfg.Evictions, thrash: newThrashWatch(cfg.MaxOpen, cfg.now),
		byTable: map[string]*routed{}, idle: list.New(), waiting: list.New(), waitingBy: map[string]*list.Element{},
		described: map[string]describedTable{}}
}

// Write writes rows into table through its writer, opening it first when
// needed; keyOf may be nil. It is Writer.Write, plus the writer's Open.
func (r *Router) Write(ctx context.Context, table string, rows []Row, keyOf KeyFunc) ([]RowError, error) {
	r.thrash.wrote(table)
	return r.writeShared(ctx, table, rows, keyOf)
}

// writeOn writes rows through e, which the caller acquired, and releases
// it.
func (r *Router) writeOn(ctx context.Context, e *routed, rows []Row, keyOf KeyFunc) ([]RowError, error) {
	defer r.release(e)
	return r.writeHeld(ctx, e, rows, keyOf)
}

// writeHeld writes rows through e, which the caller holds, opening it
// first when needed.
func (r *Router) writeHeld(ctx context.Context, e *routed, rows []Row, keyOf KeyFunc) ([]RowError, error) {
	if err := e.w.Open(ctx); err != nil {
		if errors.Is(err, ErrNotOpen) {
			return nil, fmt.Errorf("table %s: %w", e.table, err)
		}
		return nil, fmt.Errorf("table %s: %w: %w", e.table, ErrNotOpen, err)
	}
	return e.w.Write(ctx, rows, keyOf)
}

// acquire returns table's writer, in use by the caller (release it): the
// open one, a new one when there is room, or, once the tables that waited
// longer have theirs, the one made for it when an evicted writer has
// closed. It waits under ctx.
func (r *Router) acquire(ctx context.Context, table string) (*routed, error) {
	e, el, err := r.openOrLine(table)
	if e != nil || err != nil {
		return e, err
	}
	wt := el.Value.(*waitingTable)
	wt.n++
	victims := r.grantLocked()
	r.mu.Unlock()
	r.closeInBackground(victims)

	select {
	case <-wt.ready:
	case <-ctx.Done():
		r.mu.Lock()
		select {
		case <-wt.ready: // granted (or closed) meanwhile: take it
			r.mu.Unlock()
		default:
			wt.n--
			r.leaveLocked(el)
			r.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	if wt.e == nil {
		return nil, ErrClosed
	}
	return wt.e, nil
}

// leaveLocked takes the table of el out of the line once nobody waits for
// it.
func (r *Router) leaveLocked(el *list.Element) {
	wt := el.Value.(*waitingTable)
	if wt.n == 0 && len(wt.subs) == 0 {
		r.waiting.Remove(el)
		delete(r.waitingBy, wt.table)
	}
}

// openOrLine returns table's open writer, in use by the caller; or, with
// r.mu still held, table's place in the line of tables waiting (made when
// absent), for the caller to join and unlock; or ErrClosed.
func (r *Router) openOrLine(table string) (*routed, *list.Element, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if e, ok := r.byTable[table]; ok {
		r.useLocked(e, 1)
		r.mu.Unlock()
		return e, nil, nil
	}
	el, ok := r.waitingBy[table]
	if !ok {
		el = r.waiting.PushBack(&waitingTable{table: table, ready: make(chan struct{})})
		r.waitingBy[table] = el
	}
	return nil, el, nil
}

// writeShared is Write for one batch's rows of table: through its writer
// at once when it is open; otherwise the rows wait in line with those of
// the other batches waiting for the table, and are written with them in
// one Write once the table gets its writer.
func (r *Router) writeShared(ctx context.Context, table string, rows []Row, keyOf KeyFunc) ([]RowError, error) {
	e, el, err := r.openOrLine(table)
	if err != nil {
		return nil, err
	}
	if e != nil {
		return r.writeOn(ctx, e, rows, keyOf)
	}
	wt := el.Value.(*waitingTable)
	sw := &sharedWrite{ctx: ctx, rows: rows, keyOf: keyOf, lead: make(chan struct{}), done: make(chan struct{})}
	if len(wt.subs) == 0 {
		close(sw.lead)
	}
	wt.subs = append(wt.subs, sw)
	victims := r.grantLocked()
	r.mu.Unlock()
	r.closeInBackground(victims)

	select {
	case <-sw.done:
		return sw.errs, sw.err
	case <-sw.lead: // leading: wait for the grant
		select {
		case <-wt.ready:
			r.writeSubs(wt)
			return sw.errs, sw.err
		case <-ctx.Done():
		}
	case <-ctx.Done():
	}
	// ctx ended: leave the line, unless the writer was granted
	// meanwhile (then the rows are written with the others, bounded by
	// their ctx: wait for the outcome).
	r.mu.Lock()
	if wt.settled {
		leads := wt.subs[0] == sw
		r.mu.Unlock()
		if leads {
			r.writeSubs(wt)
		}
		<-sw.done
		return sw.errs, sw.err
	}
	i := slices.Index(wt.subs, sw)
	wt.subs = slices.Delete(wt.subs, i, i+1)
	if i == 0 && len(wt.subs) > 0 {
		close(wt.subs[0].lead) // the next one leads
	}
	r.leaveLocked(el)
	r.mu.Unlock()
	return nil, ctx.Err()
}

// writeSubs is the leader's work once wt is settled: the rows of every
// shared write in one Write through the granted writer (released after),
// under a ctx that ends when every one of theirs has ended, and each
// write's share of the row errors (indices into its own rows). When the
// Write fails as a whole, each write gets the error when every batch alone
// would have met it (sharedFailure), and otherwise is written again alone,
// for an outcome of its own.
func (r *Router) writeSubs(wt *waitingTable) {
	r.mu.Lock()
	subs, e := wt.subs, wt.e
	r.mu.Unlock()
	finish := func(errs func(k int) []RowError, err error) {
		for k, sw := range subs {
			if errs != nil {
				sw.errs = errs(k)
			}
			sw.err = err
			close(sw.done)
		}
	}
	if e == nil {
		finish(nil, ErrClosed)
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(subs[0].ctx))
	defer cancel()
	var left atomic.Int32
	left.Store(int32(len(subs)))
	for _, sw := range subs {
		stop := context.AfterFunc(sw.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	// start[k] is where write k's rows begin in all.
	start := make([]int, len(subs)+1)
	for k, sw := range subs {
		start[k+1] = start[k] + len(sw.rows)
	}
	all := make([]Row, 0, start[len(subs)])
	for _, sw := range subs {
		all = append(all, sw.rows...)
	}
	owner := func(i int) int { // the write row i of all belongs to
		k, _ := slices.BinarySearch(start, i+1)
		return k - 1
	}
	var keyOf KeyFunc
	if slices.ContainsFunc(subs, func(sw *sharedWrite) bool { return sw.keyOf != nil }) {
		keyOf = func(i int) (string, error) {
			k := owner(i)
			if subs[k].keyOf == nil {
				return "", nil
			}
			return subs[k].keyOf(i - start[k])
		}
	}
	defer r.release(e)
	rowErrs, err := r.writeHeld(ctx, e, all, keyOf)
	if err != nil && len(subs) > 1 && !sharedFailure(err) {
		// The merged write failed as a whole for a reason that may be one
		// batch's own (a new field whose column could not be added, a
		// table that could not be created from the rows): nothing of it is
		// durable (Writer.Write), so each batch is written again alone,
		// under its own ctx, and gets its own outcome. A batch whose rows
		// can land is not failed for another's.
		var wg sync.WaitGroup
		for _, sw := range subs {
			wg.Go(func() { sw.errs, sw.err = r.writeHeld(sw.ctx, e, sw.rows, sw.keyOf) })
		}
		wg.Wait()
		for _, sw := range subs {
			close(sw.done)
		}
		return
	}
	if err != nil {
		finish(nil, err)
		return
	}
	per := make([][]RowError, len(subs))
	for _, re := range rowErrs {
		k := owner(re.Index)
		re.Index -= start[k]
		per[k] = append(per[k], re)
	}
	finish(func(k int) []RowError { return per[k] }, nil)
}

// sharedFailure reports whether err, the failure of a merged write as a
// whole, is one every batch in it would meet alone, so that writing them
// again one by one would only fail again: the table's writer is not open
// (its streams down or not opened yet: the engine holds the batches and
// reconnects), the router or writer closed, or the wait ended.
func sharedFailure(err error) bool {
	return errors.Is(err, ErrNotOpen) || errors.Is(err, ErrClosed) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// pin marks the writers of tables that are open now in use, each once
// (nil for a table without one), under one lock: a batch's open tables
// are held before any of its other tables can evict them.
func (r *Router) pin(tables []string) []*routed {
	out := make([]*routed, len(tables))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return out
	}
	for i, t := range tables {
		if e, ok := r.byTable[t]; ok {
			r.useLocked(e, 1)
			out[i] = e
		}
	}
	return out
}

// useLocked adds n Writes to e's users, taking it out of the idle list.
func (r *Router) useLocked(e *routed, n int) {
	if e.refs == 0 && e.idleAt != nil {
		r.idle.Remove(e.idleAt)
		e.idleAt = nil
	}
	e.refs += n
}

// grantLocked gives the tables waiting, oldest first, their writers while
// there is room, and evicts idle writers, least recently used first, to
// make room for the tables still waiting. It returns the evicted writers,
// to be closed outside the lock.
func (r *Router) grantLocked() []*routed {
	var victims []*routed
	for r.waiting.Len() > 0 && !r.closed {
		if len(r.byTable)+r.closingN < r.max {
			el := r.waiting.Front()
			wt := el.Value.(*waitingTable)
			r.waiting.Remove(el)
			delete(r.waitingBy, wt.table)
			e := r.newEntryLocked(wt.table)
			// One use for each acquire caller, one for the shared writes
			// (their leader releases it).
			r.useLocked(e, wt.n+min(len(wt.subs), 1))
			wt.e, wt.settled = e, true
			close(wt.ready)
			continue
		}
		// Each writer closing frees a place for one table waiting: evict
		// only for the tables no close in progress will serve.
		if r.closingN >= r.waiting.Len() || r.idle.Len() == 0 {
			break
		}
		victims = append(victims, r.evictLocked(r.idle.Back().Value.(*routed)))
	}
	return victims
}

// newEntryLocked makes table's writer, seeded with the description an
// evicted writer left when it is recent.
func (r *Router) newEntryLocked(table string) *routed {
	e := &routed{table: table, w: r.newWriter(table)}
	if d, ok := r.described[table]; ok {
		delete(r.described, table)
		if time.Since(d.at) < DescribedTTL {
			e.w.Seed(d.ts)
		}
	}
	r.byTable[table] = e
	r.opened++
	return e
}

// evictLocked unlinks the idle writer e, keeping its description for the
// table's next writer; the caller closes it.
func (r *Router) evictLocked(e *routed) *routed {
	r.idle.Remove(e.idleAt)
	e.idleAt = nil
	delete(r.byTable, e.table)
	if ts := e.w.Described(); ts != nil {
		r.rememberLocked(e.table, ts)
	}
	r.closingN++
	r.closing.Add(1)
	r.evicted++
	return e
}

// rememberLocked keeps ts for table's next writer, forgetting stale
// entries when the map grows past its bound.
func (r *Router) rememberLocked(table string, ts *catalog.TableState) {
	now := time.Now()
	bound := max(4*r.max, describedMin)
	if len(r.described) >= bound {
		for t, d := range r.described {
			if now.Sub(d.at) >= DescribedTTL {
				delete(r.described, t)
			}
		}
	}
	if len(r.described) < bound {
		r.described[table] = describedTable{ts: ts, at: now}
	}
}

// release ends the caller's use of e; an idle writer may be evicted for a
// table waiting.
func (r *Router) release(e *routed) {
	r.mu.Lock()
	e.refs--
	if e.refs == 0 && !r.closed {
		if r.byTable[e.table] == e {
			e.idleAt = r.idle.PushFront(e)
		}
	}
	victims := r.grantLocked()
	r.mu.Unlock()
	r.closeInBackground(victims)
}

// closeInBackground drains and closes evicted writers off the write path
// (a stream's close waits for the service to end its call), each within
// closeTimeout; their places go to the tables waiting once they are closed.
// An evicted writer is idle: no Write of it is in flight, so the drain has
// nothing to wait for but its coverage flush. Close waits for them (each was
// added to closing when it was evicted, under the lock).
func (r *Router) closeInBackground(victims []*routed) {
	if len(victims) == 0 {
		return
	}
	if r.evictions != nil {
		r.evictions.Incr(int64(len(victims)))
	}
	if msg := r.thrash.evicted(len(victims)); msg != "" {
		r.log.Warn(msg)
	}
	for _, e := range victims {
		go func() {
			defer r.closing.Done()
			ctx, cancel := context.WithTimeout(context.Background(), r.closeTimeout)
			if err := e.w.Close(ctx); err != nil {
				r.log.Warn(fmt.Sprintf("closing the writer of table %s (evicted, least recently used): %v", e.table, err))
			}
			cancel()
			r.mu.Lock()
			r.closingN--
			next := r.grantLocked()
			r.mu.Unlock()
			r.closeInBackground(next)
		}()
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

// writers returns the writers the router holds open now, copied under its lock so that callers can work on them (open them,
// snapshot them) without holding it.
func (r *Router) writers() []*Writer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writersLocked()
}

// writersLocked is writers with r.mu held.
func (r *Router) writersLocked() []*Writer {
	ws := make([]*Writer, 0, len(r.byTable))
	for _, e := range r.byTable {
		ws = append(ws, e.w)
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

// Stats counts the writers made and evicted so far, and those open now
// (evicted ones still closing included).
func (r *Router) Stats() (opened, evicted int64, open int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.opened, r.evicted, len(r.byTable) + r.closingN
}

// Close closes every writer within ctx, those still closing after an
// eviction included; Writes waiting for a writer fail with ErrClosed.
func (r *Router) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	for el := r.waiting.Front(); el != nil; el = el.Next() {
		wt := el.Value.(*waitingTable)
		wt.settled = true
		close(wt.ready)
	}
	r.waiting.Init()
	clear(r.waitingBy)
	all := r.writersLocked()
	clear(r.byTable)
	r.idle.Init()
	r.mu.Unlock()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, w := range all {
		wg.Go(func() { errs[i] = w.Close(ctx) })
	}
	wg.Wait()
	closed := make(chan struct{})
	go func() {
		r.closing.Wait()
		close(closed)
	}()
	select {
	case <-closed:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("router: evicted writers still closing: %w", ctx.Err()))
	}
	return errors.Join(errs...)
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
	// Every table of the batch is asked for at once: the open ones are
	// held first (pin), so that the others cannot evict them, and the
	// others wait in line, sharing the writer made for their table with
	// the Writes of other batches waiting for it.
	r.thrash.wrote(order...)
	pinned := r.pin(order)
	results := make([][]RowError, len(order))
	var wg sync.WaitGroup
	for g, table := range order {
		idx := groups[table]
		wg.Go(func() {
			sub := make([]Row, len(idx))
			for k, i := range idx {
				sub[k] = rows[i]
			}
			var subKey KeyFunc
			if keyOf != nil {
				subKey = func(k int) (string, error) { return keyOf(idx[k]) }
			}
			var rowErrs []RowError
			var err error
			if e := pinned[g]; e != nil {
				rowErrs, err = r.writeOn(ctx, e, sub, subKey)
			} else {
				rowErrs, err = r.writeShared(ctx, table, sub, subKey)
			}
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
