// Package kafkamsg turns the Kafka records the redpanda input hands out
// into Benthos messages: a message per record with Redpanda Connect's
// metadata (Messages), or one message carrying a whole batch of records, a
// record pack, for the zerobus output to read without a message per record
// (pack.go).
package kafkamsg

import (
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TP is a topic partition. (Not the input's TP: the zerobus
// output reads packs, and must not pull in the input.)
type TP struct {
	Topic     string
	Partition int32
}

// batchBuilder turns the records of one handed-out batch, all of one
// partition, into messages with the metadata Redpanda Connect's redpanda
// input sets: kafka_key (string), kafka_topic (string), kafka_partition
// (int), kafka_offset (int), kafka_lag (int64), kafka_timestamp_ms and
// kafka_timestamp_unix (int64), kafka_tombstone_message (bool), and each
// record header as a string.
//
// Boxing a value into an interface allocates (an int64 above 255, a
// non-empty string), so the builder boxes once per batch what repeats: the
// topic, the partition, and a timestamp shared by consecutive records. The
// values are immutable, and each message has its own metadata map, so a
// processor changing one message's metadata changes no other message.
type batchBuilder struct {
	topic, partition any
	ts               time.Time
	tsMs, tsUnix     any
}

// newBatchBuilder returns the builder of a batch of tp.
func newBatchBuilder(tp TP) *batchBuilder {
	return &batchBuilder{topic: tp.Topic, partition: int(tp.Partition)}
}

// Messages returns a message per record of recs, all of partition tp, with
// Redpanda Connect's metadata; hwm is the partition's high watermark (for
// kafka_lag).
func Messages(tp TP, recs []*kgo.Record, hwm int64) service.MessageBatch {
	return newBatchBuilder(tp).messages(recs, hwm)
}

// messages builds the batch's messages; hwm is the partition's high
// watermark (for kafka_lag).
func (bb *batchBuilder) messages(recs []*kgo.Record, hwm int64) service.MessageBatch {
	batch := make(service.MessageBatch, len(recs))
	for i, r := range recs {
		batch[i] = bb.message(r, hwm)
	}
	return batch
}

// message builds the message of one record.
func (bb *batchBuilder) message(r *kgo.Record, hwm int64) *service.Message {
	m := service.NewMessage(r.Value)
	m.MetaSetMut("kafka_key", string(r.Key))
	m.MetaSetMut("kafka_topic", bb.topic)
	m.MetaSetMut("kafka_partition", bb.partition)
	m.MetaSetMut("kafka_offset", int(r.Offset))
	m.MetaSetMut("kafka_lag", lagOf(r, hwm))
	if bb.tsMs == nil || !r.Timestamp.Equal(bb.ts) {
		bb.ts, bb.tsMs, bb.tsUnix = r.Timestamp, r.Timestamp.UnixMilli(), r.Timestamp.Unix()
	}
	m.MetaSetMut("kafka_timestamp_ms", bb.tsMs)
	m.MetaSetMut("kafka_timestamp_unix", bb.tsUnix)
	m.MetaSetMut("kafka_tombstone_message", r.Value == nil)
	for _, h := range r.Headers {
		m.MetaSetMut(h.Key, string(h.Value))
	}
	return m
}

// recordMeta returns the metadata value of key on the message Messages
// builds for r (of partition tp, high watermark hwm): the last header of
// that name (headers are set last, so one named like a kafka_* key wins),
// else the kafka_* value.
func recordMeta(tp TP, r *kgo.Record, hwm int64, key string) (any, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return string(r.Headers[i].Value), true
		}
	}
	switch key {
	case "kafka_key":
		return string(r.Key), true
	case "kafka_topic":
		return tp.Topic, true
	case "kafka_partition":
		return int(tp.Partition), true
	case "kafka_offset":
		return int(r.Offset), true
	case "kafka_lag":
		return lagOf(r, hwm), true
	case "kafka_timestamp_ms":
		return r.Timestamp.UnixMilli(), true
	case "kafka_timestamp_unix":
		return r.Timestamp.Unix(), true
	case "kafka_tombstone_message":
		return r.Value == nil, true
	}
	return nil, false
}

// lagOf is kafka_lag: the records after r up to the high watermark hwm (0
// when hwm is unknown).
func lagOf(r *kgo.Record, hwm int64) int64 {
	if hwm <= 0 {
		return 0
	}
	return max(hwm-r.Offset-1, 0)
}
