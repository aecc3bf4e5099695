// The rescue column: fields that do not fit the table are kept in one
// VARIANT object per row instead of failing the row.

package tablewriter

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// The Zerobus service offers a rescue column for JSON records only (Beta: a
// nullable VARIANT column with the Unity Catalog tag `zerobus-rescue`
// collects, as one object, the fields the table lacks and the values whose
// type does not match a nullable column; with Protocol Buffers or Arrow
// "non-conforming fields are rejected rather than rescued"; Databricks docs,
// "Zerobus rescue column",
// https://docs.databricks.com/aws/en/ingestion/zerobus-rescue-column). The
// table writer offers the same on its Arrow path, client-side: with
// Config.Rescue set, a field the table has no column for (and cannot add),
// or whose value does not fit its column, is moved into the row's rescue
// object {field: value, …} and the row is converted again; its other
// fields land as usual. Rows that fail for another reason (not JSON, not an
// object, a NOT NULL column missing) still fail.

// RescueUnknownField is the column label a rescued unknown field is counted
// under (its own name is unbounded, so no label of its own).
const RescueUnknownField = "(unknown field)"

// RescueObserver is an Observer that also counts rescued fields, by the
// column they did not fit (RescueUnknownField for fields without one).
type RescueObserver interface {
	Rescued(column string, n int)
}

// rescueColumn is the rescue column as the table has it.
func rescueColumn(name string) typemap.Column {
	return typemap.Column{Name: name, Type: typemap.Primitive(typemap.Variant), Nullable: true,
		Comment: "Fields of the message that did not fit the table (unknown fields, values that do not fit their column), as one object per row; NULL when every field fit."}
}

// missingRescueColumn returns the rescue column when cols lacks it (nil
// when it has it or there is none); a rescue column that is not VARIANT is
// an error, and so is a missing one without provisioning.
func (w *Writer) missingRescueColumn(cols []typemap.Column) ([]typemap.Column, error) {
	name := w.cfg.Rescue
	if name == "" {
		return nil, nil
	}
	i := slices.IndexFunc(cols, func(c typemap.Column) bool { return strings.EqualFold(c.Name, name) })
	if i >= 0 {
		if cols[i].Type.Kind != typemap.Variant {
			return nil, fmt.Errorf("table %s: rescue column %s is %s, want VARIANT", w.cfg.Table, cols[i].Name, strings.ToUpper(cols[i].Type.DDL()))
		}
		return nil, nil
	}
	if !w.cfg.Provision {
		return nil, fmt.Errorf("table %s lacks the rescue column %s: add it (ALTER TABLE %s ADD COLUMNS (%s VARIANT)) or enable catalog.provision",
			w.cfg.Table, name, w.cfg.Table, typemap.QuoteIdent(name))
	}
	return []typemap.Column{rescueColumn(name)}, nil
}

// rescuable reports whether the rescue column can take the field of a row
// error: an unknown or duplicate field, or a value that does not fit.
func rescuable(re RowError) bool {
	if re.Field == "" {
		return false
	}
	for _, kind := range []error{arrowconv.ErrUnknownField, arrowconv.ErrDuplicateField, arrowconv.ErrTypeMismatch,
		arrowconv.ErrOutOfRange, arrowconv.ErrInvalidValue, arrowconv.ErrNestedIntoString, arrowconv.ErrTZIntoNTZ} {
		if errors.Is(re.Err, kind) {
			return true
		}
	}
	return false
}

// rescueRow is a message with fields moved into its rescue object: a Row
// holding the edited value.
type rescueRow struct {
	m   map[string]any // the message, without the rescued fields
	obj map[string]any // the rescued fields, under their own names
	// columns are the columns (RescueUnknownField for unknown fields) of
	// the rescued fields, for the metric.
	columns []string
}

func (r *rescueRow) AsBytes() ([]byte, error)   { return json.Marshal(r.m) }
func (r *rescueRow) HasStructured() bool        { return true }
func (r *rescueRow) AsStructured() (any, error) { return r.m, nil }

// newRescueRow decodes row for editing; nil when it is not a JSON object.
func newRescueRow(row Row) *rescueRow {
	m, ok := asObject(row)
	if !ok {
		return nil
	}
	return &rescueRow{m: maps.Clone(m)}
}

// take moves the field of re into the rescue object under col; false when
// there is nothing to move (the field is gone, or is the rescue object
// itself).
func (r *rescueRow) take(re RowError, col string) bool {
	key, ok := "", false
	if _, exact := r.m[re.Field]; exact {
		key, ok = re.Field, true
	} else {
		want := typemap.ColumnKey(re.Field)
		for k := range r.m {
			if typemap.ColumnKey(k) == want {
				key, ok = k, true
				break
			}
		}
	}
	colKey := typemap.ColumnKey(col)
	if !ok || (r.obj != nil && typemap.ColumnKey(key) == colKey) {
		return false
	}
	v := r.m[key]
	delete(r.m, key)
	if r.obj == nil {
		// The message's own fields named like the rescue column are
		// rescued too, under their own names: the rescue object takes
		// their place, so their values would otherwise be lost.
		r.obj = map[string]any{}
		r.moveNamedLike(colKey)
	}
	r.obj[key] = v
	r.m[col] = r.obj
	label := re.Field
	if errors.Is(re.Err, arrowconv.ErrUnknownField) || errors.Is(re.Err, arrowconv.ErrDuplicateField) {
		label = RescueUnknownField
	}
	r.columns = append(r.columns, label)
	return true
}

// maxRescueRounds bounds the conversions a batch's rescue takes: each round
// moves one field of every failing row.
const maxRescueRounds = 16

// rescue converts batch again with the fields of its failed rows moved into
// their rescue objects, round after round, until no failed row has a field
// left to move. res (released when replaced) is the batch's conversion so
// far; convert converts a batch against the current state. A value of a
// NOT NULL column (in cols) is never moved: the row would only fail as
// missing it, so it keeps its own error.
func (w *Writer) rescue(batch []Row, cols []typemap.Column, res arrowconv.Result, convert func(batch []Row) (arrowconv.Result, error)) (arrowconv.Result, error) {
	if w.cfg.Rescue == "" {
		return res, nil
	}
	rescued := map[int]*rescueRow{}
	// A message field named like the rescue column matched it (the rescue
	// objects are only made below): it is rescued under its own name like
	// an unknown field, so the column holds nothing but rescue objects.
	own := w.ownRescueFields(batch, res, rescued)
	if !own && len(res.RowErrors) == 0 {
		return res, nil // the usual batch: nothing to rescue
	}
	notNull := map[string]bool{}
	for _, c := range cols {
		if !c.Nullable {
			notNull[typemap.ColumnKey(c.Name)] = true
		}
	}
	var edited []Row
	for round := 0; round < maxRescueRounds; round++ {
		moved := own && round == 0
		for _, re := range res.RowErrors {
			if !rescuable(re) || re.Index < 0 || re.Index >= len(batch) || notNull[typemap.ColumnKey(re.Field)] {
				continue
			}
			r := rescued[re.Index]
			if r == nil {
				if r = newRescueRow(batch[re.Index]); r == nil {
					continue
				}
				rescued[re.Index] = r
			}
			if r.take(re, w.cfg.Rescue) {
				moved = true
			}
		}
		if !moved {
			break
		}
		if edited == nil {
			edited = slices.Clone(batch)
		}
		for i, r := range rescued {
			edited[i] = r
		}
		next, err := convert(edited)
		if err != nil {
			return next, err
		}
		res.Record.Release()
		res = next
	}
	if len(rescued) > 0 {
		counts := map[string]int{}
		for _, i := range res.SourceIndex {
			if r := rescued[i]; r != nil {
				for _, c := range r.columns {
					counts[c]++
				}
			}
		}
		if ro, ok := w.obs.(RescueObserver); ok {
			for c, n := range counts {
				ro.Rescued(c, n)
			}
		}
	}
	return res, nil
}

// ownRescueFields finds the rows of res whose rescue column is set by the
// message itself (a field named like it: res is a conversion of the
// messages as received) and adds them to rescued with that field moved
// into their rescue object; it reports whether it found any. Only a
// non-NULL rescue value costs a decode.
func (w *Writer) ownRescueFields(batch []Row, res arrowconv.Result, rescued map[int]*rescueRow) bool {
	rec := res.Record
	if rec == nil {
		return false
	}
	ci := fieldIndex(rec.Schema(), w.cfg.Rescue)
	if ci < 0 || rec.Column(ci).NullN() == int(rec.NumRows()) {
		return false
	}
	col, found := rec.Column(ci), false
	for r := 0; r < int(rec.NumRows()) && r < len(res.SourceIndex); r++ {
		i := res.SourceIndex[r]
		if col.IsNull(r) || i < 0 || i >= len(batch) {
			continue
		}
		if row := newRescueRow(batch[i]); row != nil && row.takeOwn(w.cfg.Rescue) {
			rescued[i] = row
			found = true
		}
	}
	return found
}

// takeOwn moves the message's fields named like the rescue column col into
// the rescue object, under their own names; false when there are none. The
// row has no rescue object yet.
func (r *rescueRow) takeOwn(col string) bool {
	r.obj = map[string]any{}
	if r.moveNamedLike(typemap.ColumnKey(col)) == 0 {
		r.obj = nil
		return false
	}
	r.m[col] = r.obj
	return true
}

// moveNamedLike moves the message's fields whose column key is colKey (the
// rescue column's) into the rescue object, under their own names, counted
// as unknown fields; it returns how many it moved.
func (r *rescueRow) moveNamedLike(colKey string) int {
	n := 0
	for k, v := range r.m {
		if typemap.ColumnKey(k) == colKey {
			r.obj[k] = v
			delete(r.m, k)
			r.columns = append(r.columns, RescueUnknownField)
			n++
		}
	}
	return n
}
