package commonschema

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	bschema "github.com/redpanda-data/benthos/v4/public/schema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sample() Schema {
	return Schema{Name: "order", Type: Object, Children: []Schema{
		{Name: "id", Type: Int64},
		{Name: "amount", Type: Decimal, Precision: 10, Scale: 2},
		{Name: "placed", Type: Timestamp, Unit: Micros, AdjustToUTC: true},
		{Name: "local", Type: Timestamp, Unit: Millis},
		{Name: "day", Type: Date, Optional: true},
		{Name: "at", Type: TimeOfDay, Unit: Micros},
		{Name: "ref", Type: UUID},
		{Name: "tags", Type: Array, Children: []Schema{{Type: String}}},
		{Name: "attrs", Type: Map, Children: []Schema{{Type: Float64}}},
	}}
}

func TestRoundTripThroughJSON(t *testing.T) {
	s := sample()
	require.NoError(t, s.Validate())
	raw, err := json.Marshal(s.ToAny())
	require.NoError(t, err)
	var v any
	require.NoError(t, json.Unmarshal(raw, &v))
	got, err := Parse(v)
	require.NoError(t, err)
	assert.Equal(t, s, got)
	assert.Equal(t, s.Fingerprint(), got.Fingerprint())
}

func TestSerialisedKeys(t *testing.T) {
	s := sample()
	m := s.ToAny().(map[string]any)
	kids := m["children"].([]any)
	amount := kids[1].(map[string]any)
	assert.Equal(t, "DECIMAL", amount["type"])
	assert.Equal(t, int64(10), amount["precision"])
	assert.Equal(t, int64(2), amount["scale"])
	placed := kids[2].(map[string]any)
	assert.Equal(t, "MICROS", placed["unit"])
	assert.Equal(t, true, placed["adjust_to_utc"])
	day := kids[4].(map[string]any)
	assert.Equal(t, true, day["optional"])
	_, hasUnit := kids[0].(map[string]any)["unit"]
	assert.False(t, hasUnit)
}

// The fingerprint hashes the canonical text benthos writes: type number, name,
// optional flag, parameters, then each child in brackets.
func TestFingerprintCanonicalText(t *testing.T) {
	s := Schema{Name: "r", Type: Object, Children: []Schema{
		{Name: "d", Type: Decimal, Precision: 5, Scale: 1, Optional: true},
		{Name: "t", Type: Timestamp, Unit: Nanos},
	}}
	text := "T:8|N:r|O:0|C:2|[0:T:15|N:d|O:1|D:5:1|C:0|][1:T:13|N:t|O:0|TS:4:false|C:0|]"
	sum := sha256.Sum256([]byte(text))
	assert.Equal(t, hex.EncodeToString(sum[:]), s.Fingerprint())
	legacy := Schema{Name: "t", Type: Timestamp}
	sum = sha256.Sum256([]byte("T:13|N:t|O:0|C:0|"))
	assert.Equal(t, hex.EncodeToString(sum[:]), legacy.Fingerprint())
}

// benthos v4.60, which this binary links, reads the types it knows from the
// same form.
func TestOlderBenthosReadsLegacyTypes(t *testing.T) {
	s := Schema{Name: "r", Type: Object, Children: []Schema{
		{Name: "a", Type: Int32, Optional: true},
		{Name: "b", Type: Timestamp},
		{Name: "c", Type: Array, Children: []Schema{{Type: ByteArray}}},
	}}
	got, err := bschema.ParseFromAny(s.ToAny())
	require.NoError(t, err)
	assert.Equal(t, "r", got.Name)
	require.Len(t, got.Children, 3)
	assert.Equal(t, bschema.Int32, got.Children[0].Type)
	assert.True(t, got.Children[0].Optional)
	assert.Equal(t, bschema.Timestamp, got.Children[1].Type)
	assert.Equal(t, bschema.ByteArray, got.Children[2].Children[0].Type)
}

func TestParseErrorsNameThePath(t *testing.T) {
	for name, tc := range map[string]struct {
		v    any
		want string
	}{
		"decimal without scale": {map[string]any{"name": "r", "type": "OBJECT", "children": []any{
			map[string]any{"name": "amt", "type": "DECIMAL", "precision": 3}}}, "r.amt: field scale is missing"},
		"precision too wide": {map[string]any{"name": "amt", "type": "DECIMAL", "precision": 39.0, "scale": 0.0}, "amt: decimal precision 39"},
		"fractional scale":   {map[string]any{"name": "amt", "type": "DECIMAL", "precision": 9.0, "scale": 1.5}, "scale: 1.5 is not an int32"},
		"unit on a string":   {map[string]any{"name": "s", "type": "STRING", "unit": "MILLIS", "adjust_to_utc": true}, "s: unit and adjust_to_utc"},
		"time without unit":  {map[string]any{"name": "t", "type": "TIME_OF_DAY"}, "t: TIME_OF_DAY needs a unit"},
		"unknown type":       {map[string]any{"name": "x", "type": "INT128"}, `x: unknown type "INT128"`},
		"leaf with child":    {map[string]any{"name": "x", "type": "INT64", "children": []any{map[string]any{"type": "INT64"}}}, "x: INT64 is a leaf"},
		"not a map":          {[]any{}, "schema: expected an object"},
		"bad array element": {map[string]any{"name": "r", "type": "OBJECT", "children": []any{
			map[string]any{"name": "xs", "type": "ARRAY", "children": []any{map[string]any{"type": "DECIMAL", "precision": 2.0, "scale": 3.0}}}}}, "r.xs[0]: decimal scale 3"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tc.v)
			require.Error(t, err)
			assert.True(t, strings.Contains(err.Error(), tc.want), "error %q lacks %q", err, tc.want)
		})
	}
}

func TestEffectiveUnit(t *testing.T) {
	legacy := Schema{Type: Timestamp}
	u, utc := legacy.EffectiveUnit()
	assert.Equal(t, Millis, u)
	assert.True(t, utc)
	local := Schema{Type: Timestamp, Unit: Micros}
	u, utc = local.EffectiveUnit()
	assert.Equal(t, Micros, u)
	assert.False(t, utc)
}
