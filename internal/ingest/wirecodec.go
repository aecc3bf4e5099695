package ingest

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the proto codec flightCodec delegates to
	"google.golang.org/grpc/mem"
)

// The zero-copy send path. gRPC's proto codec marshals every FlightData into
// a fresh pooled buffer (cleared first): for Arrow frames of megabytes that
// is a second full copy of data the frame encoder has just written. Instead
// the encoder writes each frame straight into two pooled buffers, the
// protobuf envelope (with the IPC header inside it) and the IPC body, and
// flightCodec hands both to gRPC as a mem.BufferSlice: gRPC frees them once
// written and they return to the pool for the next frame. The bytes on the
// wire are exactly those proto.Marshal gives for the same FlightData (see
// TestFlightCodecWireBytes).

// FlightData field tags (Flight.proto): data_header = 2, app_metadata = 3
// and data_body = 1000, all length-delimited (wire type 2). The standard
// marshaller writes them in field-number order and omits empty ones; so do
// we.
const (
	tagDataHeader  = 2<<3 | 2
	tagAppMetadata = 3<<3 | 2
)

// tagDataBody is data_body's tag, 1000<<3|2 = 8002, as a varint.
const tagDataBody = "\xc2\x3e"

// offsetPrefix and offsetSuffix enclose the offset_id in a frame's
// app_metadata: {"offset_id":N}.
const (
	offsetPrefix = `{"offset_id":`
	offsetSuffix = `}`
)

// envelopeTail is the most the send path appends to a frame's envelope
// after the IPC header: the app_metadata field (tag, length, JSON with a
// 20-digit offset) and data_body's tag and length.
const envelopeTail = 1 + 1 + len(offsetPrefix) + 20 + len(offsetSuffix) + len(tagDataBody) + binary.MaxVarintLen64

// wireFrame is one batch frame as the DoPut call sends it through
// flightCodec. env holds the data_header field so far; Marshal appends
// app_metadata and data_body's tag and length to it, and sends body after
// it. Both buffers belong to wireFrame until Marshal hands them to gRPC.
type wireFrame struct {
	env, body *[]byte
	offset    int64
	pool      mem.BufferPool
}

// flightCodec is the codec of DoPut calls (grpc.ForceCodecV2): a *wireFrame
// is framed without copying its body; anything else (the schema frame, the
// PutResults received) goes through gRPC's proto codec unchanged.
type flightCodec struct {
	proto encoding.CodecV2
}

// newFlightCodec returns the codec, failing if gRPC's proto codec is
// missing (it is registered by the import above).
func newFlightCodec() (flightCodec, error) {
	p := encoding.GetCodecV2("proto")
	if p == nil {
		return flightCodec{}, fmt.Errorf("gRPC proto codec not registered")
	}
	return flightCodec{proto: p}, nil
}

// callOption is what DoPut calls pass to use the codec.
func (c flightCodec) callOption() grpc.CallOption { return grpc.ForceCodecV2(c) }

// Marshal frames a *wireFrame as FlightData, handing its buffers to gRPC
// (which frees them into the pool once written); anything else is marshalled
// by the proto codec.
func (c flightCodec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*wireFrame)
	if !ok {
		return c.proto.Marshal(v)
	}
	env := *f.env
	if cap(env)-len(env) < envelopeTail {
		return nil, fmt.Errorf("frame envelope has %d bytes of room, need %d", cap(env)-len(env), envelopeTail)
	}
	var num [20]byte
	digits := strconv.AppendInt(num[:0], f.offset, 10)
	env = append(env, tagAppMetadata)
	env = binary.AppendUvarint(env, uint64(len(offsetPrefix)+len(digits)+len(offsetSuffix)))
	env = append(env, offsetPrefix...)
	env = append(env, digits...)
	env = append(env, offsetSuffix...)
	body := *f.body
	if len(body) > 0 {
		env = append(env, tagDataBody...)
		env = binary.AppendUvarint(env, uint64(len(body)))
	}
	*f.env = env
	out := make(mem.BufferSlice, 0, 2)
	out = append(out, mem.NewBuffer(f.env, f.pool))
	if len(body) > 0 {
		out = append(out, mem.NewBuffer(f.body, f.pool))
	} else {
		f.pool.Put(f.body)
	}
	f.env, f.body = nil, nil // gRPC owns them now
	return out, nil
}

// Unmarshal is the proto codec's.
func (c flightCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

// Name is empty so that the call's content-type stays application/grpc, as
// with the default codec (a non-empty name would become a content-subtype,
// application/grpc+<name>): the headers, like the bytes, are unchanged.
func (flightCodec) Name() string { return "" }
