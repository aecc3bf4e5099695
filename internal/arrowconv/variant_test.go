package arrowconv

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet/variant"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// variantAt decodes row i of the VARIANT column col.
func variantAt(t *testing.T, res Result, col string, i int) variant.Value {
	t.Helper()
	idx := res.Record.Schema().FieldIndices(col)
	require.Len(t, idx, 1)
	s := res.Record.Column(idx[0]).(*array.Struct)
	require.False(t, s.IsNull(i), "row %d is NULL", i)
	v, err := variant.New(s.Field(0).(*array.LargeBinary).Value(i), s.Field(1).(*array.LargeBinary).Value(i))
	require.NoError(t, err)
	return v
}

func TestVariantRoundTripsJSON(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"nested objects", `{"b": {"y": [1, {"z": null}], "x": "s"}, "a": true}`, `{"a":true,"b":{"x":"s","y":[1,{"z":null}]}}`},
		{"empty object", `{}`, `{}`},
		{"empty array", `[]`, `[]`},
		{"array of mixed", `[1, "two", 3.5, false, null, [], {}]`, `[1,"two",3.5,false,null,[],{}]`},
		{"unicode", `{"clé": "naïve ☃ 😀", "esc": "a\"b\\c\n\u0001"}`, `{"clé":"naïve ☃ 😀","esc":"a\"b\\c\n\u0001"}`},
		{"long string", `"` + string(make([]byte, 0)) + `abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"`,
			`"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"`},
		{"int64 max", `9223372036854775807`, `9223372036854775807`},
		{"int64 min", `-9223372036854775808`, `-9223372036854775808`},
		{"beyond int64 stays exact", `9223372036854775808`, `9223372036854775808`},
		{"38 digits stay exact", `-12345678901234567890123456789012345678`, `-12345678901234567890123456789012345678`},
		{"39 digits become a double", `123456789012345678901234567890123456789`, `1.2345678901234568e+38`},
		{"decimal keeps its scale", `1.50`, `1.50`},
		{"small decimal", `-0.000123`, `-0.000123`},
		{"18-digit decimal", `1234567890.12345678`, `1234567890.12345678`},
		{"30-digit decimal", `12345678901234567890.1234567890`, `12345678901234567890.1234567890`},
		{"exponent is a double", `1.5e3`, `1500`},
		{"tiny double", `1E-300`, `1e-300`},
		{"negative zero decimal", `-0.0`, `0.0`},
		{"zero", `0`, `0`},
		{"zero with scale 19", `-0.0000000000000000000`, `0.0000000000000000000`},
		{"tiny with scale 38", `0.00000000000000000000000000000000000001`, `0.00000000000000000000000000000000000001`},
		{"string", `"x"`, `"x"`},
		{"null", `null`, `null`},
		{"many keys", `{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10}`,
			`{"k1":1,"k10":10,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9}`},
		{"repeated keys across objects", `[{"a":1},{"a":2,"b":[{"a":3}]}]`, `[{"a":1},{"a":2,"b":[{"a":3}]}]`},
	}
	c := mustConverter(t, "id BIGINT, v VARIANT", Options{})
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			res := convertJSON(t, c, `{"id": 1, "v": `+tt.in+`}`)
			require.Empty(t, res.RowErrors)
			v := variantAt(t, res, "v", 0)
			got, err := ToJSON(v)
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(got))
			// The same text through the structured path (as encoding/json
			// decodes it with UseNumber) gives the same JSON back.
			var generic any
			dec := json.NewDecoder(stringsReader(tt.in))
			dec.UseNumber()
			require.NoError(t, dec.Decode(&generic))
			sres, err := c.Convert([]Row{structured(map[string]any{"v": generic})})
			require.NoError(t, err)
			defer sres.Record.Release()
			require.Empty(t, sres.RowErrors)
			sv := variantAt(t, Result{Record: sres.Record}, "v", 0)
			sgot, err := ToJSON(sv)
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(sgot))
		})
	}
}

func TestVariantNumberEncodingFollowsSpark(t *testing.T) {
	cases := []struct {
		in   string
		want variant.Type
	}{
		{`1`, variant.Int8}, {`-129`, variant.Int16}, {`70000`, variant.Int32}, {`4294967296`, variant.Int64},
		{`9223372036854775808`, variant.Decimal16}, {`1.5`, variant.Decimal4}, {`123456789.5`, variant.Decimal8},
		{`0.1234567890123456789`, variant.Decimal16}, {`1e2`, variant.Double}, {`1.0E-2`, variant.Double},
		{`0.` + "000000000000000000000000000000000000001", variant.Double}, // scale 39
	}
	c := mustConverter(t, "v VARIANT", Options{})
	for _, tt := range cases {
		res := convertJSON(t, c, `{"v": `+tt.in+`}`)
		require.Empty(t, res.RowErrors, tt.in)
		assert.Equal(t, tt.want, variantAt(t, res, "v", 0).Type(), tt.in)
	}
}

func TestVariantNullsAndNotNull(t *testing.T) {
	c := mustConverter(t, "v VARIANT NOT NULL, p STRUCT<w: VARIANT NOT NULL>, n VARIANT", Options{})
	res := convertJSON(t, c, `{"v": null, "p": null}`, `{"v": 0, "p": {"w": [null]}, "n": 1}`, `{"n": 2}`)
	require.Len(t, res.RowErrors, 1)
	assert.Equal(t, 2, res.RowErrors[0].Index)
	assert.Equal(t, "v", res.RowErrors[0].Column)
	assert.ErrorIs(t, res.RowErrors[0], ErrMissingRequired)
	require.EqualValues(t, 2, res.Record.NumRows())
	assert.Equal(t, "null", cell(t, res.Record, "v", 0), "an explicit null is the variant null")
	assert.Nil(t, cell(t, res.Record, "p", 0))
	assert.Nil(t, cell(t, res.Record, "n", 0), "a missing field is SQL NULL")
	w := res.Record.Column(1).(*array.Struct).Field(0).(*array.Struct)
	assert.False(t, w.IsNull(0), "a NOT NULL variant under a NULL struct holds a valid value")
	for i, want := range []string{"null", "[null]"} {
		js, err := VariantJSON(w.Field(0).(*array.LargeBinary).Value(i), w.Field(1).(*array.LargeBinary).Value(i))
		require.NoError(t, err)
		assert.Equal(t, want, string(js), "p.w row %d", i)
	}
	assert.Equal(t, "1", cell(t, res.Record, "n", 1))
	// Under a SQL NULL the children still hold a valid variant (the null).
	n := res.Record.Column(2).(*array.Struct)
	require.True(t, n.IsNull(0))
	_, err := VariantJSON(n.Field(0).(*array.LargeBinary).Value(0), n.Field(1).(*array.LargeBinary).Value(0))
	require.NoError(t, err)
}

func TestVariantRowErrorsNameTheColumn(t *testing.T) {
	c := mustConverter(t, "id BIGINT, v VARIANT", Options{})
	tests := []struct {
		name, row string
		kind      error
		msg       string
	}{
		{"unterminated", `{"id": 1, "v": {"a": [1, 2}}`, ErrInvalidJSON, "expected ',' or ']'"},
		{"bare word", `{"id": 1, "v": xyz}`, ErrInvalidJSON, "expected a value"},
		{"NaN", `{"id": 1, "v": {"x": NaN}}`, ErrInvalidJSON, "JSON has no NaN or Infinity"},
		{"-Infinity", `{"id": 1, "v": -Infinity}`, ErrInvalidJSON, "JSON has no NaN or Infinity"},
		{"duplicate key", `{"id": 1, "v": {"a": 1, "b": 2, "a": 3}}`, ErrDuplicateField, "duplicate key"},
		{"double overflow", `{"id": 1, "v": 1e400}`, ErrOutOfRange, "beyond the range of a double"},
		{"bad escape", `{"id": 1, "v": "\q"}`, ErrInvalidJSON, "invalid escape"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := convertJSON(t, c, tt.row, `{"id": 2, "v": [1]}`)
			require.Len(t, res.RowErrors, 1)
			re := res.RowErrors[0]
			assert.Equal(t, "v", re.Column)
			assert.ErrorIs(t, re, tt.kind)
			assert.ErrorContains(t, re, tt.msg)
			require.EqualValues(t, 1, res.Record.NumRows(), "the good row lands")
			assert.Equal(t, "[1]", cell(t, res.Record, "v", 0))
		})
	}
}

func TestVariantStructuredValues(t *testing.T) {
	c := mustConverter(t, "v VARIANT", Options{})
	at := time.Date(2024, 2, 29, 23, 0, 0, 5000, time.FixedZone("CET", 3600))
	res, err := c.Convert([]Row{
		structured(map[string]any{"v": map[string]any{"t": at, "b": []byte{1, 2}, "u": uint64(math.MaxUint64), "f": float32(0.5), "i": int16(-3)}}),
		structured(map[string]any{"v": math.NaN()}),
		structured(map[string]any{"v": map[string]any{"k": []any{1, math.Inf(1)}}}),
	})
	require.NoError(t, err)
	defer res.Record.Release()
	require.Len(t, res.RowErrors, 2)
	assert.ErrorContains(t, res.RowErrors[0], "JSON has no NaN or Infinity")
	assert.Equal(t, "v", res.RowErrors[0].Column)
	assert.Equal(t, `v["k"][1]`, res.RowErrors[1].Column)
	assert.Equal(t, `{"b":"AQI=","f":0.5,"i":-3,"t":"2024-02-29T23:00:00.000005+01:00","u":18446744073709551615}`,
		cell(t, res.Record, "v", 0))
}

func TestToJSONDecodesVariantKinds(t *testing.T) {
	var b variant.Builder
	start := b.Offset()
	fields := []variant.FieldEntry{b.NextField(start, "date")}
	require.NoError(t, b.AppendDate(19782))
	fields = append(fields, b.NextField(start, "ts"))
	require.NoError(t, b.AppendTimestamp(1700000000123456, true, true))
	fields = append(fields, b.NextField(start, "ntz"))
	require.NoError(t, b.AppendTimestamp(1700000000123456, true, false))
	fields = append(fields, b.NextField(start, "bin"))
	require.NoError(t, b.AppendBinary([]byte{0xff}))
	require.NoError(t, b.FinishObject(start, fields))
	v, err := b.Build()
	require.NoError(t, err)
	got, err := ToJSON(v)
	require.NoError(t, err)
	assert.Equal(t, `{"bin":"/w==","date":"2024-02-29","ntz":"2023-11-14T22:13:20.123456","ts":"2023-11-14T22:13:20.123456Z"}`, string(got))

	_, err = VariantJSON([]byte{1, 0, 0}, []byte{0xff})
	assert.Error(t, err, "invalid variant bytes are an error, not a panic")
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

func TestVariantMetadataDoesNotGrowAcrossRows(t *testing.T) {
	c := mustConverter(t, "v VARIANT", Options{})
	rows := make([]string, 50)
	for i := range rows {
		rows[i] = fmt.Sprintf(`{"v": {"key_%d": %d, "shared": [true]}}`, i, i)
	}
	res := convertJSON(t, c, rows...)
	require.Empty(t, res.RowErrors)
	for i := range rows {
		want, err := variant.ParseJSON(fmt.Sprintf(`{"key_%d": %d, "shared": [true]}`, i, i), false)
		require.NoError(t, err)
		assert.Equal(t, want.Metadata().Bytes(), variantAt(t, res, "v", i).Metadata().Bytes(), "row %d metadata", i)
	}
}

func TestEncodeVariantMatchesTheColumn(t *testing.T) {
	const doc = `{"b": [1, 2.50, "x"], "a": {"n": null}}`
	c := mustConverter(t, "v VARIANT", Options{})
	res := convertJSON(t, c, `{"v": `+doc+`}`)
	col := variantAt(t, res, "v", 0)

	meta, val, err := EncodeVariantJSON([]byte(doc))
	require.NoError(t, err)
	assert.Equal(t, col.Metadata().Bytes(), meta)
	assert.Equal(t, col.Bytes(), val)

	var generic any
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&generic))
	meta, val, err = EncodeVariant(generic)
	require.NoError(t, err)
	js, err := VariantJSON(meta, val)
	require.NoError(t, err)
	assert.Equal(t, `{"a":{"n":null},"b":[1,2.50,"x"]}`, string(js))

	_, _, err = EncodeVariantJSON([]byte(`{"a": 1} x`))
	assert.ErrorIs(t, err, ErrInvalidJSON)
	assert.ErrorContains(t, err, "trailing data")
	_, _, err = EncodeVariant(map[string]any{"k": []any{1, math.NaN()}})
	assert.ErrorContains(t, err, `["k"][1]: value NaN: JSON has no NaN or Infinity`)
}

// TestVariantKeysBeyondTheInternBounds checks object keys read the same
// whether or not the column interns them: more distinct keys than
// maxInternedKeys, a key longer than maxInternedKeyLen, and an escaped key
// (unescaped into scratch space the next string overwrites) that is later
// met plain.
func TestVariantKeysBeyondTheInternBounds(t *testing.T) {
	c := mustConverter(t, "v VARIANT", Options{})
	long := strings.Repeat("k", maxInternedKeyLen+1)
	rows := []string{`{"v": {"a\u0062": 1, "c\u0064": "x\ny"}}`, `{"v": {"ab": 2, "cd": 3}}`}
	for i := range maxInternedKeys + 10 {
		rows = append(rows, fmt.Sprintf(`{"v": {"key_%d": %d, "%s": [%d], "ab": 0}}`, i, i, long, i))
	}
	for range 2 { // the second batch reuses the pooled state and its keys
		res := convertJSON(t, c, rows...)
		require.Empty(t, res.RowErrors)
		for i, r := range rows {
			var doc struct{ V json.RawMessage }
			require.NoError(t, json.Unmarshal([]byte(r), &doc))
			want, err := variant.ParseJSON(string(doc.V), false)
			require.NoError(t, err)
			got := variantAt(t, res, "v", i)
			assert.Equal(t, want.Metadata().Bytes(), got.Metadata().Bytes(), "row %d metadata", i)
			assert.Equal(t, want.Bytes(), got.Bytes(), "row %d value", i)
		}
	}
}
