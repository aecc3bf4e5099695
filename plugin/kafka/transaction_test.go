package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/benthos-zerobus/benthos-zerobus/internal/kafkain"
)

// txnRecord is the value of a record produceTxns writes.
type txnRecord struct {
	Txn, P, N int
}

// aborted reports whether produceTxns aborts transaction txn: every third.
func aborted(txn int) bool { return txn%3 == 2 }

// produceTxns writes txns transactions of perTxn records, spread evenly over
// parts partitions of topic, with a transactional producer, aborting every
// third (the last of 30 included). Each transaction puts a commit or abort
// marker (a control record) in every partition it wrote to, so a partition
// ends with txns*(perTxn/parts+1) offsets.
func produceTxns(t *testing.T, addrs []string, topic string, parts int32, txns, perTxn int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID("txn-producer"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for txn := range txns {
		require.NoError(t, cl.BeginTransaction())
		var recs []*kgo.Record
		for n := range perTxn {
			p := int32(n) % parts
			v, err := json.Marshal(txnRecord{Txn: txn, P: int(p), N: n})
			require.NoError(t, err)
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: v})
		}
		require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
		end := kgo.TryCommit
		if aborted(txn) {
			end = kgo.TryAbort
		}
		require.NoError(t, cl.EndTransaction(ctx, end))
	}
}

// endOffsets returns the end offset (high watermark) of every partition of
// topic.
func endOffsets(t *testing.T, addrs []string, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		require.NoError(t, o.Err)
		out[o.Partition] = o.Offset
	})
	return out
}

// TestTransactionalTopicCommitsToTheEnd: on a topic written by a
// transactional producer (30 transactions of 100 records over 4
// partitions, every third aborted, the last one too), under either
// isolation level, the input delivers each record it should exactly once
// (under read_committed the 2,000 committed ones and no aborted one), and
// once they are acknowledged the group's committed offset of every
// partition is its end offset, past the last transaction's marker, and the
// lag is 0; a restart of the group reads nothing. Committing the last
// record + 1, as before, stopped at 753 of 780 (read_committed) and 779
// (read_uncommitted).
func TestTransactionalTopicCommitsToTheEnd(t *testing.T) {
	const parts, txns, perTxn = 4, 30, 100
	for _, iso := range []string{"read_committed", "read_uncommitted"} {
		t.Run(iso, func(t *testing.T) {
			const topic = "txns"
			group := "g-" + iso
			c := newCluster(t, topic, parts)
			addrs := c.ListenAddrs()
			produceTxns(t, addrs, topic, parts, txns, perTxn)
			ends := endOffsets(t, addrs, topic)
			require.Len(t, ends, parts)
			for p, e := range ends {
				require.Equal(t, int64(txns*(perTxn/parts+1)), e, "partition %d: records and a marker per transaction", p)
			}
			want := txns * perTxn
			if iso == "read_committed" {
				want = (txns - txns/3) * perTxn
			}

			conf := groupConf(addrs, topic, group, "transaction_isolation_level: "+iso, "topic_lag_refresh_period: 50ms", "max_yield_batch_bytes: 1KiB")
			pc, err := Spec().ParseYAML(conf, nil)
			require.NoError(t, err)
			cfg, err := ParseConfig(pc)
			require.NoError(t, err)
			var mu sync.Mutex
			lag := map[kafkain.TP]int64{}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			cons, err := kafkain.New(ctx, cfg.Consumer, &recordingLog{}, func(tp kafkain.TP, l int64) {
				mu.Lock()
				defer mu.Unlock()
				lag[tp] = l
			})
			require.NoError(t, err)
			defer func() { _ = cons.Close(context.Background()) }()

			seen := map[txnRecord]bool{}
			for len(seen) < want {
				b, err := cons.Next(ctx)
				require.NoError(t, err, "%d of %d records delivered", len(seen), want)
				for _, r := range cons.Handed(b) {
					require.False(t, r.Attrs.IsControl(), "a transaction marker handed out at %d", r.Offset)
					var v txnRecord
					require.NoError(t, json.Unmarshal(r.Value, &v))
					require.False(t, seen[v], "record %+v delivered twice", v)
					if iso == "read_committed" {
						require.False(t, aborted(v.Txn), "record %+v of an aborted transaction delivered under read_committed", v)
					}
					seen[v] = true
				}
				cons.Ack(b, b.Delivery(), nil)
			}
			require.Len(t, seen, want)

			require.Eventually(t, func() bool {
				got := committed(t, addrs, group, topic)
				for p, e := range ends {
					if got[p] != e {
						return false
					}
				}
				return true
			}, wait, 50*time.Millisecond, "every partition committed to its end offset %v", ends)
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				for p := range ends {
					if l, ok := lag[kafkain.TP{Topic: topic, Partition: p}]; !ok || l != 0 {
						return false
					}
				}
				return true
			}, wait, 10*time.Millisecond, "redpanda_lag 0 on every partition")

			nctx, ncancel := context.WithTimeout(ctx, 500*time.Millisecond)
			b, err := cons.Next(nctx)
			ncancel()
			require.ErrorIs(t, err, context.DeadlineExceeded, "nothing more delivered, got %v", b)
			require.NoError(t, cons.Close(ctx))

			// A restart of the group starts at the end: nothing again.
			in := newTestInput(t, conf)
			rctx, rcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			msgs, _, err := in.ReadBatch(rctx)
			rcancel()
			require.ErrorIs(t, err, context.DeadlineExceeded, "a restart read %d records again", len(msgs))
			assert.Equal(t, ends, committed(t, addrs, group, topic))
			t.Logf("%s: %d records delivered, committed %v, end offsets %v", iso, len(seen), committed(t, addrs, group, topic), ends)
		})
	}
}

// TestTransactionalCommitNeverPastUnacked: on the transactional topic of
// TestTransactionalTopicCommitsToTheEnd, under read_committed, batches are
// acknowledged by several goroutines out of order (a tenth nacked once, and
// replayed), the reader now and then pausing, while a checker keeps reading the group's committed offsets:
// every committed record below them must have been acknowledged before,
// though the commits pass over markers and aborted transactions. At the
// end every partition is committed to its end offset. Run with -race.
func TestTransactionalCommitNeverPastUnacked(t *testing.T) {
	const topic, group, parts, txns, perTxn = "txns", "g-race", 4, 30, 100
	const span = perTxn/parts + 1 // a transaction's offsets in a partition
	c := newCluster(t, topic, parts)
	addrs := c.ListenAddrs()
	produceTxns(t, addrs, topic, parts, txns, perTxn)
	ends := endOffsets(t, addrs, topic)
	// isData: a committed transaction's record, not its marker.
	isData := func(o int64) bool { return o%span != span-1 && !aborted(int(o/span)) }
	in := newTestInput(t, groupConf(addrs, topic, group, "transaction_isolation_level: read_committed", "max_yield_batch_bytes: 300B"))

	var mu sync.Mutex
	acked := map[int32]map[int64]bool{}
	for p := range int32(parts) {
		acked[p] = map[int64]bool{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	work := make(chan delivery, 32)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 3))
			for d := range work {
				time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
				if r.IntN(10) == 0 {
					_ = d.ack(ctx, errors.New("refused"))
					continue
				}
				p := int32(d.partition(t))
				mu.Lock()
				for _, o := range d.offsets(t) {
					acked[p][int64(o)] = true
				}
				mu.Unlock()
				_ = d.ack(ctx, nil)
			}
		}()
	}
	var violations []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			got := committed(t, addrs, group, topic)
			mu.Lock()
			for p, at := range got {
				for o := range at {
					if isData(o) && !acked[p][o] && len(violations) < 10 {
						violations = append(violations, fmt.Sprintf("%d/%d below the commit %d, not acknowledged", p, o, at))
					}
				}
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()

	delivered, batches := 0, 0
	want := (txns - txns/3) * perTxn
	for {
		mu.Lock()
		n := 0
		for _, a := range acked {
			n += len(a)
		}
		mu.Unlock()
		if n == want {
			break
		}
		rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		msgs, a, err := in.ReadBatch(rctx)
		rcancel()
		if errors.Is(err, context.DeadlineExceeded) {
			continue
		}
		require.NoError(t, err)
		d := delivery{msgs, a}
		for _, o := range d.offsets(t) {
			require.True(t, isData(int64(o)), "offset %d is a marker or of an aborted transaction", o)
		}
		delivered += len(msgs)
		work <- d
		if batches++; batches%15 == 0 {
			// Now and then the pipeline is slow to take more: every
			// batch out gets acknowledged while fetched records wait.
			time.Sleep(150 * time.Millisecond)
		}
	}
	require.Eventually(t, func() bool {
		got := committed(t, addrs, group, topic)
		for p, e := range ends {
			if got[p] != e {
				return false
			}
		}
		return true
	}, wait, 50*time.Millisecond, "every partition committed to its end offset %v", ends)
	close(work)
	cancel()
	wg.Wait()
	assert.Empty(t, violations, "a commit past an unacknowledged record")
	assert.GreaterOrEqual(t, delivered, want, "every committed record delivered, the nacked ones again")
	t.Logf("%d records delivered (replays included), %d acknowledged, committed %v", delivered, want, ends)
}
