// Health: a cheap snapshot of a writer's streams (up, rebuilding, stopped;
// rows not yet durable; how old the acks are; who waits), for the output's
// health endpoint and the health gauges.

package tablewriter

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

// DefaultHealthInterval is how often a HealthObserver is given the writer's
// Health: the resolution of the ack-age and stream-state gauges.
const DefaultHealthInterval = time.Second

// StreamState is the state of a stream, or of a table (its worst stream's).
type StreamState = pool.State

// The states of a stream and of a table in a health report.
const (
	StateUp         = pool.StateUp
	StateRebuilding = pool.StateRebuilding
	StateStopped    = pool.StateStopped
)

// maxErrorText bounds the error text a health report carries. The errors
// are those the writer logs (they name no credentials); the bound keeps a
// report small whatever the service said.
const maxErrorText = 512

// StreamHealth is one stream of a table.
type StreamHealth struct {
	Index int
	// State is up, rebuilding (opening, or backing off after a failure:
	// heals by itself) or stopped (gave up: heals on reconnect).
	State StreamState
	// Since is when the stream entered State.
	Since time.Time
	// Generation counts the streams opened in this slot; Rebuilds the
	// failed ones it replaced.
	Generation uint64
	Rebuilds   int
	// PendingRows are the rows submitted and not yet durable;
	// PendingBatches the writes (claims) they belong to.
	PendingRows    uint64
	PendingBatches int64
	// LastAck is when rows were last confirmed durable (zero: never, on
	// this stream); OldestPending when the oldest rows still waiting were
	// submitted (zero: nothing waits).
	LastAck, OldestPending time.Time
	// LaneFullWriters counts writes waiting for room in the stream's full
	// ack lane (backpressure).
	LaneFullWriters int64
	// LastError is why the stream stopped, or its last failure while it
	// rebuilds; "" when up.
	LastError string
}

// TableHealth is a snapshot of one table's writer.
type TableHealth struct {
	Table string
	// At is when the snapshot was taken: ages are measured from it.
	At time.Time
	// State is the worst state of the streams, or stopped while the writer
	// is not open because an open failed or the streams stopped (Reason
	// says why), or rebuilding before the first open.
	State  StreamState
	Reason string
	// Phase is the writer's lifecycle phase (lifecycle.go), by name.
	Phase string
	// Streams are the pool's streams; none before the table exists.
	Streams []StreamHealth
	// BudgetLimitBytes and BudgetInUseBytes are the in-flight byte budget
	// and what is reserved of it; BudgetWaiters the writes waiting for room.
	BudgetLimitBytes, BudgetInUseBytes int64
	BudgetWaiters                      int
	// StreamWaiters counts writes waiting for a healthy stream.
	StreamWaiters int64
	// Unreachable is since when no stream of the table has been connected
	// (each one reconnecting, rebuilding or stopped); zero while one is. Past
	// OutageGrace the table is down and new batches are held.
	Unreachable time.Time
}

// Age returns how long before At since was, never below zero; zero for a
// zero since (never acked, nothing waits). The health endpoint and the
// gauges measure every age of a snapshot with it.
func (t TableHealth) Age(since time.Time) time.Duration {
	if since.IsZero() {
		return 0
	}
	return max(t.At.Sub(since), 0)
}

// OldestPendingAge returns the age, at At, of the oldest rows waiting for
// their durable ack on any stream; zero when nothing waits.
func (t TableHealth) OldestPendingAge() time.Duration {
	var age time.Duration
	for _, s := range t.Streams {
		age = max(age, t.Age(s.OldestPending))
	}
	return age
}

// Health returns a snapshot of the writer. It reads atomics, and takes only
// locks held briefly on the write path (the pool's read lock, the budget's
// mutex): never the locks held across catalog calls.
func (w *Writer) Health() TableHealth {
	th := TableHealth{Table: w.cfg.Table, At: time.Now(), BudgetLimitBytes: w.budget.limit, Phase: w.life.Phase().String()}
	th.BudgetInUseBytes, th.BudgetWaiters = w.budget.snapshot()
	var p *pool.Pool
	st := w.st.Load()
	switch {
	case w.life.isClosed():
		th.State, th.Reason = StateStopped, "closed"
		return th
	case st != nil && st.pool != nil:
		p = st.pool
	case st != nil:
		th.State, th.Reason = StateUp, "the table does not exist yet: it is created from the first batch"
		if why := w.schema.blocked.Load(); why != nil {
			// Nothing of the table's is written until the batches change.
			th.State = StateRebuilding
			th.Reason = "the table does not exist yet, and the last batch could not create it: " + errorText(errors.New(*why))
		}
		return th
	default:
		var cause *error
		if c := w.life.cause(); c != nil {
			cause = &c
		}
		switch sp := w.spare.Load(); {
		case sp != nil && sp.pool.Stopped() == nil:
			// The open failed, and its streams keep retrying.
			p, th.State = sp.pool, StateRebuilding
		case cause == nil:
			th.State, th.Reason = StateRebuilding, "not opened yet"
			return th
		default:
			p, th.State = w.lastStopped.Load(), StateStopped
		}
		if cause != nil {
			th.Reason = errorText(*cause)
		}
		// Never connected, and the last open failed: unreachable since
		// the first open began (down once OutageGrace has passed).
		th.Unreachable = w.life.neverOpened()
	}
	if p == nil {
		return th
	}
	ph := p.Health()
	if !th.Unreachable.IsZero() && th.Reason != "" {
		// Said here, before the streams' causes: the open's own failure.
		th.Reason = "no stream was ever connected: " + th.Reason
	}
	worst := th.State
	if worst == "" {
		worst = StateUp
	}
	for _, m := range ph.Members {
		if m.Reconnecting {
			// Up for the pool, but its connection is gone: the client
			// reconnects inside the stream.
			_, since, cause := w.memberDown(m)
			m.State, m.Since, m.Err = StateRebuilding, since, cause
		}
		sh := StreamHealth{
			Index: m.Index, State: m.State, Since: m.Since,
			Generation: m.Generation, Rebuilds: m.Rebuilds,
			PendingRows: m.Lane.PendingRows, PendingBatches: m.Lane.PendingItems,
			LastAck: m.Lane.LastAck, OldestPending: m.Lane.OldestPending,
			LaneFullWriters: m.Lane.BlockedWriters,
		}
		if m.Err != nil {
			sh.LastError = errorText(m.Err)
		}
		if stateRank(m.State) > stateRank(worst) {
			worst = m.State
		}
		th.Streams = append(th.Streams, sh)
	}
	th.StreamWaiters = ph.PickWaiters
	th.State = worst
	since, cause := w.unreachable(ph)
	if since.IsZero() && len(ph.Members) > 0 {
		th.Unreachable = time.Time{} // a stream is connected
	}
	if !since.IsZero() && th.State != StateStopped {
		if th.Unreachable.IsZero() || since.Before(th.Unreachable) {
			th.Unreachable = since
		}
		if th.Reason == "" && cause != nil {
			th.Reason = "no stream is connected: " + errorText(cause)
		}
	}
	if th.Reason == "" && ph.Fatal != nil {
		th.Reason = errorText(ph.Fatal)
	}
	return th
}

// Health returns a snapshot of every table writer the router holds open,
// by table name.
func (r *Router) Health() []TableHealth {
	ws := r.writers()
	out := make([]TableHealth, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.Health())
	}
	slices.SortFunc(out, func(a, b TableHealth) int { return strings.Compare(a.Table, b.Table) })
	return out
}

// stateRank orders states from best to worst; "" (unset) ranks best.
func stateRank(s pool.State) int {
	switch s {
	case StateRebuilding:
		return 1
	case StateStopped:
		return 2
	}
	return 0
}

// StateValue is a state as a gauge value: 0 up, 1 rebuilding, 2 stopped.
func StateValue(s pool.State) int64 { return int64(stateRank(s)) }

func errorText(err error) string {
	s := CauseText(err)
	if len(s) > maxErrorText {
		s = s[:maxErrorText] + "…"
	}
	return s
}

// HealthObserver is the optional part of an Observer that is given the
// writer's Health every Config.HealthInterval while the writer lives: what
// keeps gauges such as the age of the oldest unacknowledged rows current
// while no ack arrives to update them.
type HealthObserver interface {
	ObserveHealth(TableHealth)
}

// CloseObserver is the optional part of a HealthObserver told once the
// writer closed (an evicted table, the output closing), after its last
// health report: the table's gauges go back to rest, so that the last state
// of a table no longer written (stopped, say) does not page for ever.
type CloseObserver interface {
	ObserveClosed()
}

// healthLoop is the goroutine feeding a HealthObserver. Open starts it and
// Close stops it, both under the writer's openMu, and Open refuses once the
// writer is closed: so it starts at most once and never after its stop.
type healthLoop struct {
	quit chan struct{} // nil until started and after stop; closed by stop
	done chan struct{}
}

// startHealth starts the health loop, if the observer wants it and it does
// not run yet. Call it with openMu held.
func (w *Writer) startHealth() {
	ho, ok := w.obs.(HealthObserver)
	if !ok || w.health.quit != nil {
		return
	}
	quit, done := make(chan struct{}), make(chan struct{})
	w.health.quit, w.health.done = quit, done
	go func() {
		defer close(done)
		t := time.NewTicker(w.cfg.HealthInterval)
		defer t.Stop()
		for {
			ho.ObserveHealth(w.Health())
			select {
			case <-t.C:
			case <-quit:
				return
			}
		}
	}()
}

// stop ends the loop, if it runs, and waits for it. Call it with the
// writer's openMu held.
func (h *healthLoop) stop() {
	if h.quit != nil {
		close(h.quit)
		<-h.done
		h.quit, h.done = nil, nil
	}
}
