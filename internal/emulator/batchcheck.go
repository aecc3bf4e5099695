package emulator

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Checks of the values of a batch, after the stream's schema was accepted.
// Each is a claim about the real service; the source is on each.

// emptyBatchError refuses a batch without rows, on the Arrow path (a 0-row
// record batch) and the JSON path (an ingest_record_batch with no records)
// alike. The official SDK never sends one: its Arrow stream refuses a batch
// without rows client-side (validate_nonempty_batch in
// rust/sdk/src/stream/arrow/mod.rs; observed with the npm build 1.3.0,
// "Cannot ingest an empty RecordBatch (zero rows)", conformance
// TestSDKEmptyBatch) and its record path returns without sending for an
// empty record list (rust/tests test_ingest_empty_batch_returns_none;
// observed with 1.3.0, conformance TestSDKEmptyJSONBatch). What the service
// answers to one is not documented (assumption): INVALID_ARGUMENT is the
// status the SDK gives it. On the Arrow path a 0-row frame would also ack
// zero records, which no client can tell from a lost ack.
func emptyBatchError(what string, off int64) error {
	return status.Errorf(codes.InvalidArgument, "%s at offset %d has no rows: empty batches are not accepted", what, off)
}

// nonNullableMessage is arrow-rs's text for nulls in a field declared
// non-nullable (RecordBatch::try_new, arrow-array record_batch.rs), which the
// official SDK 1.3.0 embeds (conformance TestSDKNullInNotNullColumn).
const nonNullableMessage = "is declared as non-nullable but contains null values"

// checkNulls refuses nulls in top-level fields the stream declared
// non-nullable (the NOT NULL columns). Source: the Flight server is built on
// arrow-rs (schema.rs: the server "normalizes via arrow::compute::cast"), and
// arrow-rs refuses to build such a record batch ("Column 'x' is declared as
// non-nullable but contains null values", RecordBatch::try_new); the
// official SDK 1.3.0 refuses the batch client-side with that text
// (conformance TestSDKNullInNotNullColumn). The status the service returns
// for a batch from another client is an assumption (INVALID_ARGUMENT).
func (sc *storageConverter) checkNulls(rec arrow.RecordBatch) error {
	for i, f := range rec.Schema().Fields() {
		col := rec.Column(i)
		if f.Nullable || col.NullN() == 0 {
			continue
		}
		first := 0
		for first < col.Len() && col.IsValid(first) {
			first++
		}
		return fmt.Errorf("column %q %s (%d nulls, the first in row %d): the column is NOT NULL in the table; send a value in every row",
			f.Name, nonNullableMessage, col.NullN(), first)
	}
	return nil
}

// nestedCol is a field of the stream whose values checkNested walks.
type nestedCol struct {
	index int
	typ   typemap.Type
}

// needsWalk reports whether a column of UC type t holds anything
// checkNested checks: a VARIANT or a NOT NULL struct field, at any depth.
func needsWalk(t typemap.Type) bool {
	switch t.Kind {
	case typemap.Variant:
		return true
	case typemap.Array:
		return needsWalk(*t.Elem)
	case typemap.Map:
		return needsWalk(*t.Value)
	case typemap.Struct:
		for _, f := range t.Fields {
			if !f.Nullable || needsWalk(f.Type) {
				return true
			}
		}
	}
	return false
}

// checkNested walks the columns that need it and returns the first problem,
// naming the column path and the batch row:
//
//   - a VARIANT whose bytes are not a Parquet variant, at any depth. The
//     service expects "the server's expected binary variant representation"
//     (official Rust SDK changelog v2.3.2) and allows VARIANT nested in a
//     struct field, a list item and a map value (schema.rs tests
//     nested_variant_uses_binary_struct, variant_annotation_marks_nested_fields;
//     a VARIANT map key is refused, rejects_variant_map_key), so garbage
//     there cannot be stored either;
//   - a null in a NOT NULL struct field where the struct itself is not
//     null: arrow-rs refuses such array data ("non-nullable child of type
//     ... contains nulls not present in parent", ArrayData::validate_nulls,
//     which masks a struct's children with the struct's own validity; the
//     SDK 1.3.0 binary carries the text), as it refuses nulls in a NOT NULL
//     column (checkNulls). A null map key (map keys are NOT NULL) never gets
//     here: arrow-go's IPC reader refuses the batch itself ("map array keys
//     array should have no nulls"), as arrow-rs does.
//
// The JSON path needs none of it: it builds its arrays itself and refuses
// nulls in NOT NULL fields while doing so (jsonRecords).
func (sc *storageConverter) checkNested(rec arrow.RecordBatch) error {
	for _, c := range sc.nestedCols {
		all := nestPos{row: func(i int) int { return i }, valid: func(int) bool { return true }}
		if err := checkNested(rec.Column(c.index), c.typ, rec.ColumnName(c.index), all); err != nil {
			return err
		}
	}
	return nil
}

// nestPos relates the values of a nested array to the batch: the row each
// value belongs to, and whether every value enclosing it is non-null.
type nestPos struct {
	row   func(int) int
	valid func(int) bool
}

// checkNested checks arr, the transport form of UC type t at path (already
// validated against the service schema, so the shapes agree). t is a type
// needsWalk holds for: callers walk nothing else, so a list's element and a
// map's value need it too.
func checkNested(arr arrow.Array, t typemap.Type, path string, pos nestPos) error {
	if ext, ok := arr.(array.ExtensionArray); ok {
		arr = ext.Storage()
	}
	switch t.Kind {
	case typemap.Variant:
		st, ok := arr.(*array.Struct)
		if !ok {
			return fmt.Errorf("column %q: a VARIANT must travel as struct<metadata, value>, got %s", path, arr.DataType())
		}
		for i := 0; i < st.Len(); i++ {
			if !pos.valid(i) || st.IsNull(i) {
				continue
			}
			if _, err := variantJSON(st, i); err != nil {
				return fmt.Errorf("column %q row %d: not a Parquet variant: %v", path, pos.row(i), err)
			}
		}
	case typemap.Struct:
		st, ok := arr.(*array.Struct)
		if !ok {
			return nil
		}
		typ := st.DataType().(*arrow.StructType)
		inner := nestPos{row: pos.row, valid: func(i int) bool { return pos.valid(i) && st.IsValid(i) }}
		for f, uf := range t.Fields {
			if f >= st.NumField() {
				break
			}
			child, name := st.Field(f), path+"."+typ.Field(f).Name
			if !typ.Field(f).Nullable {
				if err := nullsWhere(child, name, pos.row, st.IsValid, "struct field"); err != nil {
					return err
				}
			}
			if needsWalk(uf.Type) {
				if err := checkNested(child, uf.Type, name, inner); err != nil {
					return err
				}
			}
		}
	case typemap.Array:
		if l, ok := arr.(*array.List); ok {
			return checkNested(l.ListValues(), *t.Elem, path+".element", ownedBy(l, pos))
		}
	case typemap.Map:
		if m, ok := arr.(*array.Map); ok {
			return checkNested(m.Items(), *t.Value, path+".value", ownedBy(m, pos))
		}
	}
	return nil
}

// nullsWhere refuses a null in the NOT NULL field child at a position where
// parentValid holds, naming the batch row (-1: a value no list holds) and
// what the field is.
func nullsWhere(child arrow.Array, path string, row func(int) int, parentValid func(int) bool, what string) error {
	if child.NullN() == 0 {
		return nil
	}
	for i := 0; i < child.Len(); i++ {
		if child.IsNull(i) && parentValid(i) {
			return fmt.Errorf("column %q row %d: %s %s: it is NOT NULL in the table; send a value wherever the enclosing value is not null",
				path, row(i), what, nonNullableMessage)
		}
	}
	return nil
}

// ownedBy maps the child values of a list or map to the batch: each value
// belongs to the row of the list holding it (-1 for a value no list holds),
// and is valid when that list and everything enclosing it is.
func ownedBy(l array.ListLike, pos nestPos) nestPos {
	owner := make([]int, l.ListValues().Len())
	for j := range owner {
		owner[j] = -1
	}
	for i := 0; i < l.Len(); i++ {
		start, end := l.ValueOffsets(i)
		for j := start; j < end; j++ {
			owner[j] = i
		}
	}
	return nestPos{
		row: func(j int) int {
			if owner[j] < 0 {
				return -1
			}
			return pos.row(owner[j])
		},
		valid: func(j int) bool { return owner[j] >= 0 && pos.valid(owner[j]) && l.IsValid(owner[j]) },
	}
}
