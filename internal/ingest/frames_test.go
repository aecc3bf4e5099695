package ingest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowipc"
)

func TestArrowStreamSplitsAboveFrameCap(t *testing.T) {
	const maxFrame = 8 << 10
	srv := &fakeFlightServer{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.MaxFrameBytes = maxFrame })
	s := openStream(t, c)

	spans := submitAll(t, s, makeBatch(0, 2000, 40), makeBatch(2000, 10, 40))
	assert.Equal(t, []Span{{0, 2000}, {2000, 2010}}, spans)
	require.NoError(t, s.WaitDurable(waitCtx(t), 2010))

	raw, offsets, ids := srv.conn(0).snapshot()
	assert.Greater(t, len(offsets), 10, "2000 rows of ~56 bytes need many 8 KiB frames")
	for i, o := range offsets {
		assert.Equal(t, int64(i), o)
	}
	for _, f := range raw[1:] {
		assert.LessOrEqual(t, len(f.header)+f.bodyLen, maxFrame)
	}
	assert.Equal(t, seq(0, 2010), ids)

	_, err := s.Submit(context.Background(), makeBatch(2010, 1, maxFrame))
	assert.ErrorIs(t, err, ErrRowTooLarge)
	assert.Equal(t, uint64(2010), s.(*ArrowStream).Submitted(), "a refused batch takes no span")
}

func TestArrowStreamCompression(t *testing.T) {
	for _, codec := range []string{"none", "lz4_frame", "zstd"} {
		t.Run(codec, func(t *testing.T) {
			srv := &fakeFlightServer{}
			c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.Compression = codec })
			s := openStream(t, c)
			submitAll(t, s, makeBatch(0, 1000, 100))
			require.NoError(t, s.WaitDurable(waitCtx(t), 1000))
			raw, _, ids := srv.conn(0).snapshot()
			assert.Equal(t, seq(0, 1000), ids, "server decodes the rows")
			body := raw[1].bodyLen
			if codec == "none" {
				assert.Greater(t, body, 100_000)
			} else {
				assert.Less(t, body, 30_000, "repetitive rows compress well")
			}
		})
	}
	_, err := NewClient(Config{Endpoint: "http://127.0.0.1:1", Token: StaticToken("x"), Compression: "snappy"})
	assert.Error(t, err)
}

// framesRows sums the rows of frames.
func framesRows(frames []frame) int64 {
	var n int64
	for _, f := range frames {
		n += f.rows
	}
	return n
}

// Batches are cut into frames of about FrameTargetBytes (2 MiB, as the
// official SDK does), not into frames filling the 10 MiB request cap.
func TestFrameEncoderAimsAtTargetSize(t *testing.T) {
	enc, err := newFrameEncoder("", 0, 0)
	require.NoError(t, err)
	rec := makeBatch(0, 9<<10, 1<<10) // ~9 MiB
	defer rec.Release()
	frames, err := enc.encode(rec)
	require.NoError(t, err)
	assert.Equal(t, rec.NumRows(), framesRows(frames))
	assert.GreaterOrEqual(t, len(frames), 5, "9 MiB needs at least five frames of at most 2 MiB")
	for i, f := range frames {
		assert.LessOrEqual(t, f.size(), FrameTargetBytes, "frame %d", i)
		assert.Greater(t, f.size(), FrameTargetBytes/4, "frame %d is about 2 MiB, not a sliver", i)
	}
}

// One row larger than the frame target still fits a frame of its own up to
// the request cap; only a row above the cap is refused.
func TestFrameEncoderRowAboveTargetGoesAloneUpToTheCap(t *testing.T) {
	enc, err := newFrameEncoder("", 0, 0)
	require.NoError(t, err)
	big := makeBatch(0, 1, 3<<20)
	defer big.Release()
	frames, err := enc.encode(big)
	require.NoError(t, err)
	require.Len(t, frames, 1)
	assert.Greater(t, frames[0].size(), FrameTargetBytes)
	assert.LessOrEqual(t, frames[0].size(), DefaultMaxFrameBytes)

	huge := makeBatch(0, 1, MaxRequestBytes+1)
	defer huge.Release()
	_, err = enc.encode(huge)
	assert.ErrorIs(t, err, ErrRowTooLarge)
}

// No configuration lets a frame pass the service's request cap.
func TestMaxFrameBytesNeverAboveTheRequestCap(t *testing.T) {
	enc, err := newFrameEncoder("", 64<<20, 0)
	require.NoError(t, err)
	assert.Equal(t, DefaultMaxFrameBytes, enc.maxBytes)
	assert.Equal(t, FrameTargetBytes, enc.targetBytes)
	assert.Equal(t, DefaultMaxFrameBytes, Config{MaxFrameBytes: 64 << 20}.withDefaults().MaxFrameBytes)
	assert.Less(t, DefaultMaxFrameBytes, MaxRequestBytes)
}

// mixedBatch builds small rows of id and name with one row, at index big,
// whose name is bigLen bytes.
func mixedBatch(t *testing.T, n, big, bigLen int) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, testSchema)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		if i == big {
			b.Field(1).(*array.LargeStringBuilder).Append(strings.Repeat("x", bigLen))
		} else {
			b.Field(1).(*array.LargeStringBuilder).Append(fmt.Sprintf("row-%d", i))
		}
	}
	return b.NewRecordBatch()
}

// oversizedRows is OversizedRowsSized with rec's size measured here, as
// the production callers measure it before they call it.
func oversizedRows(rec arrow.RecordBatch, limit int) []Oversized {
	return OversizedRowsSized(rec, arrowipc.RecordBytes(rec), limit)
}

// A row above the request cap among small ones is found, with its size and
// its largest column, so the caller fails it alone; without that check the
// encoder refuses the whole batch (the backstop), and with the row removed
// the rest encodes.
func TestOversizedRowsFindsTheRowAboveTheCap(t *testing.T) {
	rec := mixedBatch(t, 20, 7, MaxRequestBytes+1)
	defer rec.Release()
	got := oversizedRows(rec, MaxRequestBytes)
	require.Len(t, got, 1)
	assert.Equal(t, 7, got[0].Row)
	assert.Equal(t, "name", got[0].Column)
	assert.Greater(t, got[0].Bytes, int64(MaxRequestBytes))
	assert.GreaterOrEqual(t, got[0].ColumnBytes, int64(MaxRequestBytes+1))

	enc, err := newFrameEncoder("", 0, 0)
	require.NoError(t, err)
	_, err = enc.encode(rec)
	require.ErrorIs(t, err, ErrRowTooLarge, "the encoder still refuses the batch as a whole")
	for _, part := range [][2]int64{{0, 7}, {8, 20}} {
		s := rec.NewSlice(part[0], part[1])
		frames, err := enc.encode(s)
		s.Release()
		require.NoError(t, err)
		assert.Equal(t, part[1]-part[0], framesRows(frames))
	}

	small := makeBatch(0, 1000, 100)
	defer small.Release()
	assert.Empty(t, oversizedRows(small, MaxRequestBytes))
	edge := mixedBatch(t, 3, 1, MaxRequestBytes-64<<10) // under the cap with room for framing
	defer edge.Release()
	assert.Empty(t, oversizedRows(edge, MaxRequestBytes))
}

// frameOverhead keeps the last schema's result: asked for two schemas in
// turn, it answers each with its own walk's figure.
func TestFrameOverheadPerSchema(t *testing.T) {
	small := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	for range 2 {
		for _, s := range []*arrow.Schema{nestedSchema, small, small, nestedSchema} {
			assert.Equal(t, walkFrameOverhead(s), frameOverhead(s))
		}
	}
	assert.Greater(t, frameOverhead(nestedSchema), frameOverhead(small))
	rec := mixedBatch(t, 20, 7, MaxRequestBytes+1)
	defer rec.Release()
	assert.Equal(t, oversizedRows(rec, MaxRequestBytes), OversizedRowsSized(rec, arrowipc.RecordBytes(rec), MaxRequestBytes))
}

// nestedSchema covers the layouts OversizedRowsSized reads: fixed width, bool,
// offsets, lists, maps, structs, fixed-size lists and nulls at every level.
var nestedSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "flag", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.LargeString), Nullable: true},
	{Name: "attrs", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64), Nullable: true},
	{Name: "st", Type: arrow.StructOf(
		arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		arrow.Field{Name: "deep", Type: arrow.LargeListOf(arrow.BinaryTypes.Binary), Nullable: true},
	), Nullable: true},
	{Name: "vec", Type: arrow.FixedSizeListOf(3, arrow.PrimitiveTypes.Float64), Nullable: true},
}, nil)

// The per-row estimate is an upper bound of the real encoding of that row
// alone, for every layout, so every row the encoder refuses is reported.
func TestOversizedRowsBoundsTheRealEncoding(t *testing.T) {
	long := strings.Repeat("y", 5000)
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, nestedSchema, strings.NewReader(`[
		{"id":1,"flag":true,"s":"a","tags":["x","yy"],"attrs":[{"key":"k","value":1}],"st":{"a":1,"deep":["AAEC"]},"vec":[1,2,3]},
		{"id":2,"flag":null,"s":null,"tags":null,"attrs":null,"st":null,"vec":null},
		{"id":3,"flag":false,"s":"`+long+`","tags":["`+long+`","`+long+`"],"attrs":[{"key":"`+long+`","value":2},{"key":"b","value":null}],"st":{"a":null,"deep":[null,"AAAA"]},"vec":[4,5,6]},
		{"id":4,"flag":true,"s":"","tags":[],"attrs":[],"st":{"a":7,"deep":[]},"vec":[7,8,9]}
	]`))
	require.NoError(t, err)
	defer rec.Release()
	for _, r := range []arrow.RecordBatch{rec, rec.NewSlice(1, 4)} {
		est := oversizedRows(r, 0) // every row passes 0: all estimates
		require.Len(t, est, int(r.NumRows()))
		enc, err := newFrameEncoder("", 0, 0)
		require.NoError(t, err)
		for i, o := range est {
			f, err := enc.encodeSlice(r, int64(i), int64(i)+1)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, o.Bytes-frameEnvelope, int64(f.size()), "row %d: estimate below the real frame", i)
			assert.Less(t, o.Bytes, int64(f.size())+64<<10, "row %d: estimate far above the real frame", i)
		}
		if r != rec {
			r.Release()
		}
	}
	est := oversizedRows(rec, 0)
	assert.Equal(t, "tags", est[2].Column, "row 3's largest column: two 5,000-byte tags")
}
