package pool_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

// saturatedWindow is a one-second window of n streams, each carrying
// 20,000 rows/s (above a 15,000 rows/s quota) with rows queued 800 ms deep,
// saturated for a while and last changed long ago: a pool that should grow.
func saturatedWindow(n int) pool.Window {
	w := pool.Window{Span: time.Second, Size: n, Min: 2, Max: 8, QuotaRows: 15_000, QuotaMBps: 100,
		SaturatedFor: 2 * time.Second, SinceChange: time.Minute}
	for i := range n {
		w.Members = append(w.Members, pool.MemberWindow{Index: i, Up: true, Busy: 1, Rows: 20_000, Bytes: 400_000,
			LagStart: 700 * time.Millisecond, LagEnd: 800 * time.Millisecond})
	}
	return w
}

// idleWindow is a window of n streams carrying trickles, unsaturated for
// long: a pool that should shrink if it has extras.
func idleWindow(n int) pool.Window {
	w := pool.Window{Span: time.Second, Size: n, Min: 2, Max: 8, QuotaRows: 15_000, QuotaMBps: 100,
		SinceSaturated: 5 * time.Minute, SinceChange: 5 * time.Minute}
	for i := range n {
		w.Members = append(w.Members, pool.MemberWindow{Index: i, Up: true, Rows: 100, Bytes: 2000})
	}
	return w
}

func TestDecideGrowsOnlyWhenSaturatedWithoutErrors(t *testing.T) {
	pol := pool.DefaultPolicy(pool.DefaultConfig())
	d := pool.Decide(saturatedWindow(2), pol)
	assert.Equal(t, pool.Grow, d.Action, d.Reason)
	assert.True(t, d.Saturated)
	assert.Contains(t, d.Reason, "20000 rows/s")

	for _, tc := range []struct {
		name   string
		mutate func(*pool.Window)
		sat    bool // the window still counts as saturated
	}{
		{"an error (a rebuild, a failed open)", func(w *pool.Window) { w.Errors = 1 }, false},
		{"a concurrency reject holds growth", func(w *pool.Window) { w.GrowHeld = 30 * time.Second }, true},
		{"not saturated long enough", func(w *pool.Window) { w.SaturatedFor = 250 * time.Millisecond }, true},
		{"last change too recent", func(w *pool.Window) { w.SinceChange = time.Second }, true},
		{"at streams.max", func(w *pool.Window) { w.Max = 2 }, true},
		{"ordering keys", func(w *pool.Window) { w.Keyed = true }, true},
		{"a stream not up", func(w *pool.Window) { w.Members[1].Up = false }, false},
		{"a stream idle most of the window", func(w *pool.Window) { w.Members[1].Busy = 0.5 }, false},
		{"below the quota and the lag steady", func(w *pool.Window) {
			for i := range w.Members {
				w.Members[i].Rows = 5_000
			}
		}, false},
		{"stalled: nothing confirmed", func(w *pool.Window) { w.Members[0].Rows = 0 }, false},
		{"a stream still joining", func(w *pool.Window) {
			w.Members = append(w.Members, pool.MemberWindow{Index: 2, Young: true})
			w.Size = 3
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := saturatedWindow(2)
			tc.mutate(&w)
			d := pool.Decide(w, pol)
			assert.Equal(t, pool.Hold, d.Action, d.Reason)
			assert.Equal(t, tc.sat, d.Saturated, d.Reason)
			assert.NotEmpty(t, d.Reason)
		})
	}
}

func TestDecideGrowsBelowTheQuotaWhenTheLagKeepsRising(t *testing.T) {
	// A service that holds streams below the assumed quota: rows/s below
	// it, but the backlog deepens past LagRising window after window.
	pol := pool.DefaultPolicy(pool.DefaultConfig())
	w := saturatedWindow(3)
	for i := range w.Members {
		w.Members[i].Rows = 4_000
		w.Members[i].LagStart, w.Members[i].LagEnd = 2500*time.Millisecond, 3200*time.Millisecond
	}
	assert.Equal(t, pool.Grow, pool.Decide(w, pol).Action)
	// The same lag, steady: a slow service, not a saturated stream.
	for i := range w.Members {
		w.Members[i].LagStart = 3200 * time.Millisecond
	}
	assert.Equal(t, pool.Hold, pool.Decide(w, pol).Action)
}

func TestDecideGrowsOnWritersWaitingAtTheQuota(t *testing.T) {
	// Rows are rarely pending at a sample, but writers wait in Submit (the
	// stream reads slowly) most of the window while it carries its quota.
	pol := pool.DefaultPolicy(pool.DefaultConfig())
	w := saturatedWindow(2)
	for i := range w.Members {
		w.Members[i].Busy = 0.2
		w.Members[i].Waited = 3 * time.Second // three writers blocked throughout
	}
	assert.Equal(t, pool.Grow, pool.Decide(w, pol).Action)
	for i := range w.Members {
		w.Members[i].Waited = 100 * time.Millisecond
	}
	assert.Equal(t, pool.Hold, pool.Decide(w, pol).Action, "neither busy nor waiting")
}

func TestDecideGrowsOnBytesAtTheQuota(t *testing.T) {
	// Large rows: few rows/s, but 95 MB/s per stream against 100.
	pol := pool.DefaultPolicy(pool.DefaultConfig())
	w := saturatedWindow(2)
	for i := range w.Members {
		w.Members[i].Rows, w.Members[i].Bytes = 6_000, 95e6
	}
	assert.Equal(t, pool.Grow, pool.Decide(w, pol).Action)
}

func TestDecideShrinksAfterTrafficFellForLong(t *testing.T) {
	pol := pool.DefaultPolicy(pool.DefaultConfig())
	d := pool.Decide(idleWindow(4), pol)
	assert.Equal(t, pool.Shrink, d.Action, d.Reason)
	assert.Contains(t, d.Reason, "no stream saturated")

	for _, tc := range []struct {
		name   string
		mutate func(*pool.Window)
	}{
		{"at the base size", func(w *pool.Window) { w.Size, w.Members = 2, w.Members[:2] }},
		{"saturated recently", func(w *pool.Window) { w.SinceSaturated = 10 * time.Second }},
		{"changed recently", func(w *pool.Window) { w.SinceChange = time.Second }},
		{"an extra still leaving", func(w *pool.Window) { w.Leaving = 1 }},
		{"an error", func(w *pool.Window) { w.Errors = 2 }},
		{"the traffic needs the streams", func(w *pool.Window) {
			// 3 × 15,000 × 50% = 22,500 rows/s fit three; 30,000 do not.
			for i := range w.Members {
				w.Members[i].Rows = 7_500
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := idleWindow(4)
			tc.mutate(&w)
			d := pool.Decide(w, pol)
			assert.Equal(t, pool.Hold, d.Action, d.Reason)
		})
	}
}

func TestSizeByRowsAndBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  pool.Config
		want int
	}{
		{"rows need more than bytes", pool.Config{MinStreams: 1, PeakMBps: 5, PeakRowsPerSec: 250_000}, 3},
		{"bytes need more than rows", pool.Config{MinStreams: 1, PeakMBps: 150, PeakRowsPerSec: 10_000}, 2},
		{"rows at the default quota (100,000)", pool.Config{MinStreams: 1, PeakRowsPerSec: 450_000}, 5},
		{"rows at a workspace's former quota", pool.Config{MinStreams: 1, PerStreamRowsPerSec: 15_000, PeakRowsPerSec: 45_000}, 3},
		{"rows at a given quota", pool.Config{MinStreams: 1, PerStreamRowsPerSec: 200_000, PeakRowsPerSec: 250_000}, 2},
		{"rows capped at max", pool.Config{MinStreams: 1, MaxStreams: 5, PeakRowsPerSec: 1e6}, 5},
		{"rows floored at min", pool.Config{MinStreams: 3, PeakRowsPerSec: 100}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, pool.Size(tc.cfg))
		})
	}
	assert.Error(t, pool.Config{PeakRowsPerSec: -1}.Validate())
	assert.Error(t, pool.Config{PerStreamRowsPerSec: -1}.Validate())
}
