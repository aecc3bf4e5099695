package arrowconv

// The VARIANT encoder before the allocation-free rewrite (variantEncoder),
// kept only as the oracle of TestVariantEncoderMatchesOracle: it builds each
// value with a fresh arrow-go parquet/variant Builder, as the column did.

import (
	"encoding/json"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/decimal"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/parquet/variant"
)

// oracleVariant is the former variantNode encoding state.
type oracleVariant struct {
	b      variant.Builder
	fields []variant.FieldEntry
	elems  []int
}

// oracleEncodeJSON encodes doc with the former encoder.
func oracleEncodeJSON(doc []byte) (meta, value []byte, err error) {
	var n oracleVariant
	s := scanner{data: doc}
	if err := n.encodeJSON(&s, 0); err != nil {
		return nil, nil, err
	}
	if !s.atEnd() {
		return nil, nil, s.errorf("trailing data after the JSON value (%q)", s.data[s.pos])
	}
	v, err := n.b.Build()
	if err != nil {
		return nil, nil, err
	}
	return v.Metadata().Bytes(), v.Bytes(), nil
}

// oracleEncodeGo encodes a structured value with the former encoder.
func oracleEncodeGo(x any) (meta, value []byte, err error) {
	var n oracleVariant
	if err := n.encodeGo(x, 0); err != nil {
		return nil, nil, rowErrorless(err)
	}
	v, err := n.b.Build()
	if err != nil {
		return nil, nil, err
	}
	return v.Metadata().Bytes(), v.Bytes(), nil
}

// key copies k: the former column interned keys, which did not change the
// bytes.
func (n *oracleVariant) key(k []byte) string { return string(k) }

// encodeJSON appends the JSON value at the scanner position to the builder.
func (n *oracleVariant) encodeJSON(s *scanner, depth int) error {
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

func (n *oracleVariant) finishObject(start, mark int) error {
	err := n.b.FinishObject(start, n.fields[mark:])
	n.fields = n.fields[:mark]
	if err != nil {
		return kerr(ErrDuplicateField, "VARIANT object: %v", err)
	}
	return nil
}

func (n *oracleVariant) finishArray(start, mark int) error {
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
func (n *oracleVariant) appendNumber(text []byte, integer bool) error {
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

// appendDecimal appends text ("-12.50", "123") as a variant decimal when it
// has no exponent and at most 38 significant digits and fraction digits;
// ok is false when it does not qualify.
func (n *oracleVariant) appendDecimal(text []byte) (ok bool, err error) {
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
func (n *oracleVariant) encodeGo(v any, depth int) error {
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

func (n *oracleVariant) appendUint(u uint64) error {
	if u <= math.MaxInt64 {
		return n.b.AppendInt(int64(u))
	}
	ok, err := n.appendDecimal(strconv.AppendUint(nil, u, 10)) // 20 digits: always a decimal
	if !ok && err == nil {
		return n.b.AppendFloat64(float64(u))
	}
	return err
}
