// Liveness: what the writer knows, within a second or two, of its streams'
// connections, so that an outage of the Zerobus endpoint shows in health
// and in the engine's connection status while the client still reconnects
// inside its logical streams (which hide it from the pool until their
// reconnect budget runs out).

package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

// OutageGrace is how long no stream of a table may be connected before the
// table is reported unreachable (health 503) and new batches are held: long
// enough that a rotation or one stream's reconnect never counts, short
// enough to be seen within 2 s.
const OutageGrace = time.Second

// outagePoll and outagePollMax bound the wait an Open asks for while the
// table is unreachable (a quarter of the outage so far): how soon the
// engine asks again whether a stream is back, without a log line a second
// through a long outage.
const (
	outagePoll    = time.Second
	outagePollMax = 5 * time.Second
)

// outageWait is the wait before the engine asks again, an outage of age in.
func outageWait(age time.Duration) time.Duration {
	return min(max(age/4, outagePoll), outagePollMax)
}

// errReconnecting stands for the cause of a lost connection no event named.
var errReconnecting = errors.New("the stream's connection was lost; reconnecting")

// links keeps, per pool member, the last connection loss the client
// reported (its time and cause) and what it said since.
type links struct {
	mu sync.Mutex
	m  map[int]linkState
}

type linkState struct {
	lostAt time.Time
	err    error
}

func (l *links) set(index int, lost bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[int]linkState{}
	}
	s := l.m[index]
	if lost {
		s.lostAt = time.Now()
	}
	s.err = err
	l.m[index] = s
}

func (l *links) get(index int) linkState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[index]
}

// linkEvents is one member's ingest.Observer feeding links.
type linkEvents struct {
	ingest.NopObserver
	l     *links
	index int
}

func (e linkEvents) OnReconnect(_ string, reason error) {
	if ze := ingest.Classify(reason); ze != nil && ze.IsRotation() {
		return // planned: not a loss
	}
	e.l.set(e.index, true, reason)
}

func (e linkEvents) OnRetry(_ string, _ int, err error) { e.l.set(e.index, false, err) }

// poolObserver is what the writer hands its pools: the writer's Observer,
// whose stream events are also fed to the writer's links.
type poolObserver struct {
	Observer
	links *links
}

var _ pool.StreamEventer = poolObserver{}

// StreamObserver and the counters are the writer's Observer's.
func (o poolObserver) StreamObserver(table string, index int) acklane.Observer {
	return o.Observer.StreamObserver(table, index)
}

// StreamEvents tees member index's client events to the writer's links and
// to the Observer's own StreamEvents, if it has them.
func (o poolObserver) StreamEvents(table string, index int) ingest.Observer {
	mine := linkEvents{l: o.links, index: index}
	if se, ok := o.Observer.(pool.StreamEventer); ok {
		if theirs := se.StreamEvents(table, index); theirs != nil {
			return teeEvents{theirs, mine}
		}
	}
	return mine
}

// teeEvents sends every event to two observers.
type teeEvents [2]ingest.Observer

func (t teeEvents) OnRotation(table string) {
	t[0].OnRotation(table)
	t[1].OnRotation(table)
}

func (t teeEvents) OnReconnect(table string, reason error) {
	t[0].OnReconnect(table, reason)
	t[1].OnReconnect(table, reason)
}

func (t teeEvents) OnRetry(table string, attempt int, err error) {
	t[0].OnRetry(table, attempt, err)
	t[1].OnRetry(table, attempt, err)
}

func (t teeEvents) OnFailure(table string, err *ingest.Error) {
	t[0].OnFailure(table, err)
	t[1].OnFailure(table, err)
}

// memberDown says whether member mh cannot carry rows now, since when, and
// why: rebuilding or stopped (the pool's word), or up but reconnecting
// inside the client (the links' word).
func (w *Writer) memberDown(mh pool.MemberHealth) (down bool, since time.Time, cause error) {
	switch {
	case mh.State == pool.StateUp && mh.Reconnecting:
		ls := w.links.get(mh.Index)
		since, cause = ls.lostAt, ls.err
		if since.IsZero() || since.Before(mh.Since) {
			since = mh.Since
		}
		if cause == nil {
			cause = errReconnecting
		}
		return true, since, cause
	case mh.State == pool.StateUp:
		return false, time.Time{}, nil
	default:
		cause = mh.Err
		if cause == nil {
			cause = errReconnecting
		}
		return true, mh.Since, cause
	}
}

// unreachable returns since when no stream of p has been connected, and
// the last cause, or a zero time while some stream is up.
func (w *Writer) unreachable(ph pool.Health) (since time.Time, cause error) {
	if len(ph.Members) == 0 {
		return time.Time{}, nil
	}
	for _, mh := range ph.Members {
		down, s, c := w.memberDown(mh)
		if !down {
			return time.Time{}, nil
		}
		// The outage began when the last stream went down.
		if s.After(since) || since.IsZero() {
			since, cause = s, c
		}
	}
	return since, cause
}

// outage returns why the table st writes to is unreachable now (every
// stream down for longer than OutageGrace), nil otherwise. New batches are
// held (ErrNotOpen) and Open waits while it lasts: the engine's connection
// status then says the output is not connected.
func (w *Writer) outage(st *state) error {
	if st == nil || st.pool == nil || st.pool.AnyConnected() {
		return nil // the usual case, decided without building the pool's Health
	}
	since, cause := w.unreachable(st.pool.Health())
	if since.IsZero() || time.Since(since) < OutageGrace {
		return nil
	}
	return &outageError{table: w.cfg.Table, age: time.Since(since), cause: cause}
}

// outageError is an outage in progress: how long it lasts, and why.
type outageError struct {
	table string
	age   time.Duration
	cause error
}

func (e *outageError) Error() string {
	return fmt.Sprintf("no stream to %s is connected for %s: %v", e.table, e.age.Round(100*time.Millisecond), e.cause)
}

func (e *outageError) Unwrap() error { return e.cause }

// outageWatchInterval is how often an open writer looks whether its table
// became unreachable, to release the writes waiting to submit.
const outageWatchInterval = 250 * time.Millisecond

// errOutage is the cause a submit is cancelled with when the table became
// unreachable: nothing of its batch was accepted, so the batch is held.
var errOutage = errors.New("no stream is connected")

// outageSignal is a context cancelled (cause errOutage) once the table has
// been unreachable for OutageGrace; a fresh one replaces it when a stream is
// back. Writes waiting to submit are released by it.
type outageSignal struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newOutageSignal() *outageSignal {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &outageSignal{ctx: ctx, cancel: cancel}
}

// outageCtx returns the current outage signal's context. A signal raised
// for an outage that has ended (a stream connected again since the watch
// last looked) is replaced here at once, so a write right after a stream
// came back is not held by the old signal until the watch's next tick.
func (w *Writer) outageCtx() context.Context {
	s := w.outageSig.Load()
	if s == nil {
		return context.Background()
	}
	if s.ctx.Err() != nil && w.outage(w.st.Load()) == nil {
		w.outageSig.CompareAndSwap(s, newOutageSignal())
		return w.outageSig.Load().ctx
	}
	return s.ctx
}

// startOutageWatch starts the goroutine that raises and clears the outage
// signal, once; Close stops it. Call it with openMu held.
func (w *Writer) startOutageWatch() {
	if w.outageQuit != nil {
		return
	}
	w.outageSig.Store(newOutageSignal())
	quit, done := make(chan struct{}), make(chan struct{})
	w.outageQuit, w.outageDone = quit, done
	go func() {
		defer close(done)
		t := time.NewTicker(outageWatchInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-quit:
				return
			}
			sig := w.outageSig.Load()
			cause := w.outage(w.st.Load())
			switch {
			case cause != nil && sig.ctx.Err() == nil:
				sig.cancel(fmt.Errorf("%w: %w", errOutage, cause))
			case cause == nil && sig.ctx.Err() != nil:
				// outageCtx may have replaced it already.
				w.outageSig.CompareAndSwap(sig, newOutageSignal())
			}
			w.explainOutage(cause)
		}
	}()
}

// explainOutage hands an outage in progress (cause, from outage) to the
// lifecycle, which explains it once per cause, or reports its end.
func (w *Writer) explainOutage(cause error) {
	var oe *outageError
	if !errors.As(cause, &oe) {
		w.life.outageOver()
		return
	}
	w.life.outage(classify(w.cfg.Table, w.cfg.Principal, oe.cause), oe.age)
}

// stopOutageWatch stops the watch. Call it with openMu held.
func (w *Writer) stopOutageWatch() {
	if w.outageQuit != nil {
		close(w.outageQuit)
		<-w.outageDone
		w.outageQuit, w.outageDone = nil, nil
	}
}
