package kafkain

import (
	"sync"
	"sync/atomic"
	"time"
)

// limitedLog keeps a failure that repeats (every poll of a broker outage,
// every commit of a coordinator that is away) down to a few lines, however
// long it lasts: the first failure of a kind is logged at once, and while
// the kind keeps failing the next line waits twice as long as the last one
// did, from first up to most. Each line counts the failures held back. The
// first success after a logged failure writes one line saying the kind works
// again, how long it failed and how often, and starts the kind afresh.
//
// With first = 30 s and most = 15 min, an hour of one failure writes 9 lines
// and the healing line; every further hour 4.
type limitedLog struct {
	out   Logger
	first time.Duration
	most  time.Duration
	now   func() time.Time // time.Now; a test's clock

	mu     sync.Mutex
	kinds  map[string]*failing
	failed atomic.Int32 // len(kinds), so that ok costs no lock while all is well
}

// failing is one kind's run of failures.
type failing struct {
	since time.Time     // the first failure of the run
	last  time.Time     // the last line written
	wait  time.Duration // before the next line
	held  int           // failures since the last line
	count int           // failures in the run
}

func newLimitedLog(log Logger, first, most time.Duration) *limitedLog {
	return &limitedLog{out: log, first: first, most: most, now: time.Now, kinds: map[string]*failing{}}
}

// log counts a failure of kind and writes format at WARN when the kind's
// wait has passed.
func (l *limitedLog) log(kind, format string, args ...any) {
	l.mu.Lock()
	now := l.now()
	f := l.kinds[kind]
	if f == nil {
		f = &failing{since: now, last: now, wait: l.first, count: 1}
		l.kinds[kind] = f
		l.failed.Add(1)
		l.mu.Unlock()
		l.out.Warnf(format, args...)
		return
	}
	f.count++
	if now.Sub(f.last) < f.wait {
		f.held++
		l.mu.Unlock()
		return
	}
	held, waited := f.held, now.Sub(f.last)
	f.last, f.held = now, 0
	f.wait = min(2*f.wait, l.most)
	l.mu.Unlock()
	if held > 0 {
		format += " (%d more like it in the last %s)"
		args = append(args, held, waited.Round(time.Second))
	}
	l.out.Warnf(format, args...)
}

// ok ends kind's run of failures, if it has one, with a line at INFO.
func (l *limitedLog) ok(kind, what string) {
	if l.failed.Load() == 0 {
		return
	}
	l.mu.Lock()
	f := l.kinds[kind]
	if f == nil {
		l.mu.Unlock()
		return
	}
	delete(l.kinds, kind)
	l.failed.Add(-1)
	took := l.now().Sub(f.since).Round(time.Second)
	l.mu.Unlock()
	l.out.Infof("redpanda: %s works again after failing for %s (%d failures)", what, took, f.count)
}
