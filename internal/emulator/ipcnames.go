package emulator

import (
	"github.com/apache/arrow-go/v18/arrow/flight"

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
	// frameBytes is the size of the last frame Recv returned (header, body
	// and app_metadata): what a per-stream MB/s quota charges.
	frameBytes int64
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
	} else if err == nil {
		if err := checkDecompressedSize(fd); err != nil {
			return nil, err
		}
	}
	if err == nil {
		c.frameBytes = int64(len(fd.GetDataHeader()) + len(fd.GetDataBody()) + len(fd.GetAppMetadata()))
	}
	return fd, err
}
