package ingest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/benthos-zerobus/benthos-zerobus/internal/bufpool"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowipc"
)

// MaxRequestBytes is the service's cap on one ingest request (one FlightData
// message): 10 MiB (docs/protocol.md#endpoints). The official SDK says the
// server limits a decoded message to 10 MB (databricks/zerobus-sdk issue
// #36, 2025-12-25) and enforces 10 MiB client-side on record ingest calls
// (pull request #331, merged 2026-05-28, MAX_INGEST_PAYLOAD_BYTES; its
// Arrow Flight path splits batches into smaller chunks instead). This
// client's frames stay under it: DefaultMaxFrameBytes, ~2 MiB aimed at
// (TestMaxFrameBytesNeverAboveTheRequestCap).
const MaxRequestBytes = 10 << 20

// frameEnvelope is what one FlightData message adds around its IPC frame:
// the protobuf envelope and the app_metadata {"offset_id":N}, bounded
// generously.
const frameEnvelope = 16 << 10

// DefaultMaxFrameBytes is the largest IPC frame (header + body) a stream
// sends: one FlightData message then stays under MaxRequestBytes. Only a
// single row larger than FrameTargetBytes makes a frame this big.
const DefaultMaxFrameBytes = MaxRequestBytes - frameEnvelope

// FrameTargetBytes is the size the encoder aims at when it cuts a batch into
// frames: about 2 MiB, as the official SDK does, which also matches the
// flow-control window the service advertises per HTTP/2 stream (2 MiB, and
// 32 MiB per connection) so one frame never waits for the window to reopen
// mid-message (docs/protocol.md#endpoints; the window sizes are an assumption
// from the service's HTTP/2 SETTINGS as seen by a client). A frame
// holding a single row may exceed it, up to DefaultMaxFrameBytes.
const FrameTargetBytes = 2 << 20

// frame is one encoded IPC record batch ready to become a FlightData. Its
// two buffers come from the encoder's pool: env is the protobuf envelope
// so far (data_header's tag and length, then the IPC header, with room for
// what the send path appends, see flightCodec) and body the IPC body.
// Sending hands both to gRPC, which returns them to the pool once written;
// a frame that is not sent gives them back with release.
type frame struct {
	env, body *[]byte
	header    []byte // the IPC header, inside env
	rows      int64
}

func (f frame) size() int { return len(f.header) + len(*f.body) }

// release returns the buffers of a frame that will not be sent.
func (f *frame) release(pool *bufpool.Pool) {
	if f.env != nil {
		pool.Put(f.env)
		pool.Put(f.body)
		f.env, f.body, f.header = nil, nil, nil
	}
}

// releaseFrames releases every frame of frames.
func releaseFrames(frames []frame, pool *bufpool.Pool) {
	for i := range frames {
		frames[i].release(pool)
	}
}

// frameEncoder turns record batches into IPC frames of about targetBytes,
// never larger than maxBytes, slicing a batch into several frames when
// needed. It is safe for concurrent use: it holds no mutable state.
type frameEncoder struct {
	// pool holds the frames' buffers, reused across frames: gRPC frees a
	// frame's buffers into it once they are written.
	pool    *bufpool.Pool
	ipcOpts []ipc.Option
	// targetBytes is what a frame of several rows stays under; maxBytes is
	// what a frame of one row stays under (else the row is refused).
	targetBytes, maxBytes int
}

// defaultPoolIdle bounds the idle buffers of one client: a few frames of
// FrameTargetBytes per stream.
const defaultPoolIdle = 16 << 20

func newFrameEncoder(compression string, maxBytes, targetBytes int) (*frameEncoder, error) {
	opts := []ipc.Option{ipc.WithAllocator(memory.DefaultAllocator)}
	switch compression {
	case "", "none":
	case "lz4_frame", "lz4":
		opts = append(opts, ipc.WithLZ4())
	case "zstd":
		opts = append(opts, ipc.WithZstd())
	default:
		return nil, fmt.Errorf("unknown compression %q (want none, lz4_frame or zstd)", compression)
	}
	if maxBytes <= 0 || maxBytes > DefaultMaxFrameBytes {
		maxBytes = DefaultMaxFrameBytes
	}
	if targetBytes <= 0 {
		targetBytes = FrameTargetBytes
	}
	return &frameEncoder{pool: bufpool.New(defaultPoolIdle), ipcOpts: opts, targetBytes: min(targetBytes, maxBytes), maxBytes: maxBytes}, nil
}

// schemaHeader returns the IPC schema message for FlightData #0. It is
// written by arrowipc rather than arrow-go so that map columns carry the
// child names the service expects, entries/keys/values (arrow-go can only
// write entries/key/value); record batch messages carry no names, so
// arrow-go still encodes those. A type arrowipc does not support is an error
// naming the field.
func (e *frameEncoder) schemaHeader(schema *arrow.Schema) ([]byte, error) {
	msg, err := arrowipc.SchemaMessage(schema)
	if err != nil {
		return nil, fmt.Errorf("encode schema message: %w", err)
	}
	return msg, nil
}

// encode returns the frames for rec (see encodeEach), all encoded before it
// returns. On an error it returns none.
func (e *frameEncoder) encode(rec arrow.RecordBatch) ([]frame, error) {
	var frames []frame
	err := e.encodeEach(rec, func(f frame) error {
		frames = append(frames, f)
		return nil
	})
	if err != nil {
		releaseFrames(frames, e.pool)
		return nil, err
	}
	return frames, nil
}

// encodeEach cuts rec into frames and passes each to emit, in row order, as
// soon as it is encoded: a sender that sends each at once never holds the
// batch encoded as a whole. emit owns the frame it gets. It first cuts the
// batch into chunks by its in-memory size, aiming a little under
// targetBytes, then halves any chunk whose encoded size still passes
// targetBytes. A single row may take a frame up to maxBytes; above that it
// is an error wrapping ErrRowTooLarge (OversizedRowsSized finds such rows
// beforehand, so that they fail alone). It stops at the first error, emit's
// or its own.
func (e *frameEncoder) encodeEach(rec arrow.RecordBatch, emit func(frame) error) error {
	n := rec.NumRows()
	if n == 0 {
		return nil
	}
	chunks := int64(1)
	if est := arrowipc.RecordBytes(rec); est > int64(e.targetBytes) {
		// Aim a little under the target so most chunks need no second pass.
		aim := int64(e.targetBytes) * 9 / 10
		chunks = (est + aim - 1) / aim
		if chunks > n {
			chunks = n
		}
	}
	per := (n + chunks - 1) / chunks
	for lo := int64(0); lo < n; lo += per {
		if err := e.encodeRange(rec, lo, min(lo+per, n), emit); err != nil {
			return err
		}
	}
	return nil
}

func (e *frameEncoder) encodeRange(rec arrow.RecordBatch, lo, hi int64, emit func(frame) error) error {
	f, err := e.encodeSlice(rec, lo, hi)
	if err != nil {
		return err
	}
	size := f.size()
	if size <= e.targetBytes || (hi-lo == 1 && size <= e.maxBytes) {
		return emit(f)
	}
	// Too large: its buffers go back to the pool before the halves take
	// new ones.
	f.release(e.pool)
	if hi-lo == 1 {
		return fmt.Errorf("row %d encodes to %d bytes, above the %d byte request cap: %w", lo, size, e.maxBytes, ErrRowTooLarge)
	}
	mid := lo + (hi-lo)/2
	if err := e.encodeRange(rec, lo, mid, emit); err != nil {
		return err
	}
	return e.encodeRange(rec, mid, hi, emit)
}

// mayRefuse reports whether encoding rec could fail with ErrRowTooLarge:
// some row's size estimate, an upper bound of its frame plus frameEnvelope
// (see OversizedRowsSized), passes maxBytes plus frameEnvelope. When it reports
// false no row of rec can be refused. size is rec's arrowipc.RecordBytes.
func (e *frameEncoder) mayRefuse(rec arrow.RecordBatch, size int64) bool {
	return len(OversizedRowsSized(rec, size, e.maxBytes+frameEnvelope)) > 0
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
	// serializing costs one copy into a buffer of the right size.
	var size byteCounter
	if err := p.SerializeBody(&size); err != nil {
		return frame{}, fmt.Errorf("size record batch body: %w", err)
	}
	hdr := meta.Bytes()
	env := e.pool.Get(1 + binary.MaxVarintLen64 + len(hdr) + envelopeTail)
	b := append((*env)[:0], tagDataHeader)
	b = binary.AppendUvarint(b, uint64(len(hdr)))
	at := len(b)
	b = append(b, hdr...)
	*env = b
	body := e.pool.Get(int(size))
	w := fillWriter{buf: *body}
	err = p.SerializeBody(&w)
	if err == nil && w.n != len(w.buf) {
		err = fmt.Errorf("wrote %d of the %d counted bytes", w.n, len(w.buf))
	}
	if err != nil {
		e.pool.Put(env)
		e.pool.Put(body)
		return frame{}, fmt.Errorf("serialize record batch body: %w", err)
	}
	return frame{env: env, body: body, header: b[at:], rows: hi - lo}, nil
}

// fillWriter writes into buf, which has exactly the room needed.
type fillWriter struct {
	buf []byte
	n   int
}

func (w *fillWriter) Write(p []byte) (int, error) {
	if len(p) > len(w.buf)-w.n {
		return 0, fmt.Errorf("body grew past its %d counted bytes", len(w.buf))
	}
	w.n += copy(w.buf[w.n:], p)
	return len(p), nil
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
