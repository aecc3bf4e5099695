package kafka

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/benthos-zerobus/benthos-zerobus/internal/kafkain"
)

// TestMessageMetadataPerRecord: the values boxed once per batch (topic,
// partition, the last timestamps) never leak from one record into the
// next: each message carries its own record's timestamp, offset and lag.
func TestMessageMetadataPerRecord(t *testing.T) {
	mb := newMetaBoxes(kafkain.TP{Topic: "orders", Partition: 3})
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
