package fastpath

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// orderProto has a message the fast path plans ([0]) and one it does not
// ([1], a map with int32 keys).
const orderProto = `syntax = "proto3";
message Order { int64 id = 1; string sku = 2; repeated int32 qty = 3; }
message Other { int64 id = 1; map<int32, int32> m = 2; }
`

const orderProtoDefs = "id BIGINT NOT NULL, sku STRING, qty ARRAY<INT>"

func newProtoFixture(t *testing.T) (*clientSource, *arrowconv.Converter, int) {
	reg := srfake.New()
	t.Cleanup(reg.Close)
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	require.NoError(t, err)
	ss, err := cl.CreateSchema(context.Background(), "orders-value", sr.Schema{Schema: orderProto, Type: sr.TypeProtobuf})
	require.NoError(t, err)
	cols, err := typemap.ParseColumns(orderProtoDefs)
	require.NoError(t, err)
	conv, err := arrowconv.New(cols, arrowconv.Options{})
	require.NoError(t, err)
	return &clientSource{cl: cl}, conv, ss.ID
}

// protoOrder is Order i's payload.
func protoOrder(i int) []byte {
	b := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(i+1))
	if i%3 != 0 {
		b = protowire.AppendString(protowire.AppendTag(b, 2, protowire.BytesType), fmt.Sprintf("sku-%d", i))
	}
	for k := range i % 4 {
		b = protowire.AppendVarint(protowire.AppendTag(b, 3, protowire.VarintType), uint64(k))
	}
	return b
}

// protoFrame frames a payload with the header and a message-index array.
func protoFrame(id int, index []byte, payload []byte) []byte {
	return frame(id, append(append([]byte{}, index...), payload...))
}

// protoGeneral is the general path: the codec's decode, then
// ConvertStructured.
func protoGeneral(t *testing.T, conv *arrowconv.Converter, id int, values [][]byte) arrowconv.Result {
	codec, err := registry.NewCodec(registry.Schema{ID: id, Format: registry.Protobuf, Text: orderProto}, Options)
	require.NoError(t, err)
	rows := make([]arrowconv.StructuredRow, len(values))
	for i, v := range values {
		d, _, err := codec.Decode(v[5:])
		rows[i] = decodedRow{d, err}
	}
	res, err := conv.ConvertStructured(rows)
	require.NoError(t, err)
	return res
}

type decodedRow struct {
	v   any
	err error
}

func (r decodedRow) AsBytes() ([]byte, error)   { return nil, errors.New("structured only") }
func (r decodedRow) HasStructured() bool        { return true }
func (r decodedRow) AsStructured() (any, error) { return r.v, r.err }

// A batch of one Protobuf schema id and one message index converts on the
// fast path into the general path's record (the index written either way
// Confluent's serializers allow), a malformed value failing alone with the
// general path's error; the schema is fetched once.
func TestConvertProtobufBatch(t *testing.T) {
	src, conv, id := newProtoFixture(t)
	p := New(src)
	values := make([][]byte, 60)
	for i := range values {
		index := []byte{0}
		if i%2 == 1 {
			index = []byte{2, 0} // [0] as a one-index array
		}
		values[i] = protoFrame(id, index, protoOrder(i))
	}
	values[7] = protoFrame(id, []byte{0}, append(protoOrder(7), 0x12, 0x09, 'x')) // a truncated sku
	for range 2 {
		res, ok, err := p.Convert(context.Background(), conv, values)
		require.NoError(t, err)
		require.True(t, ok)
		want := protoGeneral(t, conv, id, values)
		assert.Equal(t, want.SourceIndex, res.SourceIndex)
		require.Len(t, res.RowErrors, 1)
		assert.Equal(t, want.RowErrors[0].Error(), res.RowErrors[0].Error())
		assert.Contains(t, res.RowErrors[0].Error(), fmt.Sprintf("message 7: reading structured message: schema %d: decoding Protobuf message Order", id))
		assert.True(t, arrayRecordEqual(want, res))
		want.Record.Release()
		res.Record.Release()
	}
	assert.EqualValues(t, 1, src.fetches.Load())
	assert.NoError(t, p.WhyProtobuf(conv, id, []int{0}))
}

func arrayRecordEqual(a, b arrowconv.Result) bool {
	return array.RecordEqual(a.Record, b.Record)
}

// A batch mixing message indexes, or of a message the fast path does not
// plan, is left to the caller's general path.
func TestConvertProtobufOtherBatches(t *testing.T) {
	src, conv, id := newProtoFixture(t)
	p := New(src)
	ctx := context.Background()
	other := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5)
	for name, values := range map[string][][]byte{
		"two messages":               {protoFrame(id, []byte{0}, protoOrder(1)), protoFrame(id, []byte{2, 2}, other)},
		"a message not planned":      {protoFrame(id, []byte{2, 2}, other)},
		"a bad index":                {protoFrame(id, []byte{0}, protoOrder(1)), protoFrame(id, []byte{0x80}, nil)},
		"an index past the messages": {protoFrame(id, []byte{2, 8}, other)},
	} {
		_, ok, err := p.Convert(ctx, conv, values)
		require.NoError(t, err, name)
		assert.False(t, ok, name)
	}
	why := p.WhyProtobuf(conv, id, []int{1})
	assert.ErrorIs(t, why, arrowconv.ErrProtobufNotPlanned)
	assert.ErrorContains(t, why, "a map field with int32 keys")
	assert.Error(t, p.WhyProtobuf(conv, id, []int{4}))
}

// decodingSource is a SchemaSource that is also the caller's general path
// (as the output's Holder is): a row the fast path does not take is redone
// with it.
type decodingSource struct {
	*clientSource
	codec registry.Codec
}

func (s decodingSource) Decode(_ context.Context, value []byte) (registry.Decoded, error) {
	v, _, err := s.codec.Decode(value[5:])
	if err != nil {
		return registry.Decoded{}, fmt.Errorf("the caller's decoder: %w", err)
	}
	return registry.Decoded{Value: v}, nil
}

func TestConvertProtobufRedoesWithCallersDecoder(t *testing.T) {
	src, conv, id := newProtoFixture(t)
	codec, err := registry.NewCodec(registry.Schema{ID: id, Format: registry.Protobuf, Text: orderProto}, Options)
	require.NoError(t, err)
	p := New(decodingSource{src, codec})
	values := [][]byte{protoFrame(id, []byte{0}, protoOrder(1)), protoFrame(id, []byte{0}, []byte{0x0a})}
	res, ok, err := p.Convert(context.Background(), conv, values)
	require.NoError(t, err)
	require.True(t, ok)
	defer res.Record.Release()
	require.Len(t, res.RowErrors, 1)
	assert.Contains(t, res.RowErrors[0].Error(), "message 1: reading structured message: the caller's decoder: schema")
}

// Concurrent batches on one converter share its plans: each converts on a
// state of its own (run with -race).
func TestConvertProtobufConcurrent(t *testing.T) {
	src, conv, id := newProtoFixture(t)
	p := New(src)
	values := make([][]byte, 200)
	for i := range values {
		values[i] = protoFrame(id, []byte{0}, protoOrder(i))
	}
	want := protoGeneral(t, conv, id, values)
	defer want.Record.Release()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				res, ok, err := p.Convert(context.Background(), conv, values)
				if err != nil || !ok {
					errs <- fmt.Errorf("ok %v: %v", ok, err)
					return
				}
				if !array.RecordEqual(want.Record, res.Record) {
					errs <- errors.New("a record differs from the general path's")
				}
				res.Record.Release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
