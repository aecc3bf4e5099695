package zerobusreplay

import (
	"encoding/base64"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
)

// This file writes one Arrow value, scalar or nested, straight into a row's
// JSON body as arrowconv.ToJSON writes the Go value the input used to build
// for it (json.Number decimals, RFC 3339 UTC timestamps, zone-less NTZ text,
// YYYY-MM-DD dates, base64 binaries, VARIANT as the JSON it holds, STRUCTs
// and string-keyed MAPs as objects with keys in sorted byte order, other
// MAPs as [{"key":…,"value":…}] arrays, lists as arrays), without building
// map[string]any / []any values per row: a nested column costs no
// allocation per row beyond VARIANT decoding.

// maxJSONDepth is arrowconv's nesting limit (values deeper than it are an
// error there), enforced here at the same depths so the same rows fail.
const maxJSONDepth = 1000

// jsonNode is what writing a value of one Arrow type needs beyond the
// array: for a STRUCT whether it is a VARIANT or else its fields in output
// order with their pre-encoded keys, for lists and maps the nodes of their
// children. Every nested type has one; scalars need none (nil node).
type jsonNode struct {
	variant bool        // STRUCT stored for a VARIANT: written as the JSON it holds
	fields  []jsonField // other STRUCTs: fields sorted by name, a repeated name resolved to its last field
	elem    *jsonNode   // LIST element, MAP item
	key     *jsonNode   // MAP key
}

// jsonField is one STRUCT field, or one body column, in output order.
type jsonField struct {
	index int       // field index in the struct, column index in the record
	name  string    // for error messages
	key   []byte    // `"name":`, with a leading comma but for the first
	node  *jsonNode // the field's type
}

// newJSONNode plans the writing of values of type dt.
func newJSONNode(dt arrow.DataType) *jsonNode {
	switch t := dt.(type) {
	case *arrow.StructType:
		if isVariant(t) {
			return &jsonNode{variant: true}
		}
		idx := make([]int, t.NumFields())
		for f := range idx {
			idx[f] = f
		}
		// The old map[string]any kept the last of fields sharing a name.
		return &jsonNode{fields: planFields(t.Fields(), idx, true)}
	case *arrow.MapType:
		return &jsonNode{key: newJSONNode(t.KeyType()), elem: newJSONNode(t.ItemType())}
	case arrow.ListLikeType:
		return &jsonNode{elem: newJSONNode(t.Elem())}
	}
	return nil
}

// planFields plans the members of an object written from fields[idx]:
// sorted by name (stably, so among fields of one name the last stays last)
// with their pre-encoded keys. With lastWins, of fields sharing a name only
// the last is written.
func planFields(fields []arrow.Field, idx []int, lastWins bool) []jsonField {
	slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(fields[a].Name, fields[b].Name) })
	var out []jsonField
	for p, f := range idx {
		name := fields[f].Name
		if lastWins && p+1 < len(idx) && fields[idx[p+1]].Name == name {
			continue
		}
		var key []byte
		if len(out) > 0 {
			key = append(key, ',')
		}
		key = arrowconv.AppendJSONString(key, name)
		out = append(out, jsonField{index: f, name: name, key: append(key, ':'), node: newJSONNode(fields[f].Type)})
	}
	return out
}

// encodeError is an error of the serialiser (NaN, a year outside
// [0,9999], nesting too deep) rather than of reading the value: the old
// conversion built the whole value first and then serialised it, so these
// errors carry no field/element path, as before.
type encodeError struct{ err error }

func (e *encodeError) Error() string { return e.err.Error() }
func (e *encodeError) Unwrap() error { return e.err }

// errTooDeep is arrowconv's error for a value nested deeper than
// maxJSONDepth.
var errTooDeep error = &encodeError{fmt.Errorf("value nested deeper than %d", maxJSONDepth)}

// within prefixes a reading error with where it happened inside the value
// (as the old value builder did); serialiser errors pass unchanged.
func within(err error, format string, args ...any) error {
	if _, ok := err.(*encodeError); ok {
		return err
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
}

// appendValue appends row i of a, at nesting depth depth of its column's
// value, to dst. n is newJSONNode(a.DataType()), planned once per schema.
func (c *rowConverter) appendValue(dst []byte, a arrow.Array, i int, n *jsonNode, depth int) ([]byte, error) {
	if depth > maxJSONDepth {
		return dst, errTooDeep
	}
	if a.IsNull(i) {
		return append(dst, "null"...), nil
	}
	switch a := a.(type) {
	case *array.Int64:
		return strconv.AppendInt(dst, a.Value(i), 10), nil
	case *array.Int32:
		return strconv.AppendInt(dst, int64(a.Value(i)), 10), nil
	case *array.Int16:
		return strconv.AppendInt(dst, int64(a.Value(i)), 10), nil
	case *array.Int8:
		return strconv.AppendInt(dst, int64(a.Value(i)), 10), nil
	case *array.Uint64:
		return strconv.AppendUint(dst, a.Value(i), 10), nil
	case *array.Uint32:
		return strconv.AppendUint(dst, uint64(a.Value(i)), 10), nil
	case *array.Uint16:
		return strconv.AppendUint(dst, uint64(a.Value(i)), 10), nil
	case *array.Uint8:
		return strconv.AppendUint(dst, uint64(a.Value(i)), 10), nil
	case *array.String:
		return arrowconv.AppendJSONString(dst, a.Value(i)), nil
	case *array.LargeString:
		return arrowconv.AppendJSONString(dst, a.Value(i)), nil
	case *array.StringView:
		return arrowconv.AppendJSONString(dst, a.Value(i)), nil
	case *array.Float64:
		return encoded(arrowconv.AppendJSONFloat(dst, a.Value(i), 64))
	case *array.Float32:
		return encoded(arrowconv.AppendJSONFloat(dst, float64(a.Value(i)), 32))
	case *array.Boolean:
		return strconv.AppendBool(dst, a.Value(i)), nil
	case *array.Binary:
		return appendBase64(dst, a.Value(i)), nil
	case *array.LargeBinary:
		return appendBase64(dst, a.Value(i)), nil
	case *array.BinaryView:
		return appendBase64(dst, a.Value(i)), nil
	case *array.FixedSizeBinary:
		return appendBase64(dst, a.Value(i)), nil
	case *array.Timestamp:
		tt := a.DataType().(*arrow.TimestampType)
		t := a.Value(i).ToTime(tt.Unit).UTC()
		if tt.TimeZone == "" {
			dst = append(dst, '"')
			dst = t.AppendFormat(dst, ntzLayout)
			return append(dst, '"'), nil
		}
		if y := t.Year(); y < 0 || y > 9999 {
			return encoded(arrowconv.AppendJSON(dst, t)) // the serialiser's range error
		}
		dst = append(dst, '"')
		dst = t.AppendFormat(dst, time.RFC3339Nano)
		return append(dst, '"'), nil
	case *array.Decimal128:
		return appendDecimal128(dst, a.Value(i), a.DataType().(*arrow.Decimal128Type).Scale), nil
	case *array.Decimal256:
		// ToString writes -?digits[.digits], always a JSON number, so the
		// json.Number check ToJSON made of the old value cannot fail.
		return append(dst, a.Value(i).ToString(a.DataType().(*arrow.Decimal256Type).Scale)...), nil
	case *array.Date32:
		dst = append(dst, '"')
		dst = a.Value(i).ToTime().AppendFormat(dst, time.DateOnly)
		return append(dst, '"'), nil
	case *array.Date64:
		dst = append(dst, '"')
		dst = a.Value(i).ToTime().AppendFormat(dst, time.DateOnly)
		return append(dst, '"'), nil
	case *array.Struct:
		if n.variant {
			return appendVariantJSON(dst, a, i, depth)
		}
		dst = append(dst, '{')
		for _, f := range n.fields {
			dst = append(dst, f.key...)
			var err error
			if dst, err = c.appendValue(dst, a.Field(f.index), i, f.node, depth+1); err != nil {
				return dst, within(err, "field %s", f.name)
			}
		}
		return append(dst, '}'), nil
	case *array.Map:
		start, end := a.ValueOffsets(i)
		if sk, ok := a.Keys().(*array.String); ok {
			return c.appendStringKeyMap(dst, sk, a.Items(), int(start), int(end), n, depth)
		}
		keys, items := a.Keys(), a.Items()
		dst = append(dst, '[')
		for j := int(start); j < int(end); j++ {
			if j > int(start) {
				dst = append(dst, ',')
			}
			// The old {"key": k, "value": v} object, depth+1 deep, its
			// members depth+2: too deep an object fails at its key (the
			// error carries no path).
			var err error
			dst = append(dst, `{"key":`...)
			if dst, err = c.appendValue(dst, keys, j, n.key, depth+2); err != nil {
				return dst, within(err, "map key")
			}
			dst = append(dst, `,"value":`...)
			if dst, err = c.appendValue(dst, items, j, n.elem, depth+2); err != nil {
				return dst, within(err, "map value")
			}
			dst = append(dst, '}')
		}
		return append(dst, ']'), nil
	case array.ListLike:
		start, end := a.ValueOffsets(i)
		vals := a.ListValues()
		dst = append(dst, '[')
		for j := int(start); j < int(end); j++ {
			if j > int(start) {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = c.appendValue(dst, vals, j, n.elem, depth+1); err != nil {
				return dst, within(err, "element %d", j-int(start))
			}
		}
		return append(dst, ']'), nil
	}
	return dst, fmt.Errorf("unsupported Arrow type %s", a.DataType())
}

// appendStringKeyMap writes entries [start, end) of a MAP with STRING keys
// as an object: keys in sorted byte order and, as in the old
// map[string]any, a repeated key written once with its last value. The
// entry order is sorted in c.mapOrder, used as a stack by nested maps.
func (c *rowConverter) appendStringKeyMap(dst []byte, keys *array.String, items arrow.Array, start, end int, n *jsonNode, depth int) ([]byte, error) {
	base := len(c.mapOrder)
	sorted := true
	for j := start; j < end; j++ {
		c.mapOrder = append(c.mapOrder, j)
		if j > start && keys.Value(j-1) >= keys.Value(j) {
			sorted = false
		}
	}
	order := c.mapOrder[base:] // stays valid: nested maps only append past it
	if !sorted {
		slices.SortStableFunc(order, func(x, y int) int { return strings.Compare(keys.Value(x), keys.Value(y)) })
	}
	dst = append(dst, '{')
	first := true
	var err error
	for p, j := range order {
		k := keys.Value(j)
		if !sorted && p+1 < len(order) && keys.Value(order[p+1]) == k {
			continue // a later entry has the same key and wins
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = arrowconv.AppendJSONString(dst, k)
		dst = append(dst, ':')
		if dst, err = c.appendValue(dst, items, j, n.elem, depth+1); err != nil {
			break
		}
	}
	c.mapOrder = c.mapOrder[:base]
	if err != nil {
		return dst, within(err, "map value")
	}
	return append(dst, '}'), nil
}

// appendVariantJSON writes row i of a VARIANT column, depth deep, as the
// JSON it holds.
func appendVariantJSON(dst []byte, a *array.Struct, i, depth int) ([]byte, error) {
	v, err := variantValue(a, i)
	if err != nil {
		return dst, err
	}
	from := len(dst)
	if dst, err = arrowconv.AppendJSON(dst, v); err != nil {
		return dst, &encodeError{err}
	}
	// AppendJSON counted depth from 0; values of the VARIANT more than
	// maxJSONDepth-depth deep fail, as they did inside the old value. A
	// text shorter than that cannot nest so deep.
	if depth > 0 && len(dst)-from > maxJSONDepth-depth && depth+jsonNesting(dst[from:]) > maxJSONDepth {
		return dst, errTooDeep
	}
	return dst, nil
}

// jsonNesting is the depth of the deepest value in the compact JSON text
// b: 0 for a scalar or an empty container, 1 for the members of a top
// container, and so on.
func jsonNesting(b []byte) int {
	level, deepest := 0, 0
	for k := 0; k < len(b); k++ {
		switch b[k] {
		case '"':
			for k++; k < len(b) && b[k] != '"'; k++ {
				if b[k] == '\\' {
					k++
				}
			}
		case '{', '[':
			if k+1 < len(b) && b[k+1] != '}' && b[k+1] != ']' {
				level++
				deepest = max(deepest, level)
			}
		case '}', ']':
			if k > 0 && b[k-1] != '{' && b[k-1] != '[' {
				level--
			}
		}
	}
	return deepest
}

// encoded marks an error of an arrowconv serialiser as an encodeError.
func encoded(dst []byte, err error) ([]byte, error) {
	if err != nil {
		return dst, &encodeError{err}
	}
	return dst, nil
}

// appendBase64 writes b as a JSON string in standard base64, as
// encoding/json (and ToJSON) write []byte.
func appendBase64(dst, b []byte) []byte {
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

// appendDecimal128 appends n with the given scale as n.ToString(scale)
// writes it (-?digits[.digits], always a JSON number, so the json.Number
// check ToJSON made of the old value cannot fail), without ToString's
// big.Int allocations; values of more than 38 digits and scales ToString
// refuses go through ToString itself.
func appendDecimal128(dst []byte, n decimal128.Num, scale int32) []byte {
	hi, lo := uint64(n.HighBits()), n.LowBits()
	neg := n.Sign() < 0
	if neg { // two's complement magnitude; MinInt128 stays 2^127, right as unsigned
		lo = ^lo + 1
		hi = ^hi
		if lo == 0 {
			hi++
		}
	}
	// Base 10^19 limbs, least significant first: 2^128 < 10^39 needs three.
	var limbs [3]uint64
	k := 0
	for k == 0 || hi != 0 || lo != 0 {
		var r uint64
		hi, r = hi/1e19, hi%1e19
		lo, r = bits.Div64(r, lo, 1e19)
		limbs[k] = r
		k++
	}
	var buf [60]byte
	digits := strconv.AppendUint(buf[:0], limbs[k-1], 10)
	for j := k - 2; j >= 0; j-- {
		from := len(digits)
		digits = strconv.AppendUint(digits, limbs[j], 10)
		if pad := 19 - (len(digits) - from); pad > 0 {
			digits = append(digits, zeros19[:pad]...)
			copy(digits[from+pad:], digits[from:from+19-pad])
			copy(digits[from:], zeros19[:pad])
		}
	}
	if len(digits) > decimal128.MaxPrecision || scale < -decimal128.MaxScale || scale > decimal128.MaxScale {
		return append(dst, n.ToString(scale)...)
	}
	if neg {
		dst = append(dst, '-')
	}
	if scale <= 0 {
		dst = append(dst, digits...)
		if scale < 0 && (len(digits) != 1 || digits[0] != '0') {
			for range -scale {
				dst = append(dst, '0')
			}
		}
		return dst
	}
	places := int(scale)
	if len(digits) <= places {
		dst = append(dst, '0', '.')
		for range places - len(digits) {
			dst = append(dst, '0')
		}
		return append(dst, digits...)
	}
	at := len(digits) - places
	dst = append(dst, digits[:at]...)
	dst = append(dst, '.')
	return append(dst, digits[at:]...)
}

const zeros19 = "0000000000000000000"
