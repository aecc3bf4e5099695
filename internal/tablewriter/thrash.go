package tablewriter

import (
	"fmt"
	"sync"
	"time"
)

// Routing thrash: a Router evicting writers faster than a few a second is
// closing and opening a table's writer (a describe, a stream open and a
// stream close each) for a handful of rows, because the tables written in a
// short while outnumber max_open_tables. The thrash watch says so once, with
// the figures an operator needs to size the bound.
const (
	// ThrashRate is the eviction rate, per second over ThrashWindow, past
	// which the router warns.
	ThrashRate = 3.0
	// ThrashWindow is the window the eviction rate is measured over.
	ThrashWindow = 10 * time.Second
	// ThrashWarnEvery is the least time between two thrash warnings while
	// the thrash persists.
	ThrashWarnEvery = 10 * time.Minute
	// tablesWindow is the window the distinct tables are counted over.
	tablesWindow = time.Minute
)

// thrashWatch counts the router's evictions per second and the distinct
// tables it was asked to write in the last minute, and composes the one
// warning. Its methods are safe for concurrent use and cheap: a map write
// per table written, an array increment per eviction.
type thrashWatch struct {
	max int
	now func() time.Time

	mu sync.Mutex
	// evictions[s % len] counts the evictions of unix second s, for the
	// seconds in sec[s % len].
	evictions [int(ThrashWindow / time.Second)]int64
	sec       [int(ThrashWindow / time.Second)]int64
	// seen is when each table was last written; pruned of entries older
	// than tablesWindow at most once per prunedEvery.
	seen     map[string]time.Time
	pruned   time.Time
	warned   time.Time // last warning; zero: none
	warnings int64
}

const prunedEvery = 5 * time.Second

func newThrashWatch(max int, now func() time.Time) *thrashWatch {
	if now == nil {
		now = time.Now
	}
	return &thrashWatch{max: max, now: now, seen: map[string]time.Time{}}
}

// wrote records that tables were written now.
func (t *thrashWatch) wrote(tables ...string) {
	now := t.now()
	t.mu.Lock()
	for _, table := range tables {
		t.seen[table] = now
	}
	if now.Sub(t.pruned) >= prunedEvery {
		t.pruned = now
		for k, at := range t.seen {
			if now.Sub(at) > tablesWindow {
				delete(t.seen, k)
			}
		}
	}
	t.mu.Unlock()
}

// evicted records n evictions now and returns the warning to log, "" when
// none is due: the rate over ThrashWindow is above ThrashRate and no
// warning was given in the last ThrashWarnEvery.
func (t *thrashWatch) evicted(n int) string {
	if n <= 0 {
		return ""
	}
	now := t.now()
	s := now.Unix()
	t.mu.Lock()
	defer t.mu.Unlock()
	i := int(s % int64(len(t.sec)))
	if t.sec[i] != s {
		t.sec[i], t.evictions[i] = s, 0
	}
	t.evictions[i] += int64(n)
	rate := t.rateLocked(s)
	if rate <= ThrashRate || (!t.warned.IsZero() && now.Sub(t.warned) < ThrashWarnEvery) {
		return ""
	}
	t.warned = now
	t.warnings++
	tables := 0
	for _, at := range t.seen {
		if now.Sub(at) <= tablesWindow {
			tables++
		}
	}
	return thrashMessage(t.max, tables, rate)
}

// rateLocked is the evictions per second over the ThrashWindow ending with
// second s (s included).
func (t *thrashWatch) rateLocked(s int64) float64 {
	var n int64
	for i, sec := range t.sec {
		if sec > s-int64(len(t.sec)) && sec <= s {
			n += t.evictions[i]
		}
	}
	return float64(n) / ThrashWindow.Seconds()
}

// thrashMessage is the warning: the figures, why it is slow, what to do.
func thrashMessage(max, tables int, rate float64) string {
	advice := fmt.Sprintf("raise max_open_tables to at least %d (the distinct tables written in the last minute; each open table holds its streams, at least one, and a converter)", tables)
	if tables <= max {
		// The tables of a minute fit, yet writers are evicted: the
		// tables come in bursts wider than the bound.
		advice = fmt.Sprintf("raise max_open_tables above %d, to the number of tables written within a few seconds", max)
	}
	return fmt.Sprintf("routing: table writers are evicted at %.1f/s (over the last %s): %d distinct tables were written in the last minute, but max_open_tables is %d, so writers keep being closed and reopened (a describe, a stream open and a stream close each) for a few rows, which is slow. What to do: %s, or send each output fewer tables (route by table upstream: one pipeline or output per group of tables). The evictions are counted in zerobus_table_evictions_total; this is logged at most once every %s.",
		rate, ThrashWindow, tables, max, advice, ThrashWarnEvery)
}
