package zerobusreplay

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// snapshot is the body and metadata of every message of batch, copied.
func snapshot(t *testing.T, batch service.MessageBatch) []string {
	t.Helper()
	out := make([]string, len(batch))
	for i, m := range batch {
		b, err := m.AsBytes()
		require.NoError(t, err)
		var sb strings.Builder
		sb.Write(b)
		_ = m.MetaWalkMut(func(k string, v any) error {
			sb.WriteString(" " + k + "=")
			sb.WriteString(v.(string))
			return nil
		})
		out[i] = sb.String()
	}
	return out
}

// scribble overwrites every buffer of every array under a with 0xAA, as a
// reused or freed Arrow allocation would.
func scribble(d arrow.ArrayData) {
	for _, b := range d.Buffers() {
		if b != nil {
			for k := range b.Bytes() {
				b.Bytes()[k] = 0xAA
			}
		}
	}
	for _, c := range d.Children() {
		scribble(c)
	}
}

// A raw table's schema evolves between the files of one replay (a column
// added later, a field added to a STRUCT, a MAP's value type widened): each
// batch is written with a plan of its own schema, and a message, once
// handed over, never changes, whatever the converter or the Arrow buffers
// it was read from do next.
func TestConvertFollowsSchemaChangesAndBodiesStayPut(t *testing.T) {
	v1 := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: ColSource, Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "s", Type: arrow.StructOf(arrow.Field{Name: "b", Type: arrow.PrimitiveTypes.Int32, Nullable: true}), Nullable: true},
		{Name: "m", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32), Nullable: true},
	}, nil)
	v2 := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: ColSource, Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "s", Type: arrow.StructOf(
			arrow.Field{Name: "b", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
			arrow.Field{Name: "a\"new", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
		), Nullable: true},
		{Name: "m", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.StructOf(arrow.Field{Name: "x", Type: arrow.BinaryTypes.String, Nullable: true})), Nullable: true},
		{Name: "added", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	read := func(schema *arrow.Schema, rows string) arrow.RecordBatch {
		rec, _, err := array.RecordFromJSON(memory.NewGoAllocator(), schema, strings.NewReader(rows))
		require.NoError(t, err)
		return rec
	}
	in := &input{}
	steps := []struct {
		rec  arrow.RecordBatch
		want []string
	}{
		{read(v1, `[{"id":1,"_zb_source":"f1","s":{"b":2},"m":[{"key":"z","value":1},{"key":"k","value":2}]}]`),
			[]string{`{"id":1,"m":{"k":2,"z":1},"s":{"b":2}} _zb_source=f1`}},
		{read(v2, `[{"id":2,"_zb_source":"f2","s":{"b":3,"a\"new":["x"]},"m":[{"key":"k","value":{"x":"y"}}],"added":"new"},{"id":3,"_zb_source":"f2","s":null,"m":null,"added":null}]`),
			[]string{`{"added":"new","id":2,"m":{"k":{"x":"y"}},"s":{"a\"new":["x"],"b":3}} _zb_source=f2`, `{"added":null,"id":3,"m":null,"s":null} _zb_source=f2`}},
		{read(v1, `[{"id":4,"_zb_source":"f3","s":{"b":null},"m":[]}]`),
			[]string{`{"id":4,"m":{},"s":{"b":null}} _zb_source=f3`}},
	}
	var emitted []service.MessageBatch
	for k, st := range steps {
		batch, err := in.convert(st.rec)
		require.NoError(t, err, "batch %d", k)
		assert.Equal(t, st.want, snapshot(t, batch), "batch %d", k)
		scribble(st.rec.Column(2).Data())
		scribble(st.rec.Column(3).Data())
		scribble(st.rec.Column(1).Data())
		st.rec.Release()
		emitted = append(emitted, batch)
	}
	for k, batch := range emitted {
		assert.Equal(t, steps[k].want, snapshot(t, batch), "batch %d after later batches and its Arrow buffers were overwritten", k)
	}
}
