package registry

import (
	"encoding/json"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/avro"

	cs "github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

// avroEncode encodes v with text (parsed after refs) the way a producer
// would: the test's own encoder is twmb/avro's.
func avroEncode(t testing.TB, text string, v any, refs ...string) []byte {
	t.Helper()
	var cache avro.SchemaCache
	for _, r := range refs {
		_, err := cache.Parse(r)
		require.NoError(t, err)
	}
	s, err := cache.Parse(text)
	require.NoError(t, err)
	b, err := s.Encode(v)
	require.NoError(t, err)
	return b
}

func avroCodecFor(t *testing.T, text string, o AvroOptions, refs ...Reference) Codec {
	t.Helper()
	c, err := NewCodec(Schema{ID: 7, Format: Avro, Text: text, References: refs}, Options{Avro: o})
	require.NoError(t, err)
	return c
}

const avroPlainSchema = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"b","type":"boolean"},
 {"name":"i","type":"int"},
 {"name":"l","type":"long"},
 {"name":"f","type":"float"},
 {"name":"d","type":"double"},
 {"name":"s","type":"string"},
 {"name":"raw","type":"bytes"},
 {"name":"fx","type":{"type":"fixed","name":"Two","size":2}},
 {"name":"e","type":{"type":"enum","name":"Color","symbols":["RED","GREEN"]}},
 {"name":"arr","type":{"type":"array","items":"long"}},
 {"name":"m","type":{"type":"map","values":"string"}},
 {"name":"inner","type":{"type":"record","name":"Inner","fields":[{"name":"x","type":"int"}]}},
 {"name":"opt","type":["null","string"]},
 {"name":"optLast","type":["long","null"]},
 {"name":"multi","type":["null","string","Inner"]},
 {"name":"n","type":"null"}
]}`

func avroPlainValue(opt, multi any) map[string]any {
	return map[string]any{
		"b": true, "i": int32(-5), "l": int64(1) << 40, "f": float32(1.5), "d": 2.25, "s": "héllo",
		"raw": []byte{0, 1, 2}, "fx": []byte{9, 8}, "e": "GREEN", "arr": []any{int64(1), int64(2)},
		"m": map[string]any{"k": "v"}, "inner": map[string]any{"x": int32(3)},
		"opt": opt, "optLast": int64(4), "multi": multi, "n": nil,
	}
}

func TestAvroPrimitivesAndUnions(t *testing.T) {
	for _, tc := range []struct {
		name      string
		raw       bool
		opt       any // what is encoded
		multi     any
		wantOpt   any // what is decoded
		wantLast  any
		wantMulti any
	}{
		{"avro json unions", false, "a", map[string]any{"shop.Inner": map[string]any{"x": int32(1)}},
			map[string]any{"string": "a"}, map[string]any{"long": int64(4)}, map[string]any{"shop.Inner": map[string]any{"x": int32(1)}}},
		{"raw unions", true, "a", map[string]any{"string": "z"},
			"a", int64(4), "z"},
		{"nulls", false, nil, nil, nil, map[string]any{"long": int64(4)}, nil},
		{"raw nulls", true, nil, nil, nil, int64(4), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := avroEncode(t, avroPlainSchema, avroPlainValue(tc.opt, tc.multi))
			v, schema, err := avroCodecFor(t, avroPlainSchema, AvroOptions{RawUnions: tc.raw}).Decode(body)
			require.NoError(t, err)
			want := avroPlainValue(tc.wantOpt, tc.wantMulti)
			want["optLast"] = tc.wantLast
			assert.Equal(t, want, v)
			assert.Equal(t, cs.Schema{Name: "Order", Type: cs.Object, Children: []cs.Schema{
				{Name: "b", Type: cs.Boolean},
				{Name: "i", Type: cs.Int32},
				{Name: "l", Type: cs.Int64},
				{Name: "f", Type: cs.Float32},
				{Name: "d", Type: cs.Float64},
				{Name: "s", Type: cs.String},
				{Name: "raw", Type: cs.ByteArray},
				{Name: "fx", Type: cs.ByteArray},
				{Name: "e", Type: cs.String},
				{Name: "arr", Type: cs.Array, Children: []cs.Schema{{Type: cs.Int64}}},
				{Name: "m", Type: cs.Map, Children: []cs.Schema{{Type: cs.String}}},
				{Name: "inner", Type: cs.Object, Children: []cs.Schema{{Name: "x", Type: cs.Int32}}},
				{Name: "opt", Type: cs.String, Optional: true},
				{Name: "optLast", Type: cs.Int64, Optional: true},
				{Name: "multi", Type: cs.Union, Optional: true, Children: []cs.Schema{
					{Name: "string", Type: cs.String},
					{Name: "shop.Inner", Type: cs.Object, Children: []cs.Schema{{Name: "x", Type: cs.Int32}}},
				}},
				{Name: "n", Type: cs.Null},
			}}, *schema)
		})
	}
}

const avroLogicalSchema = `{"type":"record","name":"L","fields":[
 {"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
 {"name":"decFixed","type":{"type":"fixed","name":"F8","size":8,"logicalType":"decimal","precision":18,"scale":4}},
 {"name":"decWide","type":{"type":"bytes","logicalType":"decimal","precision":60,"scale":3}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"tms","type":{"type":"int","logicalType":"time-millis"}},
 {"name":"tus","type":{"type":"long","logicalType":"time-micros"}},
 {"name":"tsms","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"tsus","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"tsns","type":{"type":"long","logicalType":"timestamp-nanos"}},
 {"name":"ltms","type":{"type":"long","logicalType":"local-timestamp-millis"}},
 {"name":"ltus","type":{"type":"long","logicalType":"local-timestamp-micros"}},
 {"name":"id","type":{"type":"string","logicalType":"uuid"}},
 {"name":"idFixed","type":{"type":"fixed","name":"U16","size":16,"logicalType":"uuid"}},
 {"name":"optTs","type":["null",{"type":"long","logicalType":"timestamp-micros"}]},
 {"name":"fieldLevel","type":"long","logicalType":"timestamp-micros"}
]}`

// Wire values: what a producer writes for each field.
var (
	tsMicros  = int64(1_700_000_000_123_456) // 2023-11-14T22:13:20.123456Z
	dayNumber = int32(19_700)                // 2023-12-09
	uuidBytes = []byte{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00}
)

func avroLogicalWire() map[string]any {
	return map[string]any{
		"dec":        big.NewRat(-123456, 100), // -1234.56
		"decFixed":   big.NewRat(5, 10000),     // 0.0005
		"decWide":    mustRat("123456789012345678901234567890123456789012.345"),
		"day":        time.Unix(int64(dayNumber)*86400, 0).UTC(),
		"tms":        int32(45_296_789),     // 12:34:56.789
		"tus":        int64(45_296_789_012), // 12:34:56.789012
		"tsms":       tsMicros / 1000,
		"tsus":       tsMicros,
		"tsns":       tsMicros*1000 + 789,
		"ltms":       tsMicros / 1000,
		"ltus":       tsMicros,
		"id":         "123e4567-e89b-12d3-a456-426614174000",
		"idFixed":    uuidBytes,
		"optTs":      tsMicros,
		"fieldLevel": tsMicros,
	}
}

func mustRat(s string) *big.Rat {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		panic(s)
	}
	return r
}

func TestAvroLogicalTypesPreserved(t *testing.T) {
	body := avroEncode(t, avroLogicalSchema, avroLogicalWire())
	v, schema, err := avroCodecFor(t, avroLogicalSchema, AvroOptions{PreserveLogicalTypes: true, RawUnions: true}).Decode(body)
	require.NoError(t, err)
	ts := time.UnixMicro(tsMicros).UTC()
	assert.Equal(t, map[string]any{
		"dec":        json.Number("-1234.56"),
		"decFixed":   json.Number("0.0005"),
		"decWide":    json.Number("123456789012345678901234567890123456789012.345"),
		"day":        time.Date(2023, 12, 9, 0, 0, 0, 0, time.UTC),
		"tms":        time.Date(1970, 1, 1, 12, 34, 56, 789_000_000, time.UTC),
		"tus":        time.Date(1970, 1, 1, 12, 34, 56, 789_012_000, time.UTC),
		"tsms":       ts.Truncate(time.Millisecond),
		"tsus":       ts,
		"tsns":       ts.Add(789 * time.Nanosecond),
		"ltms":       ts.Truncate(time.Millisecond),
		"ltus":       ts,
		"id":         "123e4567-e89b-12d3-a456-426614174000",
		"idFixed":    "123e4567-e89b-12d3-a456-426614174000",
		"optTs":      ts,
		"fieldLevel": ts,
	}, v)
	assert.Equal(t, "2023-11-14T22:13:20.123456Z", v.(map[string]any)["tsus"].(time.Time).Format(time.RFC3339Nano))
	assert.Equal(t, cs.Schema{Name: "L", Type: cs.Object, Children: []cs.Schema{
		{Name: "dec", Type: cs.Decimal, Precision: 10, Scale: 2},
		{Name: "decFixed", Type: cs.Decimal, Precision: 18, Scale: 4},
		{Name: "decWide", Type: cs.BigDecimal},
		{Name: "day", Type: cs.Date},
		{Name: "tms", Type: cs.TimeOfDay, Unit: cs.Millis},
		{Name: "tus", Type: cs.TimeOfDay, Unit: cs.Micros},
		{Name: "tsms", Type: cs.Timestamp, Unit: cs.Millis, AdjustToUTC: true},
		{Name: "tsus", Type: cs.Timestamp, Unit: cs.Micros, AdjustToUTC: true},
		{Name: "tsns", Type: cs.Timestamp, Unit: cs.Nanos, AdjustToUTC: true},
		{Name: "ltms", Type: cs.Timestamp, Unit: cs.Millis},
		{Name: "ltus", Type: cs.Timestamp, Unit: cs.Micros},
		{Name: "id", Type: cs.UUID},
		{Name: "idFixed", Type: cs.UUID},
		{Name: "optTs", Type: cs.Timestamp, Unit: cs.Micros, AdjustToUTC: true, Optional: true},
		{Name: "fieldLevel", Type: cs.Timestamp, Unit: cs.Micros, AdjustToUTC: true},
	}}, *schema)
}

// Without preserve_logical_types, Connect's docs: "decimals become raw bytes
// and timestamps become plain integers".
func TestAvroLogicalTypesAsUnderlyingValues(t *testing.T) {
	body := avroEncode(t, avroLogicalSchema, avroLogicalWire())
	v, schema, err := avroCodecFor(t, avroLogicalSchema, AvroOptions{}).Decode(body)
	require.NoError(t, err)
	m := v.(map[string]any)
	assert.Equal(t, []byte{0xfe, 0x1d, 0xc0}, m["dec"]) // -123456 = -0x01e240, two's complement
	assert.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 5}, m["decFixed"])
	assert.Equal(t, dayNumber, m["day"])
	assert.Equal(t, int32(45_296_789), m["tms"])
	assert.Equal(t, int64(45_296_789_012), m["tus"])
	assert.Equal(t, tsMicros/1000, m["tsms"])
	assert.Equal(t, tsMicros, m["tsus"])
	assert.Equal(t, tsMicros*1000+789, m["tsns"])
	assert.Equal(t, tsMicros, m["ltus"])
	assert.Equal(t, "123e4567-e89b-12d3-a456-426614174000", m["id"])
	assert.Equal(t, uuidBytes, m["idFixed"])
	assert.Equal(t, map[string]any{"long": tsMicros}, m["optTs"])
	assert.Equal(t, tsMicros, m["fieldLevel"])
	types := map[string]cs.Type{}
	for _, c := range schema.Children {
		types[c.Name] = c.Type
	}
	assert.Equal(t, map[string]cs.Type{
		"dec": cs.ByteArray, "decFixed": cs.ByteArray, "decWide": cs.ByteArray, "day": cs.Int32,
		"tms": cs.Int32, "tus": cs.Int64, "tsms": cs.Int64, "tsus": cs.Int64, "tsns": cs.Int64,
		"ltms": cs.Int64, "ltus": cs.Int64, "id": cs.String, "idFixed": cs.ByteArray, "optTs": cs.Int64,
		"fieldLevel": cs.Int64,
	}, types)
}

func TestAvroDecimalText(t *testing.T) {
	for _, tc := range []struct {
		unscaled string
		scale    int
		want     string
	}{
		{"0", 2, "0.00"},
		{"1230", 2, "12.30"},
		{"-1", 3, "-0.001"},
		{"-128", 0, "-128"},
		{"127", 1, "12.7"},
		{"255", 2, "2.55"},
		{"-32768", 4, "-3.2768"},
		{"99999999999999999999999999999999999999", 38, "0.99999999999999999999999999999999999999"},
		{"-99999999999999999999999999999999999999", 10, "-9999999999999999999999999999.9999999999"},
	} {
		n, _ := new(big.Int).SetString(tc.unscaled, 10)
		// Two's complement, big-endian, minimal length, as producers write it.
		b := twosComplement(n)
		assert.Equal(t, json.Number(tc.want), decimalText(b, tc.scale), "%s scale %d (bytes %x)", tc.unscaled, tc.scale, b)
	}
	assert.Equal(t, json.Number("0.00"), decimalText(nil, 2), "no bytes is zero")
}

func twosComplement(n *big.Int) []byte {
	if n.Sign() >= 0 {
		b := n.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	size := len(n.Bytes()) + 1
	m := new(big.Int).Add(n, new(big.Int).Lsh(big.NewInt(1), uint(size*8)))
	b := m.FillBytes(make([]byte, size))
	for len(b) > 1 && b[0] == 0xff && b[1]&0x80 != 0 {
		b = b[1:]
	}
	return b
}

// A named type from a reference resolves, including a reference's own
// reference and one reached twice.
func TestAvroReferences(t *testing.T) {
	money := `{"type":"record","name":"Money","namespace":"common","fields":[{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},{"name":"cur","type":"common.Currency"}]}`
	currency := `{"type":"enum","name":"Currency","namespace":"common","symbols":["EUR","USD"]}`
	order := `{"type":"record","name":"Order","fields":[{"name":"total","type":"common.Money"},{"name":"cur","type":"common.Currency"},{"name":"tip","type":["null","common.Money"]}]}`
	currencyRef := Reference{Name: "common.Currency", Schema: Schema{ID: 1, Text: currency, Subject: "currency", Version: 1}}
	refs := []Reference{
		currencyRef,
		{Name: "common.Money", Schema: Schema{ID: 2, Text: money, Subject: "money", Version: 1, References: []Reference{currencyRef}}},
	}
	body := avroEncode(t, order, map[string]any{
		"total": map[string]any{"amount": "12.30", "cur": "EUR"},
		"cur":   "USD",
		"tip":   map[string]any{"common.Money": map[string]any{"amount": "1.05", "cur": "EUR"}},
	}, currency, money)
	v, schema, err := avroCodecFor(t, order, AvroOptions{PreserveLogicalTypes: true}, refs...).Decode(body)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{
		"total": map[string]any{"amount": json.Number("12.30"), "cur": "EUR"},
		"cur":   "USD",
		"tip":   map[string]any{"common.Money": map[string]any{"amount": json.Number("1.05"), "cur": "EUR"}},
	}, v)
	money9 := []cs.Schema{{Name: "amount", Type: cs.Decimal, Precision: 9, Scale: 2}, {Name: "cur", Type: cs.String}}
	assert.Equal(t, cs.Schema{Name: "Order", Type: cs.Object, Children: []cs.Schema{
		{Name: "total", Type: cs.Object, Children: money9},
		{Name: "cur", Type: cs.String},
		{Name: "tip", Type: cs.Object, Optional: true, Children: money9},
	}}, *schema)

	// Every option set parses the references the same way as the schema
	// (the parser refuses a cached type built with other conversions).
	for _, o := range []AvroOptions{{}, {RawUnions: true}, {PreserveLogicalTypes: true, TranslateKafkaConnectTypes: true}} {
		v, _, err := avroCodecFor(t, order, o, refs...).Decode(body)
		require.NoError(t, err, "%+v", o)
		assert.Equal(t, "USD", v.(map[string]any)["cur"])
	}

	_, err = NewCodec(Schema{ID: 9, Format: Avro, Text: order}, Options{})
	require.Error(t, err, "without its references the schema does not parse")
	assert.Contains(t, err.Error(), "schema 9")
}

func TestAvroKafkaConnectTypes(t *testing.T) {
	text := `{"type":"record","name":"Row","fields":[
	 {"name":"d","type":{"type":"int","connect.name":"io.debezium.time.Date"}},
	 {"name":"ts","type":{"type":"long","connect.name":"io.debezium.time.Timestamp"}},
	 {"name":"mts","type":{"type":"long","connect.name":"io.debezium.time.MicroTimestamp"}},
	 {"name":"nts","type":{"type":"long","connect.name":"io.debezium.time.NanoTimestamp"}},
	 {"name":"zts","type":{"type":"string","connect.name":"io.debezium.time.ZonedTimestamp"}},
	 {"name":"y","type":{"type":"int","connect.name":"io.debezium.time.Year"}},
	 {"name":"t","type":{"type":"int","connect.name":"io.debezium.time.Time"}},
	 {"name":"mt","type":{"type":"long","connect.name":"io.debezium.time.MicroTime"}},
	 {"name":"nt","type":{"type":"long","connect.name":"io.debezium.time.NanoTime"}},
	 {"name":"kd","type":{"type":"int","connect.name":"org.apache.kafka.connect.data.Date"}},
	 {"name":"kts","type":{"type":"long","connect.name":"org.apache.kafka.connect.data.Timestamp"}},
	 {"name":"kdec","type":{"type":"bytes","connect.name":"org.apache.kafka.connect.data.Decimal","connect.parameters":{"scale":"3","connect.decimal.precision":"12"}}},
	 {"name":"plain","type":"long"}
	]}`
	wire := map[string]any{
		"d": dayNumber, "ts": tsMicros / 1000, "mts": tsMicros, "nts": tsMicros*1000 + 7,
		"zts": "2023-11-14T23:13:20.123456789+01:00", "y": int32(2024), "t": int32(3_600_001),
		"mt": int64(3_600_000_001), "nt": int64(3_600_000_000_001), "kd": dayNumber, "kts": tsMicros / 1000,
		"kdec": []byte{0x30, 0x39}, "plain": int64(5),
	}
	body := avroEncode(t, text, wire)
	ts := time.UnixMicro(tsMicros).UTC()
	v, schema, err := avroCodecFor(t, text, AvroOptions{PreserveLogicalTypes: true, TranslateKafkaConnectTypes: true}).Decode(body)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{
		"d": time.Date(2023, 12, 9, 0, 0, 0, 0, time.UTC), "ts": ts.Truncate(time.Millisecond), "mts": ts,
		"nts": ts.Add(7), "zts": time.Date(2023, 11, 14, 22, 13, 20, 123456789, time.UTC),
		"y": time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), "t": time.Date(1970, 1, 1, 1, 0, 0, 1_000_000, time.UTC),
		"mt": time.Date(1970, 1, 1, 1, 0, 0, 1_000, time.UTC), "nt": time.Date(1970, 1, 1, 1, 0, 0, 1, time.UTC),
		"kd": time.Date(2023, 12, 9, 0, 0, 0, 0, time.UTC), "kts": ts.Truncate(time.Millisecond),
		"kdec": json.Number("12.345"), "plain": int64(5),
	}, v)
	assert.Equal(t, []cs.Schema{
		{Name: "d", Type: cs.Date},
		{Name: "ts", Type: cs.Timestamp, Unit: cs.Millis},
		{Name: "mts", Type: cs.Timestamp, Unit: cs.Micros},
		{Name: "nts", Type: cs.Timestamp, Unit: cs.Nanos},
		{Name: "zts", Type: cs.Timestamp, Unit: cs.Nanos, AdjustToUTC: true},
		{Name: "y", Type: cs.Date},
		{Name: "t", Type: cs.TimeOfDay, Unit: cs.Millis},
		{Name: "mt", Type: cs.TimeOfDay, Unit: cs.Micros},
		{Name: "nt", Type: cs.TimeOfDay, Unit: cs.Nanos},
		{Name: "kd", Type: cs.Date},
		{Name: "kts", Type: cs.Timestamp, Unit: cs.Millis, AdjustToUTC: true},
		{Name: "kdec", Type: cs.Decimal, Precision: 12, Scale: 3},
		{Name: "plain", Type: cs.Int64},
	}, schema.Children)

	// Connect: "Only valid if preserve_logical_types is true".
	v, schema, err = avroCodecFor(t, text, AvroOptions{TranslateKafkaConnectTypes: true}).Decode(body)
	require.NoError(t, err)
	assert.Equal(t, dayNumber, v.(map[string]any)["d"])
	assert.Equal(t, cs.Int32, schema.Children[0].Type)
	// Without the option the connect.name types are their Avro types.
	v, schema, err = avroCodecFor(t, text, AvroOptions{PreserveLogicalTypes: true}).Decode(body)
	require.NoError(t, err)
	assert.Equal(t, []byte{0x30, 0x39}, v.(map[string]any)["kdec"])
	assert.Equal(t, cs.ByteArray, schema.Children[11].Type)
}

func TestAvroRecursiveTypeIsAny(t *testing.T) {
	text := `{"type":"record","name":"Node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","Node"]}]}`
	body := avroEncode(t, text, map[string]any{"v": int32(1), "next": map[string]any{"Node": map[string]any{"v": int32(2), "next": nil}}})
	v, schema, err := avroCodecFor(t, text, AvroOptions{RawUnions: true}).Decode(body)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"v": int32(1), "next": map[string]any{"v": int32(2), "next": nil}}, v)
	assert.Equal(t, []cs.Schema{{Name: "v", Type: cs.Int32}, {Name: "next", Type: cs.Any, Optional: true}}, schema.Children,
		"the type within itself is ANY")
}

func TestAvroBadInput(t *testing.T) {
	text := `{"type":"record","name":"R","fields":[{"name":"s","type":"string"},{"name":"l","type":"long"}]}`
	c := avroCodecFor(t, text, AvroOptions{})
	body := avroEncode(t, text, map[string]any{"s": "abc", "l": int64(300)})

	_, _, err := c.Decode(body[:len(body)-1])
	require.Error(t, err)
	assert.Contains(t, err.Error(), "schema 7: decoding the Avro value")

	_, _, err = c.Decode(append(body, 0))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1 bytes left after the Avro value")

	_, err = NewCodec(Schema{ID: 3, Format: Avro, Text: `{"type":"record"`}, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "schema 3: parsing the Avro schema")

	// An empty schemaType is Avro, as the registry says.
	c, err = NewCodec(Schema{ID: 4, Text: `"string"`}, Options{})
	require.NoError(t, err)
	v, schema, err := c.Decode([]byte{6, 'a', 'b', 'c'})
	require.NoError(t, err)
	assert.Equal(t, "abc", v)
	assert.Equal(t, cs.String, schema.Type)
}

// The codec is shared by a processor's goroutines.
func TestAvroConcurrentDecode(t *testing.T) {
	body := avroEncode(t, avroLogicalSchema, avroLogicalWire())
	c := avroCodecFor(t, avroLogicalSchema, AvroOptions{PreserveLogicalTypes: true})
	done := make(chan error, 4)
	for range 4 {
		go func() {
			for range 200 {
				v, _, err := c.Decode(body)
				if err == nil && v.(map[string]any)["dec"] != json.Number("-1234.56") {
					err = assert.AnError
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		require.NoError(t, <-done)
	}
}

// The schema tree for the Avro fast path has the named types of the
// references expanded in place.
func TestAvroSchemaNodeExpandsReferences(t *testing.T) {
	money := `{"type":"record","name":"Money","namespace":"common","fields":[{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},{"name":"cur","type":"common.Currency"}]}`
	currency := `{"type":"enum","name":"Currency","namespace":"common","symbols":["EUR","USD"]}`
	order := `{"type":"record","name":"Order","fields":[{"name":"total","type":"common.Money"},{"name":"tip","type":["null","common.Money"]}]}`
	currencyRef := Reference{Name: "common.Currency", Schema: Schema{ID: 1, Text: currency, Subject: "currency", Version: 1}}
	codec, root, err := NewAvroCodec(Schema{ID: 3, Text: order, References: []Reference{
		currencyRef,
		{Name: "common.Money", Schema: Schema{ID: 2, Text: money, Subject: "money", Version: 1, References: []Reference{currencyRef}}},
	}}, AvroOptions{PreserveLogicalTypes: true, RawUnions: true})
	require.NoError(t, err)
	require.NotNil(t, codec)
	require.Len(t, root.Fields, 2)
	total := root.Fields[0].Type
	assert.Equal(t, "record", total.Type)
	require.Len(t, total.Fields, 2)
	assert.Equal(t, "decimal", total.Fields[0].Type.LogicalType)
	assert.Equal(t, "enum", total.Fields[1].Type.Type)
	assert.Equal(t, []string{"EUR", "USD"}, total.Fields[1].Type.Symbols)
	tip := root.Fields[1].Type
	require.Len(t, tip.Branches, 2)
	assert.Equal(t, "record", tip.Branches[1].Type, "a second use of a named type is expanded too")

	codec, root, err = NewAvroCodec(Schema{ID: 9, Text: order}, AvroOptions{})
	assert.ErrorContains(t, err, "schema 9")
	assert.Nil(t, codec)
	assert.Nil(t, root)
}

// The tree NewAvroCodec gives with its codec, from the parse with the
// codec's logical types, is the tree of a parse without them (what the
// Avro fast path matched before it shared the codec's parse): the custom
// types change how values decode, not the schema's shape.
func TestNewAvroCodecTreeIsThePlainParse(t *testing.T) {
	money := `{"type":"record","name":"Money","namespace":"common","fields":[{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2},"default":"\u0000"},{"name":"cur","type":"common.Currency","default":"EUR"}]}`
	currency := `{"type":"enum","name":"Currency","namespace":"common","symbols":["EUR","USD"]}`
	currencyRef := Reference{Name: "common.Currency", Schema: Schema{ID: 1, Text: currency}}
	withRefs := Schema{ID: 3, Text: `{"type":"record","name":"Order","fields":[{"name":"total","type":"common.Money"},{"name":"tip","type":["null","common.Money"],"default":null}]}`,
		References: []Reference{currencyRef, {Name: "common.Money", Schema: Schema{ID: 2, Text: money, References: []Reference{currencyRef}}}}}
	recursive := Schema{ID: 4, Text: `{"type":"record","name":"Node","fields":[{"name":"v","type":"long","default":0},{"name":"next","type":["null","Node"],"default":null}]}`}
	for _, s := range []Schema{{ID: 1, Text: avroPlainSchema}, {ID: 2, Text: avroLogicalSchema}, withRefs, recursive} {
		for _, o := range []AvroOptions{{}, {PreserveLogicalTypes: true, RawUnions: true}, {PreserveLogicalTypes: true, TranslateKafkaConnectTypes: true}} {
			_, tree, err := NewAvroCodec(s, o)
			require.NoError(t, err, "schema %d %+v", s.ID, o)
			plain, err := parseAvro(s, nil)
			require.NoError(t, err)
			assert.Equal(t, plain.Root().ExpandReferences(), tree, "schema %d %+v", s.ID, o)
		}
	}
}
