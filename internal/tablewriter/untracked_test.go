package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

// A write released by an outage after its rows were submitted (it waited
// for room on a full ack lane) is failed, not held: its rows may still land,
// so it must not pass for a batch that sent nothing.
func TestOutageFailsAWriteWhoseRowsWereSubmitted(t *testing.T) {
	cat := catalogfake.New()
	cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	var up atomic.Bool
	up.Store(true)
	o := ingestfake.NewOpener(ingestfake.Config{ManualAck: true})
	pc := pool.DefaultConfig()
	pc.MinStreams, pc.MaxStreams, pc.SelfSizing = 1, 1, false
	pc.AckChannelCapacity = 1
	w := New(Config{Table: testTable, Pool: pc}, connOpener{o, &up}, cat, nil, nil)
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, w.Open(ctx))
	streams, err := o.WaitOpens(ctx, 1)
	require.NoError(t, err)
	s := streams[0]

	// A first batch sets the writer's per-row estimate (until then a
	// batch takes the whole in-flight budget).
	first := make(chan error, 1)
	go func() { _, err := w.Write(ctx, rows(`{"id":0,"msg":"a"}`), nil); first <- err }()
	require.Eventually(t, func() bool { s.AckAll(); return len(first) == 1 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, <-first)

	const writers = 4
	errs := make(chan error, writers)
	for i := range writers {
		go func() {
			_, err := w.Write(ctx, rows(fmt.Sprintf(`{"id":%d,"msg":"b"}`, i+1)), nil)
			errs <- err
		}()
	}
	blocked := func() bool {
		for _, m := range w.st.Load().pool.Health().Members {
			if m.Lane.BlockedWriters > 0 {
				return true
			}
		}
		return false
	}
	require.Eventually(t, blocked, 10*time.Second, 5*time.Millisecond, "a writer waits for room on the lane")

	up.Store(false) // the outage releases the writer waiting on the lane
	var released error
	select {
	case released = <-errs:
	case <-time.After(10 * time.Second):
		t.Fatal("the outage released no write")
	}
	require.Error(t, released)
	assert.False(t, errors.Is(released, ErrNotOpen), "held although its rows were submitted: %v", released)
	assert.ErrorIs(t, released, pool.ErrUntracked)

	up.Store(true)
	settled := 0
	require.Eventually(t, func() bool {
		s.AckAll()
		for {
			select {
			case err := <-errs:
				settled++
				if err != nil && !errors.Is(err, pool.ErrUntracked) {
					t.Errorf("write failed: %v", err)
				}
			default:
				return settled == writers-1
			}
		}
	}, 10*time.Second, 5*time.Millisecond, "the other writes settle once acked")
}
