package arrowipc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxDepth is the deepest field nesting ReadSchema and SchemaMessage accept:
// a top-level field is at depth 1, each child one deeper. It bounds
// recursion on untrusted input and sits above what the service accepts (100
// Unity Catalog type levels below a column, the official Rust SDK's
// MAX_NESTING_DEPTH in databricks/zerobus-sdk rust/sdk/src/schema.rs, which
// is up to 101 Arrow field levels for nested structs and more where maps add
// their entries level), so every schema the service takes also parses; the
// service's own limit is the emulator's to enforce.
const MaxDepth = 256

// maxFields bounds the total number of fields ReadSchema visits. Flatbuffer
// offsets may share a subtree, so a small message could otherwise describe an
// exponentially large tree.
const maxFields = 1 << 16

// Kind names an Arrow type as the Type union of Schema.fbs spells it, except
// that Struct_ is "Struct".
type Kind string

// Every member of the Type union of Schema.fbs.
const (
	KindNull            Kind = "Null"
	KindInt             Kind = "Int"
	KindFloatingPoint   Kind = "FloatingPoint"
	KindBinary          Kind = "Binary"
	KindUtf8            Kind = "Utf8"
	KindBool            Kind = "Bool"
	KindDecimal         Kind = "Decimal"
	KindDate            Kind = "Date"
	KindTime            Kind = "Time"
	KindTimestamp       Kind = "Timestamp"
	KindInterval        Kind = "Interval"
	KindList            Kind = "List"
	KindStruct          Kind = "Struct"
	KindUnion           Kind = "Union"
	KindFixedSizeBinary Kind = "FixedSizeBinary"
	KindFixedSizeList   Kind = "FixedSizeList"
	KindMap             Kind = "Map"
	KindDuration        Kind = "Duration"
	KindLargeBinary     Kind = "LargeBinary"
	KindLargeUtf8       Kind = "LargeUtf8"
	KindLargeList       Kind = "LargeList"
	KindRunEndEncoded   Kind = "RunEndEncoded"
	KindBinaryView      Kind = "BinaryView"
	KindUtf8View        Kind = "Utf8View"
	KindListView        Kind = "ListView"
	KindLargeListView   Kind = "LargeListView"
)

// kinds maps a Type union tag to its Kind; index 0 (NONE) is invalid.
var kinds = [...]Kind{
	tagNull: KindNull, tagInt: KindInt, tagFloatingPoint: KindFloatingPoint,
	tagBinary: KindBinary, tagUtf8: KindUtf8, tagBool: KindBool,
	tagDecimal: KindDecimal, tagDate: KindDate, tagTime: KindTime,
	tagTimestamp: KindTimestamp, tagInterval: KindInterval, tagList: KindList,
	tagStruct: KindStruct, tagUnion: KindUnion, tagFixedSizeBinary: KindFixedSizeBinary,
	tagFixedSizeList: KindFixedSizeList, tagMap: KindMap, tagDuration: KindDuration,
	tagLargeBinary: KindLargeBinary, tagLargeUtf8: KindLargeUtf8, tagLargeList: KindLargeList,
	tagRunEndEncoded: KindRunEndEncoded, tagBinaryView: KindBinaryView,
	tagUtf8View: KindUtf8View, tagListView: KindListView, tagLargeListView: KindLargeListView,
}

// Unit names for Type.Unit.
const (
	UnitDay         = "day" // Date
	UnitSecond      = "s"
	UnitMillisecond = "ms"
	UnitMicrosecond = "us"
	UnitNanosecond  = "ns"
)

// Type is one field's Arrow type as the Schema message states it. Only the
// parameters of its Kind are set.
type Type struct {
	Kind Kind
	// BitWidth: Int (8, 16, 32, 64), FloatingPoint (16, 32, 64), Time (32,
	// 64), Decimal (128, 256, …).
	BitWidth int
	// Signed: Int.
	Signed bool
	// Unit: Date (UnitDay or UnitMillisecond), Time, Timestamp and Duration
	// (UnitSecond … UnitNanosecond).
	Unit string
	// TimeZone: Timestamp; empty for a zone-less (NTZ) timestamp.
	TimeZone string
	// Precision and Scale: Decimal.
	Precision, Scale int
	// Width: FixedSizeBinary byte width or FixedSizeList list size.
	Width int
	// KeysSorted: Map.
	KeysSorted bool
}

// String renders t in arrow-go's style for primitive types: "Int64",
// "Uint8", "Float32", "Date32", "Timestamp(us, UTC)", "Decimal(10, 2)"; other
// kinds render as their Kind.
func (t Type) String() string {
	switch t.Kind {
	case KindInt:
		if t.Signed {
			return "Int" + strconv.Itoa(t.BitWidth)
		}
		return "Uint" + strconv.Itoa(t.BitWidth)
	case KindFloatingPoint:
		return "Float" + strconv.Itoa(t.BitWidth)
	case KindDate:
		if t.Unit == UnitDay {
			return "Date32"
		}
		return "Date64"
	case KindTimestamp:
		if t.TimeZone != "" {
			return "Timestamp(" + t.Unit + ", " + t.TimeZone + ")"
		}
		return "Timestamp(" + t.Unit + ")"
	case KindTime:
		return "Time" + strconv.Itoa(t.BitWidth) + "(" + t.Unit + ")"
	case KindDuration:
		return "Duration(" + t.Unit + ")"
	case KindDecimal:
		return fmt.Sprintf("Decimal%d(%d, %d)", t.BitWidth, t.Precision, t.Scale)
	case KindFixedSizeBinary, KindFixedSizeList:
		return string(t.Kind) + "(" + strconv.Itoa(t.Width) + ")"
	}
	return string(t.Kind)
}

// KeyValue is one custom metadata entry.
type KeyValue struct {
	Key, Value string
}

// Field is one field of a Schema message, with its children in order and
// under the names the message gives them (arrow-go's own reader renames map
// children; this one does not).
type Field struct {
	Name     string
	Nullable bool
	Type     Type
	// Dictionary reports a dictionary-encoded field (Type is then the
	// dictionary's value type).
	Dictionary bool
	Children   []Field
	Metadata   []KeyValue
}

// String renders f as "name: Type<children>" with " NOT NULL" for a
// non-nullable field, e.g.
// "m: Map<entries: Struct<keys: LargeUtf8 NOT NULL, values: Int64> NOT NULL>".
// Metadata is not shown.
func (f Field) String() string {
	var sb strings.Builder
	f.format(&sb)
	return sb.String()
}

func (f Field) format(sb *strings.Builder) {
	sb.WriteString(f.Name)
	sb.WriteString(": ")
	if f.Dictionary {
		sb.WriteString("Dictionary<")
	}
	sb.WriteString(f.Type.String())
	if len(f.Children) > 0 {
		sb.WriteByte('<')
		for i, c := range f.Children {
			if i > 0 {
				sb.WriteString(", ")
			}
			c.format(sb)
		}
		sb.WriteByte('>')
	}
	if f.Dictionary {
		sb.WriteByte('>')
	}
	if !f.Nullable {
		sb.WriteString(" NOT NULL")
	}
}

// Schema is a decoded Schema message.
type Schema struct {
	// Version is the message's MetadataVersion as Schema.fbs numbers it
	// (V1 = 0 … V5 = 4).
	Version   int
	BigEndian bool
	Fields    []Field
	Metadata  []KeyValue
}

// ErrMalformed is wrapped by every ReadSchema error about the message's
// bytes (as opposed to its content).
var ErrMalformed = errors.New("malformed Arrow IPC schema message")

// ReadSchema decodes an Arrow IPC Schema message: the flatbuffer bytes of a
// Message whose header is a Schema, as FlightData.data_header carries it (no
// continuation marker or length prefix). Unlike arrow-go's reader it keeps
// every field's name, including map and list children, so callers can check
// them.
//
// It is meant for untrusted input: every offset is bounds-checked (it never
// panics), nesting deeper than MaxDepth is an error, and so is a message
// whose shared subtrees or strings expand to more than 65536 fields or to
// more string bytes than twice its size plus 64 KiB. Type union tags
// outside Schema.fbs, a missing type table and a header other than Schema
// are errors; any Kind of the format is returned as is, for the caller to
// accept or refuse.
func ReadSchema(msg []byte) (Schema, error) {
	r := reader{b: msg, strBudget: 2*int64(len(msg)) + 1<<16}
	root, err := r.root()
	if err != nil {
		return Schema{}, err
	}
	version, err := root.int16(slotMessageVersion, 0)
	if err != nil {
		return Schema{}, fmt.Errorf("message version: %w", err)
	}
	tag, err := root.uint8(slotMessageHeaderType, 0)
	if err != nil {
		return Schema{}, fmt.Errorf("message header type: %w", err)
	}
	if tag != messageHeaderSchema {
		return Schema{}, fmt.Errorf("message header type %d is not Schema (%d)", tag, messageHeaderSchema)
	}
	sch, ok, err := root.table(slotMessageHeader)
	if err != nil {
		return Schema{}, fmt.Errorf("message header: %w", err)
	}
	if !ok {
		return Schema{}, fmt.Errorf("message has no Schema header: %w", ErrMalformed)
	}
	out := Schema{Version: int(version)}
	endianness, err := sch.int16(slotSchemaEndianness, endiannessLittle)
	if err != nil {
		return Schema{}, fmt.Errorf("schema endianness: %w", err)
	}
	switch endianness {
	case endiannessLittle:
	case endiannessBig:
		out.BigEndian = true
	default:
		return Schema{}, fmt.Errorf("schema endianness %d: %w", endianness, ErrMalformed)
	}
	if out.Fields, err = r.fields(sch, slotSchemaFields, 1, ""); err != nil {
		return Schema{}, err
	}
	if out.Metadata, err = r.metadata(sch, slotSchemaCustomMetadata); err != nil {
		return Schema{}, fmt.Errorf("schema custom metadata: %w", err)
	}
	return out, nil
}

// RecordBatchRows returns the row count of an Arrow IPC record batch
// message: the flatbuffer bytes of a Message whose header is a RecordBatch,
// as FlightData.data_header carries it, without decoding the body. ok is
// false for any other message, or for bytes that are not a well-formed
// Message; like ReadSchema it bounds-checks every offset and never panics.
// A record batch that omits its length has 0 rows (the format's default).
func RecordBatchRows(msg []byte) (rows int64, ok bool) {
	r := reader{b: msg}
	root, err := r.root()
	if err != nil {
		return 0, false
	}
	if tag, err := root.uint8(slotMessageHeaderType, 0); err != nil || tag != messageHeaderRecordBatch {
		return 0, false
	}
	rb, ok, err := root.table(slotMessageHeader)
	if err != nil || !ok {
		return 0, false
	}
	rows, err = rb.int64(slotRecordBatchLength, 0)
	return rows, err == nil
}

// reader decodes flatbuffer tables with every access bounds-checked.
type reader struct {
	b       []byte
	visited int // fields visited so far, against maxFields
	// strBudget is how many more string bytes may be copied out: shared
	// strings (like shared subtrees) could otherwise make a small message
	// allocate far more than its size. A writer without shared strings
	// stays under len(b).
	strBudget int64
}

// table is a flatbuffer table: its position, its vtable's position and the
// sizes both declare.
type table struct {
	r      *reader
	pos    int
	vt     int
	vtLen  int
	objLen int
}

func (r *reader) malformed(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrMalformed)
}

// u32 reads the little-endian uint32 at p.
func (r *reader) u32(p int) (uint32, error) {
	if p < 0 || p > len(r.b)-4 {
		return 0, r.malformed("offset %d beyond the %d byte message", p, len(r.b))
	}
	return binary.LittleEndian.Uint32(r.b[p:]), nil
}

func (r *reader) root() (table, error) {
	off, err := r.u32(0)
	if err != nil {
		return table{}, fmt.Errorf("root offset: %w", err)
	}
	return r.tableAt(int64(off))
}

// tableAt validates the table at pos and its vtable.
func (r *reader) tableAt(pos int64) (table, error) {
	if pos < 0 || pos > int64(len(r.b))-4 {
		return table{}, r.malformed("table offset %d beyond the %d byte message", pos, len(r.b))
	}
	so := int32(binary.LittleEndian.Uint32(r.b[pos:]))
	vt := pos - int64(so)
	if vt < 0 || vt > int64(len(r.b))-4 {
		return table{}, r.malformed("vtable offset %d of table %d beyond the %d byte message", vt, pos, len(r.b))
	}
	vtLen := int(binary.LittleEndian.Uint16(r.b[vt:]))
	objLen := int(binary.LittleEndian.Uint16(r.b[vt+2:]))
	if vtLen < 4 || vtLen%2 != 0 || vt+int64(vtLen) > int64(len(r.b)) {
		return table{}, r.malformed("vtable at %d has invalid size %d", vt, vtLen)
	}
	if objLen < 4 || pos+int64(objLen) > int64(len(r.b)) {
		return table{}, r.malformed("table at %d has invalid size %d", pos, objLen)
	}
	return table{r: r, pos: int(pos), vt: int(vt), vtLen: vtLen, objLen: objLen}, nil
}

// slot returns the position of the inline value of slot, size bytes wide,
// or -1 when the table does not store it (the schema default applies).
func (t table) slot(slot, size int) (int, error) {
	e := 4 + 2*slot
	if e+2 > t.vtLen {
		return -1, nil
	}
	off := int(binary.LittleEndian.Uint16(t.r.b[t.vt+e:]))
	if off == 0 {
		return -1, nil
	}
	if off < 4 || off+size > t.objLen {
		return -1, t.r.malformed("slot %d of table %d at offset %d outside its %d byte table", slot, t.pos, off, t.objLen)
	}
	return t.pos + off, nil
}

func (t table) uint8(slot int, def uint8) (uint8, error) {
	p, err := t.slot(slot, 1)
	if err != nil || p < 0 {
		return def, err
	}
	return t.r.b[p], nil
}

func (t table) bool(slot int) (bool, error) {
	v, err := t.uint8(slot, 0)
	return v != 0, err
}

func (t table) int16(slot int, def int16) (int16, error) {
	p, err := t.slot(slot, 2)
	if err != nil || p < 0 {
		return def, err
	}
	return int16(binary.LittleEndian.Uint16(t.r.b[p:])), nil
}

func (t table) int32(slot int, def int32) (int32, error) {
	p, err := t.slot(slot, 4)
	if err != nil || p < 0 {
		return def, err
	}
	return int32(binary.LittleEndian.Uint32(t.r.b[p:])), nil
}

func (t table) int64(slot int, def int64) (int64, error) {
	p, err := t.slot(slot, 8)
	if err != nil || p < 0 {
		return def, err
	}
	return int64(binary.LittleEndian.Uint64(t.r.b[p:])), nil
}

// ref follows the offset stored in slot; ok is false when slot is absent.
func (t table) ref(slot int) (pos int64, ok bool, err error) {
	p, err := t.slot(slot, 4)
	if err != nil || p < 0 {
		return 0, false, err
	}
	return t.r.deref(p)
}

// deref follows the uoffset stored at p.
func (r *reader) deref(p int) (int64, bool, error) {
	off, err := r.u32(p)
	if err != nil {
		return 0, false, err
	}
	target := int64(p) + int64(off)
	if off == 0 || target > int64(len(r.b))-4 {
		return 0, false, r.malformed("offset %d at %d points outside the %d byte message", off, p, len(r.b))
	}
	return target, true, nil
}

func (t table) table(slot int) (table, bool, error) {
	pos, ok, err := t.ref(slot)
	if err != nil || !ok {
		return table{}, false, err
	}
	tt, err := t.r.tableAt(pos)
	return tt, err == nil, err
}

func (t table) string(slot int) (string, error) {
	pos, ok, err := t.ref(slot)
	if err != nil || !ok {
		return "", err
	}
	n := int64(binary.LittleEndian.Uint32(t.r.b[pos:]))
	if pos+4+n > int64(len(t.r.b)) {
		return "", t.r.malformed("string of %d bytes at %d beyond the %d byte message", n, pos, len(t.r.b))
	}
	if t.r.strBudget -= n; t.r.strBudget < 0 {
		return "", t.r.malformed("strings total more than twice the message size")
	}
	return string(t.r.b[pos+4 : pos+4+n]), nil
}

// vector returns the positions of the offsets held by the vector in slot.
func (t table) vector(slot int) (start int64, n int, err error) {
	pos, ok, err := t.ref(slot)
	if err != nil || !ok {
		return 0, 0, err
	}
	l := int64(binary.LittleEndian.Uint32(t.r.b[pos:]))
	if pos+4+4*l > int64(len(t.r.b)) {
		return 0, 0, t.r.malformed("vector of %d offsets at %d beyond the %d byte message", l, pos, len(t.r.b))
	}
	return pos + 4, int(l), nil
}

// element returns the table the i-th offset of a vector starting at start
// points to.
func (r *reader) element(start int64, i int) (table, error) {
	pos, _, err := r.deref(int(start) + 4*i)
	if err != nil {
		return table{}, err
	}
	return r.tableAt(pos)
}

func (r *reader) metadata(t table, slot int) ([]KeyValue, error) {
	start, n, err := t.vector(slot)
	if err != nil || n == 0 {
		return nil, err
	}
	out := make([]KeyValue, n)
	for i := range out {
		kv, err := r.element(start, i)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		if out[i].Key, err = kv.string(slotKeyValueKey); err != nil {
			return nil, fmt.Errorf("entry %d key: %w", i, err)
		}
		if out[i].Value, err = kv.string(slotKeyValueValue); err != nil {
			return nil, fmt.Errorf("entry %d value: %w", i, err)
		}
	}
	return out, nil
}

// fields decodes the [Field] vector in slot of t, at nesting depth depth;
// parent is the dotted path of the enclosing field, for errors.
func (r *reader) fields(t table, slot, depth int, parent string) ([]Field, error) {
	start, n, err := t.vector(slot)
	if err != nil {
		if parent == "" {
			return nil, fmt.Errorf("schema fields: %w", err)
		}
		return nil, fmt.Errorf("field %q children: %w", parent, err)
	}
	if n == 0 {
		return nil, nil
	}
	if depth > MaxDepth {
		return nil, fmt.Errorf("field %q nests deeper than %d levels", parent, MaxDepth)
	}
	if r.visited += n; r.visited > maxFields {
		return nil, r.malformed("more than %d fields", maxFields)
	}
	out := make([]Field, n)
	for i := range out {
		if out[i], err = r.field(start, i, depth, parent); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (r *reader) field(start int64, i, depth int, parent string) (Field, error) {
	path := func(name string) string {
		if parent == "" {
			return name
		}
		return parent + "." + name
	}
	ft, err := r.element(start, i)
	if err != nil {
		return Field{}, fmt.Errorf("field %d of %q: %w", i, parent, err)
	}
	var f Field
	if f.Name, err = ft.string(slotFieldName); err != nil {
		return Field{}, fmt.Errorf("field %d of %q name: %w", i, parent, err)
	}
	p := path(f.Name)
	if f.Nullable, err = ft.bool(slotFieldNullable); err != nil {
		return Field{}, fmt.Errorf("field %q nullable: %w", p, err)
	}
	if f.Type, err = r.fieldType(ft); err != nil {
		return Field{}, fmt.Errorf("field %q type: %w", p, err)
	}
	if _, f.Dictionary, err = ft.ref(slotFieldDictionary); err != nil {
		return Field{}, fmt.Errorf("field %q dictionary: %w", p, err)
	}
	if f.Metadata, err = r.metadata(ft, slotFieldCustomMetadata); err != nil {
		return Field{}, fmt.Errorf("field %q custom metadata: %w", p, err)
	}
	if f.Children, err = r.fields(ft, slotFieldChildren, depth+1, p); err != nil {
		return Field{}, err
	}
	return f, nil
}

func (r *reader) fieldType(ft table) (Type, error) {
	tag, err := ft.uint8(slotFieldTypeType, tagNone)
	if err != nil {
		return Type{}, err
	}
	if tag == tagNone || int(tag) >= len(kinds) {
		return Type{}, r.malformed("type union tag %d not in Schema.fbs", tag)
	}
	t := Type{Kind: kinds[tag]}
	tt, ok, err := ft.table(slotFieldType)
	if err != nil {
		return Type{}, err
	}
	if !ok {
		return Type{}, r.malformed("%s type table missing", t.Kind)
	}
	var unit int16
	switch tag {
	case tagInt:
		bw, err := tt.int32(slotIntBitWidth, 0)
		if err != nil {
			return Type{}, err
		}
		t.BitWidth = int(bw)
		if t.Signed, err = tt.bool(slotIntSigned); err != nil {
			return Type{}, err
		}
	case tagFloatingPoint:
		p, err := tt.int16(slotFloatPrecision, precisionHalf)
		if err != nil {
			return Type{}, err
		}
		switch p {
		case precisionHalf:
			t.BitWidth = 16
		case precisionSingle:
			t.BitWidth = 32
		case precisionDouble:
			t.BitWidth = 64
		default:
			return Type{}, r.malformed("floating point precision %d", p)
		}
	case tagDecimal:
		prec, err := tt.int32(slotDecimalPrecision, 0)
		if err != nil {
			return Type{}, err
		}
		scale, err := tt.int32(slotDecimalScale, 0)
		if err != nil {
			return Type{}, err
		}
		bw, err := tt.int32(slotDecimalBitWidth, 128)
		if err != nil {
			return Type{}, err
		}
		t.Precision, t.Scale, t.BitWidth = int(prec), int(scale), int(bw)
	case tagDate:
		u, err := tt.int16(slotDateUnit, dateUnitMillisecond)
		if err != nil {
			return Type{}, err
		}
		switch u {
		case dateUnitDay:
			t.Unit = UnitDay
		case dateUnitMillisecond:
			t.Unit = UnitMillisecond
		default:
			return Type{}, r.malformed("date unit %d", u)
		}
	case tagTime:
		if unit, err = tt.int16(slotTimeUnit, timeUnitMillisecond); err != nil {
			return Type{}, err
		}
		bw, err := tt.int32(slotTimeBitWidth, 32)
		if err != nil {
			return Type{}, err
		}
		t.BitWidth = int(bw)
	case tagTimestamp:
		if unit, err = tt.int16(slotTimestampUnit, timeUnitSecond); err != nil {
			return Type{}, err
		}
		if t.TimeZone, err = tt.string(slotTimestampTimezone); err != nil {
			return Type{}, err
		}
	case tagDuration:
		if unit, err = tt.int16(slotDurationUnit, timeUnitMillisecond); err != nil {
			return Type{}, err
		}
	case tagFixedSizeBinary, tagFixedSizeList:
		w, err := tt.int32(slotFixedSizeBinaryByteWidth, 0) // same slot as listSize
		if err != nil {
			return Type{}, err
		}
		t.Width = int(w)
	case tagMap:
		if t.KeysSorted, err = tt.bool(slotMapKeysSorted); err != nil {
			return Type{}, err
		}
	}
	switch tag {
	case tagTime, tagTimestamp, tagDuration:
		switch unit {
		case timeUnitSecond:
			t.Unit = UnitSecond
		case timeUnitMillisecond:
			t.Unit = UnitMillisecond
		case timeUnitMicrosecond:
			t.Unit = UnitMicrosecond
		case timeUnitNanosecond:
			t.Unit = UnitNanosecond
		default:
			return Type{}, r.malformed("time unit %d", unit)
		}
	}
	return t, nil
}
