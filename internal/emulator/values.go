package emulator

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// jsonValue renders element i of arr as a JSON-ready value: decimals as
// strings, dates "2006-01-02", TIMESTAMP as RFC 3339 in UTC, TIMESTAMP_NTZ
// without a zone, binary as []byte (base64 in JSON), non-finite floats as
// strings, maps as objects with stringified keys.
func jsonValue(arr arrow.Array, i int) any {
	if arr.IsNull(i) {
		return nil
	}
	switch a := arr.(type) {
	case *array.Boolean:
		return a.Value(i)
	case *array.Int8:
		return a.Value(i)
	case *array.Int16:
		return a.Value(i)
	case *array.Int32:
		return a.Value(i)
	case *array.Int64:
		return a.Value(i)
	case *array.Float32:
		return floatJSON(float64(a.Value(i)))
	case *array.Float64:
		return floatJSON(a.Value(i))
	case *array.String:
		return a.Value(i)
	case *array.LargeString:
		return a.Value(i)
	case *array.Binary:
		return append([]byte(nil), a.Value(i)...)
	case *array.LargeBinary:
		return append([]byte(nil), a.Value(i)...)
	case *array.Decimal128:
		return a.Value(i).ToString(a.DataType().(*arrow.Decimal128Type).Scale)
	case *array.Date32:
		return a.Value(i).ToTime().Format("2006-01-02")
	case *array.Timestamp:
		tt := a.DataType().(*arrow.TimestampType)
		t := a.Value(i).ToTime(tt.Unit)
		if tt.TimeZone == "" {
			return t.UTC().Format("2006-01-02T15:04:05.999999")
		}
		return t.UTC().Format(time.RFC3339Nano)
	case *array.Map:
		start, end := a.ValueOffsets(i)
		keys, items := a.Keys(), a.Items()
		m := make(map[string]any, end-start)
		for j := int(start); j < int(end); j++ {
			m[fmt.Sprint(jsonValue(keys, j))] = jsonValue(items, j)
		}
		return m
	case *array.List:
		return listJSON(a, i)
	case *array.LargeList:
		return listJSON(a, i)
	case *array.Struct:
		st := a.DataType().(*arrow.StructType)
		m := make(map[string]any, a.NumField())
		for f := 0; f < a.NumField(); f++ {
			m[st.Field(f).Name] = jsonValue(a.Field(f), i)
		}
		return m
	}
	return arr.ValueStr(i)
}

func listJSON(a array.ListLike, i int) []any {
	start, end := a.ValueOffsets(i)
	values := a.ListValues()
	out := make([]any, 0, end-start)
	for j := int(start); j < int(end); j++ {
		out = append(out, jsonValue(values, j))
	}
	return out
}

func floatJSON(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return f
}

// storageConverter turns a batch as it travels (decimals as LargeUtf8, at any
// nesting depth) into the batch stored in Parquet (decimals as Decimal128 of
// the column's precision and scale), so Delta readers see the declared types.
// It is built once per stream from the stream's schema snapshot.
type storageConverter struct {
	decimalCols map[int]typemap.Type   // field index → UC type, for fields holding decimals
	extCols     map[int]arrow.DataType // field index → type without extension wrappers
	nestedCols  []nestedCol            // fields whose values checkNested walks
	inSchema    *arrow.Schema          // transport schema
	schema      *arrow.Schema          // stored schema
}

func newStorageConverter(cols []typemap.Column, in *arrow.Schema) *storageConverter {
	byName := make(map[string]typemap.Column, len(cols))
	for _, c := range cols {
		byName[c.Name] = c
	}
	sc := &storageConverter{decimalCols: map[int]typemap.Type{}, extCols: map[int]arrow.DataType{}, inSchema: in}
	fields := append([]arrow.Field(nil), in.Fields()...)
	for i, f := range fields {
		// The variant extension marker is stripped, as the service strips
		// it (official Rust SDK changelog v2.6.0): files hold the plain
		// struct whatever the writer sent.
		if st, changed := stripExtensions(f.Type); changed {
			sc.extCols[i] = st
			fields[i].Type = st
			f.Type = st
		}
		c, ok := byName[f.Name]
		if ok && needsWalk(c.Type) {
			sc.nestedCols = append(sc.nestedCols, nestedCol{i, c.Type})
		}
		if !ok || !c.Type.Contains(typemap.Decimal) {
			continue
		}
		sc.decimalCols[i] = c.Type
		fields[i].Type = storedType(f.Type, c.Type)
	}
	md := in.Metadata()
	sc.schema = arrow.NewSchema(fields, &md)
	return sc
}

// storedType is the stored Arrow type for transport type dt of UC type t.
// dt has been validated against t, so the shapes agree.
func storedType(dt arrow.DataType, t typemap.Type) arrow.DataType {
	switch t.Kind {
	case typemap.Decimal:
		return &arrow.Decimal128Type{Precision: int32(t.Precision), Scale: int32(t.Scale)}
	case typemap.Array:
		ef := dt.(*arrow.ListType).ElemField()
		ef.Type = storedType(ef.Type, *t.Elem)
		return arrow.ListOfField(ef)
	case typemap.Map:
		mt := dt.(*arrow.MapType)
		kf, vf := mt.KeyField(), mt.ItemField()
		kf.Type = storedType(kf.Type, *t.Key)
		vf.Type = storedType(vf.Type, *t.Value)
		return arrow.MapOfFields(kf, vf)
	case typemap.Struct:
		st := dt.(*arrow.StructType)
		fields := append([]arrow.Field(nil), st.Fields()...)
		for i := range fields {
			fields[i].Type = storedType(fields[i].Type, t.Fields[i].Type)
		}
		return arrow.StructOf(fields...)
	}
	return dt
}

// convert returns the stored form of rec (a new reference the caller owns)
// or an error naming the column of a malformed decimal.
func (sc *storageConverter) convert(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	if len(sc.decimalCols) == 0 && len(sc.extCols) == 0 {
		rec.Retain()
		return rec, nil
	}
	cols := make([]arrow.Array, rec.NumCols())
	var built []arrow.Array
	defer func() {
		for _, a := range built {
			a.Release()
		}
	}()
	for i := range cols {
		col := rec.Column(i)
		if st, ok := sc.extCols[i]; ok {
			d := retypeData(col.Data(), st)
			col = array.MakeFromData(d)
			d.Release()
			built = append(built, col)
		}
		t, ok := sc.decimalCols[i]
		if !ok {
			cols[i] = col
			continue
		}
		d, err := convertData(col.Data(), t, sc.schema.Field(i).Type)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", rec.ColumnName(i), err)
		}
		arr := array.MakeFromData(d)
		d.Release()
		built = append(built, arr)
		cols[i] = arr
	}
	return array.NewRecordBatch(sc.schema, cols, rec.NumRows()), nil
}

// convertData rebuilds d (transport form of UC type t) as target, parsing
// decimal strings wherever they sit. The result is a new reference.
func convertData(d arrow.ArrayData, t typemap.Type, target arrow.DataType) (arrow.ArrayData, error) {
	if !t.Contains(typemap.Decimal) {
		d.Retain()
		return d, nil
	}
	switch t.Kind {
	case typemap.Decimal:
		src, ok := array.MakeFromData(d).(*array.LargeString)
		if !ok {
			return nil, fmt.Errorf("a decimal must travel as large_utf8, got %s", d.DataType())
		}
		defer src.Release()
		dt := target.(*arrow.Decimal128Type)
		b := array.NewDecimal128Builder(memory.DefaultAllocator, dt)
		defer b.Release()
		for r := 0; r < src.Len(); r++ {
			if src.IsNull(r) {
				b.AppendNull()
				continue
			}
			n, err := parseDecimal(src.Value(r), dt.Precision, dt.Scale)
			if err != nil {
				return nil, fmt.Errorf("value %d: %w", r, err)
			}
			b.Append(n)
		}
		arr := b.NewArray()
		out := arr.Data()
		out.Retain()
		arr.Release()
		return out, nil
	case typemap.Array:
		child, err := convertData(d.Children()[0], *t.Elem, target.(*arrow.ListType).Elem())
		if err != nil {
			return nil, err
		}
		defer child.Release()
		return array.NewData(target, d.Len(), d.Buffers(), []arrow.ArrayData{child}, d.NullN(), d.Offset()), nil
	case typemap.Map:
		mt := target.(*arrow.MapType)
		entries := d.Children()[0]
		keys, err := convertData(entries.Children()[0], *t.Key, mt.KeyType())
		if err != nil {
			return nil, err
		}
		defer keys.Release()
		vals, err := convertData(entries.Children()[1], *t.Value, mt.ItemType())
		if err != nil {
			return nil, err
		}
		defer vals.Release()
		newEntries := array.NewData(mt.Elem(), entries.Len(), entries.Buffers(), []arrow.ArrayData{keys, vals}, entries.NullN(), entries.Offset())
		defer newEntries.Release()
		return array.NewData(target, d.Len(), d.Buffers(), []arrow.ArrayData{newEntries}, d.NullN(), d.Offset()), nil
	case typemap.Struct:
		st := target.(*arrow.StructType)
		children := make([]arrow.ArrayData, len(t.Fields))
		defer func() {
			for _, c := range children {
				if c != nil {
					c.Release()
				}
			}
		}()
		for i, f := range t.Fields {
			c, err := convertData(d.Children()[i], f.Type, st.Field(i).Type)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
			children[i] = c
		}
		return array.NewData(target, d.Len(), d.Buffers(), children, d.NullN(), d.Offset()), nil
	}
	d.Retain()
	return d, nil
}

// parseDecimal parses a plain decimal literal ("-12.30") into DECIMAL(p,s)
// exactly: more fraction digits than the scale or more integer digits than
// p-s is an error, never a silent rounding.
func parseDecimal(s string, prec, scale int32) (decimal128.Num, error) {
	in := strings.TrimSpace(s)
	neg := false
	if strings.HasPrefix(in, "-") || strings.HasPrefix(in, "+") {
		neg = in[0] == '-'
		in = in[1:]
	}
	intPart, frac, _ := strings.Cut(in, ".")
	if intPart == "" && frac == "" || !allDigits(intPart) || !allDigits(frac) {
		return decimal128.Num{}, fmt.Errorf("%q is not a decimal number", s)
	}
	frac = strings.TrimRight(frac, "0")
	if int32(len(frac)) > scale {
		return decimal128.Num{}, fmt.Errorf("%q has more than %d digits after the point for decimal(%d,%d)", s, scale, prec, scale)
	}
	intPart = strings.TrimLeft(intPart, "0")
	if int32(len(intPart)) > prec-scale {
		return decimal128.Num{}, fmt.Errorf("%q does not fit decimal(%d,%d)", s, prec, scale)
	}
	digits := intPart + frac + strings.Repeat("0", int(scale)-len(frac))
	bi, ok := new(big.Int).SetString("0"+digits, 10)
	if !ok {
		return decimal128.Num{}, fmt.Errorf("%q is not a decimal number", s)
	}
	if neg {
		bi.Neg(bi)
	}
	return decimal128.FromBigInt(bi), nil
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// jsonRecords builds one Arrow batch, in the table's full transport schema,
// from JSON objects as the EphemeralStream JSON path carries them. Unknown
// fields, missing NOT NULL columns and values of the wrong shape are errors.
// Assumption: how the service answers a JSON record with a NOT NULL column
// (or struct field) missing or null is not documented (the Public Preview
// limitations say only "Column optionality must match" for protobuf); the
// emulator refuses it, as the Arrow path does with a source (checkNulls).
func jsonRecords(cols []typemap.Column, schema *arrow.Schema, records []string) (arrow.RecordBatch, error) {
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	index := make(map[string]int, len(cols))
	for i, c := range cols {
		index[c.Name] = i
	}
	for r, text := range records {
		dec := json.NewDecoder(strings.NewReader(text))
		dec.UseNumber()
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil || obj == nil {
			return nil, fmt.Errorf("record %d: not a JSON object", r)
		}
		for name := range obj {
			if _, ok := index[name]; !ok {
				return nil, fmt.Errorf("record %d: field %q is not a column of the table", r, name)
			}
		}
		for i, c := range cols {
			v := obj[c.Name]
			if v == nil && !c.Nullable {
				return nil, fmt.Errorf("record %d: column %q is NOT NULL but missing or null", r, c.Name)
			}
			if err := appendJSON(b.Field(i), c.Type, v); err != nil {
				return nil, fmt.Errorf("record %d: column %q: %w", r, c.Name, err)
			}
		}
	}
	return b.NewRecordBatch(), nil
}

func appendJSON(b array.Builder, t typemap.Type, v any) error {
	if v == nil {
		b.AppendNull()
		return nil
	}
	switch t.Kind {
	case typemap.Boolean:
		bv, ok := v.(bool)
		if !ok {
			return fmt.Errorf("want a boolean, got %T", v)
		}
		b.(*array.BooleanBuilder).Append(bv)
	case typemap.Byte, typemap.Short, typemap.Int, typemap.Long:
		n, err := jsonInt(v)
		if err != nil {
			return err
		}
		var inRange bool
		switch bb := b.(type) {
		case *array.Int8Builder:
			if inRange = n == int64(int8(n)); inRange {
				bb.Append(int8(n))
			}
		case *array.Int16Builder:
			if inRange = n == int64(int16(n)); inRange {
				bb.Append(int16(n))
			}
		case *array.Int32Builder:
			if inRange = n == int64(int32(n)); inRange {
				bb.Append(int32(n))
			}
		case *array.Int64Builder:
			inRange = true
			bb.Append(n)
		}
		if !inRange {
			return fmt.Errorf("%d out of range for %s", n, t.Text())
		}
	case typemap.Float, typemap.Double:
		var f float64
		switch x := v.(type) {
		case json.Number:
			var err error
			if f, err = strconv.ParseFloat(string(x), 64); err != nil {
				return err
			}
		case string:
			var err error
			if f, err = strconv.ParseFloat(x, 64); err != nil {
				return fmt.Errorf("want a number, got %q", x)
			}
		default:
			return fmt.Errorf("want a number, got %T", v)
		}
		if bb, ok := b.(*array.Float32Builder); ok {
			bb.Append(float32(f))
		} else {
			b.(*array.Float64Builder).Append(f)
		}
	case typemap.String:
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("want a string, got %T", v)
		}
		b.(*array.LargeStringBuilder).Append(s)
	case typemap.Decimal:
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case json.Number:
			s = string(x)
		default:
			return fmt.Errorf("want a decimal string or number, got %T", v)
		}
		if _, err := parseDecimal(s, int32(t.Precision), int32(t.Scale)); err != nil {
			return err
		}
		b.(*array.LargeStringBuilder).Append(s)
	case typemap.Variant:
		return appendVariantJSON(b.(*array.StructBuilder), v)
	case typemap.Binary:
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("want a base64 string, got %T", v)
		}
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return fmt.Errorf("binary value is not base64: %w", err)
		}
		b.(*array.BinaryBuilder).Append(raw)
	case typemap.Date:
		switch x := v.(type) {
		case json.Number:
			n, err := x.Int64()
			if err != nil {
				return err
			}
			b.(*array.Date32Builder).Append(arrow.Date32(n))
		case string:
			d, err := time.Parse("2006-01-02", x)
			if err != nil {
				return fmt.Errorf("want a date (days since epoch or YYYY-MM-DD): %w", err)
			}
			b.(*array.Date32Builder).Append(arrow.Date32FromTime(d))
		default:
			return fmt.Errorf("want a date, got %T", v)
		}
	case typemap.Timestamp, typemap.TimestampNTZ:
		switch x := v.(type) {
		case json.Number:
			n, err := x.Int64()
			if err != nil {
				return err
			}
			b.(*array.TimestampBuilder).Append(arrow.Timestamp(n))
		case string:
			ts, err := parseTimestamp(x, t.Kind == typemap.TimestampNTZ)
			if err != nil {
				return err
			}
			b.(*array.TimestampBuilder).Append(arrow.Timestamp(ts.UnixMicro()))
		default:
			return fmt.Errorf("want a timestamp (microseconds since epoch or RFC 3339), got %T", v)
		}
	case typemap.Array:
		list, ok := v.([]any)
		if !ok {
			return fmt.Errorf("want an array, got %T", v)
		}
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		for i, e := range list {
			if err := appendJSON(lb.ValueBuilder(), *t.Elem, e); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
	case typemap.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("want an object, got %T", v)
		}
		mb := b.(*array.MapBuilder)
		mb.Append(true)
		for k, e := range obj {
			var key any = k
			if t.Key.Kind != typemap.String {
				dec := json.NewDecoder(strings.NewReader(k))
				dec.UseNumber()
				if err := dec.Decode(&key); err != nil {
					return fmt.Errorf("map key %q: %w", k, err)
				}
			}
			if err := appendJSON(mb.KeyBuilder(), *t.Key, key); err != nil {
				return fmt.Errorf("map key %q: %w", k, err)
			}
			if err := appendJSON(mb.ItemBuilder(), *t.Value, e); err != nil {
				return fmt.Errorf("map value %q: %w", k, err)
			}
		}
	case typemap.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("want an object, got %T", v)
		}
		sb := b.(*array.StructBuilder)
		for k := range obj {
			if !slices.ContainsFunc(t.Fields, func(f typemap.Field) bool { return f.Name == k }) {
				return fmt.Errorf("struct field %q does not exist", k)
			}
		}
		sb.Append(true)
		for i, f := range t.Fields {
			fv := obj[f.Name]
			if fv == nil && !f.Nullable {
				return fmt.Errorf("struct field %q is NOT NULL", f.Name)
			}
			if err := appendJSON(sb.FieldBuilder(i), f.Type, fv); err != nil {
				return fmt.Errorf("struct field %q: %w", f.Name, err)
			}
		}
	default:
		return fmt.Errorf("unsupported column type %s", t.Text())
	}
	return nil
}

func jsonInt(v any) (int64, error) {
	switch x := v.(type) {
	case json.Number:
		return strconv.ParseInt(string(x), 10, 64)
	case string: // proto3 JSON writes 64-bit integers as strings
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("want an integer, got %T", v)
}

func parseTimestamp(s string, ntz bool) (time.Time, error) {
	layouts := []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999"}
	if !ntz {
		layouts = append(layouts, "2006-01-02 15:04:05.999999999Z07:00")
	}
	for _, l := range layouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("want a timestamp (microseconds since epoch or RFC 3339), got %q", s)
}

// compactJSON is used in error messages to show a value without newlines.
func compactJSON(raw []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}
