package tablewriter

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// inferFields infers Arrow fields for the top-level message fields whose
// column known does not have, from the values in msgs. It is used to create
// an absent table from the first batch and to add columns for new fields on
// drift; every inferred field is nullable (Delta only adds nullable
// columns).
//
// A field's column is named by the column-name rule (typemap.SafeIdentifier),
// and fields with one column key (typemap.ColumnKey: "my-field", "My_Field")
// are one column, so every column created here is one its rows match.
//
// JSON booleans become bool, integral numbers int64 (float64 when another
// message has a fractional value for the field: int → bigint → double is
// the one widening, as every JSON number fits a double), strings utf8,
// objects structs (fields in name order), arrays lists of the first non-null
// element's type, and Bloblang timestamps timestamp[us, UTC]. A field that
// is null everywhere is skipped: its type cannot be known yet.
//
// A field whose values disagree in kind beyond that (a string in some
// messages, a number in others) still gets its column, never dropped: it
// takes the type most messages have (the first seen on a tie), and the
// messages with another kind then fail on that column alone, naming it,
// to the dead-letter table (or the rescue column). Widening such a column
// to STRING instead would not be lossless here: the converter stores only
// JSON strings in a STRING column, so the numbers would fail instead. Each
// such field is reported in conflicts.
func inferFields(known func(name string) bool, msgs []map[string]any) (fields []arrow.Field, conflicts []string) {
	type candidate struct {
		dt           arrow.DataType
		count, first int
	}
	type field struct {
		name  string // the column name: the first spelling, made safe
		cands []*candidate
	}
	found := map[string]*field{}
	var order []string
	for i, m := range msgs {
		for name, v := range m {
			if known(name) {
				continue
			}
			dt := inferType(v)
			if dt == nil {
				continue
			}
			key := typemap.ColumnKey(name)
			f, ok := found[key]
			if !ok {
				f = &field{name: typemap.SafeIdentifier(name)}
				found[key] = f
				order = append(order, key)
			}
			merged := false
			for _, c := range f.cands {
				if t, ok := mergeTypes(c.dt, dt); ok {
					c.dt, merged = t, true
					c.count++
					break
				}
			}
			if !merged {
				f.cands = append(f.cands, &candidate{dt: dt, count: 1, first: i})
			}
		}
	}
	sort.Strings(order)
	for _, key := range order {
		f := found[key]
		win := f.cands[0]
		for _, c := range f.cands[1:] {
			if c.count > win.count || (c.count == win.count && c.first < win.first) {
				win = c
			}
		}
		fields = append(fields, arrow.Field{Name: f.name, Type: win.dt, Nullable: true})
		if len(f.cands) > 1 {
			var others []string
			n := 0
			for _, c := range f.cands {
				if c != win {
					others = append(others, fmt.Sprintf("%d have %s (first: message %d)", c.count, c.dt, c.first))
					n += c.count
				}
			}
			conflicts = append(conflicts, fmt.Sprintf("field %s: %d messages have %s, %s: column %s is created as %s; those %d messages do not fit it (each fails alone, or goes to the rescue column)",
				arrowconv.Quote(f.name), win.count, win.dt, strings.Join(others, ", "), arrowconv.Quote(f.name), win.dt, n))
		}
	}
	return fields, conflicts
}

// inferType maps one structured message value onto an Arrow type; nil for a
// null (or empty array / unknown) value whose type cannot be told.
func inferType(v any) arrow.DataType {
	switch x := v.(type) {
	case nil:
		return nil
	case bool:
		return arrow.FixedWidthTypes.Boolean
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			return arrow.PrimitiveTypes.Float64
		}
		return arrow.PrimitiveTypes.Int64
	case int, int8, int16, int32, int64, uint8, uint16, uint32:
		return arrow.PrimitiveTypes.Int64
	case float32, float64:
		return arrow.PrimitiveTypes.Float64
	case string:
		return arrow.BinaryTypes.String
	case []byte:
		return arrow.BinaryTypes.Binary
	case time.Time:
		return &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	case map[string]any:
		// Struct fields follow the column-name rule too; of two keys with
		// one name, the first (in name order) is the field and an object
		// carrying both fails as a duplicate.
		names := make([]string, 0, len(x))
		for k := range x {
			names = append(names, k)
		}
		sort.Strings(names)
		var fs []arrow.Field
		seen := map[string]bool{}
		for _, k := range names {
			key := typemap.ColumnKey(k)
			if seen[key] {
				continue
			}
			if dt := inferType(x[k]); dt != nil {
				seen[key] = true
				fs = append(fs, arrow.Field{Name: typemap.SafeIdentifier(k), Type: dt, Nullable: true})
			}
		}
		sort.Slice(fs, func(i, j int) bool { return fs[i].Name < fs[j].Name })
		if len(fs) == 0 {
			return nil
		}
		return arrow.StructOf(fs...)
	case []any:
		for _, e := range x {
			if dt := inferType(e); dt != nil {
				return arrow.ListOf(dt)
			}
		}
		return nil
	}
	return nil
}

// mergeTypes reconciles two inferences of one field: equal types stay,
// int64 and float64 give float64, structs merge field-wise; anything else
// is a conflict.
func mergeTypes(a, b arrow.DataType) (arrow.DataType, bool) {
	if arrow.TypeEqual(a, b) {
		return a, true
	}
	isNum := func(t arrow.DataType) bool {
		return t.ID() == arrow.INT64 || t.ID() == arrow.FLOAT64
	}
	if isNum(a) && isNum(b) {
		return arrow.PrimitiveTypes.Float64, true
	}
	if a.ID() == arrow.LIST && b.ID() == arrow.LIST {
		e, ok := mergeTypes(a.(*arrow.ListType).Elem(), b.(*arrow.ListType).Elem())
		if !ok {
			return nil, false
		}
		return arrow.ListOf(e), true
	}
	if a.ID() == arrow.STRUCT && b.ID() == arrow.STRUCT {
		sa, sb := a.(*arrow.StructType), b.(*arrow.StructType)
		byName := map[string]arrow.DataType{}
		var names []string
		for _, f := range sa.Fields() {
			byName[f.Name] = f.Type
			names = append(names, f.Name)
		}
		for _, f := range sb.Fields() {
			prev, ok := byName[f.Name]
			if !ok {
				byName[f.Name] = f.Type
				names = append(names, f.Name)
				continue
			}
			m, ok := mergeTypes(prev, f.Type)
			if !ok {
				return nil, false
			}
			byName[f.Name] = m
		}
		sort.Strings(names)
		fs := make([]arrow.Field, len(names))
		for i, n := range names {
			fs[i] = arrow.Field{Name: n, Type: byName[n], Nullable: true}
		}
		return arrow.StructOf(fs...), true
	}
	return nil, false
}

// maxNestingDepth is the deepest nesting below a column the Zerobus service
// writes (MAX_NESTING_DEPTH in the official Rust SDK, databricks/zerobus-sdk
// rust/sdk/src/schema.rs).
const maxNestingDepth = 100

// unwritable says why the service cannot write an inferred type, or "" when
// it can. Of the types inference makes, the official SDK's
// arrow_schema_from_uc_columns (rust/sdk/src/schema.rs) refuses nested
// arrays and nesting deeper than maxNestingDepth; Delta would create such a
// column, but no stream could then be opened on the table, failing every row
// instead of the rows that carry the field.
func unwritable(dt arrow.DataType, depth int) string {
	if depth > maxNestingDepth {
		return fmt.Sprintf("nested deeper than the %d levels the Zerobus service writes", maxNestingDepth)
	}
	switch t := dt.(type) {
	case *arrow.ListType:
		if t.Elem().ID() == arrow.LIST {
			return fmt.Sprintf("an array of arrays (%s), which the Zerobus service does not write", dt)
		}
		return unwritable(t.Elem(), depth+1)
	case *arrow.StructType:
		for _, f := range t.Fields() {
			if why := unwritable(f.Type, depth+1); why != "" {
				return why
			}
		}
	}
	return ""
}

// creatable returns the fields a column can be made of, remembering why the
// others cannot (their rows fail as unknown fields, saying why). The
// authority's lock is held.
func (a *authority) creatable(fields []arrow.Field) []arrow.Field {
	out := fields[:0]
	for _, f := range fields {
		why := unwritable(f.Type, 0)
		if why != "" {
			why = "it holds " + why
		} else if len(f.Name) > maxColumnName {
			why = fmt.Sprintf("its name is %d bytes long, above the %d Unity Catalog accepts", len(f.Name), maxColumnName)
		}
		if why != "" {
			a.warnf("table %s: no column for field %s: %s; its rows fail", a.cfg.Table, arrowconv.Quote(f.Name), why)
			a.refused.Store(typemap.ColumnKey(f.Name), why)
			continue
		}
		out = append(out, f)
	}
	return out
}

// maxColumnName is the longest column name the output creates: Unity
// Catalog limits the names of its objects to 255 characters (Databricks
// docs, "Names", https://docs.databricks.com/en/sql/language-manual/sql-ref-names.html);
// that the limit holds for column names too is an assumption.
const maxColumnName = 255
