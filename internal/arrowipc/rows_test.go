package arrowipc

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	flatbuffers "github.com/google/flatbuffers/go"
)

func TestRecordBatchRows(t *testing.T) {
	for _, n := range []int{0, 1, 5, 4000, 70000} {
		rows, ok := RecordBatchRows(recordBatchHeader(t, n))
		if !ok || rows != int64(n) {
			t.Errorf("%d rows: got %d, %v", n, rows, ok)
		}
	}
	schemaMsg := arrowGoSchemaMessage(t, arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil))
	if _, ok := RecordBatchRows(schemaMsg); ok {
		t.Error("a schema message is not a record batch")
	}
	for _, junk := range [][]byte{nil, {1, 2}, []byte("not a flatbuffer message"), {0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0}, bytes.Repeat([]byte{0xFF}, 64)} {
		if _, ok := RecordBatchRows(junk); ok {
			t.Errorf("RecordBatchRows(%x) is ok", junk)
		}
	}
	// Every truncation of a real header is refused or still reads its 3
	// rows (the cut may only drop parts it does not read), never a panic,
	// and the shortest ones are refused.
	h := recordBatchHeader(t, 3)
	read := 0
	for i := range h {
		if rows, ok := RecordBatchRows(h[:i]); ok {
			read++
			if rows != 3 {
				t.Errorf("header cut to %d of %d bytes reads %d rows", i, len(h), rows)
			}
		}
	}
	if read == len(h) {
		t.Error("no truncation is refused")
	}
}

// flatbuffersRows is the oracle: the row count read with the flatbuffers
// library's unchecked accessors (a panic on a bad offset means "not ok").
func flatbuffersRows(header []byte) (rows int64, ok bool) {
	defer func() {
		if recover() != nil {
			rows, ok = 0, false
		}
	}()
	if len(header) < flatbuffers.SizeUOffsetT {
		return 0, false
	}
	msg := flatbuffers.Table{Bytes: header, Pos: flatbuffers.GetUOffsetT(header)}
	o := flatbuffers.UOffsetT(msg.Offset(flatbuffers.VOffsetT(4 + 2*slotMessageHeaderType)))
	if o == 0 || msg.GetByte(msg.Pos+o) != messageHeaderRecordBatch {
		return 0, false
	}
	o = flatbuffers.UOffsetT(msg.Offset(flatbuffers.VOffsetT(4 + 2*slotMessageHeader)))
	if o == 0 {
		return 0, false
	}
	var rb flatbuffers.Table
	msg.Union(&rb, o)
	o = flatbuffers.UOffsetT(rb.Offset(flatbuffers.VOffsetT(4 + 2*slotRecordBatchLength)))
	if o == 0 {
		return 0, true
	}
	return rb.GetInt64(rb.Pos + o), true
}

// FuzzRecordBatchRows feeds arbitrary bytes (seeded with real headers):
// RecordBatchRows never panics, and whatever it reads, the flatbuffers
// library reads too, with the same row count (it may refuse more: it
// checks the offsets the library trusts).
func FuzzRecordBatchRows(f *testing.F) {
	f.Add([]byte{})
	f.Add(recordBatchHeader(f, 0))
	f.Add(recordBatchHeader(f, 7))
	f.Add(arrowGoSchemaMessage(f, arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)))
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, ok := RecordBatchRows(data)
		if !ok {
			if rows != 0 {
				t.Fatalf("not ok but %d rows", rows)
			}
			return
		}
		want, wantOK := flatbuffersRows(data)
		if !wantOK || want != rows {
			t.Fatalf("read %d rows; the flatbuffers library reads %d, %v", rows, want, wantOK)
		}
	})
}
