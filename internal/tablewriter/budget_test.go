package tablewriter

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// Reservations wait in arrival order: a large one at the head is not
// overtaken by small ones that would fit, so it cannot starve; one larger
// than the whole budget gets in alone once the budget is empty.
func TestBudgetFIFOAndOversized(t *testing.T) {
	b := newBudget(100)
	ctx := context.Background()
	first, err := b.acquire(ctx, 60)
	require.NoError(t, err)

	got := make(chan string, 3)
	var wg sync.WaitGroup
	start := func(name string, n int64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := b.acquire(ctx, n)
			if err != nil {
				got <- err.Error()
				return
			}
			got <- name
			time.Sleep(10 * time.Millisecond)
			r.release()
		}()
		// Queue them in a known order.
		require.Eventually(t, func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			return len(b.waiters) > 0 && b.waiters[len(b.waiters)-1].n == n
		}, 10*time.Second, time.Millisecond)
	}
	start("huge", 500) // larger than the budget: waits for it to be empty
	start("small", 10) // would fit now, but queues behind huge
	select {
	case name := <-got:
		t.Fatalf("%s admitted while the head of the queue waits", name)
	case <-time.After(50 * time.Millisecond):
	}
	first.release()
	assert.Equal(t, "huge", <-got, "the oversized reservation goes in alone, first")
	assert.Equal(t, "small", <-got)
	wg.Wait()
	assert.Zero(t, b.inUse())
}

// A reservation waiting when its ctx ends fails naming the budget, leaves
// nothing reserved and lets the next waiter in.
func TestBudgetAcquireCancelled(t *testing.T) {
	b := newBudget(100)
	held, err := b.acquire(context.Background(), 90)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = b.acquire(ctx, 50)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "100-byte in-flight budget")
	assert.Equal(t, int64(90), b.inUse())

	// Resizing corrects the estimate either way; release is idempotent.
	held.resize(30)
	assert.Equal(t, int64(30), b.inUse())
	small, err := b.acquire(context.Background(), 60)
	require.NoError(t, err, "room made by a smaller resize is usable at once")
	held.resize(200)
	assert.Equal(t, int64(260), b.inUse(), "growing past the limit never waits")
	held.release()
	held.release()
	small.release()
	assert.Zero(t, b.inUse())
}

// Writes reserve their bytes before converting and hold them until the
// batch is durable: with a budget of about two batches and no acks, only two
// batches reach the streams; acks let the rest through; everything is
// given back at the end.
func TestWriteWaitsForBudget(t *testing.T) {
	const budgetBytes = 2500 // two ~1,000-byte batches, not three
	h := newHarness(t, ingestfake.Config{ManualAck: true}, func(c *Config) { c.MaxInFlightBytes = budgetBytes }, nil)
	pad := strings.Repeat("x", 980)
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = h.w.Write(context.Background(), rows(fmt.Sprintf(`{"id":%d,"msg":"%s"}`, i, pad)), nil)
		}()
	}
	submitted := func() uint64 {
		var s uint64
		for _, st := range h.opener.Streams() {
			s += st.Submitted()
		}
		return s
	}
	require.Eventually(t, func() bool { return submitted() == 2 }, 10*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, uint64(2), submitted(), "the third batch waits for budget before it converts")
	assert.LessOrEqual(t, h.w.budget.inUse(), int64(budgetBytes))

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for ack := true; ack; {
		select {
		case <-done:
			ack = false
		case <-time.After(5 * time.Millisecond):
			assert.LessOrEqual(t, h.w.budget.inUse(), int64(budgetBytes))
			for _, st := range h.opener.Streams() {
				st.AckAll()
			}
		}
	}
	for i, err := range errs {
		assert.NoError(t, err, "write %d", i)
	}
	assert.Equal(t, uint64(n), submitted())
	assert.Zero(t, h.w.budget.inUse(), "every reservation is given back once settled")
}

// A batch larger than the whole budget is written alone rather than
// waiting forever.
func TestWriteLargerThanBudget(t *testing.T) {
	h := newHarness(t, ingestfake.Config{}, func(c *Config) { c.MaxInFlightBytes = 100 }, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := h.w.Write(ctx, rows(`{"id":1,"msg":"`+strings.Repeat("y", 1000)+`"}`), nil)
	require.NoError(t, err)
	assert.Zero(t, h.w.budget.inUse())
}

// Before any batch was converted, a batch of decoded values (whose size is
// unknown without serializing them) takes the whole budget; afterwards it
// is estimated from the last batch's Arrow bytes per row.
func TestEstimateBytes(t *testing.T) {
	h := newHarness(t, ingestfake.Config{}, func(c *Config) { c.MaxInFlightBytes = 1 << 20 }, nil)
	batch := []Row{structuredRow(map[string]any{"id": 1, "msg": strings.Repeat("z", 500)}), structuredRow(map[string]any{"id": 2, "msg": "a"})}
	assert.Equal(t, int64(1<<20), h.w.estimateBytes(batch))
	assert.Equal(t, int64(16), h.w.estimateBytes(rows(`{"id":1}`, `{"id":2}`)), "raw messages count their bytes")
	_, err := h.w.Write(context.Background(), batch, nil)
	require.NoError(t, err)
	per := h.w.rowBytes.Load()
	assert.Greater(t, per, int64(200), "about half of the 500-byte message, per row")
	assert.Equal(t, 2*per, h.w.estimateBytes(batch))
}
