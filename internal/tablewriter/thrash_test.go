package tablewriter

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// Evictions at up to ThrashRate a second say nothing; past it, one warning
// names max_open_tables, the distinct tables of the last minute (older ones
// not counted) and the rate; it is not repeated for ThrashWarnEvery while
// the thrash goes on, then comes once more.
func TestThrashWatchWarnsOnceWithTheFigures(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	w := newThrashWatch(8, clock.now)

	w.wrote("c.s.old")
	clock.advance(2 * time.Minute) // old is out of the minute
	for i := range 40 {
		w.wrote(fmt.Sprintf("c.s.t%d", i))
	}
	// 3 a second for 10 s: at the threshold, not past it.
	for range 10 {
		assert.Empty(t, w.evicted(3))
		clock.advance(time.Second)
	}
	// 5 a second: past it within a second or two.
	var warnings []string
	for range 20 {
		if msg := w.evicted(5); msg != "" {
			warnings = append(warnings, msg)
		}
		clock.advance(time.Second)
	}
	require.Len(t, warnings, 1, "one warning, not one per eviction")
	msg := warnings[0]
	assert.Contains(t, msg, "max_open_tables is 8")
	assert.Contains(t, msg, "40 distinct tables were written in the last minute", "old is not counted")
	assert.Regexp(t, `evicted at [3-5]\.[0-9]/s`, msg)
	assert.Contains(t, msg, "raise max_open_tables to at least 40")
	assert.Contains(t, msg, "zerobus_table_evictions_total")

	// Still thrashing 9 minutes later: nothing; past ThrashWarnEvery: once.
	for range 9 * 60 {
		w.wrote("c.s.t1")
		assert.Empty(t, w.evicted(5))
		clock.advance(time.Second)
	}
	var again int
	for range 90 {
		if w.evicted(5) != "" {
			again++
		}
		clock.advance(time.Second)
	}
	assert.Equal(t, 1, again)
	assert.EqualValues(t, 2, w.warnings)
}

// The rate is over the last ThrashWindow only: a burst long past does not
// add to a slow trickle now.
func TestThrashWatchRateForgetsOldSeconds(t *testing.T) {
	clock := &fakeClock{t: time.Unix(2_000_000, 0)}
	w := newThrashWatch(2, clock.now)
	w.wrote("c.s.a", "c.s.b", "c.s.c")
	assert.Empty(t, w.evicted(20)) // 2/s over the window: not past 3/s
	clock.advance(ThrashWindow)
	for range 10 {
		assert.Empty(t, w.evicted(2), "the burst of 20 has left the window")
		clock.advance(time.Second)
	}
	assert.NotEmpty(t, w.evicted(40))
}

// countingCounter is a Counter that adds up what it is given.
type countingCounter struct{ n atomic.Int64 }

func (c *countingCounter) Incr(n int64, _ ...string) { c.n.Add(n) }

// A router cycling through more tables than max_open_tables counts every
// eviction in zerobus_table_evictions_total and logs one warning.
func TestRouterCountsEvictionsAndWarnsOnce(t *testing.T) {
	cat := catalogfake.New()
	var tables []string
	for i := range 30 {
		tables = append(tables, fmt.Sprintf("c.s.t%d", i))
		cat.Put(tables[i], "id BIGINT NOT NULL", nil)
	}
	opener := ingestfake.NewOpener(ingestfake.Config{})
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	counter := &countingCounter{}
	r := NewRouter(func(table string) *Writer {
		return New(Config{Table: table, Pool: testPoolConfig()}, opener, cat, nil, nil)
	}, RouterConfig{MaxOpen: 2, CloseTimeout: time.Second, Log: log, Evictions: counter})
	t.Cleanup(func() { _ = r.Close(context.Background()) })

	// Two passes over the 30 tables, one batch per table: 58 evictions,
	// within seconds (well past 3 a second).
	for range 2 {
		for _, table := range tables {
			require.Empty(t, r.WriteRouted(context.Background(), rows(`{"id":1}`), to(table), nil))
		}
	}
	_, evicted, _ := r.Stats()
	assert.Equal(t, int64(58), evicted)
	assert.Equal(t, evicted, counter.n.Load())
	text := logs.String()
	assert.Equal(t, 1, strings.Count(text, "table writers are evicted at"), text)
	assert.Contains(t, text, "max_open_tables is 2")
	assert.Regexp(t, `(2[0-9]|30) distinct tables`, text)
}
