package kafkamsg

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A Pack is one handed-out batch of a partition's records carried by a
// single Benthos message (the redpanda input's pack_records). The engine
// then does its per-message work (a transaction, a tracing span, the
// output batcher's step) once per pack instead of once per record, and the
// records' messages with their metadata are never built unless the reader
// asks for them (Rows, Row.Message). Only a reader that knows packs (the
// zerobus output) can read one: to anything else the message is a
// placeholder.
type Pack struct {
	TP            TP
	Records       []*kgo.Record
	HighWatermark int64

	// size is the length of the message's placeholder bytes.
	size int

	once sync.Once
	msgs service.MessageBatch
}

type packKey struct{}

// placeholder backs every pack message's bytes: zeros, never written, of
// the records' value bytes (at most its length, at least one), so that a
// batching policy's byte_size and the output's byte budget count a pack
// as its records. Its address tells a pack message whose bytes a processor
// replaced.
var placeholder [maxPlaceholder]byte

const maxPlaceholder = 4 << 20

// NewPack returns the pack of recs, records of partition tp whose high
// watermark is hwm.
func NewPack(tp TP, recs []*kgo.Record, hwm int64) *Pack {
	n := 0
	for _, r := range recs {
		n += len(r.Value)
	}
	return &Pack{TP: tp, Records: recs, HighWatermark: hwm, size: min(max(n, 1), maxPlaceholder)}
}

// Message returns the message carrying p: placeholder bytes of the
// records' size, p in its context, and the metadata every record of it
// shares (kafka_topic, kafka_partition), plus kafka_pack_records, the
// number of records.
func (p *Pack) Message() *service.Message {
	m := service.NewMessage(placeholder[:p.size:p.size])
	m.MetaSetMut("kafka_topic", p.TP.Topic)
	m.MetaSetMut("kafka_partition", int(p.TP.Partition))
	m.MetaSetMut("kafka_pack_records", len(p.Records))
	return m.WithContext(context.WithValue(m.Context(), packKey{}, p))
}

// ErrPackChanged is the error of a pack message whose bytes no longer are
// its placeholder: a processor replaced them, so the records it carries
// are not what the pipeline means to write.
var ErrPackChanged = errors.New("a processor changed this record pack's message: record packs (the redpanda input's pack_records) carry their records for the zerobus output only; remove the processors, or set pack_records: false")

// PackOf returns the pack m carries (nil when it carries none), and
// ErrPackChanged when a processor replaced the message's bytes.
func PackOf(m *service.Message) (*Pack, error) {
	p, _ := m.Context().Value(packKey{}).(*Pack)
	if p == nil {
		return nil, nil
	}
	if b, err := m.AsBytes(); err != nil || m.HasStructured() || len(b) != p.size || (&b[0] != &placeholder[0] && !zeros(b)) {
		return p, fmt.Errorf("%w (%d records of %s/%d from offset %d)", ErrPackChanged, len(p.Records), p.TP.Topic, p.TP.Partition, p.firstOffset())
	}
	return p, nil
}

// zeros reports whether b is all zero bytes: a deep copy of a placeholder
// (a broker output copies each message per output) is still one.
func zeros(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func (p *Pack) firstOffset() int64 {
	if len(p.Records) == 0 {
		return -1
	}
	return p.Records[0].Offset
}

// Messages returns the records' messages, as the input builds them without
// packs (Messages), built on the first call.
func (p *Pack) Messages() service.MessageBatch {
	p.once.Do(func() { p.msgs = Messages(p.TP, p.Records, p.HighWatermark) })
	return p.msgs
}

// Rows returns a row per record, in order.
func (p *Pack) Rows() []Row {
	rows := make([]Row, len(p.Records))
	for i := range rows {
		rows[i] = Row{p: p, i: i}
	}
	return rows
}

// Row is one record of a pack as a reader of values sees it: the value
// itself, and the record's message (its metadata, a Bloblang
// interpolation's input) only when asked for.
type Row struct {
	p *Pack
	i int
}

// AsBytes returns the record's value.
func (r *Row) AsBytes() ([]byte, error) { return r.p.Records[r.i].Value, nil }

// HasStructured is false: a record is bytes.
func (r *Row) HasStructured() bool { return false }

// AsStructured parses the value as JSON, as a message does.
func (r *Row) AsStructured() (any, error) { return r.Message().AsStructured() }

// MetaGetMut returns the record's metadata value of key, as its message
// has it, without building the message (Meta).
func (r *Row) MetaGetMut(key string) (any, bool) { return r.Meta(key) }

// Meta returns the record's metadata value of key, as its message (built
// by Messages) has it, without building the message: a header of that name
// (the last of them) or one of Redpanda Connect's kafka_* values.
func (r *Row) Meta(key string) (any, bool) {
	return recordMeta(r.p.TP, r.p.Records[r.i], r.p.HighWatermark, key)
}

// Message returns the record's message, with Redpanda Connect's metadata.
// The first call builds the messages of the whole pack.
func (r *Row) Message() *service.Message { return r.p.Messages()[r.i] }
