package kafka

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/benthos-zerobus/benthos-zerobus/internal/kafkain"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestBrokerRestart: the broker goes away for a few seconds and comes back
// on the same port with its data (kfake DataDir). The consumer reconnects by
// itself, the batches it held unacknowledged across the outage are never
// committed early, the error log does not spin, and in the end every record
// (including ones produced after the restart) is delivered and committed.
func TestBrokerRestart(t *testing.T) {
	const topic, group, parts = "outage", "g-outage", 2
	port, dir := freePort(t), t.TempDir()
	start := func() *kfake.Cluster {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, topic), kfake.Ports(port), kfake.DataDir(dir))
		require.NoError(t, err)
		return c
	}
	c1 := start()
	addrs := c1.ListenAddrs()
	produce(t, addrs, topic, parts, 0, 30)

	pc, err := Spec().ParseYAML(groupConf(addrs, topic, group, "session_timeout: 6s", "heartbeat_interval: 500ms", "rebalance_timeout: 3s"), nil)
	require.NoError(t, err)
	cfg, err := ParseConfig(pc)
	require.NoError(t, err)
	log := &recordingLog{}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	cons, err := kafkain.New(ctx, cfg.Consumer, log, nil)
	cancel()
	require.NoError(t, err)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_ = cons.Close(ctx)
	}()

	next := func(d time.Duration) (*kafkain.Batch, error) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return cons.Next(ctx)
	}
	// Deliver and ack 30 records, hold the rest unacknowledged.
	delivered := map[int32]int64{} // next expected offset per partition
	var held []*kafkain.Batch
	total := 0
	for total < 2*30 {
		b, err := next(wait)
		require.NoError(t, err)
		recs := cons.Handed(b)
		total += len(recs)
		delivered[b.TP.Partition] = recs[len(recs)-1].Offset + 1
		if total <= 30 {
			cons.Ack(b, b.Delivery(), nil)
		} else {
			held = append(held, b)
		}
	}
	var durable map[int32]int64
	require.Eventually(t, func() bool {
		durable = map[int32]int64{}
		for _, s := range cons.Tracker().State() {
			durable[s.TP.Partition] = s.Durable
		}
		got := committed(t, addrs, group, topic)
		for p, d := range durable {
			if got[p] != max(d, 0) && d >= 0 {
				return false
			}
		}
		return true
	}, wait, 50*time.Millisecond, "the acked records committed before the outage")

	c1.Close()
	outageStart := log.count("WARN")
	time.Sleep(3 * time.Second)
	// The outage: nothing new to deliver, and the log does not spin.
	_, err = next(200 * time.Millisecond)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "nothing delivered during the outage: %v", err)
	assert.LessOrEqual(t, log.count("WARN")-outageStart, 8, "rate-limited error log during a 3 s outage: %v", log.lines)

	c2 := start()
	defer c2.Close()
	// The commits survived the restart and did not move past the held
	// (unacknowledged) batches.
	got := committed(t, addrs, group, topic)
	for p, d := range durable {
		if at, ok := got[p]; d < 0 {
			assert.False(t, ok, "partition %d: nothing acknowledged, nothing committed (got %d)", p, at)
		} else {
			assert.Equal(t, d, at, "partition %d: committed offset across the outage", p)
		}
	}
	t.Logf("WARN lines during the outage: %d", log.count("WARN")-outageStart)
	produce(t, addrs, topic, parts, 30, 10)
	// Held batches acked now: they commit only if their partition was kept
	// across the outage (a lost session releases them uncommitted: their
	// records come again).
	for _, b := range held {
		cons.Ack(b, b.Delivery(), nil)
	}
	// Everything is delivered (from the commit, so duplicates are
	// allowed, losses are not) and committed.
	maxSeen := map[int32]int64{}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		done := true
		for p := int32(0); p < parts; p++ {
			if maxSeen[p] < 39 {
				done = false
			}
		}
		if done {
			break
		}
		b, err := next(time.Second)
		if errors.Is(err, context.DeadlineExceeded) {
			continue
		}
		require.NoError(t, err)
		recs := cons.Handed(b)
		for _, r := range recs {
			maxSeen[r.Partition] = max(maxSeen[r.Partition], r.Offset)
		}
		cons.Ack(b, b.Delivery(), nil)
	}
	for p := int32(0); p < parts; p++ {
		require.Equal(t, int64(39), maxSeen[p], "partition %d: every record up to the last one produced after the restart", p)
		waitCommitted(t, addrs, group, topic, p, 40)
	}
}
