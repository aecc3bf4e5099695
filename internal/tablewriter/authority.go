// The table schema authority: the one owner of what the writer knows of its
// table's schema and of every change to it (describe, create from the first
// batch, evolve on drift, widen, re-describe), handing the write path
// immutable snapshots.

package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// snapshot is one version of the table's schema as the write path converts
// against it: the described table, its column keys and the converter built
// for its columns. It is never changed once made; a change of the table
// makes a new one (a higher version), and a batch converted on an older one
// keeps it until it is sent or converted again.
type snapshot struct {
	version uint64
	table   *catalog.TableState // as described; its Columns are the snapshot's
	keys    map[string]int      // typemap.ColumnKey of every column: its index in columns()
	conv    *arrowconv.Converter
}

func (s *snapshot) columns() []typemap.Column { return s.table.Columns }

// schema is the Arrow schema the streams of this snapshot write.
func (s *snapshot) schema() *arrow.Schema { return s.conv.Schema() }

// has reports whether the table has a column for field name.
func (s *snapshot) has(name string) bool { _, ok := s.keys[typemap.ColumnKey(name)]; return ok }

// authority owns the table's schema: it describes the table, creates it from
// the first batch, adds columns and widens them on drift, re-describes it on
// a schema rejection or when rows carry fields it lacks, and remembers what
// the catalog refused. It never touches a stream: a change of snapshot is
// applied by install, the writer's switch of its streams to the new schema,
// called with mu held so that one drift causes one reconcile and one pool
// reopen however many batches notice it at once.
type authority struct {
	cfg      Config
	cat      catalog.TableCatalog
	log      *slog.Logger
	reserved []typemap.Column // the reserved columns a created table gets

	// current is the snapshot the writer writes on now (nil while it is
	// not open or the table does not exist yet).
	current func() *snapshot
	// install makes next the writer's snapshot: its streams reopen on
	// next's schema or, for a table just created, open on it. Called with
	// mu held.
	install func(ctx context.Context, next *snapshot) error

	// mu serialises every change of the table or of the snapshot (create,
	// evolve, refresh, re-describe) and the writer's stop and close, which
	// drop the snapshot.
	mu sync.Mutex
	// lastRefresh is when refresh last described the table; guarded by mu.
	lastRefresh time.Time
	versions    atomic.Uint64
	// seed, when set, stands in for the next open's describe.
	seed atomic.Pointer[catalog.TableState]
	// last is the table as the writer last wrote on it, or was handed it
	// (Seed), kept when its streams stop: a table found gone at the next
	// open (dropped under the running output) is created again with its
	// columns (provisioning).
	last atomic.Pointer[catalog.TableState]
	// creates counts the tables this writer created (createTable): a
	// companion table's owner tells from it that the table it writes is a
	// new one (the coverage ranges are then written again).
	creates atomic.Int64
	// closing ends when the writer's Close waited for mu past its own ctx:
	// the change holding mu is cut short then (bound).
	closing context.Context

	// The catalog's refusals and the hints given, written under mu, read
	// without it: refused maps the column key of a new field the catalog
	// refused to add, or that cannot be a column, to why; widenRefused a
	// (lower-cased) column the catalog refused to widen to its refusal, so
	// its rows fail at once instead of re-planning every batch; widenHinted
	// the columns the "catalog.widen would widen it" hint was logged for;
	// relaxRefused a (lower-cased) column the catalog refused to drop NOT
	// NULL on to its refusal.
	refused, widenRefused, widenHinted, relaxRefused sync.Map
	// src gives the registry schemas of a batch (schemasource.go): the
	// metadata key, the registry, or nil (off).
	src schemaSource
	// blocked is why the absent table could not be created from the last
	// batch (noColumns), for the health report; nil once it is created.
	blocked atomic.Pointer[string]
}

// snapshotOf makes the next snapshot, for the described table ts.
func (a *authority) snapshotOf(ts *catalog.TableState) (*snapshot, error) {
	conv, err := arrowconv.New(ts.Columns, a.cfg.Convert)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", a.cfg.Table, err)
	}
	s := &snapshot{version: a.versions.Add(1), table: ts, keys: make(map[string]int, len(ts.Columns)), conv: conv}
	for i, c := range ts.Columns {
		s.keys[typemap.ColumnKey(c.Name)] = i
	}
	return s, nil
}

// bound ties ctx, the ctx of a change made under mu, to the writer's
// Close: a change Close waits for past its own ctx is cut short (its ctx
// ends with ErrClosed), so Close is never held by a catalog call or a
// reopen that cannot finish.
func (a *authority) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(a.closing, func() { cancel(context.Cause(a.closing)) })
	return ctx, func() { stop(); cancel(nil) }
}

// takeSeed returns (and forgets) the table the router handed over for the
// next open, nil when none.
func (a *authority) takeSeed() *catalog.TableState { return a.seed.Swap(nil) }

// describe describes the table; nil when it does not exist.
func (a *authority) describe(ctx context.Context) (*catalog.TableState, error) {
	ts, err := a.cat.Describe(ctx, a.cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("describe table %s: %w", a.cfg.Table, err)
	}
	return ts, nil
}

// switchTo builds the snapshot of the described table ts and installs it;
// mu is held.
func (a *authority) switchTo(ctx context.Context, ts *catalog.TableState) (*snapshot, error) {
	next, err := a.snapshotOf(ts)
	if err != nil {
		return nil, err
	}
	if err := a.install(ctx, next); err != nil {
		return nil, err
	}
	return next, nil
}

// errDropped is the change of a table whose writer stopped or closed
// meanwhile: the batch is retried after the next Open.
var errDropped = fmt.Errorf("%w: the streams stopped while the table schema changed", ErrNotOpen)

// create creates the absent table from the first batch (desiredFromBatch,
// or Config.CreateColumns) and installs its first snapshot, which opens the
// streams. A batch that finds it created meanwhile has nothing to do.
func (a *authority) create(ctx context.Context, batch []Row) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	ctx, done := a.bound(ctx)
	defer done()
	if a.current() != nil {
		return nil // another batch created it meanwhile
	}
	var d catalog.DesiredTable
	if len(a.cfg.CreateColumns) > 0 {
		d = a.desiredFromColumns(append(slices.Clone(a.cfg.CreateColumns), a.reserved...))
	} else {
		var err error
		if d, err = a.desiredFromBatch(ctx, batch); err != nil {
			return err
		}
	}
	ts, statements, err := a.createTable(ctx, d, "table")
	if err != nil {
		return err
	}
	a.blocked.Store(nil)
	a.infof("table %s provisioned (%d statements)", a.cfg.Table, statements)
	if err := a.cat.RegisterWriter(ctx, a.cfg.Table, catalog.WriterInfo{ID: a.cfg.WriterID, Role: a.cfg.Role}); err != nil {
		a.warnf("register writer on %s: %v", a.cfg.Table, err)
	}
	_, err = a.switchTo(ctx, ts)
	return err
}

// desiredFromBatch is the desired table for an absent table created from
// the first batch: the registry's columns of the rows that carry a registry
// schema (Config.SchemaMetadata; registryschema.go), first and in their
// schema's order, then the fields of the other rows, inferred from their
// values (inferFields), then the reserved columns. A batch no column can be
// made from is an error saying why (noColumns), or, when every row carries
// a registry schema, a *refusedBatch failing them alone.
func (a *authority) desiredFromBatch(ctx context.Context, batch []Row) (catalog.DesiredTable, error) {
	known := map[string]bool{}
	for _, c := range a.reserved {
		known[typemap.ColumnKey(c.Name)] = true
	}
	// Rows carrying a registry schema give their columns its types;
	// the others' fields are inferred from their values.
	bs, err := a.schemasOf(ctx, batch, nil)
	if err != nil {
		return catalog.DesiredTable{}, err
	}
	fromRegistry := a.createColumns(bs, known)
	for _, c := range fromRegistry {
		known[typemap.ColumnKey(c.Name)] = true
	}
	var inferRows []int
	for i := range batch {
		if bs.of == nil || bs.of[i] < 0 {
			inferRows = append(inferRows, i)
		}
	}
	var fields []arrow.Field
	if len(inferRows) > 0 {
		var conflicts []string
		fields, conflicts = inferFields(func(n string) bool { return known[typemap.ColumnKey(n)] }, structured(batch, inferRows))
		for _, c := range conflicts {
			a.warnf("table %s: the first batch disagrees on a field's type: %s", a.cfg.Table, c)
		}
		fields = a.creatable(fields)
	}
	if len(fields) == 0 && len(fromRegistry) == 0 {
		if rb := a.refuseAll(batch, bs); rb != nil {
			return catalog.DesiredTable{}, rb
		}
		return catalog.DesiredTable{}, a.noColumns(batch, bs)
	}
	if len(fromRegistry) == 0 {
		return a.desiredForCreate(arrow.NewSchema(fields, nil))
	}
	cols := slices.Clone(fromRegistry)
	for _, f := range fields {
		t, err := typemap.FromArrow(f.Type)
		if err != nil {
			return catalog.DesiredTable{}, fmt.Errorf("table %s: column %q: %w", a.cfg.Table, f.Name, err)
		}
		cols = append(cols, typemap.Column{Name: typemap.SafeIdentifier(f.Name), Type: t, Nullable: true})
	}
	a.infof("table %s: creating it with the registry schema's types: %s", a.cfg.Table, columnsText(fromRegistry))
	return a.desiredFromColumns(append(cols, a.reserved...)), nil
}

// drift is the authority's answer to a batch converted on seen whose rows
// errs failed (round counts the answers this conversion already had): the
// snapshot to convert the batch again on, or seen when nothing changes, its
// row errors then saying why where the catalog refused a change.
//
// Without provisioning, a field the table lacks may be a column someone
// added meanwhile: the table is re-described (at most once per interval).
// With it, the new fields become columns and the values out of range widen
// their columns (catalog.widen), once per drift.
func (a *authority) drift(ctx context.Context, seen *snapshot, batch []Row, errs []RowError, round int) (*snapshot, error) {
	if !a.cfg.Provision {
		if round == 0 && hasUnknownField(errs) {
			if next := a.refresh(ctx, seen); next != seen {
				return next, nil
			}
		}
		a.hintWidening(widenings(seen.columns(), batch, errs, a.hinted))
		a.annotateRefusedFields(errs)
		return seen, nil
	}
	var widen []widening
	if a.cfg.Widen {
		widen = widenings(seen.columns(), batch, errs, nil)
	} else {
		// Only for the hint: a column hinted already is not looked at.
		a.hintWidening(widenings(seen.columns(), batch, errs, a.hinted))
	}
	if pending := a.pendingWidenings(widen); round < maxEvolveRounds && (hasUnknownField(errs) || len(pending) > 0) {
		next, err := a.evolve(ctx, seen, batch, errs, pending)
		if err != nil || next != seen {
			return next, err
		}
	}
	// Nothing could be added or widened: the row errors stand, with the
	// catalog's refusal where it refused.
	a.annotateRefusedWidenings(errs, widen)
	a.annotateRefusedFields(errs)
	return seen, nil
}

// maxEvolveRounds bounds the evolutions one batch conversion drives.
const maxEvolveRounds = 3

func hasUnknownField(errs []arrowconv.RowError) bool {
	for _, e := range errs {
		if errors.Is(e.Err, arrowconv.ErrUnknownField) {
			return true
		}
	}
	return false
}

// evolve changes the table for the drift of one batch converted on seen
// and installs the new snapshot: it adds columns for the new fields of the
// messages that failed on an unknown field, and widens the columns in widen
// (values out of range for a narrow numeric column, catalog.widen on). It
// runs once per drift: a batch that finds the snapshot replaced meanwhile
// gets the new one, to convert on and look at again. A change the catalog
// refuses is remembered and left out, the rest still applied; the refused
// rows fail alone.
func (a *authority) evolve(ctx context.Context, seen *snapshot, batch []Row, errs []arrowconv.RowError, widen []widening) (*snapshot, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ctx, done := a.bound(ctx)
	defer done()
	switch cur := a.current(); {
	case cur == nil:
		return nil, errDropped
	case cur != seen:
		return cur, nil // someone else evolved the table meanwhile
	}
	return a.applyLocked(ctx, seen, a.columnsToAdd(seen, batch, errs), a.pendingWidenings(widen), nil) // a refusal may have landed meanwhile
}

// applyLocked adds the columns add, makes the widenings widen and drops
// NOT NULL on the columns relax (a registry schema made their fields
// optional) on the table of seen, the current snapshot, and installs the
// new snapshot; seen when nothing was left to change. A change the catalog
// refuses is remembered and left out, the rest still applied. mu is held.
func (a *authority) applyLocked(ctx context.Context, seen *snapshot, add []typemap.Column, widen []widening, relax []relaxing) (*snapshot, error) {
	for len(add) > 0 || len(widen) > 0 || len(relax) > 0 {
		cols := slices.Clone(seen.columns())
		for _, wd := range widen {
			cols[columnIndex(cols, wd.column)].Type = wd.to
		}
		d := a.desiredFromColumns(append(cols, add...))
		for _, r := range relax {
			d.DropNotNull = append(d.DropNotNull, r.column)
		}
		what := describeChanges(add, widen, relax)
		a.infof("table %s: %s", a.cfg.Table, what)
		out, err := a.cat.Reconcile(ctx, d)
		var refused *catalog.RefusedError
		if errors.As(err, &refused) {
			// Retrying cannot help: remember what was refused, let its rows
			// fail alone (a fallback output dead-letters them), and apply
			// the rest.
			add, widen, relax = a.dropRefused(refused, add, widen, relax)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("evolve table %s (%s): %w", a.cfg.Table, what, err)
		}
		ts := out.State
		if ts == nil {
			if ts, err = a.cat.Describe(ctx, a.cfg.Table); err != nil {
				return nil, fmt.Errorf("describe table %s after evolving: %w", a.cfg.Table, err)
			}
			if ts == nil {
				return nil, fmt.Errorf("table %s is gone after evolving it", a.cfg.Table)
			}
		}
		return a.switchTo(ctx, ts)
	}
	return seen, nil
}

// refresh re-describes the table when rows of a batch (converted on seen)
// failed on a field the table lacks and the writer does not provision: if
// the table gained columns, the streams reopen on its new schema and the
// batch is converted again. It looks at most once per
// SchemaRefreshInterval, so a stream of rows that simply do not fit costs
// one describe per interval.
func (a *authority) refresh(ctx context.Context, seen *snapshot) *snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	ctx, done := a.bound(ctx)
	defer done()
	switch cur := a.current(); {
	case cur == nil:
		return seen // the writer stopped: nothing to refresh
	case cur != seen:
		return cur // someone else changed the table meanwhile
	}
	if time.Since(a.lastRefresh) < a.cfg.SchemaRefreshInterval {
		return seen
	}
	a.lastRefresh = time.Now()
	ts, err := a.cat.Describe(ctx, a.cfg.Table)
	switch {
	case err != nil:
		a.warnf("table %s: rows carry fields the table lacks; re-describing it failed: %v", a.cfg.Table, err)
		return seen
	case ts == nil:
		a.errorf("table %s: rows carry fields the table lacks, and the table is gone", a.cfg.Table)
		return seen
	case sameTable(ts, seen):
		a.infof("table %s: rows carry fields the table lacks; re-described it, no new columns (next look in %s; catalog.provision adds them)", a.cfg.Table, a.cfg.SchemaRefreshInterval)
		return seen
	}
	next, err := a.switchTo(ctx, ts)
	if err != nil {
		a.errorf("table %s gained columns, but reopening its streams on them failed: %v", a.cfg.Table, err)
		return seen
	}
	a.infof("table %s gained columns: streams reopened on its new schema", a.cfg.Table)
	return next
}

// redescribe handles a SCHEMA_VALIDATION_FAILED from the service for a
// batch converted on seen: the table changed under us. It describes the
// table afresh and, only if its columns differ, installs a snapshot of
// them. The failed batch is nacked regardless and is converted against the
// new schema when redelivered.
func (a *authority) redescribe(ctx context.Context, seen *snapshot) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ctx, done := a.bound(ctx)
	defer done()
	if a.current() != seen {
		return // changed meanwhile, or the writer stopped
	}
	ts, err := a.cat.Describe(ctx, a.cfg.Table)
	if err != nil {
		a.errorf("re-describe table %s after a schema rejection: %v", a.cfg.Table, err)
		return
	}
	if ts == nil {
		a.errorf("re-describe table %s after a schema rejection: the table is gone", a.cfg.Table)
		return
	}
	if sameTable(ts, seen) {
		return
	}
	if _, err := a.switchTo(ctx, ts); err != nil {
		a.errorf("reopen streams of %s on the re-described schema: %v", a.cfg.Table, err)
		return
	}
	a.infof("table %s changed under the pipeline%s: streams reopened on its new schema", a.cfg.Table, recreatedNote(ts, seen))
}

// sameTable reports whether the described table ts is the table of seen,
// unchanged: the same columns and, when both are known, the same table_id.
// A table dropped and created again under its name between two describes
// is another table (a new table_id), even with the same columns: the
// snapshot is replaced so that everything keyed by the table's id (its
// storage credentials, its properties) is taken from the new one.
func sameTable(ts *catalog.TableState, seen *snapshot) bool {
	if ts.TableID != "" && seen.table.TableID != "" && ts.TableID != seen.table.TableID {
		return false
	}
	return typemap.SameColumns(ts.Columns, seen.columns())
}

// recreatedNote says, for a log line, that ts is a table created again
// under seen's name ("" when it is the same table).
func recreatedNote(ts *catalog.TableState, seen *snapshot) string {
	if ts.TableID != "" && seen.table.TableID != "" && ts.TableID != seen.table.TableID {
		return fmt.Sprintf(" (dropped and created again: table_id %s, was %s)", ts.TableID, seen.table.TableID)
	}
	return ""
}

func (a *authority) infof(format string, args ...any) { a.log.Info(fmt.Sprintf(format, args...)) }
func (a *authority) warnf(format string, args ...any) { a.log.Warn(fmt.Sprintf(format, args...)) }
func (a *authority) errorf(format string, args ...any) {
	a.log.Error(fmt.Sprintf(format, args...))
}
