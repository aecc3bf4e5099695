// Coverage: stamp each row's source and offset, record the offsets whose
// rows are durable, and keep the companion coverage table (internal/coverage).

package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/coverage"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// CoverageConfig turns coverage on: each row's source and offset are
// stamped into the reserved columns _zb_source and _zb_offset, and the
// offsets whose rows are durable are recorded as ranges per (writer id,
// source) in a companion table, written by a writer of its own whose ack
// lanes are of kind DerivedCoverage.
type CoverageConfig struct {
	// Table is the coverage table, catalog.schema.table; "" means
	// "<Table>_zb_coverage", in the raw table's catalog and schema.
	Table string
	// Position returns a row's source and offset (the offset as text, to
	// be parsed as an integer). An error, or an offset that is not an
	// integer, fails the row alone.
	Position func(r Row) (source, offset string, err error)
	// FlushInterval and FlushRanges tune the background coverage writes
	// (zero: coverage.DefaultFlushInterval, coverage.DefaultFlushRanges).
	FlushInterval time.Duration
	FlushRanges   int
	// Observer, when set, returns the Observer of the coverage table's
	// writer (its metrics, scoped by that table); nil: none.
	Observer func(table string) Observer
}

// CoverageSuffix names the default coverage table: "<table>_zb_coverage".
const CoverageSuffix = "_zb_coverage"

// CoverageTable is the coverage table of raw table table under c.
func (c *CoverageConfig) CoverageTable(table string) string {
	if c.Table != "" {
		return c.Table
	}
	return table + CoverageSuffix
}

// positions are the sources and offsets of a batch's rows, by batch index.
type positions struct {
	src []string
	off []int64
	bad map[int]bool // rows whose position could not be had
}

// positionsOf computes every row's position; a row whose source or offset
// fails comes back as a row error (column _zb_source or _zb_offset) and is
// left out of the batch. nil without coverage.
func (w *Writer) positionsOf(rows []Row) (*positions, []RowError) {
	cc := w.cfg.Coverage
	if cc == nil {
		return nil, nil
	}
	p := &positions{src: make([]string, len(rows)), off: make([]int64, len(rows))}
	var errs []RowError
	fail := func(i int, col string, err error) {
		if p.bad == nil {
			p.bad = map[int]bool{}
		}
		p.bad[i] = true
		errs = append(errs, RowError{Index: i, Column: col, Err: err})
	}
	for i, r := range rows {
		src, off, err := cc.Position(r)
		if err != nil {
			fail(i, arrowconv.SourceColumn, fmt.Errorf("coverage source/offset: %w", err))
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(off), 10, 64)
		if err != nil {
			fail(i, arrowconv.OffsetColumn, fmt.Errorf("coverage offset %q is not an integer", off))
			continue
		}
		p.src[i], p.off[i] = src, n
	}
	return p, errs
}

// without returns order (nil: every row of an n-row batch) minus the rows
// whose position failed.
func (p *positions) without(order []int, n int) []int {
	if p == nil || len(p.bad) == 0 {
		return order
	}
	if order == nil {
		order = make([]int, 0, n)
		for i := range n {
			order = append(order, i)
		}
	}
	return slices.DeleteFunc(slices.Clone(order), func(i int) bool { return p.bad[i] })
}

// stamp returns rec with its _zb_source and _zb_offset columns replaced by
// the positions of its rows (record row r is batch row srcIdx[r]).
func (p *positions) stamp(rec arrow.RecordBatch, srcIdx []int) (arrow.RecordBatch, error) {
	sch := rec.Schema()
	si, oi := fieldIndex(sch, arrowconv.SourceColumn), fieldIndex(sch, arrowconv.OffsetColumn)
	if si < 0 || oi < 0 {
		return nil, fmt.Errorf("the table lacks the coverage columns %s and %s", arrowconv.SourceColumn, arrowconv.OffsetColumn)
	}
	n := int(rec.NumRows())
	sb := array.NewBuilder(memory.DefaultAllocator, sch.Field(si).Type)
	defer sb.Release()
	ob := array.NewBuilder(memory.DefaultAllocator, sch.Field(oi).Type)
	defer ob.Release()
	ib, ok := ob.(*array.Int64Builder)
	if !ok {
		return nil, fmt.Errorf("column %s is %s, want BIGINT", arrowconv.OffsetColumn, sch.Field(oi).Type)
	}
	ib.Reserve(n)
	switch b := sb.(type) {
	case *array.LargeStringBuilder:
		b.Reserve(n)
		for r := range n {
			b.Append(p.src[srcIdx[r]])
		}
	case *array.StringBuilder:
		b.Reserve(n)
		for r := range n {
			b.Append(p.src[srcIdx[r]])
		}
	default:
		return nil, fmt.Errorf("column %s is %s, want STRING", arrowconv.SourceColumn, sch.Field(si).Type)
	}
	for r := range n {
		ib.Append(p.off[srcIdx[r]])
	}
	sarr, oarr := sb.NewArray(), ob.NewArray()
	defer sarr.Release()
	defer oarr.Release()
	cols := slices.Clone(rec.Columns())
	cols[si], cols[oi] = sarr, oarr
	return array.NewRecordBatch(sch, cols, int64(n)), nil
}

func fieldIndex(sch *arrow.Schema, name string) int {
	for i, f := range sch.Fields() {
		if strings.EqualFold(f.Name, name) {
			return i
		}
	}
	return -1
}

// recordDurable hands the positions of record rows [lo, hi) — whose durable
// ack has just been confirmed — to the coverage recorder. It is called only
// after a ticket's Wait returned nil, never at submission: coverage lags
// the data, never leads it.
func (w *Writer) recordDurable(p *positions, srcIdx []int, lo, hi int) {
	rec := w.cov.Load()
	if p == nil || rec == nil || lo >= hi {
		return
	}
	by := map[string]*coverage.RangeSet{}
	for r := lo; r < hi; r++ {
		i := srcIdx[r]
		s := by[p.src[i]]
		if s == nil {
			s = &coverage.RangeSet{}
			by[p.src[i]] = s
		}
		s.Add(p.off[i], p.off[i]+1)
	}
	rec.Durable(by)
}

// recording counts the Writes with coverage past admission: Close lets them
// record the coverage of the rows its drain confirmed before the final
// flush (bounded by its ctx), rather than have the recorder close under
// them and the coverage of acknowledged rows go missing.
type recording struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while none waits
}

func (r *recording) enter() {
	r.mu.Lock()
	r.n++
	r.mu.Unlock()
}

func (r *recording) leave() {
	r.mu.Lock()
	if r.n--; r.n == 0 && r.idle != nil {
		close(r.idle)
		r.idle = nil
	}
	r.mu.Unlock()
}

// wait returns once no Write is recording, or when ctx ends.
func (r *recording) wait(ctx context.Context) {
	r.mu.Lock()
	if r.n == 0 {
		r.mu.Unlock()
		return
	}
	if r.idle == nil {
		r.idle = make(chan struct{})
	}
	idle := r.idle
	r.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
	}
}

// tableReserved are the reserved columns a table this writer creates gets:
// _zb_emit_ts, plus _zb_source and _zb_offset with coverage.
func (w *Writer) tableReserved() []typemap.Column {
	cols := reservedColumns()
	if w.cfg.Coverage != nil {
		for _, r := range arrowconv.CoverageColumns() {
			cols = append(cols, r.Column())
		}
	}
	if w.cfg.Rescue != "" {
		cols = append(cols, rescueColumn(w.cfg.Rescue))
	}
	return cols
}

// missingReservedColumns returns the columns of tableReserved an existing
// table lacks and the writer adds (with provisioning): the coverage
// columns (missingCoverageColumns), then the rescue column
// (missingRescueColumn).
func (w *Writer) missingReservedColumns(cols []typemap.Column) ([]typemap.Column, error) {
	rescue, err := w.missingRescueColumn(cols)
	if err != nil {
		return nil, err
	}
	missing, err := w.missingCoverageColumns(cols)
	if err != nil {
		return nil, err
	}
	return append(missing, rescue...), nil
}

// missingCoverageColumns returns the coverage columns cols lacks (none
// without coverage); a coverage column of the wrong type is an error.
func (w *Writer) missingCoverageColumns(cols []typemap.Column) ([]typemap.Column, error) {
	if w.cfg.Coverage == nil {
		return nil, nil
	}
	var missing []typemap.Column
	for _, r := range arrowconv.CoverageColumns() {
		i := slices.IndexFunc(cols, func(c typemap.Column) bool { return strings.EqualFold(c.Name, r.Name) })
		if i < 0 {
			missing = append(missing, r.Column())
			continue
		}
		if cols[i].Type.Kind != r.Type.Kind {
			return nil, fmt.Errorf("table %s: coverage column %s is %s, want %s", w.cfg.Table, cols[i].Name, cols[i].Type.DDL(), r.Type.DDL())
		}
	}
	if len(missing) > 0 && !w.cfg.Provision {
		names := make([]string, len(missing))
		for i, c := range missing {
			names[i] = c.Name + " " + strings.ToUpper(c.Type.DDL())
		}
		return nil, fmt.Errorf("table %s lacks the coverage columns %s: add them (ALTER TABLE %s ADD COLUMNS (%s)) or enable catalog.provision",
			w.cfg.Table, strings.Join(names, ", "), w.cfg.Table, strings.Join(names, ", "))
	}
	return missing, nil
}

// ensureCoverage describes (with provisioning, creates) the coverage table
// and makes its writer and the recorder, once per writer: both, and the
// ranges the recorder holds, outlive a reopen of the raw streams. A table
// that is absent without provisioning, or lacks the coverage columns, fails
// the raw writer's Open, naming the fix. The coverage writer itself opens
// at the first flush, in the background: its streams, their faults and its
// back-off never hold a raw write.
func (w *Writer) ensureCoverage(ctx context.Context) error {
	cc := w.cfg.Coverage
	if cc == nil || w.cov.Load() != nil {
		return nil
	}
	w.covMu.Lock()
	defer w.covMu.Unlock()
	if w.cov.Load() != nil {
		return nil
	}
	table := cc.CoverageTable(w.cfg.Table)
	ts, err := w.cat.Describe(ctx, table)
	if err != nil {
		return fmt.Errorf("describe coverage table %s: %w", table, err)
	}
	if ts == nil && !w.cfg.Provision {
		return fmt.Errorf("coverage table %s does not exist and catalog.provision is false: create it (writer_id STRING, source STRING, start BIGINT, end BIGINT, _zb_emit_ts TIMESTAMP) or enable provisioning", table)
	}
	cw := w.coverageWriter(table)
	if ts == nil {
		d := cw.schema.desiredFromColumns(append(slices.Clone(cw.cfg.CreateColumns), cw.tableReserved()...))
		if ts, _, err = cw.create(ctx, d, "coverage table"); err != nil {
			return err
		}
		w.infof("coverage table %s provisioned for %s", table, w.cfg.Table)
	}
	if err := coverage.CheckColumns(table, ts.Columns); err != nil {
		return err
	}
	cw.Seed(ts) // its first Open need not describe it again
	rec := coverage.NewRecorder(coverage.Config{
		Table: table, WriterID: w.cfg.WriterID,
		FlushInterval: cc.FlushInterval, FlushRanges: cc.FlushRanges,
	}, func(ctx context.Context, rows []arrowconv.StructuredRow) error {
		created, err := cw.writeCoverage(ctx, rows)
		if created {
			// A coverage table created afresh holds none of the ranges
			// written before: write them all again.
			if rec := w.cov.Load(); rec != nil {
				rec.Rewrite()
			}
		}
		return err
	}, w.log)
	w.covW.Store(cw)
	w.cov.Store(rec)
	return nil
}

// coverageWriter is the writer of coverage table table: an ordinary Writer
// (describe, create, lifecycle and back-off, stream pool with rebuilds,
// liveness, health) whose pool's ack lanes are of kind DerivedCoverage, so
// its confirmations can never stand in for the raw table's RawAnchor ones.
// With provisioning it creates the table when absent, with the coverage
// columns, the role derived, and Iceberg reads on (the primary_raw
// properties, without the role's checks): zerobus_replay reads the coverage
// table back through the Iceberg REST catalog, as it reads the raw table,
// and a table without them is never converted to Iceberg.
func (w *Writer) coverageWriter(table string) *Writer {
	pc := w.cfg.Pool
	// A handful of rows per flush: one stream, never more.
	pc.MinStreams, pc.MaxStreams, pc.SelfSizing, pc.PeakMBps, pc.PeakRowsPerSec = 1, 1, false, 0, 0
	var obs Observer
	if w.cfg.Coverage.Observer != nil {
		obs = w.cfg.Coverage.Observer(table)
	}
	cw := New(Config{
		Table: table, WriterID: w.cfg.WriterID, Principal: w.cfg.Principal,
		Provision: w.cfg.Provision, CreateColumns: coverage.Columns(),
		CommentsPolicy: w.cfg.CommentsPolicy, Role: catalog.RoleDerived,
		Comment:          "Coverage of " + w.cfg.Table + ": ranges [start, end) of source offsets whose rows are durable there, per writer; union-merge all rows of a source.",
		CreateProperties: catalog.PrimaryRawProperties(),
		Pool:             pc, AckTimeout: w.cfg.AckTimeout, ConnectTimeout: w.cfg.ConnectTimeout,
		RedescribeTimeout: w.cfg.RedescribeTimeout, HealthInterval: w.cfg.HealthInterval,
	}, w.opener, w.cat, w.log, obs)
	cw.newPool = pool.NewOf[acklane.DerivedCoverage]
	cw.life.subject = "coverage table"
	cw.life.held = fmt.Sprintf("The coverage ranges are kept and written once it takes them again; the rows of %s keep flowing", w.cfg.Table)
	return cw
}

// writeCoverage is the recorder's Sink, on the coverage writer: it writes
// rows through it, opening it when it is not open (the first flush, or after
// its streams stopped). While its lifecycle backs off, Open tries nothing
// and says how long is left: the recorder keeps the ranges for the next
// flush. created reports that this write created the table (it had been
// dropped, and provisioning re-created it).
func (w *Writer) writeCoverage(ctx context.Context, rows []arrowconv.StructuredRow) (created bool, err error) {
	// Only the recorder writes through this writer, one flush at a time:
	// a table it created meanwhile (waiting for the table, the write
	// creates it; found dropped, the Open creates it again) is this
	// flush's doing.
	before := w.schema.creates.Load()
	defer func() { created = w.schema.creates.Load() != before }()
	rowErrs, err := w.Write(ctx, rows, nil)
	if errors.Is(err, ErrNotOpen) {
		if oerr := w.Open(ctx); oerr != nil {
			return created, oerr
		}
		rowErrs, err = w.Write(ctx, rows, nil)
	}
	if err != nil {
		return created, err
	}
	if len(rowErrs) > 0 {
		// Written again whole at the next flush: a coverage row written
		// twice changes no union.
		re := rowErrs[0]
		return created, fmt.Errorf("%d of %d rows not durable in %s (row %d, column %q: %w)", len(rowErrs), len(rows), w.cfg.Table, re.Index, re.Column, re.Err)
	}
	return created, nil
}

// Coverage returns the writer's coverage recorder: nil without coverage or
// before the table is open.
func (w *Writer) Coverage() *coverage.Recorder { return w.cov.Load() }

// CoverageWriter returns the coverage table's writer: nil without coverage
// or before the table is open.
func (w *Writer) CoverageWriter() *Writer { return w.covW.Load() }

// CoverageHealth returns a snapshot of the coverage writer of the engine's
// table writer, or of every table writer its router holds open, by table
// name; none without coverage or before the coverage writer first opened.
func (e *Engine) CoverageHealth() []TableHealth {
	var ws []*Writer
	if e.Writer != nil {
		ws = append(ws, e.Writer)
	}
	if e.Router != nil {
		ws = append(ws, e.Router.writers()...)
	}
	var out []TableHealth
	for _, w := range ws {
		// Never opened: nothing to report yet (it opens at the first
		// flush with ranges to write).
		if cw := w.CoverageWriter(); cw != nil && cw.Phase() != PhaseIdle {
			out = append(out, cw.Health())
		}
	}
	slices.SortFunc(out, func(a, b TableHealth) int { return strings.Compare(a.Table, b.Table) })
	return out
}

// closeCoverage writes the last changed ranges (bounded by ctx), stops the
// recorder and closes the coverage writer. A failure is logged, never
// returned: raw rows are durable whatever the coverage table holds, which
// may only lag them.
func (w *Writer) closeCoverage(ctx context.Context) {
	rec := w.cov.Swap(nil)
	if rec == nil {
		return
	}
	if err := rec.Close(ctx); err != nil {
		w.warnf("%v; the coverage of %s lags its rows (they are durable)", err, w.cfg.Table)
	}
	if cw := w.covW.Swap(nil); cw != nil {
		if err := cw.Close(ctx); err != nil {
			w.log.Debug(fmt.Sprintf("close coverage writer: %v", err))
		}
	}
}
