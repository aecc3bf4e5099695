package emulator

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// splitWire cuts wire into buffers as the transport delivers a message (one
// per HTTP/2 data frame): each byte of cuts is the length of the next
// buffer (0 makes an empty one), the rest of wire is the last. The buffers
// are copies, so a test can overwrite them after decoding.
func splitWire(wire, cuts []byte) mem.BufferSlice {
	var out mem.BufferSlice
	for _, c := range cuts {
		n := min(int(c), len(wire))
		out = append(out, mem.SliceBuffer(bytes.Clone(wire[:n])))
		wire = wire[n:]
	}
	return append(out, mem.SliceBuffer(bytes.Clone(wire)))
}

// checkCodecMatchesProto decodes wire, cut by cuts, with flightCodec and
// with proto.Unmarshal and fails unless both give the same error or the
// same message (to the nil-ness of each bytes field), and the message keeps
// nothing of the received buffers. It reports whether decodeFlightData
// decoded the message itself (the rest goes to the proto codec).
func checkCodecMatchesProto(t *testing.T, wire, cuts []byte) (fast bool) {
	t.Helper()
	want := &flight.FlightData{}
	wantErr := proto.Unmarshal(wire, want)

	fast = decodeFlightData(splitWire(wire, cuts), &flight.FlightData{})
	bufs := splitWire(wire, cuts)
	got := &flight.FlightData{}
	gotErr := newFlightCodec().Unmarshal(bufs, got)
	if wantErr != nil || gotErr != nil {
		require.Error(t, gotErr, "proto.Unmarshal: %v", wantErr)
		require.Error(t, wantErr, "flightCodec: %v", gotErr)
		require.Equal(t, wantErr.Error(), gotErr.Error())
		require.False(t, fast, "decodeFlightData accepted what proto.Unmarshal refuses")
		return fast
	}
	// The transport reuses its buffers once the codec returns.
	for _, b := range bufs {
		for i := range b.ReadOnlyData() {
			b.ReadOnlyData()[i] ^= 0xff
		}
	}
	require.True(t, proto.Equal(want, got), "want %v\ngot  %v", want, got)
	assert.Equal(t, want.DataHeader == nil, got.DataHeader == nil, "data_header nil-ness")
	assert.Equal(t, want.AppMetadata == nil, got.AppMetadata == nil, "app_metadata nil-ness")
	assert.Equal(t, want.DataBody == nil, got.DataBody == nil, "data_body nil-ness")
	assert.Equal(t, want.FlightDescriptor == nil, got.FlightDescriptor == nil, "flight_descriptor nil-ness")
	return fast
}

// codecSeeds are FlightData wire forms: Zerobus's frames (a schema frame
// with its descriptor, record batch frames) and the unusual forms the
// codec leaves to proto.Unmarshal, each with whether decodeFlightData
// decodes it itself.
func codecSeeds(t testing.TB) map[string]struct {
	wire []byte
	fast bool
} {
	marshal := func(fd *flight.FlightData) []byte {
		b, err := proto.Marshal(fd)
		require.NoError(t, err)
		return b
	}
	field := func(b []byte, num protowire.Number, v []byte) []byte {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendBytes(b, v)
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), 125) // 2000 bytes: small enough to fuzz
	batch := marshal(&flight.FlightData{DataHeader: []byte("header"), AppMetadata: []byte(`{"offset_id":7}`), DataBody: body})
	// A tag written in more bytes than it needs (0x92 0x80 0x00 is field 2,
	// length-delimited): valid, and decoded as such by proto.Unmarshal.
	longTag := append([]byte{0x92, 0x80, 0x00, 3}, "abc"...)
	return map[string]struct {
		wire []byte
		fast bool
	}{
		"empty":            {nil, true},
		"record batch":     {batch, true},
		"body only":        {marshal(&flight.FlightData{DataBody: body[:10]}), true},
		"reordered":        {field(field(field(nil, fdBodyField, body[:100]), fdMetaField, []byte("{}")), fdHeaderField, []byte("h")), true},
		"empty fields":     {field(field(field(nil, fdHeaderField, nil), fdMetaField, nil), fdBodyField, nil), true},
		"long tag":         {longTag, true},
		"schema frame":     {marshal(&flight.FlightData{FlightDescriptor: &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"t"}}, DataHeader: []byte("schema")}), false},
		"repeated header":  {field(field(nil, fdHeaderField, []byte("a")), fdHeaderField, []byte("bb")), false},
		"repeated body":    {field(field(nil, fdBodyField, []byte("a")), fdBodyField, nil), false},
		"unknown field":    {field(batch, 77, []byte("x")), false},
		"unknown varint":   {protowire.AppendVarint(protowire.AppendTag(batch, 9, protowire.VarintType), 5), false},
		"header as varint": {protowire.AppendVarint(protowire.AppendTag(nil, fdHeaderField, protowire.VarintType), 5), false},
		"field zero":       {field(nil, 0, []byte("x")), false},
		"truncated body":   {batch[:len(batch)-1], false},
		"truncated tag":    {append(bytes.Clone(batch), 0xc2), false},
		"truncated length": {append(protowire.AppendTag(nil, fdBodyField, protowire.BytesType), 0x80), false},
		"overflow varint":  {append([]byte{0x12}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), false},
		"huge field":       {field(nil, 1<<29-1, []byte("x")), false},
		"end group":        {protowire.AppendTag(nil, fdHeaderField, protowire.EndGroupType), false},
	}
}

// flightCodec decodes every frame as proto.Unmarshal does, however the
// transport cut it into buffers, and decodes Zerobus's record batch frames
// itself.
func TestFlightCodecMatchesProto(t *testing.T) {
	for name, seed := range codecSeeds(t) {
		t.Run(name, func(t *testing.T) {
			for _, cuts := range [][]byte{nil, {1}, {2, 0, 1}, bytes.Repeat([]byte{1}, 64), {7, 255, 3}, bytes.Repeat([]byte{100}, 30)} {
				fast := checkCodecMatchesProto(t, seed.wire, cuts)
				assert.Equal(t, seed.fast, fast, "decoded by decodeFlightData (cuts %v)", cuts)
			}
		})
	}
}

// Messages other than FlightData are the proto codec's.
func TestFlightCodecOtherMessages(t *testing.T) {
	c := newFlightCodec()
	in := &flight.PutResult{AppMetadata: []byte(`{"ack_up_to_offset":3}`)}
	data, err := c.Marshal(in)
	require.NoError(t, err)
	out := &flight.PutResult{}
	require.NoError(t, c.Unmarshal(data, out))
	assert.True(t, proto.Equal(in, out))
	assert.Equal(t, "proto", c.Name())
	assert.Error(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x0a, 0x05})}, out), "truncated")
}

// A body given back by releaseFrameBody is reused by the next frame that
// fits in it, and the frame keeps no reference to it.
func TestReleaseFrameBody(t *testing.T) {
	wire, err := proto.Marshal(&flight.FlightData{DataBody: bytes.Repeat([]byte{1}, 50000)})
	require.NoError(t, err)
	fd := &flight.FlightData{}
	require.True(t, decodeFlightData(splitWire(wire, nil), fd))
	released := &fd.DataBody[:1][0]
	releaseFrameBody(fd)
	assert.Nil(t, fd.DataBody)

	reused := false
	// sync.Pool may drop what it is given (a GC, another P, a quarter of
	// the time under -race); a few tries see the reuse unless it never
	// happens.
	for range 20 {
		next := &flight.FlightData{}
		require.True(t, decodeFlightData(splitWire(wire, nil), next))
		assert.Equal(t, bytes.Repeat([]byte{1}, 50000), next.DataBody)
		if &next.DataBody[:1][0] == released {
			reused = true
			break
		}
		released = &next.DataBody[:1][0]
		releaseFrameBody(next)
	}
	assert.True(t, reused, "a released body is reused")
}

// FuzzFlightCodec checks flightCodec against proto.Unmarshal on any wire
// form cut into any buffers. Seeds: codecSeeds and testdata/fuzz/FuzzFlightCodec.
func FuzzFlightCodec(f *testing.F) {
	for _, seed := range codecSeeds(f) {
		f.Add(seed.wire, []byte{3, 1})
	}
	f.Fuzz(func(t *testing.T, wire, cuts []byte) {
		checkCodecMatchesProto(t, wire, cuts)
	})
}

// offsetSeeds are app_metadata forms: the one clients send, and forms only
// the JSON decoder reads (or refuses).
var offsetSeeds = []string{
	`{"offset_id":0}`, `{"offset_id":42}`, `{"offset_id":-1}`, `{"offset_id":-0}`,
	`{"offset_id":9223372036854775807}`, `{"offset_id":9223372036854775808}`, `{"offset_id":-9223372036854775808}`,
	`{"offset_id":-9223372036854775809}`, `{"offset_id":99999999999999999999}`, `{"offset_id":1-2}`, `{"offset_id":--1}`,
	`{"offset_id":007}`, `{"offset_id":1.0}`, `{"offset_id":1e3}`, `{"offset_id":}`, `{"offset_id":-}`,
	`{"offset_id":"3"}`, `{"offset_id":null}`, `{"offset_id":3} `, `{"offset_id":3}x`, `{"offset_id": 3}`,
	`{"OFFSET_ID":5}`, `{"offset_id":1,"offset_id":2}`, `{"other":1}`, `{"offset_id":12`, ``, `[]`,
}

// parseOffset reads every app_metadata as the JSON decoder does.
func TestParseOffsetMatchesJSON(t *testing.T) {
	for _, meta := range offsetSeeds {
		checkParseOffset(t, []byte(meta))
	}
	// The form clients send is read without the JSON decoder (which
	// allocates).
	meta := []byte(`{"offset_id":9223372036854775807}`)
	var n int64
	var err error
	allocs := testing.AllocsPerRun(10, func() { n, err = parseOffset(meta) })
	require.NoError(t, err)
	assert.EqualValues(t, 9223372036854775807, n)
	assert.Zero(t, allocs)
}

func checkParseOffset(t *testing.T, meta []byte) {
	t.Helper()
	want, wantErr := parseOffsetJSON(meta)
	got, gotErr := parseOffset(meta)
	if wantErr != nil {
		require.EqualError(t, gotErr, wantErr.Error(), "%q", meta)
		return
	}
	require.NoError(t, gotErr, "%q", meta)
	require.Equal(t, want, got, "%q", meta)
}

// FuzzParseOffset checks parseOffset against the JSON decoder on any
// app_metadata. Seeds: offsetSeeds.
func FuzzParseOffset(f *testing.F) {
	for _, meta := range offsetSeeds {
		f.Add([]byte(meta))
	}
	f.Fuzz(func(t *testing.T, meta []byte) { checkParseOffset(t, meta) })
}
