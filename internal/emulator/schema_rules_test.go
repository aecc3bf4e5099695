package emulator

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/variant"
	flatbuffers "github.com/google/flatbuffers/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
	"github.com/benthos-zerobus/benthos-zerobus/internal/zbpb"
)

// schemaMeta is arrow-go's IPC schema message for schema.
func schemaMeta(schema *arrow.Schema) []byte {
	sp := ipc.GetSchemaPayload(schema, memory.DefaultAllocator)
	defer sp.Release()
	return append([]byte(nil), sp.Meta().Bytes()...)
}

// renameMapChildren rewrites an IPC schema message so that every map's
// children (arrow-go always writes entries{key, value}) carry names[0]
// {names[1], names[2]}, as a writer that can name them would send. Each new
// name is appended to the end of the buffer and the field's name offset
// pointed at it: flatbuffer offsets point forward, and everything in the
// message lies before the end. It stands in for a schema writer until the
// client side produces one.
func renameMapChildren(t testing.TB, meta []byte, names [3]string) []byte {
	// Flatbuffer vtable offsets, from the Arrow format's Message.fbs and
	// Schema.fbs: the entry of field slot s sits at byte 4+2*s of a vtable.
	const (
		vtMessageHeader = 8  // Message.header (slot 2)
		vtSchemaFields  = 6  // Schema.fields (slot 1)
		vtFieldName     = 4  // Field.name (slot 0)
		vtFieldChildren = 14 // Field.children (slot 5)
	)
	t.Helper()
	buf := append([]byte(nil), meta...)
	type target struct {
		at   flatbuffers.UOffsetT // position of the name offset
		name string
	}
	var targets []target
	var walk func(tab *flatbuffers.Table, slot flatbuffers.VOffsetT, parentIsEntries bool)
	walk = func(tab *flatbuffers.Table, slot flatbuffers.VOffsetT, parentIsEntries bool) {
		o := flatbuffers.UOffsetT(tab.Offset(slot))
		if o == 0 {
			return
		}
		n, start := tab.VectorLen(o), tab.Vector(o)
		for i := 0; i < n; i++ {
			var f flatbuffers.Table
			f.Bytes = tab.Bytes
			f.Pos = tab.Indirect(start + flatbuffers.UOffsetT(i)*4)
			no := flatbuffers.UOffsetT(f.Offset(vtFieldName))
			name := string(f.ByteVector(no + f.Pos))
			switch {
			case parentIsEntries && i < 2:
				targets = append(targets, target{f.Pos + no, names[1+i]})
			case name == "entries":
				targets = append(targets, target{f.Pos + no, names[0]})
			}
			walk(&f, vtFieldChildren, name == "entries" && !parentIsEntries)
		}
	}
	root := flatbuffers.Table{Bytes: buf, Pos: flatbuffers.GetUOffsetT(buf)}
	var schema flatbuffers.Table
	root.Union(&schema, flatbuffers.UOffsetT(root.Offset(vtMessageHeader)))
	walk(&schema, vtSchemaFields, false)
	require.NotEmpty(t, targets, "the schema has no map")
	for _, tg := range targets {
		for len(buf)%4 != 0 {
			buf = append(buf, 0)
		}
		pos := uint32(len(buf))
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(tg.name)))
		buf = append(buf, tg.name...)
		buf = append(buf, 0)
		binary.LittleEndian.PutUint32(buf[tg.at:], pos-uint32(tg.at))
	}
	for len(buf)%8 != 0 {
		buf = append(buf, 0)
	}
	return buf
}

func TestReadFieldNamesKeepsMapChildNames(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", Type: arrow.StructOf(arrow.Field{Name: "m", Type: arrow.MapOf(arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.LargeString), Nullable: true}), Nullable: true},
	}, nil)
	got, err := readFieldNames(renameMapChildren(t, schemaMeta(schema), [3]string{"entries", "keys", "values"}))
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "id", got[0].Name)
	m := child(got[1], 0)
	require.Equal(t, "m", m.Name)
	require.Equal(t, "entries", child(m, 0).Name)
	require.Equal(t, []string{"keys", "values"}, []string{child(child(m, 0), 0).Name, child(child(m, 0), 1).Name})

	plain, err := readFieldNames(schemaMeta(schema))
	require.NoError(t, err)
	e := child(child(plain[1], 0), 0)
	require.Equal(t, []string{"entries", "key", "value"}, []string{e.Name, child(e, 0).Name, child(e, 1).Name})

	_, err = readFieldNames([]byte{1, 2, 3})
	require.Error(t, err)
	_, err = readFieldNames([]byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0})
	require.Error(t, err)
}

// variantField is a VARIANT column as the service expects it.
func variantField(name string, nullable bool) arrow.Field {
	return arrow.Field{Name: name, Type: typemap.VariantArrowType(), Nullable: nullable}
}

// variantBatch builds (id, v) rows with v the Parquet variant of each JSON
// text ("" = null); vt, when set, wraps v in that extension type.
func variantBatch(t testing.TB, schema *arrow.Schema, docs []string) arrow.RecordBatch {
	t.Helper()
	ids := array.NewInt64Builder(memory.DefaultAllocator)
	defer ids.Release()
	sb := array.NewStructBuilder(memory.DefaultAllocator, typemap.VariantArrowType())
	defer sb.Release()
	for i, d := range docs {
		ids.Append(int64(i))
		if d == "" {
			sb.AppendNull()
			continue
		}
		v, err := variant.ParseJSON(d, false)
		require.NoError(t, err)
		sb.Append(true)
		sb.FieldBuilder(0).(*array.BinaryBuilder).Append(v.Metadata().Bytes())
		sb.FieldBuilder(1).(*array.BinaryBuilder).Append(v.Bytes())
	}
	idArr, st := ids.NewArray(), sb.NewArray()
	defer idArr.Release()
	defer st.Release()
	col := arrow.Array(st)
	if et, ok := schema.Field(1).Type.(arrow.ExtensionType); ok {
		col = array.NewExtensionArrayWithStorage(et, st)
		defer col.Release()
	}
	return array.NewRecordBatch(schema, []arrow.Array{idArr, col}, int64(len(docs)))
}

func TestVariantColumns(t *testing.T) {
	const table = "main.default.variants"
	srv := startEmu(t, func(c *Config) { c.Tables = []string{table + ":id BIGINT NOT NULL, v VARIANT"} })
	conn := dial(t, srv)
	tok := zerobusToken(t, srv, table)
	id := arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}

	t.Run("LargeUtf8 is refused naming the column", func(t *testing.T) {
		_, _, err := openPut(t, conn, tok, table, arrow.NewSchema([]arrow.Field{id, {Name: "v", Type: arrow.BinaryTypes.LargeString, Nullable: true}}, nil))
		assertSchemaError(t, err, CauseTypeIncompatible, `field "v"`)
	})
	t.Run("binary children must be large_binary", func(t *testing.T) {
		bad := arrow.StructOf(arrow.Field{Name: "metadata", Type: arrow.BinaryTypes.Binary}, arrow.Field{Name: "value", Type: arrow.BinaryTypes.Binary})
		_, _, err := openPut(t, conn, tok, table, arrow.NewSchema([]arrow.Field{id, {Name: "v", Type: bad, Nullable: true}}, nil))
		assertSchemaError(t, err, CauseTypeIncompatible, `field "v"`)
	})

	docs := []string{`{"a":1,"b":[true,null,"x"],"c":{"d":-2.5}}`, `42`, `"text"`, ``, `null`}
	want := []any{map[string]any{"a": float64(1), "b": []any{true, nil, "x"}, "c": map[string]any{"d": -2.5}}, float64(42), "text", nil, nil}
	for _, tc := range []struct {
		name string
		typ  arrow.DataType
	}{
		{"struct", typemap.VariantArrowType()},
		{"struct with the arrow.parquet.variant marker", mustVariantExt(t)},
	} {
		t.Run(tc.name+" is stored and read back as JSON", func(t *testing.T) {
			schema := arrow.NewSchema([]arrow.Field{id, {Name: "v", Type: tc.typ, Nullable: true}}, nil)
			before := rowCount(t, srv, table)
			p, _, err := openPut(t, conn, tok, table, schema)
			require.NoError(t, err)
			rec := variantBatch(t, schema, docs)
			defer rec.Release()
			require.NoError(t, p.send(rec, 0))
			p.waitRecords(uint64(len(docs)))
			require.NoError(t, p.finish())
			rows := readRows(t, srv, table, 0)
			require.Len(t, rows, int(before)+len(docs))
			for i, w := range want {
				assert.Equal(t, w, rows[int(before)+i]["v"], "row %d", i)
			}
		})
	}
	t.Run("bytes that are no variant are refused naming the column", func(t *testing.T) {
		schema := arrow.NewSchema([]arrow.Field{id, variantField("v", true)}, nil)
		p, _, err := openPut(t, conn, tok, table, schema)
		require.NoError(t, err)
		ids := array.NewInt64Builder(memory.DefaultAllocator)
		defer ids.Release()
		ids.Append(1)
		sb := array.NewStructBuilder(memory.DefaultAllocator, typemap.VariantArrowType())
		defer sb.Release()
		sb.Append(true)
		sb.FieldBuilder(0).(*array.BinaryBuilder).Append([]byte{0xff})
		sb.FieldBuilder(1).(*array.BinaryBuilder).Append([]byte{0xff, 0xff})
		a, b := ids.NewArray(), sb.NewArray()
		defer a.Release()
		defer b.Release()
		rec := array.NewRecordBatch(schema, []arrow.Array{a, b}, 1)
		defer rec.Release()
		require.NoError(t, p.send(rec, 0))
		err = p.finish()
		assert.Equal(t, codes.InvalidArgument, status.Code(err))
		assert.Contains(t, status.Convert(err).Message(), `column "v" row 0`)
	})
	t.Run("the Delta log declares the variantType feature", func(t *testing.T) {
		logs, err := filepath.Glob(filepath.Join(srv.DataDir(), "main", "default", "variants", "_delta_log", "*.json"))
		require.NoError(t, err)
		require.NotEmpty(t, logs)
		raw, err := os.ReadFile(logs[0])
		require.NoError(t, err)
		assert.Contains(t, string(raw), `"variantType"`)
		assert.Contains(t, string(raw), `\"type\":\"variant\"`)
	})
}

func mustVariantExt(t testing.TB) arrow.DataType {
	vt, err := extensions.NewVariantType(typemap.VariantArrowType())
	require.NoError(t, err)
	return vt
}

// assertSchemaError checks a SCHEMA_VALIDATION_FAILED status with cause and
// a message containing what.
func assertSchemaError(t testing.TB, err error, cause, what string) {
	t.Helper()
	require.Error(t, err)
	st := status.Convert(err)
	assert.Equal(t, codes.InvalidArgument, st.Code())
	assert.Contains(t, st.Message(), what)
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			info = ei
		}
	}
	require.NotNil(t, info, "ErrorInfo detail")
	assert.Equal(t, SchemaValidationReason, info.Reason)
	assert.Contains(t, info.Metadata["causes"], cause)
}

func TestEphemeralVariantJSON(t *testing.T) {
	const table = "main.default.json_variant"
	srv := startEmu(t, func(c *Config) { c.Tables = []string{table + ":id BIGINT NOT NULL, v VARIANT"} })
	st, _, err := openEphemeral(t, srv, zerobusToken(t, srv, table), table, zbpb.RecordType_JSON)
	require.NoError(t, err)
	require.NoError(t, st.Send(jsonBatch(0, `{"id":1,"v":{"k":[1,2.5,"x"],"n":null}}`, `{"id":2,"v":7}`, `{"id":3}`)))
	r, err := st.Recv()
	require.NoError(t, err)
	require.EqualValues(t, 0, r.GetIngestRecordResponse().GetDurabilityAckUpToOffset())
	require.NoError(t, st.CloseSend())
	rows := readRows(t, srv, table, 0)
	require.Len(t, rows, 3)
	assert.Equal(t, map[string]any{"k": []any{float64(1), 2.5, "x"}, "n": nil}, rows[0]["v"])
	assert.Equal(t, float64(7), rows[1]["v"])
	assert.Nil(t, rows[2]["v"])
}

func TestMapNamesInNestedPositions(t *testing.T) {
	const table = "main.default.nested_maps"
	srv := startEmu(t, func(c *Config) {
		c.Tables = []string{table + ":id BIGINT NOT NULL, s STRUCT<m: MAP<STRING, INT>>, l ARRAY<STRUCT<m: MAP<INT, STRING>>>"}
	})
	conn := dial(t, srv)
	tok := zerobusToken(t, srv, table)
	mapSI := arrow.MapOf(arrow.BinaryTypes.LargeString, arrow.PrimitiveTypes.Int32)
	mapIS := arrow.MapOf(arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.LargeString)
	fields := []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", Type: arrow.StructOf(arrow.Field{Name: "m", Type: mapSI, Nullable: true}), Nullable: true},
		{Name: "l", Type: arrow.ListOfField(arrow.Field{Name: "item", Type: arrow.StructOf(arrow.Field{Name: "m", Type: mapIS, Nullable: true}), Nullable: true}), Nullable: true},
	}
	meta := schemaMeta(arrow.NewSchema(fields, nil))
	_, _, err := openPutMeta(t, conn, tok, table, meta)
	assertSchemaError(t, err, CauseTypeIncompatible, `field "s.m" is a map written as entries{key, value}`)

	p, _, err := openPutMeta(t, conn, tok, table, renameMapChildren(t, meta, [3]string{"entries", "keys", "values"}))
	require.NoError(t, err)
	require.NoError(t, p.finish())
}

func TestUnwritableTablesAreRefusedNamingTheColumn(t *testing.T) {
	srv := startEmu(t, nil)
	conn := dial(t, srv)
	deep := func(levels int) typemap.Type {
		ty := typemap.Primitive(typemap.Int)
		for i := 0; i < levels; i++ {
			ty = typemap.StructOf(typemap.Field{Name: "a", Type: ty, Nullable: true})
		}
		return ty
	}
	tests := []struct {
		name string
		col  typemap.Column
		want string // "" = writable
	}{
		{"nested arrays", typemap.Column{Name: "aa", Type: typemap.MustParse("ARRAY<ARRAY<INT>>"), Nullable: true}, `column "aa": aa: nested arrays not supported`},
		{"array of maps", typemap.Column{Name: "am", Type: typemap.MustParse("ARRAY<MAP<STRING,INT>>"), Nullable: true}, `column "am": am: arrays of maps not supported`},
		{"map of arrays", typemap.Column{Name: "ma", Type: typemap.MustParse("MAP<STRING,ARRAY<INT>>"), Nullable: true}, `column "ma": ma: maps with complex value types not supported`},
		{"map of maps", typemap.Column{Name: "mm", Type: typemap.MustParse("MAP<STRING,MAP<STRING,INT>>"), Nullable: true}, `column "mm": mm: maps with complex value types not supported`},
		{"double map key", typemap.Column{Name: "md", Type: typemap.MustParse("MAP<DOUBLE,INT>"), Nullable: true}, `column "md": md: unsupported map key type double`},
		{"struct nested in a struct's array", typemap.Column{Name: "sa", Type: typemap.MustParse("STRUCT<x: ARRAY<ARRAY<INT>>>"), Nullable: true}, `column "sa": sa.x: nested arrays not supported`},
		{"column name with a dash", typemap.Column{Name: "bad-name", Type: typemap.Primitive(typemap.Int), Nullable: true}, `column "bad-name": invalid field name`},
		{"column name with a leading digit", typemap.Column{Name: "1st", Type: typemap.Primitive(typemap.Int), Nullable: true}, `column "1st": invalid field name`},
		{"struct field name with a space", typemap.Column{Name: "s", Type: typemap.StructOf(typemap.Field{Name: "a b", Type: typemap.Primitive(typemap.Int), Nullable: true}), Nullable: true}, `column "s": s.a b: invalid field name`},
		{"nesting deeper than 100", typemap.Column{Name: "deep", Type: deep(101), Nullable: true}, `column "deep": deep.a.a.a`},
		{"nesting of exactly 100", typemap.Column{Name: "deep", Type: deep(100), Nullable: true}, ""},
		{"map with a struct value", typemap.Column{Name: "ms", Type: typemap.MustParse("MAP<STRING,STRUCT<a: INT>>"), Nullable: true}, ""},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			table := fmt.Sprintf("main.default.unwritable_%d", i)
			cols := []typemap.Column{{Name: "id", Type: typemap.Primitive(typemap.Long)}, tc.col}
			_, err := srv.Registry().Create(workspace.Table{FullName: table, TableType: "MANAGED", Columns: cols})
			require.NoError(t, err)
			schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
			p, _, err := openPut(t, conn, zerobusToken(t, srv, table), table, schema)
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, p.finish())
				return
			}
			require.Error(t, err)
			assert.Equal(t, codes.InvalidArgument, status.Code(err))
			assert.Contains(t, status.Convert(err).Message(), tc.want)
			if tc.name == "nesting deeper than 100" {
				assert.Contains(t, status.Convert(err).Message(), "nesting level exceeds maximum depth of 100")
			}
		})
	}
}

func TestEmptyBatchIsRefused(t *testing.T) {
	srv := startEmu(t, nil)
	p, _, err := openPut(t, dial(t, srv), zerobusToken(t, srv, testTable), testTable, testSchema)
	require.NoError(t, err)
	good := makeBatch(0, 3)
	defer good.Release()
	require.NoError(t, p.send(good, 0))
	p.waitRecords(3)
	empty := makeBatch(3, 0)
	defer empty.Release()
	require.NoError(t, p.send(empty, 1))
	err = p.finish()
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "record batch at offset 1 has no rows")
	assert.EqualValues(t, 3, rowCount(t, srv, testTable), "rows before the empty batch stay")
}

// rawGRPCStatus sends one DoPut request over plain HTTP/2 with the given
// table header value (which grpc-go clients refuse to send) and returns the
// grpc-status and grpc-message the server answers with.
func rawGRPCStatus(t *testing.T, srv *Server, token, tableHeader string) (string, string) {
	t.Helper()
	// HTTP/2 with prior knowledge over plaintext (h2c), as gRPC speaks it.
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protocols}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, srv.GRPCURL()+"/arrow.flight.protocol.FlightService/DoPut", bytes.NewReader(nil))
	require.NoError(t, err)
	req.Header.Set("content-type", "application/grpc")
	req.Header.Set("te", "trailers")
	req.Header.Set("authorization", "Bearer "+token)
	req.Header["X-Databricks-Zerobus-Table-Name"] = []string{tableHeader}
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	code, msg := resp.Header.Get("grpc-status"), resp.Header.Get("grpc-message")
	if code == "" {
		code, msg = resp.Trailer.Get("grpc-status"), resp.Trailer.Get("grpc-message")
	}
	msg, _ = url.PathUnescape(msg)
	return code, msg
}

func TestTableHeaderWithNonPrintableCharacters(t *testing.T) {
	srv := startEmu(t, nil)
	tok := zerobusToken(t, srv, testTable)
	for _, name := range []string{"main.default.ev\tents", "main.default.é"} {
		code, msg := rawGRPCStatus(t, srv, tok, name)
		assert.Equal(t, strconv.Itoa(int(codes.InvalidArgument)), code, name)
		assert.Contains(t, msg, "non-printable character", name)
	}
	// The same path with a printable name gets past the header check (and
	// fails later, on the empty request body).
	code, msg := rawGRPCStatus(t, srv, tok, testTable)
	assert.NotContains(t, msg, "non-printable", code)
}

// TestNestingOfExactly100IsWritable sends a column nested 100 levels deep
// (the service's MAX_NESTING_DEPTH counts type levels below the column: 100
// is allowed) in the stream schema itself: the schema message, 101 fields
// deep, is read and accepted.
func TestNestingOfExactly100IsWritable(t *testing.T) {
	const table = "main.default.deep"
	srv := startEmu(t, nil)
	ty := typemap.Primitive(typemap.Int)
	for i := 0; i < 100; i++ {
		ty = typemap.StructOf(typemap.Field{Name: "a", Type: ty, Nullable: true})
	}
	cols := []typemap.Column{{Name: "id", Type: typemap.Primitive(typemap.Long)}, {Name: "deep", Type: ty, Nullable: true}}
	_, err := srv.Registry().Create(workspace.Table{FullName: table, TableType: "MANAGED", Columns: cols})
	require.NoError(t, err)
	schema, err := serviceSchema(cols)
	require.NoError(t, err)
	p, _, err := openPut(t, dial(t, srv), zerobusToken(t, srv, table), table, schema)
	require.NoError(t, err)
	require.NoError(t, p.finish())
}
