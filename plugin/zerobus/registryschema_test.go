package zerobus

import (
	"encoding/json"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cs "github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

const (
	srTable = "main.default.orders"
	srDLQ   = "main.default.orders_dlq"
	srYAML  = "catalog:\n  provision: true\n  warehouse_id: wh\n  schema_metadata: registry_schema\ndead_letter:\n  table: " + srDLQ + "\n"
)

// srMessage is a message as schema_registry_decode leaves one: the decoded
// value, and the registry schema with its id, subject and version in
// metadata.
func srMessage(v map[string]any, s cs.Schema, version, id int) *service.Message {
	m := service.NewMessage(nil)
	m.SetStructured(v)
	m.MetaSetMut("registry_schema", s.ToAny())
	m.MetaSetMut("schema_id", id)
	m.MetaSetMut("schema_subject", "orders-value")
	m.MetaSetMut("schema_version", version)
	return m
}

func srOrdersV1() cs.Schema {
	return cs.Schema{Name: "order", Type: cs.Object, Children: []cs.Schema{
		{Name: "id", Type: cs.Int64},
		{Name: "amount", Type: cs.Decimal, Precision: 12, Scale: 4},
		{Name: "placed", Type: cs.Timestamp, Unit: cs.Micros, AdjustToUTC: true},
		{Name: "local", Type: cs.Timestamp, Unit: cs.Micros},
		{Name: "day", Type: cs.Date},
		{Name: "at", Type: cs.TimeOfDay, Unit: cs.Micros},
		{Name: "raw", Type: cs.ByteArray},
		{Name: "ref", Type: cs.UUID},
		{Name: "kind", Type: cs.String}, // an Avro enum arrives as a string
		{Name: "note", Type: cs.Union, Children: []cs.Schema{{Type: cs.Null}, {Type: cs.String}}},
		{Name: "tags", Type: cs.Array, Children: []cs.Schema{{Type: cs.String}}},
		{Name: "attrs", Type: cs.Map, Children: []cs.Schema{{Type: cs.Int64}}},
		{Name: "addr", Type: cs.Object, Children: []cs.Schema{{Name: "city", Type: cs.String}, {Name: "zip", Type: cs.Int32, Optional: true}}},
		{Name: "qty", Type: cs.Int32},
		{Name: "ratio", Type: cs.Float32},
		{Name: "score", Type: cs.Float64},
		{Name: "ok", Type: cs.Boolean},
	}}
}

// srOrder is order i in the decoder's shapes: an exact decimal (a *big.Rat
// from the Avro decoder, or json.Number), times, a time.Duration time of
// day, bytes, a [16]byte uuid on fixed.
func srOrder(i int64) map[string]any {
	amount := any(json.Number("-12345678.0001"))
	if i%2 == 1 {
		amount = big.NewRat(123456780001, 10000) // 12345678.0001
	}
	return map[string]any{
		"id": i, "amount": amount,
		"placed": time.Date(2026, 3, 1, 12, 30, 45, 123456000, time.UTC),
		"local":  time.Date(2026, 3, 1, 23, 59, 59, 999999000, time.UTC),
		"day":    time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC),
		"at":     12*time.Hour + 30*time.Minute + 45*time.Second + 123456*time.Microsecond,
		"raw":    []byte{0, 1, 0xfe, 0xff},
		"ref":    [16]byte{0x7b, 0x2c, 0x2c, 0x9e, 0x0d, 0x3f, 0x4d, 0x8e, 0x9a, 0x37, 0x2a, 0x8d, 0x3c, 0x1e, 0x0f, 0x11},
		"kind":   "EXPRESS", "note": nil, "tags": []any{"a", "b"},
		"attrs": map[string]any{"k": int64(9007199254740993)},
		"addr":  map[string]any{"city": "Oslo", "zip": nil},
		"qty":   int32(3), "ratio": float32(0.5), "score": 0.1, "ok": true,
	}
}

// Against the emulator: messages carrying their registry schema create the
// table with the registry's column types, land exactly (decimal digits,
// timestamp microseconds, dates), a new schema version's field becomes a
// column before its rows land, and a schema the table cannot take goes to
// the dead-letter table naming field, subject, version and schema id.
func TestRegistrySchemaProvisionsAndEvolvesEmulated(t *testing.T) {
	e := startEmulated(t, srTable, srYAML)
	require.Empty(t, e.write(t, service.MessageBatch{srMessage(srOrder(1), srOrdersV1(), 1, 7), srMessage(srOrder(2), srOrdersV1(), 1, 7)}))

	tbl, ok := e.srv.Registry().Get(srTable)
	require.True(t, ok)
	types := map[string]string{}
	for _, c := range tbl.Columns {
		types[c.Name] = c.Type.Text()
		if !c.Nullable {
			types[c.Name] += " NOT NULL"
		}
	}
	want := map[string]string{
		"id": "bigint NOT NULL", "amount": "decimal(12,4) NOT NULL", "placed": "timestamp NOT NULL",
		"local": "timestamp_ntz NOT NULL", "day": "date NOT NULL", "at": "bigint NOT NULL", "raw": "binary NOT NULL",
		"ref": "string NOT NULL", "kind": "string NOT NULL", "note": "string", "tags": "array<string> NOT NULL",
		"attrs": "map<string,bigint> NOT NULL", "addr": "struct<city:string,zip:int> NOT NULL",
		"qty": "int NOT NULL", "ratio": "float NOT NULL", "score": "double NOT NULL", "ok": "boolean NOT NULL",
	}
	for name, w := range want {
		assert.Equal(t, w, types[name], "column %s", name)
	}

	rows := e.rows(t, srTable)
	require.Len(t, rows, 2)
	byID := map[string]map[string]any{}
	for _, r := range rows {
		byID[jsonText(t, r["id"])] = r
	}
	r1, r2 := byID["1"], byID["2"]
	require.NotNil(t, r1)
	require.NotNil(t, r2)
	t.Logf("row 1 as stored: %v", r1)
	assert.Equal(t, `"12345678.0001"`, jsonText(t, r1["amount"]), "a *big.Rat decimal, every digit")
	assert.Equal(t, `"-12345678.0001"`, jsonText(t, r2["amount"]), "a json.Number decimal, every digit")
	assert.Equal(t, `"2026-03-01T12:30:45.123456Z"`, jsonText(t, r1["placed"]))
	assert.Equal(t, `"2026-03-01T23:59:59.999999"`, jsonText(t, r1["local"]), "the local wall clock, no zone")
	assert.Equal(t, `"1999-12-31"`, jsonText(t, r1["day"]))
	assert.Equal(t, `45045123456`, jsonText(t, r1["at"]), "microseconds since midnight")
	assert.Equal(t, `"AAH+/w=="`, jsonText(t, r1["raw"]), "the bytes 00 01 fe ff")
	assert.Equal(t, `"7b2c2c9e-0d3f-4d8e-9a37-2a8d3c1e0f11"`, jsonText(t, r1["ref"]))
	assert.Equal(t, `{"city":"Oslo","zip":null}`, jsonText(t, r1["addr"]))
	assert.Equal(t, `{"k":9007199254740993}`, jsonText(t, r1["attrs"]))
	assert.Nil(t, r1["note"])

	// v2 adds a decimal and a local timestamp: the columns come first,
	// with the registry's types, and the v2 rows land in them.
	v2 := srOrdersV1()
	v2.Children = append(v2.Children,
		cs.Schema{Name: "discount", Type: cs.Union, Children: []cs.Schema{{Type: cs.Null}, {Type: cs.Decimal, Precision: 5, Scale: 2}}},
		cs.Schema{Name: "shipped", Type: cs.Timestamp, Unit: cs.Millis, AdjustToUTC: true, Optional: true})
	o3 := srOrder(3)
	o3["discount"], o3["shipped"] = json.Number("0.50"), "2026-03-02T08:00:00.001Z"
	require.Empty(t, e.write(t, service.MessageBatch{srMessage(o3, v2, 2, 8), srMessage(srOrder(4), srOrdersV1(), 1, 7)}))
	tbl, _ = e.srv.Registry().Get(srTable)
	disc, at := tbl.Column("discount")
	require.GreaterOrEqual(t, at, 0)
	assert.Equal(t, "decimal(5,2)", disc.Type.Text(), "the registry's type, not an inferred one")
	shipped, at := tbl.Column("shipped")
	require.GreaterOrEqual(t, at, 0)
	assert.Equal(t, "timestamp", shipped.Type.Text())
	rows = e.rows(t, srTable)
	require.Len(t, rows, 4)
	for _, r := range rows {
		switch jsonText(t, r["id"]) {
		case "3":
			assert.Equal(t, `"0.50"`, jsonText(t, r["discount"]))
			assert.Equal(t, `"2026-03-02T08:00:00.001Z"`, jsonText(t, r["shipped"]))
		default:
			assert.Nil(t, r["discount"])
		}
	}

	// v3 makes qty a string: the table cannot take it; its rows are dead
	// letters naming the field, subject, version and id; nothing is lost.
	v3 := srOrdersV1()
	v3.Children[13] = cs.Schema{Name: "qty", Type: cs.String}
	o5 := srOrder(5)
	o5["qty"] = "three"
	require.Empty(t, e.write(t, service.MessageBatch{srMessage(o5, v3, 3, 9), srMessage(srOrder(6), srOrdersV1(), 1, 7)}))
	assert.Len(t, e.rows(t, srTable), 5)
	dead := e.rows(t, srDLQ)
	require.Len(t, dead, 1)
	assert.Equal(t, "qty", dead[0]["column_name"])
	for _, w := range []string{`field "qty"`, `subject "orders-value" version 3 (schema id 9)`, `column "qty" is INT; the schema's STRING does not fit it`} {
		assert.Contains(t, dead[0]["error"], w)
	}
}

func jsonText(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// A plain zerobus output meeting registry-framed values says what they are
// and what to add, in the batch's error and in health, instead of "no
// column could be inferred".
func TestRegistryFramedValuesWithoutDecoderEmulated(t *testing.T) {
	e := startEmulated(t, srTable, "catalog:\n  provision: true\n  warehouse_id: wh\n")
	framed := func() *service.Message { return service.NewMessage([]byte{0, 0, 0, 0, 42, 0x02, 0x0a, 'h', 'i'}) }
	want := "values are Schema Registry framed (schema id 42): add a schema_registry_decode processor before the zerobus output"
	err := e.out.WriteBatch(t.Context(), service.MessageBatch{framed(), framed()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), want)
	assert.NotContains(t, err.Error(), "no column could be inferred")
	tables := e.out.health()
	require.Len(t, tables, 1)
	assert.Contains(t, jsonText(t, tables[0]), want)
}

// A message a processor failed (schema_registry_decode: an unknown schema
// id, a value not in the wire format) carries its error flag to the output:
// it is dead-lettered with the processor's error, never with the output's
// own "values are Schema Registry framed" advice, and never lands, even in
// the batch that creates the table. Without a dead-letter table it fails
// through the batch error with the same text.
func TestErroredMessagesAreDeadLetteredEmulated(t *testing.T) {
	e := startEmulated(t, srTable, srYAML)
	unknown := service.NewMessage([]byte{0, 0, 0, 0, 99, 0x02, 0x0a, 'h', 'i'})
	unknownErr := errors.New("schema_registry_decode: message 1: schema id 99 is not in the schema registry (error 40403: Schema 99 not found)")
	unknown.SetError(unknownErr)
	unframed := service.NewMessage([]byte(`{"id":77}`)) // it would fit the table
	unframedErr := errors.New("schema_registry_decode: message 2: value is not in the Schema Registry wire format (first byte 0x7b, not the magic byte 0x00: it looks like JSON)")
	unframed.SetError(unframedErr)
	require.Empty(t, e.write(t, service.MessageBatch{srMessage(srOrder(1), srOrdersV1(), 1, 7), unknown, unframed, srMessage(srOrder(4), srOrdersV1(), 1, 7)}))

	rows := e.rows(t, srTable)
	require.Len(t, rows, 2)
	for _, r := range rows {
		assert.Contains(t, []string{"1", "4"}, jsonText(t, r["id"]), "only the decoded messages land")
	}
	dead := e.rows(t, srDLQ)
	require.Len(t, dead, 2)
	byIndex := map[string]map[string]any{}
	for _, d := range dead {
		byIndex[jsonText(t, d["message_index"])] = d
	}
	require.Contains(t, byIndex, "1")
	require.Contains(t, byIndex, "2")
	assert.Equal(t, "failed in a processor: "+unknownErr.Error(), byIndex["1"]["error"])
	assert.Equal(t, "failed in a processor: "+unframedErr.Error(), byIndex["2"]["error"])
	assert.Equal(t, `{"id":77}`, byIndex["2"]["payload"], "the message as it reached the output")
	assert.Equal(t, srTable, byIndex["1"]["source_table"])
	for _, d := range dead {
		assert.NotContains(t, d["error"], "add a schema_registry_decode processor")
		assert.Empty(t, d["column_name"])
	}

	// No dead-letter table: the batch error carries the processor's error;
	// the good row lands.
	bare := startEmulated(t, "main.default.bare", "catalog:\n  provision: true\n  warehouse_id: wh\n  schema_metadata: registry_schema\n")
	failed := bare.write(t, service.MessageBatch{srMessage(srOrder(1), srOrdersV1(), 1, 7), unknown})
	require.Len(t, failed, 1)
	require.Contains(t, failed, 1)
	assert.Equal(t, "message 1: failed in a processor: "+unknownErr.Error(), failed[1].Error())
	assert.Len(t, bare.rows(t, "main.default.bare"), 1)
}
