// Package coverage records which source offsets are durably in a raw table:
// gap-aware ranges [start, end) per (writer id, source), advanced only after
// the raw rows' durable ack, union-merged (never last-write-wins) and stored
// with raw, in a companion table. The Recorder keeps the ranges and flushes
// them through a Sink: the table writer of the coverage table (a writer of
// its own: streams, reconnects, back-off), whose ack lanes carry the
// DerivedCoverage confirmation kind.
//
// Coverage may lag the data (a crash between the raw ack and the coverage
// write leaves the last ranges unrecorded: those rows are replayed from the
// source, or found by a reader that looks past the coverage), but it never
// leads it: no range names a row that is not durable.
//
// Readers union-merge every row of a (writer, source), and of all writers
// of a source: each row is a range that was durable when written, and the
// union of durable ranges is durable.
package coverage

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Range is the half-open offset interval [Start, End).
type Range struct{ Start, End int64 }

// Len is the number of offsets in r (0 for an empty or inverted range).
func (r Range) Len() int64 { return max(r.End-r.Start, 0) }

func (r Range) String() string { return fmt.Sprintf("[%d,%d)", r.Start, r.End) }

// RangeSet is a set of offsets held as sorted, disjoint, non-adjacent
// ranges: adding a range merges it with every range it overlaps or touches,
// so the set is always in its one canonical form. The zero value is empty
// and ready to use. It is not safe for concurrent use.
type RangeSet struct{ r []Range }

// Add adds the offsets [start, end) to the set; an empty or inverted range
// adds nothing.
func (s *RangeSet) Add(start, end int64) {
	if start >= end {
		return
	}
	n := len(s.r)
	// The common case, offsets arriving in order: extend or append at the
	// end without searching.
	if n == 0 || start > s.r[n-1].End {
		s.r = append(s.r, Range{start, end})
		return
	}
	if start >= s.r[n-1].Start {
		s.r[n-1].End = max(s.r[n-1].End, end)
		return
	}
	// lo: the first range that ends at or after start (touching merges);
	// hi: the first range that starts after end.
	lo := sort.Search(n, func(i int) bool { return s.r[i].End >= start })
	hi := sort.Search(n, func(i int) bool { return s.r[i].Start > end })
	if lo == hi {
		s.r = slices.Insert(s.r, lo, Range{start, end})
		return
	}
	merged := Range{min(start, s.r[lo].Start), max(end, s.r[hi-1].End)}
	s.r = slices.Replace(s.r, lo, hi, merged)
}

// AddRange adds r.
func (s *RangeSet) AddRange(r Range) { s.Add(r.Start, r.End) }

// Union adds every range of o.
func (s *RangeSet) Union(o *RangeSet) {
	if o == nil {
		return
	}
	for _, r := range o.r {
		s.Add(r.Start, r.End)
	}
}

// Ranges returns a copy of the set's ranges, sorted, disjoint and
// non-adjacent.
func (s *RangeSet) Ranges() []Range { return slices.Clone(s.r) }

// Len is the number of ranges (not of offsets).
func (s *RangeSet) Len() int { return len(s.r) }

// Empty reports whether the set holds no offset.
func (s *RangeSet) Empty() bool { return len(s.r) == 0 }

// Count is the number of offsets in the set.
func (s *RangeSet) Count() int64 {
	var n int64
	for _, r := range s.r {
		n += r.Len()
	}
	return n
}

// Contains reports whether offset x is in the set.
func (s *RangeSet) Contains(x int64) bool {
	i := sort.Search(len(s.r), func(i int) bool { return s.r[i].End > x })
	return i < len(s.r) && s.r[i].Start <= x
}

// Covers reports whether every offset of [start, end) is in the set (an
// empty window is covered).
func (s *RangeSet) Covers(start, end int64) bool { return len(s.Gaps(start, end)) == 0 }

// Gaps returns the sub-ranges of the window [start, end) the set does not
// hold, in order; none when the window is covered or empty.
func (s *RangeSet) Gaps(start, end int64) []Range {
	if start >= end {
		return nil
	}
	var gaps []Range
	at := start
	i := sort.Search(len(s.r), func(i int) bool { return s.r[i].End > start })
	for ; i < len(s.r) && s.r[i].Start < end; i++ {
		if s.r[i].Start > at {
			gaps = append(gaps, Range{at, s.r[i].Start})
		}
		at = max(at, s.r[i].End)
	}
	if at < end {
		gaps = append(gaps, Range{at, end})
	}
	return gaps
}

// Overlapping returns the ranges of the set that overlap or touch r (the
// ranges a change within r may have altered).
func (s *RangeSet) Overlapping(r Range) []Range {
	lo := sort.Search(len(s.r), func(i int) bool { return s.r[i].End >= r.Start })
	hi := sort.Search(len(s.r), func(i int) bool { return s.r[i].Start > r.End })
	if lo >= hi {
		return nil
	}
	return slices.Clone(s.r[lo:hi])
}

func (s *RangeSet) String() string {
	parts := make([]string, len(s.r))
	for i, r := range s.r {
		parts[i] = r.String()
	}
	return "{" + strings.Join(parts, " ") + "}"
}
