package kafka

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// groupConf is a one-topic consumer group config with fast commits and
// small batches (about four records each).
func groupConf(addrs []string, topic, group string, extra ...string) string {
	return yamlConf(addrs, append([]string{
		"topics: [ " + topic + " ]",
		"consumer_group: " + group,
		"commit_period: 100ms",
		"max_yield_batch_bytes: 100B",
	}, extra...)...)
}

// neverCommitted asserts that the group's commit of partition p stays
// below (or absent) limit for a few commit periods.
func stillBelow(t *testing.T, addrs []string, group, topic string, p int32, limit int64) {
	t.Helper()
	deadline := time.Now().Add(600 * time.Millisecond)
	for time.Now().Before(deadline) {
		if at, ok := committed(t, addrs, group, topic)[p]; ok {
			require.Less(t, at, limit, "partition %d committed past an unacknowledged record", p)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitCommitted(t *testing.T, addrs []string, group, topic string, p int32, want int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		return committed(t, addrs, group, topic)[p] == want
	}, wait, 50*time.Millisecond, "partition %d committed offset %d", p, want)
}

// TestCommitOnlyAfterAck: nothing is committed for records handed out and
// not acknowledged; acks out of order wait for the run below them; the
// commit lands on the offset after the last acknowledged record.
func TestCommitOnlyAfterAck(t *testing.T) {
	const topic, group = "orders", "g-ack"
	c := newCluster(t, topic, 1)
	addrs := c.ListenAddrs()
	produce(t, addrs, topic, 1, 0, 40)
	in := newTestInput(t, groupConf(addrs, topic, group))

	ds := readN(t, in, 40)
	require.GreaterOrEqual(t, len(ds), 3, "several batches")
	next := 0
	for _, d := range ds {
		for _, o := range d.offsets(t) {
			require.Equal(t, next, o, "offsets in order, each once")
			next++
		}
	}
	stillBelow(t, addrs, group, topic, 0, 1) // nothing acked: nothing committed

	// Ack every batch but the first, in reverse order: the gap holds.
	for i := len(ds) - 1; i >= 1; i-- {
		ack(t, ds[i], nil)
	}
	stillBelow(t, addrs, group, topic, 0, 1)

	ack(t, ds[0], nil)
	waitCommitted(t, addrs, group, topic, 0, 40)
}

// TestOutOfOrderAcksCommitPrefix: with a hole in the middle the commit
// advances to the hole and no further, then past it once it is filled.
func TestOutOfOrderAcksCommitPrefix(t *testing.T) {
	const topic, group = "orders", "g-ooo"
	c := newCluster(t, topic, 1)
	addrs := c.ListenAddrs()
	produce(t, addrs, topic, 1, 0, 40)
	in := newTestInput(t, groupConf(addrs, topic, group))
	ds := readN(t, in, 40)
	require.GreaterOrEqual(t, len(ds), 3)

	hole := len(ds) / 2
	for i := len(ds) - 1; i >= 0; i-- {
		if i != hole {
			ack(t, ds[i], nil)
		}
	}
	holeStart := int64(ds[hole].offsets(t)[0])
	waitCommitted(t, addrs, group, topic, 0, holeStart)
	stillBelow(t, addrs, group, topic, 0, holeStart+1)

	ack(t, ds[hole], nil)
	waitCommitted(t, addrs, group, topic, 0, 40)
}

// TestNackRedeliversInOrder: a nacked batch comes back, with the same
// records in the same order, before anything newer of its partition; the
// commit waits for it.
func TestNackRedeliversInOrder(t *testing.T) {
	const topic, group = "orders", "g-nack"
	c := newCluster(t, topic, 1)
	addrs := c.ListenAddrs()
	produce(t, addrs, topic, 1, 0, 40)
	in := newTestInput(t, groupConf(addrs, topic, group))

	first := read(t, in)
	second := read(t, in)
	ack(t, second, nil)
	ack(t, first, errors.New("output refused"))

	again := read(t, in)
	assert.Equal(t, first.offsets(t), again.offsets(t), "the nacked batch again, first")
	for i, m := range again.msgs {
		b, err := m.AsBytes()
		require.NoError(t, err)
		want, _ := first.msgs[i].AsBytes()
		assert.Equal(t, want, b)
	}
	stillBelow(t, addrs, group, topic, 0, 1)

	// A second nack: still first, still in order.
	ack(t, again, errors.New("refused again"))
	third := read(t, in)
	assert.Equal(t, first.offsets(t), third.offsets(t))
	ack(t, third, nil)
	waitCommitted(t, addrs, group, topic, 0, int64(second.offsets(t)[len(second.msgs)-1]+1))

	// Then the rest, from where the second batch ended.
	rest := read(t, in)
	assert.Equal(t, second.offsets(t)[len(second.msgs)-1]+1, rest.offsets(t)[0])
}

// TestNackWithoutReplayDrops: with auto_replay_nacks: false a nack counts
// as delivered (Redpanda Connect: rejected messages are deleted) and the
// commit moves past it.
func TestNackWithoutReplayDrops(t *testing.T) {
	const topic, group = "orders", "g-noreplay"
	c := newCluster(t, topic, 1)
	addrs := c.ListenAddrs()
	produce(t, addrs, topic, 1, 0, 8)
	in := newTestInput(t, groupConf(addrs, topic, group, "auto_replay_nacks: false"))
	ds := readN(t, in, 8)
	for _, d := range ds {
		ack(t, d, errors.New("refused"))
	}
	waitCommitted(t, addrs, group, topic, 0, 8)
}

// TestCommitOnAck: with commit_on_ack an acknowledgement is committed at
// once, long before commit_period; without it the commit waits for the
// period.
func TestCommitOnAck(t *testing.T) {
	const topic = "orders"
	c := newCluster(t, topic, 1)
	addrs := c.ListenAddrs()
	produce(t, addrs, topic, 1, 0, 40)
	conf := func(group string, extra ...string) string {
		return yamlConf(addrs, append([]string{
			"topics: [ " + topic + " ]",
			"consumer_group: " + group,
			"commit_period: 1h",
			"max_yield_batch_bytes: 100B",
		}, extra...)...)
	}

	off := newTestInput(t, conf("g-period"))
	ds := readN(t, off, 40)
	for _, d := range ds {
		ack(t, d, nil)
	}
	stillBelow(t, addrs, "g-period", topic, 0, 1) // the hour has not passed

	on := newTestInput(t, conf("g-on-ack", "commit_on_ack: true"))
	ds = readN(t, on, 40)
	require.GreaterOrEqual(t, len(ds), 3, "several batches")
	ack(t, ds[1], nil)
	stillBelow(t, addrs, "g-on-ack", topic, 0, 1) // the first batch is not acknowledged
	start := time.Now()
	ack(t, ds[0], nil)
	end := int64(0)
	for _, o := range ds[1].offsets(t) {
		end = int64(o) + 1
	}
	waitCommitted(t, addrs, "g-on-ack", topic, 0, end)
	t.Logf("committed %d within %v of the ack", end, time.Since(start))
	for _, d := range ds[2:] {
		ack(t, d, nil)
	}
	waitCommitted(t, addrs, "g-on-ack", topic, 0, 40)
}
