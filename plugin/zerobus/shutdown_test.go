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

// A batch split over streams (ordering_key) whose one part is durable and
// whose other parts are still waiting for their acks when the shutdown bound
// passes fails only those other rows, as table failures: the line Close
// writes counts them among the rows not delivered (the input redelivers
// them), and only them.
func TestShutdownCountsRowsOfAPartlyDurableBatch(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true, KeepRecords: true}, "close_timeout: 300ms\nordering_key: ${! this.msg }\nstreams:\n  min: 4\n", nil)
	h.out.shutdown = newShutdownNotice()
	h.connect(t)
	var bodies []string
	for i := 0; i < 12; i++ {
		bodies = append(bodies, `{"id":`+itoa(int64(i))+`,"msg":"k`+itoa(int64(i%6))+`"}`)
	}
	done := writeAsync(context.Background(), h.out, msgs(bodies...))
	waitSubmitted(t, h.opener, 12)

	// Ack one stream that holds rows; the others stall.
	var acked uint64
	for _, s := range h.opener.Streams() {
		if n := s.Submitted(); n > 0 {
			s.AckAll()
			acked = n
			break
		}
	}
	require.Positive(t, acked)
	require.Less(t, acked, uint64(12), "the batch spans more than one stream")
	h.out.shutdown.begin()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the partly durable batch was not failed after close_timeout")
	}
	var berr *service.BatchError
	require.ErrorAs(t, err, &berr, "part of the batch is durable: only the rest fails")
	assert.Equal(t, int(12-acked), berr.IndexedErrors())
	assert.Equal(t, int64(12-acked), h.out.notDelivered.Load(), "the rows failed at the shutdown bound are counted, the durable ones are not")
	assert.Equal(t, int64(1), h.out.notDeliveredBatches.Load())
}
