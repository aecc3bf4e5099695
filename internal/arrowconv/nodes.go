package arrowconv

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
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
	root   *structNode
	num    []byte
	text   []byte // spells structured numbers for the text parsers
	fold   []byte
	keySet map[string]struct{}
	// avroPlans holds the Avro plans bound to this state's nodes, and
	// avroEntries the map entries being read (see AvroPlan).
	avroPlans   map[*AvroPlan]avroFn
	avroEntries []avroEntry
	avro        avroReader // the value being read
	// pbPlans holds the Protobuf plans bound to this state's nodes.
	pbPlans        map[*ProtobufPlan]*pbMsg
	emitUS         int64
	epochExp       int
	nestedToString bool
	ntzFromZoned   bool

	// Reconciliations counted in the current row and in the batch's good rows.
	rowNested, rowFolded, rowNTZ int
	nested, folded, ntzConverted int
}

func (c *Converter) newState() (*state, error) {
	st := &state{epochExp: c.epochExp, nestedToString: c.opts.NestedToString, ntzFromZoned: c.opts.NTZFromZoned}
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
	st.nested, st.folded, st.ntzConverted = 0, 0, 0
	for _, f := range st.root.fields {
		f.reset(rows)
	}
}

// decodeRow appends one JSON object message as a row.
func (st *state) decodeRow(b []byte) error {
	st.scanner.reset(b)
	if c := st.peek(); c != '{' {
		if st.atEnd() {
			return kerr(ErrNotObject, "%v: empty message", ErrNotObject)
		}
		if isValueStart(c) {
			// Only a message that is JSON is "a JSON <kind>": "nonsense"
			// starts like null, "[oops" like an array.
			var v any
			if err := json.Unmarshal(st.data, &v); err != nil {
				return kerr(ErrInvalidJSON, "invalid JSON: the message is not JSON (%v): %s", err, Quote(st.data))
			}
			return kerr(ErrNotObject, "%v: got a JSON %s", ErrNotObject, jsonKind(c))
		}
		return st.notValue(c)
	}
	if err := st.root.decodeObject(st); err != nil {
		return err
	}
	// Anything but whitespace after the object, a NUL byte included, is
	// trailing data: a message is one JSON object.
	if !st.atEnd() {
		return st.errorf("trailing data after the JSON object (%q)", st.data[st.pos])
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
		return &variantNode{base: b}, nil
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

// sqlName is the column's SQL type name, for messages.
func (b *base) sqlName() string { return b.name }

func (b *base) nullValue(n node) error {
	if !b.nullable {
		return kerr(ErrMissingRequired, "null for NOT NULL %s", b.name)
	}
	n.appendNull()
	return nil
}

// mismatch is the error for a value starting with byte c where the column
// wants another kind; a byte that starts no JSON value at all is a syntax
// error instead.
func (b *base) mismatch(st *state, want string, c byte) error {
	if !isValueStart(c) {
		return st.notValue(c)
	}
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

// validity is a growable bitmap (a validity bitmap, or a BOOLEAN column's
// values), kept lazily: while every value added is set, it only counts them,
// and the bits are written out when the first unset value arrives (or when
// they are needed). Most columns of most batches have no nulls, and so cost
// a counter instead of a bit per value. Bits past n may be stale after a
// truncate; add always writes its bit.
type validity struct {
	bits []byte // the n values' bits, once mat
	n    int
	mat  bool // bits holds the values; before that, all n are set
}

func (v *validity) add(ok bool) {
	if !v.mat {
		if ok {
			v.n++
			return
		}
		v.materialise()
	}
	i := v.n
	if i&7 == 0 {
		v.bits = append(v.bits, 0)
	}
	if ok {
		v.bits[i>>3] |= 1 << (i & 7)
	} else {
		v.bits[i>>3] &^= 1 << (i & 7)
	}
	v.n++
}

// materialise writes out the bits of the n values counted so far, all set.
func (v *validity) materialise() {
	if v.mat {
		return
	}
	v.mat = true
	b := v.bits[:0]
	for range v.n >> 3 {
		b = append(b, 0xff)
	}
	if r := v.n & 7; r != 0 {
		b = append(b, byte(1)<<r-1)
	}
	v.bits = b
}

func (v *validity) length() int { return v.n }

func (v *validity) truncateBits(n int) {
	v.n = n
	if v.mat {
		v.bits = v.bits[:(n+7)/8]
	}
}

// resetBits empties v for a new batch. The bits' storage, when the last
// batch did not hand it over, is reused.
func (v *validity) resetBits(int) {
	v.bits = v.bits[:0]
	v.n = 0
	v.mat = false
}

// takeBits returns the validity buffer (nil when there are no nulls) and the
// null count, and empties v.
func (v *validity) takeBits() (*memory.Buffer, int) {
	var buf *memory.Buffer
	nulls := 0
	if v.mat {
		nulls = v.n - bitutil.CountSetBits(v.bits, 0, v.n)
		if nulls > 0 {
			buf = pooledBuffer(v.bits)
			v.bits = nil
		}
	}
	v.resetBits(0)
	return buf, nulls
}

// takeValues returns the bitmap as a values buffer (a BOOLEAN column's) and
// empties v.
func (v *validity) takeValues() *memory.Buffer {
	v.materialise()
	buf := pooledBuffer(v.bits)
	v.bits = nil
	v.resetBits(0)
	return buf
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
func (n *fixedNode[T]) reset(c int)    { n.vals = getSlice[T](c); n.resetBits(c) }
func (n *fixedNode[T]) build() (arrow.ArrayData, error) {
	size := n.n
	bits, nulls := n.takeBits()
	vals := pooledSlice(n.vals)
	n.vals = nil
	return newData(n.dt, size, []*memory.Buffer{bits, vals}, nil, nulls), nil
}
