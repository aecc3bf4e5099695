// The target schema: create on absent, evolve on drift, re-describe on a
// schema rejection, and the desired table handed to the catalog.

package zerobus

import (
	"context"
	"errors"
	"fmt"
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
	st, err := o.buildState(ctx, 1, state.Columns, nil)
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

// evolve adds columns for the new fields of the messages that failed on an
// unknown field, then reopens the pool on the new schema. It runs once per
// drift: a caller that finds the state already replaced uses the new one.
func (o *output) evolve(ctx context.Context, seen *writeState, batch service.MessageBatch, errs []arrowconv.RowError) (*writeState, error) {
	o.schemaMu.Lock()
	defer o.schemaMu.Unlock()
	if cur := o.st.Load(); cur != seen {
		return cur, nil // someone else evolved the table meanwhile
	}
	var idx []int
	for _, e := range errs {
		if errors.Is(e.Err, arrowconv.ErrUnknownField) {
			idx = append(idx, e.Index)
		}
	}
	known := func(n string) bool { return seen.names[strings.ToLower(n)] || o.refused[strings.ToLower(n)] }
	fields, conflicts := inferFields(known, structured(batch, idx))
	for _, c := range conflicts {
		o.log.Warnf("table %s: cannot infer a column type for a new field: %v", o.cfg.Table, c)
	}
	add := make([]typemap.Column, 0, len(fields))
	var names []string
	for _, f := range fields {
		t, err := typemap.FromArrow(f.Type)
		if !typemap.ValidIdentifier(f.Name) || err != nil {
			o.log.Warnf("table %s: not adding a column for field %q (not a valid column name or type: %v); its rows fail", o.cfg.Table, f.Name, err)
			o.refused[strings.ToLower(f.Name)] = true
			continue
		}
		add = append(add, typemap.Column{Name: f.Name, Type: t, Nullable: true})
		names = append(names, f.Name)
	}
	if len(add) == 0 {
		return seen, nil
	}
	d, err := o.desiredFromColumns(append(append([]typemap.Column{}, seen.columns...), add...))
	if err != nil {
		return nil, err
	}
	o.log.Infof("table %s: messages carry new fields %v: adding columns", o.cfg.Table, names)
	out, err := o.cat.Reconcile(ctx, d)
	var refused *catalog.RefusedError
	if errors.As(err, &refused) {
		// Retrying cannot help: remember the fields, let their rows fail
		// alone (a fallback output dead-letters them), keep writing.
		o.log.Errorf("table %s: %v; rows carrying %v fail", o.cfg.Table, err, names)
		for _, n := range names {
			o.refused[strings.ToLower(n)] = true
		}
		return seen, nil
	}
	if err != nil {
		return nil, fmt.Errorf("add columns %v to %s: %w", names, o.cfg.Table, err)
	}
	state := out.State
	if state == nil {
		if state, err = o.cat.Describe(ctx, o.cfg.Table); err != nil || state == nil {
			return nil, fmt.Errorf("describe table %s after evolving: %v", o.cfg.Table, err)
		}
	}
	next, err := o.buildState(ctx, seen.gen+1, state.Columns, seen.pool)
	if err != nil {
		return nil, err
	}
	o.st.Store(next)
	return next, nil
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
	next, err := o.buildState(ctx, seen.gen+1, state.Columns, seen.pool)
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
