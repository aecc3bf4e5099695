package ingest_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
)

// End-to-end tests of the client against the emulator over real sockets,
// with real OAuth, real storage and the emulator's fault injection.

const e2eTable = "main.default.events"

var e2eSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.LargeString, Nullable: true},
}, nil)

func startEmulator(t *testing.T, faults emulator.Faults) *emulator.Server {
	t.Helper()
	srv, err := emulator.Start(emulator.Config{
		HTTPAddr: "127.0.0.1:0",
		GRPCAddr: "127.0.0.1:0",
		Tables:   []string{e2eTable + ":id BIGINT NOT NULL, name STRING"},
		Faults:   faults,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

func e2eClient(t *testing.T, srv *emulator.Server, mutate func(*ingest.Config)) *ingest.Client {
	t.Helper()
	cfg := ingest.Config{
		Endpoint:         srv.GRPCURL(),
		WorkspaceURL:     srv.HTTPURL(),
		ClientID:         emulator.DefaultClientID,
		ClientSecret:     emulator.DefaultClientSecret,
		ReadyTimeout:     5 * time.Second,
		RecoveryBackoff:  20 * time.Millisecond,
		RecoveryAttempts: 4,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := ingest.NewClient(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func e2eBatch(from, n int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, e2eSchema)
	defer b.Release()
	for i := from; i < from+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(i)
		b.Field(1).(*array.LargeStringBuilder).Append("row-" + strconv.FormatInt(i, 10))
	}
	return b.NewRecordBatch()
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// storedIDs reads back the ids the emulator stored, with their counts.
func storedIDs(t *testing.T, srv *emulator.Server) map[int64]int {
	t.Helper()
	rows, err := srv.TableRows(e2eTable, 0)
	require.NoError(t, err)
	out := map[int64]int{}
	for _, r := range rows {
		id, err := strconv.ParseInt(fmt.Sprint(r["id"]), 10, 64)
		require.NoError(t, err, "id %v", r["id"])
		out[id]++
	}
	return out
}

func TestEmulatorArrowStreamEndToEnd(t *testing.T) {
	for _, codec := range []string{"none", "lz4_frame", "zstd"} {
		t.Run(codec, func(t *testing.T) {
			srv := startEmulator(t, emulator.Faults{})
			c := e2eClient(t, srv, func(cfg *ingest.Config) { cfg.Compression = codec })
			s, err := c.Open(ctxTimeout(t, 10*time.Second), e2eTable, e2eSchema)
			require.NoError(t, err)
			defer s.Close()
			const batches, rows = 5, 200
			for i := int64(0); i < batches; i++ {
				b := e2eBatch(i*rows, rows)
				_, err := s.Submit(context.Background(), b)
				b.Release()
				require.NoError(t, err)
			}
			require.NoError(t, s.Drain(ctxTimeout(t, 10*time.Second)))
			assert.Equal(t, uint64(batches*rows), s.Durable())
			n, err := srv.TableRowCount(e2eTable)
			require.NoError(t, err)
			assert.Equal(t, int64(batches*rows), n, "durable means stored")
			ids := storedIDs(t, srv)
			for i := int64(0); i < batches*rows; i++ {
				assert.Equal(t, 1, ids[i], "row %d stored once", i)
			}
		})
	}
}

// TestEmulatorRotationLosesNothing: the emulator rotates streams every few
// hundred milliseconds while batches flow; every row must be stored.
func TestEmulatorRotationLosesNothing(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{StreamLifetime: 250 * time.Millisecond, RotationGrace: 100 * time.Millisecond})
	c := e2eClient(t, srv, nil)
	s, err := c.Open(ctxTimeout(t, 10*time.Second), e2eTable, e2eSchema)
	require.NoError(t, err)
	defer s.Close()

	var total int64
	deadline := time.Now().Add(1200 * time.Millisecond)
	for time.Now().Before(deadline) {
		b := e2eBatch(total, 50)
		_, err := s.Submit(context.Background(), b)
		b.Release()
		require.NoError(t, err)
		total += 50
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, s.Drain(ctxTimeout(t, 20*time.Second)))
	assert.Equal(t, uint64(total), s.Durable())
	assert.GreaterOrEqual(t, s.(*ingest.ArrowStream).Reconnects(), 2, "the emulator rotated the stream")
	ids := storedIDs(t, srv)
	for i := int64(0); i < total; i++ {
		assert.GreaterOrEqual(t, ids[i], 1, "row %d stored", i)
	}
}

func TestEmulatorJSONStream(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{})
	c := e2eClient(t, srv, nil)
	s, err := c.OpenJSONStream(ctxTimeout(t, 10*time.Second), e2eTable)
	require.NoError(t, err)
	defer s.Close()
	var last int64
	for i := 0; i < 10; i++ {
		recs := []string{fmt.Sprintf(`{"id":%d,"name":"a"}`, 2*i), fmt.Sprintf(`{"id":%d}`, 2*i+1)}
		if i == 0 {
			recs = recs[:1]
		}
		last, err = s.Ingest(context.Background(), recs)
		require.NoError(t, err)
	}
	require.NoError(t, s.WaitForOffset(ctxTimeout(t, 10*time.Second), last))
	n, err := srv.TableRowCount(e2eTable)
	require.NoError(t, err)
	assert.Equal(t, int64(19), n)
}

// TestEmulatorJSONStreamRotationLosesNothing: the emulator rotates JSON
// streams every few hundred milliseconds while requests flow; the stream
// must reconnect by itself, keep its offsets monotonic, and every record
// must be stored.
func TestEmulatorJSONStreamRotationLosesNothing(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{StreamLifetime: 200 * time.Millisecond, RotationGrace: 100 * time.Millisecond})
	c := e2eClient(t, srv, nil)
	s, err := c.OpenJSONStream(ctxTimeout(t, 10*time.Second), e2eTable)
	require.NoError(t, err)
	defer s.Close()

	const records, perRequest = 3000, 10
	last := int64(-1)
	for from := 0; from < records; from += perRequest {
		recs := make([]string, 0, perRequest)
		for id := from; id < from+perRequest; id++ {
			recs = append(recs, fmt.Sprintf(`{"id":%d,"name":"row-%d"}`, id, id))
		}
		off, err := s.Ingest(ctxTimeout(t, 10*time.Second), recs)
		require.NoError(t, err, "ingest never refuses for a rotation")
		require.Equal(t, last+1, off, "offsets are consecutive across rotations")
		last = off
		time.Sleep(3 * time.Millisecond) // spread the run over several stream lifetimes
	}
	require.NoError(t, s.WaitForOffset(ctxTimeout(t, 30*time.Second), last))
	assert.Equal(t, last, s.Acked())
	assert.GreaterOrEqual(t, s.Reconnects(), 2, "the emulator rotated the stream")
	ids := storedIDs(t, srv)
	for i := int64(0); i < records; i++ {
		assert.GreaterOrEqual(t, ids[i], 1, "record %d stored", i)
	}
}

func TestEmulatorErrorClasses(t *testing.T) {
	t.Run("wrong secret is fatal config", func(t *testing.T) {
		srv := startEmulator(t, emulator.Faults{})
		// A distinctive secret: the refusal message legitimately says "wrong".
		c := e2eClient(t, srv, func(cfg *ingest.Config) { cfg.ClientSecret = "wr0ng-s3cr3t" })
		_, err := c.Open(ctxTimeout(t, 10*time.Second), e2eTable, e2eSchema)
		class, ok := ingest.ClassOf(err)
		require.True(t, ok, "%v", err)
		assert.Equal(t, ingest.FatalConfig, class)
		assert.NotContains(t, err.Error(), "wr0ng-s3cr3t")
		assert.True(t, ingest.IsPermanent(err))
		assert.Contains(t, err.Error(), `refused the OAuth client credentials of client_id "emulator"`)
	})
	t.Run("missing table is fatal config", func(t *testing.T) {
		srv := startEmulator(t, emulator.Faults{})
		c := e2eClient(t, srv, nil)
		_, err := c.Open(ctxTimeout(t, 10*time.Second), "main.default.missing", e2eSchema)
		class, _ := ingest.ClassOf(err)
		assert.Equal(t, ingest.FatalConfig, class, "%v", err)
	})
	t.Run("schema mismatch carries causes", func(t *testing.T) {
		srv := startEmulator(t, emulator.Faults{})
		c := e2eClient(t, srv, nil)
		wrong := arrow.NewSchema([]arrow.Field{
			{Name: "id", Type: arrow.PrimitiveTypes.Int64},
			{Name: "extra", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		}, nil)
		_, err := c.Open(ctxTimeout(t, 10*time.Second), e2eTable, wrong)
		var ze *ingest.Error
		require.ErrorAs(t, err, &ze)
		assert.Equal(t, ingest.FatalConfig, ze.Class)
		assert.True(t, ze.IsSchemaMismatch())
		assert.NotEmpty(t, ze.Causes)
	})
	t.Run("stream cap is a concurrency reject", func(t *testing.T) {
		srv := startEmulator(t, emulator.Faults{MaxStreamsPerTable: 1})
		c := e2eClient(t, srv, nil)
		s, err := c.Open(ctxTimeout(t, 10*time.Second), e2eTable, e2eSchema)
		require.NoError(t, err)
		defer s.Close()
		_, err = c.Open(ctxTimeout(t, 10*time.Second), e2eTable, e2eSchema)
		var ze *ingest.Error
		require.ErrorAs(t, err, &ze)
		assert.Equal(t, ingest.ConcurrencyReject, ze.Class)
		assert.Positive(t, ze.RetryAfter)
	})
}

// benchSchema is ten columns, about 200 bytes a row.
var benchSchema = func() *arrow.Schema {
	var fields []arrow.Field
	for i := 0; i < 5; i++ {
		fields = append(fields, arrow.Field{Name: fmt.Sprintf("n%d", i), Type: arrow.PrimitiveTypes.Int64, Nullable: true})
		fields = append(fields, arrow.Field{Name: fmt.Sprintf("s%d", i), Type: arrow.BinaryTypes.LargeString, Nullable: true})
	}
	return arrow.NewSchema(fields, nil)
}()

func benchBatch(rows int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, benchSchema)
	defer b.Release()
	for r := 0; r < rows; r++ {
		for i := 0; i < 5; i++ {
			b.Field(2 * i).(*array.Int64Builder).Append(int64(r * i))
			b.Field(2*i + 1).(*array.LargeStringBuilder).Append(fmt.Sprintf("value-%08d-%02d-padding-padding", r, i))
		}
	}
	return b.NewRecordBatch()
}

// BenchmarkEmulatorArrowAckOnly pushes pre-built 8k-row batches through one
// logical stream to the emulator in ack-only mode.
func BenchmarkEmulatorArrowAckOnly(b *testing.B) {
	for _, codec := range []string{"none", "lz4_frame"} {
		b.Run(codec, func(b *testing.B) {
			srv, err := emulator.Start(emulator.Config{
				HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
				Tables: []string{"main.default.bench:n0 BIGINT, s0 STRING, n1 BIGINT, s1 STRING, n2 BIGINT, s2 STRING, n3 BIGINT, s3 STRING, n4 BIGINT, s4 STRING"},
				Faults: emulator.Faults{AckOnly: true},
			})
			require.NoError(b, err)
			defer srv.Close()
			c, err := ingest.NewClient(ingest.Config{
				Endpoint: srv.GRPCURL(), WorkspaceURL: srv.HTTPURL(),
				ClientID: emulator.DefaultClientID, ClientSecret: emulator.DefaultClientSecret,
				Compression: codec,
			})
			require.NoError(b, err)
			defer c.Close()
			s, err := c.Open(context.Background(), "main.default.bench", benchSchema)
			require.NoError(b, err)
			defer s.Close()
			batch := benchBatch(8192)
			defer batch.Release()
			var rowBytes int64
			for _, col := range batch.Columns() {
				for _, buf := range col.Data().Buffers() {
					if buf != nil {
						rowBytes += int64(buf.Len())
					}
				}
			}
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if _, err := s.Submit(context.Background(), batch); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Drain(context.Background()); err != nil {
				b.Fatal(err)
			}
			secs := time.Since(start).Seconds()
			b.ReportMetric(float64(b.N)*8192/secs, "rows/s")
			b.ReportMetric(float64(b.N)*float64(rowBytes)/secs/1e6, "MB/s")
		})
	}
}
