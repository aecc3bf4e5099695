package zerobusreplay

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet/variant"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// ntzLayout renders a TIMESTAMP_NTZ value as the wall-clock text the output
// reads back into a TIMESTAMP_NTZ column without a zone.
const ntzLayout = "2006-01-02T15:04:05.999999999"

// rowConverter turns the rows of record batches of one schema into Benthos
// messages: the reserved columns go to metadata, the rest to a JSON body.
// The bodies of a batch are written into one buffer, keys in sorted order as
// ToJSON writes an object and every value, nested ones included, straight
// from the Arrow arrays (appendValue), so a body is byte for byte ToJSON of
// the row's object without building that object or any nested value; the
// metadata texts of a batch share one string.
type rowConverter struct {
	schema                 *arrow.Schema
	source, offset, emitTS int         // column indices; -1 when absent
	body                   []jsonField // body columns, by name in byte order
	emitTSNode             *jsonNode   // how to write a nested _zb_emit_ts column's values
	mapOrder               []int       // scratch: entry order of string-keyed maps being written
	avgBody                int         // average body bytes of the last batch, to size the next buffer
	lastSource             string      // the last _zb_source text, reused while it repeats
	lastSourceMeta         any         // lastSource as a metadata value (boxed once)
}

func newRowConverter(schema *arrow.Schema) *rowConverter {
	c := &rowConverter{schema: schema, source: -1, offset: -1, emitTS: -1}
	var body []int
	for i, f := range schema.Fields() {
		switch f.Name {
		case ColSource:
			c.source = i
		case ColOffset:
			c.offset = i
		case ColEmitTS:
			c.emitTS = i
			c.emitTSNode = newJSONNode(f.Type)
		default:
			body = append(body, i)
		}
	}
	// A repeated column name keeps all its columns, as the body always did.
	c.body = planFields(schema.Fields(), body, false)
	return c
}

// messages converts every row of rec.
func (c *rowConverter) messages(rec arrow.RecordBatch) (service.MessageBatch, error) {
	n := int(rec.NumRows())
	cols := rec.Columns()
	buf := make([]byte, 0, n*max(c.avgBody, 16))
	ends := make([]int, n)
	var err error
	for i := range n {
		buf = append(buf, '{')
		for _, f := range c.body {
			buf = append(buf, f.key...)
			if buf, err = c.appendValue(buf, cols[f.index], i, f.node, 0); err != nil {
				return nil, fmt.Errorf("row %d: column %s: %w", i, f.name, err)
			}
		}
		buf = append(buf, '}')
		ends[i] = len(buf)
	}
	if n > 0 {
		c.avgBody = len(buf)/n + 1
	}
	offsets, emits, err := c.metaTexts(cols, n)
	if err != nil {
		return nil, err
	}
	batch := make(service.MessageBatch, n)
	start := 0
	for i := range n {
		msg := service.NewMessage(buf[start:ends[i]:ends[i]])
		start = ends[i]
		if c.source >= 0 {
			if col := cols[c.source]; col.IsValid(i) {
				msg.MetaSetMut(ColSource, c.sourceMeta(col, i))
			}
		}
		if offsets != nil && cols[c.offset].IsValid(i) {
			msg.MetaSetMut(ColOffset, offsets[i])
		}
		if emits != nil && cols[c.emitTS].IsValid(i) {
			msg.MetaSetMut(ColEmitTS, emits[i])
		}
		batch[i] = msg
	}
	return batch, nil
}

// sourceMeta is row i of the _zb_source column as a metadata value: a
// string of its own (not one pointing into the batch's Arrow buffers),
// reused, without a new allocation, while rows carry the same source, as
// consecutive rows mostly do.
func (c *rowConverter) sourceMeta(col arrow.Array, i int) any {
	var s string
	if sc, ok := col.(*array.String); ok {
		s = sc.Value(i)
	} else {
		s = col.ValueStr(i)
	}
	if s != c.lastSource || c.lastSourceMeta == nil {
		c.lastSource = strings.Clone(s)
		c.lastSourceMeta = c.lastSource
	}
	return c.lastSourceMeta
}

// metaTexts renders the _zb_offset and _zb_emit_ts metadata of the n rows
// into one string and returns each row's text as a substring of it (nil
// when the column is absent; "" for a null row).
func (c *rowConverter) metaTexts(cols []arrow.Array, n int) (offsets, emits []string, err error) {
	if c.offset < 0 && c.emitTS < 0 {
		return nil, nil, nil
	}
	var txt []byte
	var offEnds, emitEnds []int
	emitFrom := 0 // where the _zb_emit_ts texts start in txt
	if c.offset >= 0 {
		offEnds = make([]int, n)
		col := cols[c.offset]
		o, isInt := col.(*array.Int64)
		for i := range n {
			if col.IsValid(i) {
				if isInt {
					txt = strconv.AppendInt(txt, o.Value(i), 10)
				} else {
					txt = append(txt, col.ValueStr(i)...)
				}
			}
			offEnds[i] = len(txt)
		}
	}
	if c.emitTS >= 0 {
		emitFrom = len(txt)
		emitEnds = make([]int, n)
		col := cols[c.emitTS]
		ts, isTS := col.(*array.Timestamp)
		var tt *arrow.TimestampType
		if isTS {
			tt = ts.DataType().(*arrow.TimestampType)
		}
		for i := range n {
			switch {
			case !col.IsValid(i):
			case isTS && tt.TimeZone != "":
				txt = ts.Value(i).ToTime(tt.Unit).UTC().AppendFormat(txt, time.RFC3339Nano)
			default:
				if txt, err = c.appendMetaText(txt, col, i); err != nil {
					return nil, nil, fmt.Errorf("row %d: column %s: %w", i, ColEmitTS, err)
				}
			}
			emitEnds[i] = len(txt)
		}
	}
	all := string(txt)
	split := func(ends []int, from int) []string {
		out := make([]string, n)
		for i, e := range ends {
			out[i] = all[from:e]
			from = e
		}
		return out
	}
	if offEnds != nil {
		offsets = split(offEnds, 0)
	}
	if emitEnds != nil {
		emits = split(emitEnds, emitFrom)
	}
	return offsets, emits, nil
}

// appendMetaText appends row i of a _zb_emit_ts column that is not a
// zoned TIMESTAMP as metadata text: a scalar as fmt prints the Go value
// the input has always read it as (zone-less timestamps, dates and strings
// bare), a nested value as its JSON text.
func (c *rowConverter) appendMetaText(dst []byte, col arrow.Array, i int) ([]byte, error) {
	var v any
	switch a := col.(type) {
	case *array.Struct:
		if !c.emitTSNode.variant {
			return c.appendValue(dst, col, i, c.emitTSNode, 0)
		}
		var err error
		if v, err = variantValue(a, i); err != nil {
			return dst, err
		}
	case array.ListLike:
		return c.appendValue(dst, col, i, c.emitTSNode, 0)
	case *array.Timestamp:
		tt := a.DataType().(*arrow.TimestampType)
		return a.Value(i).ToTime(tt.Unit).UTC().AppendFormat(dst, ntzLayout), nil
	case *array.Date32:
		return a.Value(i).ToTime().AppendFormat(dst, time.DateOnly), nil
	case *array.Date64:
		return a.Value(i).ToTime().AppendFormat(dst, time.DateOnly), nil
	case *array.Decimal128:
		return appendDecimal128(dst, a.Value(i), a.DataType().(*arrow.Decimal128Type).Scale), nil // ToString's text
	case *array.Decimal256:
		return append(dst, a.Value(i).ToString(a.DataType().(*arrow.Decimal256Type).Scale)...), nil
	case interface{ Value(int) string }: // STRING, LARGE_STRING, STRING_VIEW
		return append(dst, a.Value(i)...), nil
	case interface{ Value(int) []byte }: // the binaries
		v = a.Value(i)
	case *array.Boolean:
		v = a.Value(i)
	case *array.Int8:
		v = a.Value(i)
	case *array.Int16:
		v = a.Value(i)
	case *array.Int32:
		v = a.Value(i)
	case *array.Int64:
		v = a.Value(i)
	case *array.Uint8:
		v = a.Value(i)
	case *array.Uint16:
		v = a.Value(i)
	case *array.Uint32:
		v = a.Value(i)
	case *array.Uint64:
		v = a.Value(i)
	case *array.Float32:
		v = a.Value(i)
	case *array.Float64:
		v = a.Value(i)
	default:
		return dst, fmt.Errorf("unsupported Arrow type %s", col.DataType())
	}
	return fmt.Append(dst, v), nil
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
