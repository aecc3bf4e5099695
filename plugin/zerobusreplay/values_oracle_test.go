package zerobusreplay

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
)

// The row → JSON body conversion as it was before nested columns were
// written straight into the body bytes (commit 365c8ca): each nested value
// built as map[string]any / []any and serialised with arrowconv.AppendJSON.
// Kept here only as the oracle of the differential test.

// oracleValue is the value function of the input before nested columns
// were written straight into the body; it returns row i of a as the Go value arrowconv.ToJSON serialises:
// exact decimals as json.Number, TIMESTAMP as a UTC time.Time,
// TIMESTAMP_NTZ as wall-clock text, DATE as YYYY-MM-DD, BINARY as []byte
// (base64 in JSON), structs and string-keyed maps as objects, lists as
// arrays. Types the UC ↔ Arrow mapping never produces are an error naming
// the type.
func oracleValue(a arrow.Array, i int) (any, error) {
	if a.IsNull(i) {
		return nil, nil
	}
	switch a := a.(type) {
	case *array.Boolean:
		return a.Value(i), nil
	case *array.Int8:
		return a.Value(i), nil
	case *array.Int16:
		return a.Value(i), nil
	case *array.Int32:
		return a.Value(i), nil
	case *array.Int64:
		return a.Value(i), nil
	case *array.Uint8:
		return a.Value(i), nil
	case *array.Uint16:
		return a.Value(i), nil
	case *array.Uint32:
		return a.Value(i), nil
	case *array.Uint64:
		return a.Value(i), nil
	case *array.Float32:
		return a.Value(i), nil
	case *array.Float64:
		return a.Value(i), nil
	case *array.String:
		return a.Value(i), nil
	case *array.LargeString:
		return a.Value(i), nil
	case *array.StringView:
		return a.Value(i), nil
	case *array.Binary:
		return a.Value(i), nil
	case *array.LargeBinary:
		return a.Value(i), nil
	case *array.BinaryView:
		return a.Value(i), nil
	case *array.FixedSizeBinary:
		return a.Value(i), nil
	case *array.Decimal128:
		return json.Number(a.Value(i).ToString(a.DataType().(*arrow.Decimal128Type).Scale)), nil
	case *array.Decimal256:
		return json.Number(a.Value(i).ToString(a.DataType().(*arrow.Decimal256Type).Scale)), nil
	case *array.Date32:
		return a.Value(i).ToTime().Format(time.DateOnly), nil
	case *array.Date64:
		return a.Value(i).ToTime().Format(time.DateOnly), nil
	case *array.Timestamp:
		tt := a.DataType().(*arrow.TimestampType)
		t := a.Value(i).ToTime(tt.Unit)
		if tt.TimeZone == "" {
			return t.UTC().Format(ntzLayout), nil
		}
		return t.UTC(), nil
	case *array.Struct:
		st := a.DataType().(*arrow.StructType)
		if isVariant(st) {
			return variantValue(a, i)
		}
		obj := make(map[string]any, st.NumFields())
		for f := 0; f < st.NumFields(); f++ {
			v, err := oracleValue(a.Field(f), i)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", st.Field(f).Name, err)
			}
			obj[st.Field(f).Name] = v
		}
		return obj, nil
	case *array.Map:
		start, end := a.ValueOffsets(i)
		keys, items := a.Keys(), a.Items()
		if sk, ok := keys.(*array.String); ok {
			obj := make(map[string]any, end-start)
			for j := start; j < end; j++ {
				v, err := oracleValue(items, int(j))
				if err != nil {
					return nil, fmt.Errorf("map value: %w", err)
				}
				obj[sk.Value(int(j))] = v
			}
			return obj, nil
		}
		out := make([]any, 0, end-start)
		for j := start; j < end; j++ {
			k, err := oracleValue(keys, int(j))
			if err != nil {
				return nil, fmt.Errorf("map key: %w", err)
			}
			v, err := oracleValue(items, int(j))
			if err != nil {
				return nil, fmt.Errorf("map value: %w", err)
			}
			out = append(out, map[string]any{"key": k, "value": v})
		}
		return out, nil
	case array.ListLike:
		start, end := a.ValueOffsets(i)
		vals := a.ListValues()
		out := make([]any, 0, end-start)
		for j := start; j < end; j++ {
			v, err := oracleValue(vals, int(j))
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", j-start, err)
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported Arrow type %s", a.DataType())
}

// oracleAppendValue is appendValue before nested columns were written
// straight into the body: it appends row i of a, as arrowconv.ToJSON writes oracleValue(a, i),
// to dst; the common scalar columns (timestamps and dates among them, whose
// text has nothing to escape) are written without going through an
// interface value, which would allocate per row.
func oracleAppendValue(dst []byte, a arrow.Array, i int) ([]byte, error) {
	if a.IsNull(i) {
		return append(dst, "null"...), nil
	}
	switch a := a.(type) {
	case *array.Int64:
		return arrowconv.AppendJSONInt(dst, a.Value(i)), nil
	case *array.Int32:
		return arrowconv.AppendJSONInt(dst, int64(a.Value(i))), nil
	case *array.Int16:
		return arrowconv.AppendJSONInt(dst, int64(a.Value(i))), nil
	case *array.Int8:
		return arrowconv.AppendJSONInt(dst, int64(a.Value(i))), nil
	case *array.String:
		return arrowconv.AppendJSONString(dst, a.Value(i)), nil
	case *array.LargeString:
		return arrowconv.AppendJSONString(dst, a.Value(i)), nil
	case *array.Float64:
		return arrowconv.AppendJSONFloat(dst, a.Value(i), 64)
	case *array.Float32:
		return arrowconv.AppendJSONFloat(dst, float64(a.Value(i)), 32)
	case *array.Boolean:
		return strconv.AppendBool(dst, a.Value(i)), nil
	case *array.Timestamp:
		tt := a.DataType().(*arrow.TimestampType)
		t := a.Value(i).ToTime(tt.Unit).UTC()
		if tt.TimeZone == "" {
			dst = append(dst, '"')
			dst = t.AppendFormat(dst, ntzLayout)
			return append(dst, '"'), nil
		}
		if y := t.Year(); y < 0 || y > 9999 {
			return arrowconv.AppendJSON(dst, t) // the serialiser's range error
		}
		dst = append(dst, '"')
		dst = t.AppendFormat(dst, time.RFC3339Nano)
		return append(dst, '"'), nil
	case *array.Decimal128:
		// ToString writes -?digits[.digits], always a JSON number, so the
		// json.Number check ToJSON makes of value's result cannot fail.
		return append(dst, a.Value(i).ToString(a.DataType().(*arrow.Decimal128Type).Scale)...), nil
	case *array.Date32:
		dst = append(dst, '"')
		dst = a.Value(i).ToTime().AppendFormat(dst, time.DateOnly)
		return append(dst, '"'), nil
	}
	v, err := oracleValue(a, i)
	if err != nil {
		return dst, err
	}
	return arrowconv.AppendJSON(dst, v)
}
