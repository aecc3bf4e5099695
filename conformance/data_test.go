package conformance

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Scenario table shared by the node scripts (sdk_json.js / sdk_arrow.js
// generate exactly these rows) and the Go-client scenarios.
const (
	scenarioCols = "id BIGINT NOT NULL, name STRING, score DOUBLE, flag BOOLEAN"
)

// scenarioSchema is the Arrow schema the Flight server expects for scenarioCols.
var scenarioSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: false},
	{Name: "name", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "flag", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
}, nil)

// scenarioName is the expected value of column name for row id (nil = NULL).
func scenarioName(id int64) *string {
	if id%7 == 0 {
		return nil
	}
	s := fmt.Sprintf("name-%d", id)
	return &s
}

// scenarioBatch builds rows [start, start+n) of the scenario table.
func scenarioBatch(start, n int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, scenarioSchema)
	defer b.Release()
	for id := start; id < start+n; id++ {
		b.Field(0).(*array.Int64Builder).Append(id)
		if s := scenarioName(id); s != nil {
			b.Field(1).(*array.LargeStringBuilder).Append(*s)
		} else {
			b.Field(1).AppendNull()
		}
		b.Field(2).(*array.Float64Builder).Append(float64(id) / 2)
		b.Field(3).(*array.BooleanBuilder).Append(id%2 == 0)
	}
	return b.NewRecordBatch()
}

// Benchmark table: 10 columns, about 200 bytes of Arrow payload per row.
const benchCols = "id BIGINT NOT NULL, ts TIMESTAMP, qty INT, price DOUBLE, ok BOOLEAN, " +
	"user_id STRING, session STRING, url STRING, agent STRING, note STRING"

var benchSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: false},
	{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	{Name: "qty", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "price", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "ok", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "user_id", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "session", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "url", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "agent", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "note", Type: arrow.BinaryTypes.LargeString, Nullable: true},
}, nil)

// benchBatch builds rows [start, start+n) of the benchmark table.
func benchBatch(start, n int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, benchSchema)
	defer b.Release()
	for id := start; id < start+n; id++ {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(1_790_000_000_000_000 + id*1000))
		b.Field(2).(*array.Int32Builder).Append(int32(id % 1000))
		b.Field(3).(*array.Float64Builder).Append(float64(id%10000) / 100)
		b.Field(4).(*array.BooleanBuilder).Append(id%3 != 0)
		b.Field(5).(*array.LargeStringBuilder).Append(fmt.Sprintf("user-%010d", id%100_000))
		b.Field(6).(*array.LargeStringBuilder).Append(fmt.Sprintf("sess-%016x-%08x", id*2654435761, id))
		b.Field(7).(*array.LargeStringBuilder).Append(fmt.Sprintf("https://example.com/p/%08d?q=%d", id%50_000, id%97))
		b.Field(8).(*array.LargeStringBuilder).Append("Mozilla/5.0 (X11; Linux x86_64) bench")
		b.Field(9).(*array.LargeStringBuilder).Append(fmt.Sprintf("n%06d", id%1_000_000))
	}
	return b.NewRecordBatch()
}

// ipcStream encodes one record batch as a self-contained Arrow IPC stream
// (schema message, the batch, end-of-stream), the form the SDK's ingestBatch takes.
func ipcStream(t testing.TB, rec arrow.RecordBatch) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(rec.Schema()))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// writeIPCFile writes batches as [u32 LE length][IPC stream] records, the
// --ipc-file format sdk_arrow.js reads. It returns the total IPC bytes.
func writeIPCFile(t testing.TB, path string, recs []arrow.RecordBatch) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	var total int64
	for _, r := range recs {
		b := ipcStream(t, r)
		var n [4]byte
		binary.LittleEndian.PutUint32(n[:], uint32(len(b)))
		_, _ = w.Write(n[:])
		_, _ = w.Write(b)
		total += int64(len(b))
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return total
}
