package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
