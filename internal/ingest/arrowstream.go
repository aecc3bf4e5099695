package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowipc"
)

// Metadata keys every Zerobus call carries.
const (
	HeaderAuthorization = "authorization"
	HeaderTableName     = "x-databricks-zerobus-table-name"
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

// ackMessage is the PutResult app_metadata the service sends.
type ackMessage struct {
	AckUpToOffset         int64   `json:"ack_up_to_offset"`
	AckUpToRecords        uint64  `json:"ack_up_to_records"`
	CloseStreamDurationMs *uint64 `json:"close_stream_duration_ms,omitempty"`
}

// flightConn is one DoPut call: one physical connection-level stream. Its
// wire offsets and row counts start at 0. Sends are serialized by the owning
// logical stream; the reader goroutine delivers acks to it.
type flightConn struct {
	connState
	call flight.FlightService_DoPutClient
	// base is the logical row position of the first row sent on this
	// connection: rows durable before it opened.
	base uint64

	nextOffset int64         // next offset_id; guarded by the stream's sendMu
	rowsSent   atomic.Uint64 // rows handed to Send, counted before Send
}

// sentUpTo is the logical position after the last row sent on c.
func (c *flightConn) sentUpTo() uint64 { return c.base + c.rowsSent.Load() }

// send writes frames with consecutive offset_ids. The caller holds the
// stream's sendMu.
func (c *flightConn) send(frames []frame) error {
	var fd flight.FlightData
	for _, f := range frames {
		fd.DataHeader = f.header
		fd.DataBody = f.body
		fd.AppMetadata = strconv.AppendInt([]byte(`{"offset_id":`), c.nextOffset, 10)
		fd.AppMetadata = append(fd.AppMetadata, '}')
		c.rowsSent.Add(uint64(f.rows))
		if err := c.call.Send(&fd); err != nil {
			c.broken.Store(true)
			return fmt.Errorf("send frame offset %d: %w", c.nextOffset, err)
		}
		c.nextOffset++
	}
	return nil
}

// connParams are what opening one connection needs.
type connParams struct {
	client      flight.FlightServiceClient
	token       TokenSource
	table       string
	schemaFrame []byte
	ready       time.Duration
}

// openFlightConn starts a DoPut call, sends the schema frame and waits for the
// ready signal. Errors are classified *Error (see withFreshToken).
func openFlightConn(ctx context.Context, p connParams, gen uint64) (*flightConn, error) {
	return withFreshToken(p.token, func() (*flightConn, error) { return openFlightConnOnce(ctx, p, gen) })
}

func openFlightConnOnce(ctx context.Context, p connParams, gen uint64) (*flightConn, error) {
	callCtx, cancel, stop, err := callContext(ctx, p.token, p.table)
	if err != nil {
		return nil, err
	}
	call, err := p.client.DoPut(callCtx)
	if err != nil {
		cancel()
		stop()
		return nil, fmt.Errorf("start DoPut for %s: %w", p.table, err)
	}
	isReady := func(res *flight.PutResult) error {
		ack, err := parseAck(res.GetAppMetadata())
		if err != nil {
			return err
		}
		if ack.AckUpToOffset != -1 || ack.AckUpToRecords != 0 {
			return poisonf("first PutResult on %s is not the ready signal: offset %d records %d", p.table, ack.AckUpToOffset, ack.AckUpToRecords)
		}
		return nil
	}
	if _, err := firstResponse(ctx, call, &flight.FlightData{DataHeader: p.schemaFrame}, isReady,
		cancel, stop, p.ready, p.table, "schema", "ready signal"); err != nil {
		return nil, err
	}
	return &flightConn{
		connState: connState{gen: gen, cancel: cancel, closeSend: call.CloseSend, done: make(chan struct{})},
		call:      call,
	}, nil
}

func parseAck(b []byte) (*ackMessage, error) {
	var ack ackMessage
	if err := json.Unmarshal(b, &ack); err != nil {
		return nil, poisonf("decode PutResult app_metadata %q: %w", truncate(string(b), 200), err)
	}
	return &ack, nil
}
