package kafka

import (
	"time"
	"unsafe"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/benthos-zerobus/benthos-zerobus/internal/kafkain"
)

// batchBuilder turns the records of one handed-out batch, all of one
// partition, into messages with the metadata Redpanda Connect's redpanda
// input sets: kafka_key (string), kafka_topic (string), kafka_partition
// (int), kafka_offset (int), kafka_lag (int64), kafka_timestamp_ms and
// kafka_timestamp_unix (int64), kafka_tombstone_message (bool), and each
// record header as a string.
//
// It is the input's hot path: a message and eight metadata values per
// record. Boxing a value into an interface allocates (an int64 above 255, a
// non-empty string: its header and its bytes), so the builder boxes once
// per batch what repeats (the topic, the partition, a timestamp shared by
// consecutive records) and, for what differs per record (offset, lag, key,
// header values), points each interface at an element of an array
// allocated once per batch (see box). The values are immutable: nothing can
// write through an interface to the value it holds, and every element is
// written once, before it is boxed, and never reused; each message still
// has its own metadata map, so a processor changing one message's metadata
// changes no other message.
type batchBuilder struct {
	topic, partition any
	ts               time.Time
	tsMs, tsUnix     any

	// ints holds the offsets and lags, strs the keys and header values,
	// text their bytes, each filled front to back.
	ints []int64
	strs []string
	text []byte
}

// newBatchBuilder sizes the builder's arrays for recs.
func newBatchBuilder(tp kafkain.TP, recs []*kgo.Record) *batchBuilder {
	nstr, ntext := 0, 0
	for _, r := range recs {
		if len(r.Key) > 0 {
			nstr++
			ntext += len(r.Key)
		}
		for _, h := range r.Headers {
			nstr++
			ntext += len(h.Value)
		}
	}
	return &batchBuilder{
		topic: tp.Topic, partition: int(tp.Partition),
		ints: make([]int64, 0, 2*len(recs)),
		strs: make([]string, 0, nstr),
		text: make([]byte, 0, ntext),
	}
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
	m.MetaSetMut("kafka_key", bb.str(r.Key))
	m.MetaSetMut("kafka_topic", bb.topic)
	m.MetaSetMut("kafka_partition", bb.partition)
	m.MetaSetMut("kafka_offset", bb.int(intType, r.Offset))
	lag := int64(0)
	if hwm > 0 {
		lag = max(hwm-r.Offset-1, 0)
	}
	m.MetaSetMut("kafka_lag", bb.int(int64Type, lag))
	if bb.tsMs == nil || !r.Timestamp.Equal(bb.ts) {
		bb.ts, bb.tsMs, bb.tsUnix = r.Timestamp, r.Timestamp.UnixMilli(), r.Timestamp.Unix()
	}
	m.MetaSetMut("kafka_timestamp_ms", bb.tsMs)
	m.MetaSetMut("kafka_timestamp_unix", bb.tsUnix)
	m.MetaSetMut("kafka_tombstone_message", r.Value == nil)
	for _, h := range r.Headers {
		m.MetaSetMut(h.Key, bb.str(h.Value))
	}
	return m
}

// int returns v boxed as an int (typ intType) or an int64 (int64Type),
// held in the next element of ints.
func (bb *batchBuilder) int(typ unsafe.Pointer, v int64) any {
	if len(bb.ints) == cap(bb.ints) || (typ == intType && !intIs64) {
		// More values than sized for, or an int that is not an
		// int64 (32-bit platforms): box the ordinary way.
		if typ == intType {
			return int(v)
		}
		return v
	}
	bb.ints = append(bb.ints, v)
	return box(typ, unsafe.Pointer(&bb.ints[len(bb.ints)-1]))
}

// str returns b copied into a string, boxed, both held in the builder's
// arrays.
func (bb *batchBuilder) str(b []byte) any {
	if len(b) == 0 {
		return "" // boxing the empty string does not allocate
	}
	if len(bb.strs) == cap(bb.strs) || cap(bb.text)-len(bb.text) < len(b) {
		return string(b)
	}
	at := len(bb.text)
	bb.text = append(bb.text, b...)
	bb.strs = append(bb.strs, unsafe.String(&bb.text[at], len(b)))
	return box(stringType, unsafe.Pointer(&bb.strs[len(bb.strs)-1]))
}

// eface is the layout of an empty interface: its dynamic type and a
// pointer to its value (for types that are not pointers themselves).
type eface struct{ typ, data unsafe.Pointer }

// typeOf returns the type word of v's interface.
func typeOf(v any) unsafe.Pointer { return (*eface)(unsafe.Pointer(&v)).typ }

var (
	intType    = typeOf(int(0))
	int64Type  = typeOf(int64(0))
	stringType = typeOf("")
)

// intIs64: an int has an int64's layout, so an int can be boxed from an
// element of ints (64-bit platforms).
const intIs64 = unsafe.Sizeof(int(0)) == unsafe.Sizeof(int64(0))

// box returns the interface of type typ whose value is at data: what the
// compiler builds when it boxes a value, but pointing at memory the
// builder allocated for a whole batch instead of a fresh allocation.
func box(typ, data unsafe.Pointer) any {
	var v any
	*(*eface)(unsafe.Pointer(&v)) = eface{typ, data}
	return v
}
