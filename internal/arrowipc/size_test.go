package arrowipc

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestRecordBytesCountsEveryBuffer(t *testing.T) {
	mem := memory.NewGoAllocator()
	b := array.NewRecordBuilder(mem, arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	}, nil))
	defer b.Release()
	for i := range 100 {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.LargeStringBuilder).Append("0123456789")
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	got := RecordBytes(rec)
	// 100 int64s, 101 int64 offsets and 1,000 string bytes at least.
	if min := int64(100*8 + 101*8 + 1000); got < min {
		t.Fatalf("RecordBytes = %d, want at least %d", got, min)
	}
	slice := rec.NewSlice(0, 10)
	defer slice.Release()
	if RecordBytes(slice) != got {
		t.Fatalf("a slice shares its parent's buffers and counts them in full: %d vs %d", RecordBytes(slice), got)
	}
}
