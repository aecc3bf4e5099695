package kafkain

import (
	"sync"
	"time"
)

// limitedLog logs an error of a kind at most once per interval, counting
// the ones it held back, so that an outage that fails every poll or commit
// writes a line every interval instead of one per attempt.
type limitedLog struct {
	out      Logger
	interval time.Duration

	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

func newLimitedLog(log Logger, interval time.Duration) *limitedLog {
	return &limitedLog{out: log, interval: interval, last: map[string]time.Time{}, held: map[string]int{}}
}

// log writes format at WARN unless a line of kind was written within the
// interval.
func (l *limitedLog) log(kind, format string, args ...any) {
	l.mu.Lock()
	now := time.Now()
	if t, ok := l.last[kind]; ok && now.Sub(t) < l.interval {
		l.held[kind]++
		l.mu.Unlock()
		return
	}
	l.last[kind] = now
	held := l.held[kind]
	l.held[kind] = 0
	l.mu.Unlock()
	if held > 0 {
		format += " (%d more like it in the last %s)"
		args = append(args, held, l.interval)
	}
	l.out.Warnf(format, args...)
}
