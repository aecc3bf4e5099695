package pool

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
)

// ResizeObserver is the optional part of an Observer that hears about the
// pool's size: the streams open now, and each grow or shrink.
type ResizeObserver interface {
	// StreamsOpen sets the number of members with a healthy stream.
	StreamsOpen(table string, n int)
	// IncResize counts one change of size; direction is "grow" or "shrink".
	IncResize(table string, direction string)
}

// The sizer's sampling: every sizeTick it samples the members, and judges
// the last sizeWindow.
const (
	sizeTick   = 250 * time.Millisecond
	sizeWindow = time.Second
	// growHoldAfterFailure holds growth after an extra's open was refused
	// or its stream failed, at least (the service's RetryAfter when longer).
	growHoldAfterFailure = time.Minute
)

// memberSample is one member at one sample.
type memberSample struct {
	conn      *conn // nil: no healthy stream
	delivered uint64
	pending   uint64
	oldest    time.Time
	wait      int64
	rowsIn    int64
	bytesIn   int64
}

// poolSample is the pool at one sample.
type poolSample struct {
	at      time.Time
	members map[*member]memberSample
	order   []*member
	errors  int64
	keyed   int64
	open    int
}

func (p *Pool) sample(now time.Time) poolSample {
	s := poolSample{at: now, members: map[*member]memberSample{},
		errors: p.openFailures.Load() + p.rebuilds.Load() + p.extraFailures.Load(),
		keyed:  p.keyedWrites.Load()}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, m := range p.members {
		ms := memberSample{wait: m.waitNanos.Load(), rowsIn: m.rowsIn.Load(), bytesIn: m.bytesIn.Load()}
		if m.usable(p.schema) {
			ms.conn = m.conn
			h := m.conn.lane.Health()
			ms.delivered, ms.pending, ms.oldest = m.conn.lane.Delivered(), h.PendingRows, h.OldestPending
			s.open++
		}
		s.members[m] = ms
		s.order = append(s.order, m)
	}
	return s
}

// window turns the samples of one window (oldest first) into Decide's
// input, less the sizer's own state.
func (p *Pool) window(hist []poolSample) Window {
	first, last := hist[0], hist[len(hist)-1]
	w := Window{Span: last.at.Sub(first.at), Errors: last.errors - first.errors, Keyed: last.keyed > first.keyed,
		Size: len(last.order), Min: p.base, Max: p.cfg.MaxStreams,
		QuotaRows: p.cfg.PerStreamRowsPerSec, QuotaMBps: p.cfg.PerStreamMBps}
	for _, m := range last.order {
		end := last.members[m]
		mw := MemberWindow{Index: m.index}
		start, ok := first.members[m]
		if !ok {
			mw.Young = true
			w.Members = append(w.Members, mw)
			continue
		}
		mw.Up = true
		busy := 0
		for _, h := range hist {
			s := h.members[m]
			if s.conn == nil || s.conn != end.conn {
				mw.Up = false
			}
			if s.pending > 0 {
				busy++
			}
		}
		mw.Busy = float64(busy) / float64(len(hist))
		if mw.Up {
			mw.Rows = end.delivered - start.delivered
			if end.rowsIn > 0 {
				mw.Bytes = float64(mw.Rows) * float64(end.bytesIn) / float64(end.rowsIn)
			}
		}
		mw.Waited = time.Duration(end.wait - start.wait)
		mw.LagStart, mw.LagEnd = lag(first.at, start.oldest), lag(last.at, end.oldest)
		w.Members = append(w.Members, mw)
	}
	return w
}

func lag(at, oldest time.Time) time.Duration {
	if oldest.IsZero() || oldest.After(at) {
		return 0
	}
	return at.Sub(oldest)
}

// runSizer samples the pool every sizeTick, reports the streams open to a
// ResizeObserver and, with SelfSizing (and room above the base), grows or
// shrinks the pool by one member when Decide says so, until the pool closes.
func (p *Pool) runSizer() {
	defer p.wg.Done()
	pol := DefaultPolicy(p.cfg)
	keep := int(sizeWindow/sizeTick) + 1
	t := time.NewTicker(sizeTick)
	defer t.Stop()
	var (
		hist           []poolSample
		satFor         time.Duration
		lastSaturated  = time.Now()
		lastChange     = time.Now()
		lastOpen       = -1
		resizeObserver ResizeObserver
		lastHold       string
	)
	resizeObserver, _ = p.obs.(ResizeObserver)
	resizing := p.cfg.SelfSizing && p.cfg.MaxStreams > p.base
	for {
		select {
		case <-p.ctx.Done():
			if resizeObserver != nil && lastOpen > 0 {
				// Closed: its streams are gone (a writer closed or
				// evicted must not go on reporting them open).
				resizeObserver.StreamsOpen(p.table, 0)
			}
			return
		case now := <-t.C:
			s := p.sample(now)
			if resizeObserver != nil && s.open != lastOpen {
				resizeObserver.StreamsOpen(p.table, s.open)
				lastOpen = s.open
			}
			if !resizing {
				continue
			}
			hist = append(hist, s)
			if len(hist) > keep {
				hist = hist[len(hist)-keep:]
			}
			if len(hist) < keep {
				continue
			}
			w := p.window(hist)
			w.SaturatedFor, w.SinceSaturated, w.SinceChange = satFor, now.Sub(lastSaturated), now.Sub(lastChange)
			if held := time.Unix(0, p.growHeldUntil.Load()); held.After(now) {
				w.GrowHeld = held.Sub(now)
			}
			p.mu.RLock()
			w.Leaving = p.leaving
			p.mu.RUnlock()
			d := Decide(w, pol)
			if d.Saturated {
				satFor += sizeTick
				lastSaturated = now
			} else {
				satFor = 0
			}
			if d.Action == Hold {
				// One debug line per kind of hold, not one per tick.
				if kind := holdKind(d.Reason); kind != lastHold {
					lastHold = kind
					p.logger().Debug(fmt.Sprintf("zerobus: %s streams held at %d: %s", p.table, w.Size, d.Reason), "table", p.table)
				}
				continue
			}
			lastHold = ""
			if p.resize(d) {
				lastChange = time.Now()
				if resizeObserver != nil {
					resizeObserver.IncResize(p.table, d.Action.String())
				}
			}
		}
	}
}

// holdKind is the reason of a hold without its figures: up to the first
// digit, and the parenthesised verdict at the end if any.
func holdKind(reason string) string {
	kind := reason
	if i := strings.IndexAny(reason, "0123456789"); i >= 0 {
		kind = reason[:i]
	}
	if i := strings.LastIndex(reason, "("); i >= 0 && strings.HasSuffix(reason, ")") {
		kind += reason[i:]
	}
	return kind
}

// resize carries out a Grow or Shrink decision, unless a Reopen is under
// way or the pool closed; it reports whether the size changed.
func (p *Pool) resize(d Decision) bool {
	if !p.reopenMu.TryLock() {
		return false // a Reopen replaces the members: decide again later
	}
	defer p.reopenMu.Unlock()
	p.mu.Lock()
	if p.closed || p.fatal != nil {
		p.mu.Unlock()
		return false
	}
	from := len(p.members)
	switch d.Action {
	case Grow:
		m := p.newMember(p.freeIndexLocked(), true)
		p.members = append(p.members, m)
		p.notifyLocked()
		p.wg.Add(1)
		go p.supervise(m)
	case Shrink:
		if from <= p.base {
			p.mu.Unlock()
			return false
		}
		m := p.members[from-1]
		p.members = p.members[:from-1]
		p.leaving++
		if m.conn != nil {
			p.draining[m.conn] = struct{}{}
		}
		p.notifyLocked()
		m.retireOnce.Do(func() { close(m.retired) })
	}
	to := len(p.members)
	p.mu.Unlock()
	p.sizes.add(SizeChange{At: time.Now(), From: from, To: to, Reason: d.Reason})
	p.logger().Info(fmt.Sprintf("zerobus: %s streams %d → %d: %s", p.table, from, to, d.Reason),
		"table", p.table, "direction", d.Action.String(), "from", from, "to", to)
	return true
}

// isRetired reports whether the sizer retired m.
func (m *member) isRetired() bool {
	select {
	case <-m.retired:
		return true
	default:
		return false
	}
}

// retire closes a retired extra's stream gracefully: once no Write that
// picked it is still submitting, it waits (within AckTimeout, or until the
// pool closes) for every row enqueued on it to be durable, then closes it.
// Rows that do not become durable fail to their writers, which redeliver
// them: none is both confirmed and failed, none is lost.
func (p *Pool) retire(m *member, c *conn) {
	p.uninstall(m, c)
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.AckTimeout)
	defer cancel()
	err := c.quiesce(ctx)
	if err == nil {
		err = c.lane.Drain(ctx)
	}
	pending := c.lane.PendingRows()
	p.teardown(m, c) // and out of the draining set
	if err != nil && p.ctx.Err() == nil {
		p.logger().Warn(fmt.Sprintf("zerobus: %s stream %d retired before %d rows were durable (they are redelivered): %v",
			p.table, m.index, pending, err), "table", p.table, "stream", m.index)
	}
}

// quiesce waits until no Write that picked c is between its pick and its
// Enqueue. c must be uninstalled first, so that no new Write picks it.
func (c *conn) quiesce(ctx context.Context) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for c.users.Load() > 0 {
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("pool: %d writes still submitting: %w", c.users.Load(), ctx.Err())
		}
	}
	return nil
}

// extraOpenFailed records the failed open of extra m as an open failure
// (Stats, the member's last error) and lets it leave, holding growth.
func (p *Pool) extraOpenFailed(m *member, err error) {
	p.recordOpenFailure(m, err)
	p.extraFailed(m, "open failed", err)
}

// extraFailed records that extra m failed (its open refused or failed, or
// its stream died) and holds growth: at least growHoldAfterFailure, or the
// service's RetryAfter when longer. The member then leaves the pool.
func (p *Pool) extraFailed(m *member, what string, err error) {
	p.extraFailures.Add(1)
	hold := growHoldAfterFailure
	if ze := ingest.Classify(err); ze != nil && ze.RetryAfter > hold {
		hold = ze.RetryAfter
	}
	until := time.Now().Add(hold).UnixNano()
	for {
		cur := p.growHeldUntil.Load()
		if cur >= until || p.growHeldUntil.CompareAndSwap(cur, until) {
			break
		}
	}
	p.logger().Info(fmt.Sprintf("zerobus: %s extra stream %d %s, growth held for %s: %v", p.table, m.index, what, hold, err),
		"table", p.table, "stream", m.index)
}

// leave takes extra m out of the pool when its supervisor exits.
func (p *Pool) leave(m *member) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := memberIndex(p.members, m); i >= 0 {
		// Failed: the others keep their index (a later extra takes the
		// smallest free one, see freeIndexLocked).
		p.members = append(p.members[:i], p.members[i+1:]...)
		if p.ctx.Err() == nil {
			p.sizes.add(SizeChange{At: time.Now(), From: len(p.members) + 1, To: len(p.members), Reason: "an extra stream failed"})
		}
	} else if m.isRetired() {
		p.leaving--
	}
	p.notifyLocked()
	close(m.exited)
}

// freeIndexLocked is the smallest member index not in use: an extra's
// index, and so its metrics' stream label, is reused rather than grown.
func (p *Pool) freeIndexLocked() int {
	used := make(map[int]bool, len(p.members))
	for _, m := range p.members {
		used[m.index] = true
	}
	i := p.base
	for used[i] {
		i++
	}
	return i
}

func memberIndex(ms []*member, m *member) int {
	for i, x := range ms {
		if x == m {
			return i
		}
	}
	return -1
}

// SizeChange is one change of a self-sizing pool's size.
type SizeChange struct {
	At       time.Time
	From, To int
	Reason   string
}

// sizeLog keeps the last changes of size, for tests and Stats.
type sizeLog struct {
	mu      sync.Mutex
	changes []SizeChange
}

const maxSizeChanges = 64

func (l *sizeLog) add(c SizeChange) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changes = append(l.changes, c)
	if len(l.changes) > maxSizeChanges {
		l.changes = l.changes[len(l.changes)-maxSizeChanges:]
	}
}

func (l *sizeLog) list() []SizeChange {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]SizeChange(nil), l.changes...)
}

// SizeChanges returns the pool's last changes of size, oldest first.
func (p *Pool) SizeChanges() []SizeChange { return p.sizes.list() }

// discardLogger is the Logger of a Config that has none.
var discardLogger = slog.New(slog.DiscardHandler)

func (p *Pool) logger() *slog.Logger {
	if p.cfg.Logger != nil {
		return p.cfg.Logger
	}
	return discardLogger
}
