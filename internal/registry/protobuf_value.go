package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// protoValue builds the value of a message without serialize_to_json, which
// Connect's docs describe as "kept in decoded form, which means that 64 bit
// integers are not converted to strings and types for bytes and
// google.protobuf.Timestamp are preserved": a message is a map[string]any
// with the same keys, fields and nulls as its JSON (use_proto_names,
// emit_unpopulated and emit_default_values apply alike), but int64 and uint64
// are Go integers, bytes are []byte, a Timestamp is a time.Time in UTC, and a
// wrapper type is the value it wraps. Enums are their names, or int32 numbers
// with use_enum_numbers. Other well-known types (Duration, Struct, Value,
// ListValue, Any, FieldMask) are their JSON form.
type protoValue struct {
	opts ProtobufOptions
	// json writes the well-known types kept in JSON form; its Resolver finds
	// the type inside an Any.
	json protojson.MarshalOptions
	// err is the first failure; the value is then incomplete.
	err error
}

func (p *protoValue) message(m protoreflect.Message) any {
	if v, ok := p.wellKnown(m); ok {
		return v
	}
	fields := m.Descriptor().Fields()
	out := make(map[string]any, fields.Len())
	for i := range fields.Len() {
		fd := fields.Get(i)
		name := protoFieldName(fd, p.opts)
		switch {
		case m.Has(fd):
			out[name] = p.field(fd, m.Get(fd))
		case fd.ContainingOneof() != nil:
		case fd.HasPresence():
			if p.opts.EmitUnpopulated {
				out[name] = nil
			}
		case p.opts.EmitUnpopulated || p.opts.EmitDefaultValues:
			out[name] = p.field(fd, m.Get(fd))
		}
	}
	return out
}

func (p *protoValue) field(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch {
	case fd.IsMap():
		mv := v.Map()
		out := make(map[string]any, mv.Len())
		mv.Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
			out[k.String()] = p.single(fd.MapValue(), e)
			return true
		})
		return out
	case fd.IsList():
		l := v.List()
		out := make([]any, l.Len())
		for i := range l.Len() {
			out[i] = p.single(fd, l.Get(i))
		}
		return out
	}
	return p.single(fd, v)
}

func (p *protoValue) single(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return v.Bool()
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return int32(v.Int())
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return v.Int()
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return uint32(v.Uint())
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return v.Uint()
	case protoreflect.FloatKind:
		return float32(v.Float())
	case protoreflect.DoubleKind:
		return v.Float()
	case protoreflect.StringKind:
		return v.String()
	case protoreflect.BytesKind:
		return bytes.Clone(v.Bytes())
	case protoreflect.EnumKind:
		n := v.Enum()
		if !p.opts.UseEnumNumbers {
			if ev := fd.Enum().Values().ByNumber(n); ev != nil {
				return string(ev.Name())
			}
		}
		return int32(n)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return p.message(v.Message())
	}
	return nil
}

// wellKnown returns the value of a google.protobuf message that has its own
// form.
func (p *protoValue) wellKnown(m protoreflect.Message) (any, bool) {
	md := m.Descriptor()
	switch md.FullName() {
	case "google.protobuf.Timestamp":
		secs := m.Get(md.Fields().ByName("seconds")).Int()
		nanos := m.Get(md.Fields().ByName("nanos")).Int()
		return time.Unix(secs, nanos).UTC(), true
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
		"google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
		"google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue":
		fd := md.Fields().ByName("value")
		return p.single(fd, m.Get(fd)), true
	case "google.protobuf.Duration", "google.protobuf.Struct", "google.protobuf.Value",
		"google.protobuf.ListValue", "google.protobuf.Any", "google.protobuf.FieldMask":
		v, err := protoJSONValue(p.json, m)
		if err != nil && p.err == nil {
			p.err = fmt.Errorf("%s: %w", md.FullName(), err)
		}
		return v, true
	}
	return nil, false
}

// protoJSONValue is m's protojson text, parsed with json.Number numbers.
func protoJSONValue(o protojson.MarshalOptions, m protoreflect.Message) (any, error) {
	text, err := o.Marshal(m.Interface())
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	err = dec.Decode(&v)
	return v, err
}
