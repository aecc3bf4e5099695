package emulator

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The ack-only path counts a batch from its IPC header without decoding
// it, and still keeps the stream's rules on offsets and empty batches.
func TestAckOnlyCountsFromHeader(t *testing.T) {
	srv := startEmu(t, func(c *Config) { c.Faults.AckOnly = true })
	conn := dial(t, srv)
	tok := zerobusToken(t, srv, testTable)
	rows := func() int64 { return srv.Stats().Tables[testTable].RowsAcked }

	p, _, err := openPut(t, conn, tok, testTable, testSchema)
	require.NoError(t, err)
	for i, n := range []int{3, 7} {
		rec := makeBatch(0, n)
		require.NoError(t, p.send(rec, int64(i)))
		rec.Release()
	}
	acks := p.waitRecords(10)
	assert.EqualValues(t, 1, acks[len(acks)-1].Offset)
	empty := makeBatch(0, 0)
	defer empty.Release()
	require.NoError(t, p.send(empty, 2))
	err = p.finish()
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "record batch at offset 2 has no rows")
	assert.EqualValues(t, 10, rows(), "rows acked are counted")
	assert.EqualValues(t, 0, rowCount(t, srv, testTable), "nothing is stored")

	p, _, err = openPut(t, conn, tok, testTable, testSchema)
	require.NoError(t, err)
	rec := makeBatch(0, 2)
	defer rec.Release()
	require.NoError(t, p.send(rec, 1))
	err = p.finish()
	assert.Equal(t, "Non-incremental offset: expected 0, actual 1", status.Convert(err).Message())

	// A frame whose header is no record batch goes to the record reader,
	// which refuses it as the service would.
	p, _, err = openPut(t, conn, tok, testTable, testSchema)
	require.NoError(t, err)
	require.NoError(t, p.stream.Send(&flight.FlightData{DataHeader: []byte("not a flatbuffer message"), AppMetadata: []byte(`{"offset_id":0}`)}))
	err = p.finish()
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.EqualValues(t, 10, rows())
}

// The command started with --ack-only runs on one CPU, unless it serves
// Kafka too or GOMAXPROCS is set; without --ack-only it leaves the runtime
// alone.
func TestAckOnlyProcs(t *testing.T) {
	flagsConfig := func(args ...string) Config {
		cfg, err := configFromArgs(args...)
		require.NoError(t, err)
		return cfg
	}
	procs, why := ackOnlyProcs(flagsConfig("--ack-only"), "")
	assert.Equal(t, 1, procs)
	assert.Contains(t, why, "GOMAXPROCS")
	for _, c := range []struct {
		args []string
		env  string
	}{
		{nil, ""},
		{[]string{"--ack-only"}, "2"},
		{[]string{"--ack-only", "--kafka", "127.0.0.1:0"}, ""},
	} {
		procs, _ := ackOnlyProcs(flagsConfig(c.args...), c.env)
		assert.Zero(t, procs, "%v GOMAXPROCS=%q", c.args, c.env)
	}
}
