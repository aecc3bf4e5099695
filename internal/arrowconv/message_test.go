package arrowconv

import (
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Benthos messages are rows as they are: the plugin needs no adapter.
var _ StructuredRow = (*service.Message)(nil)

func TestConvertBenthosMessages(t *testing.T) {
	c := mustConverter(t, "id BIGINT NOT NULL, ts TIMESTAMP, bin BINARY", Options{})
	raw := service.NewMessage([]byte(`{"id": 9007199254740993, "ts": "2024-01-01T00:00:00Z"}`))
	blob := service.NewMessage(nil)
	blob.SetStructured(map[string]any{"id": int64(2), "ts": time.Date(2024, 1, 1, 0, 0, 0, 1000, time.UTC), "bin": []byte{7}})
	bad := service.NewMessage([]byte(`{"id": 3, "x": 1}`))

	res, err := c.Convert([]Row{raw, blob, bad})
	require.NoError(t, err)
	defer res.Record.Release()
	require.Len(t, res.RowErrors, 1)
	assert.Equal(t, `message 2: column "x": unknown field: the table has no such column`, res.RowErrors[0].Error())
	assert.Equal(t, []int{0, 1}, res.SourceIndex)
	assert.Equal(t, int64(9007199254740993), cell(t, res.Record, "id", 0))
	assert.Equal(t, "2024-01-01T00:00:00.000001Z", cell(t, res.Record, "ts", 1))
	assert.Equal(t, []byte{7}, cell(t, res.Record, "bin", 1))
}
