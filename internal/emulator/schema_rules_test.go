package emulator

import (
	"encoding/binary"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	flatbuffers "github.com/google/flatbuffers/go"
	"github.com/stretchr/testify/require"
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
	m := got[1].child(0)
	require.Equal(t, "m", m.Name)
	require.Equal(t, "entries", m.child(0).Name)
	require.Equal(t, []string{"keys", "values"}, []string{m.child(0).child(0).Name, m.child(0).child(1).Name})

	plain, err := readFieldNames(schemaMeta(schema))
	require.NoError(t, err)
	e := plain[1].child(0).child(0)
	require.Equal(t, []string{"entries", "key", "value"}, []string{e.Name, e.child(0).Name, e.child(1).Name})

	_, err = readFieldNames([]byte{1, 2, 3})
	require.Error(t, err)
	_, err = readFieldNames([]byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0})
	require.Error(t, err)
}
