package zerobusreplay

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stretchr/testify/require"
)

// nestedBenchSchema is a typical replayed table with nested columns: a
// struct of scalars, a string-keyed map, a list of strings, a list of
// structs and a map of lists, beside a few flat columns.
var nestedBenchSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	{Name: "address", Type: arrow.StructOf(
		arrow.Field{Name: "street", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "city", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "zip", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		arrow.Field{Name: "geo", Type: arrow.StructOf(
			arrow.Field{Name: "lat", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
			arrow.Field{Name: "lon", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		), Nullable: true},
	), Nullable: true},
	{Name: "attrs", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.BinaryTypes.String), Nullable: true},
	{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	{Name: "items", Type: arrow.ListOf(arrow.StructOf(
		arrow.Field{Name: "sku", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "qty", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		arrow.Field{Name: "price", Type: &arrow.Decimal128Type{Precision: 10, Scale: 2}, Nullable: true},
	)), Nullable: true},
	{Name: "scores", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.ListOf(arrow.PrimitiveTypes.Int64)), Nullable: true},
}, nil)

// BenchmarkNestedRowsToBodies measures the row → JSON body conversion of
// the zerobus_replay input on a 1,024-row batch whose columns are mostly
// STRUCT, MAP and ARRAY.
func BenchmarkNestedRowsToBodies(b *testing.B) {
	rec := randomRecord(newRand(7), nestedBenchSchema, 1024, benchFill)
	defer rec.Release()
	c := newRowConverter(nestedBenchSchema)
	if _, err := c.messages(rec); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		batch, err := c.messages(rec)
		if err != nil {
			b.Fatal(err)
		}
		_ = batch
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1024, "ns/row")
}

// benchFill is the value mix of the benchmark: few nulls, no NaN or
// out-of-range times (errors), maps without duplicate keys.
var benchFill = fillOptions{nullPct: 5, maxLen: 4}

// The benchmark's rows convert, to the old conversion's bytes.
func TestNestedBenchRecordConverts(t *testing.T) {
	rec := randomRecord(newRand(7), nestedBenchSchema, 64, benchFill)
	defer rec.Release()
	want, wantErr := oracleBodies(rec)
	batch, err := newRowConverter(nestedBenchSchema).messages(rec)
	require.NoError(t, err)
	for i, m := range batch {
		require.NoError(t, wantErr[i])
		got, _ := m.AsBytes()
		require.Equal(t, string(want[i]), string(got), "row %d", i)
	}
}
