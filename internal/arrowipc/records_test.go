package arrowipc

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// recordsSchema is the nested part of what typemap produces, with VARIANT's
// binary struct, for record batches written by arrow-go.
var recordsSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "m", Type: arrow.MapOf(arrow.BinaryTypes.LargeString, arrow.PrimitiveTypes.Int64), Nullable: true},
	{Name: "ms", Type: arrow.MapOf(arrow.PrimitiveTypes.Int32, arrow.StructOf(
		arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Float64, Nullable: true})), Nullable: true},
	{Name: "st", Type: arrow.StructOf(
		arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32},
		arrow.Field{Name: "l", Type: arrow.ListOf(arrow.StructOf(
			arrow.Field{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true})), Nullable: true},
		arrow.Field{Name: "mb", Type: arrow.MapOf(arrow.PrimitiveTypes.Int8, arrow.BinaryTypes.LargeBinary), Nullable: true},
	), Nullable: true},
	{Name: "v", Type: arrow.StructOf(
		arrow.Field{Name: "metadata", Type: arrow.BinaryTypes.LargeBinary},
		arrow.Field{Name: "value", Type: arrow.BinaryTypes.LargeBinary}), Nullable: true},
	{Name: "d", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
}, nil)

const recordsJSON = `[
 {"id": 1, "m": [{"key": "a", "value": 1}, {"key": "b", "value": null}],
  "ms": [{"key": 7, "value": {"x": 1.5}}, {"key": 8, "value": null}],
  "st": {"a": 3, "l": [{"ts": 1700000000000000}, null, {"ts": null}], "mb": [{"key": -1, "value": "AAEC"}]},
  "v": {"metadata": "AQAA", "value": "DA=="}, "d": 19000},
 {"id": 2, "m": null, "ms": [], "st": null, "v": null, "d": null},
 {"id": 3, "m": [], "ms": null, "st": {"a": -4, "l": [], "mb": null}, "v": {"metadata": "AQAA", "value": "AA=="}, "d": 1}
]`

func recordsBatch(t *testing.T) arrow.RecordBatch {
	t.Helper()
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, recordsSchema, strings.NewReader(recordsJSON))
	if err != nil {
		t.Fatal(err)
	}
	if rec.NumRows() != 3 {
		t.Fatalf("records fixture has %d rows, want 3", rec.NumRows())
	}
	return rec
}

// flightData is a flight.DataStreamReader over prepared FlightData messages,
// the shape the emulator's DoPut handler reads.
type flightData []*flight.FlightData

func (f *flightData) Recv() (*flight.FlightData, error) {
	if len(*f) == 0 {
		return nil, io.EOF
	}
	fd := (*f)[0]
	*f = (*f)[1:]
	return fd, nil
}

// TestArrowGoReadsRecordBatchesAfterOurSchema checks that arrow-go's readers,
// the ones the emulator uses, accept our schema message (canonical map names)
// and decode the record batch messages arrow-go writes after it, compressed
// or not, equal to what was written.
func TestArrowGoReadsRecordBatchesAfterOurSchema(t *testing.T) {
	rec := recordsBatch(t)
	defer rec.Release()
	schemaMsg, err := SchemaMessage(recordsSchema)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts []ipc.Option
	}{{"none", nil}, {"zstd", []ipc.Option{ipc.WithZstd()}}, {"lz4", []ipc.Option{ipc.WithLZ4()}}} {
		t.Run(tc.name, func(t *testing.T) {
			// Two frames: the whole batch and a slice, as the client cuts them.
			slice := rec.NewSlice(1, 3)
			defer slice.Release()
			batches := []arrow.RecordBatch{rec, slice}

			frames := flightData{{DataHeader: schemaMsg}}
			var stream bytes.Buffer
			encapsulate(&stream, schemaMsg)
			for _, b := range batches {
				p, err := ipc.GetRecordBatchPayload(b, tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				meta := p.Meta()
				var body bytes.Buffer
				if err := p.SerializeBody(&body); err != nil {
					t.Fatal(err)
				}
				frames = append(frames, &flight.FlightData{DataHeader: bytes.Clone(meta.Bytes()), DataBody: body.Bytes()})
				if _, err := p.WritePayload(&stream); err != nil {
					t.Fatal(err)
				}
				meta.Release()
				p.Release()
			}

			fr, err := flight.NewRecordReader(&frames)
			if err != nil {
				t.Fatalf("Flight reader refuses our schema frame: %v", err)
			}
			defer fr.Release()
			checkReader(t, "Flight reader", fr.Schema(), fr.Next, fr.RecordBatch, fr.Err, batches)

			sr, err := ipc.NewReader(&stream)
			if err != nil {
				t.Fatalf("IPC stream reader refuses our schema message: %v", err)
			}
			defer sr.Release()
			checkReader(t, "IPC stream reader", sr.Schema(), sr.Next, sr.RecordBatch, sr.Err, batches)
		})
	}
}

func checkReader(t *testing.T, name string, schema *arrow.Schema, next func() bool, cur func() arrow.RecordBatch, errf func() error, want []arrow.RecordBatch) {
	t.Helper()
	if !schema.Equal(recordsSchema) {
		t.Errorf("%s: schema\n %s\nwant\n %s", name, schema, recordsSchema)
	}
	n := 0
	for next() {
		if n >= len(want) {
			t.Fatalf("%s: more than %d batches", name, len(want))
		}
		if got := cur(); !array.RecordEqual(got, want[n]) {
			t.Errorf("%s: batch %d:\n %v\nwant\n %v", name, n, got, want[n])
		}
		n++
	}
	if err := errf(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if n != len(want) {
		t.Fatalf("%s: %d batches, want %d", name, n, len(want))
	}
}
