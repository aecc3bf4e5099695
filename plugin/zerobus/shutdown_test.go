package zerobus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// Once the process is stopping, a batch waiting for a stalled ack is nacked
// when close_timeout has passed since the notice, a held batch (the table
// not connected) is refused instead of held (here at once: close_timeout
// has passed), and Connect opens nothing more.
func TestShutdownBoundsWritesAndRefusesHeldBatches(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true}, "close_timeout: 300ms\n", nil)
	h.out.shutdown = newShutdownNotice()
	h.connect(t)
	done := writeAsync(context.Background(), h.out, msgs(`{"id":1}`, `{"id":2}`))
	waitSubmitted(t, h.opener, 1)

	h.out.shutdown.begin()
	begun := time.Now()
	select {
	case err := <-done:
		require.Error(t, err, "not durable: nacked, never acked")
		assert.Less(t, time.Since(begun), 2*time.Second)
		assert.GreaterOrEqual(t, time.Since(begun), 250*time.Millisecond, "it waited for its ack until close_timeout")
	case <-time.After(5 * time.Second):
		t.Fatal("the stalled batch was not nacked after close_timeout")
	}

	// The streams stop for good: the next batch would be held, but the
	// process is stopping, so it is refused (and counted).
	for _, s := range h.opener.Streams() {
		s.Poison(&ingest.Error{Class: ingest.FatalConfig, Err: errors.New("PERMISSION_DENIED")})
	}
	require.Eventually(t, func() bool {
		err := h.out.WriteBatch(context.Background(), msgs(`{"id":3}`))
		return err != nil && !errors.Is(err, service.ErrNotConnected)
	}, 10*time.Second, 10*time.Millisecond)
	opens := h.opener.OpenAttempts()
	require.NoError(t, h.out.Connect(context.Background()), "stopping: the engine is let through to WriteBatch")
	assert.Equal(t, opens, h.opener.OpenAttempts(), "nothing is opened once stopping")
	assert.GreaterOrEqual(t, h.out.notDelivered.Load(), int64(3), "the rows not delivered are counted for Close's line")
}
