package tablewriter

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/fastpath"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// oneSchema is a SchemaSource knowing one Avro schema; the registry
// cannot be reached for any other.
type oneSchema struct {
	id   int
	text string
}

func (s oneSchema) Fetch(_ context.Context, id int) (registry.Schema, error) {
	if id != s.id {
		return registry.Schema{}, &registry.UnreachableError{URL: "http://registry", Err: assert.AnError}
	}
	return registry.Schema{ID: id, Format: registry.Avro, Text: s.text}, nil
}

// framedEvent is the Avro value {id, msg} framed with schema id 12.
func framedEvent(id int64, msg string) Row {
	b := binary.BigEndian.AppendUint32([]byte{0}, 12)
	b = binary.AppendUvarint(b, uint64(id<<1)^uint64(id>>63))
	b = append(b, 2) // union branch 1: string
	b = binary.AppendUvarint(b, uint64(len(msg))<<1)
	return testRow{b: append(b, msg...)}
}

// With the Avro fast path on, framed Avro values land from their bytes,
// a bad one fails alone, and JSON batches still take the general path.
func TestWriteAvroFastPath(t *testing.T) {
	src := oneSchema{id: 12, text: `{"type":"record","name":"E","fields":[{"name":"id","type":"long"},{"name":"msg","type":["null","string"]}]}`}
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, func(c *Config) { c.Fast = fastpath.New(src) }, nil)
	bad := framedEvent(2, "b").(testRow)
	bad.b = bad.b[:len(bad.b)-1]
	failed := h.write(t, []Row{framedEvent(1, "a"), bad, framedEvent(3, "c")})
	require.Len(t, failed, 1)
	assert.Contains(t, failed[1], "message 1")
	assert.Contains(t, failed[1], "schema 12: decoding the Avro value")
	assert.Empty(t, h.write(t, rows(`{"id":4,"msg":"d"}`)))
	ids, _ := submittedColumn(t, h.opener, "id")
	assert.Equal(t, []string{"1", "3", "4"}, ids)
	msgs, _ := submittedColumn(t, h.opener, "msg")
	assert.Equal(t, []string{"a", "c", "d"}, msgs)

	// A schema the registry cannot give (it is unreachable) holds the
	// batch: Write fails and nothing is sent.
	other := framedEvent(5, "e").(testRow)
	other.b[4] = 99
	_, err := h.w.Write(context.Background(), []Row{other}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "schema id 99")
}

// protoSchema is a SchemaSource knowing one Protobuf schema.
type protoSchema struct {
	id   int
	text string
}

func (s protoSchema) Fetch(_ context.Context, id int) (registry.Schema, error) {
	if id != s.id {
		return registry.Schema{}, &registry.UnreachableError{URL: "http://registry", Err: assert.AnError}
	}
	return registry.Schema{ID: id, Format: registry.Protobuf, Text: s.text}, nil
}

// framedProtoEvent is the Protobuf value {id, msg} framed with schema id
// 12 and message index [0].
func framedProtoEvent(id int64, msg string) Row {
	b := binary.BigEndian.AppendUint32([]byte{0}, 12)
	b = append(b, 0)    // message index [0]
	b = append(b, 1<<3) // field 1, wire type 0 (varint)
	b = binary.AppendUvarint(b, uint64(id))
	b = append(b, 2<<3|2) // field 2, length-delimited
	b = binary.AppendUvarint(b, uint64(len(msg)))
	return testRow{b: append(b, msg...)}
}

// With the fast path on, framed Protobuf values land from their bytes and
// a bad one fails alone with the codec's error.
func TestWriteProtobufFastPath(t *testing.T) {
	src := protoSchema{id: 12, text: `syntax = "proto3"; message E { int64 id = 1; string msg = 2; }`}
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, func(c *Config) { c.Fast = fastpath.New(src) }, nil)
	bad := framedProtoEvent(2, "b").(testRow)
	bad.b = bad.b[:len(bad.b)-1]
	failed := h.write(t, []Row{framedProtoEvent(1, "a"), bad, framedProtoEvent(3, "c")})
	require.Len(t, failed, 1)
	assert.Contains(t, failed[1], "message 1")
	assert.Contains(t, failed[1], "schema 12: decoding Protobuf message E")
	ids, _ := submittedColumn(t, h.opener, "id")
	assert.Equal(t, []string{"1", "3"}, ids)
	msgs, _ := submittedColumn(t, h.opener, "msg")
	assert.Equal(t, []string{"a", "c"}, msgs)
}
