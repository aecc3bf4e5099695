package emulator

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Schema validation causes, as the service names them in ErrorInfo metadata,
// and the service's error codes and texts. Source: docs/protocol.md#table-schema
// (reason SCHEMA_VALIDATION_FAILED, domain zerobus.databricks.com, the five
// causes, error_code 8001) and docs/protocol.md#errors-and-recovery (6002
// "Stream timeout reached"). The non-incremental offset text is the
// official mock server's; the real service's text is not known.
const (
	CauseFieldNotInTable        = "FIELD_NOT_IN_TABLE"
	CauseMissingRequiredColumn  = "MISSING_REQUIRED_COLUMN"
	CauseFieldOutOfOrder        = "FIELD_OUT_OF_ORDER"
	CauseTypeIncompatible       = "TYPE_INCOMPATIBLE"
	CauseFieldCountMismatch     = "FIELD_COUNT_MISMATCH"
	SchemaValidationReason      = "SCHEMA_VALIDATION_FAILED"
	ErrorDomain                 = "zerobus.databricks.com"
	schemaValidationErrorCode   = "8001"
	streamTimeoutErrorCode      = "6002"
	streamTimeoutMessage        = "Stream timeout reached"
	nonIncrementalOffsetMessage = "Non-incremental offset: expected %d, actual %d"
)

type schemaProblem struct {
	cause string
	msg   string
}

// Limits of what Zerobus can write, as the official Rust SDK states them in
// rust/sdk/src/schema.rs (databricks/zerobus-sdk): arrow_schema_from_uc_columns
// builds "the canonical Arrow schema the Databricks Arrow Flight server builds
// from Delta" and refuses, with the same rules as descriptor_from_uc_columns,
// nested arrays, arrays of maps, maps whose value is an array or a map, map
// keys that are not integral, bool or string (is_valid_map_key: FLOAT, DOUBLE
// and BINARY are refused), nesting deeper than MAX_NESTING_DEPTH = 100 levels
// below the column, and field names outside [A-Za-z_][A-Za-z0-9_]*
// (validate_field_name, applied to columns and struct fields alike).
//
// Where: Databricks SQL creates such tables (Delta allows ARRAY<ARRAY<INT>>,
// and backquoted column names with other characters), so the workspace DDL
// accepts them; it is the Zerobus stream over the table that cannot be
// opened. The emulator refuses them at stream open, naming the column.
const maxNestingDepth = 100

// listItemName is the one name the emulator accepts for a list's item
// field. schema.rs (arrow_schema_from_uc_columns) builds every ARRAY<T> as a
// List whose item field is "item" ("`ARRAY<T>` → `List` with item field
// `\"item\"`", the canonical schema the server builds from Delta) and,
// unlike for maps, documents no other form the server normalises; "item" is
// also the Arrow default (arrow-rs, arrow-go, pyarrow), so a writer that
// names it otherwise (Parquet's "element") has chosen to. Stricter than
// proven: the server may cast other names as it casts map names.
const listItemName = "item"

// Map child names the service accepts. schema.rs emits the canonical
// entries/keys/values and notes: "The server also accepts the Arrow-default
// key_value/key/value names and normalizes via arrow::compute::cast". No
// other form is documented; arrow-go's entries/key/value is neither.
var acceptedMapNames = [][3]string{
	{"entries", "keys", "values"},
	{"key_value", "key", "value"},
}

// variantExtensionNames are the Arrow extension names of a Parquet variant.
// The server "ignores and strips the marker on the write path" (official
// Rust SDK changelog, v2.6.0), so a field carrying one is checked by its
// storage type.
var variantExtensionNames = map[string]bool{"arrow.parquet.variant": true, "parquet.variant": true}

// serviceSchema is the Arrow schema the service expects on a stream for a
// table with these columns (UC position order), or an error naming the first
// column Zerobus cannot write.
//
// No column-count limit is enforced. The only published one is "We do not
// support proto schemas with more than 2000 columns", under "Protobuf
// schema" in the Public Preview edition of the Zerobus Ingest connector
// limitations page: a limit on protobuf descriptors, not on Arrow streams.
// arrow_schema_from_uc_columns (schema.rs) has no limit, and the official
// SDK's proto tool was since fixed "for tables with more than 19000 columns"
// (databricks/zerobus-sdk #126, 2026-03, NEXT_CHANGELOG), which says such
// tables are written. Refusing a 2,001-column Arrow stream would be stricter
// than any source (TestWideTableIsWritable).
func serviceSchema(cols []typemap.Column) (*arrow.Schema, error) {
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		// schema.rs validate_field_name: non-empty, no leading digit,
		// ASCII letters, digits and underscores only (typemap.ValidIdentifier
		// is that rule).
		if !typemap.ValidIdentifier(c.Name) {
			return nil, fmt.Errorf("column %q: invalid field name: only ASCII letters, digits and '_' are allowed, not starting with a digit", c.Name)
		}
		dt, err := serviceType(c.Type, c.Name, 0)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", c.Name, err)
		}
		fields[i] = arrow.Field{Name: c.Name, Type: dt, Nullable: c.Nullable}
	}
	return arrow.NewSchema(fields, nil), nil
}

// serviceType is the Arrow type of t at nesting level (0 for a column) under
// the service's rules; path names the position in errors.
func serviceType(t typemap.Type, path string, level int) (arrow.DataType, error) {
	if level > maxNestingDepth {
		return nil, fmt.Errorf("%s: nesting level exceeds maximum depth of %d", path, maxNestingDepth)
	}
	switch t.Kind {
	case typemap.Variant:
		// Struct<metadata, value> of Parquet variant binaries (sources on
		// typemap.VariantArrowType: Rust SDK changelog v2.3.2, "matching
		// the server's expected binary variant representation"), so
		// LargeUtf8 is a type mismatch.
		return typemap.VariantArrowType(), nil
	case typemap.Array:
		switch t.Elem.Kind {
		case typemap.Array:
			return nil, fmt.Errorf("%s: nested arrays not supported (%s)", path, t.Text())
		case typemap.Map:
			return nil, fmt.Errorf("%s: arrays of maps not supported (%s)", path, t.Text())
		}
		elem, err := serviceType(*t.Elem, path+".element", level+1)
		if err != nil {
			return nil, err
		}
		return arrow.ListOfField(arrow.Field{Name: "item", Type: elem, Nullable: true}), nil
	case typemap.Map:
		switch t.Key.Kind {
		case typemap.Float, typemap.Double, typemap.Binary:
			return nil, fmt.Errorf("%s: unsupported map key type %s (map keys must be integral, bool, or string)", path, t.Key.Text())
		case typemap.Array, typemap.Map, typemap.Struct, typemap.Variant:
			return nil, fmt.Errorf("%s: map keys must be primitive types (%s)", path, t.Text())
		}
		if t.Value.Kind == typemap.Array || t.Value.Kind == typemap.Map {
			return nil, fmt.Errorf("%s: maps with complex value types not supported (%s)", path, t.Text())
		}
		k, err := serviceType(*t.Key, path+".key", level+1)
		if err != nil {
			return nil, err
		}
		v, err := serviceType(*t.Value, path+".value", level+1)
		if err != nil {
			return nil, err
		}
		return arrow.MapOfFields(arrow.Field{Name: "keys", Type: k}, arrow.Field{Name: "values", Type: v, Nullable: true}), nil
	case typemap.Struct:
		fields := make([]arrow.Field, len(t.Fields))
		for i, f := range t.Fields {
			if !typemap.ValidIdentifier(f.Name) { // validate_field_name, as for columns
				return nil, fmt.Errorf("%s.%s: invalid field name: only ASCII letters, digits and '_' are allowed, not starting with a digit", path, f.Name)
			}
			ft, err := serviceType(f.Type, path+"."+f.Name, level+1)
			if err != nil {
				return nil, err
			}
			fields[i] = arrow.Field{Name: f.Name, Type: ft, Nullable: f.Nullable}
		}
		return arrow.StructOf(fields...), nil
	}
	return typemap.ArrowType(t)
}

// checkSchema compares a stream's Arrow schema with the table's columns the
// way the service does: every field must be a column, in UC column order,
// with the expected Arrow type and nullability, and list items and map
// children named in a form the service accepts (names are the ones written
// in the schema message); NOT NULL columns may not be omitted, nullable ones
// may.
// Source: docs/protocol.md#table-schema (columns in UC position order;
// nullable columns may be omitted from a batch; all columns nullable unless
// NOT NULL in the table; the UC type → Arrow type list); which
// cause each check reports follows the cause names there. It
// returns the problems found, in field order, or an error naming the column
// when the table itself cannot be written through Zerobus.
func checkSchema(cols []typemap.Column, got *arrow.Schema, names []fieldNames) ([]schemaProblem, error) {
	want, err := serviceSchema(cols)
	if err != nil {
		return nil, err
	}
	pos := make(map[string]int, len(cols))
	for i, f := range want.Fields() {
		pos[f.Name] = i
	}
	var probs []schemaProblem
	if got.NumFields() > want.NumFields() {
		probs = append(probs, schemaProblem{CauseFieldCountMismatch,
			fmt.Sprintf("stream has %d fields, the table has %d columns", got.NumFields(), want.NumFields())})
	}
	present := map[string]bool{}
	last := -1
	for fi, f := range got.Fields() {
		i, ok := pos[f.Name]
		if !ok {
			probs = append(probs, schemaProblem{CauseFieldNotInTable, fmt.Sprintf("field %q is not a column of the table", f.Name)})
			continue
		}
		if present[f.Name] {
			probs = append(probs, schemaProblem{CauseFieldCountMismatch, fmt.Sprintf("field %q appears more than once", f.Name)})
			continue
		}
		present[f.Name] = true
		if i < last {
			probs = append(probs, schemaProblem{CauseFieldOutOfOrder, fmt.Sprintf("field %q is out of order (table position %d)", f.Name, i)})
		}
		if i > last {
			last = i
		}
		wf := want.Field(i)
		var raw fieldNames
		if fi < len(names) {
			raw = names[fi]
		}
		switch {
		case !sameType(wf.Type, f.Type):
			probs = append(probs, schemaProblem{CauseTypeIncompatible,
				fmt.Sprintf("field %q has type %s, column %s (%s) needs %s", f.Name, f.Type, wf.Name, cols[i].Type.Text(), wf.Type)})
		case wf.Nullable != f.Nullable:
			probs = append(probs, schemaProblem{CauseTypeIncompatible,
				fmt.Sprintf("field %q has nullable=%v, column %s needs nullable=%v", f.Name, f.Nullable, wf.Name, wf.Nullable)})
		default:
			if msg := childNameProblem(f.Name, wf.Type, raw); msg != "" {
				probs = append(probs, schemaProblem{CauseTypeIncompatible, msg})
			}
		}
	}
	for _, c := range cols {
		if !c.Nullable && !present[c.Name] {
			probs = append(probs, schemaProblem{CauseMissingRequiredColumn, fmt.Sprintf("NOT NULL column %q is missing", c.Name)})
		}
	}
	return probs, nil
}

// childNameProblem walks the expected type of a field alongside the names
// the schema message gave it and describes the first list item or map child
// named in no form the service accepts ("" if none).
func childNameProblem(path string, want arrow.DataType, raw fieldNames) string {
	switch w := want.(type) {
	case *arrow.MapType:
		entries := child(raw, 0)
		got := [3]string{entries.Name, child(entries, 0).Name, child(entries, 1).Name}
		ok := false
		for _, form := range acceptedMapNames {
			if got == form {
				ok = true
			}
		}
		if !ok {
			return fmt.Sprintf("field %q is a map written as %s{%s, %s}; the service accepts %s{%s, %s} (or %s{%s, %s})",
				path, got[0], got[1], got[2],
				acceptedMapNames[0][0], acceptedMapNames[0][1], acceptedMapNames[0][2],
				acceptedMapNames[1][0], acceptedMapNames[1][1], acceptedMapNames[1][2])
		}
		return childNameProblem(path+".values", w.ItemType(), child(entries, 1))
	case *arrow.ListType:
		item := child(raw, 0)
		if item.Name != listItemName {
			return fmt.Sprintf("field %q is a list whose item field is named %q; the service accepts %q", path, item.Name, listItemName)
		}
		return childNameProblem(path+".element", w.Elem(), item)
	case *arrow.StructType:
		for i, f := range w.Fields() {
			if msg := childNameProblem(path+"."+f.Name, f.Type, child(raw, i)); msg != "" {
				return msg
			}
		}
	}
	return ""
}

// storageOf is dt without a variant extension wrapper, which the service
// strips.
func storageOf(dt arrow.DataType) arrow.DataType {
	if et, ok := dt.(arrow.ExtensionType); ok && variantExtensionNames[et.ExtensionName()] {
		return et.StorageType()
	}
	return dt
}

// sameType compares Arrow types structurally: field names of struct members
// must match; list item names and map child names are not compared here
// (they are checked on the raw schema message by childNameProblem). Nested
// nullability must match. A variant extension type is compared by its
// storage.
func sameType(want, got arrow.DataType) bool {
	got = storageOf(got)
	if want.ID() != got.ID() {
		return false
	}
	switch w := want.(type) {
	case *arrow.TimestampType:
		g := got.(*arrow.TimestampType)
		return w.Unit == g.Unit && w.TimeZone == g.TimeZone
	case *arrow.ListType:
		g := got.(*arrow.ListType)
		return w.ElemField().Nullable == g.ElemField().Nullable && sameType(w.Elem(), g.Elem())
	case *arrow.MapType:
		g := got.(*arrow.MapType)
		return w.ItemField().Nullable == g.ItemField().Nullable &&
			sameType(w.KeyType(), g.KeyType()) && sameType(w.ItemType(), g.ItemType())
	case *arrow.StructType:
		g := got.(*arrow.StructType)
		if w.NumFields() != g.NumFields() {
			return false
		}
		for i := 0; i < w.NumFields(); i++ {
			wf, gf := w.Field(i), g.Field(i)
			if wf.Name != gf.Name || wf.Nullable != gf.Nullable || !sameType(wf.Type, gf.Type) {
				return false
			}
		}
		return true
	}
	return arrow.TypeEqual(want, got)
}

// schemaError is the status the service returns for a schema mismatch:
// INVALID_ARGUMENT with a google.rpc.ErrorInfo naming the causes
// (docs/protocol.md#table-schema; the status code is an assumption there).
func schemaError(t workspace.Table, probs []schemaProblem) error {
	var causes, msgs []string
	seen := map[string]bool{}
	for _, p := range probs {
		msgs = append(msgs, p.msg)
		if !seen[p.cause] {
			seen[p.cause] = true
			causes = append(causes, p.cause)
		}
	}
	st := status.New(codes.InvalidArgument, fmt.Sprintf(
		"Schema validation failed for table %s: %s. Error Code: %s", t.FullName, strings.Join(msgs, "; "), schemaValidationErrorCode))
	withInfo, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason:   SchemaValidationReason,
		Domain:   ErrorDomain,
		Metadata: map[string]string{"causes": strings.Join(causes, ","), "error_code": schemaValidationErrorCode},
	})
	if err != nil {
		return st.Err()
	}
	return withInfo.Err()
}

// rotationError ends a rotated stream: UNAVAILABLE with "Error Code: 6002"
// (docs/protocol.md#errors-and-recovery).
func rotationError() error {
	return status.Errorf(codes.Unavailable, "Stream closed by the server for rotation. Error Code: %s %s", streamTimeoutErrorCode, streamTimeoutMessage)
}
