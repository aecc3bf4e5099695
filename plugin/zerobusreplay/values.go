package zerobusreplay

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet/variant"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// ntzLayout renders a TIMESTAMP_NTZ value as the wall-clock text the output
// reads back into a TIMESTAMP_NTZ column without a zone.
const ntzLayout = "2006-01-02T15:04:05.999999999"

// value returns row i of a as the Go value arrowconv.ToJSON serialises:
// exact decimals as json.Number, TIMESTAMP as a UTC time.Time,
// TIMESTAMP_NTZ as wall-clock text, DATE as YYYY-MM-DD, BINARY as []byte
// (base64 in JSON), structs and string-keyed maps as objects, lists as
// arrays. Types the UC ↔ Arrow mapping never produces are an error naming
// the type.
func value(a arrow.Array, i int) (any, error) {
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
			v, err := value(a.Field(f), i)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", st.Field(f).Name, err)
			}
			obj[st.Field(f).Name] = v
		}
		return obj, nil
	case *array.Map:
		start, end := a.ValueOffsets(i)
		keys, items := a.Keys(), a.Items()
		_, stringKeys := keys.(*array.String)
		if stringKeys {
			obj := make(map[string]any, end-start)
			for j := start; j < end; j++ {
				v, err := value(items, int(j))
				if err != nil {
					return nil, fmt.Errorf("map value: %w", err)
				}
				obj[keys.(*array.String).Value(int(j))] = v
			}
			return obj, nil
		}
		out := make([]any, 0, end-start)
		for j := start; j < end; j++ {
			k, err := value(keys, int(j))
			if err != nil {
				return nil, fmt.Errorf("map key: %w", err)
			}
			v, err := value(items, int(j))
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
			v, err := value(vals, int(j))
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", j-start, err)
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported Arrow type %s", a.DataType())
}

// rowConverter turns the rows of record batches of one schema into Benthos
// messages: the reserved columns go to metadata, the rest to a JSON body.
type rowConverter struct {
	schema                 *arrow.Schema
	source, offset, emitTS int // column indices; -1 when absent
	body                   []int
	bodyNames              []string
}

func newRowConverter(schema *arrow.Schema) *rowConverter {
	c := &rowConverter{schema: schema, source: -1, offset: -1, emitTS: -1}
	for i, f := range schema.Fields() {
		switch f.Name {
		case ColSource:
			c.source = i
		case ColOffset:
			c.offset = i
		case ColEmitTS:
			c.emitTS = i
		default:
			c.body = append(c.body, i)
			c.bodyNames = append(c.bodyNames, f.Name)
		}
	}
	return c
}

// message converts row i of rec.
func (c *rowConverter) message(rec arrow.RecordBatch, i int) (*service.Message, error) {
	obj := make(map[string]any, len(c.body))
	for k, col := range c.body {
		v, err := value(rec.Column(col), i)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.bodyNames[k], err)
		}
		obj[c.bodyNames[k]] = v
	}
	body, err := arrowconv.ToJSON(obj)
	if err != nil {
		return nil, fmt.Errorf("row body: %w", err)
	}
	msg := service.NewMessage(body)
	if c.source >= 0 {
		if col := rec.Column(c.source); col.IsValid(i) {
			msg.MetaSetMut(ColSource, col.ValueStr(i))
		}
	}
	if c.offset >= 0 {
		if col := rec.Column(c.offset); col.IsValid(i) {
			if o, ok := col.(*array.Int64); ok {
				msg.MetaSetMut(ColOffset, strconv.FormatInt(o.Value(i), 10))
			} else {
				msg.MetaSetMut(ColOffset, col.ValueStr(i))
			}
		}
	}
	if c.emitTS >= 0 {
		if col := rec.Column(c.emitTS); col.IsValid(i) {
			v, err := value(col, i)
			if err != nil {
				return nil, fmt.Errorf("column %s: %w", ColEmitTS, err)
			}
			if t, ok := v.(time.Time); ok {
				msg.MetaSetMut(ColEmitTS, t.Format(time.RFC3339Nano))
			} else {
				msg.MetaSetMut(ColEmitTS, fmt.Sprint(v))
			}
		}
	}
	return msg, nil
}

// isVariant reports whether st is a VARIANT column as stored: a struct of
// exactly the metadata and value binaries (typemap.VariantArrowType; a
// reader may return them as Binary or LargeBinary).
func isVariant(st *arrow.StructType) bool {
	if st.NumFields() != 2 || st.Field(0).Name != typemap.VariantMetadataField || st.Field(1).Name != typemap.VariantValueField {
		return false
	}
	for _, f := range st.Fields() {
		if id := f.Type.ID(); id != arrow.BINARY && id != arrow.LARGE_BINARY {
			return false
		}
	}
	return true
}

// variantValue decodes row i of a VARIANT column into a variant.Value,
// which arrowconv.ToJSON writes as the JSON it holds.
func variantValue(a *array.Struct, i int) (any, error) {
	bin := func(f int) []byte {
		switch c := a.Field(f).(type) {
		case *array.Binary:
			return c.Value(i)
		case *array.LargeBinary:
			return c.Value(i)
		}
		return nil
	}
	v, err := variant.New(bin(0), bin(1))
	if err != nil {
		return nil, fmt.Errorf("variant: %w", err)
	}
	return v, nil
}
