package kafkain

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lines is a Logger that keeps what it is given, a line per call.
type lines struct {
	mu   sync.Mutex
	warn []string
	info []string
}

func (l *lines) Debugf(string, ...any) {}
func (l *lines) Infof(f string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.info = append(l.info, fmt.Sprintf(f, v...))
}
func (l *lines) Warnf(f string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.warn = append(l.warn, fmt.Sprintf(f, v...))
}
func (l *lines) Errorf(f string, v ...any) { l.Warnf(f, v...) }

// clock is a test's time, moved by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// TestLimitedLogAnHourOfFailuresIsAFewLines: a failure every second for an
// hour (a broker outage: every poll fails) writes the first line at once,
// then lines at growing intervals (30 s doubling up to 15 min), each
// counting the ones held back; the first success writes one line saying how
// long it failed, and a failure after it is logged at once again.
func TestLimitedLogAnHourOfFailuresIsAFewLines(t *testing.T) {
	out := &lines{}
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	l := newLimitedLog(out, 30*time.Second, 15*time.Minute)
	l.now = clk.now

	l.ok("fetch", "fetching") // nothing failed: no line
	require.Empty(t, out.info)

	var at []time.Duration // when each line was written
	start := clk.t
	for s := 0; s < 3600; s++ {
		before := len(out.warn)
		l.log("fetch", "fetch failed: %s", "broker down")
		if len(out.warn) > before {
			at = append(at, clk.t.Sub(start))
		}
		clk.t = clk.t.Add(time.Second)
	}
	assert.Equal(t, []time.Duration{0, 30 * time.Second, 90 * time.Second, 210 * time.Second, 450 * time.Second,
		930 * time.Second, 1830 * time.Second, 2730 * time.Second}, at, "lines at 0, then 30 s doubling up to 15 min")
	assert.Equal(t, "fetch failed: broker down", out.warn[0])
	assert.Equal(t, "fetch failed: broker down (29 more like it in the last 30s)", out.warn[1])
	assert.Contains(t, out.warn[7], "(899 more like it in the last 15m0s)")

	// Another kind fails on its own schedule.
	l.log("commit", "commit failed")
	assert.Len(t, out.warn, 9)

	clk.t = clk.t.Add(time.Second)
	l.ok("fetch", "fetching")
	l.ok("fetch", "fetching") // once
	require.Len(t, out.info, 1)
	assert.Equal(t, "redpanda: fetching works again after failing for 1h0m1s (3600 failures)", out.info[0])

	l.log("fetch", "fetch failed: %s", "again")
	assert.Equal(t, "fetch failed: again", out.warn[len(out.warn)-1], "a new run of failures is logged at once")
	assert.False(t, strings.Contains(strings.Join(out.info, ""), "commit"), "commit is still failing: no healing line for it")
}
