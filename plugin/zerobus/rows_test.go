package zerobus

import (
	"fmt"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/benthos-zerobus/benthos-zerobus/internal/kafkamsg"
)

// packOf is a record pack of values on topic readings, partition 2, from
// offset 100, and the message carrying it.
func packOf(t *testing.T, values ...*service.Message) (*kafkamsg.Pack, *service.Message) {
	t.Helper()
	recs := make([]*kgo.Record, len(values))
	for i, m := range values {
		b, err := m.AsBytes()
		require.NoError(t, err)
		recs[i] = &kgo.Record{Topic: "readings", Partition: 2, Offset: int64(100 + i), Value: b}
	}
	p := kafkamsg.NewPack(kafkamsg.TP{Topic: "readings", Partition: 2}, recs, 200)
	return p, p.Message()
}

// A record pack among plain messages, on the registry fast path with
// coverage: every record lands as a row of its own, with its own source
// position from its record's metadata (the interpolation reads each
// record's message); a record of an unknown schema id inside the pack is
// dead-lettered alone, under its row index, and the batch is acknowledged.
func TestRecordPackRowsLandAlone(t *testing.T) {
	fr := newFastRegistry(t)
	e := startEmulated(t, fastTable, fastYAML(fr.reg.URL())+
		"coverage:\n  source: '${! meta(\"kafka_topic\") }/${! meta(\"kafka_partition\") }'\n  offset: '${! meta(\"kafka_offset\") }'\n")

	unknown := service.NewMessage([]byte{0, 0, 0, 0x03, 0xe7, 2})
	_, pack := packOf(t, frame(t, fastV1, fr.idV1, reading(2)), frame(t, fastV1, fr.idV1, reading(3)), unknown, frame(t, fastV1, fr.idV1, reading(4)))
	first := frame(t, fastV1, fr.idV1, reading(1))
	first.MetaSetMut("kafka_topic", "plain")
	first.MetaSetMut("kafka_partition", 0)
	first.MetaSetMut("kafka_offset", 7)
	require.Empty(t, e.write(t, service.MessageBatch{first, pack}), "the unknown id is dead-lettered, the batch acknowledged")

	got := map[string][2]string{}
	for _, r := range e.rows(t, fastTable) {
		got[jsonText(t, r["id"])] = [2]string{fmt.Sprint(r["_zb_source"]), jsonText(t, r["_zb_offset"])}
	}
	assert.Equal(t, map[string][2]string{
		"1": {"plain/0", "7"}, "2": {"readings/2", "100"}, "3": {"readings/2", "101"}, "4": {"readings/2", "103"},
	}, got, "each record a row, at its own offset")
	dead := e.rows(t, fastDLQ)
	require.Len(t, dead, 1)
	assert.Equal(t, "3", jsonText(t, dead[0]["message_index"]), "the record's row index in the batch (1 message + 2 records before it)")
	assert.Contains(t, fmt.Sprint(dead[0]["error"]), "schema id 999 is not in the schema registry")
}

// Without a dead-letter table a record that does not fit fails its pack's
// message (the input replays the pack, as it replays a batch of which one
// message failed), and the plain message beside it is acknowledged.
func TestRecordPackFailsAsItsMessage(t *testing.T) {
	e := startEmulated(t, "main.default.events", "", "main.default.events:id BIGINT NOT NULL, msg STRING")
	_, pack := packOf(t, service.NewMessage([]byte(`{"id":1,"msg":"a"}`)), service.NewMessage([]byte(`{"id":"not a number"}`)))
	plain := service.NewMessage([]byte(`{"id":2,"msg":"b"}`))
	failed := e.write(t, service.MessageBatch{plain, pack})
	require.Len(t, failed, 1)
	require.Contains(t, failed, 1, "the pack's message")
	assert.Contains(t, failed[1].Error(), "id")
	ids := map[string]bool{}
	for _, r := range e.rows(t, "main.default.events") {
		ids[jsonText(t, r["id"])] = true
	}
	assert.True(t, ids["2"], "the plain message landed")
}

// A pack a processor changed is refused as a whole, nothing written, with
// what to change.
func TestRecordPackChangedIsRefused(t *testing.T) {
	e := startEmulated(t, "main.default.events", "", "main.default.events:id BIGINT NOT NULL, msg STRING")
	_, pack := packOf(t, service.NewMessage([]byte(`{"id":1,"msg":"a"}`)))
	pack.SetBytes([]byte(`{"id":9}`))
	err := e.out.WriteBatch(t.Context(), service.MessageBatch{pack})
	require.ErrorIs(t, err, kafkamsg.ErrPackChanged)
	assert.Contains(t, err.Error(), "message 0")
	assert.Empty(t, e.rows(t, "main.default.events"))
}

// rowBatch maps rows to messages: a batch without packs is one row per
// message; a pack's records follow their message's place; a processor's
// error on a pack fails each of its records.
func TestRowBatchIndices(t *testing.T) {
	a, b := service.NewMessage([]byte(`{"a":1}`)), service.NewMessage([]byte(`{"b":1}`))
	rb, err := newRowBatch(service.MessageBatch{a, b})
	require.NoError(t, err)
	assert.Nil(t, rb.owner)
	assert.Equal(t, 2, rb.len())
	assert.Same(t, b, rowMessage(rb.rows[1]))

	_, pack := packOf(t, service.NewMessage([]byte(`{"x":1}`)), service.NewMessage([]byte(`{"x":2}`)), service.NewMessage([]byte(`{"x":3}`)))
	pack.SetError(fmt.Errorf("boom"))
	rb, err = newRowBatch(service.MessageBatch{a, pack, b})
	require.NoError(t, err)
	require.Equal(t, 5, rb.len())
	assert.Equal(t, []int{0, 1, 1, 1, 2}, []int{rb.msgIndex(0), rb.msgIndex(1), rb.msgIndex(2), rb.msgIndex(3), rb.msgIndex(4)})
	off, ok := rowMessage(rb.rows[3]).MetaGetMut("kafka_offset")
	require.True(t, ok)
	assert.Equal(t, 102, off)
	require.Len(t, rb.failed, 3)
	for k, re := range rb.failed {
		assert.Equal(t, 1+k, re.Index)
		assert.Contains(t, re.Err.Error(), "boom")
	}
}
