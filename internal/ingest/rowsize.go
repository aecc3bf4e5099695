package ingest

import (
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowipc"
)

// Oversized is a row whose request alone would pass the limit given to
// OversizedRowsSized: it can never be ingested, whatever batch it is in.
type Oversized struct {
	// Row is the row's index in the record batch.
	Row int
	// Bytes is the estimated size of a request carrying this row alone.
	Bytes int64
	// Column names the top-level column that contributes most to Bytes, and
	// ColumnBytes is its share.
	Column      string
	ColumnBytes int64
}

// OversizedRowsSized returns the rows of rec whose request alone would pass
// limit bytes (normally MaxRequestBytes), in row order, so that the caller
// can fail those rows alone before submitting the others; Submit would
// refuse the whole batch (ErrRowTooLarge) instead. size is rec's
// arrowipc.RecordBytes, which every caller has at hand already: a batch
// that fits the limit as a whole then costs no pass over its buffers.
//
// The sizes are computed from the buffers, never by encoding: the data of a
// variable-width value comes from its offsets, nested values add up their
// children's, fixed-width values count their width, and each row is charged
// the IPC framing and request envelope of a frame of its own. The estimate
// is an upper bound of the uncompressed encoding, so every row the encoder
// would refuse is reported; with IPC compression on, a row that would
// compress under the limit is reported too.
func OversizedRowsSized(rec arrow.RecordBatch, size int64, limit int) []Oversized {
	n := int(rec.NumRows())
	if n == 0 {
		return nil
	}
	overhead := frameOverhead(rec.Schema())
	if size+overhead <= int64(limit) {
		return nil // no row can be larger than the batch
	}
	total := make([]int64, n)
	best := make([]int64, n)
	bestCol := make([]int, n)
	col := make([]int64, n)
	for c, arr := range rec.Columns() {
		clear(col)
		addValueBytes(arr, col)
		for i, b := range col {
			total[i] += b
			if b > best[i] {
				best[i], bestCol[i] = b, c
			}
		}
	}
	var out []Oversized
	for i, b := range total {
		if b+overhead > int64(limit) {
			out = append(out, Oversized{Row: i, Bytes: b + overhead,
				Column: rec.Schema().Field(bestCol[i]).Name, ColumnBytes: best[i]})
		}
	}
	return out
}

// frameOverhead bounds what a frame of one row adds to its values: the IPC
// message header (a fixed part plus one field node and its buffer entries
// per field), up to 8 bytes of padding and one extra offset per buffer, and
// the FlightData envelope.
func frameOverhead(schema *arrow.Schema) int64 {
	// A writer sends records of one schema (the same pointer) batch after
	// batch: the walk is done once per schema, not per batch.
	if c := lastOverhead.Load(); c != nil && c.schema == schema {
		return c.bytes
	}
	b := walkFrameOverhead(schema)
	lastOverhead.Store(&schemaOverhead{schema: schema, bytes: b})
	return b
}

// schemaOverhead is frameOverhead's result for one schema.
type schemaOverhead struct {
	schema *arrow.Schema
	bytes  int64
}

// lastOverhead is the last schema frameOverhead computed, shared by all
// streams: a process with several tables recomputes on a change of schema,
// which costs one walk of the schema.
var lastOverhead atomic.Pointer[schemaOverhead]

func walkFrameOverhead(schema *arrow.Schema) int64 {
	var nodes, buffers int64
	var walk func(t arrow.DataType)
	walk = func(t arrow.DataType) {
		nodes++
		buffers += 3 // validity + at most two value buffers (offsets, data)
		switch t := t.(type) {
		case arrow.NestedType:
			for _, f := range t.Fields() {
				walk(f.Type)
			}
		case *arrow.DictionaryType:
			walk(t.ValueType)
		case arrow.ExtensionType:
			walk(t.StorageType())
		}
	}
	for _, f := range schema.Fields() {
		walk(f.Type)
	}
	const headerFixed = 1 << 10
	return headerFixed + nodes*16 + buffers*(16+16) + frameEnvelope
}

// addValueBytes adds to out[i] the bytes element i of arr takes in an IPC
// body: its validity bit (counted as a byte), its fixed width or offset, its
// variable-width data, and its children's elements. out has arr.Len()
// entries.
func addValueBytes(arr arrow.Array, out []int64) {
	if arr.NullN() > 0 || (len(arr.Data().Buffers()) > 0 && arr.Data().Buffers()[0] != nil) {
		for i := range out {
			out[i]++
		}
	}
	switch a := arr.(type) {
	case *array.Null:
	case *array.Boolean:
		addEach(out, 1)
	case *array.String:
		addOffsets(out, a.ValueOffsets(), 4)
	case *array.Binary:
		addOffsets(out, a.ValueOffsets(), 4)
	case *array.LargeString:
		addOffsets(out, a.ValueOffsets(), 8)
	case *array.LargeBinary:
		addOffsets(out, a.ValueOffsets(), 8)
	case array.ViewLike:
		for i := range out {
			out[i] += int64(arrow.ViewHeaderSizeBytes)
			if h := a.ValueHeader(i); !h.IsInline() {
				out[i] += int64(h.Len())
			}
		}
	case array.ListLike: // lists, large lists, maps, fixed-size lists, list views
		addChildren(out, a, listOffsetBytes(a.DataType()))
	case *array.Struct:
		for f := range a.NumField() {
			addValueBytes(a.Field(f), out)
		}
	case *array.Dictionary:
		dict := make([]int64, a.Dictionary().Len())
		addValueBytes(a.Dictionary(), dict)
		width := int64(a.Indices().DataType().(arrow.FixedWidthDataType).BitWidth() / 8)
		for i := range out {
			out[i] += width
			if a.IsValid(i) {
				out[i] += dict[a.GetValueIndex(i)]
			}
		}
	case array.ExtensionArray:
		addValueBytes(a.Storage(), out)
	default:
		if fw, ok := arr.DataType().(arrow.FixedWidthDataType); ok {
			addEach(out, int64(max(fw.BitWidth()/8, 1)))
			return
		}
		// Unions, run-end encoded and other layouts the product never
		// sends: charge every element the array's average.
		if len(out) > 0 {
			addEach(out, (arrowipc.DataBytes(arr.Data())+int64(len(out))-1)/int64(len(out)))
		}
	}
}

func addEach(out []int64, n int64) {
	for i := range out {
		out[i] += n
	}
}

// addOffsets adds each element's data length, read from its offsets, plus
// the width of one offset.
func addOffsets[O int32 | int64](out []int64, offsets []O, width int64) {
	for i := range out {
		out[i] += width + int64(offsets[i+1]-offsets[i])
	}
}

// addChildren adds, for each list element, width (what its offsets take)
// plus the bytes of the child elements it spans.
func addChildren(out []int64, a array.ListLike, width int64) {
	values := a.ListValues()
	child := make([]int64, values.Len())
	addValueBytes(values, child)
	for i := range out {
		out[i] += width
		lo, hi := a.ValueOffsets(i)
		for _, b := range child[lo:hi] {
			out[i] += b
		}
	}
}

// listOffsetBytes is what one element of a list type takes in its offsets
// (and sizes) buffers.
func listOffsetBytes(t arrow.DataType) int64 {
	switch t.ID() {
	case arrow.FIXED_SIZE_LIST:
		return 0
	case arrow.LARGE_LIST:
		return 8
	case arrow.LIST_VIEW:
		return 8
	case arrow.LARGE_LIST_VIEW:
		return 16
	default: // LIST, MAP
		return 4
	}
}
