package arrowconv

import (
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// ErrProtobufNotPlanned is what CompileProtobuf returns when a message and
// the table's columns need something the Protobuf fast path does not do:
// the caller then converts that message's values the general way (the
// registry codec's decode, then ConvertStructured), which gives the same
// record.
var ErrProtobufNotPlanned = errors.New("not on the Protobuf fast path")

// ProtobufOptions are the registry codec's options that shape a decoded
// message (protobuf.use_proto_names, protobuf.use_enum_numbers). The fast
// path plans only the codec's "kept decoded" shapes (serialize_to_json off,
// emit_unpopulated and emit_default_values off): the caller plans no other.
type ProtobufOptions struct {
	UseProtoNames  bool
	UseEnumNumbers bool
}

// ProtobufPlan is one Protobuf message type matched to a Converter's
// columns, once: ConvertProtobuf then reads each value's wire encoding
// straight into the column buffers, with no Go value per row.
//
// The values land exactly as the registry codec's decoded messages land
// through ConvertStructured: a field is a column by its JSON name (its
// proto name with UseProtoNames), matched as an object key is; an unset
// field (no presence and its zero value, an unset proto3 optional or
// message, an empty repeated field) is null; int64 and uint64 are numbers,
// bytes are bytes, enums are their names (numbers with UseEnumNumbers, or
// when the number has no name), a google.protobuf.Timestamp is its instant
// and a wrapper type is the value it wraps.
//
// CompileProtobuf refuses (ErrProtobufNotPlanned) what it does not do that
// way: groups, proto2 required fields, extensions, Editions files, a oneof
// member message holding a repeated field or a map, the well-known types
// kept in JSON form (Duration, FieldMask, Struct, Value, ListValue, Any),
// maps with keys other than strings or with message values, a message into
// a column that is not a STRUCT (a repeated field into one not an ARRAY, a
// map into one not a MAP with STRING keys, bytes into one not BINARY or
// STRING), a message that contains itself, two fields for one column, and a
// NOT NULL column no field fills.
type ProtobufPlan struct {
	conv *Converter
	md   protoreflect.MessageDescriptor
	opts ProtobufOptions
}

// CompileProtobuf matches message md to c's columns. An error wrapping
// ErrProtobufNotPlanned says which field the fast path does not take.
func (c *Converter) CompileProtobuf(md protoreflect.MessageDescriptor, o ProtobufOptions) (*ProtobufPlan, error) {
	p := &ProtobufPlan{conv: c, md: md, opts: o}
	st, err := c.getState()
	if err != nil {
		return nil, err
	}
	defer c.putState(st)
	if _, err := p.bind(st); err != nil {
		return nil, err
	}
	return p, nil
}

// boundMsg returns p's decoder bound to st's nodes, binding it on first use.
func (p *ProtobufPlan) boundMsg(st *state) (*pbMsg, error) {
	if m, ok := st.pbPlans[p]; ok {
		return m, nil
	}
	m, err := p.bind(st)
	if err != nil {
		return nil, err
	}
	if st.pbPlans == nil || len(st.pbPlans) >= maxBoundPlans {
		st.pbPlans = map[*ProtobufPlan]*pbMsg{}
	}
	st.pbPlans[p] = m
	return m, nil
}

func (p *ProtobufPlan) bind(st *state) (*pbMsg, error) {
	if wellKnownProto(p.md.FullName()) != pbPlain {
		return nil, fmt.Errorf("%w: the message is %s, which decodes to no object", ErrProtobufNotPlanned, p.md.FullName())
	}
	b := pbBinder{opts: p.opts, stack: map[protoreflect.FullName]bool{}}
	return b.message(p.md, st.root, "")
}

// pbWellKnown is how a message type decodes: as an object, or as one of
// the google.protobuf types with a value of their own.
type pbWellKnown uint8

const (
	pbPlain     pbWellKnown = iota
	pbTimestamp             // google.protobuf.Timestamp: a time
	pbWrapper               // google.protobuf.*Value wrappers: the value wrapped
	pbJSONForm              // Duration, FieldMask, Struct, Value, ListValue, Any: not planned
)

func wellKnownProto(name protoreflect.FullName) pbWellKnown {
	switch name {
	case "google.protobuf.Timestamp":
		return pbTimestamp
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
		"google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
		"google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue":
		return pbWrapper
	case "google.protobuf.Duration", "google.protobuf.Struct", "google.protobuf.Value",
		"google.protobuf.ListValue", "google.protobuf.Any", "google.protobuf.FieldMask":
		return pbJSONForm
	}
	return pbPlain
}

// pbMsg is one message position of a plan, bound to its node: the fields'
// slots of the one value of it being read (a repeated message's values are
// read one after another; a message field met twice in one value merges),
// then appended to the columns when the value ends.
type pbMsg struct {
	fields []*pbField // in declaration order
	small  []*pbField // by field number, when the numbers are small
	byNum  map[protowire.Number]*pbField
	// gen numbers the value being read: a field's slot holds a value of it
	// when the field's gen is this.
	gen uint64
	// oneof is the member last set of each real oneof (by the oneof's
	// index in the message); a member is set when it is this and its gen is
	// the message's.
	oneof []*pbField
	wk    pbWellKnown
	// node is where a plain message lands (st.root for the row); nil for a
	// well-known one, whose value lands through its field's store.
	node    *structNode
	missing []pbFill
}

// pbFill is a column no field fills: stamped with the emit time, or null.
type pbFill struct {
	n    node
	emit *int64
}

// pbField is one field of a pbMsg: how it reads, where it lands, and its
// slot in the value being read.
type pbField struct {
	num  protowire.Number
	kind protoreflect.Kind
	wire protowire.Type // the wire type of one value of kind
	list bool
	// A map field (string keys, scalar values): its entries are kept in
	// entries, then appended in key order, the last of a repeated key
	// kept, as the decoded map lands.
	isMap   bool
	valKind protoreflect.Kind
	valWire protowire.Type
	mn      *mapNode
	mapKeys *strNode
	entries []pbEntry
	// implicit: no presence (proto3 singular scalar outside a oneof): set
	// only when not its zero value.
	implicit bool
	oneof    int    // the real oneof's index; -1: none
	sub      *pbMsg // message kinds; nil when the field has no column

	col      int  // the column's index in the message's node; -1: none
	folded   bool // the column matched by the folding rules
	out      node // the column
	nullable bool
	ln       *listNode // list fields: the column
	store    pbStore   // scalars: appends a value to out (or ln.elem)
	// A well-known message's value: a wrapper's through wrapStore (the
	// value it wraps), a Timestamp's through timeStore.
	wrapStore pbStore
	timeStore func(st *state, secs, nanos int64) error

	// The slot: gen is the message value's when it holds a value of it.
	gen uint64
	u   uint64 // a scalar: its value (see pbCanon)
	b   []byte // string and bytes: the value, aliasing the input
	n   int    // list fields: the values appended in this message value
}

// pbEntry is one map entry read: its key and its value (as a slot holds
// it).
type pbEntry struct {
	key []byte
	u   uint64
	b   []byte
}

// pbStore appends one scalar value (u, b as a slot holds it) to a node.
type pbStore func(st *state, u uint64, b []byte) error

// errPB fails a row on the fast path: the row is then redone on the
// general path, which gives its error.
var errPB = kerr(ErrInvalidValue, "not on the Protobuf fast path")

type pbBinder struct {
	opts  ProtobufOptions
	stack map[protoreflect.FullName]bool
}

func pbNotPlanned(path, format string, args ...any) error {
	what := "the message"
	if path != "" {
		what = fmt.Sprintf("field %q", path)
	}
	return fmt.Errorf("%w: %s: %s", ErrProtobufNotPlanned, what, fmt.Sprintf(format, args...))
}

// maxSmallField bounds the field numbers looked up by index.
const maxSmallField = 512

// message binds a plain message to a struct node (or the row), or a
// well-known one (n nil) to nothing: its value lands through its field.
func (b *pbBinder) message(md protoreflect.MessageDescriptor, n *structNode, path string) (*pbMsg, error) {
	if md.ParentFile().Syntax() == protoreflect.Editions {
		return nil, pbNotPlanned(path, "an Editions file (%s)", md.ParentFile().Path())
	}
	if md.ExtensionRanges().Len() > 0 {
		return nil, pbNotPlanned(path, "message %s has extensions", md.FullName())
	}
	if b.stack[md.FullName()] {
		return nil, pbNotPlanned(path, "message %s contains itself", md.FullName())
	}
	b.stack[md.FullName()] = true
	defer delete(b.stack, md.FullName())
	m := &pbMsg{wk: wellKnownProto(md.FullName()), node: n, oneof: make([]*pbField, md.Oneofs().Len())}
	fds := md.Fields()
	var used []bool
	if n != nil {
		used = make([]bool, len(n.fields))
	}
	maxNum := protowire.Number(0)
	for k := range fds.Len() {
		fd := fds.Get(k)
		name := string(fd.Name())
		if !b.opts.UseProtoNames && m.wk == pbPlain {
			name = fd.JSONName()
		}
		fpath := joinPath(path, name)
		f, err := b.field(fd, fpath)
		if err != nil {
			return nil, err
		}
		if n != nil {
			i, folded := n.pbMatch(name)
			if i >= 0 {
				if used[i] {
					return nil, pbNotPlanned(fpath, "a second field for column %q", n.names[i])
				}
				used[i] = true
				f.col, f.folded, f.out, f.nullable = i, folded, n.fields[i], n.nullable[i]
			}
		}
		if err := b.land(fd, f, fpath); err != nil {
			return nil, err
		}
		m.fields = append(m.fields, f)
		maxNum = max(maxNum, f.num)
	}
	if maxNum <= maxSmallField {
		m.small = make([]*pbField, maxNum+1)
		for _, f := range m.fields {
			m.small[f.num] = f
		}
	} else {
		m.byNum = make(map[protowire.Number]*pbField, len(m.fields))
		for _, f := range m.fields {
			m.byNum[f.num] = f
		}
	}
	for i, u := range used {
		if u {
			continue
		}
		if ts, ok := n.fields[i].(*tsNode); ok && ts.emit != nil {
			m.missing = append(m.missing, pbFill{n: ts, emit: ts.emit})
			continue
		}
		if !n.nullable[i] {
			return nil, pbNotPlanned(joinPath(path, n.names[i]), "NOT NULL column has no field in the message")
		}
		m.missing = append(m.missing, pbFill{n: n.fields[i]})
	}
	return m, nil
}

// pbMatch finds the column of an object key as putObject finds it: by its
// exact name, else ASCII case-insensitively (a lower-case name unique
// among the columns), else by the column-name rule; folded reports the
// latter two.
func (n *structNode) pbMatch(k string) (i int, folded bool) {
	if i, ok := n.index[k]; ok {
		return i, false
	}
	lower := make([]byte, len(k))
	for j := range len(k) {
		c := k[j]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[j] = c
	}
	if i, ok := n.fold[string(lower)]; ok {
		return i, true
	}
	if !typemap.ValidIdentifier(k) {
		if i, ok := n.fold[typemap.ColumnKey(k)]; ok {
			return i, true
		}
	}
	return -1, false
}

// field describes how fd reads, before it is matched to a column.
func (b *pbBinder) field(fd protoreflect.FieldDescriptor, path string) (*pbField, error) {
	switch {
	case fd.IsMap() && fd.MapKey().Kind() != protoreflect.StringKind:
		return nil, pbNotPlanned(path, "a map field with %s keys", fd.MapKey().Kind())
	case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
		return nil, pbNotPlanned(path, "a map field with message values")
	case fd.Kind() == protoreflect.GroupKind:
		return nil, pbNotPlanned(path, "a group")
	case fd.Cardinality() == protoreflect.Required:
		return nil, pbNotPlanned(path, "a required field")
	case fd.IsExtension():
		return nil, pbNotPlanned(path, "an extension")
	}
	f := &pbField{num: fd.Number(), kind: fd.Kind(), list: fd.IsList(), oneof: -1, col: -1}
	f.wire = kindWire(fd.Kind())
	if fd.IsMap() {
		f.isMap, f.valKind = true, fd.MapValue().Kind()
		f.valWire = kindWire(f.valKind)
	}
	if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
		f.oneof = od.Index()
	}
	f.implicit = !f.list && !fd.HasPresence() && fd.ContainingOneof() == nil
	return f, nil
}

// kindWire is the wire type one value of kind is written with.
func kindWire(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return protowire.BytesType
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	}
	return protowire.VarintType
}

// land binds where a field's values land: f.out (its column, nil when
// none) takes each value; a repeated field's column is an ARRAY, whose
// element node takes them.
func (b *pbBinder) land(fd protoreflect.FieldDescriptor, f *pbField, path string) error {
	target := f.out
	if f.isMap {
		if target == nil {
			return nil // read past; an entry of it fails the row (no column)
		}
		mn, ok := target.(*mapNode)
		if !ok {
			return pbNotPlanned(path, "a map field into column type %s", nodeName(target))
		}
		keys, ok := mn.keys.(*strNode)
		if !ok || keys.mode != modeString {
			return pbNotPlanned(path, "a map field into a map whose keys are not STRING")
		}
		store, err := b.scalar(fd.MapValue(), mn.vals, path+"[]")
		f.mn, f.mapKeys, f.store = mn, keys, store
		return err
	}
	if f.list && target != nil {
		ln, ok := target.(*listNode)
		if !ok {
			return pbNotPlanned(path, "a repeated field into column type %s", nodeName(target))
		}
		f.ln, target = ln, ln.elem
	}
	if fd.Kind() != protoreflect.MessageKind {
		if target == nil {
			return nil
		}
		store, err := b.scalar(fd, target, path)
		f.store = store
		return err
	}
	md := fd.Message()
	wk := wellKnownProto(md.FullName())
	switch wk {
	case pbJSONForm:
		return pbNotPlanned(path, "%s (kept in its JSON form)", md.FullName())
	case pbPlain:
		if target == nil {
			return nil // read past; a value of it fails the row (no column)
		}
		sn, ok := target.(*structNode)
		if !ok {
			return pbNotPlanned(path, "message %s into column type %s", md.FullName(), nodeName(target))
		}
		sub, err := b.message(md, sn, path)
		if err != nil {
			return err
		}
		if f.oneof >= 0 && hasList(sub) {
			// A member replaced by another would leave its list values
			// in the column buffers.
			return pbNotPlanned(path, "a oneof member message with a repeated field")
		}
		f.sub = sub
		return nil
	}
	if target == nil {
		return nil
	}
	sub, err := b.message(md, nil, path)
	if err != nil {
		return err
	}
	f.sub = sub
	switch wk {
	case pbTimestamp:
		f.timeStore = timestampStore(target)
	case pbWrapper:
		store, err := b.scalar(md.Fields().ByName("value"), target, path)
		if err != nil {
			return err
		}
		f.wrapStore = store
	}
	return nil
}

func hasList(m *pbMsg) bool {
	for _, f := range m.fields {
		if f.list || f.isMap || (f.sub != nil && hasList(f.sub)) {
			return true
		}
	}
	return false
}

// timestampStore appends a Timestamp's time, as the codec gives it: a
// time.Time in UTC.
func timestampStore(n node) func(st *state, secs, nanos int64) error {
	tn, _ := n.(*tsNode)
	return func(st *state, secs, nanos int64) error {
		t := time.Unix(secs, nanos).UTC()
		if tn != nil {
			return tn.putTime(st, t)
		}
		return n.put(st, t)
	}
}

// scalar binds a scalar of fd's kind to node n: the common pairs write the
// value straight in, the others hand n the Go value the codec gives (what
// ConvertStructured does with it).
func (b *pbBinder) scalar(fd protoreflect.FieldDescriptor, n node, path string) (pbStore, error) {
	switch k := fd.Kind(); k {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return intStore(n, func(u uint64) any { return int32(int64(u)) }), nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return intStore(n, func(u uint64) any { return int64(u) }), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return uintStore(n, func(u uint64) any { return uint32(u) }), nil
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return uintStore(n, func(u uint64) any { return u }), nil
	case protoreflect.BoolKind:
		if bn, ok := n.(*boolNode); ok {
			return func(_ *state, u uint64, _ []byte) error { return bn.add(u != 0) }, nil
		}
		return putStore(n, func(u uint64) any { return u != 0 }), nil
	case protoreflect.FloatKind:
		switch fn := n.(type) {
		case *floatNode[float32]:
			return func(_ *state, u uint64, _ []byte) error { fn.push(math.Float32frombits(uint32(u))); return nil }, nil
		case *floatNode[float64]:
			return func(_ *state, u uint64, _ []byte) error {
				fn.push(float64(math.Float32frombits(uint32(u))))
				return nil
			}, nil
		}
		return putStore(n, func(u uint64) any { return math.Float32frombits(uint32(u)) }), nil
	case protoreflect.DoubleKind:
		switch fn := n.(type) {
		case *floatNode[float32]:
			return func(_ *state, u uint64, _ []byte) error { return fn.putFloat64(math.Float64frombits(u)) }, nil
		case *floatNode[float64]:
			return func(_ *state, u uint64, _ []byte) error { fn.push(math.Float64frombits(u)); return nil }, nil
		}
		return putStore(n, func(u uint64) any { return math.Float64frombits(u) }), nil
	case protoreflect.StringKind, protoreflect.BytesKind:
		sn, ok := n.(*strNode)
		if !ok || sn.mode == modeDecimal {
			if k == protoreflect.BytesKind {
				return nil, pbNotPlanned(path, "bytes into column type %s", nodeName(n))
			}
			return func(st *state, _ uint64, b []byte) error { return n.put(st, string(b)) }, nil
		}
		if sn.mode == modeBinary && k == protoreflect.StringKind {
			return func(_ *state, _ uint64, b []byte) error { return sn.addBase64(b) }, nil
		}
		// A string was checked as it was read (pbScalar); bytes into
		// STRING must be UTF-8 text.
		check := sn.mode == modeString && k == protoreflect.BytesKind
		return func(_ *state, _ uint64, b []byte) error {
			if check && !validUTF8(b) {
				return errPB
			}
			sn.data = append(sn.data, b...)
			return sn.commit()
		}, nil
	case protoreflect.EnumKind:
		return b.enum(fd.Enum(), n), nil
	}
	return nil, pbNotPlanned(path, "Protobuf %s", fd.Kind())
}

// intStore appends a signed integer (u: its two's complement); goValue is
// the codec's Go value for the other nodes.
func intStore(n node, goValue func(uint64) any) pbStore {
	switch n := n.(type) {
	case *intNode[int8]:
		return func(_ *state, u uint64, _ []byte) error { return n.add(int64(u), nil) }
	case *intNode[int16]:
		return func(_ *state, u uint64, _ []byte) error { return n.add(int64(u), nil) }
	case *intNode[int32]:
		return func(_ *state, u uint64, _ []byte) error { return n.add(int64(u), nil) }
	case *intNode[int64]:
		return func(_ *state, u uint64, _ []byte) error { n.push(int64(u)); return nil }
	case *floatNode[float32]:
		return func(_ *state, u uint64, _ []byte) error { return n.add(float64(int64(u))) }
	case *floatNode[float64]:
		return func(_ *state, u uint64, _ []byte) error { return n.add(float64(int64(u))) }
	}
	return putStore(n, goValue)
}

// uintStore appends an unsigned integer.
func uintStore(n node, goValue func(uint64) any) pbStore {
	switch n := n.(type) {
	case *intNode[int8]:
		return func(_ *state, u uint64, _ []byte) error { return n.putUint(u) }
	case *intNode[int16]:
		return func(_ *state, u uint64, _ []byte) error { return n.putUint(u) }
	case *intNode[int32]:
		return func(_ *state, u uint64, _ []byte) error { return n.putUint(u) }
	case *intNode[int64]:
		return func(_ *state, u uint64, _ []byte) error { return n.putUint(u) }
	case *floatNode[float32]:
		return func(_ *state, u uint64, _ []byte) error { return n.add(float64(u)) }
	case *floatNode[float64]:
		return func(_ *state, u uint64, _ []byte) error { return n.add(float64(u)) }
	}
	return putStore(n, goValue)
}

// putStore hands n the codec's Go value.
func putStore(n node, goValue func(uint64) any) pbStore {
	return func(st *state, u uint64, _ []byte) error { return n.put(st, goValue(u)) }
}

// enum binds an enum: its value's name into a STRING column; the number
// (use_enum_numbers, or a number without a name) as the int32 the codec
// gives.
func (b *pbBinder) enum(ed protoreflect.EnumDescriptor, n node) pbStore {
	names := map[int32]string{}
	vals := ed.Values()
	for i := vals.Len() - 1; i >= 0; i-- { // the first of aliases wins, as ByNumber finds it
		v := vals.Get(i)
		names[int32(v.Number())] = string(v.Name())
	}
	var dense []string // names by number, for numbers 0..len-1
	for i := int32(0); ; i++ {
		name, ok := names[i]
		if !ok || i > 255 {
			break
		}
		dense = append(dense, name)
	}
	if b.opts.UseEnumNumbers {
		return intStore(n, func(u uint64) any { return int32(int64(u)) })
	}
	lookup := func(num int32) (string, bool) {
		if num >= 0 && int(num) < len(dense) {
			return dense[num], true
		}
		name, ok := names[num]
		return name, ok
	}
	if sn, ok := n.(*strNode); ok && sn.mode == modeString {
		return func(_ *state, u uint64, _ []byte) error {
			name, ok := lookup(int32(int64(u)))
			if !ok {
				return errPB // the number, an int32: a mismatch for STRING
			}
			sn.data = append(sn.data, name...)
			return sn.commit()
		}
	}
	return func(st *state, u uint64, _ []byte) error {
		num := int32(int64(u))
		if name, ok := lookup(num); ok {
			return n.put(st, name)
		}
		return n.put(st, num)
	}
}

// pbFieldOf is the field of number num, or nil.
func (m *pbMsg) pbFieldOf(num protowire.Number) *pbField {
	if m.small != nil {
		if int(num) < len(m.small) {
			return m.small[num]
		}
		return nil
	}
	return m.byNum[num]
}
