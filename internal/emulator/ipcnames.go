package emulator

import (
	"github.com/apache/arrow-go/v18/arrow/flight"
	flatbuffers "github.com/google/flatbuffers/go"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowipc"
)

// fieldNames is one field of an IPC schema message as written on the wire,
// with its children's names: arrow-go's IPC reader rebuilds map types with
// its own child names ("entries", "key", "value") whatever the writer sent,
// so the schema check needs the names from the message itself to tell the
// forms the service accepts from the others.
type fieldNames = arrowipc.Field

// child returns the i-th child of f, or a zero field when the message has
// fewer children than the decoded type (it never does for a message arrow-go
// accepted).
func child(f fieldNames, i int) fieldNames {
	if i < len(f.Children) {
		return f.Children[i]
	}
	return fieldNames{}
}

// readFieldNames returns the top-level fields of an IPC schema message (a
// FlightData data_header) with their names as written.
func readFieldNames(msg []byte) ([]fieldNames, error) {
	s, err := arrowipc.ReadSchema(msg)
	if err != nil {
		return nil, err
	}
	return s.Fields, nil
}

// schemaCapture passes FlightData through to arrow-go's record reader and
// keeps the data_header of the first message: the stream's schema message.
type schemaCapture struct {
	flight.FlightService_DoPutServer
	header []byte
	seen   bool
	// held is a frame received by the ack-only path and handed back for
	// the record reader to decode (see recvLoop); Recv returns it first.
	held *flight.FlightData
}

func (c *schemaCapture) Recv() (*flight.FlightData, error) {
	if fd := c.held; fd != nil {
		c.held = nil
		return fd, nil
	}
	fd, err := c.FlightService_DoPutServer.Recv()
	if err == nil && !c.seen {
		c.seen = true
		c.header = append([]byte(nil), fd.GetDataHeader()...)
	}
	return fd, err
}

// recordBatchRows reads the row count of a record batch from an IPC
// message header (a FlightData data_header: the flatbuffer Message), for
// the ack-only path, which does not decode bodies. ok is false for any
// other message or a header it cannot read; the record reader then takes
// the frame and reports what is wrong with it.
func recordBatchRows(header []byte) (rows int64, ok bool) {
	const (
		messageHeaderType = 1 // Message fields: version, header_type, header, ...
		messageHeader     = 2
		recordBatchLength = 0 // RecordBatch fields: length, nodes, buffers, ...
		headerRecordBatch = 3 // MessageHeader union: NONE, Schema, DictionaryBatch, RecordBatch
	)
	defer func() {
		if recover() != nil { // offsets pointing outside the header
			rows, ok = 0, false
		}
	}()
	if len(header) < flatbuffers.SizeUOffsetT {
		return 0, false
	}
	msg := flatbuffers.Table{Bytes: header, Pos: flatbuffers.GetUOffsetT(header)}
	o := flatbuffers.UOffsetT(msg.Offset(flatbuffers.VOffsetT(4 + 2*messageHeaderType)))
	if o == 0 || msg.GetByte(msg.Pos+o) != headerRecordBatch {
		return 0, false
	}
	o = flatbuffers.UOffsetT(msg.Offset(flatbuffers.VOffsetT(4 + 2*messageHeader)))
	if o == 0 {
		return 0, false
	}
	var rb flatbuffers.Table
	msg.Union(&rb, o)
	o = flatbuffers.UOffsetT(rb.Offset(flatbuffers.VOffsetT(4 + 2*recordBatchLength)))
	if o == 0 {
		return 0, true // the default: no rows
	}
	return rb.GetInt64(rb.Pos + o), true
}
