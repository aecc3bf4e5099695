package arrowconv

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// pbAllSchema has a field of every kind the Protobuf fast path takes: the
// scalars, presence (proto3 optional, a oneof), repeated scalars packed
// and unpacked, nested and repeated messages, Timestamps and wrappers, a
// field the table has no column for (gone), one matched by case folding
// (MixedCase) and one past the numbers looked up by index.
const pbAllSchema = `syntax = "proto3";
package t;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

enum Color { RED = 0; GREEN = 1; BLUE = 2; }

message Row {
  int32 i32 = 1;
  int64 i64 = 2;
  sint32 s32 = 3;
  sint64 s64 = 4;
  uint32 u32 = 5;
  uint64 u64 = 6;
  fixed32 f32 = 7;
  fixed64 f64 = 8;
  sfixed32 sf32 = 9;
  sfixed64 sf64 = 10;
  bool b = 11;
  float fl = 12;
  double d = 13;
  string s = 14;
  bytes by = 15;
  Color color = 16;
  optional int32 opt_i = 17;
  optional string opt_s = 18;
  repeated int32 nums = 19;
  repeated sint64 snums = 20 [packed = false];
  repeated string tags = 21;
  repeated double ds = 22;
  repeated Color colors = 23;
  Addr addr = 24;
  repeated Item items = 25;
  google.protobuf.Timestamp ts = 26;
  google.protobuf.Int64Value wrapped = 27;
  google.protobuf.StringValue wname = 28;
  int32 small = 29;
  int64 as_double = 30;
  uint64 big = 31;
  string MixedCase = 32;
  string gone = 33;
  oneof choice { int32 ci = 34; string cs = 35; Geo cg = 37; }
  repeated google.protobuf.Timestamp times = 36;
  float fd = 38;
  int64 dec = 39;
  map<string, int64> attrs = 40;
  map<string, string> labels = 41;
  map<string, Color> paints = 42;
  int32 far = 1000;
}
message Addr { string street = 1; optional int32 zip = 2; repeated int32 codes = 3; Geo geo = 4; }
message Geo { double lat = 1; double lon = 2; }
message Item { string sku = 1; int32 qty = 2; }
`

// pbAllDefs is the table for pbAllSchema: every field but gone, by its
// JSON name, with two columns the schema lacks and some of other types
// than the codec's values (converted as ConvertStructured converts them).
const pbAllDefs = "_zb_emit_ts TIMESTAMP, note STRING, " +
	"i32 INT, i64 BIGINT NOT NULL, s32 INT, s64 BIGINT, u32 BIGINT, u64 BIGINT, f32 BIGINT, f64 BIGINT, " +
	"sf32 INT, sf64 BIGINT, b BOOLEAN, fl FLOAT, d DOUBLE, s STRING, by BINARY, color STRING, optI INT, optS STRING, " +
	"nums ARRAY<INT>, snums ARRAY<BIGINT>, tags ARRAY<STRING>, ds ARRAY<DOUBLE>, colors ARRAY<STRING>, " +
	"addr STRUCT<street: STRING, zip: INT, codes: ARRAY<INT>, geo: STRUCT<lat: DOUBLE, lon: DOUBLE>>, " +
	"items ARRAY<STRUCT<sku: STRING, qty: INT>>, ts TIMESTAMP, wrapped BIGINT, wname STRING, small SMALLINT, " +
	"asDouble DOUBLE, big BIGINT, mixedcase STRING, ci INT, cs STRING, cg STRUCT<lat: DOUBLE, lon: DOUBLE>, " +
	"times ARRAY<TIMESTAMP>, fd DOUBLE, dec DECIMAL(20,0), attrs MAP<STRING, BIGINT>, labels MAP<STRING, STRING>, " +
	"paints MAP<STRING, STRING>, far INT"

// pbSlowPath is the general path: the registry codec (with the output's
// options) and ConvertStructured.
type pbSlowPath struct{ codec registry.ProtobufCodec }

func newPBSlowPath(t testing.TB, schema string) pbSlowPath {
	t.Helper()
	codec, err := registry.NewProtobufCodec(registry.Schema{ID: 9, Format: registry.Protobuf, Text: schema}, registry.ProtobufOptions{})
	require.NoError(t, err)
	return pbSlowPath{codec}
}

func (p pbSlowPath) message(t testing.TB) protoreflect.MessageDescriptor {
	t.Helper()
	md, err := p.codec.Message(nil)
	require.NoError(t, err)
	return md
}

// decode is the codec's decode of a payload of the first message (message
// index [0], the single byte 0).
func (p pbSlowPath) decode(payload []byte) (any, error) {
	v, _, err := p.codec.Decode(append([]byte{0}, payload...))
	return v, err
}

func (p pbSlowPath) redo(payloads [][]byte) func(int) (any, error) {
	return func(i int) (any, error) { return p.decode(payloads[i]) }
}

func (p pbSlowPath) convert(c *Converter, payloads [][]byte) (Result, error) {
	rows := make([]StructuredRow, len(payloads))
	for i, b := range payloads {
		v, err := p.decode(b)
		rows[i] = decodedAvro{v: v, err: err}
	}
	return c.ConvertStructured(rows)
}

func mustPBPlan(t testing.TB, c *Converter, slow pbSlowPath) *ProtobufPlan {
	t.Helper()
	p, err := c.CompileProtobuf(slow.message(t), ProtobufOptions{})
	require.NoError(t, err)
	return p
}

// pbGen writes random wire encodings of a message, as a producer may:
// fields in random order, scalars sometimes written twice (the last
// counts) or at their zero value, repeated scalars packed or not (and
// packed runs split), messages sometimes written in two parts (merged),
// unknown fields and known fields with another wire type (both skipped).
// bad makes about one value in sixty fail on both paths (out of its
// column's range, invalid UTF-8, an unnamed enum number, a field with no
// column, truncated bytes).
type pbGen struct {
	r   *rand.Rand
	bad bool
}

func (g *pbGen) record(md protoreflect.MessageDescriptor) []byte {
	b := g.message(md, 0)
	if g.bad && g.r.IntN(40) == 0 && len(b) > 0 {
		b = b[:g.r.IntN(len(b))] // truncated: malformed, or another value
	}
	return b
}

func (g *pbGen) oneIn(n int) bool { return g.r.IntN(n) == 0 }

func (g *pbGen) message(md protoreflect.MessageDescriptor, depth int) []byte {
	var parts [][]byte
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		name := string(fd.Name())
		skip := g.oneIn(4)
		switch name {
		case "gone": // no column: set, it fails the row
			skip = !g.bad || !g.oneIn(10)
		case "i64": // NOT NULL
			skip = g.bad && g.oneIn(20)
		}
		if skip {
			continue
		}
		switch {
		case fd.IsMap():
			// Entries with keys from a small set (a repeated key: the
			// last counts), key and value in either order, sometimes
			// with an unknown field; a missing value (which the runtime
			// fills with its default) only when bad.
			keys := []string{"a", "b", "ü", "", "zz"}
			for range g.r.IntN(5) {
				entry := [][]byte{protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), keys[g.r.IntN(len(keys))])}
				if !(g.bad && g.oneIn(30)) {
					vd := fd.MapValue()
					entry = append(entry, append(protowire.AppendTag(nil, 2, kindWire(vd.Kind())), g.value(vd, depth)...))
				}
				if g.oneIn(6) {
					entry = append(entry, protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), 1))
				}
				g.r.Shuffle(len(entry), func(i, j int) { entry[i], entry[j] = entry[j], entry[i] })
				parts = append(parts, protowire.AppendBytes(protowire.AppendTag(nil, fd.Number(), protowire.BytesType), concat(entry)))
			}
		case fd.IsList():
			var vals [][]byte
			for range g.r.IntN(4) {
				vals = append(vals, g.value(fd, depth))
			}
			if fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.BytesKind &&
				fd.Kind() != protoreflect.MessageKind && g.oneIn(2) {
				// Packed, in one or two runs.
				cut := 0
				if len(vals) > 0 {
					cut = g.r.IntN(len(vals) + 1)
				}
				for _, run := range [][][]byte{vals[:cut], vals[cut:]} {
					if len(run) == 0 && !g.oneIn(3) {
						continue
					}
					parts = append(parts, protowire.AppendBytes(protowire.AppendTag(nil, fd.Number(), protowire.BytesType), concat(run)))
				}
				continue
			}
			for _, v := range vals {
				parts = append(parts, append(protowire.AppendTag(nil, fd.Number(), kindWire(fd.Kind())), v...))
			}
		default:
			times := 1
			if g.oneIn(5) {
				times = 2 + g.r.IntN(2)
			}
			for range times {
				parts = append(parts, append(protowire.AppendTag(nil, fd.Number(), kindWire(fd.Kind())), g.value(fd, depth)...))
			}
		}
	}
	if g.oneIn(4) {
		parts = append(parts, g.unknown(md))
	}
	g.r.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	return concat(parts)
}

// unknown is a field the message lacks, or a known one with another wire
// type: both are skipped.
func (g *pbGen) unknown(md protoreflect.MessageDescriptor) []byte {
	num := protowire.Number(100 + g.r.IntN(400))
	if fs := md.Fields(); fs.Len() > 0 && g.oneIn(2) {
		fd := fs.Get(g.r.IntN(fs.Len()))
		num = fd.Number()
		switch kindWire(fd.Kind()) {
		case protowire.Fixed32Type:
			return protowire.AppendFixed64(protowire.AppendTag(nil, num, protowire.Fixed64Type), g.r.Uint64())
		case protowire.VarintType:
			return protowire.AppendFixed32(protowire.AppendTag(nil, num, protowire.Fixed32Type), g.r.Uint32())
		}
		// Fixed64 and length-delimited kinds.
		return protowire.AppendFixed32(protowire.AppendTag(nil, num, protowire.Fixed32Type), g.r.Uint32())
	}
	switch g.r.IntN(5) {
	case 0:
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), g.r.Uint64())
	case 1:
		return protowire.AppendFixed32(protowire.AppendTag(nil, num, protowire.Fixed32Type), g.r.Uint32())
	case 2:
		return protowire.AppendFixed64(protowire.AppendTag(nil, num, protowire.Fixed64Type), g.r.Uint64())
	case 3:
		b := protowire.AppendTag(nil, num, protowire.StartGroupType)
		b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), 5)
		return protowire.AppendTag(b, num, protowire.EndGroupType)
	}
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), []byte("unknown"))
}

func concat(parts [][]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// value is one value of fd (without its tag), mostly in its column's range.
func (g *pbGen) value(fd protoreflect.FieldDescriptor, depth int) []byte {
	bad := g.bad && g.oneIn(60)
	name := string(fd.Name())
	var b []byte
	switch fd.Kind() {
	case protoreflect.Int32Kind:
		v := int64(g.int32())
		switch {
		case name == "small" && !bad:
			v = int64(int16(v))
		case g.oneIn(20):
			v = int64(g.r.Uint64()) // past 32 bits: the runtime truncates it
		}
		return protowire.AppendVarint(b, uint64(v))
	case protoreflect.Int64Kind:
		v := g.int64()
		if name == "i64" && v == 0 && !bad {
			v = 1 // NOT NULL: a zero is unset
		}
		return protowire.AppendVarint(b, uint64(v))
	case protoreflect.Sint32Kind:
		return protowire.AppendVarint(b, protowire.EncodeZigZag(int64(g.int32())))
	case protoreflect.Sint64Kind:
		return protowire.AppendVarint(b, protowire.EncodeZigZag(g.int64()))
	case protoreflect.Uint32Kind:
		return protowire.AppendVarint(b, uint64(uint32(g.int32())))
	case protoreflect.Uint64Kind:
		v := uint64(g.int64())
		if !bad {
			v &= math.MaxInt64
		}
		return protowire.AppendVarint(b, v)
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return protowire.AppendFixed32(b, uint32(g.int32()))
	case protoreflect.Sfixed64Kind:
		return protowire.AppendFixed64(b, uint64(g.int64()))
	case protoreflect.Fixed64Kind:
		v := uint64(g.int64())
		if !bad {
			v &= math.MaxInt64 // BIGINT
		}
		return protowire.AppendFixed64(b, v)
	case protoreflect.BoolKind:
		return protowire.AppendVarint(b, uint64(g.r.IntN(3)))
	case protoreflect.FloatKind:
		return protowire.AppendFixed32(b, math.Float32bits(float32(g.float())))
	case protoreflect.DoubleKind:
		return protowire.AppendFixed64(b, math.Float64bits(g.float()))
	case protoreflect.StringKind:
		s := g.text()
		if bad {
			s += "\xff"
		}
		return protowire.AppendString(b, s)
	case protoreflect.BytesKind:
		v := make([]byte, g.r.IntN(6))
		for i := range v {
			v[i] = byte(g.r.IntN(256))
		}
		return protowire.AppendBytes(b, v)
	case protoreflect.EnumKind:
		v := uint64(g.r.IntN(3))
		if bad {
			v = 7
		}
		return protowire.AppendVarint(b, v)
	case protoreflect.MessageKind:
		md := fd.Message()
		if md.FullName() == "google.protobuf.Timestamp" {
			var m []byte
			secs := g.r.Int64N(315_000_000_000) - 62_000_000_000
			if bad {
				secs = 400_000_000_000
			}
			if !g.oneIn(6) {
				m = protowire.AppendVarint(protowire.AppendTag(m, 1, protowire.VarintType), uint64(secs))
			}
			if !g.oneIn(6) {
				m = protowire.AppendVarint(protowire.AppendTag(m, 2, protowire.VarintType), uint64(g.r.IntN(1_000_000_000)))
			}
			return protowire.AppendBytes(b, m)
		}
		return protowire.AppendBytes(b, g.message(md, depth+1))
	}
	panic(fd.Kind())
}

func (g *pbGen) int32() int32 {
	switch g.r.IntN(6) {
	case 0:
		return 0
	case 1:
		return math.MaxInt32
	case 2:
		return math.MinInt32
	case 3:
		return int32(g.r.IntN(200)) - 100
	}
	return int32(g.r.Uint32())
}

func (g *pbGen) int64() int64 {
	switch g.r.IntN(5) {
	case 0:
		return 0
	case 1:
		return math.MinInt64
	case 2:
		return int64(g.r.IntN(2000)) - 1000
	}
	return int64(g.r.Uint64())
}

func (g *pbGen) float() float64 {
	switch g.r.IntN(8) {
	case 0:
		return 0
	case 1:
		return math.Copysign(0, -1)
	case 2:
		return math.NaN()
	case 3:
		return math.Inf(-1)
	case 4:
		return 1e300
	}
	return g.r.NormFloat64() * 1000
}

func (g *pbGen) text() string {
	words := []string{"", "a", "héllo", "日本", "x y", `q"uote`, "MixedCase"}
	return words[g.r.IntN(len(words))] + strings.Repeat("z", g.r.IntN(3))
}

// The fast path gives the record the codec and ConvertStructured give, for
// generated messages of every supported kind, with and without bad values.
func TestConvertProtobufEqualsStructuredPath(t *testing.T) {
	c := mustConverter(t, pbAllDefs, Options{NTZFromZoned: true})
	slow := newPBSlowPath(t, pbAllSchema)
	p := mustPBPlan(t, c, slow)
	md := slow.message(t)
	for _, bad := range []bool{false, true} {
		g := &pbGen{r: rand.New(rand.NewPCG(5, 5)), bad: bad}
		payloads := make([][]byte, 3000)
		for i := range payloads {
			payloads[i] = g.record(md)
		}
		want, err := slow.convert(c, payloads)
		require.NoError(t, err)
		defer want.Record.Release()
		redone := 0
		redo := slow.redo(payloads)
		got, err := c.ConvertProtobuf(p, payloads, func(i int) (any, error) { redone++; return redo(i) })
		require.NoError(t, err)
		defer got.Record.Release()
		validateRecord(t, got.Record)
		// The fast path takes every row the general path takes, but for
		// the bad values' map entries without a value, which it leaves
		// to the general path.
		if bad {
			assert.GreaterOrEqual(t, redone, len(want.RowErrors))
		} else {
			assert.Zero(t, redone)
		}
		t.Logf("bad %v: %d rows, %d fail", bad, len(payloads), len(want.RowErrors))
		assertSamePBResult(t, want, got)
		if bad {
			assert.NotEmpty(t, want.RowErrors, "the bad values fail rows")
		} else {
			assert.Empty(t, want.RowErrors, "%d rows fail, the first: %v", len(want.RowErrors), firstErr(want.RowErrors))
		}
		assert.Greater(t, got.Reconciled[ReconcileFieldNameCase], 0, "MixedCase lands in mixedcase")
	}
}

// The wire rules, one by one: the last of a repeated scalar counts, a
// message written twice merges, packed and unpacked values mix, unknown
// fields and known fields with another wire type are skipped, a zero
// without presence is unset (null) while a proto3 optional zero is set,
// and the last oneof member written is the one set.
func TestConvertProtobufWireRules(t *testing.T) {
	c := mustConverter(t, pbAllDefs, Options{})
	slow := newPBSlowPath(t, pbAllSchema)
	p := mustPBPlan(t, c, slow)
	tag := protowire.AppendTag
	varint := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(tag(nil, num, protowire.VarintType), v)
	}
	msg := func(num protowire.Number, parts ...[]byte) []byte {
		return protowire.AppendBytes(tag(nil, num, protowire.BytesType), concat(parts))
	}
	str := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(tag(nil, num, protowire.BytesType), s)
	}
	payload := concat([][]byte{
		varint(2, 7), varint(1, 5), varint(1, 9), // i64, then i32 twice: 9
		varint(19, 1), msg(19, protowire.AppendVarint(protowire.AppendVarint(nil, 2), 3)), varint(19, 4), // nums 1, [2 3], 4
		msg(24, str(1, "first"), varint(3, 1)), msg(24, varint(2, 0), varint(3, 2)), // addr merged: street, zip 0, codes 1 2
		varint(500, 1), protowire.AppendFixed32(tag(nil, 14, protowire.Fixed32Type), 1), // unknown; s as fixed32: unknown
		varint(29, 0), varint(17, 0), // small: zero, unset; optI: zero, set
		varint(34, 3), str(35, "won"), // oneof: cs last
		str(14, "s"),
		msg(40, str(1, "b"), varint(2, 1)), msg(40, varint(2, 2), str(1, "a")), msg(40, str(1, "b"), varint(2, 3)), // attrs: b's last
	})
	res, err := c.ConvertProtobuf(p, [][]byte{payload}, slow.redo([][]byte{payload}))
	require.NoError(t, err)
	defer res.Record.Release()
	require.Empty(t, res.RowErrors)
	want, err := slow.convert(c, [][]byte{payload})
	require.NoError(t, err)
	defer want.Record.Release()
	assertSamePBResult(t, want, res)
	col := func(name string) string {
		i := res.Record.Schema().FieldIndices(name)[0]
		return res.Record.Column(i).ValueStr(0)
	}
	assert.Equal(t, "9", col("i32"))
	assert.Equal(t, "[1,2,3,4]", col("nums"))
	assert.Equal(t, "s", col("s"))
	assert.Equal(t, "(null)", col("small"))
	assert.Equal(t, "0", col("optI"))
	assert.Equal(t, "(null)", col("ci"))
	assert.Equal(t, "won", col("cs"))
	assert.Equal(t, "(null)", col("labels"))
	attrs := res.Record.Column(res.Record.Schema().FieldIndices("attrs")[0]).(*array.Map)
	assert.Equal(t, `["a" "b"]`, attrs.Keys().String())
	assert.Equal(t, "[2 3]", attrs.Items().String())
}

// A malformed value fails its row alone, with the general path's error.
func TestConvertProtobufMalformedRow(t *testing.T) {
	c := mustConverter(t, pbAllDefs, Options{})
	slow := newPBSlowPath(t, pbAllSchema)
	p := mustPBPlan(t, c, slow)
	good := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 42)
	truncated := protowire.AppendTag(nil, 14, protowire.BytesType)
	truncated = append(protowire.AppendVarint(truncated, 10), "abc"...)
	unnamed := append(protowire.AppendVarint(protowire.AppendTag(nil, 16, protowire.VarintType), 9), good...)
	payloads := [][]byte{good, truncated, good, unnamed}
	res, err := c.ConvertProtobuf(p, payloads, slow.redo(payloads))
	require.NoError(t, err)
	defer res.Record.Release()
	want, err := slow.convert(c, payloads)
	require.NoError(t, err)
	defer want.Record.Release()
	assertSamePBResult(t, want, res)
	require.Len(t, res.RowErrors, 2)
	assert.Equal(t, []int{0, 2}, res.SourceIndex)
	assert.Contains(t, res.RowErrors[0].Error(), "message 1: reading structured message: schema 9: decoding Protobuf message t.Row")
	assert.Contains(t, res.RowErrors[1].Error(), `column "color"`)
}

// What the fast path does not do it refuses when planning, saying which
// field; those messages keep the general path.
func TestCompileProtobufRefusals(t *testing.T) {
	cases := []struct {
		name, schema, defs, want string
	}{
		{"map of messages", `syntax = "proto3"; message M { map<string, N> m = 1; } message N { int32 x = 1; }`, "m STRING", `field "m": a map field with message values`},
		{"map with int keys", `syntax = "proto3"; message M { map<int32, string> m = 1; }`, "m MAP<INT, STRING>", `field "m": a map field with int32 keys`},
		{"map into a struct", `syntax = "proto3"; message M { map<string, string> m = 1; }`, "m STRUCT<a: STRING>", `a map field into column type STRUCT`},
		{"duration", `syntax = "proto3"; import "google/protobuf/duration.proto"; message M { google.protobuf.Duration d = 1; }`, "d STRING", "google.protobuf.Duration"},
		{"message into string", `syntax = "proto3"; message M { N n = 1; } message N { int32 x = 1; }`, "n STRING", "message N into column type STRING"},
		{"repeated into string", `syntax = "proto3"; message M { repeated int32 r = 1; }`, "r STRING", "a repeated field into column type STRING"},
		{"recursive", `syntax = "proto3"; message M { M m = 1; }`, "m STRUCT<m: STRUCT<x: INT>>", "contains itself"},
		{"required", `syntax = "proto2"; message M { required int32 x = 1; }`, "x INT", "a required field"},
		{"extensions", `syntax = "proto2"; message M { optional int32 x = 1; extensions 100 to 200; }`, "x INT", "has extensions"},
		{"not null without field", `syntax = "proto3"; message M { int32 x = 1; }`, "x INT, y INT NOT NULL", `field "y": NOT NULL column has no field`},
		{"oneof message with a list", `syntax = "proto3"; message M { oneof o { N n = 1; int32 x = 2; } } message N { repeated int32 r = 1; }`, "n STRUCT<r: ARRAY<INT>>, x INT", "a oneof member message with a repeated field"},
		{"two fields for a column", `syntax = "proto2"; message M { optional int32 ab = 1; optional int32 y = 2 [json_name = "AB"]; }`, "ab INT", "a second field for column"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustConverter(t, tc.defs, Options{})
			slow := newPBSlowPath(t, tc.schema)
			_, err := c.CompileProtobuf(slow.message(t), ProtobufOptions{})
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrProtobufNotPlanned), err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// A message the fast path plans but whose rows it is stricter about than
// the codec (a proto2 string that is not UTF-8) still lands as the general
// path lands it: the row is redone.
func TestConvertProtobufProto2(t *testing.T) {
	schema := `syntax = "proto2"; message M { optional string s = 1; optional int32 x = 2 [default = 5]; repeated int32 r = 3; }`
	c := mustConverter(t, "s STRING, x INT, r ARRAY<INT>", Options{})
	slow := newPBSlowPath(t, schema)
	p := mustPBPlan(t, c, slow)
	payloads := [][]byte{
		protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 0),
		protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "bad\xff"),
		{},
		protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 3),
	}
	want, err := slow.convert(c, payloads)
	require.NoError(t, err)
	defer want.Record.Release()
	got, err := c.ConvertProtobuf(p, payloads, slow.redo(payloads))
	require.NoError(t, err)
	defer got.Record.Release()
	assertSamePBResult(t, want, got)
	assert.Len(t, got.RowErrors, 1)
	assert.Equal(t, "0", got.Record.Column(1).ValueStr(0), "a proto2 optional zero is set")
}

// FuzzConvertProtobuf feeds arbitrary bytes, between two good values, to
// the Protobuf fast path and to the general path (the registry codec, then
// ConvertStructured): they give the same result.
func FuzzConvertProtobuf(f *testing.F) {
	slow := newPBSlowPath(f, pbAllSchema)
	md := slow.message(f)
	g := &pbGen{r: rand.New(rand.NewPCG(13, 13)), bad: true}
	for range 4 {
		f.Add(g.record(md))
	}
	c := mustConverter(f, pbAllDefs, Options{NTZFromZoned: true})
	p := mustPBPlan(f, c, slow)
	good := (&pbGen{r: rand.New(rand.NewPCG(3, 3))}).record(md)
	f.Fuzz(func(t *testing.T, body []byte) {
		payloads := [][]byte{good, body, good}
		want, err := slow.convert(c, payloads)
		require.NoError(t, err)
		defer want.Record.Release()
		got, err := c.ConvertProtobuf(p, payloads, slow.redo(payloads))
		require.NoError(t, err)
		defer got.Record.Release()
		assertSamePBResult(t, want, got)
	})
}

// assertSamePBResult is assertSameResult for records that may hold NaN,
// which array.Equal never finds equal: a column that differs is compared
// value by value as text, where NaN is NaN.
func assertSamePBResult(t testing.TB, want, got Result) {
	t.Helper()
	require.Equal(t, want.Record.Schema(), got.Record.Schema())
	require.Equal(t, want.Record.NumRows(), got.Record.NumRows())
	for k := range int(want.Record.NumCols()) {
		w, g := want.Record.Column(k), got.Record.Column(k)
		require.Equal(t, w.NullN(), g.NullN(), want.Record.Schema().Field(k).Name)
		if array.Equal(w, g) {
			continue
		}
		for i := range w.Len() {
			require.Equal(t, w.IsNull(i), g.IsNull(i))
			require.Equal(t, w.ValueStr(i), g.ValueStr(i), "column %s row %d", want.Record.Schema().Field(k).Name, i)
		}
	}
	assert.Equal(t, want.SourceIndex, got.SourceIndex)
	assert.Equal(t, want.Reconciled, got.Reconciled)
	require.Len(t, got.RowErrors, len(want.RowErrors))
	for k := range want.RowErrors {
		assert.Equal(t, want.RowErrors[k].Index, got.RowErrors[k].Index)
		assert.Equal(t, want.RowErrors[k].Column, got.RowErrors[k].Column)
		assert.Equal(t, want.RowErrors[k].Error(), got.RowErrors[k].Error())
	}
}

func firstErr(errs []RowError) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
}
