package emulator

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/variant"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
	"github.com/benthos-zerobus/benthos-zerobus/internal/zbpb"
)

// hasMap reports whether dt holds a map at any depth.
func hasMap(dt arrow.DataType) bool {
	switch t := dt.(type) {
	case *arrow.MapType:
		return true
	case *arrow.ListType:
		return hasMap(t.Elem())
	case *arrow.StructType:
		for _, f := range t.Fields() {
			if hasMap(f.Type) {
				return true
			}
		}
	}
	return false
}

// sendOne opens an Arrow stream on table with rec's schema (maps named
// entries{keys, values}, as the service builds them), sends rec and returns
// how the call ends (nil: every row acknowledged).
func sendOne(t *testing.T, srv *Server, table string, rec arrow.RecordBatch) error {
	t.Helper()
	meta := schemaMeta(rec.Schema())
	for _, f := range rec.Schema().Fields() {
		if hasMap(f.Type) {
			meta = renameMapChildren(t, meta, [3]string{"entries", "keys", "values"})
			break
		}
	}
	p, _, err := openPutMeta(t, dial(t, srv), zerobusToken(t, srv, table), table, meta)
	require.NoError(t, err)
	require.NoError(t, p.send(rec, 0))
	return p.finish()
}

// mustTable is the registered table named name.
func (s *Server) mustTable(t *testing.T, name string) workspace.Table {
	t.Helper()
	tb, ok := s.Registry().Get(name)
	require.True(t, ok, name)
	return tb
}

// requireRefused checks an INVALID_ARGUMENT status whose message holds every
// part of want.
func requireRefused(t *testing.T, err error, want ...string) {
	t.Helper()
	require.Error(t, err)
	assert.Equal(t, codes.InvalidArgument, status.Code(err), err.Error())
	for _, w := range want {
		assert.Contains(t, status.Convert(err).Message(), w)
	}
}

// fromJSON builds one record batch of schema from a JSON array of rows.
func fromJSON(t *testing.T, schema *arrow.Schema, rows string) arrow.RecordBatch {
	t.Helper()
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(rows))
	require.NoError(t, err, rows)
	t.Cleanup(rec.Release)
	return rec
}

func TestNullsInNotNullColumnsAreRefused(t *testing.T) {
	const table = "main.default.not_null"
	srv := startEmu(t, func(c *Config) {
		c.Tables = []string{table + ":id BIGINT NOT NULL, s STRUCT<a: INT NOT NULL, b: STRING>, l ARRAY<STRUCT<a: INT NOT NULL>>, m MAP<STRING, INT>"}
	})
	schema, err := serviceSchema(srv.mustTable(t, table).Columns)
	require.NoError(t, err)

	for _, tc := range []struct {
		name, rows string
		want       []string // nil: accepted
	}{
		{"a null id", `[{"id":1},{"id":null},{"id":null}]`,
			[]string{`column "id" is declared as non-nullable but contains null values`, "2 nulls, the first in row 1"}},
		{"a null struct field in a present struct", `[{"id":1,"s":{"a":1}},{"id":2,"s":{"a":null,"b":"x"}}]`,
			[]string{`column "s.a" row 1: struct field is declared as non-nullable`}},
		{"a null struct field in a list item", `[{"id":1,"l":[{"a":1}]},{"id":2,"l":[{"a":2},{"a":null}]}]`,
			[]string{`column "l.element.a" row 1: struct field is declared as non-nullable`}},
		{"a null struct, its NOT NULL field null with it", `[{"id":1,"s":null,"l":[null]},{"id":2,"l":null}]`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := rowCount(t, srv, table)
			err := sendOne(t, srv, table, fromJSON(t, schema, tc.rows))
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			requireRefused(t, err, tc.want...)
			assert.Equal(t, before, rowCount(t, srv, table), "nothing of the batch landed")
		})
	}

	t.Run("JSON records say which record", func(t *testing.T) {
		st, _, err := openEphemeral(t, srv, zerobusToken(t, srv, table), table, zbpb.RecordType_JSON)
		require.NoError(t, err)
		require.NoError(t, st.Send(jsonBatch(0, `{"id":1}`, `{"id":null}`)))
		_, err = st.Recv()
		requireRefused(t, err, `record 1: column "id" is NOT NULL`)
	})
}

// variantBytes is the Parquet variant encoding of a JSON document.
func variantBytes(t *testing.T, doc string) (meta, val []byte) {
	t.Helper()
	v, err := variant.ParseJSON(doc, false)
	require.NoError(t, err)
	return v.Metadata().Bytes(), v.Bytes()
}

func appendVariant(sb *array.StructBuilder, meta, val []byte) {
	sb.Append(true)
	sb.FieldBuilder(0).(*array.BinaryBuilder).Append(meta)
	sb.FieldBuilder(1).(*array.BinaryBuilder).Append(val)
}

func TestNestedVariantsAreChecked(t *testing.T) {
	const table = "main.default.nested_variants"
	srv := startEmu(t, func(c *Config) {
		c.Tables = []string{table + ":id BIGINT NOT NULL, s STRUCT<v: VARIANT>, l ARRAY<VARIANT>, m MAP<STRING, VARIANT>"}
	})
	schema, err := serviceSchema(srv.mustTable(t, table).Columns)
	require.NoError(t, err)
	garbage := [2][]byte{{0xff}, {0xff, 0xff}}

	// build writes two rows; bad names the position ("s", "l", "m") whose
	// row-1 value is garbage ("" = none).
	build := func(bad string) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		defer b.Release()
		for row := 0; row < 2; row++ {
			pick := func(where, doc string) ([]byte, []byte) {
				if row == 1 && bad == where {
					return garbage[0], garbage[1]
				}
				return variantBytes(t, doc)
			}
			b.Field(0).(*array.Int64Builder).Append(int64(row))
			sb := b.Field(1).(*array.StructBuilder)
			sb.Append(true)
			m, v := pick("s", fmt.Sprintf(`{"n":%d}`, row))
			appendVariant(sb.FieldBuilder(0).(*array.StructBuilder), m, v)
			lb := b.Field(2).(*array.ListBuilder)
			lb.Append(true)
			m, v = variantBytes(t, `"first"`)
			appendVariant(lb.ValueBuilder().(*array.StructBuilder), m, v)
			m, v = pick("l", `[1,2]`)
			appendVariant(lb.ValueBuilder().(*array.StructBuilder), m, v)
			mb := b.Field(3).(*array.MapBuilder)
			mb.Append(true)
			mb.KeyBuilder().(*array.LargeStringBuilder).Append("k")
			m, v = pick("m", `true`)
			appendVariant(mb.ItemBuilder().(*array.StructBuilder), m, v)
		}
		return b.NewRecordBatch()
	}
	for _, tc := range []struct{ bad, want string }{
		{"s", `column "s.v" row 1: not a Parquet variant`},
		{"l", `column "l.element" row 1: not a Parquet variant`},
		{"m", `column "m.value" row 1: not a Parquet variant`},
	} {
		t.Run("garbage in "+tc.bad, func(t *testing.T) {
			rec := build(tc.bad)
			defer rec.Release()
			requireRefused(t, sendOne(t, srv, table, rec), tc.want)
			assert.EqualValues(t, 0, rowCount(t, srv, table))
		})
	}
	t.Run("valid nested variants are stored and read back as JSON", func(t *testing.T) {
		rec := build("")
		defer rec.Release()
		require.NoError(t, sendOne(t, srv, table, rec))
		rows := readRows(t, srv, table, 0)
		require.Len(t, rows, 2)
		assert.Equal(t, map[string]any{"v": map[string]any{"n": float64(1)}}, rows[1]["s"])
		assert.Equal(t, []any{"first", []any{float64(1), float64(2)}}, rows[1]["l"])
		assert.Equal(t, map[string]any{"k": true}, rows[1]["m"])
	})
}

// TestProductWriterPassesTheValueChecks converts JSON with the product's
// converter (arrowconv) for a table with nested VARIANTs, NOT NULL struct
// fields and maps: the emulator accepts what the product writes.
func TestProductWriterPassesTheValueChecks(t *testing.T) {
	const table = "main.default.product_nested"
	def := "id BIGINT NOT NULL, s STRUCT<v: VARIANT, a: INT NOT NULL>, l ARRAY<STRUCT<v: VARIANT, a: INT NOT NULL>>, m MAP<STRING, VARIANT>, lv ARRAY<VARIANT>"
	srv := startEmu(t, func(c *Config) { c.Tables = []string{table + ":" + def} })
	conv, err := arrowconv.New(srv.mustTable(t, table).Columns, arrowconv.Options{})
	require.NoError(t, err)
	res, err := conv.ConvertJSON([][]byte{
		[]byte(`{"id":1,"s":{"v":{"x":[1,"y"]},"a":1},"l":[{"v":2.5,"a":2},{"a":3}],"m":{"k":{"z":null}},"lv":[null,"t"]}`),
		[]byte(`{"id":2,"s":null,"l":null,"m":null,"lv":null}`),
	})
	require.NoError(t, err)
	require.Empty(t, res.RowErrors)
	defer res.Record.Release()
	require.NoError(t, sendOne(t, srv, table, res.Record))
	rows := readRows(t, srv, table, 0)
	require.Len(t, rows, 2)
	assert.Equal(t, map[string]any{"v": map[string]any{"x": []any{float64(1), "y"}}, "a": float64(1)}, rows[0]["s"])
	assert.Equal(t, map[string]any{"k": map[string]any{"z": nil}}, rows[0]["m"])
}

func TestEphemeralEmptyBatchIsRefused(t *testing.T) {
	srv := startEmu(t, nil)
	st, _, err := openEphemeral(t, srv, zerobusToken(t, srv, testTable), testTable, zbpb.RecordType_JSON)
	require.NoError(t, err)
	require.NoError(t, st.Send(jsonBatch(0, `{"id":1}`, `{"id":2}`)))
	r, err := st.Recv()
	require.NoError(t, err)
	require.EqualValues(t, 0, r.GetIngestRecordResponse().GetDurabilityAckUpToOffset())
	require.NoError(t, st.Send(jsonBatch(1)))
	_, err = st.Recv()
	requireRefused(t, err, "ingest_record_batch at offset 1 has no rows: empty batches are not accepted")
	assert.EqualValues(t, 2, rowCount(t, srv, testTable), "rows before the empty batch stay")
}

// TestWideTableIsWritable: a table of 2,001 columns takes an Arrow stream
// and its rows (no column-count limit is enforced; see serviceSchema).
func TestWideTableIsWritable(t *testing.T) {
	const table = "main.default.wide"
	srv := startEmu(t, nil)
	cols := []typemap.Column{{Name: "id", Type: typemap.Primitive(typemap.Long)}}
	for i := 0; i < 2000; i++ {
		cols = append(cols, typemap.Column{Name: fmt.Sprintf("c%d", i), Type: typemap.Primitive(typemap.Int), Nullable: true})
	}
	_, err := srv.Registry().Create(workspace.Table{FullName: table, TableType: "MANAGED", Columns: cols})
	require.NoError(t, err)
	schema, err := serviceSchema(cols)
	require.NoError(t, err)
	require.Equal(t, 2001, schema.NumFields())
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for row := 0; row < 2; row++ {
		b.Field(0).(*array.Int64Builder).Append(int64(row))
		for i := 1; i < schema.NumFields(); i++ {
			b.Field(i).(*array.Int32Builder).Append(int32(i * (row + 1)))
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	require.NoError(t, sendOne(t, srv, table, rec))
	rows := readRows(t, srv, table, 0)
	require.Len(t, rows, 2)
	assert.Equal(t, float64(4000), rows[1]["c1999"])
}

func TestListItemMustBeNamedItem(t *testing.T) {
	const table = "main.default.lists"
	srv := startEmu(t, func(c *Config) {
		c.Tables = []string{table + ":id BIGINT NOT NULL, l ARRAY<INT>, s STRUCT<t: ARRAY<STRING>>"}
	})
	conn := dial(t, srv)
	tok := zerobusToken(t, srv, table)
	schema := func(top, nested string) *arrow.Schema {
		return arrow.NewSchema([]arrow.Field{
			{Name: "id", Type: arrow.PrimitiveTypes.Int64},
			{Name: "l", Type: arrow.ListOfField(arrow.Field{Name: top, Type: arrow.PrimitiveTypes.Int32, Nullable: true}), Nullable: true},
			{Name: "s", Type: arrow.StructOf(arrow.Field{Name: "t", Nullable: true,
				Type: arrow.ListOfField(arrow.Field{Name: nested, Type: arrow.BinaryTypes.LargeString, Nullable: true})}), Nullable: true},
		}, nil)
	}
	_, _, err := openPut(t, conn, tok, table, schema("element", "item"))
	assertSchemaError(t, err, CauseTypeIncompatible, `field "l" is a list whose item field is named "element"; the service accepts "item"`)
	_, _, err = openPut(t, conn, tok, table, schema("item", "element"))
	assertSchemaError(t, err, CauseTypeIncompatible, `field "s.t" is a list whose item field is named "element"`)

	p, _, err := openPut(t, conn, tok, table, schema("item", "item"))
	require.NoError(t, err)
	require.NoError(t, p.finish())
	// The product's own schema for the table passes.
	conv, err := arrowconv.New(srv.mustTable(t, table).Columns, arrowconv.Options{})
	require.NoError(t, err)
	p, _, err = openPut(t, conn, tok, table, conv.Schema())
	require.NoError(t, err)
	require.NoError(t, p.finish())
}
