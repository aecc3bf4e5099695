// The target schema: create on absent, evolve on drift, re-describe on a
// schema rejection, and the desired table handed to the catalog.

package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// syncMetadata reconciles an existing table's comments, properties and
// writer registration without changing its columns, except to add the
// reserved columns in add (coverage turned on for an existing table).
func (w *Writer) syncMetadata(ctx context.Context, ts *catalog.TableState, add []typemap.Column) (*catalog.TableState, error) {
	if len(add) > 0 {
		names := make([]string, len(add))
		for i, c := range add {
			names[i] = c.Name
		}
		w.infof("table %s: adding the reserved columns it lacks: %s", w.cfg.Table, strings.Join(names, ", "))
	}
	out, err := w.cat.Reconcile(ctx, w.desiredFromColumns(append(slices.Clone(ts.Columns), add...)))
	if err != nil {
		return nil, fmt.Errorf("reconcile table %s: %w", w.cfg.Table, err)
	}
	if err := w.cat.RegisterWriter(ctx, w.cfg.Table, catalog.WriterInfo{ID: w.cfg.WriterID, Role: w.cfg.Role}); err != nil {
		return nil, fmt.Errorf("register writer on %s: %w", w.cfg.Table, err)
	}
	if out.State != nil {
		return out.State, nil
	}
	return ts, nil
}

// desiredFromColumns is the desired table for columns as they are (the live
// ones, plus any to add), with the config's comments, contract, role and
// policies. Existing columns are passed through untouched, so a DECIMAL or
// TIMESTAMP_NTZ column never round-trips through its Arrow wire type.
func (w *Writer) desiredFromColumns(cols []typemap.Column) catalog.DesiredTable {
	d := catalog.DesiredTable{FullName: w.cfg.Table, Columns: cols, Comments: map[string]string{}}
	w.applyConfig(&d)
	return d
}

// desiredForCreate is the desired table for a table created from the
// fields of a first batch, plus the converter's reserved columns.
func (w *Writer) desiredForCreate(schema *arrow.Schema) (catalog.DesiredTable, error) {
	d, err := catalog.DesiredFromArrow(w.cfg.Table, schema, w.tableReserved()...)
	if err != nil {
		return d, err
	}
	w.applyConfig(&d)
	return d, nil
}

// applyConfig sets the role, policies, contract and column descriptions.
// The contract was loaded once, by the caller of New.
func (w *Writer) applyConfig(d *catalog.DesiredTable) {
	d.Role = w.cfg.Role
	d.AllowWidening = w.cfg.Widen
	d.CommentsPolicy = w.cfg.CommentsPolicy
	if w.cfg.Comment != "" {
		d.Comment = w.cfg.Comment
	}
	if w.cfg.Contract != nil {
		d.ApplyContract(w.cfg.Contract)
	}
	if d.Comments == nil {
		d.Comments = map[string]string{}
	}
	for k, v := range w.cfg.ColumnDescriptions {
		d.Comments[k] = v
	}
}

// structured decodes the messages listed in idx (all when idx is nil) for
// schema inference; undecodable messages are skipped (they fail conversion
// with their own error).
func structured(batch []Row, idx []int) []map[string]any {
	var out []map[string]any
	add := func(m Row) {
		v, err := m.AsStructured()
		if err != nil {
			return
		}
		if obj, ok := v.(map[string]any); ok {
			out = append(out, obj)
		}
	}
	if idx == nil {
		for _, m := range batch {
			add(m)
		}
		return out
	}
	for _, i := range idx {
		add(batch[i])
	}
	return out
}

// createFromBatch creates the absent table from the fields of the first
// batch, then opens the pool on it.
func (w *Writer) createFromBatch(ctx context.Context, batch []Row) (*state, error) {
	w.schemaMu.Lock()
	defer w.schemaMu.Unlock()
	if st := w.st.Load(); st != nil && st.pool != nil {
		return st, nil // another batch created it meanwhile
	}
	var d catalog.DesiredTable
	if len(w.cfg.CreateColumns) > 0 {
		d = w.desiredFromColumns(append(slices.Clone(w.cfg.CreateColumns), w.tableReserved()...))
	} else {
		reserved := map[string]bool{}
		for _, c := range w.tableReserved() {
			reserved[typemap.ColumnKey(c.Name)] = true
		}
		fields, conflicts := inferFields(func(n string) bool { return reserved[typemap.ColumnKey(n)] }, structured(batch, nil))
		for _, c := range conflicts {
			w.warnf("table %s: the first batch disagrees on a field's type: %s", w.cfg.Table, c)
		}
		fields = w.creatable(fields)
		if len(fields) == 0 {
			return nil, fmt.Errorf("table %s does not exist and no column could be inferred from a batch of %d messages", w.cfg.Table, len(batch))
		}
		var err error
		if d, err = w.desiredForCreate(arrow.NewSchema(fields, nil)); err != nil {
			return nil, err
		}
	}
	ts, statements, err := w.create(ctx, d, "table")
	if err != nil {
		return nil, err
	}
	w.infof("table %s provisioned (%d statements)", w.cfg.Table, statements)
	if err := w.cat.RegisterWriter(ctx, w.cfg.Table, catalog.WriterInfo{ID: w.cfg.WriterID, Role: w.cfg.Role}); err != nil {
		w.warnf("register writer on %s: %v", w.cfg.Table, err)
	}
	if err := w.checkPrimaryRaw(ts); err != nil {
		return nil, err
	}
	if err := w.ensureCoverage(ctx); err != nil {
		return nil, err
	}
	st, err := w.buildState(ctx, ts.Columns, nil)
	if err != nil {
		return nil, err
	}
	if w.life.isClosed() {
		_ = st.pool.Close(ctx)
		return nil, ErrClosed
	}
	w.st.Store(st)
	w.life.opened(false)
	w.startWatch()
	return st, nil
}

// create creates the absent table d and returns it as described (by the
// catalog's reconcile, or afresh when the catalog returned no state) and the
// statements it took; what names the table's kind in errors.
func (w *Writer) create(ctx context.Context, d catalog.DesiredTable, what string) (*catalog.TableState, int, error) {
	if len(w.cfg.CreateProperties) > 0 {
		d.Properties = maps.Clone(d.Properties)
		if d.Properties == nil {
			d.Properties = map[string]string{}
		}
		maps.Copy(d.Properties, w.cfg.CreateProperties)
	}
	out, err := w.cat.Reconcile(ctx, d)
	if err != nil {
		return nil, 0, fmt.Errorf("create %s %s: %w", what, d.FullName, err)
	}
	ts := out.State
	if ts == nil {
		if ts, err = w.cat.Describe(ctx, d.FullName); err != nil {
			return nil, 0, fmt.Errorf("describe %s %s after create: %w", what, d.FullName, err)
		}
		if ts == nil {
			return nil, 0, fmt.Errorf("%s %s still absent after create", what, d.FullName)
		}
	}
	return ts, out.Statements, nil
}

// evolve changes the table for the drift of one batch and reopens the pool
// on the new schema: it adds columns for the new fields of the messages
// that failed on an unknown field, and widens the columns in widen (values
// out of range for a narrow numeric column, catalog.widen on). It runs once
// per drift: a caller that finds the state already replaced uses the new
// one. A change the catalog refuses is remembered and left out, the rest
// still applied; the refused rows fail alone.
func (w *Writer) evolve(ctx context.Context, seen *state, batch []Row, errs []arrowconv.RowError, widen []widening) (*state, error) {
	w.schemaMu.Lock()
	defer w.schemaMu.Unlock()
	if cur := w.st.Load(); cur != seen {
		return cur, nil // someone else evolved the table meanwhile
	}
	add := w.columnsToAdd(seen, batch, errs)
	widen = w.pendingWidenings(widen) // a refusal may have landed meanwhile
	for len(add) > 0 || len(widen) > 0 {
		cols := append([]typemap.Column{}, seen.columns...)
		for _, wd := range widen {
			cols[columnIndex(cols, wd.column)].Type = wd.to
		}
		d := w.desiredFromColumns(append(cols, add...))
		what := describeChanges(add, widen)
		w.infof("table %s: %s", w.cfg.Table, what)
		out, err := w.cat.Reconcile(ctx, d)
		var refused *catalog.RefusedError
		if errors.As(err, &refused) {
			// Retrying cannot help: remember what was refused, let its rows
			// fail alone (a fallback output dead-letters them), and apply
			// the rest.
			add, widen = w.dropRefused(refused, add, widen)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("evolve table %s (%s): %w", w.cfg.Table, what, err)
		}
		ts := out.State
		if ts == nil {
			if ts, err = w.cat.Describe(ctx, w.cfg.Table); err != nil {
				return nil, fmt.Errorf("describe table %s after evolving: %w", w.cfg.Table, err)
			}
			if ts == nil {
				return nil, fmt.Errorf("table %s is gone after evolving it", w.cfg.Table)
			}
		}
		next, err := w.buildState(ctx, ts.Columns, seen.pool)
		if err != nil {
			return nil, err
		}
		w.st.Store(next)
		return next, nil
	}
	return seen, nil
}

// columnsToAdd infers the columns for the new fields of the messages that
// failed on an unknown field, leaving out (and remembering) fields that
// cannot be columns.
func (w *Writer) columnsToAdd(seen *state, batch []Row, errs []arrowconv.RowError) []typemap.Column {
	var idx []int
	for _, e := range errs {
		if errors.Is(e.Err, arrowconv.ErrUnknownField) {
			idx = append(idx, e.Index)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	known := func(n string) bool {
		k := typemap.ColumnKey(n)
		_, refused := w.refused.m.Load(k)
		return seen.names[k] || refused
	}
	fields, conflicts := inferFields(known, structured(batch, idx))
	for _, c := range conflicts {
		w.warnf("table %s: messages disagree on a new field's type: %s", w.cfg.Table, c)
	}
	fields = w.creatable(fields)
	add := make([]typemap.Column, 0, len(fields))
	for _, f := range fields {
		t, err := typemap.FromArrow(f.Type)
		if err != nil {
			w.warnf("table %s: not adding a column for field %s (%v); its rows fail", w.cfg.Table, arrowconv.Quote(f.Name), err)
			w.refused.m.Store(typemap.ColumnKey(f.Name), err.Error())
			continue
		}
		add = append(add, typemap.Column{Name: f.Name, Type: t, Nullable: true})
	}
	return add
}

// annotateRefusedFields adds to the unknown-field errors of errs why the
// field has no column, when the catalog refused to add it or it cannot be
// one, so its dead letter says why.
func (w *Writer) annotateRefusedFields(errs []arrowconv.RowError) {
	for k, e := range errs {
		if !errors.Is(e.Err, arrowconv.ErrUnknownField) {
			continue
		}
		if why, ok := w.refused.m.Load(typemap.ColumnKey(e.Column)); ok {
			errs[k].Err = fmt.Errorf("%w (no column was added for it: %s)", e.Err, why)
		}
	}
}

// dropRefused records the catalog's refusals and returns the changes it
// did not refuse. A refusal naming none of the changes (a table-level one)
// refuses them all: nothing could be applied.
func (w *Writer) dropRefused(refused *catalog.RefusedError, add []typemap.Column, widen []widening) ([]typemap.Column, []widening) {
	reasons := map[string]string{}
	for _, r := range refused.Refusals {
		reasons[strings.ToLower(r.Column)] = r.Reason
	}
	named := func(column string) bool { _, ok := reasons[strings.ToLower(column)]; return ok }
	all := !slices.ContainsFunc(add, func(c typemap.Column) bool { return named(c.Name) }) &&
		!slices.ContainsFunc(widen, func(x widening) bool { return named(x.column) })
	var keepAdd []typemap.Column
	var keepWiden []widening
	var dropped []string
	for _, c := range add {
		if !all && !named(c.Name) {
			keepAdd = append(keepAdd, c)
			continue
		}
		reason, ok := reasons[strings.ToLower(c.Name)]
		if !ok {
			reason = refused.Error()
		}
		w.refused.m.Store(typemap.ColumnKey(c.Name), "the catalog refused it: "+reason)
		dropped = append(dropped, c.Name)
	}
	for _, wd := range widen {
		if !all && !named(wd.column) {
			keepWiden = append(keepWiden, wd)
			continue
		}
		reason, ok := reasons[strings.ToLower(wd.column)]
		if !ok {
			reason = refused.Error()
		}
		w.widenRefused.Store(strings.ToLower(wd.column), reason)
		dropped = append(dropped, wd.column)
	}
	w.errorf("table %s: %v; rows needing %v fail", w.cfg.Table, refused, dropped)
	return keepAdd, keepWiden
}

// describeChanges is the log line of an evolution.
func describeChanges(add []typemap.Column, widen []widening) string {
	var parts []string
	if len(add) > 0 {
		names := make([]string, len(add))
		for i, c := range add {
			names[i] = c.Name
		}
		parts = append(parts, fmt.Sprintf("messages carry new fields %v: adding columns", names))
	}
	for _, wd := range widen {
		parts = append(parts, fmt.Sprintf("value %s (message %d) is out of range for column %q %s: widening it to %s",
			wd.sample, wd.rows[0], wd.column, sqlType(wd.from), sqlType(wd.to)))
	}
	return strings.Join(parts, "; ")
}

// refresh re-describes the table when rows of a batch (seen) failed on a
// field the table lacks and the writer does not provision: if the table
// gained columns, the streams reopen on its new schema and the batch is
// converted again. It looks at most once per SchemaRefreshInterval, so a
// stream of rows that simply do not fit costs one describe per interval.
func (w *Writer) refresh(ctx context.Context, seen *state) *state {
	w.schemaMu.Lock()
	defer w.schemaMu.Unlock()
	if cur := w.st.Load(); cur != seen {
		if cur == nil {
			return seen
		}
		return cur
	}
	if time.Since(w.lastRefresh) < w.cfg.SchemaRefreshInterval {
		return seen
	}
	w.lastRefresh = time.Now()
	ts, err := w.cat.Describe(ctx, w.cfg.Table)
	switch {
	case err != nil:
		w.warnf("table %s: rows carry fields the table lacks; re-describing it failed: %v", w.cfg.Table, err)
		return seen
	case ts == nil:
		w.errorf("table %s: rows carry fields the table lacks, and the table is gone", w.cfg.Table)
		return seen
	case typemap.SameColumns(ts.Columns, seen.columns):
		w.infof("table %s: rows carry fields the table lacks; re-described it, no new columns (next look in %s; catalog.provision adds them)", w.cfg.Table, w.cfg.SchemaRefreshInterval)
		return seen
	}
	next, err := w.buildState(ctx, ts.Columns, seen.pool)
	if err != nil {
		w.errorf("table %s gained columns, but reopening its streams on them failed: %v", w.cfg.Table, err)
		return seen
	}
	w.infof("table %s gained columns: streams reopened on its new schema", w.cfg.Table)
	w.st.Store(next)
	return next
}

// redescribe handles a SCHEMA_VALIDATION_FAILED from the service: the table
// changed under us. It describes the table afresh and, if its columns
// differ, reopens the pool on them. The failed batch is nacked regardless
// and is converted against the new schema when redelivered.
func (w *Writer) redescribe(ctx context.Context, seen *state) {
	w.schemaMu.Lock()
	defer w.schemaMu.Unlock()
	if w.st.Load() != seen {
		return
	}
	ts, err := w.cat.Describe(ctx, w.cfg.Table)
	if err != nil {
		w.errorf("re-describe table %s after a schema rejection: %v", w.cfg.Table, err)
		return
	}
	if ts == nil {
		w.errorf("re-describe table %s after a schema rejection: the table is gone", w.cfg.Table)
		return
	}
	if typemap.SameColumns(ts.Columns, seen.columns) {
		return
	}
	next, err := w.buildState(ctx, ts.Columns, seen.pool)
	if err != nil {
		w.errorf("reopen streams of %s on the re-described schema: %v", w.cfg.Table, err)
		return
	}
	w.infof("table %s changed under the pipeline: streams reopened on its new schema", w.cfg.Table)
	w.st.Store(next)
}

// reservedColumns are the converter's metadata columns as table columns,
// added to every table the output creates.
func reservedColumns() []typemap.Column {
	rc := arrowconv.ReservedColumns()
	out := make([]typemap.Column, len(rc))
	for i, r := range rc {
		out[i] = r.Column()
	}
	return out
}

// refusedFields maps the column key (typemap.ColumnKey) of a new field the
// catalog refused to add, or that cannot be a column, to why (a string):
// its rows fail saying so. Written under schemaMu, read without it.
type refusedFields struct{ m sync.Map }
