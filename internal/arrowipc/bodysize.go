package arrowipc

import (
	"encoding/binary"
	"fmt"
)

// Slots of the record batch and dictionary batch tables (Message.fbs).
const (
	messageHeaderDictionaryBatch = 2
	slotRecordBatchBuffers       = 2 // buffers: [Buffer], Buffer = struct {offset: long; length: long}
	slotRecordBatchCompression   = 3 // compression: BodyCompression
	slotDictionaryBatchData      = 1 // data: RecordBatch
)

// DecompressedBodyBytes is what decoding the body of a record batch or
// dictionary batch message (msg: the FlightData data_header, body: its
// data_body) allocates for its buffers: for a compressed body, the sum of
// the uncompressed lengths each buffer declares in its first 8 bytes
// (Message.fbs BodyCompression: "the first 8 bytes of each buffer are the
// uncompressed length", -1 for a buffer left uncompressed); for an
// uncompressed body, 0 (its buffers are slices of body). A reader that
// trusts the declared lengths allocates them before it decompresses
// anything (arrow-go's does), so a 10 MiB frame can ask for terabytes: a
// receiver checks this first. Every access is bounds-checked; an error
// means a malformed message or a buffer outside the body.
func DecompressedBodyBytes(msg, body []byte) (int64, error) {
	r := reader{b: msg}
	root, err := r.root()
	if err != nil {
		return 0, err
	}
	tag, err := root.uint8(slotMessageHeaderType, 0)
	if err != nil {
		return 0, err
	}
	rb, ok, err := root.table(slotMessageHeader)
	if err != nil || !ok {
		return 0, err
	}
	switch tag {
	case messageHeaderRecordBatch:
	case messageHeaderDictionaryBatch:
		if rb, ok, err = rb.table(slotDictionaryBatchData); err != nil || !ok {
			return 0, err
		}
	default:
		return 0, nil
	}
	if _, compressed, err := rb.ref(slotRecordBatchCompression); err != nil || !compressed {
		return 0, err
	}
	pos, ok, err := rb.ref(slotRecordBatchBuffers)
	if err != nil || !ok {
		return 0, err
	}
	n := int64(binary.LittleEndian.Uint32(r.b[pos:]))
	if pos+4+16*n > int64(len(r.b)) {
		return 0, fmt.Errorf("vector of %d buffers at %d beyond the %d byte message", n, pos, len(r.b))
	}
	var total int64
	for i := range n {
		at := pos + 4 + 16*i
		off := int64(binary.LittleEndian.Uint64(r.b[at:]))
		length := int64(binary.LittleEndian.Uint64(r.b[at+8:]))
		if length == 0 {
			continue
		}
		if off < 0 || length < 8 || off > int64(len(body))-8 || length > int64(len(body))-off {
			return 0, fmt.Errorf("compressed buffer %d (offset %d, length %d) outside the %d byte body", i, off, length, len(body))
		}
		declared := int64(binary.LittleEndian.Uint64(body[off:]))
		if declared == -1 {
			continue
		}
		if declared < 0 {
			return 0, fmt.Errorf("compressed buffer %d declares a negative uncompressed length %d", i, declared)
		}
		if total += declared; total < 0 {
			return 0, fmt.Errorf("compressed buffer %d: uncompressed lengths overflow", i)
		}
	}
	return total, nil
}
