package kafkamsg

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMessageMetadataPerRecord: the values boxed once per batch (topic,
// partition, the last timestamps) never leak from one record into the
// next: each message carries its own record's timestamp, offset and lag.
func TestMessageMetadataPerRecord(t *testing.T) {
	mb := newBatchBuilder(TP{Topic: "orders", Partition: 3})
	t1, t2 := time.UnixMilli(1700000000123), time.UnixMilli(1700000005999)
	recs := []*kgo.Record{
		{Offset: 10, Timestamp: t1, Key: []byte("a"), Value: []byte("x")},
		{Offset: 11, Timestamp: t1, Value: nil},
		{Offset: 12, Timestamp: t2, Value: []byte("z"), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}},
	}
	want := []struct {
		ms, unix, off, lag int64
		tomb               bool
	}{
		{t1.UnixMilli(), t1.Unix(), 10, 9, false},
		{t1.UnixMilli(), t1.Unix(), 11, 8, true},
		{t2.UnixMilli(), t2.Unix(), 12, 7, false},
	}
	for i, r := range recs {
		m := mb.message(r, 20)
		get := func(k string) any {
			v, ok := m.MetaGetMut(k)
			require.True(t, ok, "record %d has %s", i, k)
			return v
		}
		assert.Equal(t, "orders", get("kafka_topic"))
		assert.Equal(t, 3, get("kafka_partition"))
		assert.Equal(t, int(want[i].off), get("kafka_offset"), "record %d", i)
		assert.Equal(t, want[i].lag, get("kafka_lag"), "record %d", i)
		assert.Equal(t, want[i].ms, get("kafka_timestamp_ms"), "record %d", i)
		assert.Equal(t, want[i].unix, get("kafka_timestamp_unix"), "record %d", i)
		assert.Equal(t, want[i].tomb, get("kafka_tombstone_message"), "record %d", i)
		assert.Equal(t, string(r.Key), get("kafka_key"))
	}
	h, ok := mb.message(recs[2], 20).MetaGet("h")
	assert.True(t, ok)
	assert.Equal(t, "v", h)
}

// TestBatchMessagesKeepTheirOwnValues: the messages of one batch, which
// share the values boxed once per batch, each keep their own record's key,
// offset, lag and header values once the whole batch is built and after a
// collection; and changing or deleting one
// message's metadata, as a processor does, changes no other message.
func TestBatchMessagesKeepTheirOwnValues(t *testing.T) {
	ts := time.UnixMilli(1700000000123)
	var recs []*kgo.Record
	for i := range 50 {
		r := &kgo.Record{Offset: int64(1000 + i), Timestamp: ts.Add(time.Duration(i/10) * time.Second), Value: []byte(fmt.Sprintf(`{"i":%d}`, i))}
		if i%3 != 0 {
			r.Key = []byte(fmt.Sprintf("key-%d", i))
		}
		if i%4 == 0 {
			r.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte(fmt.Sprintf("t%d", i))}, {Key: "empty"}}
		}
		recs = append(recs, r)
	}
	const hwm = 2000
	batch := newBatchBuilder(TP{Topic: "orders", Partition: 300}).messages(recs, hwm)
	require.Len(t, batch, len(recs))
	runtime.GC()

	// One message's metadata changed and deleted, as a processor would.
	batch[1].MetaSetMut("kafka_offset", 7)
	batch[1].MetaSetMut("kafka_key", "changed")
	batch[1].MetaDelete("kafka_lag")
	batch[4].MetaSetMut("trace", "changed")
	runtime.GC()

	for i, m := range batch {
		if i == 1 {
			continue
		}
		r := recs[i]
		meta := map[string]any{}
		require.NoError(t, m.MetaWalkMut(func(k string, v any) error { meta[k] = v; return nil }))
		want := map[string]any{
			"kafka_key": string(r.Key), "kafka_topic": "orders", "kafka_partition": 300,
			"kafka_offset": int(r.Offset), "kafka_lag": int64(hwm - r.Offset - 1),
			"kafka_timestamp_ms": r.Timestamp.UnixMilli(), "kafka_timestamp_unix": r.Timestamp.Unix(),
			"kafka_tombstone_message": false,
		}
		if i%4 == 0 {
			want["trace"], want["empty"] = fmt.Sprintf("t%d", i), ""
			if i == 4 {
				want["trace"] = "changed"
			}
		}
		assert.Equal(t, want, meta, "record %d", i)
		body, err := m.AsBytes()
		require.NoError(t, err)
		assert.Equal(t, r.Value, body)
	}
	v, _ := batch[1].MetaGetMut("kafka_offset")
	assert.Equal(t, 7, v)
	v, _ = batch[1].MetaGetMut("kafka_key")
	assert.Equal(t, "changed", v)
	_, ok := batch[1].MetaGetMut("kafka_lag")
	assert.False(t, ok)

	// The values have the types Redpanda Connect sets.
	off, _ := batch[2].MetaGetMut("kafka_offset")
	assert.True(t, off == any(1002))
	n, ok := off.(int)
	assert.True(t, ok)
	assert.Equal(t, 1002, n)
	key, _ := batch[2].MetaGet("kafka_key")
	assert.Equal(t, "key-2", key)
	lag, _ := batch[2].MetaGet("kafka_lag")
	assert.Equal(t, "997", lag)
}
