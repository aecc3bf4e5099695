package zerobusreplay

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// oracleBodies is the body of every row of rec as the input wrote it before
// nested values were written straight into the body: the body columns in
// name order, each through oracleAppendValue. A row the old conversion
// refused has a nil body and its error.
func oracleBodies(rec arrow.RecordBatch) ([][]byte, []error) {
	c := newRowConverter(rec.Schema())
	n := int(rec.NumRows())
	bodies, errs := make([][]byte, n), make([]error, n)
	for i := range n {
		buf := []byte{'{'}
		var err error
		for _, f := range c.body {
			buf = append(buf, f.key...)
			if buf, err = oracleAppendValue(buf, rec.Column(f.index), i); err != nil {
				errs[i] = fmt.Errorf("column %s: %w", f.name, err)
				break
			}
		}
		if err == nil {
			bodies[i] = append(buf, '}')
		}
	}
	return bodies, errs
}

// newBodies is the same through the converter the input uses, one row at a
// time (a batch fails whole at its first bad row).
func newBodies(rec arrow.RecordBatch) ([][]byte, []error) {
	c := newRowConverter(rec.Schema())
	n := int(rec.NumRows())
	bodies, errs := make([][]byte, n), make([]error, n)
	for i := range n {
		row := rec.NewSlice(int64(i), int64(i+1))
		batch, err := c.messages(row)
		row.Release()
		if err != nil {
			errs[i] = err
			continue
		}
		bodies[i], _ = batch[0].AsBytes()
	}
	return bodies, errs
}

// diffBodies checks that the new writer gives, row by row, the bytes the
// old conversion gave, and fails the rows the old one failed with the same
// message.
func diffBodies(t *testing.T, rec arrow.RecordBatch) (rows, failed int) {
	t.Helper()
	want, wantErr := oracleBodies(rec)
	got, gotErr := newBodies(rec)
	// The whole batch at once writes the same bytes as row by row.
	all, allErr := newRowConverter(rec.Schema()).messages(rec)
	for i := range want {
		if wantErr[i] != nil {
			failed++
			if !assert.Error(t, gotErr[i], "row %d: old conversion failed with %v", i, wantErr[i]) {
				continue
			}
			assert.Equal(t, "row 0: "+wantErr[i].Error(), gotErr[i].Error(), "row %d error", i)
			continue
		}
		if !assert.NoError(t, gotErr[i], "row %d; old body %s", i, want[i]) {
			continue
		}
		if !assert.Equal(t, string(want[i]), string(got[i]), "row %d of schema %s", i, rec.Schema()) {
			return rows, failed
		}
		rows++
	}
	if failed == 0 {
		require.NoError(t, allErr)
		for i, m := range all {
			b, _ := m.AsBytes()
			assert.Equal(t, string(want[i]), string(b), "row %d of the whole batch", i)
		}
	} else {
		assert.Error(t, allErr, "the batch has a bad row")
	}
	return rows, failed
}

// Many random schemas of nested columns (structs, string- and
// other-keyed maps, lists, large, fixed-size and view lists, nested inside
// each other, over every scalar type the input writes, VARIANT included),
// with nulls at every level and empty maps and lists: every body is the
// old conversion's byte for byte.
func TestNestedBodiesMatchTheOldConversion(t *testing.T) {
	rows := 0
	for seed := range uint64(300) {
		r := newRand(seed)
		schema := randomSchema(r, 1+r.IntN(4), 1+r.IntN(4))
		rec := randomRecord(r, schema, 40, fillOptions{nullPct: []int{0, 10, 40}[seed%3], maxLen: 4})
		n, failed := diffBodies(t, rec)
		if failed > 0 {
			_, errs := oracleBodies(rec)
			t.Fatalf("seed %d: no value is out of range without specials, yet the old conversion failed: %v", seed, errs)
		}
		rec.Release()
		rows += n
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
	}
	t.Logf("%d rows compared", rows)
}

// With NaN and infinite floats, timestamps outside years 0–9999 and
// repeated map keys, the new writer keeps the old one's output (the last
// value of a repeated key) and fails exactly the rows the old one failed,
// with the same message.
func TestNestedBodiesMatchTheOldConversionOnBadValues(t *testing.T) {
	rows, failed := 0, 0
	for seed := range uint64(300) {
		r := newRand(1000 + seed)
		schema := randomSchema(r, 1+r.IntN(3), 1+r.IntN(4))
		rec := randomRecord(r, schema, 40, fillOptions{nullPct: 10, maxLen: 5, specials: true})
		n, f := diffBodies(t, rec)
		rec.Release()
		rows, failed = rows+n, failed+f
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
	}
	assert.Positive(t, failed, "some rows carry a bad value")
	t.Logf("%d rows compared, %d refused by both", rows, failed)
}

// Nested values from JSON with shapes chosen by hand: a struct in a list in
// a map, nulls at each level, empty containers, a repeated map key, struct
// fields out of name order, and a map with non-string keys.
func TestNestedBodiesHandPicked(t *testing.T) {
	inner := arrow.StructOf(
		arrow.Field{Name: "z", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		arrow.Field{Name: "a", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "m", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.ListOf(inner)), Nullable: true},
		{Name: "k", Type: arrow.MapOf(arrow.PrimitiveTypes.Int32, inner), Nullable: true},
	}, nil)
	rows := `[
{"m":[{"key":"b","value":[{"z":1,"a":["x",null]},null,{"z":null,"a":null}]},{"key":"a","value":[]},{"key":"b","value":null}],"k":[{"key":2,"value":{"z":3,"a":[]}},{"key":1,"value":null}]},
{"m":[],"k":[]},
{"m":null,"k":null},
{"m":[{"key":"","value":null},{"key":"\u00e9","value":[{"z":-1,"a":[""]}]}],"k":[{"key":0,"value":{"z":null,"a":null}}]}
]`
	rec, _, err := array.RecordFromJSON(memory.NewGoAllocator(), schema, strings.NewReader(rows))
	require.NoError(t, err)
	defer rec.Release()
	n, failed := diffBodies(t, rec)
	assert.Equal(t, 4, n)
	assert.Zero(t, failed)
	bodies, _ := newBodies(rec)
	assert.Equal(t, `{"k":[{"key":2,"value":{"a":[],"z":3}},{"key":1,"value":null}],"m":{"a":[],"b":null}}`, string(bodies[0]))
	assert.Equal(t, `{"k":[],"m":{}}`, string(bodies[1]))
	assert.Equal(t, `{"k":null,"m":null}`, string(bodies[2]))
}

// Struct fields of one name: the last one's value is written, as the old
// map[string]any kept it.
func TestNestedBodiesRepeatedStructField(t *testing.T) {
	st := arrow.StructOf(
		arrow.Field{Name: "b", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true},
	)
	schema := arrow.NewSchema([]arrow.Field{{Name: "s", Type: st, Nullable: true}}, nil)
	b := array.NewStructBuilder(memory.NewGoAllocator(), st)
	defer b.Release()
	b.Append(true)
	b.FieldBuilder(0).(*array.Int64Builder).Append(1)
	b.FieldBuilder(1).(*array.Int64Builder).Append(2)
	b.FieldBuilder(2).(*array.StringBuilder).Append("last")
	col := b.NewStructArray()
	defer col.Release()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, 1)
	defer rec.Release()
	n, _ := diffBodies(t, rec)
	assert.Equal(t, 1, n)
	bodies, _ := newBodies(rec)
	assert.Equal(t, `{"s":{"a":2,"b":"last"}}`, string(bodies[0]))
}

// Lists nested past the serialiser's depth limit fail as they did; one
// level less is written.
func TestNestedBodiesDepthLimit(t *testing.T) {
	for _, levels := range []int{maxJSONDepth, maxJSONDepth + 1} {
		var dt arrow.DataType = arrow.PrimitiveTypes.Int64
		for range levels {
			dt = arrow.ListOf(dt)
		}
		schema := arrow.NewSchema([]arrow.Field{{Name: "deep", Type: dt, Nullable: true}}, nil)
		doc := `[{"deep":` + strings.Repeat("[", levels) + "7" + strings.Repeat("]", levels) + "}]"
		rec, _, err := array.RecordFromJSON(memory.NewGoAllocator(), schema, strings.NewReader(doc))
		require.NoError(t, err)
		_, failed := diffBodies(t, rec)
		assert.Equal(t, levels > maxJSONDepth, failed == 1, "%d levels", levels)
		rec.Release()
	}
}

// A MAP with keys other than STRING deep inside lists fails where the old
// conversion failed: its entries were {"key":…,"value":…} objects one level
// below the map, their members two; an empty map has no members.
func TestNestedBodiesKeyValueMapDepth(t *testing.T) {
	for _, c := range []struct {
		around  int
		entries string
		fails   bool
	}{
		{maxJSONDepth - 2, `[{"key":1,"value":2}]`, false},
		{maxJSONDepth - 1, `[{"key":1,"value":2}]`, true},
		{maxJSONDepth - 1, `[]`, false},
		{maxJSONDepth, `[]`, false},
		{maxJSONDepth + 1, `[]`, true},
	} {
		var dt arrow.DataType = arrow.MapOf(arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int64)
		for range c.around {
			dt = arrow.ListOf(dt)
		}
		schema := arrow.NewSchema([]arrow.Field{{Name: "m", Type: dt, Nullable: true}}, nil)
		doc := `[{"m":` + strings.Repeat("[", c.around) + c.entries + strings.Repeat("]", c.around) + "}]"
		rec, _, err := array.RecordFromJSON(memory.NewGoAllocator(), schema, strings.NewReader(doc))
		require.NoError(t, err)
		_, failed := diffBodies(t, rec)
		assert.Equal(t, c.fails, failed == 1, "%d lists around %s", c.around, c.entries)
		rec.Release()
	}
}

// A VARIANT deep inside lists fails where the old conversion failed: the
// depth limit counts the levels around it and inside it.
func TestNestedBodiesVariantDepth(t *testing.T) {
	var fails []int
	for _, inside := range []int{0, 2, 3, 4} {
		const around = 997
		var dt arrow.DataType = typemap.VariantArrowType()
		for range around {
			dt = arrow.ListOf(dt)
		}
		schema := arrow.NewSchema([]arrow.Field{{Name: "v", Type: dt, Nullable: true}}, nil)
		b := array.NewBuilder(memory.NewGoAllocator(), dt)
		lb := b
		for range around {
			l := lb.(*array.ListBuilder)
			l.Append(true)
			lb = l.ValueBuilder()
		}
		require.NoError(t, appendVariantRow(lb.(*array.StructBuilder), strings.Repeat("[", inside)+`{"a":1}`+strings.Repeat("]", inside)))
		col := b.NewArray()
		rec := array.NewRecordBatch(schema, []arrow.Array{col}, 1)
		_, failed := diffBodies(t, rec)
		// around lists put the variant at depth 997; its members are one
		// level deeper per array inside it, plus one for the object.
		assert.Equal(t, around+inside+1 > maxJSONDepth, failed == 1, "%d arrays inside", inside)
		fails = append(fails, failed)
		rec.Release()
		col.Release()
		b.Release()
	}
	assert.Equal(t, []int{0, 0, 1, 1}, fails)
}

// A type the input does not write, deep inside a value, fails the row with
// the old message naming where it is (field, map value, element index); a
// null of that type is written as null, as before.
func TestNestedBodiesUnsupportedTypeDeepInside(t *testing.T) {
	inner := arrow.StructOf(arrow.Field{Name: "t", Type: arrow.FixedWidthTypes.Time64us, Nullable: true})
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "m", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.ListOf(inner)), Nullable: true},
	}, nil)
	rows := `[
{"m":[{"key":"a","value":[{"t":null},null]}]},
{"m":[{"key":"b","value":[{"t":null},{"t":"12:00:00"}]}]},
{"m":[{"key":"a","value":[]},{"key":"c","value":[{"t":"01:02:03"}]}]}
]`
	rec, _, err := array.RecordFromJSON(memory.NewGoAllocator(), schema, strings.NewReader(rows))
	require.NoError(t, err)
	defer rec.Release()
	n, failed := diffBodies(t, rec)
	assert.Equal(t, 1, n)
	assert.Equal(t, 2, failed)
	_, errs := newBodies(rec)
	require.Error(t, errs[1])
	assert.Equal(t, "row 0: column m: map value: element 1: field t: unsupported Arrow type time64[us]", errs[1].Error())
}

// A _zb_emit_ts column that is not a zoned TIMESTAMP gives the metadata
// text it gave before: fmt of the old value (zone-less timestamps, dates
// and strings bare).
func TestEmitTSMetadataOfOtherTypes(t *testing.T) {
	for _, tc := range []struct {
		dt  arrow.DataType
		doc string
	}{
		{&arrow.TimestampType{Unit: arrow.Microsecond}, `"2026-01-02T03:04:05.5"`},
		{arrow.BinaryTypes.String, `"quote \" and é"`},
		{arrow.PrimitiveTypes.Int64, `42`},
		{arrow.PrimitiveTypes.Float64, `1e21`},
		{arrow.FixedWidthTypes.Date32, `"2026-01-02"`},
		{&arrow.Decimal128Type{Precision: 10, Scale: 3}, `"-1.500"`},
		{&arrow.Decimal128Type{Precision: 38, Scale: 0}, `"-99999999999999999999999999999999999999"`},
		{&arrow.Decimal256Type{Precision: 40, Scale: 2}, `"-12345678901234567890123456789012345678.90"`},
		{arrow.BinaryTypes.Binary, `"AQI="`},
		{arrow.FixedWidthTypes.Boolean, `true`},
	} {
		schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: ColEmitTS, Type: tc.dt, Nullable: true}}, nil)
		rec, _, err := array.RecordFromJSON(memory.NewGoAllocator(), schema, strings.NewReader(`[{"id":1,"`+ColEmitTS+`":`+tc.doc+`},{"id":2,"`+ColEmitTS+`":null}]`))
		require.NoError(t, err, tc.dt)
		v, err := oracleValue(rec.Column(1), 0)
		require.NoError(t, err)
		batch, err := newRowConverter(schema).messages(rec)
		require.NoError(t, err)
		got, ok := batch[0].MetaGet(ColEmitTS)
		assert.True(t, ok)
		assert.Equal(t, fmt.Sprint(v), got, "%s", tc.dt)
		_, ok = batch[1].MetaGet(ColEmitTS)
		assert.False(t, ok, "a null %s sets no metadata", tc.dt)
		rec.Release()
	}
}

// appendDecimal128 writes what decimal128.Num.ToString writes, for values
// from 0 and ±1 to the 128-bit extremes and every scale ToString accepts.
func TestAppendDecimal128MatchesToString(t *testing.T) {
	r := newRand(42)
	edge := []decimal128.Num{
		decimal128.FromI64(0), decimal128.FromI64(1), decimal128.FromI64(-1),
		decimal128.FromI64(math.MaxInt64), decimal128.FromI64(math.MinInt64),
		decimal128.FromU64(math.MaxUint64), decimal128.FromU64(1e19), decimal128.FromU64(1e19 - 1),
		decimal128.MaxDecimal128, decimal128.MaxDecimal128.Negate(),
		decimal128.New(math.MaxInt64, math.MaxUint64), decimal128.New(math.MinInt64, 0),
		decimal128.New(0, 1<<63), decimal128.New(-1, 0),
	}
	for scale := int32(-decimal128.MaxScale); scale <= decimal128.MaxScale; scale++ {
		nums := append([]decimal128.Num(nil), edge...)
		for range 200 {
			n := decimal128.New(r.Int64()>>r.IntN(64), r.Uint64())
			if r.IntN(2) == 0 {
				n = decimal128.FromI64(r.Int64() >> r.IntN(64))
			}
			nums = append(nums, n)
		}
		for _, n := range nums {
			want := n.ToString(scale)
			got := string(appendDecimal128([]byte("x"), n, scale))
			if !assert.Equal(t, "x"+want, got, "%v scale %d", n.BigInt(), scale) {
				return
			}
		}
	}
}

// A nested _zb_emit_ts column (STRUCT, LIST, MAP) gives as metadata the
// JSON text its value has in a body, a VARIANT one fmt of the value.
func TestEmitTSMetadataOfNestedTypes(t *testing.T) {
	for _, tc := range []struct {
		dt  arrow.DataType
		doc string
	}{
		{arrow.StructOf(arrow.Field{Name: "z", Type: arrow.PrimitiveTypes.Int64, Nullable: true}, arrow.Field{Name: "a\"", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true}), `{"z":1,"a\"":["x"]}`},
		{arrow.ListOf(arrow.StructOf(arrow.Field{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true})), `[{"b":true},null]`},
		{arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32), `[{"key":"y","value":2},{"key":"x","value":1}]`},
		{arrow.MapOf(arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.String), `[{"key":2,"value":"b"}]`},
	} {
		schema := arrow.NewSchema([]arrow.Field{{Name: "same", Type: tc.dt, Nullable: true}, {Name: ColEmitTS, Type: tc.dt, Nullable: true}}, nil)
		rec, _, err := array.RecordFromJSON(memory.NewGoAllocator(), schema, strings.NewReader(`[{"same":`+tc.doc+`,"`+ColEmitTS+`":`+tc.doc+`}]`))
		require.NoError(t, err, tc.dt)
		batch, err := newRowConverter(schema).messages(rec)
		require.NoError(t, err, tc.dt)
		body, _ := batch[0].AsBytes()
		got, ok := batch[0].MetaGet(ColEmitTS)
		assert.True(t, ok)
		assert.Equal(t, `{"same":`+got+`}`, string(body), "%s", tc.dt)
		rec.Release()
	}
	vt := arrow.StructOf(arrow.Field{Name: typemap.VariantMetadataField, Type: arrow.BinaryTypes.Binary}, arrow.Field{Name: typemap.VariantValueField, Type: arrow.BinaryTypes.Binary})
	b := array.NewStructBuilder(memory.NewGoAllocator(), vt)
	defer b.Release()
	require.NoError(t, appendVariantRow(b, `{"k":[1,"v"]}`))
	col := b.NewStructArray()
	defer col.Release()
	schema := arrow.NewSchema([]arrow.Field{{Name: ColEmitTS, Type: vt, Nullable: true}}, nil)
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, 1)
	defer rec.Release()
	v, err := oracleValue(col, 0)
	require.NoError(t, err)
	batch, err := newRowConverter(schema).messages(rec)
	require.NoError(t, err)
	got, _ := batch[0].MetaGet(ColEmitTS)
	assert.Equal(t, fmt.Sprint(v), got)
}
