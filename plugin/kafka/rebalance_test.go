package kafka

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitRebalanced waits until the group's parts partitions are shared by a
// and b, b owning some, none of a's leaving.
func waitRebalanced(t *testing.T, a, b *input, parts int) {
	t.Helper()
	require.Eventually(t, func() bool {
		al, aLeaving := owned(a)
		bl, _ := owned(b)
		return len(aLeaving) == 0 && len(bl) > 0 && len(al)+len(bl) == parts
	}, wait, 20*time.Millisecond, "the group rebalanced onto both members")
}

func owned(in *input) (live, leaving []int32) {
	for _, s := range in.consumer().Tracker().State() {
		if s.Leaving {
			leaving = append(leaving, s.TP.Partition)
		} else {
			live = append(live, s.TP.Partition)
		}
	}
	slices.Sort(live)
	return live, leaving
}

// TestRevokeMidFlight: member A holds one unacknowledged batch per
// partition when member B joins. The partitions that move are committed
// exactly up to A's hole (never past it), A's late acks of them commit
// nothing, and B consumes them again from the hole: duplicates on moved
// partitions only, none lost; the partitions A keeps commit once A acks.
func TestRevokeMidFlight(t *testing.T) {
	const topic, group, parts, n = "moves", "g-rebalance", 4, 40
	c := newCluster(t, topic, parts)
	addrs := c.ListenAddrs()
	produce(t, addrs, topic, parts, 0, n)
	conf := groupConf(addrs, topic, group, "rebalance_timeout: 3s", "session_timeout: 6s", "heartbeat_interval: 500ms")
	a := newTestInput(t, conf)

	held := map[int]delivery{}
	holeAt := map[int]int64{}
	for _, d := range readN(t, a, parts*n) {
		offs := d.offsets(t)
		if p := d.partition(t); offs[0] <= 20 && 20 <= offs[len(offs)-1] {
			held[p], holeAt[p] = d, int64(offs[0])
			continue
		}
		ack(t, d, nil)
	}
	require.Len(t, held, parts)
	for p, at := range holeAt {
		waitCommitted(t, addrs, group, topic, int32(p), at)
	}

	b := newTestInput(t, conf)
	waitRebalanced(t, a, b, parts)
	kept, _ := owned(a)
	moved, _ := owned(b)
	t.Logf("A kept %v, B took %v", kept, moved)

	// Moved partitions: committed up to the hole, not past it.
	got := committed(t, addrs, group, topic)
	for _, p := range moved {
		assert.Equal(t, holeAt[int(p)], got[p], "moved partition %d committed exactly to A's hole", p)
	}

	// A's late acks: the moved partitions' commits do not move.
	for _, d := range held {
		ack(t, d, nil)
	}
	for _, p := range kept {
		waitCommitted(t, addrs, group, topic, p, n)
	}
	for _, p := range moved {
		stillBelow(t, addrs, group, topic, p, holeAt[int(p)]+1)
	}

	// B redelivers the moved partitions from the hole, and nothing of the
	// kept ones.
	want := 0
	for _, p := range moved {
		want += n - int(holeAt[int(p)])
	}
	next := map[int]int{}
	for _, p := range moved {
		next[int(p)] = int(holeAt[int(p)])
	}
	for _, d := range readN(t, b, want) {
		p := d.partition(t)
		require.Contains(t, moved, int32(p), "B delivers only moved partitions")
		for _, o := range d.offsets(t) {
			require.Equal(t, next[p], o, "partition %d in order from the hole", p)
			next[p]++
		}
		ack(t, d, nil)
	}
	for _, p := range moved {
		waitCommitted(t, addrs, group, topic, p, n)
	}
}

// streamOf starts a cluster with n records in each of parts partitions of
// topic and returns its addresses and a stream builder whose input is the
// group's redpanda input (commit_period as given, batches of about four
// records).
func streamOf(t *testing.T, topic, group string, parts int32, n int, commitPeriod string) ([]string, *service.StreamBuilder) {
	t.Helper()
	c := newCluster(t, topic, parts)
	addrs := c.ListenAddrs()
	produce(t, addrs, topic, parts, 0, n)
	b := service.NewStreamBuilder()
	require.NoError(t, b.SetLoggerYAML("level: warn"))
	require.NoError(t, b.AddInputYAML(`
redpanda:
  seed_brokers: [ "`+addrs[0]+`" ]
  topics: [ `+topic+` ]
  consumer_group: `+group+`
  commit_period: `+commitPeriod+`
  max_yield_batch_bytes: 100B
`))
	return addrs, b
}

// TestShutdownCommitsAcksFromTheDrain: a real stream whose output is slow
// is stopped mid-run. Benthos stops the input from reading first and lets
// the output drain; the acks of the drain are committed before the member
// leaves (commit_period is an hour, so only the shutdown commits), and
// every partition's committed offset is exactly what the output got.
func TestShutdownCommitsAcksFromTheDrain(t *testing.T) {
	const topic, group, parts, n = "drain", "g-drain", 2, 100
	addrs, b := streamOf(t, topic, group, parts, n, "1h")
	var mu sync.Mutex
	next := map[int]int{}
	total := 0
	stopping := make(chan struct{})
	lateAcks := 0
	require.NoError(t, b.AddBatchConsumerFunc(func(_ context.Context, batch service.MessageBatch) error {
		time.Sleep(30 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		for _, m := range batch {
			p, _ := m.MetaGetMut("kafka_partition")
			o, _ := m.MetaGetMut("kafka_offset")
			if o.(int) != next[p.(int)] {
				t.Errorf("partition %v: offset %v, want %d", p, o, next[p.(int)])
			}
			next[p.(int)] = o.(int) + 1
			total++
		}
		select {
		case <-stopping:
			lateAcks++
		default:
		}
		return nil
	}))
	stream, err := b.Build()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- stream.Run(context.Background()) }()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return total >= 40
	}, wait, 10*time.Millisecond)

	close(stopping)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(t, stream.Stop(ctx))
	<-done

	mu.Lock()
	defer mu.Unlock()
	assert.Less(t, total, parts*n, "stopped mid-run")
	assert.Positive(t, lateAcks, "some batches were delivered during the drain")
	got := committed(t, addrs, group, topic)
	for p := 0; p < parts; p++ {
		assert.Equal(t, int64(next[p]), got[int32(p)], "partition %d: committed = delivered", p)
	}
}

// TestStreamNackReplay: in a real stream whose output refuses every third
// batch (a nack, which Benthos hands back to the input), every record is
// still accepted by the output exactly once (the refused batches come
// again), and the committed offsets reach the end offsets.
func TestStreamNackReplay(t *testing.T) {
	const topic, group, parts, n = "replay", "g-replay", 3, 60
	addrs, b := streamOf(t, topic, group, parts, n, "100ms")
	var mu sync.Mutex
	seen := map[[2]int]int{} // (partition, offset) → deliveries
	calls := 0
	require.NoError(t, b.AddBatchConsumerFunc(func(_ context.Context, batch service.MessageBatch) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls%3 == 0 {
			return errors.New("refused") // every third batch is nacked once
		}
		for _, m := range batch {
			p, _ := m.MetaGetMut("kafka_partition")
			o, _ := m.MetaGetMut("kafka_offset")
			seen[[2]int{p.(int), o.(int)}]++
		}
		return nil
	}))
	stream, err := b.Build()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- stream.Run(context.Background()) }()
	require.Eventually(t, func() bool {
		got := committed(t, addrs, group, topic)
		for p := int32(0); p < parts; p++ {
			if got[p] != n {
				return false
			}
		}
		return true
	}, wait, 50*time.Millisecond, "every partition committed to its end")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(t, stream.Stop(ctx))
	<-done

	mu.Lock()
	defer mu.Unlock()
	for p := 0; p < parts; p++ {
		for o := 0; o < n; o++ {
			assert.Equal(t, 1, seen[[2]int{p, o}], "partition %d offset %d accepted exactly once", p, o)
		}
	}
}

// TestRevokeWaitsForInFlightAcks: when the acks of a revoked partition's
// in-flight batches arrive within the wait, the partition is committed
// past them before it goes: the new owner starts at the end, with no
// duplicate.
func TestRevokeWaitsForInFlightAcks(t *testing.T) {
	const topic, group, parts, n = "waits", "g-revoke-wait", 4, 40
	c := newCluster(t, topic, parts)
	addrs := c.ListenAddrs()
	produce(t, addrs, topic, parts, 0, n)
	conf := groupConf(addrs, topic, group, "rebalance_timeout: 20s", "session_timeout: 30s", "heartbeat_interval: 500ms")
	a := newTestInput(t, conf)

	held := map[int][]delivery{}
	for _, d := range readN(t, a, parts*n) {
		if offs := d.offsets(t); offs[len(offs)-1] >= 30 {
			held[d.partition(t)] = append(held[d.partition(t)], d)
			continue
		}
		ack(t, d, nil)
	}
	require.Len(t, held, parts)

	b := newTestInput(t, conf)
	// Once A is revoking, ack the held batches of the leaving partitions
	// (the output finishing its in-flight work).
	start := time.Now()
	require.Eventually(t, func() bool {
		_, leaving := owned(a)
		return len(leaving) > 0
	}, wait, 5*time.Millisecond, "A starts revoking")
	_, leaving := owned(a)
	time.Sleep(200 * time.Millisecond)
	for _, p := range leaving {
		for _, d := range held[int(p)] {
			ack(t, d, nil)
		}
	}
	waitRebalanced(t, a, b, parts)
	assert.Less(t, time.Since(start), 10*time.Second, "the revoke ended with the acks, not at its bound")
	moved, _ := owned(b)
	require.ElementsMatch(t, leaving, moved)
	got := committed(t, addrs, group, topic)
	for _, p := range moved {
		assert.Equal(t, int64(n), got[p], "moved partition %d committed to its end before it went", p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _, err := b.ReadBatch(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the new owner has nothing to redeliver: no duplicates")
}
