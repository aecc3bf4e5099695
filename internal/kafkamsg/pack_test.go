package kafkamsg

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

func packRecords(n int) []*kgo.Record {
	ts := time.UnixMilli(1700000000123)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Offset: int64(500 + i), Timestamp: ts, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf(`{"i":%d}`, i))}
		if i%2 == 1 {
			recs[i].Headers = []kgo.RecordHeader{{Key: "h", Value: []byte("a")}, {Key: "kafka_offset", Value: []byte("hdr")}, {Key: "h", Value: []byte("b")}}
		}
	}
	return recs
}

// TestPackCarriesItsRecords: a pack's message says its size in bytes (the
// records' value bytes, for byte_size batching), names its topic,
// partition and record count, and gives back the pack; its rows are the
// records' values, and each row's message is the message the input builds
// without packs, metadata and all.
func TestPackCarriesItsRecords(t *testing.T) {
	recs := packRecords(5)
	tp := TP{Topic: "orders", Partition: 7}
	p := NewPack(tp, recs, 600)
	m := p.Message()

	b, err := m.AsBytes()
	require.NoError(t, err)
	size := 0
	for _, r := range recs {
		size += len(r.Value)
	}
	assert.Len(t, b, size, "the placeholder is the records' size")
	for k, want := range map[string]any{"kafka_topic": "orders", "kafka_partition": 7, "kafka_pack_records": 5} {
		v, ok := m.MetaGetMut(k)
		require.True(t, ok, k)
		assert.Equal(t, want, v, k)
	}

	got, err := PackOf(m)
	require.NoError(t, err)
	require.Same(t, p, got)

	plain := Messages(tp, recs, 600)
	rows := got.Rows()
	require.Len(t, rows, len(recs))
	for i := range rows {
		v, err := rows[i].AsBytes()
		require.NoError(t, err)
		assert.Equal(t, recs[i].Value, v, "row %d", i)
		assert.False(t, rows[i].HasStructured())
		want := map[string]any{}
		require.NoError(t, plain[i].MetaWalkMut(func(k string, v any) error { want[k] = v; return nil }))
		have := map[string]any{}
		require.NoError(t, rows[i].Message().MetaWalkMut(func(k string, v any) error { have[k] = v; return nil }))
		assert.Equal(t, want, have, "row %d: the metadata of the message without packs", i)
		for k, v := range want {
			got, ok := rows[i].Meta(k)
			assert.True(t, ok, "row %d: %s without the message", i, k)
			assert.Equal(t, v, got, "row %d: %s without the message", i, k)
		}
		_, ok := rows[i].Meta("no_such_key")
		assert.False(t, ok)
		off, ok := rows[i].MetaGetMut("kafka_offset")
		require.True(t, ok)
		if i%2 == 1 {
			assert.Equal(t, "hdr", off, "a header named kafka_offset wins, as on the message")
			h, _ := rows[i].Meta("h")
			assert.Equal(t, "b", h, "the last header of a name")
		} else {
			assert.Equal(t, 500+i, off)
		}
		s, err := rows[i].AsStructured()
		require.NoError(t, err)
		assert.Equal(t, map[string]any{"i": jsonNumber(i)}, s)
	}
	assert.Same(t, rows[0].Message(), rows[0].Message(), "built once")
}

func jsonNumber(i int) any {
	m := service.NewMessage([]byte(fmt.Sprint(i)))
	v, _ := m.AsStructured()
	return v
}

// TestPackOfAPlainMessage: a message that carries no pack is not one.
func TestPackOfAPlainMessage(t *testing.T) {
	p, err := PackOf(service.NewMessage([]byte(`{}`)))
	assert.NoError(t, err)
	assert.Nil(t, p)
}

// TestPackChangedByAProcessor: a pack message whose bytes a processor
// replaced (or made structured) is refused, naming what to change; a deep
// copy (a broker output's) is still the pack.
func TestPackChangedByAProcessor(t *testing.T) {
	p := NewPack(TP{Topic: "t", Partition: 1}, packRecords(3), 10)

	replaced := p.Message()
	replaced.SetBytes([]byte("changed"))
	_, err := PackOf(replaced)
	require.ErrorIs(t, err, ErrPackChanged)
	assert.Contains(t, err.Error(), "3 records of t/1 from offset 500")
	assert.Contains(t, err.Error(), "pack_records: false")

	sameLength := p.Message()
	b, _ := sameLength.AsBytes()
	sameLength.SetBytes(append([]byte{'x'}, make([]byte, len(b)-1)...))
	_, err = PackOf(sameLength)
	assert.ErrorIs(t, err, ErrPackChanged, "same length, other bytes")

	structured := p.Message()
	structured.SetStructuredMut(map[string]any{"a": 1})
	_, err = PackOf(structured)
	assert.ErrorIs(t, err, ErrPackChanged)

	copied := p.Message().DeepCopy()
	got, err := PackOf(copied)
	require.NoError(t, err)
	assert.Same(t, p, got)
}

// TestPackPlaceholderBounds: an empty or tombstone-only pack still has a
// one-byte placeholder (an address to check), and a pack larger than the
// placeholder says the placeholder's size.
func TestPackPlaceholderBounds(t *testing.T) {
	tomb := NewPack(TP{Topic: "t"}, []*kgo.Record{{Offset: 1}}, 2)
	b, _ := tomb.Message().AsBytes()
	assert.Len(t, b, 1)
	got, err := PackOf(tomb.Message())
	require.NoError(t, err)
	assert.Same(t, tomb, got)

	big := NewPack(TP{Topic: "t"}, []*kgo.Record{{Offset: 1, Value: make([]byte, maxPlaceholder+10)}}, 2)
	b, _ = big.Message().AsBytes()
	assert.Len(t, b, maxPlaceholder)
	_, err = PackOf(big.Message())
	require.NoError(t, err)
	assert.False(t, errors.Is(err, ErrPackChanged))
}
