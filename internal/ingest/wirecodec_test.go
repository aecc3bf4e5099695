package ingest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowipc"
)

// The zero-copy path puts on the wire exactly the bytes the standard proto
// marshaller gives for the same FlightData, for every frame of a batch cut
// into several, with and without body compression, and at offsets whose
// app_metadata length varies; the standard unmarshaller reads them back.
func TestFlightCodecWireBytes(t *testing.T) {
	codec, err := newFlightCodec()
	require.NoError(t, err)
	for _, compression := range []string{"none", "lz4_frame", "zstd"} {
		t.Run(compression, func(t *testing.T) {
			enc, err := newFrameEncoder(compression, 0, 0)
			require.NoError(t, err)
			big := makeBatch(0, 6<<10, 1<<10) // ~6 MiB: several frames
			defer big.Release()
			small := makeBatch(0, 3, 10)
			defer small.Release()
			fb, err := enc.encode(big)
			require.NoError(t, err)
			fs, err := enc.encode(small)
			require.NoError(t, err)
			frames := append(fb, fs...)
			require.Greater(t, len(fb), 1, "the big batch takes several frames")

			for i, f := range frames {
				offset := int64(i) * 997 // 0, then 3-5 digit offsets
				header, body := bytes.Clone(f.header), bytes.Clone(*f.body)
				want, err := proto.Marshal(&flight.FlightData{
					DataHeader:  header,
					AppMetadata: fmt.Appendf(nil, `{"offset_id":%d}`, offset),
					DataBody:    body,
				})
				require.NoError(t, err)

				wf := &wireFrame{env: f.env, body: f.body, offset: offset, pool: enc.pool}
				out, err := codec.Marshal(wf)
				require.NoError(t, err)
				assert.Nil(t, wf.env, "the buffers now belong to gRPC")
				got := out.Materialize()
				require.Equal(t, want, got, "frame %d: wire bytes differ from proto.Marshal", i)

				var fd flight.FlightData
				require.NoError(t, proto.Unmarshal(got, &fd))
				assert.Equal(t, header, fd.DataHeader)
				assert.Equal(t, body, fd.DataBody)
				assert.Equal(t, fmt.Sprintf(`{"offset_id":%d}`, offset), string(fd.AppMetadata))

				idle := enc.pool.Idle()
				out.Free() // what gRPC does once the frame is written
				assert.Greater(t, enc.pool.Idle(), idle, "frame %d: freed buffers return to the pool", i)
			}
		})
	}

	// Anything else (the schema frame, the PutResults) is the proto codec's.
	std, err := proto.Marshal(&flight.FlightData{DataHeader: []byte("schema")})
	require.NoError(t, err)
	out, err := codec.Marshal(&flight.FlightData{DataHeader: []byte("schema")})
	require.NoError(t, err)
	assert.Equal(t, std, out.Materialize())
	out.Free()
	ack, err := proto.Marshal(&flight.PutResult{AppMetadata: []byte(`{"ack_up_to_offset":3}`)})
	require.NoError(t, err)
	var res flight.PutResult
	require.NoError(t, codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(ack)}, &res))
	assert.Equal(t, `{"ack_up_to_offset":3}`, string(res.AppMetadata), "an ack decodes as before")
}

// Frames reuse their buffers: once gRPC freed a frame's buffers, the next
// frame of the same size takes them instead of allocating.
func TestFrameBuffersAreReused(t *testing.T) {
	codec, err := newFlightCodec()
	require.NoError(t, err)
	enc, err := newFrameEncoder("none", 0, 0)
	require.NoError(t, err)
	rec := makeBatch(0, 1000, 1<<10)
	defer rec.Release()
	send := func() (env, body *[]byte) {
		frames, err := enc.encode(rec)
		require.NoError(t, err)
		require.Len(t, frames, 1)
		env, body = frames[0].env, frames[0].body
		out, err := codec.Marshal(&wireFrame{env: env, body: body, pool: enc.pool})
		require.NoError(t, err)
		out.Free()
		return env, body
	}
	env1, body1 := send()
	env2, body2 := send()
	assert.Same(t, env1, env2, "the envelope buffer is reused")
	assert.Same(t, body1, body2, "the body buffer is reused")
	allocs := testing.AllocsPerRun(20, func() { send() })
	t.Logf("allocations per 1 MiB frame, encode + marshal: %.0f", allocs)
}

// The DoPut call's content-type is unchanged by the codec.
func TestFlightCodecKeepsContentType(t *testing.T) {
	srv := &fakeFlightServer{}
	c := testClient(t, startFake(t, srv), nil)
	s := openStream(t, c)
	submitAll(t, s, makeBatch(0, 10, 10))
	require.NoError(t, s.WaitDurable(waitCtx(t), 10))
	assert.Equal(t, []string{"application/grpc"}, srv.conn(0).md.Get("content-type"))
}

// A batch is sent frame by frame as it is encoded; its in-flight
// reservation, taken by its in-memory size, is settled to the bytes it was
// sent as (here compressed, far smaller), and given back by the ack.
func TestSubmitSettlesToEncodedBytes(t *testing.T) {
	srv := &fakeFlightServer{onFrame: func(frameEvent) reply { return reply{noAck: true} }}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.Compression = "lz4_frame" })
	s, err := c.OpenArrowStream(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()
	rec := makeBatch(0, 5000, 1000) // ~5 MB of repetitive rows: several frames
	defer rec.Release()
	span, err := s.Submit(waitCtx(t), rec)
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, _, ids := srv.conn(0).snapshot(); return len(ids) == 5000 }, 10*time.Second, time.Millisecond)
	raw, offsets, _ := srv.conn(0).snapshot()
	require.Greater(t, len(offsets), 1, "several frames")
	var wire int64
	for _, f := range raw[1:] {
		wire += int64(len(f.header) + f.bodyLen)
	}
	s.mu.Lock()
	inflight := s.inflightBytes
	s.mu.Unlock()
	assert.Equal(t, wire, inflight, "the reservation is the bytes sent")
	assert.Less(t, inflight, arrowipc.RecordBytes(rec)/4, "compressed, far below the in-memory estimate")

	require.NoError(t, srv.conn(0).sendAck(offsets[len(offsets)-1], 5000, nil))
	require.NoError(t, s.WaitDurable(waitCtx(t), span.To))
	s.mu.Lock()
	defer s.mu.Unlock()
	assert.Zero(t, s.inflightBytes)
}
