package ingest

import "time"

// ackClockSize is how many recent watermark advances a stream remembers.
// The ack lane looks a batch up right after its wait returns, so only the
// last few acks are ever asked for; 64 covers bursts far larger than the
// lane sees at steady state.
const ackClockSize = 64

// ackStamp is one advance of the durable watermark: to pos, at at.
type ackStamp struct {
	pos uint64
	at  time.Time
}

// ackClock remembers when the durable watermark reached each of its last
// ackClockSize positions, so that the time from a batch's durable ack to
// its confirmation (the ack lane's own share of the delivery latency) can
// be measured. Guarded by the stream's mu.
type ackClock struct {
	ring [ackClockSize]ackStamp
	n    int // advances recorded in all; the ring holds the last ones
}

// record notes that the watermark reached pos at at.
func (c *ackClock) record(pos uint64, at time.Time) {
	c.ring[c.n%ackClockSize] = ackStamp{pos: pos, at: at}
	c.n++
}

// at returns when the watermark first reached row, and false when row is
// 0, not durable yet, or durable by an ack older than the ring remembers.
func (c *ackClock) at(row uint64) (time.Time, bool) {
	if row == 0 {
		return time.Time{}, false
	}
	lo := max(c.n-ackClockSize, 0)
	first := -1
	for i := c.n - 1; i >= lo && c.ring[i%ackClockSize].pos >= row; i-- {
		first = i
	}
	if first < 0 || (first == lo && lo > 0) { // the covering ack may be older
		return time.Time{}, false
	}
	return c.ring[first%ackClockSize].at, true
}

// AckedAt returns when this client received the ack that made row durable
// (the logical watermark first reached row), and false when it does not
// know: row is not durable yet, or was made durable many acks ago. The ack
// lane uses it to measure its own latency, separately from the service's.
func (s *ArrowStream) AckedAt(row uint64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acks.at(row)
}
