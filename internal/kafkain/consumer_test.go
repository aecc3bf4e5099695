package kafkain

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

type nopLog struct{}

func (nopLog) Debugf(string, ...any) {}
func (nopLog) Infof(string, ...any)  {}
func (nopLog) Warnf(string, ...any)  {}
func (nopLog) Errorf(string, ...any) {}

// TestLostPartitionsNeverCommit: partitions the group session lost are
// released at once; acks of their batches that arrive afterwards commit
// nothing (the group may already have given them to another member).
func TestLostPartitionsNeverCommit(t *testing.T) {
	const topic, group = "lost", "g-lost"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	require.NoError(t, err)
	defer c.Close()
	addrs := c.ListenAddrs()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	for i := range 20 {
		require.NoError(t, pcl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%d", i)}).FirstErr())
	}
	pcl.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := New(ctx, Config{
		SeedBrokers: addrs, Topics: []string{topic}, Group: group,
		StartOffset: kgo.NewOffset().AtStart(), CommitPeriod: 50 * time.Millisecond,
		RebalanceTimeout: 5 * time.Second, SessionTimeout: 10 * time.Second, HeartbeatInterval: time.Second,
		Limits: Limits{MaxUnacked: 100, BufferBytes: 1 << 20, YieldBytes: 20, Replay: true},
	}, nopLog{}, nil)
	require.NoError(t, err)
	defer func() { _ = cons.Close(ctx) }()

	var held []*Batch
	for n := 0; n < 20; {
		b, err := cons.Next(ctx)
		require.NoError(t, err)
		n += len(cons.Handed(b))
		held = append(held, b)
	}
	// The session is lost (as franz-go reports a fatal group error).
	cons.onLost(ctx, cons.Client(), map[string][]int32{topic: {0}})
	assert.Empty(t, cons.Tracker().State(), "released")
	for _, b := range held {
		assert.False(t, cons.Ack(b, b.Delivery(), nil), "an ack after the loss does not count")
	}
	time.Sleep(300 * time.Millisecond) // several commit periods
	offs, err := kadm.NewClient(cons.Client()).FetchOffsets(ctx, group)
	require.NoError(t, err, "the group exists: the consumer joined it")
	o, ok := offs.Lookup(topic, 0)
	assert.False(t, ok && o.At >= 0, "nothing committed for a lost partition: %+v", o)
}

// TestFetchLimitsFollowTheBudget: fetches ask for what the byte budget has
// room for, converted to bytes on the wire at the cost per wire byte the
// fetch hook measured (an assumed 32 before any batch), within
// fetch_max_bytes and fetch_max_partition_bytes, and never less than 1 byte.
func TestFetchLimitsFollowTheBudget(t *testing.T) {
	c := &Consumer{cfg: Config{FetchMaxBytes: 50 << 20, FetchMaxPartitionBytes: 1 << 20, Limits: Limits{MaxUnackedBytes: 16 << 20}}}
	wire, part := c.fetchLimits(16 << 20)
	assert.Equal(t, int32(16<<20/initialCostPerWireByte), wire, "before any batch")
	assert.Equal(t, wire, part)

	// Batches of 5,000 records, 1 MB decompressed from 100 kB: each wire
	// byte costs (1 MB + 5,000 KiB) / 100 kB.
	for range 3 {
		c.sizer.OnFetchBatchRead(kgo.BrokerMetadata{}, "t", 0, kgo.FetchBatchMetrics{NumRecords: 5000, UncompressedBytes: 1_000_000, CompressedBytes: 100_000})
	}
	ratio := float64(1_000_000+5000*RecordOverhead) / 100_000
	wire, part = c.fetchLimits(16 << 20)
	assert.InDelta(t, float64(16<<20)/ratio, float64(wire), 1)
	assert.Equal(t, wire, part, "below fetch_max_partition_bytes")

	wire, part = c.fetchLimits(-5)
	assert.Equal(t, int32(1), wire, "no room: one byte (a broker still returns one batch)")
	assert.Equal(t, int32(1), part)

	// Uncompressed records: the room is capped by the configured limits.
	c.sizer = fetchSizer{}
	c.sizer.OnFetchBatchRead(kgo.BrokerMetadata{}, "t", 0, kgo.FetchBatchMetrics{NumRecords: 1, UncompressedBytes: 100_000, CompressedBytes: 100_000})
	wire, part = c.fetchLimits(1 << 40)
	assert.Equal(t, int32(50<<20), wire)
	assert.Equal(t, int32(1<<20), part)
}
