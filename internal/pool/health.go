package pool

import (
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
)

// State is what a member can do now, for health reports.
type State string

// The states of a member.
const (
	// StateUp is a member with a stream ready for writes.
	StateUp State = "up"
	// StateRebuilding is a member opening its first stream, backing off
	// after a failure or reopening on a new schema: it heals by itself.
	StateRebuilding State = "rebuilding"
	// StateStopped is a member that gave up (rebuild budget exhausted, a
	// fatal configuration error) or a closed pool: nothing heals it but a
	// Reopen (the engine's reconnect).
	StateStopped State = "stopped"
)

// MemberHealth is one member in a Health snapshot.
type MemberHealth struct {
	Index int
	State State
	// Since is when the member entered State (give or take a rebuild's
	// back-off, which keeps it rebuilding).
	Since time.Time
	// Generation counts the streams the member opened; Rebuilds the times
	// it replaced a failed one.
	Generation uint64
	Rebuilds   int
	// Lane is the current stream's ack lane; zero while the member has no
	// stream (its pending rows were failed when the stream went).
	Lane acklane.Health
	// Err is why the member is stopped, or the last failure while it
	// rebuilds; nil when up.
	Err error
	// Reconnecting is set for a member that is up but whose stream lost
	// its connection and is reconnecting inside the client (a stream that
	// can say so: see Connector).
	Reconnecting bool
}

// Connector is the optional part of a stream that says whether its current
// connection is alive (ingest.ArrowStream).
type Connector interface {
	Connected() bool
}

// Health is a snapshot of a pool for health reports.
type Health struct {
	Members []MemberHealth
	// PickWaiters counts Writes waiting for a healthy member.
	PickWaiters int64
	// Fatal is the error that stopped every member, if any.
	Fatal error
}

// AnyConnected reports whether some member has a stream ready for writes
// whose connection is up: a member Health would report StateUp and not
// Reconnecting. It takes the read lock and allocates nothing, for checks on
// the write path.
func (p *Pool) AnyConnected() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed || p.fatal != nil {
		return false
	}
	for _, m := range p.members {
		if m.down != nil || !m.usable(p.schema) {
			continue
		}
		if c, ok := m.conn.stream.(Connector); !ok || c.Connected() {
			return true
		}
	}
	return false
}

// Health returns a snapshot of the pool. It holds the pool's read lock only
// to copy each member's fields (Write's pick holds the same read lock, so
// neither waits for the other); the lanes are read through atomics.
func (p *Pool) Health() Health {
	p.mu.RLock()
	defer p.mu.RUnlock()
	// members is the sizer's to change: read it under the lock only.
	h := Health{PickWaiters: p.pickWaiters.Load(), Members: make([]MemberHealth, 0, len(p.members))}
	h.Fatal = p.fatal
	for _, m := range p.members {
		mh := MemberHealth{Index: m.index, Since: m.since, Generation: m.gen, Rebuilds: m.rebuilds, Err: m.lastErr}
		switch {
		case p.closed:
			mh.State = StateStopped
		case p.fatal != nil:
			mh.State, mh.Err = StateStopped, p.fatal
		case m.down != nil:
			mh.State, mh.Err = StateStopped, m.down
		case m.usable(p.schema):
			mh.State, mh.Err = StateUp, nil
			if c, ok := m.conn.stream.(Connector); ok && !c.Connected() {
				mh.Reconnecting = true
			}
		default:
			mh.State = StateRebuilding
		}
		if m.conn != nil {
			mh.Lane = m.conn.lane.Health()
		}
		h.Members = append(h.Members, mh)
	}
	return h
}
