// What a table does with the registry schemas a batch carries: the
// columns a created table takes from them, the columns a new schema
// version adds, widens or relaxes (drops NOT NULL on) before its rows are
// converted, and the rows of a
// schema the table cannot take, refused naming the field, subject, version
// and schema id (Config.SchemaMetadata; the schemas are read in
// registryschema.go).

package tablewriter

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// schemaFit is what one registry schema needs of the table of a snapshot:
// columns to add, columns to widen, NOT NULL columns to relax, and the
// fields it cannot take (the rows of the schema are refused).
type schemaFit struct {
	add     []typemap.Column
	widen   []widening
	relax   []relaxing
	refused []fieldRefusal
}

// relaxing is one NOT NULL column a registry schema declares optional: its
// NOT NULL is dropped before the schema's rows are converted, so a null
// lands instead of failing the row.
type relaxing struct {
	column string // the live column name
	field  string // the schema's field
	sample string // the schema, for the log line
}

type fieldRefusal struct {
	field, why string
}

// fit compares schema s with the columns of seen. A field matches its
// column by the column-name rule. A column of the schema's type, or wider
// (a lossless widening of it: INT32 into BIGINT, DECIMAL(10,2) into
// DECIMAL(12,2)), takes the field. A column narrower than the field is
// widened with catalog.provision and catalog.widen (typemap.CanWiden;
// Iceberg reads allow fewer), and refused otherwise; any other difference
// is refused. A field the table lacks is added with provisioning (always
// nullable: Delta adds only nullable columns); without it the converter
// fails the rows that carry a value for it, as for any field. An optional
// field whose column is NOT NULL relaxes the column (DROP NOT NULL) with
// provisioning; without it the converter fails the rows carrying null for
// it, naming the field and NOT NULL. Only top-level columns are relaxed: a
// nested field made optional inside a STRUCT is left to the converter,
// which fails its nulls. A field made required never adds NOT NULL.
func (a *authority) fit(seen *snapshot, s *registrySchema, origin string) schemaFit {
	var f schemaFit
	if s.err != nil {
		f.refused = append(f.refused, fieldRefusal{why: s.err.Error()})
		return f
	}
	iceberg := catalog.IcebergReadsOn(seen.table.Properties)
	cols := seen.columns()
	for _, fd := range s.fields {
		if fd.err != nil {
			f.refused = append(f.refused, fieldRefusal{field: fd.name, why: fd.err.Error()})
			continue
		}
		key := typemap.ColumnKey(fd.name)
		i, ok := seen.keys[key]
		if !ok {
			if why, refused := a.refused.Load(key); refused {
				f.refused = append(f.refused, fieldRefusal{field: fd.name, why: "no column was added for it: " + why.(string)})
				continue
			}
			if a.cfg.Provision && len(fd.column) <= maxColumnName {
				f.add = append(f.add, typemap.Column{Name: fd.column, Type: fd.t, Nullable: true})
			}
			continue
		}
		lc := cols[i]
		if fd.nullable && !lc.Nullable && a.cfg.Provision {
			if _, refused := a.relaxRefused.Load(strings.ToLower(lc.Name)); !refused {
				f.relax = append(f.relax, relaxing{column: lc.Name, field: fd.name, sample: origin})
			}
		}
		switch {
		case lc.Type.SameShape(fd.t), typemap.CanWiden(fd.t, lc.Type, false):
			// Every value of the field fits the column.
		case typemap.CanWiden(lc.Type, fd.t, iceberg) && a.cfg.Provision && a.cfg.Widen:
			if why, refused := a.widenRefusal(lc.Name); refused {
				f.refused = append(f.refused, fieldRefusal{field: fd.name,
					why: fmt.Sprintf("column %q is %s, narrower than the schema's %s, and widening it was refused: %s", lc.Name, sqlType(lc.Type), sqlType(fd.t), why)})
				continue
			}
			f.widen = append(f.widen, widening{column: lc.Name, from: lc.Type, to: fd.t, sample: origin})
		case typemap.CanWiden(lc.Type, fd.t, iceberg):
			f.refused = append(f.refused, fieldRefusal{field: fd.name,
				why: fmt.Sprintf("column %q is %s, narrower than the schema's %s: with catalog.provision and catalog.widen on the output widens it first", lc.Name, sqlType(lc.Type), sqlType(fd.t))})
		case typemap.CanWiden(lc.Type, fd.t, false):
			f.refused = append(f.refused, fieldRefusal{field: fd.name,
				why: fmt.Sprintf("column %q is %s, narrower than the schema's %s, and the table has Iceberg reads on, which allow only INT to BIGINT, FLOAT to DOUBLE and DECIMAL precision at one scale", lc.Name, sqlType(lc.Type), sqlType(fd.t))})
		default:
			f.refused = append(f.refused, fieldRefusal{field: fd.name,
				why: fmt.Sprintf("column %q is %s; the schema's %s does not fit it (no lossless widening leads from one to the other)", lc.Name, sqlType(lc.Type), sqlType(fd.t))})
		}
	}
	return f
}

// changesFor merges what the batch's schemas need of seen: each new column
// once (of two schemas adding one field with different types, the wider
// when one widens to the other, else the first: the other schema's rows
// are refused once the column exists), each widening once, to the widest
// type asked, each NOT NULL column to relax once.
func (a *authority) changesFor(seen *snapshot, batch []Row, bs batchSchemas) ([]typemap.Column, []widening, []relaxing) {
	var add []typemap.Column
	var widen []widening
	var relax []relaxing
	for k, s := range bs.schemas {
		f := a.fit(seen, s, a.schemaOrigin(batch, bs.firstOf(k)))
		for _, c := range f.add {
			j := slices.IndexFunc(add, func(x typemap.Column) bool { return typemap.ColumnKey(x.Name) == typemap.ColumnKey(c.Name) })
			switch {
			case j < 0:
				add = append(add, c)
			case typemap.CanWiden(add[j].Type, c.Type, false):
				add[j].Type = c.Type
			}
		}
		for _, wd := range f.widen {
			j := slices.IndexFunc(widen, func(x widening) bool { return x.column == wd.column })
			switch {
			case j < 0:
				widen = append(widen, wd)
			case typemap.CanWiden(widen[j].to, wd.to, false):
				widen[j] = wd
			}
		}
		for _, r := range f.relax {
			if !slices.ContainsFunc(relax, func(x relaxing) bool { return x.column == r.column }) {
				relax = append(relax, r)
			}
		}
	}
	return add, widen, relax
}

// followSchemas changes the table of seen for the registry schemas of the
// batch (new fields become columns, narrower columns widen, NOT NULL
// columns of optional fields drop NOT NULL) before any of
// its rows is converted, and returns the snapshot to convert on. Under mu,
// the changes are computed again on the current snapshot, so one new
// schema version costs one reconcile however many batches meet it at once.
func (a *authority) followSchemas(ctx context.Context, seen *snapshot, batch []Row, bs batchSchemas) (*snapshot, error) {
	add, widen, relax := a.changesFor(seen, batch, bs)
	if len(add) == 0 && len(widen) == 0 && len(relax) == 0 {
		return seen, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ctx, done := a.bound(ctx)
	defer done()
	cur := a.current()
	if cur == nil {
		return nil, errDropped
	}
	if cur != seen {
		if add, widen, relax = a.changesFor(cur, batch, bs); len(add) == 0 && len(widen) == 0 && len(relax) == 0 {
			return cur, nil
		}
	}
	return a.applyLocked(ctx, cur, add, widen, relax)
}

// refusedRows are the row errors of the rows of batch whose registry schema
// the table of seen cannot take, by index, each naming the field, the
// subject, version and schema id. Every row of such a schema is refused,
// whatever its values: its schema says the table is the wrong shape for it.
func (a *authority) refusedRows(seen *snapshot, batch []Row, bs batchSchemas) map[int]RowError {
	var out map[int]RowError
	for k, s := range bs.schemas {
		f := a.fit(seen, s, "")
		if len(f.refused) == 0 {
			continue
		}
		rows := bs.rowsOf(k)
		if out == nil {
			out = map[int]RowError{}
		}
		for _, i := range rows {
			out[i] = a.refusal(batch, i, f.refused[0], len(f.refused)-1)
		}
	}
	return out
}

// refusal is the row error of row i of batch, refused for r (and more
// fields besides), naming the field, the subject, version and schema id.
func (a *authority) refusal(batch []Row, i int, r fieldRefusal, more int) RowError {
	origin := a.schemaOrigin(batch, i)
	var err error
	if r.field == "" {
		err = fmt.Errorf("%w: %s %s: %s", ErrRegistrySchema, origin, a.schemaWhere(), r.why)
	} else {
		err = fmt.Errorf("%w: field %q of %s: %s", ErrRegistrySchema, r.field, origin, r.why)
		if more > 0 {
			err = fmt.Errorf("%w (and %d more fields)", err, more)
		}
	}
	col := ""
	if r.field != "" {
		col = typemap.SafeIdentifier(r.field)
	}
	return RowError{Index: i, Column: col, Err: err}
}

// refusedBatch is the answer to a first batch whose every row carries a
// registry schema no column can be made of: no table is created, and its
// rows fail alone (to the dead-letter table), each saying why, instead of
// holding the batch for ever.
type refusedBatch struct {
	errs []RowError
}

func (r *refusedBatch) Error() string {
	return fmt.Sprintf("no column can be made from the registry schemas of the batch (first: %v)", r.errs[0])
}

// refuseAll is the refusedBatch of batch when every row carries a registry
// schema and none of them gives a column; nil otherwise.
func (a *authority) refuseAll(batch []Row, bs batchSchemas) *refusedBatch {
	if len(bs.schemas) == 0 || slices.Contains(bs.of, -1) {
		return nil
	}
	rb := &refusedBatch{}
	for i := range batch {
		r, _ := noColumn(bs.schemas[bs.of[i]])
		rb.errs = append(rb.errs, a.refusal(batch, i, r, 0))
	}
	return rb
}

// noColumn is why schema s gives no column: its own error, its first
// field's, or, when neither (found false), that it has no field with a
// column type.
func noColumn(s *registrySchema) (r fieldRefusal, found bool) {
	if s.err != nil {
		return fieldRefusal{why: s.err.Error()}, true
	}
	for _, f := range s.fields {
		if f.err != nil {
			return fieldRefusal{field: f.name, why: f.err.Error()}, true
		}
	}
	return fieldRefusal{why: "it has no field with a column type"}, false
}

// createColumns are the columns a table created from batch takes from the
// registry schemas its rows carry, in the order of their fields (the
// schemas in the order the batch carries them), with the schemas'
// nullability: a field is NOT NULL only when every schema of the batch has
// it and none makes it optional. A field two schemas type differently
// takes the wider type when one widens to the other, else the first
// schema's (the other schema's rows are then refused). Fields whose name is
// one of skip's keys (the reserved columns) are left out; fields that have
// no column type are left out, and their schema's rows refused.
func (a *authority) createColumns(bs batchSchemas, skip map[string]bool) []typemap.Column {
	var cols []typemap.Column
	count := map[string]int{}
	for _, s := range bs.schemas {
		if s.err != nil {
			continue
		}
		for _, fd := range s.fields {
			key := typemap.ColumnKey(fd.name)
			if fd.err != nil || skip[key] || len(fd.column) > maxColumnName {
				continue
			}
			count[key]++
			j := slices.IndexFunc(cols, func(c typemap.Column) bool { return typemap.ColumnKey(c.Name) == key })
			if j < 0 {
				cols = append(cols, typemap.Column{Name: fd.column, Type: fd.t, Nullable: fd.nullable})
				continue
			}
			cols[j].Nullable = cols[j].Nullable || fd.nullable
			if typemap.CanWiden(cols[j].Type, fd.t, false) {
				cols[j].Type = fd.t
			}
		}
	}
	valid := 0
	for _, s := range bs.schemas {
		if s.err == nil {
			valid++
		}
	}
	for j := range cols {
		if count[typemap.ColumnKey(cols[j].Name)] < valid {
			cols[j].Nullable = true // a schema of the batch lacks it
		}
	}
	return cols
}

// columnsText lists columns for a log line: "id BIGINT NOT NULL, amount
// DECIMAL(10,2)".
func columnsText(cols []typemap.Column) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = c.Name + " " + sqlType(c.Type)
		if !c.Nullable {
			parts[i] += " NOT NULL"
		}
	}
	return strings.Join(parts, ", ")
}

// followSchemas is the write path's step for registry schemas: the table
// follows the batch's schemas (authority.followSchemas), and the rows of a
// schema it cannot take come back, by index, to fail alone. The state
// returned is the one to convert and send on. decodes are rows' decodes.
func (w *Writer) followSchemas(ctx context.Context, st *state, rows []Row, decodes *batchDecodes) (*state, map[int]RowError, error) {
	bs, err := w.schema.schemasOf(ctx, rows, decodes)
	if err != nil {
		return nil, nil, err
	}
	if len(bs.schemas) == 0 {
		return st, nil, nil
	}
	snap, err := w.schema.followSchemas(ctx, st.snap, rows, bs)
	if err != nil {
		return nil, nil, err
	}
	if snap != st.snap {
		if st = w.st.Load(); st == nil || st.pool == nil {
			return nil, nil, errDropped
		}
	}
	refused := w.schema.refusedRows(st.snap, rows, bs)
	if len(refused) > 0 && w.schema.recheck(ctx, st.snap) != st.snap {
		// The table changed (a column widened or added by hand): look
		// again on it.
		if st = w.st.Load(); st == nil || st.pool == nil {
			return nil, nil, errDropped
		}
		refused = w.schema.refusedRows(st.snap, rows, bs)
	}
	return st, refused, nil
}

// recheck re-describes the table when rows of a batch (seen on seen) carry
// a registry schema it cannot take, at most once per
// SchemaRefreshInterval: a column someone widened or added by hand since
// takes them from then on. It returns the snapshot to look again on (seen
// when nothing changed).
func (a *authority) recheck(ctx context.Context, seen *snapshot) *snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	ctx, done := a.bound(ctx)
	defer done()
	switch cur := a.current(); {
	case cur == nil:
		return seen
	case cur != seen:
		return cur
	}
	if time.Since(a.lastRefresh) < a.cfg.SchemaRefreshInterval {
		return seen
	}
	a.lastRefresh = time.Now()
	ts, err := a.cat.Describe(ctx, a.cfg.Table)
	if err != nil || ts == nil || sameTable(ts, seen) {
		return seen
	}
	next, err := a.switchTo(ctx, ts)
	if err != nil {
		a.errorf("table %s changed, but reopening its streams on it failed: %v", a.cfg.Table, err)
		return seen
	}
	a.infof("table %s changed under the pipeline: streams reopened on its new schema, and the registry schemas it refused are looked at again", a.cfg.Table)
	return next
}

// withoutRows is order (all n rows when nil) without the rows in skip.
func withoutRows(order []int, n int, skip map[int]RowError) []int {
	if len(skip) == 0 {
		return order
	}
	if order == nil {
		order = make([]int, 0, n)
		for i := range n {
			order = append(order, i)
		}
	}
	return slices.DeleteFunc(slices.Clone(order), func(i int) bool { _, ok := skip[i]; return ok })
}
