package emulator

import (
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow/flight"
	flatbuffers "github.com/google/flatbuffers/go"
)

// fieldNames is one field of an IPC schema message as written on the wire:
// its name and its children's names, recursively. arrow-go's IPC reader
// rebuilds map types with its own child names ("entries", "key", "value")
// whatever the writer sent, so the schema check needs the names from the
// message itself to tell the forms the service accepts from the others.
type fieldNames struct {
	Name     string
	Children []fieldNames
}

// child returns the i-th child, or a zero fieldNames when the message has
// fewer children than the decoded type (it never does for a message arrow-go
// accepted).
func (f fieldNames) child(i int) fieldNames {
	if i < len(f.Children) {
		return f.Children[i]
	}
	return fieldNames{}
}

// Flatbuffer vtable offsets of the fields read below, from the Arrow
// format's Message.fbs and Schema.fbs: the entry of field slot s sits at byte
// 4+2*s of a table's vtable.
const (
	vtMessageHeader = 8  // Message.header (slot 2)
	vtSchemaFields  = 6  // Schema.fields (slot 1)
	vtFieldName     = 4  // Field.name (slot 0)
	vtFieldChildren = 14 // Field.children (slot 5)
	// maxIPCFieldDepth bounds the walk over a hostile message; the schema
	// check refuses nesting beyond 100 levels long before this.
	maxIPCFieldDepth = 256
)

// readFieldNames returns the top-level fields of an IPC schema message
// (a FlightData data_header: the flatbuffer Message, no continuation marker)
// with their names as written. It is called only on messages arrow-go has
// already decoded as a schema; a malformed message is still an error, never
// a panic.
func readFieldNames(msg []byte) (fields []fieldNames, err error) {
	defer func() {
		if r := recover(); r != nil {
			fields, err = nil, fmt.Errorf("malformed IPC schema message: %v", r)
		}
	}()
	if len(msg) < 8 {
		return nil, errors.New("IPC schema message is too short")
	}
	root := flatbuffers.Table{Bytes: msg, Pos: flatbuffers.GetUOffsetT(msg)}
	o := flatbuffers.UOffsetT(root.Offset(vtMessageHeader))
	if o == 0 {
		return nil, errors.New("IPC message has no header")
	}
	var schema flatbuffers.Table
	root.Union(&schema, o)
	return readFieldVector(&schema, vtSchemaFields, 0)
}

func readFieldVector(t *flatbuffers.Table, slot flatbuffers.VOffsetT, depth int) ([]fieldNames, error) {
	if depth > maxIPCFieldDepth {
		return nil, fmt.Errorf("IPC schema nests deeper than %d levels", maxIPCFieldDepth)
	}
	o := flatbuffers.UOffsetT(t.Offset(slot))
	if o == 0 {
		return nil, nil
	}
	n := t.VectorLen(o)
	start := t.Vector(o)
	out := make([]fieldNames, n)
	for i := 0; i < n; i++ {
		var f flatbuffers.Table
		f.Bytes = t.Bytes
		f.Pos = t.Indirect(start + flatbuffers.UOffsetT(i)*4)
		if no := flatbuffers.UOffsetT(f.Offset(vtFieldName)); no != 0 {
			out[i].Name = string(f.ByteVector(no + f.Pos))
		}
		children, err := readFieldVector(&f, vtFieldChildren, depth+1)
		if err != nil {
			return nil, err
		}
		out[i].Children = children
	}
	return out, nil
}

// schemaCapture passes FlightData through to arrow-go's record reader and
// keeps the data_header of the first message: the stream's schema message.
type schemaCapture struct {
	flight.FlightService_DoPutServer
	header []byte
	seen   bool
}

func (c *schemaCapture) Recv() (*flight.FlightData, error) {
	fd, err := c.FlightService_DoPutServer.Recv()
	if err == nil && !c.seen {
		c.seen = true
		c.header = append([]byte(nil), fd.GetDataHeader()...)
	}
	return fd, err
}
