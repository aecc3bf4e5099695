package typemap

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cs "github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

// Every row of the published mapping (docs/schema-registry.md), exactly.
func TestFromCommonSchemaMapping(t *testing.T) {
	cases := []struct {
		in       cs.Schema
		text     string
		nullable bool
	}{
		{cs.Schema{Type: cs.Boolean}, "boolean", false},
		{cs.Schema{Type: cs.Int32}, "int", false},
		{cs.Schema{Type: cs.Int64, Optional: true}, "bigint", true},
		{cs.Schema{Type: cs.Float32}, "float", false},
		{cs.Schema{Type: cs.Float64}, "double", false},
		{cs.Schema{Type: cs.String}, "string", false},
		{cs.Schema{Type: cs.UUID}, "string", false},
		{cs.Schema{Type: cs.ByteArray}, "binary", false},
		{cs.Schema{Type: cs.Date}, "date", false},
		{cs.Schema{Type: cs.Decimal, Precision: 38, Scale: 9}, "decimal(38,9)", false},
		{cs.Schema{Type: cs.Decimal, Precision: 5, Scale: 0}, "decimal(5,0)", false},
		{cs.Schema{Type: cs.Timestamp, Unit: cs.Micros, AdjustToUTC: true}, "timestamp", false},
		{cs.Schema{Type: cs.Timestamp, Unit: cs.Millis, AdjustToUTC: true}, "timestamp", false},
		{cs.Schema{Type: cs.Timestamp}, "timestamp", false}, // legacy form: millis in UTC
		{cs.Schema{Type: cs.Timestamp, Unit: cs.Micros}, "timestamp_ntz", false},
		{cs.Schema{Type: cs.TimeOfDay, Unit: cs.Micros}, "bigint", false},
		{cs.Schema{Type: cs.Any}, "variant", true},
		{cs.Schema{Type: cs.Union, Children: []cs.Schema{{Type: cs.Null}, {Type: cs.String}}}, "string", true},
		{cs.Schema{Type: cs.Union, Children: []cs.Schema{{Type: cs.Int64}, {Type: cs.Null}}}, "bigint", true},
		{cs.Schema{Type: cs.Union, Children: []cs.Schema{{Type: cs.String}, {Type: cs.UUID}}}, "string", false},
		{cs.Schema{Type: cs.Array, Children: []cs.Schema{{Type: cs.Decimal, Precision: 4, Scale: 2}}}, "array<decimal(4,2)>", false},
		{cs.Schema{Type: cs.Map, Children: []cs.Schema{{Type: cs.Timestamp, Unit: cs.Micros}}}, "map<string,timestamp_ntz>", false},
		{cs.Schema{Type: cs.Object, Children: []cs.Schema{
			{Name: "a-b", Type: cs.Int32},
			{Name: "c", Type: cs.Union, Children: []cs.Schema{{Type: cs.Null}, {Type: cs.Date}}},
			{Name: "n", Type: cs.Null},
		}}, "struct<a_b:int,c:date>", false},
	}
	for _, c := range cases {
		got, nullable, err := FromCommonSchema(&c.in)
		require.NoError(t, err, "%+v", c.in)
		assert.Equal(t, c.text, got.Text(), "%+v", c.in)
		assert.Equal(t, c.nullable, nullable, "%+v", c.in)
	}
	// Struct members keep their nullability.
	st, _, err := FromCommonSchema(&cs.Schema{Type: cs.Object, Children: []cs.Schema{{Name: "r", Type: cs.Int64}, {Name: "o", Type: cs.Int64, Optional: true}}})
	require.NoError(t, err)
	assert.False(t, st.Fields[0].Nullable)
	assert.True(t, st.Fields[1].Nullable)
}

func TestFromCommonSchemaRefusals(t *testing.T) {
	cases := []struct {
		in   cs.Schema
		want string
	}{
		{cs.Schema{Name: "v", Type: cs.Union, Children: []cs.Schema{{Type: cs.Null}, {Type: cs.Int64}, {Type: cs.String}}}, "v: a union of INT64 and STRING: no column type holds both"},
		{cs.Schema{Name: "b", Type: cs.BigDecimal}, "b: BIG_DECIMAL (an unbounded decimal) has no column type"},
		{cs.Schema{Name: "r", Type: cs.Object}, "r: a record without fields"},
		{cs.Schema{Name: "aa", Type: cs.Array, Children: []cs.Schema{{Type: cs.Array, Children: []cs.Schema{{Type: cs.Int32}}}}}, "aa: array<array<int>> is not a type the Zerobus service writes"},
		{cs.Schema{Name: "mm", Type: cs.Map, Children: []cs.Schema{{Type: cs.Object, Children: []cs.Schema{{Name: "x", Type: cs.Int32}}}}}, "mm: map<string,struct<x:int>> is not a type the Zerobus service writes"},
		{cs.Schema{Name: "s", Type: cs.Object, Children: []cs.Schema{{Name: "u", Type: cs.Union, Children: []cs.Schema{{Type: cs.Boolean}, {Type: cs.Float64}}}}}, "s.u: a union of BOOLEAN and FLOAT64"},
	}
	for _, c := range cases {
		_, _, err := FromCommonSchema(&c.in)
		require.Error(t, err, "%+v", c.in)
		assert.Contains(t, err.Error(), c.want)
	}
	deep := cs.Schema{Name: "leaf", Type: cs.Int32}
	for range MaxNestingDepth + 1 {
		deep = cs.Schema{Name: "r", Type: cs.Object, Children: []cs.Schema{deep}}
	}
	_, _, err := FromCommonSchema(&deep)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nested 101 levels deep, more than the 100 the Zerobus service writes")
	deep = deep.Children[0]
	_, _, err = FromCommonSchema(&deep)
	require.NoError(t, err, "100 levels are written")

	_, nullable, err := FromCommonSchema(&cs.Schema{Name: "z", Type: cs.Null})
	assert.True(t, errors.Is(err, ErrNullOnly))
	assert.True(t, nullable)
}
