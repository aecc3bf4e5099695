package ingest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestArrowStreamSplitsAboveFrameCap(t *testing.T) {
	const maxFrame = 8 << 10
	srv := &fakeFlightServer{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.MaxFrameBytes = maxFrame })
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()

	spans := submitAll(t, s, makeBatch(0, 2000, 40), makeBatch(2000, 10, 40))
	assert.Equal(t, []Span{{0, 2000}, {2000, 2010}}, spans)
	require.NoError(t, s.WaitDurable(waitCtx(t), 2010))

	raw, offsets, ids := srv.conn(0).snapshot()
	assert.Greater(t, len(offsets), 10, "2000 rows of ~56 bytes need many 8 KiB frames")
	for i, o := range offsets {
		assert.Equal(t, int64(i), o)
	}
	for _, f := range raw[1:] {
		assert.LessOrEqual(t, len(f.header)+f.bodyLen, maxFrame)
	}
	assert.Equal(t, seq(0, 2010), ids)

	_, err = s.Submit(context.Background(), makeBatch(2010, 1, maxFrame))
	assert.ErrorIs(t, err, ErrRowTooLarge)
	assert.Equal(t, uint64(2010), s.(*ArrowStream).Submitted(), "a refused batch takes no span")
}

func TestArrowStreamCompression(t *testing.T) {
	for _, codec := range []string{"none", "lz4_frame", "zstd"} {
		t.Run(codec, func(t *testing.T) {
			srv := &fakeFlightServer{}
			c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.Compression = codec })
			s, err := c.Open(waitCtx(t), testTable, testSchema)
			require.NoError(t, err)
			defer s.Close()
			submitAll(t, s, makeBatch(0, 1000, 100))
			require.NoError(t, s.WaitDurable(waitCtx(t), 1000))
			raw, _, ids := srv.conn(0).snapshot()
			assert.Equal(t, seq(0, 1000), ids, "server decodes the rows")
			body := raw[1].bodyLen
			if codec == "none" {
				assert.Greater(t, body, 100_000)
			} else {
				assert.Less(t, body, 30_000, "repetitive rows compress well")
			}
		})
	}
	_, err := NewClient(Config{Endpoint: "http://127.0.0.1:1", Token: StaticToken("x"), Compression: "snappy"})
	assert.Error(t, err)
}
