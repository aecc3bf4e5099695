package pool

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// An extra whose stream dies just as the sizer retires it leaves through
// the failure path, not through retire: its connection must not stay among
// those Close drains (Close would report the dead lane's failure and count
// its already failed rows as nacked at close).
func TestExtraDyingWhileRetiredLeavesNothingToDrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for iter := range 20 {
		o := ingestfake.NewOpener(ingestfake.Config{})
		cfg := DefaultConfig()
		cfg.MinStreams, cfg.MaxStreams = 1, 2
		cfg.OpenBackoffInitial, cfg.OpenBackoffMax = time.Millisecond, 2*time.Millisecond
		p := New(o, "main.default.retire", ingestfake.TestSchema, cfg, nil)
		require.NoError(t, p.Connect(ctx))
		require.True(t, p.resize(Decision{Action: Grow, Reason: "test"}))
		streams, err := o.WaitOpens(ctx, 2)
		require.NoError(t, err)
		p.mu.RLock()
		extra := p.members[1]
		p.mu.RUnlock()
		require.Eventually(t, func() bool {
			p.mu.RLock()
			defer p.mu.RUnlock()
			return extra.conn != nil
		}, 10*time.Second, time.Millisecond)

		streams[1].Poison(&ingest.Error{Class: ingest.Poison, Err: errors.New("gone")})
		require.True(t, p.resize(Decision{Action: Shrink, Reason: "test"}))
		select {
		case <-extra.exited:
		case <-ctx.Done():
			t.Fatal("the extra did not leave")
		}
		p.mu.RLock()
		left := len(p.draining)
		p.mu.RUnlock()
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		cerr := p.Close(cctx)
		ccancel()
		require.Zero(t, left, "iteration %d: a connection left to drain", iter)
		require.NoError(t, cerr, "iteration %d", iter)
	}
}
