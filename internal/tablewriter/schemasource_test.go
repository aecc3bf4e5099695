package tablewriter

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cs "github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// protoDecoder decodes every framed value as a Protobuf value of one
// message type: one common schema, shared, as the registry's cache gives.
type protoDecoder struct {
	common *cs.Schema
	calls  int
}

func (d *protoDecoder) Decode(_ context.Context, value []byte) (registry.Decoded, error) {
	d.calls++
	id, _ := registryFramed(value)
	return registry.Decoded{Value: map[string]any{"id": int64(1)}, Common: d.common, ID: int(id), Format: registry.Protobuf}, nil
}

func framedRow(id uint32) Row {
	b := make([]byte, 6)
	binary.BigEndian.PutUint32(b[1:5], id)
	return testRow{b: b}
}

// The Protobuf values of one schema id are decoded once per message-index
// array (their common schema depends on the message), and a schema they
// share is one schema of the batch, not one per message: the table is
// fitted to it once.
func TestRegistrySchemasProtobufSharedSchemaOnce(t *testing.T) {
	v1 := ordersV1()
	dec := &protoDecoder{common: &v1}
	r := &registrySchemas{dec: dec}
	second := framedRow(5).(testRow)
	second.b = append(second.b[:5], 2, 2) // message index [1]
	batch := []Row{framedRow(5), framedRow(5), structuredRow(map[string]any{"id": 1}), second, framedRow(5), second}
	bs, err := r.schemasOf(context.Background(), batch, nil)
	require.NoError(t, err)
	assert.Equal(t, 2, dec.calls, "the first value of each message index decoded")
	require.Len(t, bs.schemas, 1, "one schema for the values sharing it")
	assert.Equal(t, []int{0, 0, -1, 0, 0, 0}, bs.of)
}
