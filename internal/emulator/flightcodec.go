package emulator

import (
	"math/bits"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// flightCodec is the emulator's gRPC server codec: grpc-go's proto codec,
// except that a FlightData (every DoPut frame) is decoded straight from the
// buffers the transport received, copying its body once. grpc-go's codec
// copies a message twice before the handler sees it (the received buffers
// into one pooled buffer, then each bytes field out of it in
// proto.Unmarshal): for Zerobus's record batch frames, hundreds of KB each,
// those copies and the garbage they leave were the largest part of what the
// emulator spends per batch, which an --ack-only benchmark charges to the
// client's machine.
//
// The result is exactly proto.Unmarshal's (fuzzed against it in
// flightcodec_test.go): a FlightData whose wire form is anything but fields
// data_header (2), app_metadata (3) and data_body (1000), each at most once
// and length-delimited, (a flight_descriptor, as in a stream's first frame,
// a repeated or unknown field, a malformed or truncated one) is handed to
// the proto codec, so its errors and unknown fields are the proto codec's.
type flightCodec struct {
	proto encoding.CodecV2
}

func newFlightCodec() flightCodec {
	return flightCodec{proto: encoding.GetCodecV2(protocodec.Name)}
}

// Name is the proto codec's: the codec serves the same content-subtype.
func (c flightCodec) Name() string { return protocodec.Name }

func (c flightCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c flightCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if fd, ok := v.(*flight.FlightData); ok && decodeFlightData(data, fd) {
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

// FlightData's field numbers (arrow/format/Flight.proto).
const (
	fdHeaderField protowire.Number = 2
	fdMetaField   protowire.Number = 3
	fdBodyField   protowire.Number = 1000
)

// decodeFlightData decodes data into fd and reports true when data holds
// only FlightData's data_header, app_metadata and data_body fields, each at
// most once; otherwise it leaves fd alone and reports false. Each field is
// copied out of data (which the transport reuses once the codec returns), as
// proto.Unmarshal does, and an empty one is nil, as there; the body goes to
// a buffer from bodyPool, which releaseFrameBody may take back.
func decodeFlightData(data mem.BufferSlice, fd *flight.FlightData) bool {
	r := bufferReader{bufs: data, left: data.Len()}
	var fields [3][]byte
	var seen [3]bool
	ok := false
	defer func() {
		if !ok {
			putFrameBody(fields[2])
		}
	}()
	for r.left > 0 {
		tag, n := r.varint()
		if n < 0 {
			return false
		}
		num, typ := protowire.DecodeTag(tag)
		if typ != protowire.BytesType {
			return false
		}
		var i int
		switch num {
		case fdHeaderField:
			i = 0
		case fdMetaField:
			i = 1
		case fdBodyField:
			i = 2
		default:
			return false
		}
		size, n := r.varint()
		if n < 0 || seen[i] || size > uint64(r.left) {
			return false
		}
		seen[i] = true
		if size == 0 {
			continue
		}
		if i == 2 {
			fields[i] = getFrameBody(int(size))
		} else {
			fields[i] = make([]byte, size)
		}
		r.read(fields[i])
	}
	ok = true
	fd.Reset()
	fd.DataHeader, fd.AppMetadata, fd.DataBody = fields[0], fields[1], fields[2]
	return true
}

// bufferReader reads a mem.BufferSlice front to back without joining it.
type bufferReader struct {
	bufs mem.BufferSlice
	cur  []byte // the unread rest of the current buffer
	left int    // bytes unread in all
}

// varint reads a varint as protowire.ConsumeVarint does (which it calls):
// n < 0 when data ends inside it or it overflows.
func (r *bufferReader) varint() (uint64, int) {
	var b [10]byte // a varint's longest encoding
	k := r.peek(b[:])
	v, n := protowire.ConsumeVarint(b[:k])
	if n > 0 {
		r.skip(n)
	}
	return v, n
}

// peek copies the next bytes into dst without consuming them and returns
// how many it copied.
func (r *bufferReader) peek(dst []byte) int {
	k := copy(dst, r.cur)
	for i := 0; k < len(dst) && i < len(r.bufs); i++ {
		k += copy(dst[k:], r.bufs[i].ReadOnlyData())
	}
	return k
}

func (r *bufferReader) skip(n int) {
	for n > 0 {
		r.fill()
		k := min(n, len(r.cur))
		r.cur = r.cur[k:]
		n -= k
		r.left -= k
	}
}

// read fills dst, which is at most r.left long.
func (r *bufferReader) read(dst []byte) {
	for len(dst) > 0 {
		r.fill()
		k := copy(dst, r.cur)
		r.cur = r.cur[k:]
		dst = dst[k:]
		r.left -= k
	}
}

// fill makes cur the next non-empty buffer once cur is used up.
func (r *bufferReader) fill() {
	for len(r.cur) == 0 && len(r.bufs) > 0 {
		r.cur = r.bufs[0].ReadOnlyData()
		r.bufs = r.bufs[1:]
	}
}

// frameBodies holds record batch bodies given back by releaseFrameBody for
// the next frames: in ack-only mode a body is dropped as soon as its frame
// is counted, and without reuse every frame would allocate (and the garbage
// collector clear away) hundreds of KB. A body the record reader decodes is
// never given back: the arrays it builds alias it.
var frameBodies sync.Pool

// getFrameBody returns a buffer of n bytes, reused when one is at hand. Its
// capacity is rounded up (by at most 1/16 of the next power of two) so that
// the bodies of similar frames fit in each other's buffers.
func getFrameBody(n int) []byte {
	if p, _ := frameBodies.Get().(*[]byte); p != nil && cap(*p) >= n {
		return (*p)[:n]
	}
	step := max(4096, 1<<bits.Len(uint(n-1))/16)
	return make([]byte, n, (n+step-1)/step*step)
}

func putFrameBody(b []byte) {
	if cap(b) >= 4096 {
		frameBodies.Put(&b)
	}
}

// releaseFrameBody gives fd's body back for reuse: only for a frame whose
// body nothing references any more (one the ack-only path counted without
// decoding). fd keeps no body.
func releaseFrameBody(fd *flight.FlightData) {
	putFrameBody(fd.DataBody)
	fd.DataBody = nil
}
