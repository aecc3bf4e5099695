// What the schema authority asks of the catalog: the desired table (its
// columns, comments, contract and policies), the columns a drift adds, and
// the memory of what the catalog refused.

package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// syncMetadata reconciles an existing table's comments, properties and
// writer registration without changing its columns, except to add the
// reserved columns in add (coverage turned on for an existing table).
func (a *authority) syncMetadata(ctx context.Context, ts *catalog.TableState, add []typemap.Column) (*catalog.TableState, error) {
	if len(add) > 0 {
		names := make([]string, len(add))
		for i, c := range add {
			names[i] = c.Name
		}
		a.infof("table %s: adding the reserved columns it lacks: %s", a.cfg.Table, strings.Join(names, ", "))
	}
	out, err := a.cat.Reconcile(ctx, a.desiredFromColumns(append(slices.Clone(ts.Columns), add...)))
	if err != nil {
		return nil, fmt.Errorf("reconcile table %s: %w", a.cfg.Table, err)
	}
	if err := a.cat.RegisterWriter(ctx, a.cfg.Table, catalog.WriterInfo{ID: a.cfg.WriterID, Role: a.cfg.Role}); err != nil {
		return nil, fmt.Errorf("register writer on %s: %w", a.cfg.Table, err)
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
func (a *authority) desiredFromColumns(cols []typemap.Column) catalog.DesiredTable {
	d := catalog.DesiredTable{FullName: a.cfg.Table, Columns: cols, Comments: map[string]string{}}
	a.applyConfig(&d)
	return d
}

// desiredForCreate is the desired table for a table created from the
// fields of a first batch, plus the converter's reserved columns.
func (a *authority) desiredForCreate(schema *arrow.Schema) (catalog.DesiredTable, error) {
	d, err := catalog.DesiredFromArrow(a.cfg.Table, schema, a.reserved...)
	if err != nil {
		return d, err
	}
	a.applyConfig(&d)
	return d, nil
}

// applyConfig sets the role, policies, contract, column descriptions and
// deduplicating view.
// The contract was loaded once, by the caller of New.
func (a *authority) applyConfig(d *catalog.DesiredTable) {
	d.Role = a.cfg.Role
	d.AllowWidening = a.cfg.Widen
	d.CommentsPolicy = a.cfg.CommentsPolicy
	if a.cfg.Comment != "" {
		d.Comment = a.cfg.Comment
	}
	if a.cfg.Contract != nil {
		d.ApplyContract(a.cfg.Contract)
	}
	if d.Comments == nil {
		d.Comments = map[string]string{}
	}
	for k, v := range a.cfg.ColumnDescriptions {
		d.Comments[k] = v
	}
	// The view partitions by the source position columns, which only a
	// writer with coverage has (not the dead-letter table's writer, made
	// from the same config without it).
	if a.cfg.DedupView && a.cfg.Coverage != nil {
		d.DedupView = a.cfg.DedupViewName
		if d.DedupView == "" {
			d.DedupView = catalog.DefaultDedupView(a.cfg.Table)
		}
	}
}

// structured decodes the messages listed in idx (all when idx is nil) for
// schema inference; undecodable messages are skipped (they fail conversion
// with their own error).
func structured(batch []Row, idx []int) []map[string]any {
	var out []map[string]any
	add := func(m Row) {
		if obj, ok := asObject(m); ok {
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

// asObject is the message m decoded (Row.AsStructured), when it is a JSON
// object.
func asObject(m Row) (map[string]any, bool) {
	v, err := m.AsStructured()
	if err != nil {
		return nil, false
	}
	obj, ok := v.(map[string]any)
	return obj, ok
}

// create creates the absent table d (the coverage table) through the
// writer's catalog (createTable).
func (w *Writer) create(ctx context.Context, d catalog.DesiredTable, what string) (*catalog.TableState, int, error) {
	return w.schema.createTable(ctx, d, what)
}

// createTable creates the absent table d and returns it as described (by
// the catalog's reconcile, or afresh when the catalog returned no state)
// and the statements it took; what names the table's kind in errors. The
// config's CreateProperties are set on a table only when it is created.
// The writer's own table is created with the writer's registration
// (catalog.WriterProperty) in it, so that the RegisterWriter after the
// create finds it recorded: a provisioned table costs one describe before,
// the CREATE and one describe after, not three more calls (read the
// properties, ALTER, describe again) on the rate-limited catalog API.
func (a *authority) createTable(ctx context.Context, d catalog.DesiredTable, what string) (*catalog.TableState, int, error) {
	own := d.FullName == a.cfg.Table && a.cfg.WriterID != ""
	if len(a.cfg.CreateProperties) > 0 || own {
		d.Properties = maps.Clone(d.Properties)
		if d.Properties == nil {
			d.Properties = map[string]string{}
		}
		maps.Copy(d.Properties, a.cfg.CreateProperties)
	}
	if own {
		k, v := catalog.WriterProperty(catalog.WriterInfo{ID: a.cfg.WriterID, Role: a.cfg.Role})
		d.Properties[k] = v
	}
	out, err := a.cat.Reconcile(ctx, d)
	if err != nil {
		return nil, 0, fmt.Errorf("create %s %s: %w", what, d.FullName, err)
	}
	a.creates.Add(1)
	ts := out.State
	if ts == nil {
		if ts, err = a.cat.Describe(ctx, d.FullName); err != nil {
			return nil, 0, fmt.Errorf("describe %s %s after create: %w", what, d.FullName, err)
		}
		if ts == nil {
			return nil, 0, fmt.Errorf("%s %s still absent after create", what, d.FullName)
		}
	}
	return ts, out.Statements, nil
}

// columnsToAdd infers the columns for the new fields of the messages that
// failed on an unknown field, leaving out (and remembering) fields that
// cannot be columns.
func (a *authority) columnsToAdd(seen *snapshot, batch []Row, errs []arrowconv.RowError) []typemap.Column {
	var idx []int
	for _, e := range errs {
		// A row carrying its registry schema gets its columns from it
		// (registryschema.go), never inferred from its values.
		if errors.Is(e.Err, arrowconv.ErrUnknownField) && !a.carriesSchema(batch, e.Index) {
			idx = append(idx, e.Index)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	known := func(n string) bool {
		_, refused := a.refused.Load(typemap.ColumnKey(n))
		return seen.has(n) || refused
	}
	fields, conflicts := inferFields(known, structured(batch, idx))
	for _, c := range conflicts {
		a.warnf("table %s: messages disagree on a new field's type: %s", a.cfg.Table, c)
	}
	fields = a.creatable(fields)
	add := make([]typemap.Column, 0, len(fields))
	for _, f := range fields {
		t, err := typemap.FromArrow(f.Type)
		if err != nil {
			a.warnf("table %s: not adding a column for field %s (%v); its rows fail", a.cfg.Table, arrowconv.Quote(f.Name), err)
			a.refused.Store(typemap.ColumnKey(f.Name), err.Error())
			continue
		}
		add = append(add, typemap.Column{Name: f.Name, Type: t, Nullable: true})
	}
	return add
}

// annotateRefusedFields adds to the unknown-field errors of errs why the
// field has no column, when the catalog refused to add it or it cannot be
// one, so its dead letter says why.
func (a *authority) annotateRefusedFields(errs []arrowconv.RowError) {
	for k, e := range errs {
		if !errors.Is(e.Err, arrowconv.ErrUnknownField) {
			continue
		}
		if why, ok := a.refused.Load(typemap.ColumnKey(e.Column)); ok {
			errs[k].Err = fmt.Errorf("%w (no column was added for it: %s)", e.Err, why)
		}
	}
}

// dropRefused records the catalog's refusals and returns the changes it
// did not refuse. A refusal naming none of the changes (a table-level one)
// refuses them all: nothing could be applied.
func (a *authority) dropRefused(refused *catalog.RefusedError, add []typemap.Column, widen []widening, relax []relaxing) ([]typemap.Column, []widening, []relaxing) {
	reasons := map[string]string{}
	for _, r := range refused.Refusals {
		reasons[strings.ToLower(r.Column)] = r.Reason
	}
	named := func(column string) bool { _, ok := reasons[strings.ToLower(column)]; return ok }
	all := !slices.ContainsFunc(add, func(c typemap.Column) bool { return named(c.Name) }) &&
		!slices.ContainsFunc(widen, func(x widening) bool { return named(x.column) }) &&
		!slices.ContainsFunc(relax, func(x relaxing) bool { return named(x.column) })
	// refusal is why column's change was refused; false when it was not.
	refusal := func(column string) (string, bool) {
		if reason, ok := reasons[strings.ToLower(column)]; ok {
			return reason, true
		}
		return refused.Error(), all
	}
	var dropped []string
	keepAdd := keepUnrefused(add, func(c typemap.Column) string { return c.Name }, refusal, &dropped, func(col, reason string) {
		a.refused.Store(typemap.ColumnKey(col), "the catalog refused it: "+reason)
	})
	keepWiden := keepUnrefused(widen, func(w widening) string { return w.column }, refusal, &dropped, func(col, reason string) {
		a.widenRefused.Store(strings.ToLower(col), reason)
	})
	keepRelax := keepUnrefused(relax, func(r relaxing) string { return r.column }, refusal, &dropped, func(col, reason string) {
		a.relaxRefused.Store(strings.ToLower(col), reason)
	})
	a.errorf("table %s: %v; rows needing %v fail", a.cfg.Table, refused, dropped)
	return keepAdd, keepWiden, keepRelax
}

// keepUnrefused returns the changes whose column (column) refusal does not
// refuse; each refused one is remembered (remember) and its column added
// to dropped.
func keepUnrefused[T any](changes []T, column func(T) string, refusal func(string) (string, bool), dropped *[]string, remember func(col, reason string)) []T {
	var keep []T
	for _, c := range changes {
		col := column(c)
		reason, ok := refusal(col)
		if !ok {
			keep = append(keep, c)
			continue
		}
		remember(col, reason)
		*dropped = append(*dropped, col)
	}
	return keep
}

// describeChanges is the log line of an evolution.
func describeChanges(add []typemap.Column, widen []widening, relax []relaxing) string {
	var parts []string
	if len(add) > 0 {
		names := make([]string, len(add))
		for i, c := range add {
			names[i] = c.Name
		}
		parts = append(parts, fmt.Sprintf("messages carry new fields %v: adding columns", names))
	}
	for _, wd := range widen {
		if len(wd.rows) == 0 {
			// A widening the registry schema asks for (catalog.schema_metadata).
			parts = append(parts, fmt.Sprintf("the registry schema %s declares field %q as %s: widening column %q %s to it",
				wd.sample, wd.column, sqlType(wd.to), wd.column, sqlType(wd.from)))
			continue
		}
		parts = append(parts, fmt.Sprintf("value %s (message %d) is out of range for column %q %s: widening it to %s",
			wd.sample, wd.rows[0], wd.column, sqlType(wd.from), sqlType(wd.to)))
	}
	for _, r := range relax {
		parts = append(parts, fmt.Sprintf("the registry schema %s declares field %q optional: dropping NOT NULL on column %q", r.sample, r.field, r.column))
	}
	return strings.Join(parts, "; ")
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
