// The writer's lifecycle: its named phases, and the one place that decides
// what a failure means for the next attempt.
//
//	idle ──Open──► opening ──ok──► open ─────────────► draining ──► closed
//	                  │   └──ok, no table yet──► waiting for table (provision)
//	                  └──fail──► backing off ◄──fail (a write, the streams)──┘
//	                               │ wait elapsed: Open may try again
//	                               └──► opening …
//
// Decide maps a failure's class and the history of open→fail cycles to
// retry now, back off (how long) or give up; nothing else in the writer, the
// output or the engine chooses a back-off. The pool keeps its own anti-storm
// rules inside one pool's life (a member's rebuild back-off, a concurrency
// reject's RetryAfter); the cycles across pools, reconnects and describes
// live here.

package tablewriter

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/benthos-zerobus/benthos-zerobus/internal/backoff"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Phase is where a writer is in its lifecycle.
type Phase int32

// The phases of a writer.
const (
	// PhaseIdle: built, never opened.
	PhaseIdle Phase = iota
	// PhaseOpening: an Open describes the table and opens the streams.
	PhaseOpening
	// PhaseWaitingForTable: open, but the table does not exist yet; the
	// first batch creates it (catalog.provision).
	PhaseWaitingForTable
	// PhaseOpen: the streams are up, writes flow.
	PhaseOpen
	// PhaseBackingOff: an open, or the open streams, failed; no open is
	// tried before the wait Decide chose has passed, and writes are
	// refused with ErrNotOpen (the output holds the batches).
	PhaseBackingOff
	// PhaseDraining: Close drains what is in flight.
	PhaseDraining
	// PhaseClosed: closed for good.
	PhaseClosed
)

var phaseNames = [...]string{
	PhaseIdle:            "idle",
	PhaseOpening:         "opening",
	PhaseWaitingForTable: "waiting for table",
	PhaseOpen:            "open",
	PhaseBackingOff:      "backing off",
	PhaseDraining:        "draining",
	PhaseClosed:          "closed",
}

func (p Phase) String() string { return enumName(phaseNames[:], int(p), "phase") }

// enumName is names[i], or kind(i) for a value without a name.
func enumName(names []string, i int, kind string) string {
	if i >= 0 && i < len(names) && names[i] != "" {
		return names[i]
	}
	return fmt.Sprintf("%s(%d)", kind, i)
}

// FaultClass is what kind of fix a failure needs.
type FaultClass int

// The classes of failure.
const (
	// FaultTransient: the service, the network or the workspace failed
	// (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, a dead transport, a
	// stream that used up its rebuilds): it heals by itself.
	FaultTransient FaultClass = iota + 1
	// FaultThrottled: the service refused more streams or pipelines for
	// now (RESOURCE_EXHAUSTED, error 6006) and said how long to wait.
	FaultThrottled
	// FaultPermanent: only a person can fix it (PERMISSION_DENIED,
	// UNAUTHENTICATED, NOT_FOUND, an invalid name, a table that does not
	// exist without provisioning).
	FaultPermanent
	// FaultClosed: the writer was closed; nothing is retried.
	FaultClosed
)

var faultClassNames = [...]string{
	FaultTransient: "transient",
	FaultThrottled: "throttled",
	FaultPermanent: "permanent",
	FaultClosed:    "closed",
}

func (c FaultClass) String() string { return enumName(faultClassNames[:], int(c), "class") }

// Fault is a classified failure of an open or of the open streams.
type Fault struct {
	Class FaultClass
	// Cause names the cause, for "explain once per change of cause": two
	// faults with the same Cause are the same problem persisting.
	Cause string
	// Hint is the service's own wait (throttling); zero: none given.
	Hint time.Duration
	// Advice says what to do about it, in the user's terms.
	Advice string
	Err    error
	// Net names the network failure behind a transient fault (which host
	// did not resolve, which address refused, why TLS failed), nil when
	// it is none.
	Net *ingest.NetCause
}

// netAdvice is the advice a WaitError carries to the engine's log: a
// network cause's (what to check, naming the field), said with the cause
// each time; the others' advice is the explanation's, said once per cause.
func (f Fault) netAdvice() string {
	if f.Net == nil {
		return ""
	}
	return f.Advice
}

// Action is what to do after a fault.
type Action int

// The actions Decide chooses from.
const (
	// RetryNow: open again at once (a first transient failure).
	RetryNow Action = iota
	// BackOff: open again once Verdict.Wait has passed; writes are held
	// meanwhile.
	BackOff
	// GiveUp: never open again (the writer is closed).
	GiveUp
)

var actionNames = [...]string{
	RetryNow: "retry now",
	BackOff:  "back off",
	GiveUp:   "give up",
}

func (a Action) String() string { return enumName(actionNames[:], int(a), "action") }

// History is what the lifecycle remembers of the recent past.
type History struct {
	// Cycles counts the failed open→fail cycles since the last progress
	// (rows durable, or streams that lived longer than PermanentBackoffMax),
	// the one being decided included.
	Cycles int
}

// Verdict is Decide's answer.
type Verdict struct {
	Action Action
	// Wait is the nominal wait before the next open (BackOff).
	Wait time.Duration
}

// The back-off bounds.
const (
	// PermanentBackoffInitial and PermanentBackoffMax bound the wait after
	// a failure only a person can fix: 1 s doubling to a minute, so a fix
	// is picked up within a minute and an unfixed fault costs one open a
	// minute.
	PermanentBackoffInitial = time.Second
	PermanentBackoffMax     = time.Minute
	// TransientBackoffInitial and TransientBackoffMax bound the wait after
	// the second and later transient failures in a row (the first retries
	// at once).
	TransientBackoffInitial = 500 * time.Millisecond
	TransientBackoffMax     = 30 * time.Second
)

// Decide is the one function that says what a fault means for the next
// attempt, given how many open→fail cycles failed in a row:
//   - closed: give up;
//   - throttled: back off for the service's hint (ingest's default for a
//     concurrency reject without one), however many cycles;
//   - permanent: back off 1 s, 2 s, 4 s … up to 60 s across cycles;
//   - transient: retry at once the first time, then back off 0.5 s doubling
//     up to 30 s.
func Decide(f Fault, h History) Verdict {
	cycles := max(h.Cycles, 1)
	switch f.Class {
	case FaultClosed:
		return Verdict{Action: GiveUp}
	case FaultThrottled:
		wait := f.Hint
		if wait <= 0 {
			wait = ingest.ResourceExhaustedBackoff
		}
		return Verdict{Action: BackOff, Wait: wait}
	case FaultPermanent:
		return Verdict{Action: BackOff, Wait: backoff.Nominal(PermanentBackoffInitial, PermanentBackoffMax, cycles-1)}
	default:
		if cycles == 1 {
			return Verdict{Action: RetryNow}
		}
		return Verdict{Action: BackOff, Wait: backoff.Nominal(TransientBackoffInitial, TransientBackoffMax, cycles-2)}
	}
}

// errTableMissing is an open refused because the table does not exist and
// provisioning is off.
var errTableMissing = errors.New("the table does not exist")

// Classify turns an error of an open or of the streams into a Fault for
// table, with the advice a user needs.
func Classify(table string, err error) Fault { return classify(table, "", err) }

// causeTableMissing is the one cause of a table that does not exist: a
// describe that finds none and a stream refused NOT_FOUND (dropped under it).
const causeTableMissing = "table missing"

// classify is Classify naming principal (the service principal's
// application id, "" when unknown) in the grants to issue.
func classify(table, principal string, err error) Fault {
	f := Fault{Err: err}
	switch {
	case errors.Is(err, ErrClosed), errors.Is(err, pool.ErrClosed):
		f.Class, f.Cause = FaultClosed, "closed"
		return f
	case errors.Is(err, errTableMissing):
		f.Class, f.Cause = FaultPermanent, causeTableMissing
		f.Advice = fmt.Sprintf("create table %s, or set catalog.provision: true so the output creates it", table)
		return f
	}
	if wait, ok := serviceWait(err); ok {
		f.Class, f.Cause, f.Hint = FaultThrottled, "throttled", wait
		f.Advice = "the service refused more streams for now (too many streams or pipelines): the open streams keep writing and no new one is opened before the service's wait; lower streams.max if it persists"
		return f
	}
	// The service's code, whether err carries a classified error or a
	// bare gRPC status (codes.Unknown for neither).
	ze := ingest.Classify(err)
	zerr := ze != nil && ze.Code != codes.Unknown
	if !ingest.IsPermanent(err) {
		f.Class, f.Cause = FaultTransient, "transient"
		if zerr {
			f.Cause = "transient " + ze.Code.String()
		}
		f.Advice = "the service, the network or the workspace failed; retrying with back-off"
		if nc := ingest.NetCauseOf("", "", err); nc != nil {
			// The cause by name: the same for as long as it persists.
			f.Net, f.Cause = nc, nc.Summary()
			f.Advice = nc.Advice() + "; retrying with back-off, and writing again by itself once it is fixed"
		}
		return f
	}
	f.Class = FaultPermanent
	text := err.Error()
	var tn *typemap.TableNameError
	switch {
	case errors.As(err, &tn), strings.Contains(text, "INVALID_SCHEMA_OR_RELATION_NAME"):
		f.Cause, f.Advice = "invalid name", "fix the table name (catalog.schema.table, each part a valid identifier)"
	case ze != nil && ze.IsSchemaMismatch():
		f.Cause, f.Advice = "schema refused", "the table refuses the stream's schema: fix the table or the data, or enable catalog.provision to evolve it"
	case (ze != nil && (ze.Code == codes.PermissionDenied || ze.ServiceCode == ingest.ServiceCodeMissingGrants)) ||
		strings.Contains(text, "PERMISSION_DENIED") || strings.Contains(text, "PermissionDenied"):
		f.Cause, f.Advice = "permission denied", typemap.GrantHint(table, principal)
	case (ze != nil && ze.Code == codes.Unauthenticated) || strings.Contains(text, "UNAUTHENTICATED") ||
		strings.Contains(text, "Unauthenticated") || strings.Contains(text, "invalid_client"):
		f.Cause, f.Advice = "unauthenticated", "fix the credentials: client_id and client_secret (or DATABRICKS_CLIENT_ID / DATABRICKS_CLIENT_SECRET) of a service principal of this workspace"
	case (ze != nil && ze.Code == codes.NotFound) || strings.Contains(text, "NOT_FOUND") || strings.Contains(text, "does not exist"):
		// One cause with errTableMissing: a stream refused NOT_FOUND (the
		// table dropped under it) and the describe that then finds no
		// table are one problem, explained once.
		f.Cause, f.Advice = causeTableMissing, fmt.Sprintf("create table %s (or its catalog and schema), or set catalog.provision: true", table)
	default:
		f.Cause, f.Advice = "permanent", "fix the cause named here; the output retries with back-off and resumes once it is fixed, no restart needed"
		if zerr {
			f.Cause = "permanent " + ze.Code.String()
		}
	}
	return f
}

// serviceWait is the wait a concurrency reject asks for: the service's
// hint, or ingest's default; or, for an open whose streams were refused for
// concurrency (and no worse), the default.
func serviceWait(err error) (time.Duration, bool) {
	if cr := ingest.ConcurrencyRejectOf(err); cr != nil {
		if cr.RetryAfter > 0 {
			return cr.RetryAfter, true
		}
		return ingest.ResourceExhaustedBackoff, true
	}
	ze := ingest.Classify(err)
	var oe *OpenError
	if errors.As(err, &oe) && oe.Rejects > 0 && (ze == nil || ze.Class != ingest.FatalConfig) {
		return ingest.ResourceExhaustedBackoff, true
	}
	return 0, false
}

// WaitError is an Open refused by the lifecycle: the cause, and how long to
// wait before the next Open (zero: at once).
type WaitError struct {
	Err  error
	Wait time.Duration
	// Held is set when no open was tried: the wait of an earlier failure
	// has not passed yet.
	Held bool
	// Advice says what to do about Err ("": nothing to add): a network
	// cause's, which the engine's log then carries with the cause.
	Advice string
}

// Error names the cause first (CauseText), then what to do.
func (e *WaitError) Error() string {
	s := CauseText(e.Err)
	if e.Advice != "" {
		s += "; what to do: " + e.Advice
	}
	if e.Held {
		s += fmt.Sprintf(" (next attempt in %s)", e.Wait.Round(10*time.Millisecond))
	}
	return s
}

// CauseText is err's text, led by its network cause when it has one: the
// host that did not resolve, the address that refused, why TLS failed,
// then the failure as it came from the innermost layer that named it
// (instead of every layer's wrapping, which says less).
func CauseText(err error) string {
	if nc := ingest.NetCauseOf("", "", err); nc != nil {
		return nc.Error()
	}
	return err.Error()
}

func (e *WaitError) Unwrap() error { return e.Err }

// RetryAfter says how long to wait before the next Open after err, as the
// lifecycle decided it.
func RetryAfter(err error) (time.Duration, bool) {
	var we *WaitError
	if errors.As(err, &we) {
		return we.Wait, true
	}
	return 0, false
}

// lifecycle is a writer's phase and history. Its methods are the only
// transitions.
type lifecycle struct {
	table string
	log   *slog.Logger
	// subject names the table in the explanation ("table", "coverage
	// table") and held says what happens to the writes meanwhile.
	subject, held string
	now           func() time.Time
	rand          func() float64

	phase atomic.Int32
	// failing is set while cycles > 0, so that progress on the write path
	// costs one atomic load.
	failing atomic.Bool

	mu        sync.Mutex
	cycles    int
	until     time.Time // no open before
	fault     *Fault    // the cause in force; nil once healed
	since     time.Time // when the first failure of this run of cycles came
	explained string    // the Cause last explained
	openedAt  time.Time
	// firstTry is when the first open began; zero before it.
	firstTry time.Time
	// outageAt is when the outage in progress began (no stream connected
	// while the writer is open); zero: none. outageLogged is set when it
	// was explained; outageEnd is when the last one ended.
	outageAt, outageEnd time.Time
	outageLogged        bool
}

// outageQuiet is how long the streams must stay connected before an outage
// with the cause explained last is explained again: a flapping connection
// is one problem, not a line per flap.
const outageQuiet = time.Minute

func newLifecycle(table string, log *slog.Logger) *lifecycle {
	return &lifecycle{table: table, log: log, now: time.Now, rand: rand.Float64,
		subject: "table", held: "Writes are held (not failed) while the output backs off"}
}

// Phase returns the current phase.
func (l *lifecycle) Phase() Phase { return Phase(l.phase.Load()) }

func (l *lifecycle) set(p Phase) { l.phase.Store(int32(p)) }

// writable reports whether writes may go to the streams.
func (l *lifecycle) writable() bool {
	p := l.Phase()
	return p == PhaseOpen || p == PhaseWaitingForTable
}

// beginOpen moves to opening, unless the writer is closed (ErrClosed) or
// the wait of the last failure has not passed (a *WaitError with what is
// left of it: no open is tried). ready skips the wait: the streams of the
// failed open connected meanwhile, so the open that follows costs no new
// stream and heals at once.
func (l *lifecycle) beginOpen(ready bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isClosed() {
		return ErrClosed
	}
	if l.Phase() == PhaseBackingOff && !ready {
		if left := l.until.Sub(l.now()); left > 0 && l.fault != nil {
			return &WaitError{Err: l.fault.Err, Wait: left, Held: true, Advice: l.fault.netAdvice()}
		}
	}
	if l.firstTry.IsZero() {
		l.firstTry = l.now()
	}
	l.set(PhaseOpening)
	return nil
}

// neverOpened returns, for a writer that never opened and whose last open
// failed, when its first open began; zero otherwise. Such a writer has
// been unreachable all along: health says down, with the cause.
func (l *lifecycle) neverOpened() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.openedAt.IsZero() || l.fault == nil {
		return time.Time{}
	}
	return l.firstTry
}

// opened moves to open (or waiting for the table).
func (l *lifecycle) opened(waitingForTable bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isClosed() {
		return
	}
	l.openedAt = l.now()
	if waitingForTable {
		l.set(PhaseWaitingForTable)
	} else {
		l.set(PhaseOpen)
	}
}

// failed records a failed open or the failure of the open streams: one
// open→fail cycle. It asks Decide, moves to backing off until the wait has
// passed (closed when it gives up), explains the cause once per change of
// cause, and returns the verdict.
func (l *lifecycle) failed(f Fault) Verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if l.isClosed() {
		return Verdict{Action: GiveUp}
	}
	// Streams that lived longer than the longest wait made progress of a
	// kind: this failure starts a new run.
	if l.Phase() == PhaseOpen && !l.openedAt.IsZero() && now.Sub(l.openedAt) > PermanentBackoffMax {
		l.cycles = 0
	}
	if l.cycles == 0 {
		l.since = now
	}
	l.cycles++
	l.failing.Store(true)
	v := Decide(f, History{Cycles: l.cycles})
	// Writers failing together do not retry in lock-step.
	wait := backoff.Shorten(v.Wait, backoff.DefaultJitter, l.rand())
	l.fault = &f
	l.until = now.Add(wait)
	if v.Action == GiveUp {
		l.set(PhaseClosed)
	} else {
		l.set(PhaseBackingOff)
	}
	next := "retrying now"
	if v.Action == BackOff {
		next = fmt.Sprintf("next attempt in %s", wait.Round(10*time.Millisecond))
	}
	if f.Cause != l.explained && v.Action != GiveUp {
		l.explained = f.Cause
		msg := fmt.Sprintf("%s %s: %s. What to do: %s. %s (%s; waits grow to %s while the cause persists, and this is logged again only if the cause changes)",
			l.subject, l.table, CauseText(f.Err), f.Advice, l.held, next, maxWait(f.Class))
		if f.Class == FaultTransient {
			l.log.Warn(msg)
		} else {
			l.log.Error(msg)
		}
	} else {
		l.log.Debug(fmt.Sprintf("%s %s: still failing (%s, %d attempts in a row): %v; %s", l.subject, l.table, f.Cause, l.cycles, f.Err, next))
	}
	return Verdict{Action: v.Action, Wait: wait}
}

// outageAdvice is what to do while no stream reaches the service for a
// cause retrying can fix.
const outageAdvice = "check that this host reaches the Zerobus endpoint (endpoint; through proxy_url if set) and the workspace (workspace_url, whose token endpoint every new stream needs): a firewall, a proxy, DNS, or an outage of the service"

// outage explains, once per change of cause, that the writer is open but
// none of its streams has been connected for age: every one is
// reconnecting or rebuilding by itself. Batches are held meanwhile
// (liveness.go). Outages of the cause explained last are not explained
// again until the streams stayed connected for outageQuiet; outageOver
// reports the end of one that was explained.
func (l *lifecycle) outage(f Fault, age time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if l.outageAt.IsZero() {
		l.outageAt, l.outageLogged = now.Add(-age), false
		if l.cycles == 0 && !l.outageEnd.IsZero() && now.Sub(l.outageEnd) > outageQuiet {
			l.explained = "" // quiet long enough: a new problem
		}
	}
	if f.Cause == l.explained {
		return
	}
	l.explained, l.outageLogged = f.Cause, true
	advice := f.Advice
	if f.Class == FaultTransient && f.Net == nil {
		advice = outageAdvice
	}
	l.log.Warn(fmt.Sprintf("%s %s: no stream is connected for %s: %s. What to do: %s. %s; the streams reconnect by themselves with back-off, no restart needed (this is logged again only if the cause changes)",
		l.subject, l.table, age.Round(100*time.Millisecond), CauseText(f.Err), advice, l.held))
}

// outageOver ends the outage in progress, reporting it when it was
// explained.
func (l *lifecycle) outageOver() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.outageAt.IsZero() {
		return
	}
	now := l.now()
	if l.outageLogged {
		l.log.Info(fmt.Sprintf("%s %s: a stream is connected again after %s without one (%s)",
			l.subject, l.table, now.Sub(l.outageAt).Round(100*time.Millisecond), l.explained))
	}
	l.outageAt, l.outageEnd, l.outageLogged = time.Time{}, now, false
}

func maxWait(c FaultClass) time.Duration {
	switch c {
	case FaultPermanent:
		return PermanentBackoffMax
	case FaultThrottled:
		return ingest.PipelineBlockedBackoff
	}
	return TransientBackoffMax
}

// progress records rows made durable: the history is cleared, and a cause
// that was explained is reported healed.
func (l *lifecycle) progress() {
	if !l.failing.Load() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cycles == 0 {
		return
	}
	if l.fault != nil && l.explained != "" {
		l.log.Info(fmt.Sprintf("%s %s: writing again after %d failed attempts over %s (%s)",
			l.subject, l.table, l.cycles, l.now().Sub(l.since).Round(10*time.Millisecond), l.fault.Cause))
	}
	l.cycles, l.fault, l.explained = 0, nil, ""
	l.failing.Store(false)
}

// cause is the fault in force, nil when none.
func (l *lifecycle) cause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fault == nil {
		return nil
	}
	return l.fault.Err
}

// notOpen is Write's error while the writer is not writable.
func (l *lifecycle) notOpen() error {
	if l.isClosed() {
		return ErrClosed
	}
	if cause := l.cause(); cause != nil {
		return fmt.Errorf("%w: %w", ErrNotOpen, cause)
	}
	return ErrNotOpen
}

// draining moves to draining (Close), reporting false when already there.
func (l *lifecycle) draining() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isClosed() {
		return false
	}
	l.set(PhaseDraining)
	return true
}

func (l *lifecycle) closed() { l.set(PhaseClosed) }

// isClosed reports whether Close began.
func (l *lifecycle) isClosed() bool {
	p := l.Phase()
	return p == PhaseDraining || p == PhaseClosed
}
