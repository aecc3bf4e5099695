// The target schema: create on absent, evolve on drift, re-describe on a
// schema rejection, and the desired table handed to the catalog.

package zerobus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// syncMetadata reconciles an existing table's comments, properties and
// writer registration without changing its columns.
func (o *output) syncMetadata(ctx context.Context, state *catalog.TableState) (*catalog.TableState, error) {
	d, err := o.desiredFromColumns(state.Columns)
	if err != nil {
		return nil, err
	}
	out, err := o.cat.Reconcile(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("reconcile table %s: %w", o.cfg.Table, err)
	}
	if err := o.cat.RegisterWriter(ctx, o.cfg.Table, catalog.WriterInfo{ID: o.id, Role: catalog.Role(o.cfg.Role)}); err != nil {
		return nil, fmt.Errorf("register writer on %s: %w", o.cfg.Table, err)
	}
	if out.State != nil {
		return out.State, nil
	}
	return state, nil
}

// desiredFromColumns is the desired table for columns as they are (the live
// ones, plus any to add), with the config's comments, contract, role and
// policies. Existing columns are passed through untouched, so a DECIMAL or
// TIMESTAMP_NTZ column never round-trips through its Arrow wire type.
func (o *output) desiredFromColumns(cols []typemap.Column) (catalog.DesiredTable, error) {
	d := catalog.DesiredTable{FullName: o.cfg.Table, Columns: cols, Comments: map[string]string{}}
	return d, o.applyConfig(&d)
}

// desiredForCreate is the desired table for a table created from the
// fields of a first batch, plus the converter's reserved columns.
func (o *output) desiredForCreate(schema *arrow.Schema) (catalog.DesiredTable, error) {
	d, err := catalog.DesiredFromArrow(o.cfg.Table, schema, reservedColumns()...)
	if err != nil {
		return d, err
	}
	return d, o.applyConfig(&d)
}

// applyConfig sets the role, policies, contract and column descriptions.
func (o *output) applyConfig(d *catalog.DesiredTable) error {
	d.Role = catalog.Role(o.cfg.Role)
	d.AllowWidening = o.cfg.Widen
	d.CommentsPolicy = catalog.Policy(o.cfg.CommentsPolicy)
	if o.cfg.ContractPath != "" {
		c, err := catalog.LoadContract(o.cfg.ContractPath)
		if err != nil {
			return fmt.Errorf("field %s.%s: %w", fCatalog, fContract, err)
		}
		d.ApplyContract(c)
	}
	if d.Comments == nil {
		d.Comments = map[string]string{}
	}
	for k, v := range o.cfg.ColumnDescriptions {
		d.Comments[k] = v
	}
	return nil
}

// structured decodes the messages listed in idx (all when idx is nil) for
// schema inference; undecodable messages are skipped (they fail conversion
// with their own error).
func structured(batch service.MessageBatch, idx []int) []map[string]any {
	var out []map[string]any
	add := func(m *service.Message) {
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
func (o *output) createFromBatch(ctx context.Context, batch service.MessageBatch) (*writeState, error) {
	o.schemaMu.Lock()
	defer o.schemaMu.Unlock()
	if st := o.st.Load(); st != nil && st.pool != nil {
		return st, nil // another batch created it meanwhile
	}
	reserved := map[string]bool{}
	for _, c := range reservedColumns() {
		reserved[strings.ToLower(c.Name)] = true
	}
	fields, conflicts := inferFields(func(n string) bool { return reserved[strings.ToLower(n)] }, structured(batch, nil))
	for _, c := range conflicts {
		o.log.Warnf("table %s: cannot infer a column type: %v", o.cfg.Table, c)
	}
	if len(fields) == 0 {
		return nil, fmt.Errorf("table %s does not exist and no column could be inferred from a batch of %d messages", o.cfg.Table, len(batch))
	}
	d, err := o.desiredForCreate(arrow.NewSchema(fields, nil))
	if err != nil {
		return nil, err
	}
	out, err := o.cat.Reconcile(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("create table %s: %w", o.cfg.Table, err)
	}
	o.log.Infof("table %s provisioned (%d statements)", o.cfg.Table, out.Statements)
	state := out.State
	if state == nil {
		if state, err = o.cat.Describe(ctx, o.cfg.Table); err != nil {
			return nil, fmt.Errorf("describe table %s after create: %w", o.cfg.Table, err)
		}
		if state == nil {
			return nil, fmt.Errorf("table %s still absent after create", o.cfg.Table)
		}
	}
	if err := o.cat.RegisterWriter(ctx, o.cfg.Table, catalog.WriterInfo{ID: o.id, Role: catalog.Role(o.cfg.Role)}); err != nil {
		o.log.Warnf("register writer on %s: %v", o.cfg.Table, err)
	}
	if err := o.checkPrimaryRaw(state); err != nil {
		return nil, err
	}
	st, err := o.buildState(ctx, state.Columns, nil)
	if err != nil {
		return nil, err
	}
	if o.closed.Load() {
		_ = st.pool.Close(ctx)
		return nil, errors.New("zerobus: output closed")
	}
	o.st.Store(st)
	o.startWatch()
	return st, nil
}

// evolve changes the table for the drift of one batch and reopens the pool
// on the new schema: it adds columns for the new fields of the messages
// that failed on an unknown field, and widens the columns in widen (values
// out of range for a narrow numeric column, catalog.widen on). It runs once
// per drift: a caller that finds the state already replaced uses the new
// one. A change the catalog refuses is remembered and left out, the rest
// still applied; the refused rows fail alone.
func (o *output) evolve(ctx context.Context, seen *writeState, batch service.MessageBatch, errs []arrowconv.RowError, widen []widening) (*writeState, error) {
	o.schemaMu.Lock()
	defer o.schemaMu.Unlock()
	if cur := o.st.Load(); cur != seen {
		return cur, nil // someone else evolved the table meanwhile
	}
	add := o.columnsToAdd(seen, batch, errs)
	widen = o.pendingWidenings(widen) // a refusal may have landed meanwhile
	for len(add) > 0 || len(widen) > 0 {
		cols := append([]typemap.Column{}, seen.columns...)
		for _, w := range widen {
			cols[columnIndex(cols, w.column)].Type = w.to
		}
		d, err := o.desiredFromColumns(append(cols, add...))
		if err != nil {
			return nil, err
		}
		what := describeChanges(add, widen)
		o.log.Infof("table %s: %s", o.cfg.Table, what)
		out, err := o.cat.Reconcile(ctx, d)
		var refused *catalog.RefusedError
		if errors.As(err, &refused) {
			// Retrying cannot help: remember what was refused, let its rows
			// fail alone (a fallback output dead-letters them), and apply
			// the rest.
			add, widen = o.dropRefused(refused, add, widen)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("evolve table %s (%s): %w", o.cfg.Table, what, err)
		}
		state := out.State
		if state == nil {
			if state, err = o.cat.Describe(ctx, o.cfg.Table); err != nil || state == nil {
				return nil, fmt.Errorf("describe table %s after evolving: %v", o.cfg.Table, err)
			}
		}
		next, err := o.buildState(ctx, state.Columns, seen.pool)
		if err != nil {
			return nil, err
		}
		o.st.Store(next)
		return next, nil
	}
	return seen, nil
}

// columnsToAdd infers the columns for the new fields of the messages that
// failed on an unknown field, leaving out (and remembering) fields that
// cannot be columns.
func (o *output) columnsToAdd(seen *writeState, batch service.MessageBatch, errs []arrowconv.RowError) []typemap.Column {
	var idx []int
	for _, e := range errs {
		if errors.Is(e.Err, arrowconv.ErrUnknownField) {
			idx = append(idx, e.Index)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	known := func(n string) bool { return seen.names[strings.ToLower(n)] || o.refused[strings.ToLower(n)] }
	fields, conflicts := inferFields(known, structured(batch, idx))
	for _, c := range conflicts {
		o.log.Warnf("table %s: cannot infer a column type for a new field: %v", o.cfg.Table, c)
	}
	add := make([]typemap.Column, 0, len(fields))
	for _, f := range fields {
		t, err := typemap.FromArrow(f.Type)
		if !typemap.ValidIdentifier(f.Name) || err != nil {
			o.log.Warnf("table %s: not adding a column for field %q (not a valid column name or type: %v); its rows fail", o.cfg.Table, f.Name, err)
			o.refused[strings.ToLower(f.Name)] = true
			continue
		}
		add = append(add, typemap.Column{Name: f.Name, Type: t, Nullable: true})
	}
	return add
}

// dropRefused records the catalog's refusals and returns the changes it
// did not refuse. A refusal naming none of the changes (a table-level one)
// refuses them all: nothing could be applied.
func (o *output) dropRefused(refused *catalog.RefusedError, add []typemap.Column, widen []widening) ([]typemap.Column, []widening) {
	reasons := map[string]string{}
	for _, r := range refused.Refusals {
		reasons[strings.ToLower(r.Column)] = r.Reason
	}
	named := func(column string) bool { _, ok := reasons[strings.ToLower(column)]; return ok }
	all := !slices.ContainsFunc(add, func(c typemap.Column) bool { return named(c.Name) }) &&
		!slices.ContainsFunc(widen, func(w widening) bool { return named(w.column) })
	var keepAdd []typemap.Column
	var keepWiden []widening
	var dropped []string
	for _, c := range add {
		if !all && !named(c.Name) {
			keepAdd = append(keepAdd, c)
			continue
		}
		o.refused[strings.ToLower(c.Name)] = true
		dropped = append(dropped, c.Name)
	}
	for _, w := range widen {
		if !all && !named(w.column) {
			keepWiden = append(keepWiden, w)
			continue
		}
		reason, ok := reasons[strings.ToLower(w.column)]
		if !ok {
			reason = refused.Error()
		}
		o.widenRefused.Store(strings.ToLower(w.column), reason)
		dropped = append(dropped, w.column)
	}
	o.log.Errorf("table %s: %v; rows needing %v fail", o.cfg.Table, refused, dropped)
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
	for _, w := range widen {
		parts = append(parts, fmt.Sprintf("value %s (message %d) is out of range for column %q %s: widening it to %s",
			w.sample, w.rows[0], w.column, sqlType(w.from), sqlType(w.to)))
	}
	return strings.Join(parts, "; ")
}

// redescribe handles a SCHEMA_VALIDATION_FAILED from the service: the table
// changed under us. It describes the table afresh and, if its columns
// differ, reopens the pool on them. The failed batch is nacked regardless
// and is converted against the new schema when redelivered.
func (o *output) redescribe(ctx context.Context, seen *writeState) {
	o.schemaMu.Lock()
	defer o.schemaMu.Unlock()
	if o.st.Load() != seen {
		return
	}
	state, err := o.cat.Describe(ctx, o.cfg.Table)
	if err != nil || state == nil {
		o.log.Errorf("re-describe table %s after a schema rejection: %v", o.cfg.Table, err)
		return
	}
	if sameColumns(state.Columns, seen.columns) {
		return
	}
	next, err := o.buildState(ctx, state.Columns, seen.pool)
	if err != nil {
		o.log.Errorf("reopen streams of %s on the re-described schema: %v", o.cfg.Table, err)
		return
	}
	o.log.Infof("table %s changed under the pipeline: streams reopened on its new schema", o.cfg.Table)
	o.st.Store(next)
}

func sameColumns(a, b []typemap.Column) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Nullable != b[i].Nullable || !a[i].Type.Equal(b[i].Type) {
			return false
		}
	}
	return true
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
