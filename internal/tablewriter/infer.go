package tablewriter

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
)

// inferFields infers Arrow fields for the top-level message fields that
// known does not have (case-insensitively, as Delta resolves names), from
// the values in msgs. It is used to create an absent table from the first
// batch and to add columns for new fields on drift; every inferred field is
// nullable (Delta only adds nullable columns).
//
// JSON booleans become bool, integral numbers int64 (float64 when another
// message has a fractional value for the field), strings utf8, objects
// structs (fields in name order), arrays lists of the first non-null
// element's type, and Bloblang timestamps timestamp[us, UTC]. A field that
// is null everywhere is skipped: its type cannot be known yet. A field whose
// values disagree in kind is reported in conflicts, naming the field and the
// two messages, and not inferred.
func inferFields(known func(name string) bool, msgs []map[string]any) (fields []arrow.Field, conflicts []error) {
	type seen struct {
		dt    arrow.DataType
		first int
	}
	found := map[string]*seen{}
	var order []string
	bad := map[string]bool{}
	for i, m := range msgs {
		for name, v := range m {
			if known(name) || bad[name] {
				continue
			}
			dt := inferType(v)
			if dt == nil {
				continue
			}
			s, ok := found[name]
			if !ok {
				found[name] = &seen{dt: dt, first: i}
				order = append(order, name)
				continue
			}
			merged, ok := mergeTypes(s.dt, dt)
			if !ok {
				conflicts = append(conflicts, fmt.Errorf("field %q: message %d has %s but message %d has %s", name, s.first, s.dt, i, dt))
				bad[name] = true
				continue
			}
			s.dt = merged
		}
	}
	sort.Strings(order)
	for _, name := range order {
		if bad[name] {
			continue
		}
		fields = append(fields, arrow.Field{Name: name, Type: found[name].dt, Nullable: true})
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
		names := make([]string, 0, len(x))
		for k := range x {
			names = append(names, k)
		}
		sort.Strings(names)
		var fs []arrow.Field
		for _, k := range names {
			if dt := inferType(x[k]); dt != nil {
				fs = append(fs, arrow.Field{Name: k, Type: dt, Nullable: true})
			}
		}
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
