package backoff

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// An hour-long fault checked every 30 s is reminded at 10 and 30 minutes:
// with its first line, 3 lines; the next hour adds one (at 70 minutes).
func TestReminderHourIsThreeLines(t *testing.T) {
	r := Reminder{First: DefaultRemindFirst}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	due, _ := r.Due(start)
	assert.False(t, due, "not started: nothing due")
	r.Start(start)
	var at []time.Duration
	for d := time.Duration(0); d <= 2*time.Hour; d += 30 * time.Second {
		if ok, _ := r.Due(start.Add(d)); ok {
			at = append(at, d)
		}
	}
	assert.Equal(t, []time.Duration{10 * time.Minute, 30 * time.Minute, 70 * time.Minute}, at)
}
