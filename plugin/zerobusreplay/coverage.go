package zerobusreplay

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"
)

// Coverage columns, as the output writes them: one row per durable
// half-open offset range [start, end) of one source, per writer.
const (
	covSource = "source"
	covStart  = "start"
	covEnd    = "end"
)

// span is a half-open offset range [Start, End).
type span struct{ Start, End int64 }

func (s span) String() string { return fmt.Sprintf("[%d,%d)", s.Start, s.End) }

// mergeSpans union-merges spans (overlapping or adjacent ones join), sorted.
func mergeSpans(in []span) []span {
	s := slices.Clone(in)
	sort.Slice(s, func(i, j int) bool { return s[i].Start < s[j].Start })
	var out []span
	for _, r := range s {
		if r.End <= r.Start {
			continue
		}
		if n := len(out); n > 0 && r.Start <= out[n-1].End {
			out[n-1].End = max(out[n-1].End, r.End)
			continue
		}
		out = append(out, r)
	}
	return out
}

// gaps returns the parts of want not covered by merged (sorted, disjoint).
func gaps(merged []span, want span) []span {
	var out []span
	at := want.Start
	for _, r := range merged {
		if r.End <= at || r.Start >= want.End {
			continue
		}
		if r.Start > at {
			out = append(out, span{at, r.Start})
		}
		at = max(at, r.End)
	}
	if at < want.End {
		out = append(out, span{at, want.End})
	}
	return out
}

// coverageGap is one missing range of one source.
type coverageGap struct {
	source string
	span   span
}

// coverageReport compares the selection with the union of the recorded
// ranges. A selection without offset bounds is checked from each source's
// first recorded offset to its last; a named source without any range is one
// gap over the requested window (or the whole source when unbounded).
func coverageReport(ranges map[string][]span, w Where) (complete map[string][]span, missing []coverageGap) {
	complete = map[string][]span{}
	sources := make([]string, 0, len(ranges))
	if w.Source != "" {
		sources = append(sources, w.Source)
	} else {
		for s := range ranges {
			sources = append(sources, s)
		}
		sort.Strings(sources)
	}
	for _, src := range sources {
		merged := mergeSpans(ranges[src])
		want := span{Start: 0, End: 0}
		if len(merged) > 0 {
			want = span{merged[0].Start, merged[len(merged)-1].End}
		}
		if w.OffsetFrom != nil {
			want.Start = *w.OffsetFrom
		}
		if w.OffsetTo != nil {
			want.End = *w.OffsetTo
		}
		if len(merged) == 0 && (w.OffsetFrom == nil || w.OffsetTo == nil) {
			missing = append(missing, coverageGap{src, span{want.Start, want.End}})
			continue
		}
		g := gaps(merged, want)
		for _, x := range g {
			missing = append(missing, coverageGap{src, x})
		}
		complete[src] = mergeSpans(intersect(merged, want))
	}
	return complete, missing
}

func intersect(merged []span, want span) []span {
	var out []span
	for _, r := range merged {
		s, e := max(r.Start, want.Start), min(r.End, want.End)
		if s < e {
			out = append(out, span{s, e})
		}
	}
	return out
}

// reportCoverage reads the coverage table, when there is one, and logs which
// requested ranges are complete and which have gaps; with require_complete a
// gap refuses the replay.
func (in *input) reportCoverage(ctx context.Context) error {
	state, err := in.uc.Describe(ctx, in.cfg.CoverageTable)
	if err != nil {
		in.log.Warnf("zerobus_replay: coverage unknown: cannot describe the coverage table %s: %v", in.cfg.CoverageTable, err)
		return in.unknownCoverage()
	}
	if state == nil {
		in.log.Infof("zerobus_replay: coverage unknown: there is no coverage table %s (the writer recorded no coverage)", in.cfg.CoverageTable)
		return in.unknownCoverage()
	}
	ranges, err := in.readCoverage(ctx)
	if err != nil {
		in.log.Warnf("zerobus_replay: coverage unknown: %v", err)
		return in.unknownCoverage()
	}
	complete, missing := coverageReport(ranges, in.cfg.Where)
	in.mGaps.Set(int64(len(missing)))
	for src, spans := range complete {
		in.log.Infof("zerobus_replay: coverage of source %q: durable %s", src, joinSpans(spans))
	}
	if len(missing) == 0 {
		in.log.Infof("zerobus_replay: coverage complete for %s", in.cfg.Where)
		return nil
	}
	parts := make([]string, len(missing))
	for i, g := range missing {
		parts[i] = fmt.Sprintf("source %q offsets %s", g.source, g.span)
	}
	msg := fmt.Sprintf("coverage of %s has %d gaps (offsets with no durable row recorded): %s", in.cfg.Table, len(missing), strings.Join(parts, "; "))
	if in.cfg.RequireComplete {
		return fmt.Errorf("field %s: %s", fRequireComplete, msg)
	}
	in.log.Warnf("zerobus_replay: %s", msg)
	return nil
}

func (in *input) unknownCoverage() error {
	in.mGaps.Set(-1)
	if in.cfg.RequireComplete {
		return fmt.Errorf("field %s: coverage of %s is unknown (no readable coverage table %s), so completeness cannot be shown", fRequireComplete, in.cfg.Table, in.cfg.CoverageTable)
	}
	return nil
}

func joinSpans(s []span) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = x.String()
	}
	return strings.Join(parts, " ")
}

// readCoverage streams the coverage table through the REST catalog and
// collects every recorded range by source (all writers).
func (in *input) readCoverage(ctx context.Context) (map[string][]span, error) {
	parts := strings.Split(in.cfg.CoverageTable, ".")
	tbl, _, err := in.loadIdent(ctx, table.Identifier{parts[1], parts[2]})
	if err != nil {
		return nil, fmt.Errorf("load the coverage table %s through the Iceberg REST catalog: %w", in.cfg.CoverageTable, err)
	}
	out := map[string][]span{}
	if tbl.CurrentSnapshot() == nil {
		return out, nil
	}
	scan := tbl.Scan(table.WithSelectedFields(covSource, covStart, covEnd))
	defer scan.Close()
	_, recs, err := scan.ToArrowRecords(ctx)
	if err != nil {
		return nil, fmt.Errorf("scan the coverage table %s: %w", in.cfg.CoverageTable, err)
	}
	for rec, err := range recs {
		if err != nil {
			return nil, fmt.Errorf("scan the coverage table %s: %w", in.cfg.CoverageTable, err)
		}
		idx := func(name string) int {
			if i := rec.Schema().FieldIndices(name); len(i) == 1 {
				return i[0]
			}
			return -1
		}
		si, st, en := idx(covSource), idx(covStart), idx(covEnd)
		if si < 0 || st < 0 || en < 0 {
			rec.Release()
			return nil, fmt.Errorf("coverage table %s lacks one of the columns %s, %s, %s", in.cfg.CoverageTable, covSource, covStart, covEnd)
		}
		srcs, ok1 := rec.Column(si).(*array.String)
		starts, ok2 := rec.Column(st).(*array.Int64)
		ends, ok3 := rec.Column(en).(*array.Int64)
		if !ok1 || !ok2 || !ok3 {
			rec.Release()
			return nil, fmt.Errorf("coverage table %s: want %s STRING, %s BIGINT, %s BIGINT", in.cfg.CoverageTable, covSource, covStart, covEnd)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			if srcs.IsNull(i) || starts.IsNull(i) || ends.IsNull(i) {
				continue
			}
			s := srcs.Value(i)
			out[s] = append(out[s], span{starts.Value(i), ends.Value(i)})
		}
		rec.Release()
	}
	return out, nil
}
