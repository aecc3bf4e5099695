package registry

import (
	"encoding/json"
	"math/big"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cs "github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

const jsonAddress = `{"$schema":"http://json-schema.org/draft-07/schema#","title":"Address","type":"object",
 "properties":{"city":{"type":"string"},"zip":{"type":"string"}},"required":["city"]}`

const jsonOrder = `{"$schema":"http://json-schema.org/draft-07/schema#","title":"Order","type":"object",
 "properties":{
  "id":{"type":"integer"},
  "amount":{"type":"number"},
  "paid":{"type":"boolean"},
  "note":{"type":["null","string"]},
  "placed":{"type":"string","format":"date-time"},
  "day":{"type":"string","format":"date"},
  "ref":{"type":"string","format":"uuid"},
  "tags":{"type":"array","items":{"type":"string"}},
  "attrs":{"type":"object","additionalProperties":{"type":"integer"}},
  "ship":{"$ref":"address.json"},
  "bill":{"oneOf":[{"type":"null"},{"$ref":"#/definitions/Local"}]},
  "either":{"anyOf":[{"type":"string"},{"type":"integer"}]},
  "anything":{}
 },
 "required":["id","amount","placed"],
 "definitions":{"Local":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}
}`

var jsonRefs = []Reference{{Name: "address.json", Schema: Schema{ID: 1, Format: JSONSchema, Text: jsonAddress, Subject: "address", Version: 1}}}

func jsonCodecFor(t *testing.T, o JSONOptions) Codec {
	t.Helper()
	c, err := NewCodec(Schema{ID: 21, Format: JSONSchema, Text: jsonOrder, References: jsonRefs}, Options{JSON: o})
	require.NoError(t, err)
	return c
}

func TestJSONSchemaDecode(t *testing.T) {
	body := `{"id":9007199254740993,"amount":12.30,"paid":true,"note":null,"placed":"2023-11-14T22:13:20.123456Z",
	 "day":"2023-12-09","ref":"123e4567-e89b-12d3-a456-426614174000","tags":["a"],"attrs":{"x":1},
	 "ship":{"city":"Paris"},"bill":{"n":2},"either":3,"anything":[1,{"a":null}]}`
	v, schema, err := jsonCodecFor(t, JSONOptions{}).Decode([]byte(body))
	require.NoError(t, err)
	assert.Equal(t, map[string]any{
		"id": json.Number("9007199254740993"), "amount": json.Number("12.30"), "paid": true, "note": nil,
		"placed": "2023-11-14T22:13:20.123456Z", "day": "2023-12-09", "ref": "123e4567-e89b-12d3-a456-426614174000",
		"tags": []any{"a"}, "attrs": map[string]any{"x": json.Number("1")}, "ship": map[string]any{"city": "Paris"},
		"bill": map[string]any{"n": json.Number("2")}, "either": json.Number("3"),
		"anything": []any{json.Number("1"), map[string]any{"a": nil}},
	}, v)
	assert.Equal(t, cs.Schema{Name: "Order", Type: cs.Object, Children: []cs.Schema{
		{Name: "id", Type: cs.Int64},
		{Name: "amount", Type: cs.Float64},
		{Name: "paid", Type: cs.Boolean, Optional: true},
		{Name: "note", Type: cs.String, Optional: true},
		{Name: "placed", Type: cs.Timestamp, Unit: cs.Micros, AdjustToUTC: true},
		{Name: "day", Type: cs.Date, Optional: true},
		{Name: "ref", Type: cs.UUID, Optional: true},
		{Name: "tags", Type: cs.Array, Optional: true, Children: []cs.Schema{{Type: cs.String}}},
		{Name: "attrs", Type: cs.Map, Optional: true, Children: []cs.Schema{{Type: cs.Int64}}},
		{Name: "ship", Type: cs.Object, Optional: true, Children: []cs.Schema{
			{Name: "city", Type: cs.String}, {Name: "zip", Type: cs.String, Optional: true},
		}},
		{Name: "bill", Type: cs.Object, Optional: true, Children: []cs.Schema{{Name: "n", Type: cs.Int64}}},
		{Name: "either", Type: cs.Union, Optional: true, Children: []cs.Schema{{Name: "string", Type: cs.String}, {Name: "integer", Type: cs.Int64}}},
		{Name: "anything", Type: cs.Any, Optional: true},
	}}, *schema)
}

func TestJSONSchemaValidates(t *testing.T) {
	c := jsonCodecFor(t, JSONOptions{})
	for _, tc := range []struct{ body, want string }{
		{`{"id":"12","amount":1,"placed":"2023-11-14T22:13:20Z"}`, "id: Invalid type. Expected: integer, given: string"},
		{`{"amount":1,"placed":"2023-11-14T22:13:20Z"}`, "id is required"},
		{`{"id":1,"amount":1,"placed":"2023-11-14T22:13:20Z","ship":{"zip":"1"}}`, "ship: city is required"},
		{`{"id":1,"amount":1,"placed":"yesterday"}`, "placed: Does not match format 'date-time'"},
		{`{"id":1,"amount":1,"placed":"2023-11-14T22:13:20Z","bill":{"n":"x"}}`, "bill"},
	} {
		_, _, err := c.Decode([]byte(tc.body))
		require.Error(t, err, tc.body)
		assert.Contains(t, err.Error(), "schema 21: the value does not match the JSON Schema")
		assert.Contains(t, err.Error(), tc.want, tc.body)
	}
	_, _, err := c.Decode([]byte(`{"id":1`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "schema 21: reading the JSON value")
	_, _, err = c.Decode([]byte(`{"id":1,"amount":1,"placed":"2023-11-14T22:13:20Z"} {}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "text after the JSON value")
}

func TestJSONSchemaCoerceData(t *testing.T) {
	body := `{"id":" 12 ","amount":"1.50","paid":"true","note":7,"placed":"2023-11-14T22:13:20Z",
	 "tags":[1,true],"attrs":{"x":"3"},"ship":{"city":"Paris","zip":75001},"bill":{"n":"2"},"either":"4"}`
	_, _, err := jsonCodecFor(t, JSONOptions{}).Decode([]byte(body))
	require.Error(t, err, "without coerce_data the strings are refused")

	v, _, err := jsonCodecFor(t, JSONOptions{CoerceData: true}).Decode([]byte(body))
	require.NoError(t, err)
	assert.Equal(t, map[string]any{
		"id": json.Number("12"), "amount": json.Number("1.50"), "paid": true, "note": "7",
		"placed": "2023-11-14T22:13:20Z", "tags": []any{"1", "true"}, "attrs": map[string]any{"x": json.Number("3")},
		"ship": map[string]any{"city": "Paris", "zip": "75001"}, "bill": map[string]any{"n": json.Number("2")},
		"either": "4", // anyOf: not coerced, and valid as a string
	}, v)

	_, _, err = jsonCodecFor(t, JSONOptions{CoerceData: true}).Decode([]byte(`{"id":"1.5","amount":1,"placed":"2023-11-14T22:13:20Z"}`))
	require.Error(t, err, "1.5 is not an integer: left as is, then refused")
	assert.Contains(t, err.Error(), "id: Invalid type")

	// Integer text that is no JSON number (a sign, a leading zero) is left
	// a string, then refused: the value goes on to the output as is.
	for _, id := range []string{"+5", "007"} {
		_, _, err = jsonCodecFor(t, JSONOptions{CoerceData: true}).Decode([]byte(`{"id":"` + id + `","amount":1,"placed":"2023-11-14T22:13:20Z"}`))
		require.Error(t, err, id)
		assert.Contains(t, err.Error(), "id: Invalid type", id)
	}
}

func TestJSONSchemaBadSchemas(t *testing.T) {
	_, err := NewCodec(Schema{ID: 22, Format: JSONSchema, Text: jsonOrder}, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `schema 22: $ref "address.json": no reference of the schema is named "address.json"`)

	_, err = NewCodec(Schema{ID: 23, Format: JSONSchema, Text: `{"properties":{"a":{"$ref":"#/definitions/Nope"}}}`}, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `$ref "#/definitions/Nope"`)

	_, err = NewCodec(Schema{ID: 24, Format: JSONSchema, Text: `{"type":`}, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "schema 24: reading the JSON Schema")

	// A schema that contains itself: the inner occurrence is ANY.
	c, err := NewCodec(Schema{ID: 25, Format: JSONSchema, Text: `{"$ref":"#/definitions/Node","definitions":{"Node":{"type":"object",
	 "properties":{"v":{"type":"integer"},"next":{"$ref":"#/definitions/Node"}}}}}`}, Options{})
	require.NoError(t, err)
	v, schema, err := c.Decode([]byte(`{"v":1,"next":{"v":2}}`))
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"v": json.Number("1"), "next": map[string]any{"v": json.Number("2")}}, v)
	assert.Equal(t, []cs.Schema{{Name: "v", Type: cs.Int64, Optional: true}, {Name: "next", Type: cs.Any, Optional: true}}, schema.Children)
}

// A reference named by a URL resolves from the schema's $id, as $ref
// resolution says.
func TestJSONSchemaRefRelativeToID(t *testing.T) {
	addr := `{"$id":"https://example.com/schemas/address.json","type":"object","properties":{"city":{"type":"string"}}}`
	main := `{"$id":"https://example.com/schemas/order.json","type":"object","properties":{"ship":{"$ref":"address.json"}}}`
	c, err := NewCodec(Schema{ID: 26, Format: JSONSchema, Text: main, References: []Reference{
		{Name: "https://example.com/schemas/address.json", Schema: Schema{Text: addr}},
	}}, Options{})
	require.NoError(t, err)
	_, schema, err := c.Decode([]byte(`{"ship":{"city":"x"}}`))
	require.NoError(t, err)
	assert.Equal(t, cs.Object, schema.Children[0].Type)
	assert.Equal(t, "city", schema.Children[0].Children[0].Name)
	_, _, err = c.Decode([]byte(`{"ship":{"city":1}}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ship.city")
}

// Draft 2020-12, which the registry also takes: $defs and anyOf with null.
func TestJSONSchemaDraft2020(t *testing.T) {
	text := `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
	 "properties":{"m":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/Money"}]},"n":{"type":"integer"}},
	 "$defs":{"Money":{"type":"object","properties":{"units":{"type":"integer"}},"required":["units"]}}}`
	c, err := NewCodec(Schema{ID: 27, Format: JSONSchema, Text: text}, Options{})
	require.NoError(t, err)
	v, schema, err := c.Decode([]byte(`{"m":{"units":5},"n":1}`))
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"m": map[string]any{"units": json.Number("5")}, "n": json.Number("1")}, v)
	assert.Equal(t, []cs.Schema{
		{Name: "m", Type: cs.Object, Optional: true, Children: []cs.Schema{{Name: "units", Type: cs.Int64}}},
		{Name: "n", Type: cs.Int64, Optional: true},
	}, schema.Children)
	_, _, err = c.Decode([]byte(`{"m":{"units":"x"}}`))
	require.Error(t, err)
	_, _, err = c.Decode([]byte(`{"m":null}`))
	require.NoError(t, err)

	// A schema of a scalar: the value is the scalar.
	c, err = NewCodec(Schema{ID: 28, Format: JSONSchema, Text: `{"type":"string","format":"uuid"}`}, Options{})
	require.NoError(t, err)
	v, schema, err = c.Decode([]byte(`"123e4567-e89b-12d3-a456-426614174000"`))
	require.NoError(t, err)
	assert.Equal(t, "123e4567-e89b-12d3-a456-426614174000", v)
	assert.Equal(t, cs.UUID, schema.Type)
}

// json.coerce_data reads each schema's allowed types once, when the schema
// is parsed: a value whose fields already have their types is walked
// without allocating (it made a type set per schema node per value), and a
// type list still allows each type it names.
func TestJSONCoerceTypesReadOnce(t *testing.T) {
	docs := newJSDocs()
	main, err := docs.add("", `{"type":"object","properties":{
	 "id":{"type":"integer"},"note":{"type":["null","string"]},"n":{"type":["null","integer"]},
	 "tags":{"type":"array","items":{"type":"string"}},"in":{"type":"object","properties":{"ok":{"type":"boolean"}}}}}`)
	require.NoError(t, err)
	c := jsonCoercer{docs: docs}
	v := map[string]any{"id": json.Number("1"), "note": "x", "n": json.Number("2"),
		"tags": []any{"a", "b"}, "in": map[string]any{"ok": true}}
	assert.Zero(t, testing.AllocsPerRun(100, func() { c.value(main, main.root, v, 0) }))

	got := c.value(main, main.root, map[string]any{"id": "5", "note": json.Number("7"), "n": " 8 ", "tags": []any{true}, "in": map[string]any{"ok": "false"}}, 0)
	assert.Equal(t, map[string]any{"id": json.Number("5"), "note": "7", "n": json.Number("8"),
		"tags": []any{"true"}, "in": map[string]any{"ok": false}}, got)
}

// isInteger answers as big.Int's base-10 reading does.
func TestJSONIsInteger(t *testing.T) {
	for _, s := range []string{"0", "7", "-12", "+5", "007", "123456789012345678901234567890", "1.5", "1e3", "", "-", "+", "1_000", " 1", "0x10", "--1", "١"} {
		_, want := new(big.Int).SetString(s, 10)
		assert.Equal(t, want, isInteger(json.Number(s)), "%q", s)
	}
}
