package typemap

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRoundTripsTypeText(t *testing.T) {
	cases := []struct{ in, text string }{
		{"BIGINT", "bigint"},
		{"long", "bigint"},
		{"Integer", "int"},
		{"byte", "tinyint"},
		{"short", "smallint"},
		{"real", "float"},
		{"DECIMAL(10, 2)", "decimal(10,2)"},
		{"numeric", "decimal(10,0)"},
		{"varchar(20)", "string"},
		{"timestamp_ntz", "timestamp_ntz"},
		{"ARRAY<STRING>", "array<string>"},
		{"map<string,bigint>", "map<string,bigint>"},
		{"struct<a:int,b:array<string>>", "struct<a:int,b:array<string>>"},
		{"STRUCT<a INT NOT NULL, `b c`: STRING COMMENT 'x'>", "struct<a:int,b c:string>"},
		{"variant", "variant"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			typ, err := Parse(c.in)
			require.NoError(t, err)
			assert.Equal(t, c.text, typ.Text())
			again, err := Parse(typ.DDL())
			require.NoError(t, err, "DDL form %q must parse", typ.DDL())
			assert.True(t, typ.Equal(again), "DDL round trip of %q", typ.DDL())
		})
	}
}

func TestParseRejectsBadTypes(t *testing.T) {
	for _, in := range []string{"", "bigintx", "decimal(40,2)", "decimal(5,6)", "array<string", "map<string>", "struct<a int", "int extra",
		"struct<``:int>", "struct<`\xbe`:int>", "struct<a:int COMMENT '\xbe'>"} {
		_, err := Parse(in)
		assert.Error(t, err, in)
	}
}

func TestParseColumns(t *testing.T) {
	cols, err := ParseColumns("id BIGINT NOT NULL, `a``b` STRING COMMENT 'it''s', tags ARRAY<STRING>, amount decimal(12,2)")
	require.NoError(t, err)
	require.Len(t, cols, 4)
	assert.Equal(t, Column{Name: "id", Type: Primitive(Long), Nullable: false}, cols[0])
	assert.Equal(t, "a`b", cols[1].Name)
	assert.Equal(t, "it's", cols[1].Comment)
	assert.True(t, cols[1].Nullable)
	assert.Equal(t, "array<string>", cols[2].Type.Text())
	assert.Equal(t, DecimalOf(12, 2), cols[3].Type)

	_, err = ParseColumns("id BIGINT NOT")
	assert.ErrorContains(t, err, "NULL")
	_, err = ParseColumns("")
	assert.Error(t, err)
}

func TestColumnTypeJSONRoundTrip(t *testing.T) {
	cols, err := ParseColumns("s STRUCT<a: INT NOT NULL, b: MAP<STRING, DOUBLE>> COMMENT 'nested', l ARRAY<DECIMAL(5,1)> NOT NULL")
	require.NoError(t, err)
	for _, c := range cols {
		back, err := ParseColumnTypeJSON(ColumnTypeJSON(c))
		require.NoError(t, err)
		assert.Equal(t, c.Name, back.Name)
		assert.Equal(t, c.Nullable, back.Nullable)
		assert.Equal(t, c.Comment, back.Comment)
		assert.True(t, c.Type.Equal(back.Type), "%s vs %s", c.Type.Text(), back.Type.Text())
	}
	assert.JSONEq(t, `{"name":"l","type":{"type":"array","elementType":"decimal(5,1)","containsNull":true},"nullable":false,"metadata":{}}`, ColumnTypeJSON(cols[1]))
}

func TestArrowTypeFollowsTheFlightServerMapping(t *testing.T) {
	cases := []struct {
		text string
		want arrow.DataType
	}{
		{"string", arrow.BinaryTypes.LargeString},
		{"variant", arrow.StructOf(
			arrow.Field{Name: "metadata", Type: arrow.BinaryTypes.LargeBinary},
			arrow.Field{Name: "value", Type: arrow.BinaryTypes.LargeBinary},
		)},
		{"struct<v:variant>", arrow.StructOf(arrow.Field{Name: "v", Nullable: true, Type: arrow.StructOf(
			arrow.Field{Name: "metadata", Type: arrow.BinaryTypes.LargeBinary},
			arrow.Field{Name: "value", Type: arrow.BinaryTypes.LargeBinary},
		)})},
		{"decimal(10,2)", arrow.BinaryTypes.LargeString},
		{"binary", arrow.BinaryTypes.LargeBinary},
		{"bigint", arrow.PrimitiveTypes.Int64},
		{"tinyint", arrow.PrimitiveTypes.Int8},
		{"date", arrow.FixedWidthTypes.Date32},
		{"timestamp", &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		{"timestamp_ntz", &arrow.TimestampType{Unit: arrow.Microsecond}},
		{"array<int>", arrow.ListOfField(arrow.Field{Name: "item", Type: arrow.PrimitiveTypes.Int32, Nullable: true})},
		{"map<string,bigint>", arrow.MapOf(arrow.BinaryTypes.LargeString, arrow.PrimitiveTypes.Int64)},
	}
	for _, c := range cases {
		got, err := ArrowType(MustParse(c.text))
		require.NoError(t, err, c.text)
		assert.True(t, arrow.TypeEqual(c.want, got), "%s: want %s got %s", c.text, c.want, got)
	}
	for _, bad := range []string{"array<array<int>>", "array<map<string,int>>", "map<string,array<int>>", "map<double,int>"} {
		_, err := ArrowType(MustParse(bad))
		assert.Error(t, err, bad)
	}
}

func TestFromArrow(t *testing.T) {
	cases := []struct {
		in   arrow.DataType
		want string
	}{
		{arrow.PrimitiveTypes.Uint8, "smallint"},
		{arrow.PrimitiveTypes.Uint32, "bigint"},
		{arrow.PrimitiveTypes.Uint64, "decimal(20,0)"},
		{arrow.FixedWidthTypes.Float16, "float"},
		{arrow.BinaryTypes.String, "string"},
		{arrow.BinaryTypes.StringView, "string"},
		{arrow.FixedWidthTypes.Date64, "date"},
		{&arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "Europe/Paris"}, "timestamp"},
		{&arrow.TimestampType{Unit: arrow.Second}, "timestamp_ntz"},
		{arrow.LargeListOf(arrow.BinaryTypes.String), "array<string>"},
		{&arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}, "string"},
		{arrow.StructOf(arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int32}), "struct<x:int>"},
		{extensions.NewDefaultVariantType(), "variant"},
		{extensions.NewUUIDType(), "binary"},
	}
	for _, c := range cases {
		got, err := FromArrow(c.in)
		require.NoError(t, err, c.in.String())
		assert.Equal(t, c.want, got.Text(), c.in.String())
	}
	for _, bad := range []arrow.DataType{arrow.Null, arrow.FixedWidthTypes.Time32ms, arrow.FixedWidthTypes.Duration_s} {
		_, err := FromArrow(bad)
		assert.Error(t, err, bad.String())
	}
}

func TestCanWiden(t *testing.T) {
	cases := []struct {
		from, to string
		iceberg  bool
		want     bool
	}{
		{"tinyint", "smallint", false, true},
		{"smallint", "bigint", false, true},
		{"int", "bigint", false, true},
		{"bigint", "int", false, false},
		{"int", "double", false, false},
		{"bigint", "double", false, false},
		{"float", "double", false, true},
		{"double", "float", false, false},
		{"decimal(10,2)", "decimal(12,2)", false, true},
		{"decimal(10,2)", "decimal(12,4)", false, true},
		{"decimal(10,2)", "decimal(11,4)", false, false},
		{"int", "string", false, false},
		{"int", "int", false, false},
		{"int", "bigint", true, true},
		{"smallint", "int", true, false},
		{"float", "double", true, true},
		{"decimal(10,2)", "decimal(12,2)", true, true},
		{"decimal(10,2)", "decimal(12,4)", true, false},
	}
	for _, c := range cases {
		got := CanWiden(MustParse(c.from), MustParse(c.to), c.iceberg)
		assert.Equal(t, c.want, got, "%s -> %s (iceberg=%v)", c.from, c.to, c.iceberg)
	}
}

func TestQuotingNeutralisesInjection(t *testing.T) {
	assert.Equal(t, "`a``b`", QuoteIdent("a`b"))
	assert.Equal(t, `'x''); DROP TABLE y; --'`, QuoteString("x'); DROP TABLE y; --"))
	// What we quote, our own lexer reads back as exactly one token.
	cols, err := ParseColumns(QuoteIdent("x'); DROP TABLE y; --") + " STRING COMMENT " + QuoteString(`it's \ fine`))
	require.NoError(t, err)
	require.Len(t, cols, 1)
	assert.Equal(t, "x'); DROP TABLE y; --", cols[0].Name)
	assert.Equal(t, `it's \ fine`, cols[0].Comment)
}

func TestIdentifiersAndTableNames(t *testing.T) {
	assert.True(t, ValidIdentifier("_zb_emit_ts"))
	assert.False(t, ValidIdentifier("9lives"))
	assert.False(t, ValidIdentifier("a-b"))
	assert.Equal(t, "_9lives", SafeIdentifier("9lives"))
	assert.Equal(t, "user_id", SafeIdentifier("user.id"))
	c, s, tb, err := ParseTableName("main.bronze.orders")
	require.NoError(t, err)
	assert.Equal(t, []string{"main", "bronze", "orders"}, []string{c, s, tb})
	for _, bad := range []string{"a.b", "a..c", "a.b.c.d", ""} {
		_, _, _, err := ParseTableName(bad)
		assert.Error(t, err, bad)
	}
}

func TestContainsLooksThroughNesting(t *testing.T) {
	typ := MustParse("struct<a:array<map<string,timestamp_ntz>>,b:int>")
	assert.True(t, typ.Contains(TimestampNTZ))
	assert.True(t, typ.Contains(Int))
	assert.False(t, typ.Contains(Variant))
	assert.False(t, MustParse("array<string>").Contains(Map))
}

func TestSameShapeIgnoresNullabilityAndNameCase(t *testing.T) {
	a := MustParse("array<struct<Id:bigint NOT NULL,tags:map<string,int>>>")
	b := MustParse("array<struct<id:bigint,tags:map<string,int>>>")
	assert.False(t, a.Equal(b))
	assert.True(t, a.SameShape(b))
	assert.False(t, a.SameShape(MustParse("array<struct<id:int,tags:map<string,int>>>")))
	assert.False(t, a.SameShape(MustParse("array<struct<other:bigint,tags:map<string,int>>>")))
}

func TestSameColumnsComparesNameNullabilityAndType(t *testing.T) {
	base, err := ParseColumns("id BIGINT NOT NULL, tags ARRAY<STRING> COMMENT 'x', s STRUCT<a: INT NOT NULL>")
	require.NoError(t, err)
	same, err := ParseColumns("id BIGINT NOT NULL, tags ARRAY<STRING>, s STRUCT<a: INT NOT NULL>")
	require.NoError(t, err)
	assert.True(t, SameColumns(base, same), "comments are ignored")
	assert.True(t, SameColumns(nil, nil))
	for _, other := range []string{
		"id BIGINT, tags ARRAY<STRING>, s STRUCT<a: INT NOT NULL>",          // nullability
		"ID BIGINT NOT NULL, tags ARRAY<STRING>, s STRUCT<a: INT NOT NULL>", // name case
		"id INT NOT NULL, tags ARRAY<STRING>, s STRUCT<a: INT NOT NULL>",    // type
		"id BIGINT NOT NULL, tags ARRAY<STRING>, s STRUCT<a: INT>",          // nested nullability
		"tags ARRAY<STRING>, id BIGINT NOT NULL, s STRUCT<a: INT NOT NULL>", // order
		"id BIGINT NOT NULL, tags ARRAY<STRING>",                            // length
	} {
		cols, err := ParseColumns(other)
		require.NoError(t, err, other)
		assert.False(t, SameColumns(base, cols), other)
		assert.False(t, SameColumns(cols, base), other)
	}
}

// nestedArray is ARRAY<…INT…> with n ARRAY levels.
func nestedArray(n int) string {
	return strings.Repeat("ARRAY<", n) + "INT" + strings.Repeat(">", n)
}

// TestTypeDepthIsBounded: a type nested deeper than MaxTypeDepth is refused
// with a clear error, however deep (issue 19: one CREATE TABLE nested
// 1,000,000 deep overflowed the stack), by the DDL parser and the
// type_json parser alike; MaxTypeDepth levels parse.
func TestTypeDepthIsBounded(t *testing.T) {
	typ, err := Parse(nestedArray(MaxTypeDepth))
	require.NoError(t, err)
	js := ColumnTypeJSON(Column{Name: "x", Type: typ, Nullable: true})
	_, err = ParseColumnTypeJSON(js)
	require.NoError(t, err)

	for _, n := range []int{MaxTypeDepth + 1, 1_000_000} {
		_, err := Parse(nestedArray(n))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "type nested more than 100 levels deep")
		_, err = ParseColumns("x " + nestedArray(n))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "type nested more than 100 levels deep")
		st := strings.Repeat("STRUCT<a:", n) + "INT" + strings.Repeat(">", n)
		_, err = Parse(st)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "type nested more than 100 levels deep")
		mp := strings.Repeat("MAP<STRING,", n) + "INT" + strings.Repeat(">", n)
		_, err = Parse(mp)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "type nested more than 100 levels deep")
	}
	deepJSON := `{"name":"x","type":` + strings.Repeat(`{"type":"array","elementType":`, MaxTypeDepth+1) + `"integer"` + strings.Repeat(`,"containsNull":true}`, MaxTypeDepth+1) + `,"nullable":true,"metadata":{}}`
	_, err = ParseColumnTypeJSON(deepJSON)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "type nested more than 100 levels deep")
}
