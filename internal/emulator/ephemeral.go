package emulator

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
	"github.com/benthos-zerobus/benthos-zerobus/internal/zbpb"
)

// zerobusService is the record path, databricks.zerobus.Zerobus. Only JSON
// records are supported; PROTO streams are refused INVALID_ARGUMENT.
type zerobusService struct {
	zbpb.UnimplementedZerobusServer
	srv *Server
}

// EphemeralStream serves one record stream: create_stream first (answered
// with create_stream_response), then ingest_record / ingest_record_batch
// requests with offset_id 0, 1, 2, … acknowledged cumulatively with
// durability_ack_up_to_offset once durable.
func (zs *zerobusService) EphemeralStream(stream zbpb.Zerobus_EphemeralStreamServer) error {
	s := zs.srv
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()

	// With the table header, refuse a bad token or table before anything is
	// sent; the official SDK waits for response headers before create_stream.
	md, _ := metadata.FromIncomingContext(ctx)
	hasHeader := len(md.Get("x-databricks-zerobus-table-name")) > 0
	if hasHeader {
		if _, err := s.authorizeStream(ctx, ""); err != nil {
			return err
		}
	}
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return recvStatus(err, "reading create_stream")
	}
	create := first.GetCreateStream()
	if create == nil {
		// docs/protocol.md#record-path-ephemeralstream: the client sends
		// create_stream first.
		return status.Error(codes.InvalidArgument, "the first request of a stream must be create_stream")
	}
	t, err := s.authorizeStream(ctx, create.GetTableName())
	if err != nil {
		return err
	}
	switch create.GetRecordType() {
	case zbpb.RecordType_JSON:
	case zbpb.RecordType_PROTO:
		return status.Error(codes.InvalidArgument, "record_type PROTO is not supported by the emulator; use JSON")
	default:
		return status.Errorf(codes.InvalidArgument, "record_type %s is not supported; use JSON", create.GetRecordType())
	}
	schema, err := serviceSchema(t.Columns)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "table %s cannot be written by Zerobus: %v", t.FullName, err)
	}
	name := workspace.NormalizeName(t.FullName)
	f := s.currentFaults()
	release, ts, err := s.admitStream(t, f)
	if err != nil {
		return err
	}
	defer release()

	ss := newSession(ctx, s, name)
	ss.gone = ts.gone
	ss.tableID = ts.tableID
	ss.sendAck = func(off int64, _ uint64) error {
		return stream.Send(&zbpb.EphemeralStreamResponse{Payload: &zbpb.EphemeralStreamResponse_IngestRecordResponse{
			IngestRecordResponse: &zbpb.IngestRecordResponse{DurabilityAckUpToOffset: proto.Int64(off)}}})
	}
	ss.sendClose = func(_ int64, _ uint64, grace time.Duration) error {
		return stream.Send(&zbpb.EphemeralStreamResponse{Payload: &zbpb.EphemeralStreamResponse_CloseStreamSignal{
			CloseStreamSignal: &zbpb.CloseStreamSignal{Duration: durationpb.New(grace)}}})
	}
	streamID := workspace.NewUUID()
	ss.stat = s.stats.streamReady(name)
	defer s.stats.streamEnded(name, ss.stat)
	if err := stream.Send(&zbpb.EphemeralStreamResponse{Payload: &zbpb.EphemeralStreamResponse_CreateStreamResponse{
		CreateStreamResponse: &zbpb.CreateIngestStreamResponse{StreamId: proto.String(streamID)}}}); err != nil {
		return err
	}

	conv := newStorageConverter(t.Columns, schema)
	go ss.ackLoop()
	recvDone := make(chan error, 1)
	go func() { recvDone <- zs.recvLoop(stream, ss, t.Columns, conv, ts) }()
	return ss.end(ss.run(recvDone, f))
}

func (zs *zerobusService) recvLoop(stream zbpb.Zerobus_EphemeralStreamServer, ss *session, cols []typemap.Column,
	conv *storageConverter, ts *tableStore) error {
	s := zs.srv
	expected := int64(0)
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			ss.finish()
			return nil
		}
		if err != nil {
			return recvStatus(err, "reading an ingest request")
		}
		var (
			off     *int64
			records []string
		)
		switch p := req.GetPayload().(type) {
		case *zbpb.EphemeralStreamRequest_IngestRecord:
			off = p.IngestRecord.OffsetId
			if _, ok := p.IngestRecord.GetRecord().(*zbpb.IngestRecordRequest_JsonRecord); !ok {
				return status.Error(codes.InvalidArgument, "ingest_record on a JSON stream must carry json_record")
			}
			records = []string{p.IngestRecord.GetJsonRecord()}
		case *zbpb.EphemeralStreamRequest_IngestRecordBatch:
			off = p.IngestRecordBatch.OffsetId
			jb := p.IngestRecordBatch.GetJsonBatch()
			if jb == nil {
				return status.Error(codes.InvalidArgument, "ingest_record_batch on a JSON stream must carry json_batch")
			}
			records = jb.GetRecords()
		case *zbpb.EphemeralStreamRequest_CreateStream:
			return status.Error(codes.InvalidArgument, "create_stream sent twice on one stream")
		default:
			return status.Error(codes.InvalidArgument, "empty request payload")
		}
		if off == nil {
			return status.Error(codes.InvalidArgument, "offset_id is required")
		}
		f := s.currentFaults()
		if err := nextBatch(*off, &expected, f); err != nil {
			return err
		}
		if len(records) == 0 {
			return emptyBatchError("ingest_record_batch", *off)
		}
		if err := ss.admitQuota(f, int64(len(records)), int64(proto.Size(req))); err != nil {
			return err
		}
		s.stats.batch(ss.table, int64(len(records)))
		p := &pending{offset: *off, rows: int64(len(records)), recvAt: time.Now()}
		if f.AckOnly {
			p.done = ackedNow()
		} else {
			rec, err := jsonRecords(cols, conv.inSchema, records)
			if err != nil {
				return status.Errorf(codes.InvalidArgument, "offset %d: %v", *off, err)
			}
			stored, err := conv.convert(rec)
			rec.Release()
			if err != nil {
				return status.Errorf(codes.InvalidArgument, "offset %d: %v", *off, err)
			}
			p.done = ts.submit(stored)
		}
		if err := ss.enqueue(p); err != nil {
			return err
		}
	}
}
