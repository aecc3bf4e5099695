package arrowconv

import (
	"bytes"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ConvertProtobuf converts a batch of Protobuf payloads (what follows the
// registry header and the message-index array), all of p's message, through
// p: each payload is read straight into the column buffers.
//
// redo is the general path for row i (the registry codec's decode of its
// whole value): a row the fast path does not take (a malformed payload, a
// value its column refuses, anything the fast path is unsure of) is
// converted again from redo's value, exactly as ConvertStructured converts
// it, so a failing row's error is the general path's. redo is required.
func (c *Converter) ConvertProtobuf(p *ProtobufPlan, payloads [][]byte, redo func(i int) (any, error)) (Result, error) {
	if p.conv != c {
		return Result{}, errProtobufPlanConverter
	}
	var m *pbMsg
	return c.convert(len(payloads), func(st *state, i int) error {
		if m == nil {
			var err error
			if m, err = p.boundMsg(st); err != nil {
				return err
			}
		}
		if i == len(payloads)-1 {
			defer m.release() // keep no payload alive in an idle state
		}
		good := st.root.fields[0].length()
		m.begin()
		err := st.pbDecode(m, payloads[i])
		if err == nil {
			err = st.pbFinish(m)
		}
		if err == nil {
			return nil
		}
		st.root.truncate(good)
		st.rowNested, st.rowFolded, st.rowNTZ = 0, 0, 0
		v, derr := redo(i)
		if derr != nil {
			return kerr(ErrInvalidValue, "reading structured message: %v", derr)
		}
		return st.putRow(v)
	})
}

var errProtobufPlanConverter = kerr(ErrInvalidValue, "arrowconv: a ProtobufPlan compiled for another Converter")

// begin starts a new value of m: no field holds a value of it.
func (m *pbMsg) begin() { m.gen++ }

// release drops the slots' views of the last payload read.
func (m *pbMsg) release() {
	for _, f := range m.fields {
		f.b = nil
		clear(f.entries)
		f.entries = f.entries[:0]
		if f.sub != nil {
			f.sub.release()
		}
	}
}

// pbDecode reads one message value's fields into m's slots, as the
// Protobuf runtime unmarshals them (google.golang.org/protobuf/proto,
// unmarshalMessageSlow, which a dynamic message takes): fields in any
// order; a scalar met again replaces the value before; a message met again
// merges; a value with another wire type than its field's, or of a field
// the message lacks, is an unknown field, skipped.
func (st *state) pbDecode(m *pbMsg, b []byte) error {
	for len(b) > 0 {
		var num protowire.Number
		var typ protowire.Type
		if c := b[0]; c < 0x80 {
			num, typ = protowire.Number(c>>3), protowire.Type(c&7)
			if num == 0 {
				return errPB
			}
			b = b[1:]
		} else {
			var n int
			num, typ, n = protowire.ConsumeTag(b)
			if n < 0 || num > protowire.MaxValidNumber {
				return errPB
			}
			b = b[n:]
		}
		f := m.pbFieldOf(num)
		if f != nil && typ == f.wire && !f.list && f.kind != protoreflect.MessageKind {
			// The usual field: a singular scalar, read in place.
			u, v, n := pbScalar(f.kind, typ, b)
			if n < 0 {
				return errPB
			}
			f.u, f.b = u, v
			m.set(f)
			b = b[n:]
			continue
		}
		n := -1
		if f != nil {
			var err error
			if n, err = st.pbField(m, f, typ, b); err != nil {
				return err
			}
		}
		if n < 0 { // unknown
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errPB
			}
		}
		b = b[n:]
	}
	return nil
}

// pbField reads one value of field f (the bytes after its tag): the bytes
// read, or -1 when its wire type makes it an unknown field.
func (st *state) pbField(m *pbMsg, f *pbField, typ protowire.Type, b []byte) (int, error) {
	if f.isMap {
		return st.pbMapEntry(m, f, typ, b)
	}
	if f.list {
		return st.pbList(m, f, typ, b)
	}
	if f.kind == protoreflect.MessageKind {
		if typ != protowire.BytesType {
			return -1, nil
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 || f.sub == nil {
			return 0, errPB // malformed, or a value for no column
		}
		if f.gen != m.gen || (f.oneof >= 0 && m.oneof[f.oneof] != f) {
			f.sub.begin()
		}
		m.set(f)
		return n, st.pbDecode(f.sub, v)
	}
	if typ != f.wire {
		return -1, nil
	}
	u, v, n := pbScalar(f.kind, typ, b)
	if n < 0 {
		return 0, errPB
	}
	f.u, f.b = u, v
	m.set(f)
	return n, nil
}

// set marks f as holding a value of m's value (and as its oneof's member).
func (m *pbMsg) set(f *pbField) {
	f.gen = m.gen
	if f.oneof >= 0 {
		m.oneof[f.oneof] = f
	}
}

// pbList reads one occurrence of a repeated field: one value, or (for the
// packable kinds, on a length-delimited wire type) a packed run of them,
// each appended to the column's elements.
func (st *state) pbList(m *pbMsg, f *pbField, typ protowire.Type, b []byte) (int, error) {
	if f.gen != m.gen {
		f.gen, f.n = m.gen, 0
	}
	if f.kind == protoreflect.MessageKind {
		if typ != protowire.BytesType {
			return -1, nil
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 || f.sub == nil {
			return 0, errPB
		}
		f.sub.begin()
		if err := st.pbDecode(f.sub, v); err != nil {
			return 0, err
		}
		if err := st.pbEnd(f, f.sub); err != nil {
			return 0, err
		}
		f.n++
		return n, nil
	}
	if typ == protowire.BytesType && f.wire != protowire.BytesType {
		run, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, errPB
		}
		for len(run) > 0 {
			u, _, k := pbScalar(f.kind, f.wire, run)
			if k < 0 {
				return 0, errPB
			}
			if err := st.pbElem(f, u, nil); err != nil {
				return 0, err
			}
			run = run[k:]
		}
		return n, nil
	}
	if typ != f.wire {
		return -1, nil
	}
	u, v, n := pbScalar(f.kind, typ, b)
	if n < 0 {
		return 0, errPB
	}
	return n, st.pbElem(f, u, v)
}

// pbMapEntry reads one entry of a map field (a message of a key, field 1,
// and a value, field 2, as the runtime's unmarshalMap reads it: in any
// order, the last of each kept, other fields skipped) into f.entries. An
// entry without its key or its value, which the runtime fills with
// defaults (or fails on), is left to the general path.
func (st *state) pbMapEntry(m *pbMsg, f *pbField, typ protowire.Type, b []byte) (int, error) {
	if f.gen != m.gen {
		f.gen, f.entries = m.gen, f.entries[:0]
	}
	if typ != protowire.BytesType {
		return -1, nil
	}
	entry, n := protowire.ConsumeBytes(b)
	if n < 0 || f.mn == nil {
		return 0, errPB // malformed, or an entry for no column
	}
	var e pbEntry
	haveKey, haveVal := false, false
	for len(entry) > 0 {
		num, typ, k := protowire.ConsumeTag(entry)
		if k < 0 || num > protowire.MaxValidNumber {
			return 0, errPB
		}
		entry = entry[k:]
		k = -1
		switch {
		case num == 1 && typ == protowire.BytesType:
			_, e.key, k = pbScalar(protoreflect.StringKind, typ, entry)
			haveKey = k >= 0
		case num == 2 && typ == f.valWire:
			e.u, e.b, k = pbScalar(f.valKind, typ, entry)
			haveVal = k >= 0
		default:
			k = protowire.ConsumeFieldValue(num, typ, entry)
		}
		if k < 0 {
			return 0, errPB
		}
		entry = entry[k:]
	}
	if !haveKey || !haveVal {
		return 0, errPB
	}
	f.entries = append(f.entries, e)
	return n, nil
}

// pbMapEnd appends a map field's entries in key order, the last of a
// repeated key kept.
func (st *state) pbMapEnd(f *pbField) error {
	es := f.entries
	slices.SortStableFunc(es, func(a, b pbEntry) int { return bytes.Compare(a.key, b.key) })
	for i, e := range es {
		if i+1 < len(es) && bytes.Equal(e.key, es[i+1].key) {
			continue // a later entry has this key
		}
		f.mapKeys.data = append(f.mapKeys.data, e.key...)
		_ = f.mapKeys.commit()
		if err := f.store(st, e.u, e.b); err != nil {
			return err
		}
	}
	return f.mn.end(f.mapKeys.length())
}

// pbElem appends one value of a repeated scalar field.
func (st *state) pbElem(f *pbField, u uint64, b []byte) error {
	if f.store == nil {
		return errPB // a value for no column
	}
	f.n++
	return f.store(st, u, b)
}

// pbScalar reads one scalar of kind, written with wire type typ (the
// kind's), as the runtime converts it: u holds integers as their 64-bit
// two's complement (after the runtime's truncation to 32 bits for the
// 32-bit kinds and enums), bools as 0 or 1, floats as their IEEE bits; b
// holds a string's or bytes' value. n < 0: malformed, or a string that is
// not UTF-8 (which the runtime refuses for proto3, and the STRING column
// for proto2).
func pbScalar(kind protoreflect.Kind, typ protowire.Type, b []byte) (u uint64, v []byte, n int) {
	switch typ {
	case protowire.VarintType:
		if len(b) > 0 && b[0] < 0x80 {
			u, n = uint64(b[0]), 1
		} else if u, n = protowire.ConsumeVarint(b); n < 0 {
			return 0, nil, n
		}
		switch kind {
		case protoreflect.Int32Kind, protoreflect.EnumKind:
			u = uint64(int64(int32(u)))
		case protoreflect.Sint32Kind:
			u = uint64(int64(int32(protowire.DecodeZigZag(u & math.MaxUint32))))
		case protoreflect.Uint32Kind:
			u = uint64(uint32(u))
		case protoreflect.Sint64Kind:
			u = uint64(protowire.DecodeZigZag(u))
		case protoreflect.BoolKind:
			if u != 0 {
				u = 1
			}
		}
		return u, nil, n
	case protowire.Fixed32Type:
		var w uint32
		if w, n = protowire.ConsumeFixed32(b); n < 0 {
			return 0, nil, n
		}
		if kind == protoreflect.Sfixed32Kind {
			return uint64(int64(int32(w))), nil, n
		}
		return uint64(w), nil, n
	case protowire.Fixed64Type:
		u, n = protowire.ConsumeFixed64(b)
		return u, nil, n
	}
	// BytesType: string or bytes.
	if v, n = protowire.ConsumeBytes(b); n < 0 {
		return 0, nil, n
	}
	if kind == protoreflect.StringKind && !validUTF8(v) {
		return 0, nil, -1
	}
	return 0, v, n
}

// present reports whether f holds a value in m's value, as the decoded
// message has it (protoreflect.Message.Has): a repeated field with values;
// a field without presence not at its zero value; any other when set (a
// oneof member while it is its oneof's).
func (m *pbMsg) present(f *pbField) bool {
	switch {
	case f.gen != m.gen:
		return false
	case f.list:
		return f.n > 0
	case f.isMap:
		return len(f.entries) > 0
	case f.oneof >= 0:
		return m.oneof[f.oneof] == f
	case f.implicit:
		if f.kind == protoreflect.StringKind || f.kind == protoreflect.BytesKind {
			return len(f.b) > 0
		}
		return f.u != 0
	}
	return true
}

// pbFinish appends m's value (read by pbDecode) to its node: each field's
// value or null, then the columns no field fills.
func (st *state) pbFinish(m *pbMsg) error {
	n := m.node
	for _, f := range m.fields {
		if !m.present(f) {
			if f.out == nil {
				continue
			}
			if ts, ok := f.out.(*tsNode); ok && ts.emit != nil {
				ts.push(*ts.emit)
				continue
			}
			if !f.nullable {
				return errPB // missing value for NOT NULL
			}
			f.out.appendNull()
			continue
		}
		if f.out == nil {
			return errPB // unknown field: the table has no column for it
		}
		if f.folded {
			st.rowFolded++
		}
		var err error
		switch {
		case f.isMap:
			err = st.pbMapEnd(f)
		case f.list:
			err = f.ln.commit()
		case f.sub != nil:
			err = st.pbEnd(f, f.sub)
		default:
			err = f.store(st, f.u, f.b)
		}
		if err != nil {
			return err
		}
	}
	for _, fill := range m.missing {
		if fill.emit != nil {
			fill.n.(*tsNode).push(*fill.emit)
		} else {
			fill.n.appendNull()
		}
	}
	if !n.root {
		n.validity.add(true)
	}
	return nil
}

// pbEnd appends the value of message field f (its message sub just read)
// to its column (or its column's elements): a plain message as a struct, a
// well-known one as its value.
func (st *state) pbEnd(f *pbField, sub *pbMsg) error {
	switch sub.wk {
	case pbTimestamp:
		secs, nanos := sub.word(1), sub.word(2)
		return f.timeStore(st, int64(secs), int64(int32(nanos)))
	case pbWrapper:
		v := sub.small[1]
		if v.gen != sub.gen {
			return f.wrapStore(st, 0, nil)
		}
		return f.wrapStore(st, v.u, v.b)
	}
	return st.pbFinish(sub)
}

// word is the scalar value of field num (0 when unset).
func (m *pbMsg) word(num protowire.Number) uint64 {
	if f := m.pbFieldOf(num); f != nil && f.gen == m.gen {
		return f.u
	}
	return 0
}
