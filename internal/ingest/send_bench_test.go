package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowipc"
)

// ackingFlightServer acks every batch frame as soon as it arrives, without
// decoding it: the server's side costs as little as it can, so the send
// benchmark measures the client.
type ackingFlightServer struct {
	flight.BaseFlightServer
}

func (*ackingFlightServer) DoPut(stream flight.FlightService_DoPutServer) error {
	if _, err := stream.Recv(); err != nil { // the schema frame
		return err
	}
	if err := stream.Send(&flight.PutResult{AppMetadata: []byte(`{"ack_up_to_offset":-1,"ack_up_to_records":0}`)}); err != nil {
		return err
	}
	var rows uint64
	var meta []byte
	for offset := int64(0); ; offset++ {
		fd, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		n, ok := arrowipc.RecordBatchRows(fd.DataHeader)
		if !ok {
			return fmt.Errorf("frame %d is not an IPC record batch", offset)
		}
		rows += uint64(n)
		meta = strconv.AppendInt(append(meta[:0], `{"ack_up_to_offset":`...), offset, 10)
		meta = strconv.AppendUint(append(meta, `,"ack_up_to_records":`...), rows, 10)
		meta = append(meta, '}')
		if err := stream.Send(&flight.PutResult{AppMetadata: meta}); err != nil {
			return err
		}
	}
}

// startAckingServer serves ackingFlightServer on a loopback port and returns
// its http:// endpoint.
func startAckingServer(tb testing.TB) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	flight.RegisterFlightServiceServer(gs, &ackingFlightServer{})
	go func() { _ = gs.Serve(lis) }()
	tb.Cleanup(gs.Stop)
	return "http://" + lis.Addr().String()
}

// BenchmarkSendFrames measures the client's send path: each op submits one
// batch of about 4 MiB (4,000 rows of 1 KiB, cut into two or three frames)
// and waits until it is durable, over loopback gRPC to a server that acks
// without decoding. B/op and allocs/op are the client's and the server's
// together (one process); the difference between two versions of the
// client is the client's.
func BenchmarkSendFrames(b *testing.B) {
	for _, codec := range []string{"none", "lz4_frame"} {
		b.Run(codec, func(b *testing.B) {
			cfg := Config{
				Endpoint:         startAckingServer(b),
				Token:            StaticToken("bench"),
				Compression:      codec,
				ReadyTimeout:     5 * time.Second,
				RecoveryAttempts: 2,
				RecoveryBackoff:  10 * time.Millisecond,
			}
			c, err := NewClient(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			s, err := c.Open(ctx, "main.default.bench", testSchema)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			rec := makeBatch(0, 4000, 1<<10)
			defer rec.Release()
			b.SetBytes(arrowipc.RecordBytes(rec))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				span, err := s.Submit(ctx, rec)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.WaitDurable(ctx, span.To); err != nil {
					b.Fatal(fmt.Errorf("wait for rows [%d,%d): %w", span.From, span.To, err))
				}
			}
		})
	}
}
