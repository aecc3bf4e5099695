package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// A batch split over two streams (an ordering key) of which one part is
// durable and the other is not confirmed within ack.timeout is not failed
// as a whole: the durable part would be written again. Only the rows of the
// other part fail, as table failures (retried, never dead-lettered).
func TestPartlyDurableBatchFailsOnlyTheRest(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true, KeepRecords: true}, func(c *Config) { c.AckTimeout = time.Second }, nil)
	p := h.w.st.Load().pool
	keys := []string{"k0"}
	for i := 1; len(keys) < 2 && i < 1000; i++ {
		if k := fmt.Sprintf("k%d", i); p.Pick(k) != p.Pick(keys[0]) {
			keys = append(keys, k)
		}
	}
	require.Len(t, keys, 2, "two keys on two streams")

	type result struct {
		errs []RowError
		err  error
	}
	done := make(chan result, 1)
	go func() {
		errs, err := h.w.Write(context.Background(), rows(`{"id":1,"msg":"a"}`, `{"id":2,"msg":"b"}`), func(i int) (string, error) { return keys[i], nil })
		done <- result{errs, err}
	}()
	// Ack only the stream that holds id 1.
	require.Eventually(t, func() bool {
		n := 0
		for _, s := range h.opener.Streams() {
			if s.Submitted() > 0 {
				n++
			}
		}
		return n == 2
	}, 10*time.Second, 5*time.Millisecond)
	for _, s := range h.opener.Streams() {
		for _, rec := range s.Records() {
			for c, f := range rec.Schema().Fields() {
				if f.Name == "id" && rec.Column(c).(*array.Int64).Value(0) == 1 {
					s.AckAll()
				}
			}
		}
	}
	var res result
	select {
	case res = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("Write did not return")
	}
	require.NoError(t, res.err, "part of the batch is durable: no whole-batch failure or hold")
	require.Len(t, res.errs, 1)
	assert.Equal(t, 1, res.errs[0].Index)
	var te *TableError
	assert.True(t, errors.As(res.errs[0].Err, &te), "a table failure, not a dead letter: %v", res.errs[0].Err)
	assert.False(t, errors.Is(res.errs[0].Err, ErrNotOpen))
}

// A batch split over two streams (an ordering key) whose later part cannot
// be submitted still waits for its earlier, submitted part: the Write
// returns only once that part's ticket settled (here: once it is durable),
// then fails the later part's rows alone. Returning sooner would fail or
// hold the batch while its first part may still land, and the engine would
// send that part again.
//
// The later part's stream is rebuilding (its reopen blocked) when every
// connection goes down: the outage releases the later part's submit, which
// never reached a stream.
func TestLaterPartSubmitFailureWaitsForEarlierParts(t *testing.T) {
	cat := catalogfake.New()
	cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	var up atomic.Bool
	up.Store(true)
	fake := ingestfake.NewOpener(ingestfake.Config{ManualAck: true})
	release := make(chan struct{})
	fake.SetOpenHook(func(ctx context.Context, attempt int, _ string, _ *arrow.Schema) error {
		if attempt <= 2 {
			return nil // the pool's two streams
		}
		select { // a rebuild: held until the test ends
		case <-release:
		case <-ctx.Done():
		}
		return errors.New("released")
	})
	w := New(Config{Table: testTable, Pool: testPoolConfig(), AckTimeout: time.Minute}, connOpener{fake, &up}, cat, nil, nil)
	t.Cleanup(func() {
		close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	require.NoError(t, w.Open(context.Background()))
	p := w.st.Load().pool
	keys := []string{"k0"}
	for i := 1; len(keys) < 2 && i < 1000; i++ {
		if k := fmt.Sprintf("k%d", i); p.Pick(k) != p.Pick(keys[0]) {
			keys = append(keys, k)
		}
	}
	require.Len(t, keys, 2, "two keys on two streams")
	if p.Pick(keys[1]) < p.Pick(keys[0]) {
		keys[0], keys[1] = keys[1], keys[0] // parts are submitted in member order
	}
	// Which fake stream serves which member: a probe row on the second key.
	probe := make(chan error, 1)
	go func() {
		_, err := w.Write(context.Background(), rows(`{"id":0,"msg":"probe"}`), func(int) (string, error) { return keys[1], nil })
		probe <- err
	}()
	var first, second *ingestfake.Stream
	require.Eventually(t, func() bool {
		for _, s := range fake.Streams() {
			if s.Submitted() > 0 {
				second = s
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "the probe row was never submitted")
	second.AckAll()
	require.NoError(t, <-probe)
	for _, s := range fake.Streams() {
		if s != second {
			first = s
		}
	}
	require.NotNil(t, first)
	// The second stream breaks: its rebuild is held.
	second.Poison(nil)
	require.Eventually(t, func() bool { return fake.OpenAttempts() > 2 }, 10*time.Second, 5*time.Millisecond, "the rebuild never began")

	type result struct {
		errs []RowError
		err  error
	}
	done := make(chan result, 1)
	go func() {
		errs, err := w.Write(context.Background(), rows(`{"id":1,"msg":"a"}`, `{"id":2,"msg":"b"}`), func(i int) (string, error) { return keys[i], nil })
		done <- result{errs, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.WaitSubmitted(ctx, 1); err != nil {
		select {
		case r := <-done:
			t.Fatalf("the first part was never submitted; Write returned %v %v", r.errs, r.err)
		default:
			t.Fatalf("the first part was never submitted: %v", err)
		}
	}
	// Every connection goes down: past OutageGrace the outage releases
	// the second part's submit, which waits for its stream.
	up.Store(false)
	require.Eventually(t, func() bool { return w.outageCtx().Err() != nil }, 10*time.Second, 5*time.Millisecond, "the outage was never signalled")
	select {
	case r := <-done:
		t.Fatalf("Write returned before its submitted part settled: %v %v", r.errs, r.err)
	case <-time.After(500 * time.Millisecond):
	}
	first.AckAll()
	var res result
	select {
	case res = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("Write did not return once the first part was durable")
	}
	require.NoError(t, res.err, "part of the batch is durable: no whole-batch failure or hold")
	require.Len(t, res.errs, 1)
	assert.Equal(t, 1, res.errs[0].Index, "only the part that was not submitted fails")
}
