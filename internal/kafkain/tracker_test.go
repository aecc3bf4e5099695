package kafkain

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

var tp0 = TP{"t", 0}

// afterRecs is the fetch position Add takes as the offset after its last
// record (no transaction marker after them).
var afterRecs = kgo.EpochOffset{Epoch: -1, Offset: -1}

func records(tp TP, from, n int) []*kgo.Record {
	out := make([]*kgo.Record, n)
	for i := range out {
		out[i] = &kgo.Record{Topic: tp.Topic, Partition: tp.Partition, Offset: int64(from + i), Value: []byte("0123456789")}
	}
	return out
}

func next(t *testing.T, tr *Tracker) *Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := tr.Next(ctx)
	require.NoError(t, err)
	return b
}

func noNext(t *testing.T, tr *Tracker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	b, err := tr.Next(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "nothing to hand out, got %v", b)
}

func commitOf(tr *Tracker, tp TP) int64 {
	if eo, ok := tr.Committable([]TP{tp})[tp.Topic][tp.Partition]; ok {
		return eo.Offset
	}
	return -1
}

// lim10 cuts batches of ten 10-byte records.
var lim10 = Limits{MaxUnacked: 1000, BufferBytes: 1 << 20, YieldBytes: 100, Replay: true}

func TestTrackerCommitIsAckedPrefix(t *testing.T) {
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 1))
		tr := NewTracker(lim10, false)
		tr.Assign([]TP{tp0})
		tr.Add(tp0, records(tp0, 100, 200), afterRecs, 300)
		var bs []*Batch
		for range 20 {
			bs = append(bs, next(t, tr))
		}
		noNext(t, tr)
		acked := make([]bool, len(bs))
		for _, i := range r.Perm(len(bs)) {
			require.True(t, tr.Ack(bs[i], bs[i].Delivery(), nil))
			acked[i] = true
			want := int64(-1)
			for j := 0; j < len(bs) && acked[j]; j++ {
				_, want = bs[j].Offsets()
			}
			require.Equal(t, want, commitOf(tr, tp0), "seed %d: the commit is the end of the acked prefix", seed)
		}
		require.Equal(t, int64(300), commitOf(tr, tp0))
		tr.Committed(tp0, 300)
		assert.Empty(t, tr.Committable(nil), "nothing new once committed")
	}
}

func TestTrackerNackReplaysBeforeNewer(t *testing.T) {
	tr := NewTracker(lim10, false)
	tr.Assign([]TP{tp0})
	tr.Add(tp0, records(tp0, 0, 30), afterRecs, 30)
	b1, b2 := next(t, tr), next(t, tr)
	require.True(t, tr.Ack(b2, 1, nil))
	require.True(t, tr.Ack(b1, 1, errors.New("refused")))
	again := next(t, tr)
	require.Same(t, b1, again, "the nacked batch first")
	assert.Equal(t, 2, again.Delivery())
	assert.Len(t, again.Records, 10, "with its records")
	assert.False(t, tr.Ack(b1, 1, nil), "an ack of the earlier delivery does not count")
	assert.Equal(t, int64(-1), commitOf(tr, tp0), "the hole holds the commit")
	require.True(t, tr.Ack(again, 2, nil))
	assert.Equal(t, int64(20), commitOf(tr, tp0))
	b3 := next(t, tr)
	first, _ := b3.Offsets()
	assert.Equal(t, int64(20), first)
}

func TestTrackerReplayBackoff(t *testing.T) {
	lim := lim10
	lim.ReplayBackoff, lim.MaxReplayBackoff = 150*time.Millisecond, time.Second
	tr := NewTracker(lim, false)
	tr.Assign([]TP{tp0})
	tr.Add(tp0, records(tp0, 0, 20), afterRecs, 20)
	b1 := next(t, tr)
	tr.Ack(b1, 1, errors.New("refused"))
	start := time.Now()
	again := next(t, tr)
	require.Same(t, b1, again, "nothing newer of the partition jumps the nacked batch")
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "replayed after the back-off")
}

func TestTrackerNoReplayDrops(t *testing.T) {
	lim := lim10
	lim.Replay = false
	tr := NewTracker(lim, false)
	tr.Assign([]TP{tp0})
	tr.Add(tp0, records(tp0, 0, 20), afterRecs, 20)
	b1 := next(t, tr)
	assert.Len(t, tr.Handed(b1), 10)
	assert.Nil(t, b1.Records, "records dropped after hand-out without replay")
	tr.Ack(b1, 1, errors.New("refused"))
	assert.Equal(t, int64(10), commitOf(tr, tp0), "a nack counts as delivered")
}

// TestTrackerStopsPollingAtTheCap: a partition holding MaxUnacked records
// not acknowledged, or BufferBytes not handed out, makes Room 0 (no more
// polls; nothing is paused, see Limits.MaxUnacked), an ack or a hand-out
// wakes the poll loop, and Room comes back.
func TestTrackerStopsPollingAtTheCap(t *testing.T) {
	lim := lim10
	lim.MaxUnacked = 25
	tr := NewTracker(lim, false)
	tp1 := TP{"t", 1}
	tr.Assign([]TP{tp0, tp1})
	tr.Add(tp0, records(tp0, 0, 20), afterRecs, 20)
	assert.Equal(t, 5+25, tr.Room(), "room of both partitions")
	tr.Add(tp0, records(tp0, 20, 10), afterRecs, 30)
	assert.Equal(t, 0, tr.Room(), "30 unacked >= 25: no more polls, whatever tp1 has")
	for _, st := range tr.State() {
		assert.Equal(t, st.TP == tp0, st.AtCap, "%v at the cap", st.TP)
	}
	var bs []*Batch
	for range 3 {
		bs = append(bs, next(t, tr))
	}
	assert.Equal(t, 0, tr.Room(), "handed out is still unacked")
	ch := tr.Changed()
	tr.Ack(bs[0], 1, nil)
	select {
	case <-ch:
	default:
		t.Fatal("the ack wakes the poll loop")
	}
	assert.Equal(t, 5+25, tr.Room(), "20 unacked < 25: polling again")

	// Buffer bytes: 10 records of 10 bytes pending stop the poll at 100
	// bytes.
	lim.BufferBytes = 100
	tr2 := NewTracker(lim, false)
	tr2.Assign([]TP{tp0})
	tr2.Add(tp0, records(tp0, 0, 9), afterRecs, 9)
	assert.Equal(t, 25-9, tr2.Room(), "90 bytes pending: below the buffer")
	tr2.Add(tp0, records(tp0, 9, 1), afterRecs, 10)
	assert.Equal(t, 0, tr2.Room(), "100 bytes pending: no more polls")
	ch = tr2.Changed()
	next(t, tr2)
	select {
	case <-ch:
	default:
		t.Fatal("the buffer going below its bound wakes the poll loop")
	}
	assert.Equal(t, 25-10, tr2.Room(), "handed out: the buffer is empty")

	// A released partition no longer counts.
	tr.Add(tp0, records(tp0, 30, 10), afterRecs, 40)
	require.Equal(t, 0, tr.Room())
	tr.Revoke([]TP{tp0})
	tr.Release([]TP{tp0})
	assert.Equal(t, 25, tr.Room(), "only tp1 is left")
}

func TestTrackerRevokeAndRelease(t *testing.T) {
	tr := NewTracker(lim10, false)
	tp1 := TP{"t", 1}
	tr.Assign([]TP{tp0, tp1})
	tr.Add(tp0, records(tp0, 0, 30), afterRecs, 30)
	tr.Add(tp1, records(tp1, 0, 10), afterRecs, 10)
	var b []*Batch
	for range 3 {
		b = append(b, next(t, tr))
	}
	// One of tp0 and one of tp1 handed out (round robin), plus another.
	var t0 []*Batch
	for _, x := range b {
		if x.TP == tp0 {
			t0 = append(t0, x)
		}
	}
	require.Len(t, t0, 2)
	tr.Revoke([]TP{tp0})
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		x, err := tr.Next(ctx)
		cancel()
		if err != nil {
			break
		}
		require.NotEqual(t, tp0, x.TP, "a leaving partition is not handed out")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	assert.False(t, tr.WaitSettled(ctx, []TP{tp0}), "two batches await their acks")
	cancel()
	tr.Ack(t0[0], 1, nil)
	tr.Ack(t0[1], 1, errors.New("refused")) // held: never replayed
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	assert.True(t, tr.WaitSettled(ctx, []TP{tp0}))
	cancel()
	assert.Equal(t, int64(10), commitOf(tr, tp0), "committed to the held nack, not past it")
	tr.Release([]TP{tp0})
	assert.Equal(t, int64(-1), commitOf(tr, tp0), "released: nothing to commit")

	// Assigned again: a new ownership; a stale ack changes nothing.
	tr.Assign([]TP{tp0})
	tr.Add(tp0, records(tp0, 10, 10), afterRecs, 30)
	assert.False(t, tr.Ack(t0[1], 1, nil), "ack of a released ownership")
	assert.Equal(t, int64(-1), commitOf(tr, tp0))
	nb := next(t, tr)
	first, _ := nb.Offsets()
	assert.Equal(t, int64(10), first)
}

// at is a fetch position with an unknown leader epoch.
func at(o int64) kgo.EpochOffset { return kgo.EpochOffset{Epoch: -1, Offset: o} }

// TestTrackerCommitsFetchPositionOnceDrained: the commit moves to the fetch
// position (past transaction markers and aborted records never added) only
// while nothing added is unacknowledged: not while records wait to be
// handed out, nor while a batch awaits its ack or its replay, nor past the
// records a revoke dropped.
func TestTrackerCommitsFetchPositionOnceDrained(t *testing.T) {
	tr := NewTracker(lim10, false)
	tr.Assign([]TP{tp0})
	// Records 0-19, then a marker at 20: position 21.
	tr.Add(tp0, records(tp0, 0, 20), at(21), 21)
	b1 := next(t, tr)
	tr.Ack(b1, 1, nil)
	assert.Equal(t, int64(10), commitOf(tr, tp0), "records 10-19 wait to be handed out: the acked prefix")
	b2 := next(t, tr)
	assert.Equal(t, int64(10), commitOf(tr, tp0), "10-19 handed out, not acknowledged")
	tr.Ack(b2, 1, errors.New("refused"))
	assert.Equal(t, int64(10), commitOf(tr, tp0), "10-19 wait for their replay")
	b2 = next(t, tr)
	tr.Ack(b2, 2, nil)
	assert.Equal(t, int64(21), commitOf(tr, tp0), "all acknowledged: past the marker")
	tr.Committed(tp0, 21)

	// A fetch of markers and aborted records only (offsets 21-40).
	tr.Add(tp0, nil, kgo.EpochOffset{Epoch: 3, Offset: 41}, 41)
	assert.Equal(t, kgo.EpochOffset{Epoch: 3, Offset: 41}, tr.Committable(nil)[tp0.Topic][tp0.Partition], "with the marker's leader epoch")
	tr.Committed(tp0, 41)

	// While a batch is out, a later fetch of markers only moves nothing.
	tr.Add(tp0, records(tp0, 41, 5), at(46), 46)
	b3 := next(t, tr)
	tr.Add(tp0, nil, at(60), 60)
	assert.Equal(t, int64(-1), commitOf(tr, tp0), "41-45 handed out, not acknowledged")
	tr.Ack(b3, 1, nil)
	assert.Equal(t, int64(60), commitOf(tr, tp0))
	tr.Committed(tp0, 60)

	// A revoke drops records waiting to be handed out: the position after
	// them is forgotten, the commit stops at the acknowledged prefix.
	tr.Add(tp0, records(tp0, 60, 20), at(81), 81)
	b4 := next(t, tr)
	tr.Revoke([]TP{tp0})
	tr.Ack(b4, 1, nil)
	assert.Equal(t, int64(70), commitOf(tr, tp0), "70-79 were dropped, not acknowledged")
	tr.Add(tp0, nil, at(90), 90)
	assert.Equal(t, int64(70), commitOf(tr, tp0), "a leaving partition's fetches change nothing")
}

func TestTrackerGroupModeDropsUnowned(t *testing.T) {
	tr := NewTracker(lim10, false)
	tr.Add(tp0, records(tp0, 0, 10), afterRecs, 10)
	noNext(t, tr)
	auto := NewTracker(lim10, true)
	auto.Add(tp0, records(tp0, 0, 10), afterRecs, 10)
	next(t, auto)
}

func TestTrackerCloseEndsNext(t *testing.T) {
	tr := NewTracker(lim10, true)
	errc := make(chan error, 1)
	go func() {
		_, err := tr.Next(context.Background())
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	tr.Close()
	select {
	case err := <-errc:
		assert.ErrorIs(t, err, ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Next did not return on Close")
	}
}

// TestTrackerConcurrentNeverCommitsPastUnacked: a feeder adds records, a
// reader hands them out, several ackers ack (and nack) them in random
// order, and a checker keeps reading the commit: every offset below it must
// have been acknowledged before it was read. Run with -race.
func TestTrackerConcurrentNeverCommitsPastUnacked(t *testing.T) {
	concurrentAcks(t, func(int64) bool { return true })
}

// TestTrackerConcurrentFetchPositionNeverPastUnacked: as
// TestTrackerConcurrentNeverCommitsPastUnacked on a transactional
// partition (transactions of 25 records and a marker, every third aborted
// and dropped, the last one too), fed in chunks that end anywhere, marker
// only ones included: the commit moves to the fetch position past the
// markers, never past an unacknowledged record, and ends at the end offset.
func TestTrackerConcurrentFetchPositionNeverPastUnacked(t *testing.T) {
	concurrentAcks(t, func(o int64) bool {
		txn, at := o/26, o%26
		return txn%3 != 2 && at != 25 // neither aborted nor the marker
	})
}

// concurrentAcks runs the feeder, reader, ackers and checker over three
// partitions of 3,042 offsets each, of which isData tells the data records
// (the rest are markers and aborted records: never added, only passed over
// by the fetch position).
func concurrentAcks(t *testing.T, isData func(o int64) bool) {
	const parts, perPart, chunk = 3, 3042, 50 // 117 transactions of 26 offsets
	lim := Limits{MaxUnacked: 400, BufferBytes: 1 << 20, YieldBytes: 70, Replay: true}
	tr := NewTracker(lim, false)
	var tps []TP
	for p := range parts {
		tps = append(tps, TP{"t", int32(p)})
	}
	tr.Assign(tps)
	acked := make([][]atomic.Bool, parts)
	for p := range acked {
		acked[p] = make([]atomic.Bool, perPart)
		for o := range int64(perPart) {
			if !isData(o) {
				acked[p][o].Store(true) // nothing to acknowledge
			}
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	// Feeder: takes no more than Room, as the poll loop does, and passes
	// the fetch position after each chunk of offsets.
	wg.Add(1)
	go func() {
		defer wg.Done()
		pos := make([]int, parts)
		for ctx.Err() == nil {
			progressed := false
			for p, tp := range tps {
				if room := tr.Room(); pos[p] < perPart && room > 0 {
					n := min(chunk, perPart-pos[p], room)
					var recs []*kgo.Record
					for _, r := range records(tp, pos[p], n) {
						if isData(r.Offset) {
							recs = append(recs, r)
						}
					}
					tr.Add(tp, recs, kgo.EpochOffset{Epoch: -1, Offset: int64(pos[p] + n)}, int64(perPart))
					pos[p] += n
					progressed = true
				}
			}
			if !progressed {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	work := make(chan *Batch, 64)
	// Reader: now and then slow, so that records wait in the tracker
	// while every batch handed out is acknowledged.
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(work)
		r := rand.New(rand.NewPCG(99, 7))
		for {
			b, err := tr.Next(ctx)
			if err != nil {
				return
			}
			work <- b
			if r.IntN(8) == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	// Ackers: a tenth of the batches are nacked once.
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for b := range work {
				time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
				if b.Delivery() == 1 && r.IntN(10) == 0 {
					tr.Ack(b, b.Delivery(), errors.New("nack"))
					continue
				}
				for _, rec := range b.Records {
					acked[rec.Partition][rec.Offset].Store(true)
				}
				tr.Ack(b, b.Delivery(), nil)
			}
		}()
	}
	// Checker.
	var violations atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			for p, tp := range tps {
				c := commitOf(tr, tp)
				for o := int64(0); o < c; o++ {
					if !acked[p][o].Load() {
						violations.Add(1)
					}
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	require.Eventually(t, func() bool {
		for _, tp := range tps {
			if commitOf(tr, tp) != perPart {
				return false
			}
		}
		return true
	}, 60*time.Second, 10*time.Millisecond, "every record acknowledged and committable")
	cancel()
	wg.Wait()
	assert.Zero(t, violations.Load(), "a commit past an unacknowledged record")
	for _, s := range tr.State() {
		assert.LessOrEqual(t, s.Unacked, 0)
	}
}

// TestTrackerRoomBoundsThePoll: Room is the records the tracker takes
// before its partitions reach MaxUnacked, none while one is at it; a
// leaving partition counts for nothing, and with no partition yet it is one
// partition's cap.
func TestTrackerRoomBoundsThePoll(t *testing.T) {
	tp1 := TP{"t", 1}
	lim := lim10
	lim.MaxUnacked = 25
	tr := NewTracker(lim, false)
	assert.Equal(t, 25, tr.Room(), "no partition yet")
	tr.Assign([]TP{tp0, tp1})
	assert.Equal(t, 50, tr.Room())
	tr.Add(tp0, records(tp0, 0, 20), afterRecs, 20)
	assert.Equal(t, 5+25, tr.Room())
	ch := tr.Changed()
	tr.Add(tp0, records(tp0, 20, 10), afterRecs, 30)
	select {
	case <-ch:
	default:
		t.Fatal("an add closes Changed's channel")
	}
	assert.Equal(t, 0, tr.Room(), "tp0 at the cap: no more polls")
	b := next(t, tr)
	tr.Ack(b, 1, nil)
	assert.Equal(t, 25-20+25, tr.Room(), "tp0 below the cap with 20 unacked")
	tr.Revoke([]TP{tp1})
	assert.Equal(t, 5, tr.Room(), "a leaving partition takes nothing")
}

// TestTrackerByteBudget: with MaxUnackedBytes, Room takes no more records
// than fit in what the budget has left at the largest record cost seen, so a
// poll loop that adds what Room allows never passes the budget while
// nothing is acknowledged; acks give room back, a record larger than the
// whole budget goes alone, and revoked and released partitions give their
// share back.
func TestTrackerByteBudget(t *testing.T) {
	const cost = 10 + RecordOverhead // records() values are 10 bytes
	lim := lim10
	lim.MaxUnacked = 1 << 20
	lim.MaxUnackedBytes = 10 * cost
	tr := NewTracker(lim, false)
	tp1 := TP{"t", 1}
	tr.Assign([]TP{tp0, tp1})
	assert.Equal(t, 1, tr.Room(), "no record seen yet: one")

	// The poll loop: take what Room allows, alternating partitions.
	offs := map[TP]int{}
	poll := func() int {
		n := tr.Room()
		for i := range n {
			tp := []TP{tp0, tp1}[i%2]
			tr.Add(tp, records(tp, offs[tp], 1), afterRecs, -1)
			offs[tp]++
		}
		require.LessOrEqual(t, tr.UnackedBytes(), lim.MaxUnackedBytes, "never past the budget")
		return n
	}
	for poll() > 0 {
	}
	assert.Equal(t, lim.MaxUnackedBytes, tr.UnackedBytes(), "filled exactly")
	var out []*Batch
	for range 2 {
		out = append(out, next(t, tr))
	}
	assert.Equal(t, 0, tr.Room(), "handed out is still unacknowledged")
	tr.Ack(out[0], 1, nil)
	assert.Equal(t, out[0].n, tr.Room(), "an ack gives its records' room back")
	assert.Equal(t, (10-out[0].n)*cost, tr.UnackedBytes())
	tr.Ack(out[1], 1, nil)
	assert.Equal(t, 0, tr.UnackedBytes())

	// A record larger than the whole budget goes alone, and nothing after
	// it until it is acknowledged.
	big := records(tp0, offs[tp0], 1)
	big[0].Value = make([]byte, 2*lim.MaxUnackedBytes)
	assert.Equal(t, 10, tr.Room())
	tr.Add(tp0, big, afterRecs, -1)
	assert.Equal(t, 0, tr.Room(), "the big record uses it all")
	b := next(t, tr)
	tr.Ack(b, 1, nil)
	assert.Equal(t, 0, tr.UnackedBytes())
	assert.Equal(t, 1, tr.Room(), "nothing held: room for one record of the largest size seen")

	// Revoke gives back the pending records' share, Release the rest.
	tr.Add(tp1, records(tp1, offs[tp1], 3), afterRecs, -1)
	b = next(t, tr)
	tr.Add(tp1, records(tp1, offs[tp1]+3, 2), afterRecs, -1)
	tr.Revoke([]TP{tp1})
	assert.Equal(t, b.n*cost, tr.UnackedBytes(), "pending records dropped")
	tr.Release([]TP{tp1})
	assert.Equal(t, 0, tr.UnackedBytes(), "released: its records are let go")
	assert.False(t, tr.Ack(b, 1, nil), "a late ack changes nothing")
	assert.Equal(t, 0, tr.UnackedBytes())
}
