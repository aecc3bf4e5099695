package arrowconv

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

var fixedNow = time.Date(2026, 11, 29, 8, 0, 0, 123456000, time.UTC)

func mustConverter(t testing.TB, defs string, opts Options) *Converter {
	t.Helper()
	cols, err := typemap.ParseColumns(defs)
	require.NoError(t, err)
	if opts.Now == nil {
		opts.Now = func() time.Time { return fixedNow }
	}
	c, err := New(cols, opts)
	require.NoError(t, err)
	return c
}

func convertJSON(t testing.TB, c *Converter, rows ...string) Result {
	t.Helper()
	in := make([][]byte, len(rows))
	for i, r := range rows {
		in[i] = []byte(r)
	}
	res, err := c.ConvertJSON(in)
	require.NoError(t, err)
	t.Cleanup(res.Record.Release)
	validateRecord(t, res.Record)
	return res
}

// validateRecord checks the structure of every column: lengths agree with
// the record, offsets are well formed, children are aligned.
func validateRecord(t testing.TB, rec arrow.RecordBatch) {
	t.Helper()
	for i, col := range rec.Columns() {
		require.EqualValues(t, rec.NumRows(), col.Len(), "column %d length", i)
		validateArray(t, col)
	}
}

func validateArray(t testing.TB, a arrow.Array) {
	t.Helper()
	type fullValidator interface{ ValidateFull() error }
	if v, ok := a.(fullValidator); ok {
		require.NoError(t, v.ValidateFull())
	}
	switch a := a.(type) {
	case *array.Map:
		validateArray(t, a.Keys())
		validateArray(t, a.Items())
		require.Zero(t, a.Keys().NullN(), "map keys are never null")
	case *array.List:
		validateArray(t, a.ListValues())
	case *array.Struct:
		for i := range a.NumField() {
			require.Equal(t, a.Len(), a.Field(i).Len(), "struct child %d length", i)
			validateArray(t, a.Field(i))
		}
	}
}

// cell returns a record value in a form easy to compare: Go scalars for
// primitives (nil for null), compact JSON text for nested values and
// VARIANTs.
func cell(t testing.TB, rec arrow.RecordBatch, col string, row int) any {
	t.Helper()
	idx := rec.Schema().FieldIndices(col)
	require.Len(t, idx, 1, "column %q", col)
	arr := rec.Column(idx[0])
	if arr.IsNull(row) {
		return nil
	}
	switch a := arr.(type) {
	case *array.Int8:
		return a.Value(row)
	case *array.Int16:
		return a.Value(row)
	case *array.Int32:
		return a.Value(row)
	case *array.Int64:
		return a.Value(row)
	case *array.Float32:
		return a.Value(row)
	case *array.Float64:
		return a.Value(row)
	case *array.Boolean:
		return a.Value(row)
	case *array.LargeString:
		return a.Value(row)
	case *array.LargeBinary:
		return append([]byte(nil), a.Value(row)...)
	case *array.Date32:
		return a.Value(row).FormattedString()
	case *array.Timestamp:
		return time.UnixMicro(int64(a.Value(row))).UTC().Format(time.RFC3339Nano)
	}
	if a, ok := arr.(*array.Struct); ok && arrow.TypeEqual(a.DataType(), typemap.VariantArrowType()) {
		meta := a.Field(0).(*array.LargeBinary).Value(row)
		val := a.Field(1).(*array.LargeBinary).Value(row)
		js, err := VariantJSON(meta, val)
		require.NoError(t, err)
		return string(js)
	}
	v := arr.GetOneForMarshal(row)
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func TestConvertRules(t *testing.T) {
	const all = "b BIGINT, i INT, s SMALLINT, t TINYINT, d DOUBLE, f FLOAT, ok BOOLEAN, str STRING, v VARIANT, " +
		"bin BINARY, dt DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, amt DECIMAL(10,2), big DECIMAL(38,0)"
	tests := []struct {
		name string
		defs string
		opts Options
		row  string
		want map[string]any
	}{
		{"exact int64 beyond float64", all, Options{}, `{"b": 9007199254740993}`, map[string]any{"b": int64(9007199254740993)}},
		{"int64 max", all, Options{}, `{"b": 9223372036854775807}`, map[string]any{"b": int64(math.MaxInt64)}},
		{"int64 min", all, Options{}, `{"b": -9223372036854775808}`, map[string]any{"b": int64(math.MinInt64)}},
		{"integral exponent forms", all, Options{}, `{"b": 1.50e1, "i": 1e3, "s": -0.0, "t": 12.000}`,
			map[string]any{"b": int64(15), "i": int32(1000), "s": int16(0), "t": int8(12)}},
		{"narrow ints at bounds", all, Options{}, `{"i": -2147483648, "s": 32767, "t": -128}`,
			map[string]any{"i": int32(math.MinInt32), "s": int16(math.MaxInt16), "t": int8(math.MinInt8)}},
		{"floats", all, Options{}, `{"d": 1.5e-7, "f": 3.25}`, map[string]any{"d": 1.5e-7, "f": float32(3.25)}},
		{"float specials", all, Options{}, `{"d": "-Infinity"}`, map[string]any{"d": math.Inf(-1)}},
		{"boolean", all, Options{}, `{"ok": false}`, map[string]any{"ok": false}},
		{"string with escapes", all, Options{}, `{"str": "a\"b\\c\u00e9\ud83d\ude00\n"}`, map[string]any{"str": "a\"b\\cé😀\n"}},
		{"variant holds any value", all, Options{}, `{"v": { "a" : [1, 2.50, "x y"], "b": null }}`,
			map[string]any{"v": `{"a":[1,2.50,"x y"],"b":null}`}},
		{"variant scalar", all, Options{}, `{"v": 12}`, map[string]any{"v": "12"}},
		{"variant JSON null is the variant null", all, Options{}, `{"v": null}`, map[string]any{"v": "null"}},
		{"variant missing is NULL", all, Options{}, `{"b": 1}`, map[string]any{"v": nil}},
		{"binary base64", all, Options{}, `{"bin": "AAEC/w=="}`, map[string]any{"bin": []byte{0, 1, 2, 255}}},
		{"date string", all, Options{}, `{"dt": "2024-02-29"}`, map[string]any{"dt": "2024-02-29"}},
		{"date epoch days", all, Options{}, `{"dt": 19782}`, map[string]any{"dt": "2024-02-29"}},
		{"date min", all, Options{}, `{"dt": "0001-01-01"}`, map[string]any{"dt": "0001-01-01"}},
		{"timestamp offset to UTC", all, Options{}, `{"ts": "2024-03-01T01:30:00.123456789+02:00"}`,
			map[string]any{"ts": "2024-02-29T23:30:00.123456Z"}},
		{"timestamp Z and space", all, Options{}, `{"ts": "2024-03-01 01:30:00z"}`, map[string]any{"ts": "2024-03-01T01:30:00Z"}},
		{"timestamp epoch default us", all, Options{}, `{"ts": 1700000000123456}`, map[string]any{"ts": "2023-11-14T22:13:20.123456Z"}},
		{"timestamp epoch ms", all, Options{EpochUnit: "ms"}, `{"ts": 1700000000123}`, map[string]any{"ts": "2023-11-14T22:13:20.123Z"}},
		{"timestamp epoch s fraction", all, Options{EpochUnit: "s"}, `{"ts": 1700000000.5}`, map[string]any{"ts": "2023-11-14T22:13:20.5Z"}},
		{"timestamp epoch ns floors", all, Options{EpochUnit: "ns"}, `{"ts": -1500}`, map[string]any{"ts": "1969-12-31T23:59:59.999998Z"}},
		{"ntz wall clock", all, Options{}, `{"ntz": "2024-03-01T01:30:00.5"}`, map[string]any{"ntz": "2024-03-01T01:30:00.5Z"}},
		{"decimal from number pads scale", all, Options{}, `{"amt": 12.3}`, map[string]any{"amt": "12.30"}},
		{"decimal from string", all, Options{}, `{"amt": "-0.5"}`, map[string]any{"amt": "-0.50"}},
		{"decimal exponent and trailing zeros", all, Options{}, `{"amt": 1.2500e2}`, map[string]any{"amt": "125.00"}},
		{"decimal negative zero", all, Options{}, `{"amt": "-0.000"}`, map[string]any{"amt": "0.00"}},
		{"decimal max precision", all, Options{}, `{"amt": 99999999.99}`, map[string]any{"amt": "99999999.99"}},
		{"decimal 38 digits", all, Options{}, `{"big": 12345678901234567890123456789012345678}`,
			map[string]any{"big": "12345678901234567890123456789012345678"}},
		{"missing nullable is null", all, Options{}, `{}`, map[string]any{"b": nil, "str": nil, "ts": nil}},
		{"explicit nulls", all, Options{}, `{"b": null, "bin": null, "dt": null}`, map[string]any{"b": nil, "bin": nil, "dt": nil}},
		{"case-insensitive field name", "Amount BIGINT", Options{}, `{"amount": 7}`, map[string]any{"Amount": int64(7)}},
		{"nested to string when enabled", "s STRING", Options{NestedToString: true}, `{"s": {"b": 1, "a": [true, "x"]}}`,
			map[string]any{"s": `{"a":[true,"x"],"b":1}`}},
		{"struct", "p STRUCT<x: INT, y: STRING NOT NULL>", Options{}, `{"p": {"y": "hi"}}`,
			map[string]any{"p": `{"x":null,"y":"hi"}`}},
		{"null struct", "p STRUCT<x: INT, y: STRING NOT NULL>", Options{}, `{"p": null}`, map[string]any{"p": nil}},
		{"array with null elements", "a ARRAY<BIGINT>", Options{}, `{"a": [1, null, 3]}`, map[string]any{"a": `[1,null,3]`}},
		{"empty array", "a ARRAY<STRING>", Options{}, `{"a": []}`, map[string]any{"a": `[]`}},
		{"array of structs", "a ARRAY<STRUCT<k: STRING, n: INT>>", Options{}, `{"a": [{"k": "x", "n": 1}, {"n": 2}, null]}`,
			map[string]any{"a": `[{"k":"x","n":1},{"k":null,"n":2},null]`}},
		{"map string keys", "m MAP<STRING, BIGINT>", Options{}, `{"m": {"a": 1, "b": null}}`,
			map[string]any{"m": `[{"key":"a","value":1},{"key":"b","value":null}]`}},
		{"map integer keys", "m MAP<INT, STRING>", Options{}, `{"m": {"10": "x", "-2": "y"}}`,
			map[string]any{"m": `[{"key":10,"value":"x"},{"key":-2,"value":"y"}]`}},
		{"struct with map and array", "p STRUCT<tags: ARRAY<STRING>, attrs: MAP<STRING, DOUBLE>>", Options{},
			`{"p": {"tags": ["a"], "attrs": {"w": 0.5}}}`, map[string]any{"p": `{"attrs":[{"key":"w","value":0.5}],"tags":["a"]}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustConverter(t, tt.defs, tt.opts)
			res := convertJSON(t, c, tt.row)
			require.Empty(t, res.RowErrors)
			require.EqualValues(t, 1, res.Record.NumRows())
			for col, want := range tt.want {
				assert.Equal(t, want, cell(t, res.Record, col, 0), "column %s", col)
			}
		})
	}
}

func TestConvertRowErrors(t *testing.T) {
	const defs = "id BIGINT NOT NULL, i INT, t TINYINT, d DOUBLE, f FLOAT, ok BOOLEAN, s STRING, bin BINARY, dt DATE, " +
		"ts TIMESTAMP, ntz TIMESTAMP_NTZ, amt DECIMAL(5,2), p STRUCT<x: INT NOT NULL, tags: ARRAY<INT>>, m MAP<INT, STRING>"
	tests := []struct {
		name   string
		row    string
		column string
		kind   error
		msg    string
	}{
		{"int64 overflow", `{"id": 1e40}`, "id", ErrOutOfRange, `message 0: column "id": value 1e40 out of range for BIGINT`},
		{"int64 overflow by one", `{"id": 9223372036854775808}`, "id", ErrOutOfRange, "out of range for BIGINT"},
		{"int not integral", `{"id": 1, "i": 1.5}`, "i", ErrTypeMismatch, "not an integer"},
		{"tinyint range", `{"id": 1, "t": 128}`, "t", ErrOutOfRange, "value 128 out of range for TINYINT"},
		{"int from string", `{"id": "1"}`, "id", ErrTypeMismatch, "expected a JSON number for BIGINT, got string"},
		{"float overflow", `{"id": 1, "f": 1e39}`, "f", ErrOutOfRange, "out of range for FLOAT"},
		{"double from bool", `{"id": 1, "d": true}`, "d", ErrTypeMismatch, "got boolean"},
		{"bool from number", `{"id": 1, "ok": 1}`, "ok", ErrTypeMismatch, "expected true or false"},
		{"string from number", `{"id": 1, "s": 5}`, "s", ErrTypeMismatch, "expected a JSON string for STRING, got number"},
		{"nested into string off", `{"id": 1, "s": {"a": 1}}`, "s", ErrNestedIntoString, "reconcile.nested_to_string"},
		{"array into string off", `{"id": 1, "s": [1]}`, "s", ErrNestedIntoString, "a JSON array into a STRING column"},
		{"bad base64", `{"id": 1, "bin": "!!"}`, "bin", ErrInvalidValue, "invalid base64"},
		{"bad date", `{"id": 1, "dt": "2023-02-29"}`, "dt", ErrInvalidValue, "not a 2006-01-02 date"},
		{"date out of range", `{"id": 1, "dt": 99999999}`, "dt", ErrOutOfRange, "out of range for DATE"},
		{"timestamp without zone", `{"id": 1, "ts": "2024-01-01T00:00:00"}`, "ts", ErrInvalidValue, "no zone or offset"},
		{"timestamp garbage", `{"id": 1, "ts": "yesterday"}`, "ts", ErrInvalidValue, "not an RFC 3339 timestamp"},
		{"timestamp epoch out of range", `{"id": 1, "ts": 1e30}`, "ts", ErrOutOfRange, "out of range for TIMESTAMP"},
		{"tz into ntz", `{"id": 1, "ntz": "2024-01-01T00:00:00+01:00"}`, "ntz", ErrTZIntoNTZ,
			`message 0: column "ntz": tz-aware value into TIMESTAMP_NTZ column: "2024-01-01T00:00:00+01:00" has a zone or offset`},
		{"Z into ntz", `{"id": 1, "ntz": "2024-01-01T00:00:00Z"}`, "ntz", ErrTZIntoNTZ, "has a zone or offset"},
		{"epoch into ntz", `{"id": 1, "ntz": 1700000000}`, "ntz", ErrTZIntoNTZ, "is an instant"},
		{"decimal loses digits", `{"id": 1, "amt": 1.005}`, "amt", ErrOutOfRange, "more than 2 fraction digits"},
		{"decimal overflow", `{"id": 1, "amt": "1000"}`, "amt", ErrOutOfRange, "DECIMAL(5,2) allows 3"},
		{"decimal junk string", `{"id": 1, "amt": "12abc"}`, "amt", ErrInvalidValue, "not a decimal number"},
		{"missing not null", `{"i": 1}`, "id", ErrMissingRequired, `message 0: column "id": missing value for NOT NULL column`},
		{"null not null", `{"id": null}`, "id", ErrMissingRequired, "null for NOT NULL BIGINT"},
		{"unknown field", `{"id": 1, "extra": 2}`, "extra", ErrUnknownField, `message 0: column "extra": unknown field: the table has no such column`},
		{"duplicate field", `{"id": 1, "id": 2}`, "id", ErrDuplicateField, "duplicate field"},
		{"duplicate by case", `{"id": 1, "ID": 2}`, "ID", ErrDuplicateField, "duplicate field"},
		{"nested missing not null", `{"id": 1, "p": {}}`, "p.x", ErrMissingRequired, "missing value for NOT NULL field"},
		{"nested unknown field", `{"id": 1, "p": {"x": 1, "y": 2}}`, "p.y", ErrUnknownField, "struct has no such field"},
		{"array element path", `{"id": 1, "p": {"x": 1, "tags": [1, 2, "z"]}}`, "p.tags[2]", ErrTypeMismatch, "got string"},
		{"map key not integer", `{"id": 1, "m": {"x": "a"}}`, `m["x"]`, ErrInvalidValue, "not an integer"},
		{"map duplicate key", `{"id": 1, "m": {"1": "a", "01": "b"}}`, `m["1"]`, ErrDuplicateField, "duplicate map key"},
		{"map value type", `{"id": 1, "m": {"1": 2}}`, `m["1"]`, ErrTypeMismatch, "got number"},
		{"not an object", `[1, 2]`, "", ErrNotObject, "message 0: message is not a JSON object: got a JSON array"},
		{"empty message", ``, "", ErrNotObject, "empty message"},
		{"truncated json", `{"id": 1, "s": "ab`, "s", ErrInvalidJSON, "unterminated string"},
		{"trailing garbage", `{"id": 1} x`, "", ErrInvalidJSON, "invalid JSON at byte 10: trailing data after the JSON object ('x')"},
		{"NUL ends nothing", "{\"id\": 7}\x00{\"garbage\": not json", "", ErrInvalidJSON, "invalid JSON at byte 9: trailing data after the JSON object ('\\x00')"},
		{"NUL after whitespace", "{\"id\": 7} \n\x00", "", ErrInvalidJSON, "invalid JSON at byte 11: trailing data"},
		{"second object", `{"id": 1}{"id": 2}`, "", ErrInvalidJSON, "invalid JSON at byte 9: trailing data after the JSON object ('{')"},
		{"NaN into DOUBLE", `{"id": 1, "d": NaN}`, "d", ErrInvalidJSON, "NaN is not JSON: JSON has no NaN or Infinity"},
		{"Infinity into DOUBLE", `{"id": 1, "d": Infinity}`, "d", ErrInvalidJSON, "Infinity is not JSON: JSON has no NaN or Infinity"},
		{"-Infinity into FLOAT", `{"id": 1, "f": -Infinity}`, "f", ErrInvalidJSON, "-Infinity is not JSON: JSON has no NaN or Infinity"},
		{"NaN into BIGINT", `{"id": NaN}`, "id", ErrInvalidJSON, "NaN is not JSON"},
		{"NaN in an array", `{"id": 1, "p": {"x": 1, "tags": [1, NaN]}}`, "p.tags[1]", ErrInvalidJSON, "NaN is not JSON"},
		{"NUL as a value", "{\"id\": \x00}", "id", ErrInvalidJSON, "unexpected '\\x00', expected a value"},
		{"invalid utf8", "{\"id\": 1, \"s\": \"\xff\"}", "s", ErrInvalidJSON, "invalid UTF-8"},
		{"bad literal", `{"id": 1, "ok": tru}`, "ok", ErrInvalidJSON, "invalid literal"},
		{"leading zero number", `{"id": 01}`, "", ErrInvalidJSON, "expected ','"},
	}
	c := mustConverter(t, defs, Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := convertJSON(t, c, tt.row)
			require.EqualValues(t, 0, res.Record.NumRows())
			require.Len(t, res.RowErrors, 1)
			re := res.RowErrors[0]
			assert.Equal(t, 0, re.Index)
			assert.Equal(t, tt.column, re.Column)
			assert.ErrorIs(t, re, tt.kind)
			assert.Contains(t, re.Error(), tt.msg)
		})
	}
}

func TestBadRowsInTheMiddleLeaveNeighboursIntact(t *testing.T) {
	c := mustConverter(t, "id BIGINT NOT NULL, name STRING, amt DECIMAL(6,2), tags ARRAY<STRING>, "+
		"m MAP<STRING, INT>, p STRUCT<a: INT, b: ARRAY<INT>>, ok BOOLEAN, ts TIMESTAMP", Options{})
	rows := []string{
		`{"id": 0, "name": "zero", "amt": 1, "tags": ["a"], "m": {"k": 1}, "p": {"a": 1, "b": [1]}, "ok": true, "ts": "2024-01-01T00:00:00Z"}`,
		// Fails late: every earlier column (strings, nested children) was appended.
		`{"id": 1, "name": "BAD", "amt": 2, "tags": ["x", "y", "z"], "m": {"q": 9, "r": 8}, "p": {"a": 2, "b": [7, 7, 7]}, "ok": false, "ts": "nope"}`,
		`{"id": 2, "name": "two", "tags": [], "p": {"b": []}, "ok": false}`,
		// Fails deep inside a nested value.
		`{"id": 3, "name": "BAD", "tags": ["q"], "p": {"a": 3, "b": [1, 2, "x"]}}`,
		`{"id": 4, "name": "four", "amt": "3.5", "tags": ["b", null], "m": {"k": null}, "ok": true}`,
		`not json`,
		`{"id": 6, "name": "six", "p": null}`,
	}
	res := convertJSON(t, c, rows...)
	require.Len(t, res.RowErrors, 3)
	assert.Equal(t, []int{1, 3, 5}, []int{res.RowErrors[0].Index, res.RowErrors[1].Index, res.RowErrors[2].Index})
	assert.Equal(t, "ts", res.RowErrors[0].Column)
	assert.Equal(t, "p.b[2]", res.RowErrors[1].Column)
	assert.Equal(t, []int{0, 2, 4, 6}, res.SourceIndex)
	rec := res.Record
	require.EqualValues(t, 4, rec.NumRows())

	want := []map[string]any{
		{"id": int64(0), "name": "zero", "amt": "1.00", "tags": `["a"]`, "m": `[{"key":"k","value":1}]`, "p": `{"a":1,"b":[1]}`, "ok": true, "ts": "2024-01-01T00:00:00Z"},
		{"id": int64(2), "name": "two", "amt": nil, "tags": `[]`, "m": nil, "p": `{"a":null,"b":[]}`, "ok": false, "ts": nil},
		{"id": int64(4), "name": "four", "amt": "3.50", "tags": `["b",null]`, "m": `[{"key":"k","value":null}]`, "p": nil, "ok": true, "ts": nil},
		{"id": int64(6), "name": "six", "amt": nil, "tags": nil, "m": nil, "p": nil, "ok": nil, "ts": nil},
	}
	for r, w := range want {
		for col, v := range w {
			assert.Equal(t, v, cell(t, rec, col, r), "row %d column %s", r, col)
		}
	}
}

func TestEmitTimestampStamped(t *testing.T) {
	c := mustConverter(t, "id INT, _zb_emit_ts TIMESTAMP", Options{})
	res := convertJSON(t, c, `{"id": 1}`, `{"id": 2, "_zb_emit_ts": "2020-01-01T00:00:00Z"}`, `{"id": 3, "_zb_emit_ts": null}`)
	require.Empty(t, res.RowErrors)
	stamp := fixedNow.Format(time.RFC3339Nano)
	assert.Equal(t, stamp, cell(t, res.Record, EmitTimestampColumn, 0))
	assert.Equal(t, "2020-01-01T00:00:00Z", cell(t, res.Record, EmitTimestampColumn, 1))
	assert.Equal(t, stamp, cell(t, res.Record, EmitTimestampColumn, 2))

	res = convertJSON(t, c)
	assert.EqualValues(t, 0, res.Record.NumRows())
	assert.True(t, res.Record.Schema().Equal(c.Schema()))
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name string
		defs string
		opts Options
		msg  string
	}{
		{"bad epoch unit", "a INT", Options{EpochUnit: "min"}, `epoch unit "min"`},
		{"reserved column wrong type", "_zb_emit_ts STRING", Options{}, "must be TIMESTAMP"},
		{"array of arrays", "a ARRAY<ARRAY<INT>>", Options{}, "arrays of arrays"},
		{"duplicate column", "a INT, a STRING", Options{}, "duplicate column"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cols, err := typemap.ParseColumns(tt.defs)
			require.NoError(t, err)
			_, err = New(cols, tt.opts)
			assert.ErrorContains(t, err, tt.msg)
		})
	}
	_, err := New(nil, Options{})
	assert.Error(t, err)
}

func TestReservedColumns(t *testing.T) {
	rc := ReservedColumns()
	require.NotEmpty(t, rc)
	assert.Equal(t, EmitTimestampColumn, rc[0].Name)
	assert.Equal(t, typemap.Timestamp, rc[0].Type.Kind)
	assert.NotEmpty(t, rc[0].Description)
	col := rc[0].Column()
	assert.True(t, col.Nullable)
	assert.Equal(t, rc[0].Description, col.Comment)
	// A table created from the list is accepted and stamped.
	_, err := New([]typemap.Column{col}, Options{})
	assert.NoError(t, err)
}

func TestReconciledCountsOnlyGoodRows(t *testing.T) {
	c := mustConverter(t, "s STRING, n INT, Mixed INT", Options{NestedToString: true})
	res := convertJSON(t, c,
		`{"s": {"a": 1}}`,
		`{"s": [1, 2], "n": "bad"}`, // reconciled, then fails: not counted
		`{"s": [3]}`,
		`{"mixed": 1}`,
	)
	require.Len(t, res.RowErrors, 1)
	assert.Equal(t, map[string]int{ReconcileNestedToString: 2, ReconcileFieldNameCase: 1}, res.Reconciled)
	assert.Equal(t, `{"a":1}`, cell(t, res.Record, "s", 0))
	assert.Equal(t, `[3]`, cell(t, res.Record, "s", 1))

	res = convertJSON(t, c, `{"s": "plain"}`)
	assert.Nil(t, res.Reconciled)
}

// msg is a Row like *service.Message: raw bytes or a structured value.
type msg struct {
	raw        []byte
	structured any
	hasStruct  bool
	err        error
}

func (m msg) AsBytes() ([]byte, error)   { return m.raw, m.err }
func (m msg) HasStructured() bool        { return m.hasStruct }
func (m msg) AsStructured() (any, error) { return m.structured, m.err }

func structured(v any) Row { return msg{structured: v, hasStruct: true} }

func TestConvertStructured(t *testing.T) {
	c := mustConverter(t, "id BIGINT NOT NULL, d DOUBLE, s STRING, ok BOOLEAN, bin BINARY, dt DATE, ts TIMESTAMP, "+
		"ntz TIMESTAMP_NTZ, amt DECIMAL(8,3), v VARIANT, tags ARRAY<INT>, m MAP<STRING, BIGINT>, p STRUCT<a: STRING>",
		Options{EpochUnit: "ms"})
	paris := time.FixedZone("CET", 3600)
	rows := []Row{
		structured(map[string]any{
			"id": int64(9007199254740993), "d": 1.25, "s": "x", "ok": true, "bin": []byte{1, 2},
			"dt": time.Date(2024, 2, 29, 23, 0, 0, 0, paris), "ts": time.Date(2024, 1, 1, 1, 0, 0, 5000, paris),
			"ntz": "2024-01-01T01:00:00", "amt": 1.5, "v": map[string]any{"z": 1, "a": []any{true}},
			"tags": []any{int64(1), json.Number("2"), nil}, "m": map[string]any{"b": int64(2), "a": nil},
			"p": map[string]any{"a": "q"},
		}),
		structured(map[string]any{"id": json.Number("12"), "ts": int64(1700000000123), "amt": "7", "dt": "2020-01-02", "ID": 1}),
		structured(map[string]any{"id": 1, "ntz": time.Date(2024, 1, 1, 1, 0, 0, 0, paris)}),
		structured([]any{1}),
		msg{raw: []byte(`{"id": 5, "s": "raw"}`)},
		structured(map[string]any{"id": 2.5}),
		structured(map[string]any{"id": 3, "nope": 1}),
		msg{err: errors.New("boom")},
		structured(map[string]any{"id": 4, "s": map[string]any{"a": 1}}),
	}
	res, err := c.Convert(rows)
	require.NoError(t, err)
	defer res.Record.Release()
	validateRecord(t, res.Record)

	assert.Equal(t, []int{0, 4}, res.SourceIndex)
	errs := map[int]RowError{}
	for _, e := range res.RowErrors {
		errs[e.Index] = e
	}
	require.Len(t, errs, 7)
	assert.ErrorIs(t, errs[1], ErrDuplicateField)
	assert.ErrorIs(t, errs[2], ErrTZIntoNTZ)
	assert.Equal(t, "ntz", errs[2].Column)
	assert.ErrorIs(t, errs[3], ErrNotObject)
	assert.ErrorIs(t, errs[5], ErrTypeMismatch)
	assert.Equal(t, "nope", errs[6].Column)
	assert.ErrorIs(t, errs[6], ErrUnknownField)
	assert.ErrorContains(t, errs[7], "boom")
	assert.ErrorIs(t, errs[8], ErrNestedIntoString)

	rec := res.Record
	assert.Equal(t, int64(9007199254740993), cell(t, rec, "id", 0))
	assert.Equal(t, []byte{1, 2}, cell(t, rec, "bin", 0))
	assert.Equal(t, "2024-02-29", cell(t, rec, "dt", 0))
	assert.Equal(t, "2024-01-01T00:00:00.000005Z", cell(t, rec, "ts", 0))
	assert.Equal(t, "2024-01-01T01:00:00Z", cell(t, rec, "ntz", 0))
	assert.Equal(t, "1.500", cell(t, rec, "amt", 0))
	assert.Equal(t, `{"a":[true],"z":1}`, cell(t, rec, "v", 0))
	assert.Equal(t, `[1,2,null]`, cell(t, rec, "tags", 0))
	assert.Equal(t, `[{"key":"a","value":null},{"key":"b","value":2}]`, cell(t, rec, "m", 0))
	assert.Equal(t, `{"a":"q"}`, cell(t, rec, "p", 0))
	assert.Equal(t, int64(5), cell(t, rec, "id", 1))
	assert.Equal(t, "raw", cell(t, rec, "s", 1))

	// The same converter, structured epoch in ms and a case-folded key.
	res2, err := c.Convert([]Row{structured(map[string]any{"ID": json.Number("12"), "ts": int64(1700000000123), "amt": "7"})})
	require.NoError(t, err)
	defer res2.Record.Release()
	require.Empty(t, res2.RowErrors)
	assert.Equal(t, "2023-11-14T22:13:20.123Z", cell(t, res2.Record, "ts", 0))
	assert.Equal(t, "7.000", cell(t, res2.Record, "amt", 0))
	assert.Equal(t, int64(12), cell(t, res2.Record, "id", 0))
	assert.Equal(t, 1, res2.Reconciled[ReconcileFieldNameCase])

	// ConvertStructured, the output's entry point, converts the same rows
	// to the same record and the same row errors.
	srows := make([]StructuredRow, len(rows))
	for i, r := range rows {
		srows[i] = r.(StructuredRow)
	}
	res3, err := c.ConvertStructured(srows)
	require.NoError(t, err)
	defer res3.Record.Release()
	assert.Equal(t, res.SourceIndex, res3.SourceIndex)
	assert.True(t, array.RecordEqual(res.Record, res3.Record), "same record")
	require.Len(t, res3.RowErrors, len(res.RowErrors))
	for i := range res.RowErrors {
		assert.Equal(t, res.RowErrors[i].Index, res3.RowErrors[i].Index)
		assert.Equal(t, res.RowErrors[i].Error(), res3.RowErrors[i].Error())
	}
}

func TestIPCRoundTrip(t *testing.T) {
	c := mustConverter(t, "id BIGINT NOT NULL, s STRING, v VARIANT, amt DECIMAL(10,2), bin BINARY, dt DATE, ts TIMESTAMP, "+
		"ntz TIMESTAMP_NTZ, f FLOAT, ok BOOLEAN, tags ARRAY<STRING>, m MAP<BIGINT, DOUBLE>, "+
		"p STRUCT<a: INT NOT NULL, q: STRUCT<z: STRING>>", Options{})
	res := convertJSON(t, c,
		`{"id": 1, "s": "x", "v": [1], "amt": 3, "bin": "AQ==", "dt": "2024-01-02", "ts": "2024-01-02T03:04:05Z", "ntz": "2024-01-02T03:04:05", "f": 1.5, "ok": true, "tags": ["a", null], "m": {"1": 2.5}, "p": {"a": 1, "q": {"z": "deep"}}}`,
		`{"id": 2, "bad": 1}`,
		`{"id": 3, "p": null}`,
		`{"id": 4}`,
	)
	// A batch whose rows all failed still writes: an empty record.
	empty := convertJSON(t, c, `{"id": null}`, `[]`)
	require.Len(t, empty.RowErrors, 2)

	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(c.Schema()), ipc.WithAllocator(memory.DefaultAllocator))
	require.NoError(t, w.Write(empty.Record))
	require.NoError(t, w.Write(res.Record))
	require.NoError(t, w.Close())

	r, err := ipc.NewReader(&buf)
	require.NoError(t, err)
	defer r.Release()
	require.True(t, r.Next())
	assert.EqualValues(t, 0, r.RecordBatch().NumRows())
	require.True(t, r.Next())
	got := r.RecordBatch()
	assert.True(t, got.Schema().Equal(c.Schema()), "schema survives IPC")
	assert.True(t, array.RecordEqual(res.Record, got), "record survives IPC")
	assert.EqualValues(t, 3, got.NumRows())
	assert.Equal(t, `{"a":1,"q":{"z":"deep"}}`, cell(t, got, "p", 0))
	assert.Nil(t, cell(t, got, "p", 1))
	assert.False(t, r.Next())
}

func TestSchemaMatchesTypemap(t *testing.T) {
	cols, err := typemap.ParseColumns("a BIGINT NOT NULL, b DECIMAL(3,1), c MAP<STRING, INT>, d ARRAY<STRUCT<x: DATE>>")
	require.NoError(t, err)
	want, err := typemap.ArrowSchema(cols)
	require.NoError(t, err)
	c, err := New(cols, Options{})
	require.NoError(t, err)
	assert.True(t, want.Equal(c.Schema()))
}

func TestConcurrentConvert(t *testing.T) {
	c := mustConverter(t, "id BIGINT, s STRING, tags ARRAY<INT>", Options{})
	done := make(chan error, 8)
	for range 8 {
		go func() {
			for range 50 {
				res, err := c.ConvertJSON([][]byte{
					[]byte(`{"id": 1, "s": "a", "tags": [1, 2]}`),
					[]byte(`{"id": "bad"}`),
					[]byte(`{"id": 3, "tags": [3]}`),
				})
				if err != nil {
					done <- err
					return
				}
				if res.Record.NumRows() != 2 || res.Record.Column(2).(*array.List).ListValues().Len() != 3 {
					done <- errors.New("unexpected record")
					return
				}
				res.Record.Release()
			}
			done <- nil
		}()
	}
	for range 8 {
		require.NoError(t, <-done)
	}
}

func TestConvertStructuredScalars(t *testing.T) {
	c := mustConverter(t, "s STRING, b BIGINT, t TINYINT, f FLOAT, dt DATE, m MAP<STRING, INT>", Options{})
	tests := []struct {
		name   string
		row    map[string]any
		column string
		want   any
		kind   error
	}{
		{"bytes into string", map[string]any{"s": []byte("héllo")}, "s", "héllo", nil},
		{"non-UTF-8 bytes into string", map[string]any{"s": []byte{0xff}}, "s", nil, ErrInvalidValue},
		{"non-UTF-8 string", map[string]any{"s": "\xff"}, "s", nil, ErrInvalidValue},
		{"time into string", map[string]any{"s": time.Now()}, "s", nil, ErrTypeMismatch},
		{"uint64 overflow", map[string]any{"b": uint64(math.MaxUint64)}, "b", nil, ErrOutOfRange},
		{"integral float", map[string]any{"b": 42.0}, "b", int64(42), nil},
		{"float beyond int64", map[string]any{"b": 1e19}, "b", nil, ErrOutOfRange},
		{"tinyint range", map[string]any{"t": int64(300)}, "t", nil, ErrOutOfRange},
		{"float32 overflow", map[string]any{"f": 1e39}, "f", nil, ErrOutOfRange},
		{"date epoch days", map[string]any{"dt": int64(1)}, "dt", "1970-01-02", nil},
		{"map key invalid UTF-8", map[string]any{"m": map[string]any{"\xff": 1}}, `m["\xff"]`, nil, ErrInvalidValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := c.Convert([]Row{structured(tt.row)})
			require.NoError(t, err)
			defer res.Record.Release()
			if tt.kind != nil {
				require.Len(t, res.RowErrors, 1)
				assert.Equal(t, tt.column, res.RowErrors[0].Column)
				assert.ErrorIs(t, res.RowErrors[0], tt.kind)
				return
			}
			require.Empty(t, res.RowErrors)
			assert.Equal(t, tt.want, cell(t, res.Record, tt.column, 0))
		})
	}
}

func TestZonedTimeIntoNTZ(t *testing.T) {
	cet := time.FixedZone("CET", 3600)
	rows := func() []Row {
		return []Row{
			structured(map[string]any{"id": 1, "ntz": time.Date(2024, 1, 1, 1, 0, 0, 0, time.UTC)}),
			structured(map[string]any{"id": 2, "ntz": time.Date(2024, 1, 1, 1, 0, 0, 500, cet)}),
			structured(map[string]any{"id": 3, "p": map[string]any{"w": time.Date(2024, 7, 1, 12, 0, 0, 0, time.Local)}}),
			structured(map[string]any{"id": 4, "ntz": "2024-01-01T01:00:00+01:00"}),
			structured(map[string]any{"id": 5, "ntz": int64(1700000000000000)}),
			structured(map[string]any{"id": 6, "ntz": "2024-01-01T01:00:00.25"}),
		}
	}
	const defs = "id BIGINT, ntz TIMESTAMP_NTZ, p STRUCT<w: TIMESTAMP_NTZ>"

	// Default: every time.Time is an instant, refused like zoned strings and
	// epochs; the column is named.
	c := mustConverter(t, defs, Options{})
	res, err := c.Convert(rows())
	require.NoError(t, err)
	defer res.Record.Release()
	assert.Equal(t, []int{5}, res.SourceIndex)
	require.Len(t, res.RowErrors, 5)
	for i, col := range []string{"ntz", "ntz", "p.w", "ntz", "ntz"} {
		assert.ErrorIs(t, res.RowErrors[i], ErrTZIntoNTZ, "message %d", i)
		assert.Equal(t, col, res.RowErrors[i].Column, "message %d", i)
	}
	assert.ErrorContains(t, res.RowErrors[0], `time 2024-01-01T01:00:00Z (zone "UTC") is an instant`)
	assert.ErrorContains(t, res.RowErrors[0], "reconcile.timestamp_ntz_from_zoned")
	assert.Nil(t, res.Reconciled)

	// Opted in: a time.Time is stored as its UTC wall time and counted;
	// zoned strings and epochs are still refused.
	c = mustConverter(t, defs, Options{NTZFromZoned: true})
	res, err = c.Convert(rows())
	require.NoError(t, err)
	defer res.Record.Release()
	validateRecord(t, res.Record)
	assert.Equal(t, []int{0, 1, 2, 5}, res.SourceIndex)
	require.Len(t, res.RowErrors, 2)
	assert.ErrorIs(t, res.RowErrors[0], ErrTZIntoNTZ)
	assert.ErrorIs(t, res.RowErrors[1], ErrTZIntoNTZ)
	assert.Equal(t, "2024-01-01T01:00:00Z", cell(t, res.Record, "ntz", 0))
	assert.Equal(t, "2024-01-01T00:00:00Z", cell(t, res.Record, "ntz", 1), "01:00 CET is 00:00 UTC; sub-microsecond truncated")
	assert.Equal(t, `{"w":"`+time.Date(2024, 7, 1, 12, 0, 0, 0, time.Local).UTC().Format("2006-01-02T15:04:05")+`"}`,
		ntzStructText(t, res.Record, 2))
	assert.Equal(t, "2024-01-01T01:00:00.25Z", cell(t, res.Record, "ntz", 3))
	assert.Equal(t, map[string]int{ReconcileNTZFromZoned: 3}, res.Reconciled)
}

// ntzStructText renders row i of the p STRUCT<w: TIMESTAMP_NTZ> column with
// w as a zone-less wall clock.
func ntzStructText(t *testing.T, rec arrow.RecordBatch, i int) string {
	t.Helper()
	w := rec.Column(2).(*array.Struct).Field(0).(*array.Timestamp)
	require.False(t, w.IsNull(i))
	return `{"w":"` + time.UnixMicro(int64(w.Value(i))).UTC().Format("2006-01-02T15:04:05") + `"}`
}
