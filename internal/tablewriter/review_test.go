package tablewriter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// A reopen on a new schema that does not finish (its ctx ends while a
// stream drains rows not yet acknowledged) leaves the pool switched in part:
// no snapshot of the writer matches it. The writer stops those streams, so
// the next Open describes the table afresh and opens new ones, instead of
// failing every later batch on a schema mismatch.
func TestReopenCutShortStopsTheStreams(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true}, provisionCfg, nil)

	// B is submitted on v1 and never acknowledged: a reopen must drain it.
	bDone := make(chan error, 1)
	go func() {
		_, err := h.w.Write(context.Background(), rows(`{"id":1,"msg":"b"}`), nil)
		bDone <- err
	}()
	require.Eventually(t, func() bool {
		var n uint64
		for _, s := range h.opener.Streams() {
			n += s.Submitted()
		}
		return n > 0
	}, 10*time.Second, 5*time.Millisecond, "B submitted")

	// A carries a new field: the table evolves and the pool reopens, but
	// A's ctx ends while B's stream drains.
	actx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := h.w.Write(actx, rows(`{"id":2,"msg":"a","region":"eu"}`), nil)
	cancel()
	require.Error(t, err, "A's reopen was cut short")

	// From now on streams acknowledge by themselves; free B.
	h.opener.SetConfig(ingestfake.Config{})
	for _, s := range h.opener.Streams() {
		s.AckAll()
	}
	select {
	case <-bDone:
	case <-time.After(10 * time.Second):
		t.Fatal("B never settled")
	}

	// C, on the table's old columns, lands (after at most one Open).
	var rowErrs []RowError
	for attempt := 0; attempt < 3; attempt++ {
		rowErrs, err = h.w.Write(context.Background(), rows(`{"id":3,"msg":"c"}`), nil)
		if !errors.Is(err, ErrNotOpen) {
			break
		}
		skipWait(h.w)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		oerr := h.w.Open(ctx)
		cancel()
		require.NoError(t, oerr)
	}
	require.NoError(t, err, "a batch after the cut-short reopen is written")
	assert.Empty(t, rowErrs)
	assert.True(t, h.w.snapshot().has("region"), "the writer writes on the evolved table")
}
