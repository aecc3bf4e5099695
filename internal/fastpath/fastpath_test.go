package fastpath

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"weak"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// clientSource is a SchemaSource over franz-go's registry client, counting
// fetches (the processor's client, with references and a cache, takes its
// place in the output).
type clientSource struct {
	cl      *sr.Client
	fetches atomic.Int32
}

func (s *clientSource) Fetch(ctx context.Context, id int) (registry.Schema, error) {
	s.fetches.Add(1)
	got, err := s.cl.SchemaByID(ctx, id)
	if err != nil {
		return registry.Schema{}, err
	}
	f := registry.Avro
	switch got.Type {
	case sr.TypeProtobuf:
		f = registry.Protobuf
	case sr.TypeJSON:
		f = registry.JSONSchema
	}
	return registry.Schema{ID: id, Format: f, Text: got.Schema}, nil
}

const orderSchema = `{"type":"record","name":"Order","fields":[
 {"name":"id","type":"long"},
 {"name":"sku","type":["null","string"]},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
 {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}}
]}`

const orderDefs = "id BIGINT NOT NULL, sku STRING, amount DECIMAL(10,2), at TIMESTAMP"

type enc []byte

func (e enc) long(v int64) enc   { return binary.AppendUvarint(e, uint64(v<<1)^uint64(v>>63)) }
func (e enc) str(s string) enc   { return append(e.long(int64(len(s))), s...) }
func (e enc) bytes(b []byte) enc { return append(e.long(int64(len(b))), b...) }

// frame puts the registry's header before an Avro body.
func frame(id int, body []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(id)), body...)
}

func order(i int) []byte {
	var e enc
	e = e.long(int64(i))
	if i%4 == 0 {
		e = e.long(0)
	} else {
		e = e.long(1).str(fmt.Sprintf("sku-%d", i))
	}
	cents := int64(i*137 - 500)
	e = e.bytes([]byte{byte(cents >> 8), byte(cents)})
	return e.long(1_700_000_000_000 + int64(i))
}

type fixture struct {
	src  *clientSource
	conv *arrowconv.Converter
}

func newFixture(t *testing.T, schemas ...string) (*fixture, []int) {
	reg := srfake.New()
	t.Cleanup(reg.Close)
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	require.NoError(t, err)
	var ids []int
	for k, s := range schemas {
		typ := sr.TypeAvro
		if s[0] != '{' {
			typ, s = sr.TypeJSON, s[1:]
		}
		ss, err := cl.CreateSchema(context.Background(), fmt.Sprintf("s%d-value", k), sr.Schema{Schema: s, Type: typ})
		require.NoError(t, err)
		ids = append(ids, ss.ID)
	}
	cols, err := typemap.ParseColumns(orderDefs)
	require.NoError(t, err)
	conv, err := arrowconv.New(cols, arrowconv.Options{})
	require.NoError(t, err)
	return &fixture{src: &clientSource{cl: cl}, conv: conv}, ids
}

// slowPath is the processor path: the codec's decode, then
// ConvertStructured.
func slowPath(t *testing.T, conv *arrowconv.Converter, schema string, values [][]byte) arrowconv.Result {
	codec, err := registry.NewCodec(registry.Schema{ID: 1, Format: registry.Avro, Text: schema}, Options)
	require.NoError(t, err)
	rows := make([]arrowconv.StructuredRow, len(values))
	for i, v := range values {
		d, _, err := codec.Decode(v[5:])
		require.NoError(t, err)
		rows[i] = structured{d}
	}
	res, err := conv.ConvertStructured(rows)
	require.NoError(t, err)
	return res
}

type structured struct{ v any }

func (r structured) AsBytes() ([]byte, error)   { return nil, errors.New("structured only") }
func (r structured) HasStructured() bool        { return true }
func (r structured) AsStructured() (any, error) { return r.v, nil }

// A batch framed with one Avro schema converts on the fast path into the
// processor path's record, and the schema is fetched once.
func TestConvertFramedBatch(t *testing.T) {
	f, ids := newFixture(t, orderSchema)
	p := New(f.src)
	values := make([][]byte, 100)
	for i := range values {
		values[i] = frame(ids[0], order(i))
	}
	for range 3 {
		res, ok, err := p.Convert(context.Background(), f.conv, values)
		require.NoError(t, err)
		require.True(t, ok)
		want := slowPath(t, f.conv, orderSchema, values)
		assert.Empty(t, res.RowErrors)
		assert.True(t, array.RecordEqual(want.Record, res.Record))
		assert.Equal(t, want.SourceIndex, res.SourceIndex)
		res.Record.Release()
		want.Record.Release()
	}
	assert.EqualValues(t, 1, f.src.fetches.Load())

	// A bad value fails only its row, naming it.
	values[7] = values[7][:8]
	res, ok, err := p.Convert(context.Background(), f.conv, values)
	require.NoError(t, err)
	require.True(t, ok)
	defer res.Record.Release()
	require.Len(t, res.RowErrors, 1)
	assert.Equal(t, 7, res.RowErrors[0].Index)
	assert.EqualValues(t, 99, res.Record.NumRows())
}

// A batch of several schema ids, or of a schema the fast path does not
// plan, converts through the codec; one with a value not framed or a
// schema that is not Avro is left to the caller.
func TestConvertOtherBatches(t *testing.T) {
	wide := `{"type":"record","name":"Order","fields":[{"name":"id","type":["long","string"]}]}`
	f, ids := newFixture(t, orderSchema, wide, `J{"type":"object","properties":{"id":{"type":"integer"}}}`)
	p := New(f.src)
	ctx := context.Background()
	for name, values := range map[string][][]byte{
		"JSON values":        {[]byte(`{"id":1}`)},
		"a value not framed": {frame(ids[0], order(1)), []byte(`{"id":2}`)},
		"a JSON Schema":      {frame(ids[2], []byte(`{"id":1}`))},
		"no values":          nil,
	} {
		_, ok, err := p.Convert(ctx, f.conv, values)
		require.NoError(t, err, name)
		assert.False(t, ok, name)
	}
	assert.ErrorIs(t, p.Why(f.conv, ids[2]), errNotAvro)

	// Two schema ids, one not planned (a union of two non-null types): the
	// codec decodes both, and each value lands or fails as it would
	// through the processor.
	values := [][]byte{frame(ids[0], order(1)), frame(ids[1], enc{}.long(0).long(3)), frame(ids[1], enc{}.long(1).str("x"))}
	res, ok, err := p.Convert(ctx, f.conv, values)
	require.NoError(t, err)
	require.True(t, ok)
	defer res.Record.Release()
	assert.Equal(t, []int{0, 1}, res.SourceIndex)
	require.Len(t, res.RowErrors, 1)
	assert.Equal(t, 2, res.RowErrors[0].Index)
	assert.Equal(t, "id", res.RowErrors[0].Column)
	assert.ErrorIs(t, p.Why(f.conv, ids[1]), arrowconv.ErrAvroNotPlanned)
	assert.ErrorContains(t, p.Why(f.conv, ids[1]), `"id"`)
	assert.NoError(t, p.Why(f.conv, ids[0]))
	ids64 := res.Record.Column(0).(*array.Int64)
	assert.Equal(t, []int64{1, 3}, ids64.Int64Values())

	// An id the registry does not know is the rows' own fault, not the
	// batch's: the batch is left to the caller, whose general path fails
	// those rows alone with the registry's reason.
	_, ok, err = p.Convert(ctx, f.conv, [][]byte{frame(ids[0], order(1)), frame(4242, order(1))})
	require.NoError(t, err)
	assert.False(t, ok)
}

// failingSource fails every fetch with err.
type failingSource struct{ err error }

func (s failingSource) Fetch(context.Context, int) (registry.Schema, error) {
	return registry.Schema{}, s.err
}

// Only a registry fault (registry.Retryable) or the end of ctx is Convert's
// error, which holds the batch; a schema id the registry does not know or a
// schema it cannot use leaves the batch to the caller's general path, which
// fails those rows alone rather than holding every row of the batch.
func TestConvertHoldsOnlyForRegistryFaults(t *testing.T) {
	f, ids := newFixture(t, orderSchema)
	values := [][]byte{frame(ids[0], order(1)), frame(ids[0], order(2))}
	ctx := context.Background()
	for name, src := range map[string]failingSource{
		"unknown id": {&registry.NotFoundError{ID: ids[0], Code: 40403, Message: "Schema not found"}},
		"unusable":   {&registry.SchemaError{ID: ids[0], Err: errors.New("reference cycle")}},
	} {
		_, ok, err := New(src).Convert(ctx, f.conv, values)
		assert.NoError(t, err, name)
		assert.False(t, ok, name)
	}
	for name, src := range map[string]failingSource{
		"unreachable":  {&registry.UnreachableError{URL: "http://sr", Status: 503, Err: errors.New("down")}},
		"unauthorized": {&registry.UnauthorizedError{URL: "http://sr", Status: 401, Message: "no", Field: "basic_auth"}},
	} {
		_, ok, err := New(src).Convert(ctx, f.conv, values)
		assert.True(t, registry.Retryable(err), "%s: %v", name, err)
		assert.False(t, ok, name)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, ok, err := New(failingSource{cancelled.Err()}).Convert(cancelled, f.conv, values)
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, ok)
}

// A table that evolved gets a new converter: the plans made for the old one
// are kept on it, not by the path, so the old converter, its plans and
// their codecs are collected once nothing else holds it, and the new one
// plans afresh (one more fetch).
func TestReplacedConverterReleasesItsPlans(t *testing.T) {
	f, ids := newFixture(t, orderSchema)
	p := New(f.src)
	values := [][]byte{frame(ids[0], order(1)), frame(ids[0], order(2))}
	convert := func(conv *arrowconv.Converter) {
		res, ok, err := p.Convert(context.Background(), conv, values)
		require.NoError(t, err)
		require.True(t, ok)
		res.Record.Release()
		require.NoError(t, p.Why(conv, ids[0]))
		require.NotNil(t, conv.Kept(planKey{p, ids[0]}), "the plan is kept on its converter")
	}
	gone := func() weak.Pointer[arrowconv.Converter] {
		old := newConverter(t)
		convert(old)
		return weak.Make(old)
	}()
	for range 3 {
		runtime.GC()
	}
	assert.Nil(t, gone.Value(), "the replaced converter (and its plans) collected")
	assert.EqualValues(t, 1, f.src.fetches.Load())

	conv := newConverter(t)
	convert(conv)
	assert.EqualValues(t, 2, f.src.fetches.Load(), "a new converter plans afresh")

	// Another path on the same converter (another output, another
	// registry) does not take this one's plan: it asks its own registry.
	down := New(failingSource{&registry.UnreachableError{URL: "http://sr", Status: 503, Err: errors.New("down")}})
	_, ok, err := down.Convert(context.Background(), conv, values)
	assert.True(t, registry.Retryable(err), "%v", err)
	assert.False(t, ok)
}

func newConverter(t *testing.T) *arrowconv.Converter {
	cols, err := typemap.ParseColumns(orderDefs)
	require.NoError(t, err)
	conv, err := arrowconv.New(cols, arrowconv.Options{})
	require.NoError(t, err)
	return conv
}
