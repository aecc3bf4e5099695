package ingest

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowipc"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// TestSchemaFrameNamesMapChildrenCanonically decodes the schema frame our
// client sends for a table with a MAP<STRING,BIGINT> column: the service's
// canonical form is Map<entries: Struct<keys NOT NULL, values>>
// (databricks/zerobus-sdk rust/sdk/src/schema.rs, arrow_schema_from_uc_columns).
// The fake server decodes the map rows that follow with arrow-go's Flight
// reader, as the emulator does.
func TestSchemaFrameNamesMapChildrenCanonically(t *testing.T) {
	cols, err := typemap.ParseColumns("id BIGINT NOT NULL, m MAP<STRING,BIGINT>")
	require.NoError(t, err)
	schema, err := typemap.ArrowSchema(cols)
	require.NoError(t, err)

	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	ids := b.Field(0).(*array.Int64Builder)
	mb := b.Field(1).(*array.MapBuilder)
	keys, values := mb.KeyBuilder().(*array.LargeStringBuilder), mb.ItemBuilder().(*array.Int64Builder)
	for i := range int64(3) {
		ids.Append(i)
		if i == 1 {
			mb.AppendNull()
			continue
		}
		mb.Append(true)
		keys.Append("a")
		values.Append(i)
		keys.Append("b")
		values.AppendNull()
	}
	batch := b.NewRecordBatch()
	defer batch.Release()

	srv := &fakeFlightServer{}
	c := testClient(t, startFake(t, srv), nil)
	s, err := c.Open(waitCtx(t), testTable, schema)
	require.NoError(t, err)
	defer s.Close()
	submitAll(t, s, batch)
	require.NoError(t, s.WaitDurable(waitCtx(t), 3))

	raw, _, gotIDs := srv.conn(0).snapshot()
	require.NotEmpty(t, raw)
	assert.Equal(t, []int64{0, 1, 2}, gotIDs, "the fake server decoded the rows after our schema frame")

	got, err := arrowipc.ReadSchema(raw[0].header)
	require.NoError(t, err)
	require.Len(t, got.Fields, 2)
	assert.Equal(t, "id: Int64 NOT NULL", got.Fields[0].String())
	m := got.Fields[1]
	assert.Equal(t, "m: Map<entries: Struct<keys: LargeUtf8 NOT NULL, values: Int64> NOT NULL>", m.String())
	require.Len(t, m.Children, 1)
	entries := m.Children[0]
	assert.Equal(t, "entries", entries.Name)
	assert.False(t, entries.Nullable)
	require.Len(t, entries.Children, 2)
	assert.Equal(t, "keys", entries.Children[0].Name)
	assert.False(t, entries.Children[0].Nullable, "map keys are NOT NULL")
	assert.Equal(t, "values", entries.Children[1].Name)
	assert.True(t, entries.Children[1].Nullable)
	assert.False(t, m.Type.KeysSorted)
}

// TestSchemaFrameRefusesUnsupportedType: a stream schema with a type the
// service does not take fails Open as a FatalConfig error naming the field,
// before any call is made.
func TestSchemaFrameRefusesUnsupportedType(t *testing.T) {
	srv := &fakeFlightServer{}
	c := testClient(t, startFake(t, srv), nil)
	schema := arrow.NewSchema([]arrow.Field{{Name: "u", Type: arrow.PrimitiveTypes.Uint32}}, nil)
	_, err := c.Open(waitCtx(t), testTable, schema)
	require.Error(t, err)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, FatalConfig, e.Class)
	assert.Contains(t, err.Error(), `field "u"`)
	assert.Zero(t, srv.connCount(), "no DoPut call for a schema we cannot encode")
}
