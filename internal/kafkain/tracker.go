// Package kafkain is the engine of the redpanda input: a franz-go consumer
// whose offsets advance only on acknowledged records.
//
// Its heart is the Tracker, which holds, per partition, the records fetched
// but not yet handed out and the batches handed out but not yet
// acknowledged, in offset order. It answers three questions: what to hand
// out next (Next), how far a partition is durable (the end of its run of
// acknowledged batches, or its fetch position once everything fetched is
// acknowledged: what may be committed), and whether a partition
// holds too much to go on polling (Room). The Consumer wires it
// to a kgo.Client: a poll loop feeds it, group callbacks assign, revoke and
// release partitions, and a commit loop commits what it reports durable.
//
// The rules it keeps:
//   - a partition's commit offset is the offset after the longest prefix of
//     its handed-out records that are all acknowledged; an acknowledgement
//     out of order waits for the ones below it;
//   - once every record of a partition fetched is handed out and
//     acknowledged, its commit offset is its fetch position: the offset
//     after the last record fetched, transaction markers (control records)
//     and aborted batches included, so that a transactional topic's
//     committed offset reaches its end offset (what KIP-1094 standardises);
//   - a nacked batch is handed out again, before anything newer of its
//     partition, with the same records (or, without replay, counts as
//     acknowledged: dropped, as Redpanda Connect's auto_replay_nacks: false);
//   - while a partition holds MaxUnacked records not yet acknowledged,
//     or BufferBytes of records not yet handed out, nothing more is
//     polled (Room is 0): no partition is ever paused;
//   - the records of all partitions not yet acknowledged cost at most
//     MaxUnackedBytes (a record costs its bytes plus Limits.Overhead): Room, which bounds each poll, is
//     0 once the next record might not fit;
//   - every batch belongs to one ownership of its partition (a generation);
//     an acknowledgement of a batch whose partition was released, or
//     released and assigned again, changes nothing.
//
// One mutex guards all of it; waiters block on a channel closed and replaced
// at every change (changed), so that they can also honour a context.
package kafkain

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrClosed is returned by Next once the tracker is closed.
var ErrClosed = errors.New("kafkain: input closed")

// TP names a topic partition.
type TP struct {
	Topic     string
	Partition int32
}

// Limits bound what the tracker holds per partition and shape what it hands
// out.
type Limits struct {
	// MaxUnacked is the number of records of one partition fetched but not
	// yet acknowledged at which polling stops until acknowledgements take
	// it below. It stops the poll, as BufferBytes does, rather than pausing
	// the partition: a fetch sent while a partition is paused leaves it out,
	// and when every partition it asks for is caught up the broker holds it
	// for fetch_max_wait, during which the resumed partition is not fetched.
	// Pausing at this bound stalled a budget larger than it (32MiB:
	// consuming a backlog took twice as long, up to six times with
	// batching) and would stall a hot partition among idle ones. A poll may
	// take a partition past the bound (Room sums every partition's room,
	// and a poll's records may all be of one), so the bound is MaxUnacked
	// plus one poll, itself within MaxUnackedBytes.
	MaxUnacked int
	// BufferBytes is the size of the records of one partition fetched but
	// not yet handed out at which polling stops until the pipeline took
	// them below it (pausing the partition instead stalled the 1 KB runs
	// 5 s at a time at the tail of a backlog; see MaxUnacked).
	BufferBytes int
	// MaxUnackedBytes bounds the cost (bytes plus overhead) of the records of every
	// partition fetched and not yet acknowledged; 0 means no bound. The
	// poll loop takes no more records than fit (Room).
	MaxUnackedBytes int
	// YieldBytes bounds the records of one handed-out batch (at least one
	// record).
	YieldBytes int
	// Replay keeps the records of every handed-out batch until it is
	// acknowledged, so that a nack hands them out again. Without it a nack
	// counts as an acknowledgement.
	Replay bool
	// ReplayBackoff is the first delay before a nacked batch is handed out
	// again, doubled at each consecutive nack of the partition up to
	// MaxReplayBackoff. Zero hands it out at once.
	ReplayBackoff, MaxReplayBackoff time.Duration
	// Overhead is what a record costs in memory beyond its key, value and
	// headers; 0 means RecordOverhead (a message per record). Records
	// handed out in packs cost PackedRecordOverhead.
	Overhead int
}

// overhead is Overhead, or RecordOverhead when unset.
func (l Limits) overhead() int {
	if l.Overhead > 0 {
		return l.Overhead
	}
	return RecordOverhead
}

// Batch is one handed-out run of consecutive records of one partition.
type Batch struct {
	TP TP
	// Records are the records handed out; nil once acknowledged, and
	// dropped after hand-out when the tracker does not replay.
	Records []*kgo.Record
	// HighWatermark is the partition's high watermark as last fetched when
	// the batch was cut (for kafka_lag).
	HighWatermark int64

	gen      uint64
	cost     int   // record cost of its records
	first    int64 // offset of the first record
	end      int64 // offset after the last record
	epoch    int32 // leader epoch of the last record
	n        int
	state    batchState
	delivery int // hand-outs so far; an ack names the one it settles
}

type batchState uint8

const (
	stateOut    batchState = iota // handed out, awaiting its ack
	stateAcked                    // acknowledged
	stateNacked                   // nacked, waiting to be handed out again
	stateHeld                     // nacked while its partition is leaving: never again
)

// Offsets returns the batch's offsets, [first, end).
func (b *Batch) Offsets() (first, end int64) { return b.first, b.end }

// Delivery returns the batch's hand-out number (1 for the first); Ack names
// it.
func (b *Batch) Delivery() int { return b.delivery }

// partition is the state of one owned partition.
type partition struct {
	tp       TP
	gen      uint64
	leaving  bool // revoked: no more hand-outs, waiting for acks
	pending  []*kgo.Record
	pendBy   int
	hwm      int64
	out      []*Batch        // handed out and not yet retired, offset order
	unacked  int             // records pending plus in out and not acknowledged
	unackBy  int             // their record cost
	durable  int64           // offset after the acknowledged prefix; -1 none yet
	epoch    int32           // leader epoch of the record before durable
	fetched  kgo.EpochOffset // fetch position after the last Add; Offset -1 unknown
	commit   int64           // last committed offset; -1 none
	moved    time.Time       // when commit last moved, or the partition was assigned
	nacked   int             // batches in out waiting for their replay
	nacks    int             // consecutive nacks, for the replay back-off
	replayAt time.Time       // no replay before this
}

// Tracker is the per-partition commit tracker. Its zero value is not usable:
// see NewTracker.
type Tracker struct {
	lim  Limits
	auto bool // partitions are owned on first sight (no consumer group)

	mu      sync.Mutex
	unackBy int // record cost of the unacknowledged records of every partition
	maxCost int // the largest record cost seen
	parts   map[TP]*partition
	order   []TP // round-robin order of hand-outs
	next    int
	gen     uint64
	closed  bool
	changed chan struct{}
	now     func() time.Time
}

// NewTracker returns a tracker. With auto, a partition is owned as soon as
// records of it are added (direct consuming, no group); otherwise only
// between Assign and Release.
func NewTracker(lim Limits, auto bool) *Tracker {
	if lim.MaxUnacked < 1 {
		lim.MaxUnacked = 1
	}
	if lim.BufferBytes < 1 {
		lim.BufferBytes = 1
	}
	return &Tracker{lim: lim, auto: auto, parts: map[TP]*partition{}, changed: make(chan struct{}), now: time.Now}
}

// broadcast wakes every waiter; callers hold mu.
func (t *Tracker) broadcast() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// Assign starts a new ownership of each partition. A partition still owned
// keeps its state (the group kept it across a rebalance).
func (t *Tracker) Assign(tps []TP) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tp := range tps {
		if _, ok := t.parts[tp]; !ok {
			t.addLocked(tp)
		}
	}
}

func (t *Tracker) addLocked(tp TP) *partition {
	t.gen++
	p := &partition{tp: tp, gen: t.gen, durable: -1, commit: -1, epoch: -1, hwm: -1, moved: time.Now(), fetched: kgo.EpochOffset{Epoch: -1, Offset: -1}}
	t.parts[tp] = p
	t.order = append(t.order, tp)
	return p
}

// Add hands the tracker the records of one fetched partition, in offset
// order, with the partition's fetch position after them and its high
// watermark. recs are the data records only; next is the offset after the
// last record franz-go returned, transaction markers (control records)
// included, with that record's leader epoch: past markers and aborted
// batches that are never handed out. next.Offset < 0 stands for the offset
// after the last of recs. Records of a partition not owned (or leaving) are
// dropped: the group gave it away and its new owner fetches them.
func (t *Tracker) Add(tp TP, recs []*kgo.Record, next kgo.EpochOffset, hwm int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.parts[tp]
	if p == nil {
		if !t.auto || t.closed {
			return
		}
		p = t.addLocked(tp)
	}
	if hwm >= 0 {
		p.hwm = hwm
	}
	if p.leaving {
		return
	}
	if next.Offset < 0 && len(recs) > 0 {
		last := recs[len(recs)-1]
		next = kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}
	}
	if next.Offset >= 0 {
		p.fetched = next
	}
	if len(recs) == 0 {
		// Only markers: with nothing of p awaiting its ack, its commit
		// moves past them.
		p.advance()
		return
	}
	p.pending = slices.Grow(p.pending, len(recs))
	cost, overhead := 0, t.lim.overhead()
	for _, r := range recs {
		p.pending = append(p.pending, r)
		by := recordBytes(r)
		p.pendBy += by
		cost += by + overhead
		t.maxCost = max(t.maxCost, by+overhead)
	}
	p.unacked += len(recs)
	t.charge(p, cost)
	t.broadcast()
}

// advance moves p's durable offset past the run of acknowledged batches at
// the head of out and, once nothing of p is handed out unacknowledged or
// waiting to be handed out, to its fetch position (past the transaction
// markers and aborted batches after its last record). Callers hold the
// tracker's mu.
func (p *partition) advance() {
	for len(p.out) > 0 && p.out[0].state == stateAcked {
		head := p.out[0]
		p.durable, p.epoch = head.end, head.epoch
		p.out[0] = nil
		p.out = p.out[1:]
	}
	if len(p.out) == 0 {
		p.out = nil
		if len(p.pending) == 0 && p.fetched.Offset > p.durable {
			p.durable, p.epoch = p.fetched.Offset, p.fetched.Epoch
		}
	}
}

// RecordOverhead is what a record costs in memory beyond its key, value and
// headers: its kgo.Record (about 160 bytes, in franz-go's per-batch slab)
// and, once handed out, the Benthos message built from it, with its eight
// metadata entries, context and the engine's batch bookkeeping (about 900
// bytes). An estimate, from heap profiles of the binary (docs/kafka.md,
// Memory).
const RecordOverhead = 1024

// PackedRecordOverhead is RecordOverhead for records handed out in packs
// (the redpanda input's pack_records): the kgo.Record, and the row the
// zerobus output reads it through (16 bytes); no message is built.
const PackedRecordOverhead = 256

// charge adds cost (negative: gives it back) to p and to the tracker's
// total; callers hold mu.
func (t *Tracker) charge(p *partition, cost int) {
	p.unackBy += cost
	t.unackBy += cost
}

func recordBytes(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// Room returns how many more records the poll loop may take: the sum,
// over the owned partitions not leaving, of MaxUnacked less their
// unacknowledged records, and 0 while any of them is at its cap (atCap) or
// holds BufferBytes of records not yet handed out. With no partition yet it
// is one partition's bound. With MaxUnackedBytes it is at most the records
// that fit in what the budget has left at the largest record cost seen so
// far (one record while none was seen, or while nothing is
// unacknowledged, so that a record larger than the whole budget still goes
// through, alone). The poll loop asks franz-go for no more than this, so
// that the rest of a fetch stays in franz-go's one buffered fetch instead
// of piling up here on top of the next one.
func (t *Tracker) Room() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	room := t.lim.MaxUnacked
	if len(t.parts) > 0 {
		room = 0
		for _, p := range t.parts {
			if p.leaving {
				continue
			}
			if p.pendBy >= t.lim.BufferBytes || t.atCap(p) {
				return 0
			}
			room += t.lim.MaxUnacked - p.unacked
		}
	}
	if t.lim.MaxUnackedBytes > 0 {
		fit := 1
		if t.maxCost > 0 {
			fit = max(t.lim.MaxUnackedBytes-t.unackBy, 0) / t.maxCost
		}
		if fit == 0 && t.unackBy == 0 {
			fit = 1
		}
		room = min(room, fit)
	}
	return room
}

// atCap reports whether p holds MaxUnacked records not acknowledged, past
// which nothing is polled (Limits.MaxUnacked).
func (t *Tracker) atCap(p *partition) bool { return p.unacked >= t.lim.MaxUnacked }

// ByteRoom returns what MaxUnackedBytes has left (negative past it; 0 with
// no budget), for sizing fetches.
func (t *Tracker) ByteRoom() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lim.MaxUnackedBytes <= 0 {
		return 0
	}
	return t.lim.MaxUnackedBytes - t.unackBy
}

// UnackedBytes returns the record cost of every record fetched and not yet
// acknowledged.
func (t *Tracker) UnackedBytes() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.unackBy
}

// Changed returns a channel closed at the tracker's next change (an add, a
// hand-out, an ack, a revoke, a release).
func (t *Tracker) Changed() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// Next blocks until a batch can be handed out and returns it: a nacked batch
// due for replay first, else up to YieldBytes of the pending records of the
// next partition in turn. It returns ctx's error when ctx ends first and
// ErrClosed once the tracker is closed.
func (t *Tracker) Next(ctx context.Context) (*Batch, error) {
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, ErrClosed
		}
		b, wait := t.takeLocked()
		ch := t.changed
		t.mu.Unlock()
		if b != nil {
			return b, nil
		}
		var tm *time.Timer
		var due <-chan time.Time
		if wait > 0 {
			tm = time.NewTimer(wait)
			due = tm.C
		}
		select {
		case <-ctx.Done():
			err := ctx.Err()
			if tm != nil {
				tm.Stop()
			}
			return nil, err
		case <-ch:
		case <-due:
		}
		if tm != nil {
			tm.Stop()
		}
	}
}

// takeLocked returns the next batch to hand out, or nil and how long until a
// nacked batch is due (0: nothing is due).
func (t *Tracker) takeLocked() (*Batch, time.Duration) {
	now := t.now()
	var soonest time.Duration
	// Replays first: the oldest nacked batch of any partition whose
	// back-off has passed. A partition with a nacked batch hands out
	// nothing newer until it is replayed, so its records go out in order.
	for _, tp := range t.order {
		p := t.parts[tp]
		if p == nil || p.leaving || p.nacked == 0 {
			continue
		}
		for _, b := range p.out {
			if b.state != stateNacked {
				continue
			}
			if d := p.replayAt.Sub(now); d > 0 {
				if soonest == 0 || d < soonest {
					soonest = d
				}
				break
			}
			b.state = stateOut
			b.delivery++
			p.nacked--
			return b, 0
		}
	}
	n := len(t.order)
	for i := 0; i < n; i++ {
		idx := (t.next + i) % n
		p := t.parts[t.order[idx]]
		if p == nil || p.leaving || len(p.pending) == 0 || p.nacked > 0 {
			continue
		}
		t.next = (idx + 1) % n
		return t.yieldLocked(p), 0
	}
	return nil, soonest
}

// yieldLocked cuts the next batch from p's pending records.
func (t *Tracker) yieldLocked(p *partition) *Batch {
	k, by := 0, 0
	for k < len(p.pending) {
		sz := recordBytes(p.pending[k])
		if k > 0 && by+sz > t.lim.YieldBytes {
			break
		}
		by += sz
		k++
	}
	cost := by + k*t.lim.overhead()
	recs := slices.Clone(p.pending[:k])
	clear(p.pending[:k])
	p.pending = p.pending[k:]
	if len(p.pending) == 0 {
		p.pending = nil
	}
	if p.pendBy >= t.lim.BufferBytes && p.pendBy-by < t.lim.BufferBytes {
		t.broadcast() // the poll loop waits for this
	}
	p.pendBy -= by
	last := recs[len(recs)-1]
	b := &Batch{
		TP: p.tp, Records: recs, HighWatermark: p.hwm,
		gen: p.gen, cost: cost, first: recs[0].Offset, end: last.Offset + 1, epoch: last.LeaderEpoch,
		n: len(recs), state: stateOut, delivery: 1,
	}
	p.out = append(p.out, b)
	return b
}

// Handed returns the records of b for building the delivery and, when the
// tracker does not replay, lets the batch drop them.
func (t *Tracker) Handed(b *Batch) []*kgo.Record {
	t.mu.Lock()
	defer t.mu.Unlock()
	recs := b.Records
	if !t.lim.Replay {
		b.Records = nil
	}
	return recs
}

// Ack settles delivery number delivery of b: err == nil acknowledges it,
// anything else nacks it. It reports whether the ack counted (false for a
// partition released since, or a delivery already settled).
func (t *Tracker) Ack(b *Batch, delivery int, err error) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.parts[b.TP]
	if p == nil || p.gen != b.gen || b.delivery != delivery || b.state != stateOut {
		return false
	}
	defer t.broadcast()
	if err != nil && t.lim.Replay {
		if p.leaving {
			// Its partition is leaving: never handed out again, it
			// holds the commit below it; the next owner redelivers.
			b.state = stateHeld
			return true
		}
		b.state = stateNacked
		p.nacked++
		p.nacks++
		d := t.lim.ReplayBackoff << min(p.nacks-1, 16)
		if t.lim.MaxReplayBackoff > 0 && (d > t.lim.MaxReplayBackoff || d <= 0) {
			d = t.lim.MaxReplayBackoff
		}
		p.replayAt = t.now().Add(d)
		return true
	}
	b.state = stateAcked
	b.Records = nil
	p.nacks = 0
	p.unacked -= b.n
	t.charge(p, -b.cost)
	p.advance()
	return true
}

// Revoke marks partitions as leaving: their pending records are dropped,
// nothing more of them is handed out, and nacks of their batches hold the
// commit instead of replaying. Their acks still count until Release.
func (t *Tracker) Revoke(tps []TP) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.eachLocked(tps, func(p *partition) {
		p.leaving = true
		if len(p.pending) > 0 {
			// The fetch position is past the records dropped here:
			// the commit stops at the acknowledged prefix.
			p.fetched = kgo.EpochOffset{Epoch: -1, Offset: -1}
		}
		p.unacked -= len(p.pending)
		t.charge(p, -(p.pendBy + len(p.pending)*t.lim.overhead()))
		clear(p.pending)
		p.pending, p.pendBy = nil, 0
		for _, b := range p.out {
			if b.state == stateNacked {
				b.state = stateHeld
			}
		}
		p.nacked = 0
	})
	t.broadcast()
}

// eachLocked calls fn for every owned partition among tps (all when tps is
// nil); callers hold mu.
func (t *Tracker) eachLocked(tps []TP, fn func(*partition)) {
	if tps == nil {
		for _, p := range t.parts {
			fn(p)
		}
		return
	}
	for _, tp := range tps {
		if p := t.parts[tp]; p != nil {
			fn(p)
		}
	}
}

// WaitSettled blocks until no batch of tps (all when nil) is awaiting its
// ack, or ctx ends (it then reports false).
func (t *Tracker) WaitSettled(ctx context.Context, tps []TP) bool {
	for {
		t.mu.Lock()
		busy := false
		t.eachLocked(tps, func(p *partition) { busy = busy || p.awaiting() })
		ch := t.changed
		t.mu.Unlock()
		if !busy {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// awaiting reports whether a handed-out batch of p waits for its ack, or
// (when p is not leaving) a nacked one for its replay.
func (p *partition) awaiting() bool {
	for _, b := range p.out {
		if b.state == stateOut || (b.state == stateNacked && !p.leaving) {
			return true
		}
	}
	return false
}

// Release forgets partitions: later acks of their batches change nothing.
func (t *Tracker) Release(tps []TP) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.eachLocked(tps, func(p *partition) {
		// Its records still unacknowledged are let go: their late
		// acks change nothing, and the pipeline drops its messages
		// once they settle.
		t.unackBy -= p.unackBy
		delete(t.parts, p.tp)
		t.order = slices.DeleteFunc(t.order, func(o TP) bool { return o == p.tp })
	})
	if t.next >= len(t.order) {
		t.next = 0
	}
	t.broadcast()
}

// Close makes Next return ErrClosed; acks still count.
func (t *Tracker) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	t.broadcast()
}

// Committable returns, for each owned partition among tps (all when tps is
// nil), the offset to commit when it moved past the last committed one: the
// offset after its acknowledged prefix, or its fetch position once every
// record fetched is acknowledged (see Add), with the leader epoch of the
// record before it.
func (t *Tracker) Committable(tps []TP) map[string]map[int32]kgo.EpochOffset {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]map[int32]kgo.EpochOffset{}
	t.eachLocked(tps, func(p *partition) {
		if p.durable < 0 || p.durable <= p.commit {
			return
		}
		if out[p.tp.Topic] == nil {
			out[p.tp.Topic] = map[int32]kgo.EpochOffset{}
		}
		out[p.tp.Topic][p.tp.Partition] = kgo.EpochOffset{Epoch: p.epoch, Offset: p.durable}
	})
	return out
}

// Committed records that offset was committed for tp.
func (t *Tracker) Committed(tp TP, offset int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.parts[tp]; p != nil && offset > p.commit {
		p.commit, p.moved = offset, time.Now()
	}
}

// PartitionState is a snapshot of one partition, for the lag metric, logs
// and tests.
type PartitionState struct {
	TP TP
	// Durable is the offset after the acknowledged prefix (-1: nothing
	// acknowledged yet); Committed the last committed offset (-1: none).
	Durable, Committed int64
	// FirstUnacked is the offset of the oldest record not acknowledged (-1
	// when every record fetched is).
	FirstUnacked int64
	// Unacked counts records fetched and not acknowledged, UnackedBytes
	// their record cost; Pending counts those not yet handed out.
	Unacked, UnackedBytes, Pending int
	HighWatermark                  int64
	// AtCap reports that the partition holds MaxUnacked records not
	// acknowledged: nothing is polled until it is below.
	AtCap, Leaving bool
	// CommitMoved is when Committed last moved, or the partition was
	// assigned when it has not since.
	CommitMoved time.Time
}

// State returns a snapshot of every owned partition, in no order.
func (t *Tracker) State() []PartitionState {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]PartitionState, 0, len(t.parts))
	for _, p := range t.parts {
		s := PartitionState{
			TP: p.tp, Durable: p.durable, Committed: p.commit, FirstUnacked: -1,
			Unacked: p.unacked, UnackedBytes: p.unackBy, Pending: len(p.pending), HighWatermark: p.hwm, AtCap: t.atCap(p), Leaving: p.leaving,
			CommitMoved: p.moved,
		}
		for _, b := range p.out {
			if b.state != stateAcked {
				s.FirstUnacked = b.first
				break
			}
		}
		if s.FirstUnacked < 0 && len(p.pending) > 0 {
			s.FirstUnacked = p.pending[0].Offset
		}
		out = append(out, s)
	}
	return out
}
