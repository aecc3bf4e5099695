package backoff

import "time"

// DefaultRemindFirst is the wait before the first reminder of a lasting
// fault: with the line that explains the fault, an hour of it logs 3 lines
// (at 0, 10 and 30 minutes), and every later hour one or none.
const DefaultRemindFirst = 10 * time.Minute

// Reminder spaces the reminders of a fault that lasts, so that its log
// stays a few lines however long it lasts: the first is due First after
// Start, each next one after twice the previous wait. Its zero value is not
// started: Due reports nothing until Start.
type Reminder struct {
	First time.Duration

	wait time.Duration
	next time.Time
}

// Start begins a fault's reminders at now (when its first line was logged).
func (r *Reminder) Start(now time.Time) {
	r.wait = r.First
	r.next = now.Add(r.wait)
}

// Due reports whether a reminder is due at now; when it is, it schedules
// the next one and returns the wait until it.
func (r *Reminder) Due(now time.Time) (due bool, nextIn time.Duration) {
	if r.wait == 0 || now.Before(r.next) {
		return false, 0
	}
	r.wait *= 2
	r.next = now.Add(r.wait)
	return true, r.wait
}
