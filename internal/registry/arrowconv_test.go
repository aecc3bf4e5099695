package registry

import (
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// decodedRow is a message the Avro codec decoded, as the zerobus output sees
// it after schema_registry_decode.
type decodedRow struct{ v any }

func (r decodedRow) AsBytes() ([]byte, error)   { return nil, errors.New("structured only") }
func (r decodedRow) HasStructured() bool        { return true }
func (r decodedRow) AsStructured() (any, error) { return r.v, nil }

// The preserved logical values land exactly in the zerobus output's columns:
// the decimal's digits, the date, the timestamp's microseconds.
func TestAvroLogicalValuesLandInColumns(t *testing.T) {
	body := avroEncode(t, avroLogicalSchema, avroLogicalWire())
	v, _, err := avroCodecFor(t, avroLogicalSchema, AvroOptions{PreserveLogicalTypes: true, RawUnions: true}).Decode(body)
	require.NoError(t, err)

	cols, err := typemap.ParseColumns("dec DECIMAL(10,2), decFixed DECIMAL(18,4), day DATE, tsus TIMESTAMP, tsms TIMESTAMP, id STRING, optTs TIMESTAMP")
	require.NoError(t, err)
	conv, err := arrowconv.New(cols, arrowconv.Options{})
	require.NoError(t, err)
	res, err := conv.ConvertStructured([]arrowconv.StructuredRow{only(v, cols)})
	require.NoError(t, err)
	require.Empty(t, res.RowErrors)
	rec := res.Record
	defer rec.Release()
	require.EqualValues(t, 1, rec.NumRows())
	col := func(name string) any {
		i := rec.Schema().FieldIndices(name)
		require.Len(t, i, 1, name)
		return rec.Column(i[0])
	}
	assert.Equal(t, "-1234.56", col("dec").(*array.LargeString).Value(0))
	assert.Equal(t, "0.0005", col("decFixed").(*array.LargeString).Value(0))
	assert.EqualValues(t, dayNumber, col("day").(*array.Date32).Value(0))
	assert.EqualValues(t, tsMicros, col("tsus").(*array.Timestamp).Value(0))
	assert.EqualValues(t, tsMicros/1000*1000, col("tsms").(*array.Timestamp).Value(0))
	assert.EqualValues(t, tsMicros, col("optTs").(*array.Timestamp).Value(0))

	// A local timestamp is a time.Time, as Connect gives it: a
	// TIMESTAMP_NTZ column takes its wall clock only with
	// reconcile.timestamp_ntz_from_zoned (the output's choice, not the
	// codec's).
	cols, err = typemap.ParseColumns("ltus TIMESTAMP_NTZ")
	require.NoError(t, err)
	conv, err = arrowconv.New(cols, arrowconv.Options{})
	require.NoError(t, err)
	res, err = conv.ConvertStructured([]arrowconv.StructuredRow{only(v, cols)})
	require.NoError(t, err)
	require.Len(t, res.RowErrors, 1)
	assert.ErrorIs(t, res.RowErrors[0].Err, arrowconv.ErrTZIntoNTZ)
	res.Record.Release()
	conv, err = arrowconv.New(cols, arrowconv.Options{NTZFromZoned: true})
	require.NoError(t, err)
	res, err = conv.ConvertStructured([]arrowconv.StructuredRow{only(v, cols)})
	require.NoError(t, err)
	require.Empty(t, res.RowErrors)
	defer res.Record.Release()
	assert.EqualValues(t, tsMicros, res.Record.Column(0).(*array.Timestamp).Value(0))
}

// only keeps the fields of v the table has columns for (the converter
// refuses the others).
func only(v any, cols []typemap.Column) decodedRow {
	m := map[string]any{}
	for _, c := range cols {
		m[c.Name] = v.(map[string]any)[c.Name]
	}
	return decodedRow{m}
}

// Without serialize_to_json, a Protobuf message's decoded form lands in the
// output's columns as it is: 64-bit integers, a Timestamp's nanoseconds cut
// to the column's microseconds, bytes, maps and repeated messages.
func TestProtobufDecodedFormLandsInColumns(t *testing.T) {
	body := protoEncode(t, "shop.v1.Order", protoOrderJSON, 0)
	v, _, err := protoCodecFor(t, ProtobufOptions{}).Decode(body)
	require.NoError(t, err)
	cols, err := typemap.ParseColumns("i64 BIGINT, u32 BIGINT, raw BINARY, placedAt TIMESTAMP, counts MAP<STRING, BIGINT>, " +
		"total STRUCT<currency: STRING, units: BIGINT>, line STRUCT<sku: STRING, children: ARRAY<STRUCT<sku: STRING>>>, status STRING")
	require.NoError(t, err)
	conv, err := arrowconv.New(cols, arrowconv.Options{})
	require.NoError(t, err)
	res, err := conv.ConvertStructured([]arrowconv.StructuredRow{only(v, cols)})
	require.NoError(t, err)
	require.Empty(t, res.RowErrors)
	defer res.Record.Release()
	rec := res.Record
	assert.EqualValues(t, -9007199254740993, rec.Column(0).(*array.Int64).Value(0))
	assert.EqualValues(t, 4294967295, rec.Column(1).(*array.Int64).Value(0))
	assert.Equal(t, []byte{0, 1, 2}, rec.Column(2).(*array.LargeBinary).Value(0))
	assert.EqualValues(t, 1700000000123456, rec.Column(3).(*array.Timestamp).Value(0))
	assert.Equal(t, "PAID", rec.Column(7).(*array.LargeString).Value(0))
}
