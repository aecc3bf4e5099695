package zerobusreplay

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
)

// replaySchema has every kind of column the converter writes itself or
// hands to oracleValue(), in an order that is not the sorted one, and the three
// reserved columns.
var replaySchema = arrow.NewSchema([]arrow.Field{
	{Name: "zeta", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: ColOffset, Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "small", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "ratio", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "f32", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "ok", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: ColSource, Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "amount", Type: &arrow.Decimal128Type{Precision: 10, Scale: 2}, Nullable: true},
	{Name: "at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	{Name: "wall", Type: &arrow.TimestampType{Unit: arrow.Microsecond}, Nullable: true},
	{Name: "day", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
	{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	{Name: "attrs", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64), Nullable: true},
	{Name: "nested", Type: arrow.StructOf(arrow.Field{Name: "b", Type: arrow.PrimitiveTypes.Int64, Nullable: true}, arrow.Field{Name: "a", Type: arrow.BinaryTypes.String, Nullable: true}), Nullable: true},
	{Name: "raw", Type: arrow.BinaryTypes.Binary, Nullable: true},
	{Name: ColEmitTS, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
}, nil)

const replayRowsJSON = `[
{"zeta":"quote \" backslash \\ tab \t <&> \u2028 é","_zb_offset":7,"id":1,"small":-3,"ratio":0.1,"f32":1.5,"ok":true,"_zb_source":"topic/0","amount":"12.30","at":"2026-01-02T03:04:05.123456Z","wall":"2026-01-02T03:04:05.5","day":"2026-01-02","tags":["a","b"],"attrs":[{"key":"k","value":2}],"nested":{"b":5,"a":"x"},"raw":"AQI=","_zb_emit_ts":"2026-03-04T05:06:07.000001Z"},
{"zeta":null,"_zb_offset":null,"id":2,"small":null,"ratio":1e-7,"f32":null,"ok":null,"_zb_source":"topic/0","amount":null,"at":null,"wall":null,"day":null,"tags":null,"attrs":null,"nested":null,"raw":null,"_zb_emit_ts":null},
{"zeta":"","_zb_offset":9000000000,"id":-9007199254740993,"small":0,"ratio":1e21,"f32":0.1,"ok":false,"_zb_source":"topic/1","amount":"-0.05","at":"1970-01-01T00:00:00Z","wall":"1970-01-01T00:00:00","day":"1970-01-01","tags":[],"attrs":[],"nested":{"b":null,"a":null},"raw":"","_zb_emit_ts":"2026-03-04T05:06:07Z"}
]`

// Each body is byte for byte arrowconv.ToJSON of the row's object (the
// one serialiser), and the reserved columns are the metadata, as the row by
// row conversion made them.
func TestMessagesMatchToJSONOfTheRow(t *testing.T) {
	rec, _, err := array.RecordFromJSON(memory.NewGoAllocator(), replaySchema, strings.NewReader(replayRowsJSON))
	require.NoError(t, err)
	defer rec.Release()

	c := newRowConverter(replaySchema)
	batch, err := c.messages(rec)
	require.NoError(t, err)
	require.Len(t, batch, int(rec.NumRows()))
	for i, m := range batch {
		obj := map[string]any{}
		for col, f := range replaySchema.Fields() {
			if f.Name == ColSource || f.Name == ColOffset || f.Name == ColEmitTS {
				continue
			}
			v, err := oracleValue(rec.Column(col), i)
			require.NoError(t, err)
			obj[f.Name] = v
		}
		want, err := arrowconv.ToJSON(obj)
		require.NoError(t, err)
		got, err := m.AsBytes()
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "row %d body", i)
	}

	meta := func(i int, k string) (string, bool) { return batch[i].MetaGet(k) }
	src, ok := meta(0, ColSource)
	assert.True(t, ok)
	assert.Equal(t, "topic/0", src)
	off, _ := meta(0, ColOffset)
	assert.Equal(t, "7", off)
	ts, _ := meta(0, ColEmitTS)
	assert.Equal(t, "2026-03-04T05:06:07.000001Z", ts)
	for _, k := range []string{ColOffset, ColEmitTS} {
		_, ok := meta(1, k)
		assert.False(t, ok, "row 1: a null %s sets no metadata", k)
	}
	src, _ = meta(2, ColSource)
	assert.Equal(t, "topic/1", src)
	off, _ = meta(2, ColOffset)
	assert.Equal(t, "9000000000", off)
	ts, _ = meta(2, ColEmitTS)
	parsed, err := time.Parse(time.RFC3339Nano, ts)
	require.NoError(t, err)
	assert.True(t, parsed.Equal(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)))

	// The bodies share one buffer: appending to one must not touch the next.
	b0, _ := batch[0].AsBytes()
	b1before, _ := batch[1].AsBytes()
	b1 := string(b1before)
	_ = append(b0, "garbage"...)
	b1after, _ := batch[1].AsBytes()
	assert.Equal(t, b1, string(b1after))
}

// A value the serialiser refuses fails the batch naming the row and column.
func TestMessagesNameRowAndColumnOfABadValue(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Float64}}, nil)
	inf := array.NewFloat64Builder(memory.NewGoAllocator())
	defer inf.Release()
	inf.AppendValues([]float64{1, 2, posInf()}, nil)
	col := inf.NewFloat64Array()
	defer col.Release()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, 3)
	defer rec.Release()
	_, err := newRowConverter(schema).messages(rec)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "row 2")
	assert.Contains(t, err.Error(), "column x")
}

// A TIMESTAMP past year 9999, which the serialiser refuses, fails the batch
// as it fails ToJSON of the row's value.
func TestMessagesRefuseATimestampPastYear9999(t *testing.T) {
	tt := &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	schema := arrow.NewSchema([]arrow.Field{{Name: "at", Type: tt}}, nil)
	b := array.NewTimestampBuilder(memory.NewGoAllocator(), tt)
	defer b.Release()
	far, err := arrow.TimestampFromTime(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), arrow.Microsecond)
	require.NoError(t, err)
	b.AppendValues([]arrow.Timestamp{0, far}, nil)
	col := b.NewTimestampArray()
	defer col.Release()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, 2)
	defer rec.Release()
	v, err := oracleValue(col, 1)
	require.NoError(t, err)
	_, want := arrowconv.ToJSON(v)
	require.Error(t, want)
	_, err = newRowConverter(schema).messages(rec)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "row 1")
	assert.Contains(t, err.Error(), "column at")
	assert.Contains(t, err.Error(), want.Error())
}

func posInf() float64 {
	var zero float64
	return 1 / zero
}

// An Arrow batch of no rows (a scan filter may leave one) converts to no
// messages, with the reserved columns present too.
func TestMessagesOfAnEmptyBatch(t *testing.T) {
	rec, _, err := array.RecordFromJSON(memory.NewGoAllocator(), replaySchema, strings.NewReader(`[]`))
	require.NoError(t, err)
	defer rec.Release()
	batch, err := newRowConverter(replaySchema).messages(rec)
	require.NoError(t, err)
	assert.Empty(t, batch)
}
