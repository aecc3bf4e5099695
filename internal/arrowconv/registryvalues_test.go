package arrowconv

import (
	"encoding/json"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The value shapes a Schema Registry decoder gives (json.Number and string
// decimals, *big.Rat decimals, times, RFC 3339 strings with microseconds,
// dates, bytes, time.Duration times of day, [16]byte uuids) land in the
// columns the registry's types map to, exactly.
func TestRegistryValueShapes(t *testing.T) {
	c := mustConverter(t, "d DECIMAL(20,4), ts TIMESTAMP, ntz TIMESTAMP_NTZ, day DATE, bin BINARY, tod BIGINT, id STRING", Options{NTZFromZoned: true})
	rows := []map[string]any{
		{"d": json.Number("1234567890123456.7891"), "ts": time.Date(2026, 3, 1, 12, 30, 45, 123456000, time.UTC),
			"ntz": time.Date(2026, 3, 1, 12, 30, 45, 123456000, time.UTC), "day": time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC),
			"bin": []byte{0, 0xff}, "tod": 12*time.Hour + 30*time.Minute + 45*time.Second + 123456*time.Microsecond,
			"id": [16]byte{0x7b, 0x2c, 0x2c, 0x9e, 0x0d, 0x3f, 0x4d, 0x8e, 0x9a, 0x37, 0x2a, 0x8d, 0x3c, 0x1e, 0x0f, 0x11}},
		{"d": "-0.0001", "ts": "2026-03-01T12:30:45.123456Z", "ntz": "2026-03-01T12:30:45.123456", "day": "2026-03-01",
			"bin": "AP8=", "tod": json.Number("45045123456"), "id": "7b2c2c9e-0d3f-4d8e-9a37-2a8d3c1e0f11"},
		{"d": big.NewRat(-123456789, 100), "day": json.Number("20513")},
	}
	srows := make([]StructuredRow, len(rows))
	for i, r := range rows {
		srows[i] = structuredRow{r}
	}
	res, err := c.ConvertStructured(srows)
	require.NoError(t, err)
	defer res.Record.Release()
	require.Empty(t, res.RowErrors)
	assert.Equal(t, "1234567890123456.7891", cell(t, res.Record, "d", 0))
	assert.Equal(t, "-0.0001", cell(t, res.Record, "d", 1))
	assert.Equal(t, "-1234567.8900", cell(t, res.Record, "d", 2), "a *big.Rat at the column's scale, no float")
	for r := 0; r < 2; r++ {
		assert.Equal(t, "2026-03-01T12:30:45.123456Z", cell(t, res.Record, "ts", r))
		assert.Equal(t, "2026-03-01T12:30:45.123456Z", cell(t, res.Record, "ntz", r), "the wall clock, as microseconds")
		assert.Equal(t, []byte{0, 0xff}, cell(t, res.Record, "bin", r))
		assert.Equal(t, int64(45045123456), cell(t, res.Record, "tod", r), "microseconds since midnight")
		assert.Equal(t, "7b2c2c9e-0d3f-4d8e-9a37-2a8d3c1e0f11", cell(t, res.Record, "id", r))
	}
	for r := 0; r < 3; r++ {
		assert.Equal(t, "2026-03-01", cell(t, res.Record, "day", r))
	}
}

// What cannot be stored exactly is refused, naming the column, never rounded.
func TestRegistryValueShapesRefusedInexact(t *testing.T) {
	c := mustConverter(t, "d DECIMAL(10,2), tod BIGINT", Options{})
	res, err := c.ConvertStructured([]StructuredRow{
		structuredRow{map[string]any{"d": big.NewRat(1, 3)}},
		structuredRow{map[string]any{"tod": 1500 * time.Nanosecond}},
		structuredRow{map[string]any{"d": big.NewRat(5, 4), "tod": 2 * time.Millisecond}},
	})
	require.NoError(t, err)
	defer res.Record.Release()
	require.Len(t, res.RowErrors, 2)
	assert.Contains(t, res.RowErrors[0].Error(), `column "d"`)
	assert.Contains(t, res.RowErrors[0].Error(), "1/3 has more fraction digits")
	assert.Contains(t, res.RowErrors[1].Error(), `column "tod"`)
	assert.Contains(t, res.RowErrors[1].Error(), "sub-microsecond")
	assert.Equal(t, "1.25", cell(t, res.Record, "d", 0))
	assert.Equal(t, int64(2000), cell(t, res.Record, "tod", 0))
}
