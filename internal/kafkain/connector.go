package kafkain

import (
	"context"
	"sync"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/backoff"
)

// The connector's back-off and reminders. Waits double from a second to
// ConnectBackoffMax, each shortened by at most a fifth: from the sixth
// minute of a fault on, the waits are 24–30 s, so at most 3 attempts fall
// in any minute. While one cause persists, a reminder is logged after
// RemindFirst, then after twice the previous wait: with the engine's line
// for the first failure, an hour-long fault logs 3 lines (at 0, 10 and 30
// minutes), then the line saying it connected.
const (
	ConnectBackoffInitial = time.Second
	ConnectBackoffMax     = 30 * time.Second
	RemindFirst           = backoff.DefaultRemindFirst
)

// Clock is the time the connector's back-off and reminders follow: the
// real one, or a test's, on which an hour passes in a moment.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// ConnectState is where the connector is: connected, or failing since when,
// after how many attempts and why.
type ConnectState struct {
	Connected bool
	// Failing is the last failure while not connected; nil before the
	// first attempt ends and once connected.
	Failing *ConnectError
	// Since is when the current run of failures started.
	Since time.Time
	// Attempts counts the failed attempts of the run.
	Attempts int
}

// Connector creates the Consumer, retrying a broker it cannot use with a
// back-off shared by every call, and keeps the logs of a lasting fault to a
// few lines. Benthos logs each error its Connect returns and calls it again
// after the wait the error asks for; so Connect returns the first failure of
// a cause (the line the user sees at once) and, while that cause persists,
// waits and tries again itself, logging only reminders that grow apart,
// until it connects, the cause changes or its context ends.
type Connector struct {
	cfg   Config
	log   Logger
	lag   LagFunc
	clock Clock
	gate  *backoff.Gate

	mu    sync.Mutex
	state ConnectState
	// returned is the cause of the last error Connect returned.
	returned Cause
	// remind spaces the reminders of the cause returned.
	remind backoff.Reminder

	// attempted is called at the start of each attempt (tests).
	attempted func()
}

// NewConnector returns a connector for cfg; clock nil is the real clock.
func NewConnector(cfg Config, log Logger, lag LagFunc, clock Clock) *Connector {
	if clock == nil {
		clock = realClock{}
	}
	g := backoff.NewGate(ConnectBackoffInitial, ConnectBackoffMax, backoff.DefaultJitter)
	g.SetClock(clock.Now)
	return &Connector{cfg: cfg, log: log, lag: lag, clock: clock, gate: g, remind: backoff.Reminder{First: RemindFirst}}
}

// State returns where the connector is; it is cheap.
func (c *Connector) State() ConnectState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Connect returns the consumer once the brokers can be used. It returns a
// *ConnectError the first time a cause fails, with how long to wait before
// calling again; while the same cause keeps failing it waits the back-off
// and tries again itself. When ctx ends it returns ctx's error.
func (c *Connector) Connect(ctx context.Context) (*Consumer, time.Duration, error) {
	for {
		if failing, at := c.gate.Failing(); failing {
			if left := at.Sub(c.clock.Now()); left > 0 {
				select {
				case <-ctx.Done():
					return nil, 0, ctx.Err()
				case <-c.clock.After(left):
				}
			}
		}
		if ok, _, _ := c.gate.Pass(); !ok {
			continue
		}
		if c.attempted != nil {
			c.attempted()
		}
		cons, err := New(ctx, c.cfg, c.log, c.lag)
		if err == nil {
			c.connected()
			return cons, 0, nil
		}
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		ce := classify(err, attempt{failedKey: -1, sasl: c.cfg.saslIdentity(), tls: c.cfg.TLS != nil}, c.cfg.SeedBrokers)
		c.gate.Failed(0)
		_, at := c.gate.Failing()
		if c.failed(ce) {
			return nil, max(at.Sub(c.clock.Now()), 0), ce
		}
	}
}

// failed records a failed attempt and reports whether its cause is new
// (Connect returns it); otherwise it logs a reminder when one is due.
func (c *Connector) failed(ce *ConnectError) (isNew bool) {
	now := c.clock.Now()
	c.mu.Lock()
	if c.state.Failing == nil {
		c.state.Since = now
	}
	c.state.Connected = false
	c.state.Failing = ce
	c.state.Attempts++
	if ce.Cause != c.returned {
		c.returned = ce.Cause
		c.remind.Start(now)
		c.mu.Unlock()
		return true
	}
	due, nextIn := c.remind.Due(now)
	if !due {
		c.mu.Unlock()
		return false
	}
	since, attempts := now.Sub(c.state.Since), c.state.Attempts
	c.mu.Unlock()
	c.log.Warnf("redpanda: still cannot connect after %s (%d attempts, now at most every %s; next reminder in %s): %v",
		since.Round(time.Second), attempts, ConnectBackoffMax, nextIn, ce)
	return false
}

// connected records a success and, after failures, logs the one line
// saying so.
func (c *Connector) connected() {
	c.gate.Succeeded()
	now := c.clock.Now()
	c.mu.Lock()
	prev := c.state
	c.state = ConnectState{Connected: true, Since: now}
	c.returned = ""
	c.mu.Unlock()
	if prev.Failing != nil {
		c.log.Infof("redpanda: connected to %v after failing for %s (%d attempts; last cause: %s)",
			c.cfg.SeedBrokers, now.Sub(prev.Since).Round(time.Second), prev.Attempts, prev.Failing.Cause)
	}
}
