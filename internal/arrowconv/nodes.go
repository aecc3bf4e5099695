package arrowconv

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// A node accumulates the values of one column (or one nested child) in plain
// Go slices, built into Arrow arrays once per batch. Appending to slices keeps
// the hot path cheap and makes dropping a failed row a matter of reslicing:
// truncate(n) restores the node, and recursively its children, to its first n
// values.
type node interface {
	// decode consumes one JSON value (possibly null) at the scanner position.
	decode(st *state) error
	// put appends one structured Go value (possibly nil).
	put(st *state, v any) error
	// appendNull appends a null; only called on nullable positions.
	appendNull()
	// appendEmpty appends a valid zero value, for NOT NULL members of a null
	// struct.
	appendEmpty()
	truncate(n int)
	// length is the number of values held.
	length() int
	// reset empties the node for a new batch, sized for capHint values.
	reset(capHint int)
	// build hands the values over as Arrow data and empties the node.
	build() (arrow.ArrayData, error)
}

// state is the per-Convert working set: the scanner, the node tree and
// scratch space. Converters pool states so concurrent Convert calls never
// share one.
type state struct {
	scanner
	root           *structNode
	num            []byte
	text           []byte // spells structured numbers for the text parsers
	fold           []byte
	keySet         map[string]struct{}
	emitUS         int64
	epochExp       int
	nestedToString bool

	rowNested, rowFolded int
	nested, folded       int
}

func (c *Converter) newState() (*state, error) {
	st := &state{epochExp: c.epochExp, nestedToString: c.opts.NestedToString}
	fields := make([]typemap.Field, len(c.cols))
	for i, col := range c.cols {
		fields[i] = typemap.Field(col)
	}
	root, err := newStruct(fields, false, arrow.StructOf(c.schema.Fields()...), true)
	if err != nil {
		return nil, err
	}
	if c.emitIndex >= 0 {
		root.fields[c.emitIndex].(*tsNode).emit = &st.emitUS
	}
	st.root = root
	return st, nil
}

func (st *state) begin(rows int, now time.Time) {
	st.emitUS = now.UnixMicro()
	st.nested, st.folded = 0, 0
	for _, f := range st.root.fields {
		f.reset(rows)
	}
}

// decodeRow appends one JSON object message as a row.
func (st *state) decodeRow(b []byte) error {
	st.scanner.reset(b)
	if c := st.peek(); c != '{' {
		if c == 0 {
			return kerr(ErrNotObject, "%v: empty message", ErrNotObject)
		}
		if c == '[' || c == '"' || c == 't' || c == 'f' || c == 'n' || c == '-' || (c >= '0' && c <= '9') {
			return kerr(ErrNotObject, "%v: got a JSON %s", ErrNotObject, jsonKind(c))
		}
		return st.errorf("unexpected %q", c)
	}
	if err := st.root.decodeObject(st); err != nil {
		return err
	}
	if st.peek() != 0 {
		return st.errorf("unexpected data after the object")
	}
	return nil
}

// putRow appends one structured message as a row.
func (st *state) putRow(v any) error {
	m, ok := v.(map[string]any)
	if !ok {
		return kerr(ErrNotObject, "%v: got %s", ErrNotObject, goKind(v))
	}
	return st.root.putObject(st, m)
}

func newNode(t typemap.Type, dt arrow.DataType, nullable bool) (node, error) {
	name := strings.ToUpper(t.Text())
	b := base{nullable: nullable, name: name, dt: dt}
	switch t.Kind {
	case typemap.Byte:
		return &intNode[int8]{fixedNode: fixedNode[int8]{base: b}, min: math.MinInt8, max: math.MaxInt8}, nil
	case typemap.Short:
		return &intNode[int16]{fixedNode: fixedNode[int16]{base: b}, min: math.MinInt16, max: math.MaxInt16}, nil
	case typemap.Int:
		return &intNode[int32]{fixedNode: fixedNode[int32]{base: b}, min: math.MinInt32, max: math.MaxInt32}, nil
	case typemap.Long:
		return &intNode[int64]{fixedNode: fixedNode[int64]{base: b}, min: math.MinInt64, max: math.MaxInt64}, nil
	case typemap.Float:
		return &floatNode[float32]{fixedNode: fixedNode[float32]{base: b}, bits: 32}, nil
	case typemap.Double:
		return &floatNode[float64]{fixedNode: fixedNode[float64]{base: b}, bits: 64}, nil
	case typemap.Boolean:
		return &boolNode{base: b}, nil
	case typemap.String:
		return &strNode{base: b, mode: modeString}, nil
	case typemap.Variant:
		return &strNode{base: b, mode: modeVariant}, nil
	case typemap.Binary:
		return &strNode{base: b, mode: modeBinary}, nil
	case typemap.Decimal:
		return &strNode{base: b, mode: modeDecimal, precision: t.Precision, scale: t.Scale}, nil
	case typemap.Date:
		return &dateNode{fixedNode[int32]{base: b}}, nil
	case typemap.Timestamp, typemap.TimestampNTZ:
		return &tsNode{fixedNode: fixedNode[int64]{base: b}, ntz: t.Kind == typemap.TimestampNTZ}, nil
	case typemap.Array:
		lt := dt.(*arrow.ListType)
		elem, err := newNode(*t.Elem, lt.Elem(), true)
		if err != nil {
			return nil, err
		}
		return &listNode{offsetsNode: offsetsNode{base: b}, elem: elem}, nil
	case typemap.Map:
		mt := dt.(*arrow.MapType)
		k, err := newNode(*t.Key, mt.KeyType(), false)
		if err != nil {
			return nil, err
		}
		kn, ok := k.(keyNode)
		if !ok {
			return nil, fmt.Errorf("map key type %s is not supported", t.Key.Text())
		}
		v, err := newNode(*t.Value, mt.ItemType(), true)
		if err != nil {
			return nil, err
		}
		return &mapNode{offsetsNode: offsetsNode{base: b}, keys: kn, vals: v}, nil
	case typemap.Struct:
		return newStruct(t.Fields, nullable, dt.(*arrow.StructType), false)
	}
	return nil, fmt.Errorf("no conversion for type %s", t.Text())
}

// base holds what every node has: its validity bitmap, nullability, Arrow type
// and the SQL type name used in error messages.
type base struct {
	validity
	nullable bool
	name     string
	dt       arrow.DataType
}

// null consumes a JSON null and appends it through n, or fails for a NOT NULL
// position.
func (b *base) null(st *state, n node) error {
	if err := st.literal("null"); err != nil {
		return err
	}
	return b.nullValue(n)
}

func (b *base) nullValue(n node) error {
	if !b.nullable {
		return kerr(ErrMissingRequired, "null for NOT NULL %s", b.name)
	}
	n.appendNull()
	return nil
}

func (b *base) mismatch(want string, c byte) error {
	return kerr(ErrTypeMismatch, "expected %s for %s, got %s", want, b.name, jsonKind(c))
}

func (b *base) mismatchGo(want string, v any) error {
	return kerr(ErrTypeMismatch, "expected %s for %s, got %s", want, b.name, goKind(v))
}

// goKind names the JSON-ish kind of a structured value for error messages.
func goKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		return "number"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case time.Time:
		return "timestamp"
	case []byte:
		return "bytes"
	}
	return fmt.Sprintf("%T", v)
}

// validity is a growable validity bitmap. Bits past n may be stale after a
// truncate; add always writes its bit.
type validity struct {
	bits    []byte
	n       int
	sawNull bool
}

func (v *validity) add(ok bool) {
	i := v.n
	if i&7 == 0 {
		v.bits = append(v.bits, 0)
	}
	if ok {
		v.bits[i>>3] |= 1 << (i & 7)
	} else {
		v.bits[i>>3] &^= 1 << (i & 7)
		v.sawNull = true
	}
	v.n++
}

func (v *validity) length() int { return v.n }

func (v *validity) truncateBits(n int) {
	v.n = n
	v.bits = v.bits[:(n+7)/8]
}

func (v *validity) resetBits(capHint int) {
	v.bits = make([]byte, 0, (capHint+7)/8)
	v.n = 0
	v.sawNull = false
}

// takeBits returns the validity buffer (nil when there are no nulls) and the
// null count, and empties v.
func (v *validity) takeBits() (*memory.Buffer, int) {
	var buf *memory.Buffer
	nulls := 0
	if v.sawNull {
		nulls = v.n - bitutil.CountSetBits(v.bits, 0, v.n)
		if nulls > 0 {
			buf = memory.NewBufferBytes(v.bits)
		}
	}
	v.bits, v.n, v.sawNull = nil, 0, false
	return buf, nulls
}

// fixedNode holds the values of a fixed-width column, one per row beside the
// validity bitmap. The typed nodes embed it and add their decoders.
type fixedNode[T int8 | int16 | int32 | int64 | float32 | float64] struct {
	base
	vals []T
}

func (n *fixedNode[T]) push(v T)       { n.vals = append(n.vals, v); n.validity.add(true) }
func (n *fixedNode[T]) appendNull()    { n.vals = append(n.vals, 0); n.validity.add(false) }
func (n *fixedNode[T]) appendEmpty()   { n.vals = append(n.vals, 0); n.validity.add(true) }
func (n *fixedNode[T]) truncate(k int) { n.vals = n.vals[:k]; n.truncateBits(k) }
func (n *fixedNode[T]) reset(c int)    { n.vals = make([]T, 0, c); n.resetBits(c) }
func (n *fixedNode[T]) build() (arrow.ArrayData, error) {
	size := n.n
	bits, nulls := n.takeBits()
	vals := memory.NewBufferBytes(arrow.GetBytes(n.vals))
	n.vals = nil
	return array.NewData(n.dt, size, []*memory.Buffer{bits, vals}, nil, nulls, 0), nil
}

// intNode holds an integral column. Values are parsed exactly and range
// checked against [min, max].
type intNode[T int8 | int16 | int32 | int64] struct {
	fixedNode[T]
	min, max int64
}

func (n *intNode[T]) decode(st *state) error {
	c := st.peek()
	if c == 'n' {
		return n.null(st, n)
	}
	if c != '-' && (c < '0' || c > '9') {
		return n.mismatch("a JSON number", c)
	}
	text, integer, err := st.readNumber()
	if err != nil {
		return err
	}
	if integer {
		if v, ok := parseIntFast(text); ok {
			return n.add(v, text)
		}
	}
	return n.addLit(st, text)
}

func (n *intNode[T]) addLit(st *state, text []byte) error {
	lit, buf, ok := parseNumLit(text, st.num, false)
	st.num = buf
	if !ok {
		return kerr(ErrInvalidValue, "%q is not a number", text)
	}
	v, err := lit.int64()
	switch err {
	case nil:
		return n.add(v, text)
	case errNotInteger:
		return kerr(ErrTypeMismatch, "value %s is not an integer, as %s needs", text, n.name)
	}
	return kerr(ErrOutOfRange, "value %s out of range for %s", text, n.name)
}

// add appends v; text is its spelling for the error message (nil: decimal).
func (n *intNode[T]) add(v int64, text []byte) error {
	if v < n.min || v > n.max {
		if text == nil {
			text = strconv.AppendInt(nil, v, 10)
		}
		return kerr(ErrOutOfRange, "value %s out of range for %s", text, n.name)
	}
	n.push(T(v))
	return nil
}

func (n *intNode[T]) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		return n.nullValue(n)
	case int:
		return n.add(int64(v), nil)
	case int8:
		return n.add(int64(v), nil)
	case int16:
		return n.add(int64(v), nil)
	case int32:
		return n.add(int64(v), nil)
	case int64:
		return n.add(v, nil)
	case uint:
		return n.putUint(uint64(v))
	case uint8:
		return n.putUint(uint64(v))
	case uint16:
		return n.putUint(uint64(v))
	case uint32:
		return n.putUint(uint64(v))
	case uint64:
		return n.putUint(v)
	case float32:
		return n.putFloat(float64(v))
	case float64:
		return n.putFloat(v)
	case json.Number:
		return n.addLit(st, []byte(v))
	}
	return n.mismatchGo("a number", v)
}

func (n *intNode[T]) putUint(u uint64) error {
	if u > math.MaxInt64 {
		return kerr(ErrOutOfRange, "value %d out of range for %s", u, n.name)
	}
	return n.add(int64(u), nil)
}

// putFloat spells f only on failure, so a valid value costs no allocation.
func (n *intNode[T]) putFloat(f float64) error {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f):
		return kerr(ErrTypeMismatch, "value %s is not an integer, as %s needs", strconv.AppendFloat(nil, f, 'g', -1, 64), n.name)
	case f < -(1<<63) || f >= 1<<63 || int64(f) < n.min || int64(f) > n.max:
		return kerr(ErrOutOfRange, "value %s out of range for %s", strconv.AppendFloat(nil, f, 'g', -1, 64), n.name)
	}
	return n.add(int64(f), nil)
}

// addKey converts a map key (JSON object keys are strings) to an integer.
func (n *intNode[T]) addKey(st *state, k []byte) error {
	lit, buf, ok := parseNumLit(k, st.num, true)
	st.num = buf
	if !ok {
		return kerr(ErrInvalidValue, "map key %q is not an integer for %s", k, n.name)
	}
	v, err := lit.int64()
	if err != nil {
		return kerr(ErrOutOfRange, "map key %q out of range for %s", k, n.name)
	}
	return n.add(v, k)
}

func (n *intNode[T]) keyText(i int) string   { return strconv.FormatInt(int64(n.vals[i]), 10) }
func (n *intNode[T]) keyEqual(i, j int) bool { return n.vals[i] == n.vals[j] }

// floatNode holds a FLOAT or DOUBLE column.
type floatNode[T float32 | float64] struct {
	fixedNode[T]
	bits int
}

func (n *floatNode[T]) decode(st *state) error {
	switch c := st.peek(); {
	case c == 'n':
		return n.null(st, n)
	case c == '-' || (c >= '0' && c <= '9'):
		text, _, err := st.readNumber()
		if err != nil {
			return err
		}
		f, err := strconv.ParseFloat(unsafe.String(&text[0], len(text)), n.bits)
		if err != nil {
			return kerr(ErrOutOfRange, "value %s out of range for %s", text, n.name)
		}
		return n.add(f)
	case c == '"':
		s, err := st.readString()
		if err != nil {
			return err
		}
		return n.addSpecial(string(s))
	default:
		return n.mismatch("a JSON number", c)
	}
}

// addSpecial accepts the strings JSON producers use for non-finite floats.
func (n *floatNode[T]) addSpecial(s string) error {
	switch s {
	case "NaN":
		return n.add(math.NaN())
	case "Infinity", "+Infinity", "Inf", "+Inf":
		return n.add(math.Inf(1))
	case "-Infinity", "-Inf":
		return n.add(math.Inf(-1))
	}
	return kerr(ErrTypeMismatch, "expected a JSON number for %s, got string %q", n.name, s)
}

func (n *floatNode[T]) add(f float64) error {
	n.push(T(f))
	return nil
}

func (n *floatNode[T]) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		return n.nullValue(n)
	case float64:
		if n.bits == 32 && !math.IsInf(v, 0) && math.IsInf(float64(float32(v)), 0) {
			return kerr(ErrOutOfRange, "value %v out of range for %s", v, n.name)
		}
		return n.add(v)
	case float32:
		return n.add(float64(v))
	case int:
		return n.add(float64(v))
	case int8:
		return n.add(float64(v))
	case int16:
		return n.add(float64(v))
	case int32:
		return n.add(float64(v))
	case int64:
		return n.add(float64(v))
	case uint:
		return n.add(float64(v))
	case uint8:
		return n.add(float64(v))
	case uint16:
		return n.add(float64(v))
	case uint32:
		return n.add(float64(v))
	case uint64:
		return n.add(float64(v))
	case json.Number:
		f, err := strconv.ParseFloat(string(v), n.bits)
		if err != nil {
			return kerr(ErrOutOfRange, "value %s out of range for %s", string(v), n.name)
		}
		return n.add(f)
	case string:
		return n.addSpecial(v)
	}
	return n.mismatchGo("a number", v)
}

// boolNode holds a BOOLEAN column; values is a second bitmap.
type boolNode struct {
	base
	values validity
}

func (n *boolNode) decode(st *state) error {
	switch st.peek() {
	case 'n':
		return n.null(st, n)
	case 't':
		if err := st.literal("true"); err != nil {
			return err
		}
		return n.add(true)
	case 'f':
		if err := st.literal("false"); err != nil {
			return err
		}
		return n.add(false)
	}
	return n.mismatch("true or false", st.peek())
}

func (n *boolNode) add(b bool) error {
	n.values.add(b)
	n.validity.add(true)
	return nil
}

func (n *boolNode) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		return n.nullValue(n)
	case bool:
		return n.add(v)
	}
	return n.mismatchGo("a boolean", v)
}

func (n *boolNode) addKey(st *state, k []byte) error {
	switch string(k) {
	case "true":
		return n.add(true)
	case "false":
		return n.add(false)
	}
	return kerr(ErrInvalidValue, "map key %q is not true or false", k)
}

func (n *boolNode) keyEqual(i, j int) bool {
	return bitutil.BitIsSet(n.values.bits, i) == bitutil.BitIsSet(n.values.bits, j)
}

func (n *boolNode) keyText(i int) string {
	return strconv.FormatBool(bitutil.BitIsSet(n.values.bits, i))
}
func (n *boolNode) appendNull()    { n.values.add(false); n.validity.add(false) }
func (n *boolNode) appendEmpty()   { n.values.add(false); n.validity.add(true) }
func (n *boolNode) truncate(k int) { n.values.truncateBits(k); n.truncateBits(k) }
func (n *boolNode) reset(c int)    { n.values.resetBits(c); n.resetBits(c) }
func (n *boolNode) build() (arrow.ArrayData, error) {
	size := n.n
	vals := memory.NewBufferBytes(n.values.bits)
	n.values.bits, n.values.n = nil, 0
	bits, nulls := n.takeBits()
	return array.NewData(n.dt, size, []*memory.Buffer{bits, vals}, nil, nulls, 0), nil
}

type strMode uint8

const (
	modeString strMode = iota
	modeVariant
	modeBinary
	modeDecimal
)

// strNode holds a LargeUtf8 or LargeBinary column: STRING, VARIANT, BINARY or
// DECIMAL (as canonical text).
type strNode struct {
	base
	mode             strMode
	precision, scale int
	offsets          []int64
	data             []byte
	// dataHint is the data size of the previous batch, to size the next one.
	dataHint int
}

func (n *strNode) decode(st *state) error {
	c := st.peek()
	if c == 'n' {
		return n.null(st, n)
	}
	switch n.mode {
	case modeString:
		switch c {
		case '"':
			s, err := st.readString()
			if err != nil {
				return err
			}
			n.data = append(n.data, s...)
			return n.commit()
		case '{', '[':
			if !st.nestedToString {
				return n.nestedErr(jsonKind(c))
			}
			v, err := st.decodeAny(0)
			if err != nil {
				return err
			}
			if n.data, err = appendJSON(n.data, v, 0); err != nil {
				return err
			}
			st.rowNested++
			return n.commit()
		}
		return n.mismatch("a JSON string", c)
	case modeVariant:
		var err error
		if n.data, err = st.appendCompact(n.data, 0); err != nil {
			return err
		}
		return n.commit()
	case modeBinary:
		if c != '"' {
			return n.mismatch("a base64 JSON string", c)
		}
		s, err := st.readString()
		if err != nil {
			return err
		}
		return n.addBase64(s)
	default: // modeDecimal
		switch {
		case c == '"':
			s, err := st.readString()
			if err != nil {
				return err
			}
			return n.addDecimal(st, s, true)
		case c == '-' || (c >= '0' && c <= '9'):
			text, _, err := st.readNumber()
			if err != nil {
				return err
			}
			return n.addDecimal(st, text, false)
		}
		return n.mismatch("a JSON number or numeric string", c)
	}
}

func (n *strNode) nestedErr(kind string) error {
	return kerr(ErrNestedIntoString, "a JSON %s into a STRING column: enable reconcile.nested_to_string, serialise it explicitly (to_json / format_json) or declare a typed column", kind)
}

func (n *strNode) addBase64(s []byte) error {
	start := len(n.data)
	out, err := base64.StdEncoding.AppendDecode(n.data, s)
	if err != nil {
		n.data = n.data[:start]
		return kerr(ErrInvalidValue, "invalid base64 for BINARY: %v", err)
	}
	n.data = out
	return n.commit()
}

func (n *strNode) addDecimal(st *state, text []byte, lenient bool) error {
	lit, buf, ok := parseNumLit(text, st.num, lenient)
	st.num = buf
	if !ok {
		return kerr(ErrInvalidValue, "%q is not a decimal number for %s", text, n.name)
	}
	out, err := appendDecimal(n.data, lit, n.precision, n.scale)
	if err != nil {
		n.data = n.data[:n.offsets[len(n.offsets)-1]]
		return kerr(ErrOutOfRange, "value %s out of range for %s: %v", text, n.name, err)
	}
	n.data = out
	return n.commit()
}

// commit ends the value written to data since the last offset.
func (n *strNode) commit() error {
	n.offsets = append(n.offsets, int64(len(n.data)))
	n.validity.add(true)
	return nil
}

func (n *strNode) put(st *state, v any) error {
	if v == nil {
		return n.nullValue(n)
	}
	switch n.mode {
	case modeString:
		switch v := v.(type) {
		case string:
			if !utf8.ValidString(v) {
				return kerr(ErrInvalidValue, "invalid UTF-8 in string for STRING")
			}
			n.data = append(n.data, v...)
			return n.commit()
		case []byte: // Bloblang content() and friends: text if it is UTF-8
			if !utf8.Valid(v) {
				return kerr(ErrInvalidValue, "bytes are not UTF-8 text for STRING; declare a BINARY column")
			}
			n.data = append(n.data, v...)
			return n.commit()
		case map[string]any, []any:
			if !st.nestedToString {
				return n.nestedErr(goKind(v))
			}
			out, err := appendJSON(n.data, v, 0)
			if err != nil {
				n.data = n.data[:n.offsets[len(n.offsets)-1]]
				return kerr(ErrInvalidValue, "serialising to JSON: %v", err)
			}
			n.data = out
			st.rowNested++
			return n.commit()
		}
		return n.mismatchGo("a string", v)
	case modeVariant:
		out, err := appendJSON(n.data, v, 0)
		if err != nil {
			n.data = n.data[:n.offsets[len(n.offsets)-1]]
			return kerr(ErrInvalidValue, "serialising to JSON: %v", err)
		}
		n.data = out
		return n.commit()
	case modeBinary:
		switch v := v.(type) {
		case []byte:
			n.data = append(n.data, v...)
			return n.commit()
		case string:
			return n.addBase64([]byte(v))
		}
		return n.mismatchGo("bytes or a base64 string", v)
	default: // modeDecimal
		switch v := v.(type) {
		case string:
			return n.addDecimal(st, []byte(v), true)
		case json.Number:
			return n.addDecimal(st, []byte(v), false)
		case float64:
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return kerr(ErrInvalidValue, "value %v is not a decimal number for %s", v, n.name)
			}
			st.text = strconv.AppendFloat(st.text[:0], v, 'g', -1, 64)
			return n.addDecimal(st, st.text, false)
		case float32:
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return kerr(ErrInvalidValue, "value %v is not a decimal number for %s", v, n.name)
			}
			st.text = strconv.AppendFloat(st.text[:0], float64(v), 'g', -1, 32)
			return n.addDecimal(st, st.text, false)
		case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
			st.text, _ = appendJSON(st.text[:0], v, 0) // an integer: never fails
			return n.addDecimal(st, st.text, false)
		}
		return n.mismatchGo("a number or numeric string", v)
	}
}

// addKey appends a string map key.
func (n *strNode) addKey(st *state, k []byte) error {
	n.data = append(n.data, k...)
	return n.commit()
}

func (n *strNode) keyText(i int) string { return string(n.data[n.offsets[i]:n.offsets[i+1]]) }
func (n *strNode) keyEqual(i, j int) bool {
	return string(n.data[n.offsets[i]:n.offsets[i+1]]) == string(n.data[n.offsets[j]:n.offsets[j+1]])
}
func (n *strNode) appendNull() {
	n.offsets = append(n.offsets, int64(len(n.data)))
	n.validity.add(false)
}
func (n *strNode) appendEmpty() { _ = n.commit() }
func (n *strNode) truncate(k int) {
	n.offsets = n.offsets[:k+1]
	n.data = n.data[:n.offsets[k]]
	n.truncateBits(k)
}
func (n *strNode) reset(c int) {
	n.offsets = append(make([]int64, 0, c+1), 0)
	n.data = make([]byte, 0, n.dataHint)
	n.resetBits(c)
}
func (n *strNode) build() (arrow.ArrayData, error) {
	size := n.n
	offs := memory.NewBufferBytes(arrow.GetBytes(n.offsets))
	data := memory.NewBufferBytes(n.data)
	n.dataHint = len(n.data)
	bits, nulls := n.takeBits()
	n.offsets, n.data = nil, nil
	return array.NewData(n.dt, size, []*memory.Buffer{bits, offs, data}, nil, nulls, 0), nil
}

// dateNode holds a DATE column as days since the epoch.
type dateNode struct {
	fixedNode[int32]
}

func (n *dateNode) decode(st *state) error {
	switch c := st.peek(); {
	case c == 'n':
		return n.null(st, n)
	case c == '"':
		s, err := st.readString()
		if err != nil {
			return err
		}
		return n.addText(s)
	case c == '-' || (c >= '0' && c <= '9'):
		text, _, err := st.readNumber()
		if err != nil {
			return err
		}
		return n.addDays(st, text)
	default:
		return n.mismatch(`a "2006-01-02" string or epoch days`, c)
	}
}

func (n *dateNode) addText(s []byte) error {
	if len(s) != 10 {
		return kerr(ErrInvalidValue, "%q is not a 2006-01-02 date", s)
	}
	d, ok := parseDate(s)
	if !ok {
		return kerr(ErrInvalidValue, "%q is not a 2006-01-02 date", s)
	}
	return n.add(d)
}

func (n *dateNode) addDays(st *state, text []byte) error {
	lit, buf, ok := parseNumLit(text, st.num, false)
	st.num = buf
	if !ok {
		return kerr(ErrInvalidValue, "%q is not a number of days", text)
	}
	d, err := lit.int64()
	if err == errNotInteger {
		return kerr(ErrTypeMismatch, "value %s is not a whole number of days for DATE", text)
	}
	if err != nil || d < minDays || d > maxDays {
		return kerr(ErrOutOfRange, "value %s out of range for DATE (0001-01-01..9999-12-31)", text)
	}
	return n.add(d)
}

func (n *dateNode) add(d int64) error {
	if d < minDays || d > maxDays {
		return kerr(ErrOutOfRange, "day %d out of range for DATE (0001-01-01..9999-12-31)", d)
	}
	n.push(int32(d))
	return nil
}

func (n *dateNode) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		return n.nullValue(n)
	case string:
		return n.addText([]byte(v))
	case time.Time:
		y, m, d := v.Date()
		if y < 1 || y > 9999 {
			return kerr(ErrOutOfRange, "time %s out of range for DATE", v.Format(time.RFC3339))
		}
		return n.add(daysFromCivil(y, int(m), d))
	case json.Number:
		return n.addDays(st, []byte(v))
	case int64:
		return n.add(v)
	case int:
		return n.add(int64(v))
	case int32:
		return n.add(int64(v))
	case float64:
		if v != math.Trunc(v) || math.IsInf(v, 0) {
			return kerr(ErrTypeMismatch, "value %v is not a whole number of days for DATE", v)
		}
		if v < minDays || v > maxDays {
			return kerr(ErrOutOfRange, "value %v out of range for DATE (0001-01-01..9999-12-31)", v)
		}
		return n.add(int64(v))
	}
	return n.mismatchGo(`a "2006-01-02" string, a time or epoch days`, v)
}

// tsNode holds a TIMESTAMP (ntz false) or TIMESTAMP_NTZ column as
// microseconds. emit, when set, is the batch's emit time: this is the
// reserved _zb_emit_ts column, stamped when a row has no value for it.
type tsNode struct {
	fixedNode[int64]
	ntz  bool
	emit *int64
}

func (n *tsNode) decode(st *state) error {
	switch c := st.peek(); {
	case c == 'n':
		if n.emit != nil {
			if err := st.literal("null"); err != nil {
				return err
			}
			return n.add(*n.emit)
		}
		return n.null(st, n)
	case c == '"':
		s, err := st.readString()
		if err != nil {
			return err
		}
		return n.addText(s)
	case c == '-' || (c >= '0' && c <= '9'):
		text, _, err := st.readNumber()
		if err != nil {
			return err
		}
		return n.addEpoch(st, text)
	default:
		return n.mismatch("an RFC 3339 string or an epoch number", c)
	}
}

func (n *tsNode) addText(s []byte) error {
	us, zoned, err := parseTimestamp(s)
	switch {
	case err != nil:
		return kerr(ErrInvalidValue, "%v", err)
	case n.ntz && zoned:
		return kerr(ErrTZIntoNTZ, "%v: %q has a zone or offset; send a zone-less wall clock (2006-01-02T15:04:05) or use a TIMESTAMP column", ErrTZIntoNTZ, s)
	case !n.ntz && !zoned:
		return kerr(ErrInvalidValue, "%q has no zone or offset, so names no instant for TIMESTAMP; add Z or ±hh:mm, or use a TIMESTAMP_NTZ column", s)
	}
	return n.add(us)
}

func (n *tsNode) addEpoch(st *state, text []byte) error {
	if n.ntz {
		return kerr(ErrTZIntoNTZ, "%v: epoch number %s is an instant; send a zone-less wall clock string or use a TIMESTAMP column", ErrTZIntoNTZ, text)
	}
	lit, buf, ok := parseNumLit(text, st.num, false)
	st.num = buf
	if !ok {
		return kerr(ErrInvalidValue, "%q is not a number", text)
	}
	us, err := lit.scaleFloor(st.epochExp)
	if err != nil || us < minMicros || us > maxMicros {
		return kerr(ErrOutOfRange, "epoch value %s out of range for %s (0001-01-01..9999-12-31)", text, n.name)
	}
	return n.add(us)
}

func (n *tsNode) add(us int64) error {
	n.push(us)
	return nil
}

func (n *tsNode) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		if n.emit != nil {
			return n.add(*n.emit)
		}
		return n.nullValue(n)
	case time.Time:
		us, err := timeMicros(v, n.ntz)
		if err != nil {
			return err
		}
		return n.add(us)
	case string:
		return n.addText([]byte(v))
	case json.Number:
		return n.addEpoch(st, []byte(v))
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		st.text, _ = appendJSON(st.text[:0], v, 0) // an integer: never fails
		return n.addEpoch(st, st.text)
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return kerr(ErrInvalidValue, "epoch value %v is not finite", v)
		}
		st.text = strconv.AppendFloat(st.text[:0], v, 'g', -1, 64)
		return n.addEpoch(st, st.text)
	}
	return n.mismatchGo("a time, an RFC 3339 string or an epoch number", v)
}

// offsetsNode is what lists and maps share: per value, the end offset of its
// entries in the child nodes.
type offsetsNode struct {
	base
	offsets []int32
}

// end ends a valid value whose entries end at child index childLen, failing
// when the batch's nested values overflow Arrow's 32-bit offsets.
func (n *offsetsNode) end(childLen int) error {
	if childLen > math.MaxInt32 {
		return fmt.Errorf("more than %d nested values in one batch", math.MaxInt32)
	}
	n.offsets = append(n.offsets, int32(childLen))
	n.validity.add(true)
	return nil
}

func (n *offsetsNode) appendNull() {
	n.offsets = append(n.offsets, n.offsets[len(n.offsets)-1])
	n.validity.add(false)
}

func (n *offsetsNode) appendEmpty() {
	n.offsets = append(n.offsets, n.offsets[len(n.offsets)-1])
	n.validity.add(true)
}

// truncateOffsets keeps the first k values and returns how many child
// entries they hold.
func (n *offsetsNode) truncateOffsets(k int) int {
	n.offsets = n.offsets[:k+1]
	n.truncateBits(k)
	return int(n.offsets[k])
}

func (n *offsetsNode) resetOffsets(c int) {
	n.offsets = append(make([]int32, 0, c+1), 0)
	n.resetBits(c)
}

// buildOffsets hands the values over as Arrow data with the given child.
func (n *offsetsNode) buildOffsets(child arrow.ArrayData) arrow.ArrayData {
	size := n.n
	offs := memory.NewBufferBytes(arrow.GetBytes(n.offsets))
	bits, nulls := n.takeBits()
	n.offsets = nil
	return array.NewData(n.dt, size, []*memory.Buffer{bits, offs}, []arrow.ArrayData{child}, nulls, 0)
}

// listNode holds an ARRAY column.
type listNode struct {
	offsetsNode
	elem node
	// elemHint is the element count of the previous batch, to size the next.
	elemHint int
}

func (n *listNode) decode(st *state) error {
	c := st.peek()
	if c == 'n' {
		return n.null(st, n)
	}
	if c != '[' {
		return n.mismatch("a JSON array", c)
	}
	st.pos++
	if st.peek() == ']' {
		st.pos++
		return n.commit()
	}
	for i := 0; ; i++ {
		if err := n.elem.decode(st); err != nil {
			return at("["+strconv.Itoa(i)+"]", err)
		}
		switch st.peek() {
		case ',':
			st.pos++
		case ']':
			st.pos++
			return n.commit()
		default:
			return st.errorf("expected ',' or ']' in array")
		}
	}
}

func (n *listNode) commit() error { return n.end(n.elem.length()) }

func (n *listNode) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		return n.nullValue(n)
	case []any:
		for i, e := range v {
			if err := n.elem.put(st, e); err != nil {
				return at("["+strconv.Itoa(i)+"]", err)
			}
		}
		return n.commit()
	case []byte, string, map[string]any:
		return n.mismatchGo("an array", v)
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return n.mismatchGo("an array", v)
	}
	for i := range rv.Len() {
		if err := n.elem.put(st, rv.Index(i).Interface()); err != nil {
			return at("["+strconv.Itoa(i)+"]", err)
		}
	}
	return n.commit()
}

func (n *listNode) truncate(k int) { n.elem.truncate(n.truncateOffsets(k)) }
func (n *listNode) reset(c int) {
	n.resetOffsets(c)
	n.elem.reset(n.elemHint)
}
func (n *listNode) build() (arrow.ArrayData, error) {
	child, err := n.elem.build()
	if err != nil {
		return nil, err
	}
	defer child.Release()
	n.elemHint = child.Len()
	return n.buildOffsets(child), nil
}

// keyNode is a node that can take map keys, which JSON spells as strings.
type keyNode interface {
	node
	addKey(st *state, k []byte) error
	// keyText spells key i, for messages and large-map duplicate checks.
	keyText(i int) string
	// keyEqual reports whether keys i and j are equal, without allocating.
	keyEqual(i, j int) bool
}

// mapNode holds a MAP column: offsets into parallel key and value children.
type mapNode struct {
	offsetsNode
	keys keyNode
	vals node
	// entryHint is the entry count of the previous batch, to size the next.
	entryHint int
}

func (n *mapNode) decode(st *state) error {
	c := st.peek()
	if c == 'n' {
		return n.null(st, n)
	}
	if c != '{' {
		return n.mismatch("a JSON object", c)
	}
	st.pos++
	if st.peek() == '}' {
		st.pos++
		return n.commit(st)
	}
	for {
		if st.peek() != '"' {
			return st.errorf("expected object key")
		}
		k, err := st.readString()
		if err != nil {
			return err
		}
		if err := n.keys.addKey(st, k); err != nil {
			return at(keySeg(k), err)
		}
		ki := n.keys.length() - 1 // k may be overwritten by the value's strings
		if err := st.expect(':'); err != nil {
			return err
		}
		if err := n.vals.decode(st); err != nil {
			return at(keySeg([]byte(n.keys.keyText(ki))), err)
		}
		switch st.peek() {
		case ',':
			st.pos++
		case '}':
			st.pos++
			return n.commit(st)
		default:
			return st.errorf("expected ',' or '}' in object")
		}
	}
}

func keySeg(k []byte) string { return "[" + strconv.Quote(string(k)) + "]" }

// commit ends one map value, refusing duplicate keys (the same key spelled
// differently, such as "01" and "1" for an integer key, counts as duplicate).
func (n *mapNode) commit(st *state) error {
	start, end := int(n.offsets[len(n.offsets)-1]), n.keys.length()
	if end-start > 1 {
		if end-start <= 16 {
			for i := start; i < end; i++ {
				for j := i + 1; j < end; j++ {
					if n.keys.keyEqual(i, j) {
						return at(keySeg([]byte(n.keys.keyText(i))), kerr(ErrDuplicateField, "duplicate map key"))
					}
				}
			}
		} else {
			if st.keySet == nil {
				st.keySet = map[string]struct{}{}
			}
			clear(st.keySet)
			for i := start; i < end; i++ {
				k := n.keys.keyText(i)
				if _, dup := st.keySet[k]; dup {
					return at(keySeg([]byte(k)), kerr(ErrDuplicateField, "duplicate map key"))
				}
				st.keySet[k] = struct{}{}
			}
		}
	}
	return n.end(end)
}

func (n *mapNode) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		return n.nullValue(n)
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !utf8.ValidString(k) {
				return at(keySeg([]byte(k)), kerr(ErrInvalidValue, "invalid UTF-8 in map key"))
			}
			if err := n.keys.addKey(st, []byte(k)); err != nil {
				return at(keySeg([]byte(k)), err)
			}
			if err := n.vals.put(st, v[k]); err != nil {
				return at(keySeg([]byte(k)), err)
			}
		}
		return n.commit(st)
	}
	return n.mismatchGo("an object", v)
}

func (n *mapNode) truncate(k int) {
	e := n.truncateOffsets(k)
	n.keys.truncate(e)
	n.vals.truncate(e)
}
func (n *mapNode) reset(c int) {
	n.resetOffsets(c)
	n.keys.reset(n.entryHint)
	n.vals.reset(n.entryHint)
}
func (n *mapNode) build() (arrow.ArrayData, error) {
	entries := n.keys.length()
	n.entryHint = entries
	kd, err := n.keys.build()
	if err != nil {
		return nil, err
	}
	defer kd.Release()
	vd, err := n.vals.build()
	if err != nil {
		return nil, err
	}
	defer vd.Release()
	mt := n.dt.(*arrow.MapType)
	sd := array.NewData(mt.Elem(), entries, []*memory.Buffer{nil}, []arrow.ArrayData{kd, vd}, 0, 0)
	defer sd.Release()
	return n.buildOffsets(sd), nil
}

// structNode holds a STRUCT column, or (root) the row itself.
type structNode struct {
	base
	root     bool
	fields   []node
	names    []string
	nullable []bool
	index    map[string]int
	fold     map[string]int // lower-case name → field, for unique lower-case names
	seen     []uint32
	gen      uint32
	// follow[i+1] predicts the field after field i (follow[0]: the first),
	// learned from the previous object: JSON producers repeat key order.
	follow []int
}

func newStruct(fs []typemap.Field, nullable bool, dt *arrow.StructType, root bool) (*structNode, error) {
	n := &structNode{
		base:     base{nullable: nullable, name: "STRUCT", dt: dt},
		root:     root,
		fields:   make([]node, len(fs)),
		names:    make([]string, len(fs)),
		nullable: make([]bool, len(fs)),
		index:    make(map[string]int, len(fs)),
		fold:     make(map[string]int, len(fs)),
		seen:     make([]uint32, len(fs)),
		follow:   make([]int, len(fs)+1),
	}
	folded := map[string]int{}
	for i, f := range fs {
		child, err := newNode(f.Type, dt.Field(i).Type, f.Nullable)
		if err != nil {
			return nil, fmt.Errorf("arrowconv: field %q: %w", f.Name, err)
		}
		n.fields[i] = child
		n.names[i] = f.Name
		n.nullable[i] = f.Nullable
		n.index[f.Name] = i
		folded[strings.ToLower(f.Name)]++
		n.follow[i] = i // first guess: keys in column order
	}
	n.follow[len(fs)] = -1
	for i, f := range fs {
		if k := strings.ToLower(f.Name); folded[k] == 1 {
			n.fold[k] = i
		}
	}
	return n, nil
}

// lookup finds the field for key k after field prev (-1 at the start);
// folded reports a case-insensitive match.
func (n *structNode) lookup(st *state, k []byte, prev int) (idx int, folded bool) {
	if h := n.follow[prev+1]; h >= 0 && n.names[h] == string(k) {
		return h, false
	}
	if i, ok := n.index[string(k)]; ok {
		n.follow[prev+1] = i
		return i, false
	}
	st.fold = st.fold[:0]
	for _, c := range k {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		st.fold = append(st.fold, c)
	}
	if i, ok := n.fold[string(st.fold)]; ok {
		return i, true
	}
	return -1, false
}

func (n *structNode) nextGen() {
	n.gen++
	if n.gen == 0 {
		clear(n.seen)
		n.gen = 1
	}
}

func (n *structNode) fieldErr(i int, err error) error {
	return at(n.names[i], err)
}

func (n *structNode) decode(st *state) error {
	c := st.peek()
	if c == 'n' {
		return n.null(st, n)
	}
	if c != '{' {
		return n.mismatch("a JSON object", c)
	}
	return n.decodeObject(st)
}

func (n *structNode) decodeObject(st *state) error {
	st.pos++ // '{'
	n.nextGen()
	prev := -1
	if st.peek() == '}' {
		st.pos++
		return n.finish()
	}
	for {
		if st.peek() != '"' {
			return st.errorf("expected object key")
		}
		k, err := st.readString()
		if err != nil {
			return err
		}
		i, folded := n.lookup(st, k, prev)
		if i < 0 {
			return n.unknown(string(k))
		}
		if folded {
			st.rowFolded++
		}
		if n.seen[i] == n.gen {
			return at(string(k), kerr(ErrDuplicateField, "duplicate field (maps to %q)", n.names[i]))
		}
		n.seen[i] = n.gen
		if err := st.expect(':'); err != nil {
			return err
		}
		if err := n.fields[i].decode(st); err != nil {
			return n.fieldErr(i, err)
		}
		prev = i
		switch st.peek() {
		case ',':
			st.pos++
		case '}':
			st.pos++
			return n.finish()
		default:
			return st.errorf("expected ',' or '}' in object")
		}
	}
}

func (n *structNode) unknown(k string) error {
	what := "the table has no such column"
	if !n.root {
		what = "the struct has no such field"
	}
	return at(k, kerr(ErrUnknownField, "unknown field: %s", what))
}

// finish fills the fields the object did not carry and ends the value.
func (n *structNode) finish() error {
	for i, f := range n.fields {
		if n.seen[i] == n.gen {
			continue
		}
		if ts, ok := f.(*tsNode); ok && ts.emit != nil {
			_ = ts.add(*ts.emit)
			continue
		}
		if !n.nullable[i] {
			what := "NOT NULL column"
			if !n.root {
				what = "NOT NULL field"
			}
			return n.fieldErr(i, kerr(ErrMissingRequired, "missing value for %s", what))
		}
		f.appendNull()
	}
	if !n.root {
		n.validity.add(true)
	}
	return nil
}

func (n *structNode) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		return n.nullValue(n)
	case map[string]any:
		return n.putObject(st, v)
	}
	return n.mismatchGo("an object", v)
}

func (n *structNode) putObject(st *state, m map[string]any) error {
	n.nextGen()
	matched := 0
	for i, name := range n.names {
		v, ok := m[name]
		if !ok {
			continue
		}
		matched++
		n.seen[i] = n.gen
		if err := n.fields[i].put(st, v); err != nil {
			return n.fieldErr(i, err)
		}
	}
	if matched < len(m) {
		var extra []string
		for k := range m {
			if _, ok := n.index[k]; !ok {
				extra = append(extra, k)
			}
		}
		slices.Sort(extra)
		for _, k := range extra {
			i, _ := n.lookup(st, []byte(k), len(n.names)-1)
			if i < 0 {
				return n.unknown(k)
			}
			if n.seen[i] == n.gen {
				return at(k, kerr(ErrDuplicateField, "duplicate field (maps to %q)", n.names[i]))
			}
			st.rowFolded++
			n.seen[i] = n.gen
			if err := n.fields[i].put(st, m[k]); err != nil {
				return n.fieldErr(i, err)
			}
		}
	}
	return n.finish()
}

// appendNull appends a null struct: nullable fields get nulls and NOT NULL
// fields valid zero values, as Arrow children must stay aligned.
func (n *structNode) appendNull() {
	n.fillChildren()
	n.validity.add(false)
}

func (n *structNode) appendEmpty() {
	n.fillChildren()
	n.validity.add(true)
}

func (n *structNode) fillChildren() {
	for i, f := range n.fields {
		if n.nullable[i] {
			f.appendNull()
		} else {
			f.appendEmpty()
		}
	}
}

func (n *structNode) truncate(k int) {
	for _, f := range n.fields {
		f.truncate(k)
	}
	if !n.root {
		n.truncateBits(k)
	}
}

func (n *structNode) reset(c int) {
	for _, f := range n.fields {
		f.reset(c)
	}
	n.resetBits(c)
}

func (n *structNode) build() (arrow.ArrayData, error) {
	children := make([]arrow.ArrayData, len(n.fields))
	for i, f := range n.fields {
		d, err := f.build()
		if err != nil {
			return nil, err
		}
		children[i] = d
		defer d.Release()
	}
	size := n.n
	bits, nulls := n.takeBits()
	return array.NewData(n.dt, size, []*memory.Buffer{bits}, children, nulls, 0), nil
}
