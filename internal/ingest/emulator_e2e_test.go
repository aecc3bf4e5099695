package ingest_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
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

// failureCounter counts the reconnects caused by something other than a
// rotation: the failed connections.
type failureCounter struct {
	ingest.NopObserver
	n atomic.Int64
}

func (f *failureCounter) OnReconnect(_ string, reason error) {
	if !ingest.Classify(reason).IsRotation() {
		f.n.Add(1)
	}
}

// maxInflight bounds the batches a stream keeps unacked in the rotation
// tests, so that what one failed connection can leave stored but unacked is
// bounded too.
const maxInflight = 5

// writeAcrossRotations submits rows ids [0, rows) in batches of per rows,
// pacing them over about span, drains the stream and returns how many
// stored rows are duplicates and how many connections failed (reconnects
// other than rotations); it fails the test if any row is missing.
func writeAcrossRotations(t *testing.T, srv *emulator.Server, rows, per int64, span time.Duration) (duplicates, failures int64, reconnects int) {
	t.Helper()
	obs := &failureCounter{}
	c := e2eClient(t, srv, func(cfg *ingest.Config) {
		cfg.Observer = obs
		cfg.MaxInflightBatches = maxInflight
		cfg.RecoveryAttempts = 10 // 5 % of resent batches fail too
	})
	s, err := c.OpenArrowStream(ctxTimeout(t, 10*time.Second), e2eTable, e2eSchema)
	require.NoError(t, err)
	defer s.Close()
	pause := span / time.Duration(rows/per)
	for from := int64(0); from < rows; from += per {
		b := e2eBatch(from, min(per, rows-from))
		_, err := s.Submit(ctxTimeout(t, 30*time.Second), b)
		b.Release()
		require.NoError(t, err, "submit never fails for a rotation or a transient error")
		time.Sleep(pause)
	}
	require.NoError(t, s.Drain(ctxTimeout(t, 60*time.Second)))
	ids := storedIDs(t, srv)
	for i := int64(0); i < rows; i++ {
		require.GreaterOrEqual(t, ids[i], 1, "row %d acknowledged durable but not stored", i)
		duplicates += int64(ids[i] - 1)
	}
	require.Len(t, ids, int(rows), "only the ids sent are stored")
	return duplicates, obs.n.Load(), s.Reconnects()
}

// TestEmulatorRotationWithoutDuplicates: the emulator rotates the stream
// every second (close signal, then UNAVAILABLE 6002 once the 2 s grace is
// over) while 20,000 rows flow. The stream stops sending on the rotating
// connection, waits for its acks, half-closes and only then resends what is
// still unacked on the next one, so nothing is stored twice.
func TestEmulatorRotationWithoutDuplicates(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{StreamLifetime: time.Second})
	const rows = 20_000
	dups, failures, reconnects := writeAcrossRotations(t, srv, rows, 100, 4*time.Second)
	t.Logf("rotation every 1 s: %d rows, %d reconnects, %d duplicates", rows, reconnects, dups)
	assert.GreaterOrEqual(t, reconnects, 3, "the emulator rotated the stream several times")
	assert.Zero(t, failures, "every reconnect was a rotation")
	assert.Zero(t, dups, "a graceful rotation stores nothing twice")
}

// TestEmulatorRotationAndUnavailableDuplicates adds 5 % UNAVAILABLE per
// batch (resent batches included) to the rotation. Nothing may be lost;
// duplicates are allowed (at-least-once): when the emulator fails a call it
// has stored batches it has not acked yet, and the stream must resend them.
// So each failed connection duplicates at most what was in flight on it,
// never rows acked before.
func TestEmulatorRotationAndUnavailableDuplicates(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{StreamLifetime: time.Second, ErrorRate: map[string]float64{"UNAVAILABLE": 0.05}})
	const rows, per = 20_000, 100
	dups, failures, reconnects := writeAcrossRotations(t, srv, rows, per, 4*time.Second)
	t.Logf("rotation every 1 s + 5%% UNAVAILABLE: %d rows, %d reconnects (%d failures), %d duplicates (%.1f%% of stored rows)",
		rows, reconnects, failures, dups, 100*float64(dups)/float64(rows+dups))
	assert.LessOrEqual(t, dups, failures*maxInflight*per, "at most the rows in flight are stored twice per failed connection")
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
