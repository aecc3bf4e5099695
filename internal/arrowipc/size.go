package arrowipc

import "github.com/apache/arrow-go/v18/arrow"

// RecordBytes is the memory held by rec's buffers, dictionaries included:
// an estimate of its encoded size (an upper bound for slices, whose buffers
// are shared with a larger parent and count in full). The client sizes its
// frames with it, and the emulator its memory accounting.
func RecordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, col := range rec.Columns() {
		n += DataBytes(col.Data())
	}
	return n
}

// DataBytes is the memory held by one array's buffers, its children's and
// its dictionary's.
func DataBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, child := range d.Children() {
		n += DataBytes(child)
	}
	if d.DataType().ID() == arrow.DICTIONARY && d.Dictionary() != nil {
		n += DataBytes(d.Dictionary())
	}
	return n
}
