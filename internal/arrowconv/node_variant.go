package arrowconv

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/variant"
)

// variantNode holds a VARIANT column as the struct the service expects
// (typemap.VariantArrowType): per row the metadata and value binaries of the
// Parquet variant encoding of the row's JSON value, built with arrow-go's
// parquet/variant Builder.
//
// The JSON → variant mapping follows Spark's parse_json / from_json
// (org.apache.spark.types.variant.VariantBuilder and JacksonParser.parseVariant),
// so that a value reads back in Databricks as if Spark had parsed the text:
//
//   - an integer literal becomes the smallest of int8, int16, int32, int64
//     that holds it; beyond int64 it is handled as a non-integral number;
//   - a number without an exponent whose digits fit DECIMAL(38) (precision and
//     scale at most 38) becomes a decimal with the scale written ("1.50" keeps
//     scale 2), as DECIMAL4/8/16 by precision (≤ 9, ≤ 18, ≤ 38); otherwise
//     (an exponent, or more digits) a double; a number beyond the double
//     range is an error rather than an infinity;
//   - object keys go to the metadata dictionary; a duplicate key is an error
//     (Spark's default, spark.sql.variant.allowDuplicateKeys=false);
//   - a JSON null is the variant null, not SQL NULL, as in Spark's from_json
//     (parseVariant "we want to return a variant null"): only a missing field
//     is SQL NULL, so a NOT NULL VARIANT column takes an explicit null.
//
// Structured values map the same way, with time.Time and []byte becoming the
// strings ToJSON gives them (RFC 3339, base64), so both paths store the same
// variant for the same JSON.
type variantNode struct {
	base
	meta, value binColumn
	b           variant.Builder
	// fields and elems are stacks of the open objects' entries and the open
	// arrays' element offsets, shared by all nesting levels of a row.
	fields []variant.FieldEntry
	elems  []int
	// keys interns object keys read from JSON, which the builder must own
	// as strings, so a key repeated across rows and batches is allocated
	// once per state rather than once per row. Bounded by maxInternedKeys
	// and maxInternedKeyLen; keys beyond either are allocated per use.
	keys map[string]string
}

// Bounds of variantNode.keys: enough for the keys of realistic documents,
// small enough that high-cardinality keys (ids used as keys) cannot grow a
// pooled state without limit.
const (
	maxInternedKeys   = 1024
	maxInternedKeyLen = 64
)

// variantNull is the encoding of the variant null: empty metadata and the
// primitive null header. It fills the children of SQL NULL rows so that every
// child value is a valid variant even where the struct is null.
var variantNull = struct{ meta, value []byte }{variant.EmptyMetadataBytes[:], []byte{0}}

func (n *variantNode) decode(st *state) error {
	n.begin()
	if err := n.encodeJSON(&st.scanner, 0); err != nil {
		return err
	}
	return n.commit()
}

func (n *variantNode) put(st *state, v any) error {
	n.begin()
	if err := n.encodeGo(v, 0); err != nil {
		return err
	}
	return n.commit()
}

// begin starts a row with a fresh builder. Builder.Reset is not used: in
// arrow-go v18.8.0 it keeps the previous rows' dictionary size
// (totalDictSize), so every later metadata grows by all earlier keys' bytes.
func (n *variantNode) begin() {
	n.b = variant.Builder{}
	n.fields, n.elems = n.fields[:0], n.elems[:0]
}

// commit ends the row's value: the builder's metadata and value are copied
// into the column.
func (n *variantNode) commit() error {
	v, err := n.b.Build()
	if err != nil {
		return kerr(ErrInvalidValue, "encoding VARIANT: %v", err)
	}
	n.meta.add(v.Metadata().Bytes())
	n.value.add(v.Bytes())
	n.validity.add(true)
	return nil
}

// encodeJSON appends the JSON value at the scanner position to the builder.
func (n *variantNode) encodeJSON(s *scanner, depth int) error {
	if depth > maxDepth {
		return s.errorf("nesting deeper than %d", maxDepth)
	}
	b := &n.b
	switch c := s.peek(); c {
	case '{':
		s.pos++
		start, mark := b.Offset(), len(n.fields)
		if s.peek() == '}' {
			s.pos++
			return n.finishObject(start, mark)
		}
		for {
			if s.peek() != '"' {
				return s.errorf("expected object key")
			}
			k, err := s.readString()
			if err != nil {
				return err
			}
			n.fields = append(n.fields, b.NextField(start, n.key(k)))
			if err := s.expect(':'); err != nil {
				return err
			}
			if err := n.encodeJSON(s, depth+1); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.pos++
			case '}':
				s.pos++
				return n.finishObject(start, mark)
			default:
				return s.errorf("expected ',' or '}' in object")
			}
		}
	case '[':
		s.pos++
		start, mark := b.Offset(), len(n.elems)
		if s.peek() == ']' {
			s.pos++
			return n.finishArray(start, mark)
		}
		for {
			n.elems = append(n.elems, b.NextElement(start))
			if err := n.encodeJSON(s, depth+1); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.pos++
			case ']':
				s.pos++
				return n.finishArray(start, mark)
			default:
				return s.errorf("expected ',' or ']' in array")
			}
		}
	case '"':
		str, err := s.readString()
		if err != nil {
			return err
		}
		return b.AppendString(unsafe.String(unsafe.SliceData(str), len(str))) // copied
	case 't':
		if err := s.literal("true"); err != nil {
			return err
		}
		return b.AppendBool(true)
	case 'f':
		if err := s.literal("false"); err != nil {
			return err
		}
		return b.AppendBool(false)
	case 'n':
		if err := s.literal("null"); err != nil {
			return err
		}
		return b.AppendNull()
	case 0:
		return s.errorf("unexpected end of input")
	default:
		if c != '-' && (c < '0' || c > '9') {
			return s.notValue(c)
		}
		text, integer, err := s.readNumber()
		if err != nil {
			return err
		}
		return n.appendNumber(text, integer)
	}
}

// key returns object key k as a string the builder may keep until Build (it
// must own its bytes): the interned copy when there is one.
func (n *variantNode) key(k []byte) string {
	if s, ok := n.keys[string(k)]; ok {
		return s
	}
	s := string(k)
	if len(s) <= maxInternedKeyLen && len(n.keys) < maxInternedKeys {
		if n.keys == nil {
			n.keys = make(map[string]string)
		}
		n.keys[s] = s
	}
	return s
}

func (n *variantNode) finishObject(start, mark int) error {
	err := n.b.FinishObject(start, n.fields[mark:])
	n.fields = n.fields[:mark]
	if err != nil {
		return kerr(ErrDuplicateField, "VARIANT object: %v", err)
	}
	return nil
}

func (n *variantNode) finishArray(start, mark int) error {
	err := n.b.FinishArray(start, n.elems[mark:])
	n.elems = n.elems[:mark]
	if err != nil {
		return kerr(ErrInvalidValue, "VARIANT array: %v", err)
	}
	return nil
}

// appendNumber appends a JSON number as Spark's VariantBuilder does: an
// integer literal as the smallest integer type, else a decimal when the text
// has no exponent and fits DECIMAL(38), else a double.
func (n *variantNode) appendNumber(text []byte, integer bool) error {
	if integer {
		if v, ok := parseIntFast(text); ok {
			return n.b.AppendInt(v)
		}
		if v, err := strconv.ParseInt(unsafe.String(unsafe.SliceData(text), len(text)), 10, 64); err == nil {
			return n.b.AppendInt(v)
		}
	}
	if ok, err := n.appendDecimal(text); ok || err != nil {
		return err
	}
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(text), len(text)), 64)
	if err != nil || math.IsInf(f, 0) {
		return kerr(ErrOutOfRange, "number %s is beyond the range of a double, so a VARIANT cannot hold it", text)
	}
	return n.b.AppendFloat64(f)
}

// maxVariantDecimal is the largest precision and scale of a variant decimal
// (DECIMAL16 holds 38 digits).
const maxVariantDecimal = 38

// appendDecimal appends text ("-12.50", "123") as a variant decimal when it
// has no exponent and at most 38 significant digits and fraction digits;
// ok is false when it does not qualify.
func (n *variantNode) appendDecimal(text []byte) (ok bool, err error) {
	neg := len(text) > 0 && text[0] == '-'
	digits := text
	if neg {
		digits = digits[1:]
	}
	var unscaled [2 * maxVariantDecimal]byte
	nd, scale, point := 0, 0, false
	for _, c := range digits {
		switch {
		case c == '.':
			point = true
			continue
		case c < '0' || c > '9':
			return false, nil // an exponent: a double
		}
		if point {
			scale++
		}
		if nd == 0 && c == '0' {
			continue // leading zero: not significant
		}
		if nd == len(unscaled) {
			return false, nil
		}
		unscaled[nd] = c
		nd++
	}
	precision := max(nd, 1)
	if precision > maxVariantDecimal || scale > maxVariantDecimal {
		return false, nil
	}
	sig := unscaled[:nd]
	if precision <= 18 && scale <= 18 {
		var v int64
		for _, c := range sig {
			v = v*10 + int64(c-'0')
		}
		if neg {
			v = -v
		}
		if precision <= 9 && scale <= 9 {
			return true, n.b.AppendDecimal4(uint8(scale), decimal.Decimal32(v))
		}
		return true, n.b.AppendDecimal8(uint8(scale), decimal.Decimal64(v))
	}
	var bi big.Int // zero when there are no significant digits
	if nd > 0 {
		bi.SetString(string(sig), 10)
	}
	if neg {
		bi.Neg(&bi)
	}
	return true, n.b.AppendDecimal16(uint8(scale), decimal128.FromBigInt(&bi))
}

// encodeGo appends a structured value (the Go types Bloblang produces) to
// the builder.
func (n *variantNode) encodeGo(v any, depth int) error {
	if depth > maxDepth {
		return kerr(ErrInvalidValue, "value nested deeper than %d", maxDepth)
	}
	b := &n.b
	switch v := v.(type) {
	case nil:
		return b.AppendNull()
	case bool:
		return b.AppendBool(v)
	case string:
		if !utf8.ValidString(v) {
			return kerr(ErrInvalidValue, "invalid UTF-8 in string for VARIANT")
		}
		return b.AppendString(v)
	case int:
		return b.AppendInt(int64(v))
	case int8:
		return b.AppendInt(int64(v))
	case int16:
		return b.AppendInt(int64(v))
	case int32:
		return b.AppendInt(int64(v))
	case int64:
		return b.AppendInt(v)
	case uint:
		return n.appendUint(uint64(v))
	case uint8:
		return b.AppendInt(int64(v))
	case uint16:
		return b.AppendInt(int64(v))
	case uint32:
		return b.AppendInt(int64(v))
	case uint64:
		return n.appendUint(v)
	case float32:
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return kerr(ErrInvalidValue, "value %v: JSON has no NaN or Infinity, so a VARIANT cannot hold it", v)
		}
		return b.AppendFloat32(v)
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return kerr(ErrInvalidValue, "value %v: JSON has no NaN or Infinity, so a VARIANT cannot hold it", v)
		}
		return b.AppendFloat64(v)
	case json.Number:
		text := textOf(string(v))
		if _, _, ok := parseNumLit(text, nil, false); !ok {
			return kerr(ErrInvalidValue, "json.Number %q is not a valid JSON number", string(v))
		}
		return n.appendNumber(text, isIntegerLiteral(text))
	case time.Time, []byte:
		// The strings ToJSON writes for them.
		text, err := appendJSON(nil, v, depth)
		if err != nil {
			return kerr(ErrInvalidValue, "%v", err)
		}
		return b.AppendString(string(text[1 : len(text)-1]))
	case map[string]any:
		// Keys in sorted order, so that the same value always gives the same
		// metadata dictionary and bytes.
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		start, mark := b.Offset(), len(n.fields)
		for _, k := range keys {
			if !utf8.ValidString(k) {
				return kerr(ErrInvalidValue, "invalid UTF-8 in VARIANT object key")
			}
			n.fields = append(n.fields, b.NextField(start, k))
			if err := n.encodeGo(v[k], depth+1); err != nil {
				return at(keySeg([]byte(k)), err)
			}
		}
		return n.finishObject(start, mark)
	case []any:
		start, mark := b.Offset(), len(n.elems)
		for i, e := range v {
			n.elems = append(n.elems, b.NextElement(start))
			if err := n.encodeGo(e, depth+1); err != nil {
				return at("["+strconv.Itoa(i)+"]", err)
			}
		}
		return n.finishArray(start, mark)
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return b.AppendNull()
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return kerr(ErrInvalidValue, "serialising %T to JSON: %v", v, err)
	}
	s := scanner{data: raw}
	return n.encodeJSON(&s, depth)
}

func (n *variantNode) appendUint(u uint64) error {
	if u <= math.MaxInt64 {
		return n.b.AppendInt(int64(u))
	}
	ok, err := n.appendDecimal(strconv.AppendUint(nil, u, 10)) // 20 digits: always a decimal
	if !ok && err == nil {
		return n.b.AppendFloat64(float64(u))
	}
	return err
}

// isIntegerLiteral reports whether a valid JSON number has neither a
// fraction nor an exponent.
func isIntegerLiteral(text []byte) bool {
	for _, c := range text {
		if c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

func (n *variantNode) appendNull() {
	n.meta.add(variantNull.meta)
	n.value.add(variantNull.value)
	n.validity.add(false)
}

func (n *variantNode) appendEmpty() {
	n.meta.add(variantNull.meta)
	n.value.add(variantNull.value)
	n.validity.add(true)
}

func (n *variantNode) truncate(k int) {
	n.meta.truncate(k)
	n.value.truncate(k)
	n.truncateBits(k)
}

func (n *variantNode) reset(c int) {
	n.meta.reset(c)
	n.value.reset(c)
	n.resetBits(c)
}

func (n *variantNode) build() (arrow.ArrayData, error) {
	size := n.n
	st := n.dt.(*arrow.StructType)
	md := n.meta.build(st.Field(0).Type, size)
	defer md.Release()
	vd := n.value.build(st.Field(1).Type, size)
	defer vd.Release()
	bits, nulls := n.takeBits()
	return newData(n.dt, size, []*memory.Buffer{bits}, []arrow.ArrayData{md, vd}, nulls), nil
}

// binColumn holds the values of a LargeBinary child without nulls: offsets
// and data.
type binColumn struct {
	offsets []int64
	data    []byte
	// dataHint is the data size of the previous batch, to size the next one.
	dataHint int
}

func (c *binColumn) add(b []byte) {
	c.data = append(c.data, b...)
	c.offsets = append(c.offsets, int64(len(c.data)))
}

func (c *binColumn) truncate(k int) {
	c.offsets = c.offsets[:k+1]
	c.data = c.data[:c.offsets[k]]
}

func (c *binColumn) reset(capHint int) {
	c.offsets = append(getSlice[int64](capHint+1), 0)
	c.data = buffers.get(c.dataHint)
}

func (c *binColumn) build(dt arrow.DataType, size int) arrow.ArrayData {
	offs := pooledSlice(c.offsets)
	data := pooledBuffer(c.data)
	c.dataHint = len(c.data)
	c.offsets, c.data = nil, nil
	return newData(dt, size, []*memory.Buffer{nil, offs, data}, nil, 0)
}

// EncodeVariant encodes a structured value (the Go types a decoded JSON
// document or Bloblang holds) as a VARIANT's metadata and value binaries,
// by the rules the converter uses for a VARIANT column; nil is the variant
// null.
func EncodeVariant(v any) (metadata, value []byte, err error) {
	var n variantNode
	n.begin()
	if err := n.encodeGo(v, 0); err != nil {
		return nil, nil, rowErrorless(err)
	}
	return n.finish()
}

// EncodeVariantJSON encodes one JSON document as a VARIANT's metadata and
// value binaries, by the rules the converter uses for a VARIANT column.
func EncodeVariantJSON(doc []byte) (metadata, value []byte, err error) {
	var n variantNode
	n.begin()
	s := scanner{data: doc}
	if err := n.encodeJSON(&s, 0); err != nil {
		return nil, nil, err
	}
	if !s.atEnd() {
		return nil, nil, s.errorf("trailing data after the JSON value (%q)", s.data[s.pos])
	}
	return n.finish()
}

// finish builds the builder's value for the Encode functions.
func (n *variantNode) finish() (metadata, value []byte, err error) {
	v, err := n.b.Build()
	if err != nil {
		return nil, nil, fmt.Errorf("encoding VARIANT: %w", err)
	}
	return v.Metadata().Bytes(), v.Bytes(), nil
}

// rowErrorless turns an error located inside a value (a pathError) into a
// plain error that still names the location.
func rowErrorless(err error) error {
	if pe, ok := err.(*pathError); ok {
		return fmt.Errorf("%s: %w", pe.path(), pe.err)
	}
	return err
}

// VariantJSON decodes a VARIANT value in the Parquet variant binary encoding
// (the metadata and value members of the column's struct) and serialises it
// with ToJSON.
func VariantJSON(metadata, value []byte) ([]byte, error) {
	v, err := variant.New(metadata, value)
	if err != nil {
		return nil, err
	}
	return appendVariant(nil, v, 0)
}

// appendVariant serialises a variant value as ToJSON does the equivalent Go
// value: objects with keys in sorted byte order (the variant encoding already
// stores them so), decimals with their scale's fraction digits ("1.50"),
// dates, times and timestamps as strings (RFC 3339; zone-less for the NTZ
// kinds), binary as base64, UUIDs in their canonical form.
func appendVariant(dst []byte, v variant.Value, depth int) ([]byte, error) {
	if depth > maxDepth {
		return dst, fmt.Errorf("value nested deeper than %d", maxDepth)
	}
	switch x := v.Value().(type) {
	case variant.ObjectValue:
		dst = append(dst, '{')
		for i := range x.NumElements() {
			f, err := x.FieldAt(i)
			if err != nil {
				return dst, err
			}
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendQuoted(dst, f.Key)
			dst = append(dst, ':')
			if dst, err = appendVariant(dst, f.Value, depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	case variant.ArrayValue:
		dst = append(dst, '[')
		for i := range x.Len() {
			e, err := x.Value(i)
			if err != nil {
				return dst, err
			}
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = appendVariant(dst, e, depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case variant.DecimalValue[decimal.Decimal32]:
		return appendScaled(dst, strconv.FormatInt(int64(x.Value.(decimal.Decimal32)), 10), int(x.Scale)), nil
	case variant.DecimalValue[decimal.Decimal64]:
		return appendScaled(dst, strconv.FormatInt(int64(x.Value.(decimal.Decimal64)), 10), int(x.Scale)), nil
	case variant.DecimalValue[decimal.Decimal128]:
		return appendScaled(dst, x.Value.(decimal.Decimal128).BigInt().String(), int(x.Scale)), nil
	case arrow.Date32:
		dst = append(dst, '"')
		dst = x.ToTime().AppendFormat(dst, time.DateOnly)
		return append(dst, '"'), nil
	case arrow.Time64:
		dst = append(dst, '"')
		dst = x.ToTime(arrow.Microsecond).AppendFormat(dst, "15:04:05.999999")
		return append(dst, '"'), nil
	case arrow.Timestamp:
		unit, layout := arrow.Microsecond, time.RFC3339Nano
		switch v.Type() {
		case variant.TimestampNanos, variant.TimestampNanosNTZ:
			unit = arrow.Nanosecond
		}
		switch v.Type() {
		case variant.TimestampMicrosNTZ, variant.TimestampNanosNTZ:
			layout = "2006-01-02T15:04:05.999999999"
		}
		dst = append(dst, '"')
		dst = x.ToTime(unit).UTC().AppendFormat(dst, layout)
		return append(dst, '"'), nil
	case []byte:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, x)
		return append(dst, '"'), nil
	case interface{ String() string }: // uuid.UUID
		return appendQuoted(dst, x.String()), nil
	}
	return appendJSON(dst, v.Value(), depth)
}

// appendScaled writes the decimal with unscaled digits ("-150") and scale (2)
// as "-1.50".
func appendScaled(dst []byte, unscaled string, scale int) []byte {
	if unscaled[0] == '-' {
		dst = append(dst, '-')
		unscaled = unscaled[1:]
	}
	if scale == 0 {
		return append(dst, unscaled...)
	}
	if len(unscaled) <= scale {
		dst = append(dst, '0', '.')
		for range scale - len(unscaled) {
			dst = append(dst, '0')
		}
		return append(dst, unscaled...)
	}
	dst = append(dst, unscaled[:len(unscaled)-scale]...)
	dst = append(dst, '.')
	return append(dst, unscaled[len(unscaled)-scale:]...)
}
