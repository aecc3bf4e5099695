package arrowconv

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestToJSON(t *testing.T) {
	type point struct {
		X int    `json:"x"`
		Y string `json:"y,omitempty"`
	}
	var nilMap map[string]int
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"null", nil, `null`},
		{"sorted keys, nested", map[string]any{"b": 1, "a": map[string]any{"z": true, "c": nil}, "A": []any{}},
			`{"A":[],"a":{"c":null,"z":true},"b":1}`},
		{"no HTML escaping", "<a & b>", `"<a & b>"`},
		{"escapes", "q\"\\\n\t\x01\u2028é", `"q\"\\\n\t\u0001\u2028é"`},
		{"invalid utf8 replaced", "a\xffb", `"a\ufffdb"`},
		{"json.Number kept exact", json.Number("9007199254740993"), `9007199254740993`},
		{"int64", int64(-42), `-42`},
		{"uint64", uint64(math.MaxUint64), `18446744073709551615`},
		{"float like encoding/json", []any{1.0, 0.1, 1e21, 1e-7, 123456789.0}, `[1,0.1,1e+21,1e-7,123456789]`},
		{"float32", float32(0.1), `0.1`},
		{"time", time.Date(2024, 1, 2, 3, 4, 5, 600, time.FixedZone("", 3600)), `"2024-01-02T03:04:05.0000006+01:00"`},
		{"bytes base64", []byte{0, 255}, `"AP8="`},
		{"other types via encoding/json", point{X: 1}, `{"x":1}`},
		{"typed map sorted", map[string]int{"b": 2, "a": 1}, `{"a":1,"b":2}`},
		{"nil typed map", nilMap, `null`},
		{"nil pointer", (*point)(nil), `null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ToJSON(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(got))
			assert.True(t, json.Valid(got))
		})
	}
}

func TestToJSONErrors(t *testing.T) {
	for _, v := range []any{math.NaN(), math.Inf(1), json.Number("1x"), []any{map[string]any{"a": math.Inf(-1)}}, make(chan int)} {
		_, err := ToJSON(v)
		assert.Error(t, err, "%#v", v)
	}
}

// TestToJSONAgreesWithEncodingJSON: for the generic values JSON decoding
// produces, ToJSON is encoding/json without HTML escaping.
func TestToJSONAgreesWithEncodingJSON(t *testing.T) {
	docs := []string{
		`{"z":[1,2.5,-0.001,1e300,"x"],"a":{"k":null,"j":false},"m":"<tag>&"}`,
		`[{"b":1,"a":2},[],{},"\u00e9\n",12345678901234567890]`,
		`"just a string"`,
	}
	for _, doc := range docs {
		var v any
		require.NoError(t, json.Unmarshal([]byte(doc), &v))
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		require.NoError(t, enc.Encode(v))
		got, err := ToJSON(v)
		require.NoError(t, err)
		assert.Equal(t, string(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), string(got))
	}
}

// TestNestedToStringMatchesToJSON: the reconciliation of raw JSON and ToJSON
// of the same value are byte-identical, so the manual and automatic paths
// agree.
func TestNestedToStringMatchesToJSON(t *testing.T) {
	c := mustConverter(t, "s STRING", Options{NestedToString: true})
	doc := `{"b": [1, 2.50, "\u0041\u00e9"], "a": {"y": null, "x": 1e2}}`
	res := convertJSON(t, c, `{"s": `+doc+`}`)
	require.Empty(t, res.RowErrors)
	dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v))
	want, err := ToJSON(v)
	require.NoError(t, err)
	assert.Equal(t, string(want), cell(t, res.Record, "s", 0))
	assert.Equal(t, `{"a":{"x":1e2,"y":null},"b":[1,2.50,"Aé"]}`, string(want))
}
