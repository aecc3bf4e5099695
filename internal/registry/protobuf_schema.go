package registry

import (
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

// protoCommonSchema describes, as a common schema, the values the codec
// decodes for message md with options o:
//   - message → OBJECT, its fields in declaration order, named as the JSON
//     names them (the proto names with use_proto_names);
//   - repeated → ARRAY; map → MAP (keys as text, as JSON has them);
//   - bool → BOOLEAN; int32, sint32, sfixed32 → INT32; int64, sint64,
//     sfixed64, uint32, fixed32, uint64, fixed64 → INT64 (a uint64 past
//     2^63-1 does not fit); float → FLOAT32; double → FLOAT64;
//     string → STRING; bytes → BYTE_ARRAY; enum → STRING (INT32 with
//     use_enum_numbers);
//   - google.protobuf.Timestamp → TIMESTAMP (nanoseconds, UTC); the wrapper
//     types → what they wrap; Duration and FieldMask → STRING (their JSON
//     text); Struct, Value, ListValue and Any → ANY; a message that contains
//     itself → ANY;
//   - a field is optional unless it is always written with a value: protojson
//     leaves out unset fields with presence (message fields, proto3 optional,
//     oneof members, proto2 optional) and, unless emit_unpopulated or
//     emit_default_values, fields at their zero value.
func protoCommonSchema(md protoreflect.MessageDescriptor, o ProtobufOptions) (commonschema.Schema, error) {
	w := protoSchemaWalker{opts: o, stack: map[protoreflect.FullName]bool{}}
	s := w.message(md, string(md.Name()))
	return s, s.Validate()
}

type protoSchemaWalker struct {
	opts  ProtobufOptions
	stack map[protoreflect.FullName]bool
}

func (w protoSchemaWalker) message(md protoreflect.MessageDescriptor, name string) commonschema.Schema {
	s := commonschema.Schema{Name: name}
	if wk, ok := w.wellKnown(md); ok {
		wk.Name = name
		return wk
	}
	if w.stack[md.FullName()] {
		s.Type = commonschema.Any
		return s
	}
	w.stack[md.FullName()] = true
	defer delete(w.stack, md.FullName())
	s.Type = commonschema.Object
	fields := md.Fields()
	s.Children = make([]commonschema.Schema, fields.Len())
	for i := range fields.Len() {
		fd := fields.Get(i)
		c := w.field(fd, protoFieldName(fd, w.opts))
		c.Optional = !protoAlwaysWritten(fd, w.opts)
		s.Children[i] = c
	}
	return s
}

// field converts a field's type, repeated or map included.
func (w protoSchemaWalker) field(fd protoreflect.FieldDescriptor, name string) commonschema.Schema {
	switch {
	case fd.IsMap():
		return commonschema.Schema{Name: name, Type: commonschema.Map, Children: []commonschema.Schema{w.single(fd.MapValue(), "")}}
	case fd.IsList():
		return commonschema.Schema{Name: name, Type: commonschema.Array, Children: []commonschema.Schema{w.single(fd, "")}}
	}
	return w.single(fd, name)
}

// single converts one value of fd's kind.
func (w protoSchemaWalker) single(fd protoreflect.FieldDescriptor, name string) commonschema.Schema {
	s := commonschema.Schema{Name: name}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		s.Type = commonschema.Boolean
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		s.Type = commonschema.Int32
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		s.Type = commonschema.Int64
	case protoreflect.FloatKind:
		s.Type = commonschema.Float32
	case protoreflect.DoubleKind:
		s.Type = commonschema.Float64
	case protoreflect.StringKind:
		s.Type = commonschema.String
	case protoreflect.BytesKind:
		s.Type = commonschema.ByteArray
	case protoreflect.EnumKind:
		s.Type = commonschema.String
		if w.opts.UseEnumNumbers {
			s.Type = commonschema.Int32
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return w.message(fd.Message(), name)
	default:
		panic(fmt.Sprintf("protobuf kind %v", fd.Kind())) // every kind is above
	}
	return s
}

// wellKnown converts the google.protobuf types that JSON writes in their own
// form.
func (w protoSchemaWalker) wellKnown(md protoreflect.MessageDescriptor) (commonschema.Schema, bool) {
	switch md.FullName() {
	case "google.protobuf.Timestamp":
		return commonschema.Schema{Type: commonschema.Timestamp, Unit: commonschema.Nanos, AdjustToUTC: true}, true
	case "google.protobuf.Duration", "google.protobuf.FieldMask":
		return commonschema.Schema{Type: commonschema.String}, true
	case "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue", "google.protobuf.Any":
		return commonschema.Schema{Type: commonschema.Any}, true
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
		"google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
		"google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue":
		return w.single(md.Fields().ByName("value"), ""), true
	}
	return commonschema.Schema{}, false
}

// protoFieldName is the key a field's value has: its JSON name, or its proto
// name with use_proto_names.
func protoFieldName(fd protoreflect.FieldDescriptor, o ProtobufOptions) string {
	if o.UseProtoNames {
		return string(fd.Name())
	}
	return fd.JSONName()
}

// protoAlwaysWritten reports whether protojson writes fd, with a value, in
// every message (see protojson.MarshalOptions: unset fields with presence are
// left out or null, oneof members left out, and zero values written only
// with EmitUnpopulated or EmitDefaultValues).
func protoAlwaysWritten(fd protoreflect.FieldDescriptor, o ProtobufOptions) bool {
	if fd.Cardinality() == protoreflect.Required {
		return true // proto2: a message without it does not decode
	}
	if fd.HasPresence() || fd.ContainingOneof() != nil {
		return false
	}
	return o.EmitUnpopulated || o.EmitDefaultValues
}
