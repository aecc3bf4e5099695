package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowipc"
	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
)

// flightService is Zerobus's Arrow Flight endpoint: DoPut only.
type flightService struct {
	flight.BaseFlightServer
	srv *Server
}

// admitStream takes a stream slot for the table (the concurrency cap) and
// opens its storage; release frees the slot. Both ingest paths start here.
//
// A table dropped meanwhile (after the stream's authorization described it)
// is refused NOT_FOUND, as a missing table is at open.
func (s *Server) admitStream(t workspace.Table, f *Faults) (release func(), ts *tableStore, err error) {
	name := workspace.NormalizeName(t.FullName)
	if f.OpenError != "" {
		if c, err := parseCode(f.OpenError); err == nil {
			s.stats.rejectStream(name)
			return nil, nil, status.Errorf(c, "stream open for table %s refused (injected open_error %s)", name, c)
		}
	}
	if !s.stats.openStream(name, f.MaxStreamsPerTable) {
		return nil, nil, status.Errorf(codes.ResourceExhausted,
			"too many concurrent streams for table %s (limit %d)", name, f.MaxStreamsPerTable)
	}
	release = func() { s.stats.closeStream(name) }
	ts, err = s.store(name)
	if err != nil {
		release()
		return nil, nil, status.Errorf(codes.Internal, "open table storage: %v", err)
	}
	if ts.tableID != t.TableID {
		release()
		return nil, nil, droppedStatus(name, t.TableID)
	}
	return release, ts, nil
}

// DoPut serves one Zerobus Arrow stream: headers are checked, the schema
// frame is validated against the table, the ready PutResult is sent, then
// each record batch frame (app_metadata {"offset_id":N}, N = 0, 1, 2, …) is
// stored and acknowledged cumulatively once durable.
func (fs *flightService) DoPut(stream flight.FlightService_DoPutServer) error {
	s := fs.srv
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()

	t, err := s.authorizeStream(ctx, "")
	if err != nil {
		return err
	}
	name := workspace.NormalizeName(t.FullName)
	f := s.currentFaults()
	release, ts, err := s.admitStream(t, f)
	if err != nil {
		return err
	}
	defer release()
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}

	capture := &schemaCapture{FlightService_DoPutServer: stream}
	rdr, err := flight.NewRecordReader(capture)
	if err != nil {
		return recvStatus(err, "reading the schema frame")
	}
	names, err := readFieldNames(capture.header)
	if err != nil {
		rdr.Release()
		return status.Errorf(codes.InvalidArgument, "reading the schema frame: %v", err)
	}
	probs, err := checkSchema(t.Columns, rdr.Schema(), names)
	if err != nil {
		rdr.Release()
		// A table Zerobus cannot write (e.g. an array of arrays): the
		// service refuses such streams; it is not worth retrying.
		return status.Errorf(codes.InvalidArgument, "table %s cannot be written by Zerobus: %v", t.FullName, err)
	}
	if len(probs) > 0 {
		rdr.Release()
		return schemaError(t, probs)
	}
	conv := newStorageConverter(t.Columns, rdr.Schema())

	ss := newSession(ctx, s, name)
	ss.gone = ts.gone
	ss.tableID = ts.tableID
	ss.sendAck = func(off int64, recs uint64) error {
		return stream.Send(&flight.PutResult{AppMetadata: fmt.Appendf(nil, `{"ack_up_to_offset":%d,"ack_up_to_records":%d}`, off, recs)})
	}
	ss.sendClose = func(off int64, recs uint64, grace time.Duration) error {
		return stream.Send(&flight.PutResult{AppMetadata: fmt.Appendf(nil,
			`{"ack_up_to_offset":%d,"ack_up_to_records":%d,"close_stream_duration_ms":%d}`, off, recs, grace.Milliseconds())})
	}
	// Counted before the send so a client that saw the ready signal always
	// finds its stream in Stats.
	ss.stat = s.stats.streamReady(name)
	defer s.stats.streamEnded(name, ss.stat)
	if err := stream.Send(&flight.PutResult{AppMetadata: []byte(`{"ack_up_to_offset":-1,"ack_up_to_records":0}`)}); err != nil {
		rdr.Release()
		return err
	}
	s.log.Debug("flight stream ready", "table", name, "schema", rdr.Schema().String())

	go ss.ackLoop()
	recvDone := make(chan error, 1)
	go func() {
		// The reader is owned here: the handler may return (and the stream
		// be cancelled) while Recv is still blocked.
		defer rdr.Release()
		recvDone <- fs.recvLoop(ss, capture, rdr, conv, ts)
	}()
	return ss.end(ss.run(recvDone, f))
}

func (fs *flightService) recvLoop(ss *session, capture *schemaCapture, rdr *flight.Reader, conv *storageConverter, ts *tableStore) (err error) {
	s := fs.srv
	defer recoverStream(s.log, ss.table, &err)
	expected := int64(0)
	for {
		f := s.currentFaults()
		if f.AckOnly {
			// Ack-only (a benchmark's baseline, not the service): a record
			// batch frame is counted from its IPC header and acked without
			// decoding its body, so the emulator costs the client's
			// machine about what an ack from the real service would. A
			// frame it cannot count that way goes to the reader below.
			fd, err := capture.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return recvStatus(err, "malformed Flight data")
			}
			if rows, ok := arrowipc.RecordBatchRows(fd.GetDataHeader()); ok {
				// Nothing reads the body from here on: its buffer
				// goes to the next frame (releaseFrameBody).
				releaseFrameBody(fd)
				off, err := fs.checkFrame(fd.GetAppMetadata(), &expected, f)
				if err != nil {
					return err
				}
				if rows == 0 {
					return emptyBatchError("record batch", off)
				}
				if err := ss.admitQuota(f, rows, capture.frameBytes); err != nil {
					return err
				}
				s.stats.batch(ss.table, rows)
				if err := ss.enqueue(&pending{offset: off, rows: rows, recvAt: time.Now(), done: ackedNow()}); err != nil {
					return err
				}
				continue
			}
			capture.held = fd
		}
		if !rdr.Next() {
			break
		}
		rec := rdr.RecordBatch()
		off, err := fs.checkFrame(rdr.LatestAppMetadata(), &expected, f)
		if err != nil {
			return err
		}
		// Refused: an empty batch (emptyBatchError has the sources).
		if rec.NumRows() == 0 {
			return emptyBatchError("record batch", off)
		}
		// Nothing reads a value before the batch is valid (validateBatch).
		if err := validateBatch(rec); err != nil {
			return status.Errorf(codes.InvalidArgument, "offset %d: %v", off, err)
		}
		if err := conv.checkNulls(rec); err != nil {
			return status.Errorf(codes.InvalidArgument, "offset %d: %v", off, err)
		}
		rows := rec.NumRows()
		if err := ss.admitQuota(f, rows, capture.frameBytes); err != nil {
			return err
		}
		s.stats.batch(ss.table, rows)
		p := &pending{offset: off, rows: rows, recvAt: time.Now()}
		if f.AckOnly {
			p.done = ackedNow()
		} else {
			if err := conv.checkNested(rec); err != nil {
				return status.Errorf(codes.InvalidArgument, "offset %d: %v", off, err)
			}
			stored, err := conv.convert(rec)
			if err != nil {
				return status.Errorf(codes.InvalidArgument, "offset %d: %v", off, err)
			}
			p.done = ts.submit(stored)
		}
		if err := ss.enqueue(p); err != nil {
			return err
		}
	}
	if err := rdr.Err(); err != nil {
		return recvStatus(err, "malformed Flight data")
	}
	ss.finish()
	return nil
}

// checkFrame reads a record batch frame's offset (app_metadata
// {"offset_id":N}) and checks it as nextBatch does.
func (fs *flightService) checkFrame(meta []byte, expected *int64, f *Faults) (int64, error) {
	off, err := parseOffset(meta)
	if err != nil {
		return 0, status.Errorf(codes.InvalidArgument, "record batch frame %d: %v", *expected, err)
	}
	return off, nextBatch(off, expected, f)
}

// parseOffset reads {"offset_id":N} from a record batch frame's app_metadata.
// The form every client sends is read directly (a JSON decoder per frame was
// a few percent of what --ack-only costs); any other goes to
// parseOffsetJSON, which decides, so the result is the same (checked by
// FuzzParseOffset).
func parseOffset(meta []byte) (int64, error) {
	const prefix = `{"offset_id":`
	if digits, ok := bytes.CutPrefix(meta, []byte(prefix)); ok && len(digits) > 0 && digits[len(digits)-1] == '}' {
		if n, ok := jsonInt64(digits[:len(digits)-1]); ok {
			return n, nil
		}
	}
	return parseOffsetJSON(meta)
}

// jsonInt64 reads b when it is a JSON number without fraction or exponent,
// -?(0|[1-9][0-9]*), that fits an int64.
func jsonInt64(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 || b[0] == '0' && len(b) > 1 {
		return 0, false
	}
	var n uint64 // at most 19 digits: no overflow
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	switch {
	case neg && n <= 1<<63:
		return int64(-n), true
	case !neg && n < 1<<63:
		return int64(n), true
	}
	return 0, false
}

// parseOffsetJSON is parseOffset for any app_metadata.
func parseOffsetJSON(meta []byte) (int64, error) {
	if len(meta) == 0 {
		return 0, fmt.Errorf(`app_metadata {"offset_id":N} is missing`)
	}
	var m struct {
		OffsetID *int64 `json:"offset_id"`
	}
	dec := json.NewDecoder(bytes.NewReader(meta))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return 0, fmt.Errorf("app_metadata is not JSON: %v", err)
	}
	if m.OffsetID == nil {
		return 0, fmt.Errorf("app_metadata %s has no offset_id", compactJSON(meta))
	}
	return *m.OffsetID, nil
}
