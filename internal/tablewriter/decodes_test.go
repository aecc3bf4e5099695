package tablewriter

import (
	"context"
	"encoding/binary"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cs "github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// countingDecoder decodes a framed value whose body is a message text as
// {id, msg} of one common schema, in one format, counting the decodes.
type countingDecoder struct {
	format registry.Format
	common *cs.Schema
	calls  atomic.Int32
}

func (d *countingDecoder) Decode(_ context.Context, value []byte) (registry.Decoded, error) {
	d.calls.Add(1)
	id, _ := registryFramed(value)
	v := map[string]any{"id": int64(binary.BigEndian.Uint16(value[5:7])), "msg": string(value[7:])}
	return registry.Decoded{Value: v, Common: d.common, ID: int(id), Format: d.format}, nil
}

func framedMessage(id uint16, msg string) Row {
	b := binary.BigEndian.AppendUint32([]byte{0}, 3)
	b = binary.BigEndian.AppendUint16(b, id)
	return testRow{b: append(b, msg...)}
}

// A batch's framed values are decoded once per Write: the decodes its
// schemas need (every Protobuf value; the first value of an id otherwise)
// are the ones its conversion uses, where the conversion decoded every
// value again.
func TestWriteDecodesEachFramedValueOnce(t *testing.T) {
	common := &cs.Schema{Name: "e", Type: cs.Object, Children: []cs.Schema{{Name: "id", Type: cs.Int64}, {Name: "msg", Type: cs.String, Optional: true}}}
	for _, format := range []registry.Format{registry.Protobuf, registry.JSONSchema} {
		dec := &countingDecoder{format: format, common: common}
		h := newHarness(t, ingestfake.Config{KeepRecords: true}, func(c *Config) { c.Registry = dec }, nil)
		failed := h.write(t, []Row{framedMessage(1, "a"), framedMessage(2, "b"), framedMessage(3, "c")})
		require.Empty(t, failed, format)
		assert.EqualValues(t, 3, dec.calls.Load(), "%s: one decode per value", format)
		ids, _ := submittedColumn(t, h.opener, "id")
		assert.Equal(t, []string{"1", "2", "3"}, ids, format)
		msgs, _ := submittedColumn(t, h.opener, "msg")
		assert.Equal(t, []string{"a", "b", "c"}, msgs, format)
	}
}
