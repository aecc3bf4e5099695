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

// sizingConfig configures the pool of an internal test that resizes it itself
// (p.resize): one base stream, room for maxStreams, opens retried at once.
func sizingConfig(maxStreams int) Config {
	cfg := DefaultConfig()
	cfg.MinStreams, cfg.MaxStreams = 1, maxStreams
	cfg.OpenBackoffInitial, cfg.OpenBackoffMax = time.Millisecond, 2*time.Millisecond
	return cfg
}

// An extra whose stream dies just as the sizer retires it leaves through
// the failure path, not through retire: its connection must not stay among
// those Close drains (Close would report the dead lane's failure and count
// its already failed rows as nacked at close).
func TestExtraDyingWhileRetiredLeavesNothingToDrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for iter := range 20 {
		o := ingestfake.NewOpener(ingestfake.Config{})
		p := New(o, "main.default.retire", ingestfake.TestSchema, sizingConfig(2), nil)
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
		// False when the extra left already: then nothing raced.
		_ = p.resize(Decision{Action: Shrink, Reason: "test"})
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

// Base members that gave up stop the pool even while an extra is still up:
// nothing else revives them (Reopen comes only from a stopped pool), and
// the keys mapping onto them would fail for as long as the extra lived.
func TestBaseGivenUpStopsThePoolWhileAnExtraIsUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := ingestfake.NewOpener(ingestfake.Config{})
	cfg := sizingConfig(2)
	cfg.RebuildBudget = 1 // the second failure in a row gives the member up
	p := New(o, "main.default.giveup", ingestfake.TestSchema, cfg, nil)
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = p.Close(cctx)
	}()
	require.NoError(t, p.Connect(ctx))
	require.True(t, p.resize(Decision{Action: Grow, Reason: "test"}))
	streams, err := o.WaitOpens(ctx, 2)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.Health().Members[1].State == StateUp }, 10*time.Second, time.Millisecond)

	gone := &ingest.Error{Class: ingest.Poison, Err: errors.New("gone")}
	o.FailNextOpens(gone, gone, gone) // its rebuild fails too
	streams[0].Poison(gone)
	require.Eventually(t, func() bool { return p.Health().Members[0].State == StateStopped }, 10*time.Second, time.Millisecond)
	require.Equal(t, StateUp, p.Health().Members[1].State, "the extra still serves")
	require.Error(t, p.Stopped(), "every base member gave up")
}

// An extra stream refused for good, at its open or later on its stream,
// only holds growth: the pool never stops, and the base stream keeps
// writing (issue 26). Before, a permanent refusal at an extra's open set
// the pool's fatal error and stopped every write.
func TestExtraRefusedForGoodOnlyHoldsGrowth(t *testing.T) {
	for _, tc := range []struct {
		name string
		// refuse refuses the extra for good: its open, or its stream.
		refuse func(t *testing.T, o *ingestfake.Opener, p *Pool)
	}{
		{"at its open", func(t *testing.T, o *ingestfake.Opener, p *Pool) {
			o.FailNextOpens(ingestfake.ErrFatalConfig("PERMISSION_DENIED: no MODIFY on the table for this stream"))
			require.True(t, p.resize(Decision{Action: Grow, Reason: "test"}))
		}},
		{"on its stream later", func(t *testing.T, o *ingestfake.Opener, p *Pool) {
			require.True(t, p.resize(Decision{Action: Grow, Reason: "test"}))
			streams, err := o.WaitOpens(context.Background(), 2)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return len(p.Health().Members) == 2 && p.Health().Members[1].State == StateUp }, 10*time.Second, time.Millisecond)
			streams[1].Poison(ingestfake.ErrFatalConfig("PERMISSION_DENIED: revoked"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			o := ingestfake.NewOpener(ingestfake.Config{})
			p := New(o, "main.default.extra", ingestfake.TestSchema, sizingConfig(2), nil)
			defer func() {
				cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer ccancel()
				_ = p.Close(cctx)
			}()
			require.NoError(t, p.Connect(ctx))
			tc.refuse(t, o, p)
			require.Eventually(t, func() bool { return p.extraFailures.Load() == 1 && p.Size() == 1 }, 10*time.Second, time.Millisecond,
				"the refused extra leaves")
			require.NoError(t, p.Stopped(), "the pool does not stop for an extra")
			require.Nil(t, p.Health().Fatal)
			require.True(t, p.growHeldUntil.Load() > time.Now().UnixNano(), "growth is held")
			for i := range 5 {
				r := ingestfake.NewRecord(ingestfake.TestSchema, 3)
				tk, err := p.Write(ctx, "", r)
				r.Release()
				require.NoError(t, err, "write %d", i)
				require.NoError(t, tk.Wait(ctx), "write %d durable on the base stream", i)
			}
			require.Equal(t, StateUp, p.Health().Members[0].State)
		})
	}
}
