package pool

import (
	"fmt"
	"strings"
	"time"
)

// Action is what the sizer does after looking at a window.
type Action int

// The actions.
const (
	Hold Action = iota
	Grow
	Shrink
)

func (a Action) String() string {
	switch a {
	case Grow:
		return "grow"
	case Shrink:
		return "shrink"
	}
	return "hold"
}

// MemberWindow is what one member did over one sizing window.
type MemberWindow struct {
	Index int
	// Young is a member that joined during the window: it is not judged.
	Young bool
	// Up is a member that had the same healthy stream for the whole window.
	Up bool
	// Busy is the share of the window's samples at which the member had
	// rows waiting for their ack (1: never idle).
	Busy float64
	// Rows and Bytes were confirmed durable during the window (Bytes is an
	// estimate: Rows at the member's bytes per submitted row).
	Rows  uint64
	Bytes float64
	// Waited is the writers' total time in Submit and Enqueue on the member
	// during the window: a stream that reads slowly makes Submit wait, a
	// full ack lane makes Enqueue wait.
	Waited time.Duration
	// LagStart and LagEnd are the age of the member's oldest rows not yet
	// durable, at the window's first and last sample (0: none waiting).
	LagStart, LagEnd time.Duration
}

// Window is what the sizer saw over its last window, with the pool's state.
type Window struct {
	Span    time.Duration
	Members []MemberWindow
	// Errors counts failed opens (concurrency rejects included), rebuilds
	// and extras that failed, pool-wide, during the window.
	Errors int64
	// Keyed is set when writes with an ordering key were made during the
	// window: extras cannot take them (a key stays on its base member).
	Keyed bool
	// Size is the number of members; Min the base (Size(cfg)), never
	// shrunk below; Max the cap, streams.max.
	Size, Min, Max int
	// QuotaRows and QuotaMBps are the per-stream quota the pool assumes
	// (Config.PerStreamRowsPerSec, Config.PerStreamMBps).
	QuotaRows, QuotaMBps float64
	// SaturatedFor is how long the windows before this one were saturated
	// in a row (0: the last one was not); SinceSaturated is how long since
	// a window was last saturated (or since the pool started).
	SaturatedFor, SinceSaturated time.Duration
	// SinceChange is how long since the last grow or shrink (or the start).
	SinceChange time.Duration
	// GrowHeld is how long growth stays held after an extra's open was
	// refused or its stream failed (0: not held).
	GrowHeld time.Duration
	// Leaving counts extras being retired (draining) now.
	Leaving int
}

// Policy are the sizer's thresholds.
type Policy struct {
	// GrowInterval is the least time between two changes of size.
	GrowInterval time.Duration
	// Sustain is how long the streams must have been saturated, before the
	// current window, for the pool to grow.
	Sustain time.Duration
	// ShrinkAfter is how long no window may have been saturated before an
	// extra is retired.
	ShrinkAfter time.Duration
	// LagRising is the ack lag (age of the oldest rows not yet durable)
	// above which a lag that grows across a window means the stream falls
	// behind even below the assumed quota: well above the service's
	// durability latency (documented at about 150 ms, P95 within 500 ms:
	// https://docs.databricks.com/aws/en/ingestion/zerobus-limits).
	LagRising time.Duration
	// BusyShare is the share of samples at which a saturated stream had
	// rows waiting for their ack; WaitShare the share of the window the
	// writers waited in Submit and Enqueue, summed, that counts as busy too.
	BusyShare, WaitShare float64
	// AtQuota is the share of the quota a stream must carry to be at it.
	AtQuota float64
	// ShrinkHeadroom is the share of the quota the remaining streams may
	// carry, after a shrink, on the window's traffic.
	ShrinkHeadroom float64
}

// DefaultPolicy is the sizer's policy for cfg.
func DefaultPolicy(cfg Config) Policy {
	cfg = cfg.withDefaults()
	return Policy{
		GrowInterval:   cfg.GrowInterval,
		Sustain:        500 * time.Millisecond,
		ShrinkAfter:    cfg.ShrinkAfter,
		LagRising:      2 * time.Second,
		BusyShare:      0.75,
		WaitShare:      0.5,
		AtQuota:        0.9,
		ShrinkHeadroom: 0.5,
	}
}

// Decision is the sizer's verdict on one window.
type Decision struct {
	Action Action
	// Reason says why, for the log line of a change.
	Reason string
	// Saturated reports that every judged member was saturated during the
	// window (the sizer counts SaturatedFor with it).
	Saturated bool
}

// saturated reports whether m could not keep up during a window of span:
// it was up and confirmed rows, it was busy (rows waiting for their ack at
// BusyShare of the samples, or writers waiting on it WaitShare of the
// window), and it carried AtQuota of its quota (rows or bytes) or its ack
// lag kept rising above LagRising. It says why, or why not.
func (pol Policy) saturated(w Window, m MemberWindow) (bool, string) {
	secs := w.Span.Seconds()
	if secs <= 0 {
		return false, "no window"
	}
	rows, mbps := float64(m.Rows)/secs, m.Bytes/1e6/secs
	waited := m.Waited.Seconds() / secs
	busy := m.Busy >= pol.BusyShare || waited >= pol.WaitShare
	atQuota := (w.QuotaRows > 0 && rows >= pol.AtQuota*w.QuotaRows) || (w.QuotaMBps > 0 && mbps >= pol.AtQuota*w.QuotaMBps)
	rising := m.LagEnd >= pol.LagRising && m.LagEnd > m.LagStart
	state := fmt.Sprintf("stream %d: %.0f rows/s, %.2f MB/s, busy %.0f%%, ack lag %s→%s, writers waited %.0f%%",
		m.Index, rows, mbps, 100*m.Busy, m.LagStart.Round(time.Millisecond), m.LagEnd.Round(time.Millisecond), 100*waited)
	switch {
	case !m.Up || m.Rows == 0:
		return false, state + " (nothing confirmed)"
	case !busy:
		return false, state + " (idle)"
	case !atQuota && !rising:
		return false, state + " (below the quota, lag not rising)"
	}
	return true, state
}

// Decide is the sizer's rule. Grow by one when every judged member was
// saturated during the window and for Sustain before it, no stream failed,
// no open was refused, no growth hold is on, no ordering key is in use, the
// last change is GrowInterval old and the pool is below Max. Shrink by one
// when no window was saturated for ShrinkAfter, no error happened, no extra
// is still leaving, the last change is GrowInterval old, the pool is above
// Min, and the window's traffic fits one stream fewer at ShrinkHeadroom of
// the quota. Otherwise hold.
func Decide(w Window, pol Policy) Decision {
	secs := w.Span.Seconds()
	if secs <= 0 {
		return Decision{Reason: "no window"}
	}
	if w.Errors > 0 {
		return Decision{Reason: fmt.Sprintf("%d stream errors or refused opens in the last %s: never resize on errors", w.Errors, w.Span)}
	}
	var (
		judged, sat  int
		rows, mbps   float64
		why          []string
		notUp, young int
		idle         string // why the first unsaturated member is not
	)
	for _, m := range w.Members {
		rows += float64(m.Rows) / secs
		mbps += m.Bytes / 1e6 / secs
		switch {
		case m.Young:
			young++
			continue
		case !m.Up:
			notUp++
			continue
		}
		judged++
		ok, r := pol.saturated(w, m)
		if ok {
			sat++
			why = append(why, r)
		} else if idle == "" {
			idle = r
		}
	}
	if notUp > 0 {
		return Decision{Reason: fmt.Sprintf("%d streams not up for the whole window", notUp)}
	}
	d := Decision{Saturated: judged > 0 && sat == judged}
	if d.Saturated {
		switch {
		case w.SaturatedFor < pol.Sustain:
			d.Reason = fmt.Sprintf("saturated for %s, less than %s", w.SaturatedFor, pol.Sustain)
		case w.Keyed:
			d.Reason = "saturated, but writes carry ordering keys, which stay on their base stream"
		case w.Size >= w.Max:
			d.Reason = fmt.Sprintf("saturated at streams.max (%d)", w.Max)
		case w.GrowHeld > 0:
			d.Reason = fmt.Sprintf("saturated, but growth is held for %s after an extra stream was refused or failed", w.GrowHeld.Round(time.Second))
		case w.SinceChange < pol.GrowInterval:
			d.Reason = fmt.Sprintf("saturated, last change %s ago", w.SinceChange.Round(time.Millisecond))
		case young > 0 || w.Leaving > 0:
			d.Reason = "saturated, a stream is still joining or leaving"
		default:
			d.Action = Grow
			d.Reason = fmt.Sprintf("every stream saturated for %s (quota %.0f rows/s, %.0f MB/s per stream): %s",
				(w.SaturatedFor + w.Span).Round(time.Millisecond), w.QuotaRows, w.QuotaMBps, strings.Join(why, "; "))
		}
		return d
	}
	if w.Size <= w.Min || w.Leaving > 0 || young > 0 || w.SinceSaturated < pol.ShrinkAfter || w.SinceChange < pol.GrowInterval {
		d.Reason = "not saturated: " + idle
		return d
	}
	left := float64(w.Size - 1)
	if (w.QuotaRows > 0 && rows > pol.ShrinkHeadroom*left*w.QuotaRows) || (w.QuotaMBps > 0 && mbps > pol.ShrinkHeadroom*left*w.QuotaMBps) {
		d.Reason = fmt.Sprintf("not saturated, but %.0f rows/s, %.2f MB/s needs %d streams", rows, mbps, w.Size)
		return d
	}
	d.Action = Shrink
	d.Reason = fmt.Sprintf("no stream saturated for %s; %.0f rows/s, %.2f MB/s fit %d streams at %.0f%% of their quota",
		w.SinceSaturated.Round(time.Second), rows, mbps, w.Size-1, 100*pol.ShrinkHeadroom)
	return d
}
