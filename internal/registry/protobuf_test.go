package registry

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	cs "github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

const protoMoney = `syntax = "proto3";
package common;
message Money {
  string currency = 1;
  int64 units = 2;
}
`

const protoOrder = `syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "common/money.proto";

message Order {
  int32 i32 = 1;
  sint32 s32 = 2;
  sfixed32 sf32 = 3;
  int64 i64 = 4;
  uint64 u64 = 5;
  uint32 u32 = 6;
  fixed64 f64 = 7;
  float f = 8;
  double d = 9;
  bool b = 10;
  string s = 11;
  bytes raw = 12;
  Status status = 13;
  google.protobuf.Timestamp placed_at = 14;
  common.Money total = 15;
  repeated string tags = 16;
  map<string, int64> counts = 17;
  optional string note = 18;
  oneof choice {
    string email = 19;
    int64 phone = 20;
  }
  Line line = 21;
  google.protobuf.Int64Value maybe = 22;
  message Line {
    string sku = 1;
    repeated Line children = 2;
  }
}
enum Status {
  UNKNOWN = 0;
  PAID = 1;
}
message Other {
  string x = 1;
  message Deep {
    int32 y = 1;
  }
}
`

var protoRefs = []Reference{{Name: "common/money.proto", Schema: Schema{ID: 1, Format: Protobuf, Text: protoMoney, Subject: "money", Version: 1}}}

// protoEncode writes jsonText as message name of protoOrder, framed with the
// message-index array index: the test's own encoder is dynamicpb.
func protoEncode(t testing.TB, name protoreflect.FullName, jsonText string, index ...int) []byte {
	t.Helper()
	compiler := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"order.proto": protoOrder, "common/money.proto": protoMoney}),
	})}
	files, err := compiler.Compile(context.Background(), "order.proto")
	require.NoError(t, err)
	d, err := files.AsResolver().FindDescriptorByName(name)
	require.NoError(t, err)
	msg := dynamicpb.NewMessage(d.(protoreflect.MessageDescriptor))
	require.NoError(t, protojson.Unmarshal([]byte(jsonText), msg))
	payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	require.NoError(t, err)
	header, err := new(sr.ConfluentHeader).AppendEncode(nil, 1, index)
	require.NoError(t, err)
	return append(header[5:], payload...)
}

func protoCodecFor(t *testing.T, o ProtobufOptions) Codec {
	t.Helper()
	c, err := NewCodec(Schema{ID: 11, Format: Protobuf, Text: protoOrder, References: protoRefs}, Options{Protobuf: o})
	require.NoError(t, err)
	return c
}

const protoOrderJSON = `{"i32":-1,"s32":-2,"sf32":3,"i64":"-9007199254740993","u64":"18446744073709551615","u32":4294967295,
 "f64":"7","f":1.5,"d":0.1,"b":true,"s":"héllo","raw":"AAEC","status":"PAID","placedAt":"2023-11-14T22:13:20.123456789Z",
 "total":{"currency":"EUR","units":"1230"},"tags":["a","b"],"counts":{"x":"1"},"note":"n","phone":"5",
 "line":{"sku":"A","children":[{"sku":"B"}]},"maybe":"-3"}`

func TestProtobufJSON(t *testing.T) {
	body := protoEncode(t, "shop.v1.Order", protoOrderJSON, 0)
	v, schema, err := protoCodecFor(t, ProtobufOptions{SerializeToJSON: true}).Decode(body)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{
		"i32": json.Number("-1"), "s32": json.Number("-2"), "sf32": json.Number("3"),
		"i64": "-9007199254740993", "u64": "18446744073709551615", "u32": json.Number("4294967295"), "f64": "7",
		"f": json.Number("1.5"), "d": json.Number("0.1"), "b": true, "s": "héllo", "raw": "AAEC", "status": "PAID",
		"placedAt": "2023-11-14T22:13:20.123456789Z",
		"total":    map[string]any{"currency": "EUR", "units": "1230"},
		"tags":     []any{"a", "b"}, "counts": map[string]any{"x": "1"}, "note": "n", "phone": "5",
		"line":  map[string]any{"sku": "A", "children": []any{map[string]any{"sku": "B"}}},
		"maybe": "-3",
	}, v)
	opt := func(s cs.Schema) cs.Schema { s.Optional = true; return s }
	line := cs.Schema{Name: "line", Type: cs.Object, Optional: true, Children: []cs.Schema{
		opt(cs.Schema{Name: "sku", Type: cs.String}),
		opt(cs.Schema{Name: "children", Type: cs.Array, Children: []cs.Schema{{Type: cs.Any}}}),
	}}
	assert.Equal(t, cs.Schema{Name: "Order", Type: cs.Object, Children: []cs.Schema{
		opt(cs.Schema{Name: "i32", Type: cs.Int32}),
		opt(cs.Schema{Name: "s32", Type: cs.Int32}),
		opt(cs.Schema{Name: "sf32", Type: cs.Int32}),
		opt(cs.Schema{Name: "i64", Type: cs.Int64}),
		opt(cs.Schema{Name: "u64", Type: cs.Int64}),
		opt(cs.Schema{Name: "u32", Type: cs.Int64}),
		opt(cs.Schema{Name: "f64", Type: cs.Int64}),
		opt(cs.Schema{Name: "f", Type: cs.Float32}),
		opt(cs.Schema{Name: "d", Type: cs.Float64}),
		opt(cs.Schema{Name: "b", Type: cs.Boolean}),
		opt(cs.Schema{Name: "s", Type: cs.String}),
		opt(cs.Schema{Name: "raw", Type: cs.ByteArray}),
		opt(cs.Schema{Name: "status", Type: cs.String}),
		opt(cs.Schema{Name: "placedAt", Type: cs.Timestamp, Unit: cs.Nanos, AdjustToUTC: true}),
		opt(cs.Schema{Name: "total", Type: cs.Object, Children: []cs.Schema{
			opt(cs.Schema{Name: "currency", Type: cs.String}), opt(cs.Schema{Name: "units", Type: cs.Int64}),
		}}),
		opt(cs.Schema{Name: "tags", Type: cs.Array, Children: []cs.Schema{{Type: cs.String}}}),
		opt(cs.Schema{Name: "counts", Type: cs.Map, Children: []cs.Schema{{Type: cs.Int64}}}),
		opt(cs.Schema{Name: "note", Type: cs.String}),
		opt(cs.Schema{Name: "email", Type: cs.String}),
		opt(cs.Schema{Name: "phone", Type: cs.Int64}),
		line,
		opt(cs.Schema{Name: "maybe", Type: cs.Int64}),
	}}, *schema)
}

func TestProtobufJSONOptions(t *testing.T) {
	body := protoEncode(t, "shop.v1.Order", `{"status":"PAID","placedAt":"2023-11-14T22:13:20Z"}`, 0)

	v, _, err := protoCodecFor(t, ProtobufOptions{SerializeToJSON: true}).Decode(body)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"status": "PAID", "placedAt": "2023-11-14T22:13:20Z"}, v)

	v, _, err = protoCodecFor(t, ProtobufOptions{SerializeToJSON: true, UseProtoNames: true, UseEnumNumbers: true}).Decode(body)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"status": json.Number("1"), "placed_at": "2023-11-14T22:13:20Z"}, v)

	// emit_unpopulated: zero values, and null for unset fields with presence;
	// never an unset oneof member.
	v, schema, err := protoCodecFor(t, ProtobufOptions{SerializeToJSON: true, EmitUnpopulated: true}).Decode(body)
	require.NoError(t, err)
	m := v.(map[string]any)
	assert.Equal(t, json.Number("0"), m["i32"])
	assert.Equal(t, "0", m["i64"])
	assert.Equal(t, "", m["s"])
	assert.Equal(t, []any{}, m["tags"])
	assert.Equal(t, map[string]any{}, m["counts"])
	assert.NotContains(t, m, "note", "proto3 optional is a oneof of its own")
	assert.Contains(t, m, "total")
	assert.Nil(t, m["total"])
	assert.NotContains(t, m, "email")
	assert.NotContains(t, m, "phone")
	assert.False(t, schema.Children[0].Optional, "i32 is always written")
	assert.True(t, schema.Children[17].Optional, "note has presence")
	assert.True(t, schema.Children[18].Optional, "email is a oneof member")

	// emit_default_values: zero values, but no nulls.
	v, _, err = protoCodecFor(t, ProtobufOptions{SerializeToJSON: true, EmitDefaultValues: true}).Decode(body)
	require.NoError(t, err)
	m = v.(map[string]any)
	assert.NotContains(t, m, "line")
	assert.Equal(t, json.Number("0"), m["i32"])
	assert.NotContains(t, m, "note")
	assert.NotContains(t, m, "total")
}

func TestProtobufDecodedForm(t *testing.T) {
	body := protoEncode(t, "shop.v1.Order", protoOrderJSON, 0)
	v, _, err := protoCodecFor(t, ProtobufOptions{}).Decode(body)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{
		"i32": int32(-1), "s32": int32(-2), "sf32": int32(3),
		"i64": int64(-9007199254740993), "u64": uint64(18446744073709551615), "u32": uint32(4294967295), "f64": uint64(7),
		"f": float32(1.5), "d": 0.1, "b": true, "s": "héllo", "raw": []byte{0, 1, 2}, "status": "PAID",
		"placedAt": time.Date(2023, 11, 14, 22, 13, 20, 123456789, time.UTC),
		"total":    map[string]any{"currency": "EUR", "units": int64(1230)},
		"tags":     []any{"a", "b"}, "counts": map[string]any{"x": int64(1)}, "note": "n", "phone": int64(5),
		"line":  map[string]any{"sku": "A", "children": []any{map[string]any{"sku": "B"}}},
		"maybe": int64(-3),
	}, v)

	v, _, err = protoCodecFor(t, ProtobufOptions{UseProtoNames: true, UseEnumNumbers: true, EmitUnpopulated: true}).Decode(
		protoEncode(t, "shop.v1.Order", `{"status":"PAID"}`, 0))
	require.NoError(t, err)
	m := v.(map[string]any)
	assert.Equal(t, int32(1), m["status"])
	assert.Equal(t, int64(0), m["i64"])
	assert.Contains(t, m, "placed_at")
	assert.Nil(t, m["placed_at"])
	assert.NotContains(t, m, "phone")
}

// The message-index array picks nested and later messages.
func TestProtobufMessageIndex(t *testing.T) {
	c := protoCodecFor(t, ProtobufOptions{SerializeToJSON: true})
	for _, tc := range []struct {
		name  protoreflect.FullName
		json  string
		index []int
		want  map[string]any
		root  string
	}{
		{"shop.v1.Order.Line", `{"sku":"Z"}`, []int{0, 0}, map[string]any{"sku": "Z"}, "Line"},
		{"shop.v1.Other", `{"x":"y"}`, []int{1}, map[string]any{"x": "y"}, "Other"},
		{"shop.v1.Other.Deep", `{"y":7}`, []int{1, 0}, map[string]any{"y": json.Number("7")}, "Deep"},
	} {
		v, schema, err := c.Decode(protoEncode(t, tc.name, tc.json, tc.index...))
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, v, tc.name)
		assert.Equal(t, tc.root, schema.Name)
	}
	// The single byte 0 is the index [0].
	body := protoEncode(t, "shop.v1.Order", `{"s":"x"}`, 0)
	assert.Equal(t, byte(0), body[0])
	v, _, err := c.Decode(body)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"s": "x"}, v)
}

func TestProtobufBadInput(t *testing.T) {
	c := protoCodecFor(t, ProtobufOptions{SerializeToJSON: true})

	_, _, err := c.Decode(protoEncode(t, "shop.v1.Other", `{"x":"y"}`, 2))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "message index [2]: index 2 at depth 0 is past the 2 messages of the schema")

	_, _, err = c.Decode(protoEncode(t, "shop.v1.Other", `{"x":"y"}`, 1, 3))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "past the 1 messages of message shop.v1.Other")

	_, _, err = c.Decode(nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "schema 11: reading the Protobuf message-index array")

	_, _, err = c.Decode([]byte{0, 0x0a, 0x05, 'a'}) // field 1, length 5, 1 byte
	require.Error(t, err)
	assert.Contains(t, err.Error(), "decoding Protobuf message shop.v1.Order (message index [0])")

	_, err = NewCodec(Schema{ID: 12, Format: Protobuf, Text: protoOrder}, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "schema 12: compiling the Protobuf schema")
	assert.Contains(t, err.Error(), "common/money.proto")

	_, err = NewCodec(Schema{ID: 13, Format: Protobuf, Text: `syntax = "proto3"; enum E { A = 0; }`}, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "defines no message")
}

// The registry's "serialized" format: base64 FileDescriptorProtos, as
// Confluent's JavaScript serializer registers them.
func TestProtobufSerializedSchema(t *testing.T) {
	compiler := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"order.proto": protoOrder, "common/money.proto": protoMoney}),
	})}
	files, err := compiler.Compile(context.Background(), "order.proto", "common/money.proto")
	require.NoError(t, err)
	b64 := func(f protoreflect.FileDescriptor) string {
		raw, err := proto.Marshal(protodesc.ToFileDescriptorProto(f))
		require.NoError(t, err)
		return base64.StdEncoding.EncodeToString(raw)
	}
	c, err := NewCodec(Schema{ID: 14, Format: Protobuf, Text: b64(files[0]), References: []Reference{
		{Name: "common/money.proto", Schema: Schema{Text: b64(files[1])}},
	}}, Options{Protobuf: ProtobufOptions{SerializeToJSON: true}})
	require.NoError(t, err)
	v, schema, err := c.Decode(protoEncode(t, "shop.v1.Other.Deep", `{"y":7}`, 1, 0))
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"y": json.Number("7")}, v)
	assert.Equal(t, "Deep", schema.Name)
	v, _, err = c.Decode(protoEncode(t, "shop.v1.Order", `{"total":{"units":"5"},"placedAt":"2023-11-14T22:13:20Z"}`, 0))
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"total": map[string]any{"units": "5"}, "placedAt": "2023-11-14T22:13:20Z"}, v)
}

// A malformed map entry on which google.golang.org/protobuf panics (found
// by FuzzCodecs) fails its value with an error instead.
func TestProtobufMalformedMapEntryIsAnError(t *testing.T) {
	c, err := NewCodec(Schema{ID: 2, Format: Protobuf, Text: protoOrder, References: protoRefs}, Options{})
	require.NoError(t, err)
	body := []byte("\x000\xff\xff\xd6\xff\xff\xff\xff\xff\xff\x010028000000000000000000000000000000000000000000000000000000002!00000000000000000000000000000000000100000000\x8a\x01\x05\n\x010\b0")
	_, _, err = c.Decode(body)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "malformed Protobuf value")
	assert.Contains(t, err.Error(), "schema 2: decoding Protobuf message")
}

// MessageIndex reads the message-index array as Decode reads it (franz-go's
// DecodeIndex), and refuses what Decode refuses.
func TestMessageIndex(t *testing.T) {
	var h sr.ConfluentHeader
	for _, body := range [][]byte{{0}, {2, 0}, {2, 2, 0xff}, {4, 2, 4}, {6, 1, 3, 5, 9}, {0x80}, {1}, {2}, {0x82, 0x01}} {
		want, wantRest, werr := h.DecodeIndex(body, maxMessageIndexLength)
		got, n, ok := MessageIndex(body, nil)
		if werr != nil {
			assert.False(t, ok, "%x", body)
			continue
		}
		require.True(t, ok, "%x", body)
		assert.Equal(t, want, got, "%x", body)
		assert.Equal(t, wantRest, body[n:], "%x", body)
	}
}
