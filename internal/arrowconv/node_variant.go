package arrowconv

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/variant"
)

// variantNode holds a VARIANT column as the struct the service expects
// (typemap.VariantArrowType): per row the metadata and value binaries of the
// Parquet variant encoding of the row's JSON value, written by
// variantEncoder (byte for byte as arrow-go's parquet/variant Builder would).
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
	// enc writes each row's value straight onto value.data and its metadata
	// onto meta.data, reusing its dictionary and stacks across rows and
	// batches, so a row costs no allocation once the buffers have grown.
	enc variantEncoder
}

// variantNull is the encoding of the variant null: empty metadata and the
// primitive null header. It fills the children of SQL NULL rows so that every
// child value is a valid variant even where the struct is null.
var variantNull = struct{ meta, value []byte }{variant.EmptyMetadataBytes[:], []byte{0}}

func (n *variantNode) decode(st *state) error {
	n.enc.begin(n.value.data)
	return n.commit(n.enc.encodeJSON(&st.scanner, 0))
}

func (n *variantNode) put(st *state, v any) error {
	n.enc.begin(n.value.data)
	return n.commit(n.enc.encodeGo(v, 0))
}

// commit ends the row's value, already in value.data, by appending its
// metadata; after an error it takes the row's partial value back out.
func (n *variantNode) commit(err error) error {
	e := &n.enc
	if err == nil {
		n.meta.data, err = e.appendMetadata(n.meta.data)
		if err != nil {
			err = kerr(ErrInvalidValue, "encoding VARIANT: %v", err)
		}
	}
	n.value.data = e.buf
	e.buf = nil // the column owns its data
	if err != nil {
		n.value.data = n.value.data[:e.base]
		return err
	}
	n.meta.seal()
	n.value.seal()
	n.validity.add(true)
	return nil
}

// encodeJSON appends the JSON value at the scanner position.
func (e *variantEncoder) encodeJSON(s *scanner, depth int) error {
	if depth > maxDepth {
		return s.errorf("nesting deeper than %d", maxDepth)
	}
	switch c := s.peek(); c {
	case '{':
		s.pos++
		start, mark := e.offset(), len(e.fields)
		if s.peek() == '}' {
			s.pos++
			return e.finishObject(start, mark)
		}
		for {
			if s.peek() != '"' {
				return s.errorf("expected object key")
			}
			k, err := s.readString()
			if err != nil {
				return err
			}
			e.fieldJSON(start, k)
			if err := s.expect(':'); err != nil {
				return err
			}
			if err := e.encodeJSON(s, depth+1); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.pos++
			case '}':
				s.pos++
				return e.finishObject(start, mark)
			default:
				return s.errorf("expected ',' or '}' in object")
			}
		}
	case '[':
		s.pos++
		start, mark := e.offset(), len(e.elems)
		if s.peek() == ']' {
			s.pos++
			e.finishArray(start, mark)
			return nil
		}
		for {
			e.elems = append(e.elems, e.offset()-start)
			if err := e.encodeJSON(s, depth+1); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.pos++
			case ']':
				s.pos++
				e.finishArray(start, mark)
				return nil
			default:
				return s.errorf("expected ',' or ']' in array")
			}
		}
	case '"':
		str, err := s.readString()
		if err != nil {
			return err
		}
		e.appendStringBytes(str)
		return nil
	case 't':
		if err := s.literal("true"); err != nil {
			return err
		}
		e.appendBool(true)
		return nil
	case 'f':
		if err := s.literal("false"); err != nil {
			return err
		}
		e.appendBool(false)
		return nil
	case 'n':
		if err := s.literal("null"); err != nil {
			return err
		}
		e.appendNull()
		return nil
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
		return e.appendNumber(text, integer)
	}
}

// appendNumber appends a JSON number as Spark's VariantBuilder does: an
// integer literal as the smallest integer type, else a decimal when the text
// has no exponent and fits DECIMAL(38), else a double.
func (e *variantEncoder) appendNumber(text []byte, integer bool) error {
	if integer {
		if v, ok := parseIntFast(text); ok {
			e.appendInt(v)
			return nil
		}
		if v, err := strconv.ParseInt(unsafe.String(unsafe.SliceData(text), len(text)), 10, 64); err == nil {
			e.appendInt(v)
			return nil
		}
	}
	if e.appendDecimal(text) {
		return nil
	}
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(text), len(text)), 64)
	if err != nil || math.IsInf(f, 0) {
		return kerr(ErrOutOfRange, "number %s is beyond the range of a double, so a VARIANT cannot hold it", text)
	}
	e.appendFloat64(f)
	return nil
}

// maxVariantDecimal is the largest precision and scale of a variant decimal
// (DECIMAL16 holds 38 digits).
const maxVariantDecimal = 38

// appendDecimal appends text ("-12.50", "123") as a variant decimal when it
// has no exponent and at most 38 significant digits and fraction digits,
// as DECIMAL4, 8 or 16 by precision and scale; it reports false, appending
// nothing, when the text does not qualify.
func (e *variantEncoder) appendDecimal(text []byte) bool {
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
			return false // an exponent: a double
		}
		if point {
			scale++
		}
		if nd == 0 && c == '0' {
			continue // leading zero: not significant
		}
		if nd == len(unscaled) {
			return false
		}
		unscaled[nd] = c
		nd++
	}
	precision := max(nd, 1)
	if precision > maxVariantDecimal || scale > maxVariantDecimal {
		return false
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
			e.appendDecimal4(uint8(scale), int32(v))
		} else {
			e.appendDecimal8(uint8(scale), v)
		}
		return true
	}
	hi, lo := decimal16Digits(sig, neg)
	e.appendDecimal16(uint8(scale), hi, lo)
	return true
}

// encodeGo appends a structured value (the Go types Bloblang produces).
func (e *variantEncoder) encodeGo(v any, depth int) error {
	if depth > maxDepth {
		return kerr(ErrInvalidValue, "value nested deeper than %d", maxDepth)
	}
	switch v := v.(type) {
	case nil:
		e.appendNull()
	case bool:
		e.appendBool(v)
	case string:
		if !utf8.ValidString(v) {
			return kerr(ErrInvalidValue, "invalid UTF-8 in string for VARIANT")
		}
		e.appendString(v)
	case int:
		e.appendInt(int64(v))
	case int8:
		e.appendInt(int64(v))
	case int16:
		e.appendInt(int64(v))
	case int32:
		e.appendInt(int64(v))
	case int64:
		e.appendInt(v)
	case uint:
		e.appendUint(uint64(v))
	case uint8:
		e.appendInt(int64(v))
	case uint16:
		e.appendInt(int64(v))
	case uint32:
		e.appendInt(int64(v))
	case uint64:
		e.appendUint(v)
	case float32:
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return kerr(ErrInvalidValue, "value %v: JSON has no NaN or Infinity, so a VARIANT cannot hold it", v)
		}
		e.appendFloat32(v)
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return kerr(ErrInvalidValue, "value %v: JSON has no NaN or Infinity, so a VARIANT cannot hold it", v)
		}
		e.appendFloat64(v)
	case json.Number:
		text := textOf(string(v))
		var ok bool
		if _, e.digits, ok = parseNumLit(text, e.digits, false); !ok {
			return kerr(ErrInvalidValue, "json.Number %s is not a valid JSON number", Quote(string(v)))
		}
		return e.appendNumber(text, isIntegerLiteral(text))
	case time.Time, []byte:
		// The strings ToJSON writes for them.
		text, err := appendJSON(e.scratch[:0], v, depth)
		if err != nil {
			return kerr(ErrInvalidValue, "%v", err)
		}
		e.scratch = text
		e.appendStringBytes(text[1 : len(text)-1])
	case map[string]any:
		// Keys in sorted order, so that the same value always gives the same
		// metadata dictionary and bytes. They stay on the goKeys stack while
		// the values (which may hold maps) are appended.
		kmark := len(e.goKeys)
		for k := range v {
			e.goKeys = append(e.goKeys, k)
		}
		slices.Sort(e.goKeys[kmark:])
		defer func() {
			clear(e.goKeys[kmark:])
			e.goKeys = e.goKeys[:kmark]
		}()
		start, mark := e.offset(), len(e.fields)
		for i := kmark; i < kmark+len(v); i++ {
			k := e.goKeys[i]
			if !utf8.ValidString(k) {
				return kerr(ErrInvalidValue, "invalid UTF-8 in VARIANT object key")
			}
			e.fieldString(start, k)
			if err := e.encodeGo(v[k], depth+1); err != nil {
				return at(keySeg([]byte(k)), err)
			}
		}
		return e.finishObject(start, mark)
	case []any:
		start, mark := e.offset(), len(e.elems)
		for i, x := range v {
			e.elems = append(e.elems, e.offset()-start)
			if err := e.encodeGo(x, depth+1); err != nil {
				return at("["+strconv.Itoa(i)+"]", err)
			}
		}
		e.finishArray(start, mark)
	default:
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			e.appendNull()
			return nil
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return kerr(ErrInvalidValue, "serialising %T to JSON: %v", v, err)
		}
		s := scanner{data: raw}
		return e.encodeJSON(&s, depth)
	}
	return nil
}

// appendUint appends u as an integer when it fits int64, else as the
// decimal appendDecimal would make of its digits: beyond int64 it has 19 or
// 20 digits, too many for DECIMAL8, so a DECIMAL16 of scale 0 whose
// unscaled value is u itself.
func (e *variantEncoder) appendUint(u uint64) {
	if u <= math.MaxInt64 {
		e.appendInt(int64(u))
		return
	}
	e.appendDecimal16(0, 0, u)
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
	// hint sizes the next batch's data from the previous one's.
	hint dataHint
}

// add appends value b.
func (c *binColumn) add(b []byte) {
	c.data = append(c.data, b...)
	c.seal()
}

// seal ends the value appended directly onto data (or by add).
func (c *binColumn) seal() { c.offsets = append(c.offsets, int64(len(c.data))) }

func (c *binColumn) truncate(k int) {
	c.offsets = c.offsets[:k+1]
	c.data = c.data[:c.offsets[k]]
}

func (c *binColumn) reset(capHint int) {
	c.offsets = append(getSlice[int64](capHint+1), 0)
	c.data = buffers.get(c.hint.size(capHint))
}

func (c *binColumn) build(dt arrow.DataType, size int) arrow.ArrayData {
	offs := pooledSlice(c.offsets)
	data := pooledBuffer(c.data)
	c.hint = dataHint{bytes: len(c.data), values: len(c.offsets) - 1}
	c.offsets, c.data = nil, nil
	return newData(dt, size, []*memory.Buffer{nil, offs, data}, nil, 0)
}

// EncodeVariant encodes a structured value (the Go types a decoded JSON
// document or Bloblang holds) as a VARIANT's metadata and value binaries,
// by the rules the converter uses for a VARIANT column; nil is the variant
// null.
func EncodeVariant(v any) (metadata, value []byte, err error) {
	var e variantEncoder
	e.begin(nil)
	if err := e.encodeGo(v, 0); err != nil {
		return nil, nil, rowErrorless(err)
	}
	return e.finish()
}

// EncodeVariantJSON encodes one JSON document as a VARIANT's metadata and
// value binaries, by the rules the converter uses for a VARIANT column.
func EncodeVariantJSON(doc []byte) (metadata, value []byte, err error) {
	var e variantEncoder
	e.begin(nil)
	s := scanner{data: doc}
	if err := e.encodeJSON(&s, 0); err != nil {
		return nil, nil, err
	}
	if !s.atEnd() {
		return nil, nil, s.errorf("trailing data after the JSON value (%q)", s.data[s.pos])
	}
	return e.finish()
}

// finish returns the value and its metadata for the Encode functions.
func (e *variantEncoder) finish() (metadata, value []byte, err error) {
	metadata, err = e.appendMetadata(nil)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding VARIANT: %w", err)
	}
	return metadata, e.buf, nil
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
	return appendVariantChecked(nil, v, 0)
}

// appendVariantChecked is appendVariant for a value from outside (a table's
// file, a client): arrow-go's variant.New validates the encoding's
// structure but not every value, and its accessors then panic on what it
// let through (a truncated primitive indexes past the value; found by
// FuzzVariantJSON). Such bytes are not a variant, so the panic becomes an
// error naming it.
func appendVariantChecked(dst []byte, v variant.Value, depth int) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = dst, fmt.Errorf("malformed variant value: %v", r)
		}
	}()
	return appendVariant(dst, v, depth)
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
