// Table types from the registry schema (Config.SchemaMetadata, the output's
// catalog.schema_metadata): a message that carries the common schema
// schema_registry_decode stored in its metadata gets its table's columns
// from that schema instead of from its values. A table created from such a
// batch takes the registry's types (typemap.FromCommonSchema); a field a new
// schema version adds becomes a column before its rows are converted; a
// field the table cannot take refuses the rows of its schema, naming the
// field, subject, version and schema id, and they go to the dead-letter
// table.

package tablewriter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// ErrRegistrySchema is the class of a row refused because its table cannot
// take a field of the registry schema it carries.
var ErrRegistrySchema = errors.New("the table cannot take the registry schema")

// The metadata schema_registry_decode sets beside the schema, named in
// refusals.
const (
	MetaSchemaID      = "schema_id"
	MetaSchemaSubject = "schema_subject"
	MetaSchemaVersion = "schema_version"
)

// metaRow is a row with metadata: *service.Message.
type metaRow interface {
	MetaGetMut(key string) (any, bool)
}

// registryField is a top-level field of a registry schema as a column.
type registryField struct {
	name     string // as the schema names it
	column   string // its column name (typemap.SafeIdentifier)
	t        typemap.Type
	nullable bool
	err      error // why the field has no column type; t is unset then
}

// registrySchema is a parsed registry schema: its fields as columns, or why
// it cannot be a row at all. Shared by every batch that carries it; never
// changed once made.
type registrySchema struct {
	fields []registryField
	err    error
}

// compileSchema maps a parsed schema (err: why it could not be parsed) onto
// its columns.
func compileSchema(s *commonschema.Schema, err error) *registrySchema {
	if err != nil {
		return &registrySchema{err: err}
	}
	if s.Type != commonschema.Object {
		return &registrySchema{err: fmt.Errorf("the schema is a %v, not a record: a table row needs named fields", s.Type)}
	}
	rs := &registrySchema{}
	seen := map[string]string{}
	for i := range s.Children {
		c := &s.Children[i]
		f := registryField{name: c.Name, column: typemap.SafeIdentifier(c.Name)}
		key := strings.ToLower(f.column)
		if prev, dup := seen[key]; dup {
			return &registrySchema{err: fmt.Errorf("fields %q and %q are one column %q under the column-name rule", prev, c.Name, f.column)}
		}
		seen[key] = c.Name
		f.t, f.nullable, f.err = typemap.FromCommonSchema(c)
		if errors.Is(f.err, typemap.ErrNullOnly) {
			continue // always null: no column, as for an inferred field
		}
		rs.fields = append(rs.fields, f)
	}
	return rs
}

// maxCachedSchemas bounds the parsed schemas a writer keeps: a topic has a
// handful of schema versions; a bound met is cleared and parsed again.
const maxCachedSchemas = 256

// schemaCache holds parsed registry schemas by fingerprint, so that a batch
// parses each of its schemas once, not once per message.
type schemaCache struct {
	mu sync.Mutex
	m  map[string]*registrySchema
}

// get returns the parsed schema of metadata value v: the serialised common
// schema (a map, as schema_registry_decode stores it) or its JSON text (a
// string or bytes, as a metadata value read back from a Kafka header is).
func (c *schemaCache) get(v any) *registrySchema {
	var key string
	switch x := v.(type) {
	case map[string]any:
		key, _ = x["fingerprint"].(string)
	case string:
		key = x
	case []byte:
		key = string(x)
	}
	if key != "" {
		c.mu.Lock()
		s, ok := c.m[key]
		c.mu.Unlock()
		if ok {
			return s
		}
	}
	s := parseSchemaValue(v)
	if key != "" {
		c.mu.Lock()
		if c.m == nil || len(c.m) >= maxCachedSchemas {
			c.m = map[string]*registrySchema{}
		}
		c.m[key] = s
		c.mu.Unlock()
	}
	return s
}

func parseSchemaValue(v any) *registrySchema {
	var text []byte
	switch x := v.(type) {
	case string:
		text = []byte(x)
	case []byte:
		text = x
	}
	if text != nil {
		d := json.NewDecoder(bytes.NewReader(text))
		d.UseNumber()
		var decoded any
		if err := d.Decode(&decoded); err != nil {
			return &registrySchema{err: fmt.Errorf("not a serialised common schema: %w", err)}
		}
		v = decoded
	}
	s, err := commonschema.Parse(v)
	return compileSchema(&s, err)
}

// batchSchemas are the registry schemas of a batch: the distinct ones, and
// each row's (an index into schemas, -1 for a row without one).
type batchSchemas struct {
	schemas []*registrySchema
	of      []int
}

func (b batchSchemas) rowsOf(k int) []int {
	var out []int
	for i, s := range b.of {
		if s == k {
			out = append(out, i)
		}
	}
	return out
}

// schemaValue is the registry schema row i of batch carries in its metadata.
func (a *authority) schemaValue(batch []Row, i int) (any, bool) {
	if a.cfg.SchemaMetadata == "" || i < 0 || i >= len(batch) {
		return nil, false
	}
	m, ok := batch[i].(metaRow)
	if !ok {
		return nil, false
	}
	return m.MetaGetMut(a.cfg.SchemaMetadata)
}

// carriesSchema reports whether row i of batch carries a registry schema:
// its columns then come from that schema, never from its values.
func (a *authority) carriesSchema(batch []Row, i int) bool {
	_, ok := a.schemaValue(batch, i)
	return ok
}

// schemasOf reads the registry schemas of batch; none without
// SchemaMetadata or when no row carries one.
func (a *authority) schemasOf(batch []Row) batchSchemas {
	var bs batchSchemas
	if a.cfg.SchemaMetadata == "" {
		return bs
	}
	// The rows of a batch mostly carry one schema: a row whose schema has
	// the previous row's fingerprint takes its index without the cache.
	lastFP, last := "", -1
	for i := range batch {
		v, ok := a.schemaValue(batch, i)
		if !ok {
			if bs.of != nil {
				bs.of[i] = -1
			}
			continue
		}
		if bs.of == nil {
			bs.of = make([]int, len(batch))
			for k := range i {
				bs.of[k] = -1
			}
		}
		fp := ""
		if m, ok := v.(map[string]any); ok {
			fp, _ = m["fingerprint"].(string)
		}
		if fp != "" && fp == lastFP {
			bs.of[i] = last
			continue
		}
		s := a.schemas.get(v)
		k := slices.Index(bs.schemas, s)
		if k < 0 {
			k = len(bs.schemas)
			bs.schemas = append(bs.schemas, s)
		}
		bs.of[i] = k
		lastFP, last = fp, k
	}
	return bs
}

// schemaOrigin names the registry schema row i carries, from the metadata
// schema_registry_decode sets beside it: `subject "orders-value" version 2
// (schema id 7)`, with what of it is there.
func (a *authority) schemaOrigin(batch []Row, i int) string {
	m, ok := batch[i].(metaRow)
	if !ok {
		return fmt.Sprintf("the registry schema in metadata %q", a.cfg.SchemaMetadata)
	}
	get := func(k string) string {
		v, ok := m.MetaGetMut(k)
		if !ok || v == nil {
			return ""
		}
		return fmt.Sprint(v)
	}
	subject, version, id := get(MetaSchemaSubject), get(MetaSchemaVersion), get(MetaSchemaID)
	var parts []string
	if subject != "" {
		parts = append(parts, fmt.Sprintf("subject %q", subject))
	}
	if version != "" {
		parts = append(parts, "version "+version)
	}
	s := "the registry schema"
	if len(parts) > 0 {
		s += " of " + strings.Join(parts, " ")
	}
	if id != "" {
		s += " (schema id " + id + ")"
	}
	return s
}

// schemaFit is what one registry schema needs of the table of a snapshot:
// columns to add, columns to widen, and the fields it cannot take (the
// rows of the schema are refused).
type schemaFit struct {
	add     []typemap.Column
	widen   []widening
	refused []fieldRefusal
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
// fails the rows that carry a value for it, as for any field.
func (a *authority) fit(seen *snapshot, s *registrySchema, origin string) schemaFit {
	var f schemaFit
	if s.err != nil {
		f.refused = append(f.refused, fieldRefusal{why: s.err.Error()})
		return f
	}
	iceberg := catalog.IcebergReadsOn(seen.table.Properties)
	cols := seen.columns()
	at := make(map[string]int, len(cols))
	for i, c := range cols {
		at[typemap.ColumnKey(c.Name)] = i
	}
	for _, fd := range s.fields {
		if fd.err != nil {
			f.refused = append(f.refused, fieldRefusal{field: fd.name, why: fd.err.Error()})
			continue
		}
		key := typemap.ColumnKey(fd.name)
		i, ok := at[key]
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
// type asked.
func (a *authority) changesFor(seen *snapshot, batch []Row, bs batchSchemas) ([]typemap.Column, []widening) {
	var add []typemap.Column
	var widen []widening
	for k, s := range bs.schemas {
		rows := bs.rowsOf(k)
		f := a.fit(seen, s, a.schemaOrigin(batch, rows[0]))
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
	}
	return add, widen
}

// followSchemas changes the table of seen for the registry schemas of the
// batch (new fields become columns, narrower columns widen) before any of
// its rows is converted, and returns the snapshot to convert on. Under mu,
// the changes are computed again on the current snapshot, so one new
// schema version costs one reconcile however many batches meet it at once.
func (a *authority) followSchemas(ctx context.Context, seen *snapshot, batch []Row, bs batchSchemas) (*snapshot, error) {
	add, widen := a.changesFor(seen, batch, bs)
	if len(add) == 0 && len(widen) == 0 {
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
		if add, widen = a.changesFor(cur, batch, bs); len(add) == 0 && len(widen) == 0 {
			return cur, nil
		}
	}
	return a.applyLocked(ctx, cur, add, widen)
}

// refusedRows are the row errors of the rows of batch whose registry schema
// the table of seen cannot take, by index, each naming the field, the
// subject, version and schema id. Every row of such a schema is refused,
// whatever its values: its schema says the table is the wrong shape for it.
func (a *authority) refusedRows(seen *snapshot, batch []Row, bs batchSchemas) map[int]RowError {
	var out map[int]RowError
	for k, s := range bs.schemas {
		rows := bs.rowsOf(k)
		f := a.fit(seen, s, "")
		if len(f.refused) == 0 {
			continue
		}
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
		err = fmt.Errorf("%w: %s in metadata %q: %s", ErrRegistrySchema, origin, a.cfg.SchemaMetadata, r.why)
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
		s := bs.schemas[bs.of[i]]
		var r fieldRefusal
		switch {
		case s.err != nil:
			r.why = s.err.Error()
		default:
			r.why = "it has no field with a column type"
			for _, f := range s.fields {
				if f.err != nil {
					r = fieldRefusal{field: f.name, why: f.err.Error()}
					break
				}
			}
		}
		rb.errs = append(rb.errs, a.refusal(batch, i, r, 0))
	}
	return rb
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
// returned is the one to convert and send on.
func (w *Writer) followSchemas(ctx context.Context, st *state, rows []Row) (*state, map[int]RowError, error) {
	bs := w.schema.schemasOf(rows)
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
