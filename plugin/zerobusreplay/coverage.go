package zerobusreplay

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/coverage"
)

// coverageGap is one missing range of one source.
type coverageGap struct {
	source string
	span   coverage.Range
}

// coverageReport compares the selection with the union of the recorded
// ranges. A selection without offset bounds is checked from each source's
// first recorded offset to its last; a named source without any range is one
// gap over the requested window (or the whole source when unbounded).
func coverageReport(ranges map[string]*coverage.RangeSet, w Where) (complete map[string][]coverage.Range, missing []coverageGap) {
	complete = map[string][]coverage.Range{}
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
		set := ranges[src]
		if set == nil {
			set = &coverage.RangeSet{}
		}
		merged := set.Ranges()
		want := coverage.Range{}
		if len(merged) > 0 {
			want = coverage.Range{Start: merged[0].Start, End: merged[len(merged)-1].End}
		}
		if w.OffsetFrom != nil {
			want.Start = *w.OffsetFrom
		}
		if w.OffsetTo != nil {
			want.End = *w.OffsetTo
		}
		if len(merged) == 0 && (w.OffsetFrom == nil || w.OffsetTo == nil) {
			missing = append(missing, coverageGap{src, want})
			continue
		}
		for _, g := range set.Gaps(want.Start, want.End) {
			missing = append(missing, coverageGap{src, g})
		}
		complete[src] = clip(merged, want)
	}
	return complete, missing
}

// clip returns the parts of the sorted, disjoint ranges that lie in want.
func clip(merged []coverage.Range, want coverage.Range) []coverage.Range {
	var out []coverage.Range
	for _, r := range merged {
		s, e := max(r.Start, want.Start), min(r.End, want.End)
		if s < e {
			out = append(out, coverage.Range{Start: s, End: e})
		}
	}
	return out
}

// convertCoverage makes, with consistency: force, the catalog convert the
// coverage table too, so the report sees the ranges of the rows the replay
// reads. It runs before the raw table's conversion: coverage only names
// rows already durable, so ranges visible then are in the raw snapshot
// pinned afterwards. Without a coverage table it does nothing.
func (in *input) convertCoverage(ctx context.Context) error {
	if in.cfg.Consistency != ConsistencyForce {
		return nil
	}
	state, err := in.uc.Describe(ctx, in.cfg.CoverageTable)
	if err != nil || state == nil || !catalog.IcebergReadsOn(state.Properties) {
		return nil // reportCoverage says why coverage is unknown
	}
	if state, err = in.firstConversion(ctx, state); err != nil {
		return err
	}
	tbl, cfg, err := in.loadIdent(ctx, restIdent(in.cfg.CoverageTable))
	if err != nil {
		return fmt.Errorf("load the coverage table %s through the Iceberg REST catalog: %w", in.cfg.CoverageTable, err)
	}
	converted := convertedVersion(state)
	dl, err := readDeltaLog(ctx, cfg, tbl.Location(), converted)
	if err != nil {
		return fmt.Errorf("read the Delta log of the coverage table %s: %w", in.cfg.CoverageTable, err)
	}
	if dl.version <= converted {
		return nil
	}
	in.log.Infof("zerobus_replay: Iceberg metadata of the coverage table %s lags (converted %d, Delta %d): converting it too", in.cfg.CoverageTable, converted, dl.version)
	return in.syncMetadata(ctx, in.cfg.CoverageTable, dl.version)
}

// reportCoverage reads the coverage table, when there is one, and logs which
// requested ranges are complete and which have gaps; with require_complete a
// gap refuses the replay.
func (in *input) reportCoverage(ctx context.Context) error {
	state, err := in.uc.Describe(ctx, in.cfg.CoverageTable)
	if err != nil {
		in.log.Warnf("zerobus_replay: coverage unknown: cannot describe the coverage table %s: %v", in.cfg.CoverageTable, err)
		return in.unknownCoverage(err)
	}
	if state == nil {
		in.log.Infof("zerobus_replay: coverage unknown: there is no coverage table %s (the writer recorded no coverage)", in.cfg.CoverageTable)
		return in.unknownCoverage(nil)
	}
	if !catalog.IcebergReadsOn(state.Properties) {
		in.log.Warnf("zerobus_replay: coverage unknown: the coverage table %s has no Iceberg reads, so the Iceberg REST catalog cannot serve it (turn them on with ALTER TABLE %s SET TBLPROPERTIES ('%s' = 'iceberg', '%s' = 'true'); tables the zerobus output provisions have them)",
			in.cfg.CoverageTable, in.cfg.CoverageTable, catalog.PropUniversalFormats, catalog.PropIcebergCompatV2)
		return in.unknownCoverage(nil)
	}
	ranges, err := in.readCoverage(ctx)
	if err != nil {
		in.log.Warnf("zerobus_replay: coverage unknown: %v", err)
		return in.unknownCoverage(err)
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
		return refuse(fmt.Errorf("field %s: %s", fRequireComplete, msg))
	}
	in.log.Warnf("zerobus_replay: %s", msg)
	return nil
}

// unknownCoverage handles a coverage table that could not be read (cause;
// nil when there is none): with require_complete that refuses the replay,
// unless the cause may pass (retried then).
func (in *input) unknownCoverage(cause error) error {
	in.mGaps.Set(-1)
	if !in.cfg.RequireComplete {
		return nil
	}
	err := fmt.Errorf("field %s: coverage of %s is unknown (no readable coverage table %s), so completeness cannot be shown", fRequireComplete, in.cfg.Table, in.cfg.CoverageTable)
	if cause != nil && !isRefusal(cause) {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return refuse(err)
}

func joinSpans(s []coverage.Range) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = x.String()
	}
	return strings.Join(parts, " ")
}

// readCoverage streams the coverage table through the REST catalog and
// collects every recorded range by source (all writers).
func (in *input) readCoverage(ctx context.Context) (map[string]*coverage.RangeSet, error) {
	tbl, _, err := in.loadIdent(ctx, restIdent(in.cfg.CoverageTable))
	if err != nil {
		return nil, fmt.Errorf("load the coverage table %s through the Iceberg REST catalog: %w", in.cfg.CoverageTable, err)
	}
	out := map[string]*coverage.RangeSet{}
	if tbl.CurrentSnapshot() == nil {
		return out, nil
	}
	scan := tbl.Scan(table.WithSelectedFields(coverage.ColSource, coverage.ColStart, coverage.ColEnd))
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
		si, st, en := idx(coverage.ColSource), idx(coverage.ColStart), idx(coverage.ColEnd)
		if si < 0 || st < 0 || en < 0 {
			rec.Release()
			return nil, fmt.Errorf("coverage table %s lacks one of the columns %s, %s, %s", in.cfg.CoverageTable, coverage.ColSource, coverage.ColStart, coverage.ColEnd)
		}
		srcs, ok1 := rec.Column(si).(*array.String)
		starts, ok2 := rec.Column(st).(*array.Int64)
		ends, ok3 := rec.Column(en).(*array.Int64)
		if !ok1 || !ok2 || !ok3 {
			rec.Release()
			return nil, fmt.Errorf("coverage table %s: want %s STRING, %s BIGINT, %s BIGINT", in.cfg.CoverageTable, coverage.ColSource, coverage.ColStart, coverage.ColEnd)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			if srcs.IsNull(i) || starts.IsNull(i) || ends.IsNull(i) {
				continue
			}
			s := srcs.Value(i)
			if out[s] == nil {
				out[s] = &coverage.RangeSet{}
			}
			out[s].Add(starts.Value(i), ends.Value(i))
		}
		rec.Release()
	}
	return out, nil
}
