package ingest

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// DefaultMaxFrameBytes keeps one FlightData message under the service's
// 10 MiB request cap, leaving headroom for the protobuf envelope and the
// app_metadata.
const DefaultMaxFrameBytes = 10<<20 - 16<<10

// frame is one encoded IPC record batch ready to become a FlightData.
type frame struct {
	header []byte
	body   []byte
	rows   int64
}

func (f frame) size() int { return len(f.header) + len(f.body) }

// frameEncoder turns record batches into IPC frames no larger than maxBytes,
// slicing a batch into several frames when needed. It is safe for concurrent
// use: it holds no mutable state.
type frameEncoder struct {
	mem      memory.Allocator
	ipcOpts  []ipc.Option
	maxBytes int
}

func newFrameEncoder(compression string, maxBytes int) (*frameEncoder, error) {
	mem := memory.DefaultAllocator
	opts := []ipc.Option{ipc.WithAllocator(mem)}
	switch compression {
	case "", "none":
	case "lz4_frame", "lz4":
		opts = append(opts, ipc.WithLZ4())
	case "zstd":
		opts = append(opts, ipc.WithZstd())
	default:
		return nil, fmt.Errorf("unknown compression %q (want none, lz4_frame or zstd)", compression)
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxFrameBytes
	}
	return &frameEncoder{mem: mem, ipcOpts: opts, maxBytes: maxBytes}, nil
}

// schemaHeader returns the IPC schema message for FlightData #0.
func (e *frameEncoder) schemaHeader(schema *arrow.Schema) []byte {
	p := ipc.GetSchemaPayload(schema, e.mem)
	defer p.Release()
	meta := p.Meta()
	defer meta.Release()
	return bytes.Clone(meta.Bytes())
}

// encode returns the frames for rec. It first cuts the batch into chunks by
// its in-memory size, then halves any chunk whose encoded size still passes
// the cap. A single row above the cap is an error.
func (e *frameEncoder) encode(rec arrow.RecordBatch) ([]frame, error) {
	n := rec.NumRows()
	if n == 0 {
		return nil, nil
	}
	chunks := int64(1)
	if est := RecordBytes(rec); est > int64(e.maxBytes) {
		// Aim a little under the cap so most chunks need no second pass.
		target := int64(e.maxBytes) * 9 / 10
		chunks = (est + target - 1) / target
		if chunks > n {
			chunks = n
		}
	}
	per := (n + chunks - 1) / chunks
	frames := make([]frame, 0, chunks)
	for lo := int64(0); lo < n; lo += per {
		var err error
		if frames, err = e.encodeRange(frames, rec, lo, min(lo+per, n)); err != nil {
			return nil, err
		}
	}
	return frames, nil
}

func (e *frameEncoder) encodeRange(dst []frame, rec arrow.RecordBatch, lo, hi int64) ([]frame, error) {
	f, err := e.encodeSlice(rec, lo, hi)
	if err != nil {
		return nil, err
	}
	if f.size() <= e.maxBytes {
		return append(dst, f), nil
	}
	if hi-lo == 1 {
		return nil, fmt.Errorf("row %d encodes to %d bytes, above the %d byte request cap: %w", lo, f.size(), e.maxBytes, ErrRowTooLarge)
	}
	mid := lo + (hi-lo)/2
	if dst, err = e.encodeRange(dst, rec, lo, mid); err != nil {
		return nil, err
	}
	return e.encodeRange(dst, rec, mid, hi)
}

func (e *frameEncoder) encodeSlice(rec arrow.RecordBatch, lo, hi int64) (frame, error) {
	slice := rec
	if lo != 0 || hi != rec.NumRows() {
		slice = rec.NewSlice(lo, hi)
		defer slice.Release()
	}
	p, err := ipc.GetRecordBatchPayload(slice, e.ipcOpts...)
	if err != nil {
		return frame{}, fmt.Errorf("encode record batch rows [%d,%d): %w", lo, hi, err)
	}
	defer p.Release()
	meta := p.Meta()
	defer meta.Release()
	// Size the body exactly first (counting is free next to copying), so
	// serializing costs one copy and no buffer regrowth.
	var size byteCounter
	if err := p.SerializeBody(&size); err != nil {
		return frame{}, fmt.Errorf("size record batch body: %w", err)
	}
	body := bytes.NewBuffer(make([]byte, 0, int(size)))
	if err := p.SerializeBody(body); err != nil {
		return frame{}, fmt.Errorf("serialize record batch body: %w", err)
	}
	return frame{header: bytes.Clone(meta.Bytes()), body: body.Bytes(), rows: hi - lo}, nil
}

// RecordBytes estimates the in-memory size of rec from its buffers. Buffers
// shared with a larger parent count in full, so slices are overestimated;
// encodeRange corrects with the real encoded size.
func RecordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, col := range rec.Columns() {
		n += dataBytes(col.Data())
	}
	return n
}

func dataBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, child := range d.Children() {
		n += dataBytes(child)
	}
	return n
}

// byteCounter is an io.Writer that only counts.
type byteCounter int

func (c *byteCounter) Write(p []byte) (int, error) {
	*c += byteCounter(len(p))
	return len(p), nil
}

// ErrRowTooLarge means one row alone is above the request cap; it can never
// be ingested.
var ErrRowTooLarge = errors.New("row above the Zerobus request cap")
