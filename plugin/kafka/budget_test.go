package kafka

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/benthos-zerobus/benthos-zerobus/internal/kafkain"
)

// TestByteBudgetBoundsUnacked: a backlog of well-compressed 2 KB records and
// an output that acknowledges nothing. The records fetched and not
// acknowledged never cost more than max_unacked_bytes, however long the
// output stalls, and nothing more is delivered past it; once the held
// batches are acknowledged fetching resumes, and every record arrives, in
// order per partition, and is committed.
func TestByteBudgetBoundsUnacked(t *testing.T) {
	const (
		topic, group = "budget", "g-budget"
		parts        = 3
		perPart      = 400
		budget       = 64 << 10
	)
	c := newCluster(t, topic, parts)
	addrs := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	var recs []*kgo.Record
	for i := range perPart {
		for p := range int32(parts) {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, `{"i":%d,"pad":"%s"}`, i, strings.Repeat("z", 2000))})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	cancel()
	cl.Close()

	in := newTestInput(t, groupConf(addrs, topic, group, fmt.Sprintf("max_unacked_bytes: %d", budget), "fetch_max_wait: 100ms"))
	tr := in.consumer().Tracker()
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if v := int64(tr.UnackedBytes()); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()

	next := map[int]int{}
	inOrder := func(d delivery) {
		p := d.partition(t)
		for _, o := range d.offsets(t) {
			require.Equal(t, next[p], o, "partition %d in order, none skipped across the pause", p)
			next[p]++
		}
	}
	// The output stalls: read until nothing more comes for a second.
	var held []delivery
	got := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		msgs, a, err := in.ReadBatch(ctx)
		cancel()
		if err != nil {
			break
		}
		d := delivery{msgs, a}
		inOrder(d)
		held = append(held, d)
		got += len(msgs)
	}
	cost := 2000 + len(`{"i":100,"pad":""}`) + kafkain.RecordOverhead
	require.NotEmpty(t, held, "something was delivered")
	assert.LessOrEqual(t, got*cost, budget, "delivered while nothing was acknowledged: within the budget")
	assert.Greater(t, got*cost, budget/2, "the budget, not something else, stopped it")
	assert.LessOrEqual(t, tr.UnackedBytes(), budget)
	// However long the output stalls, nothing more comes.
	time.Sleep(500 * time.Millisecond)
	assert.LessOrEqual(t, tr.UnackedBytes(), budget)
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, _, err = in.ReadBatch(ctx)
	cancel()
	require.Error(t, err, "nothing more delivered while the budget is used up")

	// The acks come: fetching resumes and the rest arrives.
	for _, d := range held {
		ack(t, d, nil)
	}
	for got < parts*perPart {
		d := read(t, in)
		inOrder(d)
		got += len(d.msgs)
		ack(t, d, nil)
	}
	close(stop)
	<-sampled
	assert.Equal(t, parts*perPart, got)
	assert.LessOrEqual(t, peak.Load(), int64(budget), "never past the budget")
	for p := range int32(parts) {
		waitCommitted(t, addrs, group, topic, p, perPart)
	}
}
