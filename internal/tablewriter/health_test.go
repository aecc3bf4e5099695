package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// slowRebuild makes a failed stream stay rebuilding long enough to be seen,
// by a poller and by the snapshot taken after it, on a loaded machine too.
func slowRebuild(c *Config) {
	c.Pool.OpenBackoffInitial, c.Pool.OpenBackoffMax = 1500*time.Millisecond, 1500*time.Millisecond
}

// streamOf is stream i of h, failing the test if there is none. It calls
// t.Fatalf: use it on the test goroutine only; pollers use findStream.
func streamOf(t *testing.T, h TableHealth, i int) StreamHealth {
	t.Helper()
	s, ok := findStream(h, i)
	if !ok {
		t.Fatalf("no stream %d in %+v", i, h)
	}
	return s
}

// findStream is stream i of h, and whether h has it.
func findStream(h TableHealth, i int) (StreamHealth, bool) {
	for _, s := range h.Streams {
		if s.Index == i {
			return s, true
		}
	}
	return StreamHealth{}, false
}

// ackUntilDone acks every batch the streams hold until all the writers of
// wg have returned. Later writes submit only once earlier ones are acked,
// at moments no fixed number of acks and sleeps can predict on a loaded
// machine; a bounded loop could stop acking before the last submit and
// leave wg.Wait hanging.
func ackUntilDone(t *testing.T, opener *ingestfake.Opener, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	deadline := time.After(30 * time.Second)
	for {
		for _, s := range opener.Streams() {
			s.AckAll()
		}
		select {
		case <-done:
			return
		case <-deadline:
			t.Fatalf("the writes did not return within 30s while every submitted batch was acked")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// A stream killed by a poison fault is reported rebuilding, with its
// error, while the other stays up; once the pool has rebuilt it, it is up
// again on a new generation with the rebuild counted.
func TestHealthStreamUpRebuildingUp(t *testing.T) {
	h := newHarness(t, ingestfake.Config{}, slowRebuild, nil)
	require.Empty(t, h.write(t, rows(`{"id":1,"msg":"a"}`)))
	th := h.w.Health()
	require.Equal(t, StateUp, th.State)
	require.Len(t, th.Streams, 2)
	for _, s := range th.Streams {
		assert.Equal(t, StateUp, s.State)
		assert.Equal(t, uint64(1), s.Generation)
		assert.Empty(t, s.LastError)
	}

	// The opener numbers streams in open order, not by pool slot: find
	// the slot of the one killed.
	h.opener.Streams()[0].Poison(ingestfake.ErrPoison("frame rejected"))
	k := -1
	require.Eventually(t, func() bool {
		for _, s := range h.w.Health().Streams {
			// The error is recorded a moment after the stream is taken
			// out of service.
			if s.State == StateRebuilding && s.LastError != "" {
				k = s.Index
				return true
			}
		}
		return false
	}, 10*time.Second, 2*time.Millisecond, "the killed stream is rebuilding")
	th = h.w.Health()
	assert.Equal(t, StateRebuilding, th.State, "the table is as bad as its worst stream")
	assert.Contains(t, streamOf(t, th, k).LastError, "frame rejected", "the failure is named")
	assert.Equal(t, StateUp, streamOf(t, th, 1-k).State, "the other stream keeps serving")

	require.Eventually(t, func() bool {
		s, ok := findStream(h.w.Health(), k)
		return ok && s.State == StateUp && s.Generation == 2
	}, 10*time.Second, 10*time.Millisecond, "the stream is rebuilt")
	th = h.w.Health()
	assert.Equal(t, StateUp, th.State)
	assert.Equal(t, 1, streamOf(t, th, k).Rebuilds)
	assert.Empty(t, streamOf(t, th, k).LastError)
}

// While acks stall, the rows stay pending and the age of the oldest of
// them grows; the ack clears both and stamps the last ack.
func TestHealthStalledAcksGrowAgeAndPending(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true}, func(c *Config) {
		c.Pool.MinStreams, c.Pool.MaxStreams = 1, 1
	}, nil)
	done := make(chan error, 1)
	go func() {
		_, err := h.w.Write(context.Background(), rows(`{"id":1,"msg":"a"}`, `{"id":2,"msg":"b"}`), nil)
		done <- err
	}()
	require.Eventually(t, func() bool {
		s, ok := findStream(h.w.Health(), 0)
		return ok && s.PendingRows == 2 && !s.OldestPending.IsZero() // the lane waits for them
	}, 10*time.Second, 5*time.Millisecond)
	first := h.w.Health()
	s := streamOf(t, first, 0)
	assert.Equal(t, int64(1), s.PendingBatches)
	assert.True(t, s.LastAck.IsZero(), "nothing was ever acked")
	time.Sleep(60 * time.Millisecond)
	later := h.w.Health()
	assert.Equal(t, uint64(2), streamOf(t, later, 0).PendingRows, "still pending")
	assert.GreaterOrEqual(t, later.OldestPendingAge()-first.OldestPendingAge(), 50*time.Millisecond, "the ack age grows while acks stall")
	assert.Equal(t, StateUp, later.State, "a slow ack is not a failed stream")

	h.opener.Streams()[0].AckAll()
	require.NoError(t, <-done)
	after := streamOf(t, h.w.Health(), 0)
	assert.Zero(t, after.PendingRows)
	assert.True(t, after.OldestPending.IsZero())
	assert.False(t, after.LastAck.IsZero())
}

// A full ack lane and an exhausted byte budget show as writers waiting.
func TestHealthShowsBackpressure(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true}, func(c *Config) {
		c.Pool.MinStreams, c.Pool.MaxStreams, c.Pool.AckChannelCapacity = 1, 1, 1
	}, nil)
	// One write at a time: the first is taken by the lane, which waits
	// for its ack; the second fills the one-item channel; the third waits.
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { _, _ = h.w.Write(context.Background(), rows(`{"id":`+itoa(int64(i))+`,"msg":"x"}`), nil) })
		if i < 2 {
			require.Eventually(t, func() bool {
				s, ok := findStream(h.w.Health(), 0)
				return ok && s.PendingBatches == int64(i+1) && !s.OldestPending.IsZero()
			}, 10*time.Second, 5*time.Millisecond)
		}
	}
	require.Eventually(t, func() bool { s, ok := findStream(h.w.Health(), 0); return ok && s.LaneFullWriters == 1 }, 10*time.Second, 5*time.Millisecond,
		"the third write waits for room in the one-item lane")
	ackUntilDone(t, h.opener, &wg) // the later writes submit after the first ack
	assert.Zero(t, streamOf(t, h.w.Health(), 0).LaneFullWriters)

	hb := newHarness(t, ingestfake.Config{ManualAck: true}, func(c *Config) { c.MaxInFlightBytes = 1 }, nil)
	for i := range 2 {
		wg.Go(func() { _, _ = hb.w.Write(context.Background(), rows(`{"id":`+itoa(int64(i))+`,"msg":"x"}`), nil) })
	}
	require.Eventually(t, func() bool { return hb.w.Health().BudgetWaiters == 1 }, 10*time.Second, 5*time.Millisecond,
		"the second write waits for the budget the first holds")
	ackUntilDone(t, hb.opener, &wg)
}

// Streams refused for good are stopped, with the cause; the writer stays
// stopped (not open) until Open, then is up again.
func TestHealthStoppedUntilReopen(t *testing.T) {
	h := newHarness(t, ingestfake.Config{}, nil, nil)
	for _, s := range h.opener.Streams() {
		s.Poison(ingestfake.ErrFatalConfig("PERMISSION_DENIED: missing MODIFY"))
	}
	require.Eventually(t, func() bool { return h.w.Health().State == StateStopped }, 10*time.Second, 5*time.Millisecond)
	th := h.w.Health()
	for _, s := range th.Streams {
		assert.Equal(t, StateStopped, s.State)
		assert.Contains(t, s.LastError, "PERMISSION_DENIED")
	}
	_, err := h.w.Write(context.Background(), rows(`{"id":1,"msg":"a"}`), nil)
	require.ErrorIs(t, err, ErrNotOpen)
	th = h.w.Health()
	assert.Equal(t, StateStopped, th.State, "not open: stopped")
	assert.Contains(t, th.Reason, "PERMISSION_DENIED")
	assert.Len(t, th.Streams, 2, "the stopped streams are still reported")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	skipWait(h.w)
	require.NoError(t, h.w.Open(ctx))
	th = h.w.Health()
	assert.Equal(t, StateUp, th.State)
	assert.Empty(t, th.Reason)

	require.NoError(t, h.w.Close(ctx))
	assert.Equal(t, StateStopped, h.w.Health().State, "closed")
}

// A writer whose open failed with its streams still retrying is
// rebuilding; before any open it is rebuilding too (opening).
func TestHealthBeforeAndDuringFailedOpen(t *testing.T) {
	cat := catalogfake.New()
	cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	opener := ingestfake.NewOpener(ingestfake.Config{})
	opener.FailNextOpens(ingestfake.ErrTransient("unavailable"), ingestfake.ErrTransient("unavailable"),
		ingestfake.ErrTransient("unavailable"), ingestfake.ErrTransient("unavailable"))
	w := New(Config{Table: testTable, Pool: testPoolConfig(), ConnectTimeout: 50 * time.Millisecond}, opener, cat, nil, nil)
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	th := w.Health()
	assert.Equal(t, StateRebuilding, th.State)
	assert.Equal(t, "not opened yet", th.Reason)
	require.Error(t, w.Open(context.Background()))
	th = w.Health()
	assert.Equal(t, StateRebuilding, th.State, "the streams keep retrying")
	assert.Contains(t, th.Reason, "unavailable")
}

// The router reports one entry per open table, by name.
func TestRouterHealthOneEntryPerTable(t *testing.T) {
	r, _, _ := newRouter(t, 4, "c.s.a", "c.s.b")
	errs := r.WriteRouted(context.Background(), rows(`{"id":1}`, `{"id":2}`),
		func(i int) (string, error) { return []string{"c.s.b", "c.s.a"}[i], nil }, nil)
	require.Empty(t, errs)
	hs := r.Health()
	require.Len(t, hs, 2)
	assert.Equal(t, "c.s.a", hs[0].Table)
	assert.Equal(t, "c.s.b", hs[1].Table)
	for _, h := range hs {
		assert.Equal(t, StateUp, h.State)
		assert.Len(t, h.Streams, 2)
	}
}

// recordingSink keeps the last value of every gauge series and the sum of
// every counter series, by "name{label,…}" (timers are dropped). Its zero
// value works.
type recordingSink struct {
	mu     sync.Mutex
	series map[string]int64
}

// record sets (or, for a counter, adds v to) a series.
func (s *recordingSink) record(name string, labels []string, v int64, add bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.series == nil {
		s.series = map[string]int64{}
	}
	k := name + "{" + strings.Join(labels, ",") + "}"
	if add {
		v += s.series[k]
	}
	s.series[k] = v
}

type recGauge struct {
	s    *recordingSink
	name string
}

func (g recGauge) Set(v int64, labels ...string) { g.s.record(g.name, labels, v, false) }

type recCounter recGauge

func (c recCounter) Incr(v int64, labels ...string) { c.s.record(c.name, labels, v, true) }

type nopCounter struct{}

func (nopCounter) Incr(int64, ...string)   {}
func (nopCounter) Timing(int64, ...string) {}

func (s *recordingSink) Counter(name string, _ ...string) Counter {
	return recCounter{s: s, name: name}
}
func (s *recordingSink) Timer(string, ...string) Timer { return nopCounter{} }
func (s *recordingSink) Gauge(name string, _ ...string) Gauge {
	return recGauge{s: s, name: name}
}

func (s *recordingSink) get(series string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.series[series]
	return v, ok
}

// The health gauges follow the snapshot without an ack to update them: the
// ack age climbs while acks stall, the state turns stopped when the streams
// give up.
func TestHealthGauges(t *testing.T) {
	sink := &recordingSink{}
	cat := catalogfake.New()
	cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	opener := ingestfake.NewOpener(ingestfake.Config{ManualAck: true})
	pc := testPoolConfig()
	pc.MinStreams, pc.MaxStreams = 1, 1
	w := New(Config{Table: testTable, Pool: pc, HealthInterval: 10 * time.Millisecond}, opener, cat, nil, NewMetrics(sink, testTable))
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	require.NoError(t, w.Open(context.Background()))
	series := func(name string) string { return name + "{" + testTable + ",0}" }
	require.Eventually(t, func() bool { v, ok := sink.get(series(mStreamState)); return ok && v == 0 }, 10*time.Second, 5*time.Millisecond, "up is 0")
	table := func(name string) int64 { v, _ := sink.get(name + "{" + testTable + "}"); return v }
	require.Eventually(t, func() bool { return table(mTableState) == 0 && table(mInflightLimit) > 0 }, 10*time.Second, 5*time.Millisecond,
		"the table is up (0) and its in-flight byte limit is exported")
	assert.Zero(t, table(mUnreachable), "a stream is connected")

	go func() { _, _ = w.Write(context.Background(), rows(`{"id":1,"msg":"a"}`), nil) }()
	require.Eventually(t, func() bool { v, _ := sink.get(series(mAckAge)); return v >= 100 }, 10*time.Second, 10*time.Millisecond,
		"the ack age climbs past 100 ms while the ack stalls")
	require.Eventually(t, func() bool { v, _ := sink.get(series(mPendingBatches)); return v == 1 && table(mInflightBytes) > 0 }, 10*time.Second, 5*time.Millisecond,
		"one batch in flight, holding bytes of the budget")
	opener.Streams()[0].AckAll()
	require.Eventually(t, func() bool { v, _ := sink.get(series(mAckAge)); return v == 0 }, 10*time.Second, 5*time.Millisecond,
		"nothing pending: age 0")

	opener.Streams()[0].Poison(ingestfake.ErrFatalConfig("PERMISSION_DENIED"))
	require.Eventually(t, func() bool { v, _ := sink.get(series(mStreamState)); return v == 2 }, 10*time.Second, 5*time.Millisecond, "stopped is 2")
	require.Eventually(t, func() bool { return table(mTableState) == 2 && table(mInflightBytes) == 0 }, 10*time.Second, 5*time.Millisecond,
		"the table is stopped (2), nothing in flight")
	_, err := w.Write(context.Background(), rows(`{"id":2,"msg":"b"}`), nil)
	require.True(t, errors.Is(err, ErrNotOpen))
	v, _ := sink.get(mBackpressure + "{" + testTable + ",budget}")
	assert.Zero(t, v)

	// Closed (an evicted table): its last state no longer pages.
	require.NoError(t, w.Close(context.Background()))
	assert.Zero(t, table(mTableState), "a closed table reads 0, not its last state")
	assert.Zero(t, table(mUnreachable))
}

// A stream that failed because the service refused its reconnect (a
// Poison around the concurrency reject) counts as a reject, as the lane
// observer's doc says; any other failure counts as poisoned.
func TestLaneObserverCountsARefusedReconnectAsAReject(t *testing.T) {
	sink := &recordingSink{}
	lane := NewMetrics(sink, testTable).StreamObserver(testTable, 0)
	lane.IncPoisoned(fmt.Errorf("acklane: stream failed: %w", refusedAtReconnect()))
	lane.IncPoisoned(&ingest.Error{Class: ingest.Poison, Code: codes.Internal, Err: errors.New("offset gap")})
	series := func(name string) int64 { v, _ := sink.get(name + "{" + testTable + ",0}"); return v }
	assert.Equal(t, int64(1), series(mConcurrencyReject))
	assert.Equal(t, int64(1), series(mAckLanePoisoned))
}
