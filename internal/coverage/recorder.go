package coverage

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Column names of a coverage table.
const (
	ColWriterID = "writer_id"
	ColSource   = "source"
	ColStart    = "start"
	ColEnd      = "end"
)

// Columns are the columns of a coverage table (the table writer adds its
// reserved _zb_emit_ts when it creates it): one row is one range of offsets
// of one source that one writer found durable in the raw table.
func Columns() []typemap.Column {
	str, long := typemap.Primitive(typemap.String), typemap.Primitive(typemap.Long)
	return []typemap.Column{
		{Name: ColWriterID, Type: str, Nullable: true, Comment: "The writer (the output's label) whose rows the range records."},
		{Name: ColSource, Type: str, Nullable: true, Comment: "The source the offsets belong to (e.g. topic/partition)."},
		{Name: ColStart, Type: long, Nullable: true, Comment: "First offset of the range (inclusive)."},
		{Name: ColEnd, Type: long, Nullable: true, Comment: "End of the range (exclusive). Readers union-merge every row of a source: coverage may lag the raw table, never lead it."},
	}
}

// Defaults of a Recorder's Config.
const (
	DefaultFlushInterval = time.Second
	DefaultFlushRanges   = 1024
	DefaultWriteTimeout  = 30 * time.Second
	// maxRowsPerRecord bounds one coverage record (a row is ~100 bytes, so
	// a record stays far below the service's request cap).
	maxRowsPerRecord = 4096
)

// Config tunes a Recorder.
type Config struct {
	// Table is the coverage table, catalog.schema.table.
	Table string
	// WriterID is stamped on every row.
	WriterID string
	// Columns are the coverage table's columns as described (Columns plus
	// the reserved ones).
	Columns []typemap.Column
	// FlushInterval is how often changed ranges are written (zero:
	// DefaultFlushInterval).
	FlushInterval time.Duration
	// FlushRanges flushes early once this many changed ranges wait (zero:
	// DefaultFlushRanges).
	FlushRanges int
	// WriteTimeout bounds one coverage write, submit to durable ack (zero:
	// DefaultWriteTimeout).
	WriteTimeout time.Duration
}

// Recorder holds one writer's coverage, source by source, and writes the
// ranges that changed to the coverage table in the background. It is fed
// only with offsets whose raw rows are durable (Durable), and nothing on the
// raw path ever waits for it: a coverage write that fails is logged and
// retried at the next flush, with the changed ranges kept.
//
// Its stream to the coverage table has its own ack lane of kind
// DerivedCoverage, so its confirmations cannot be mistaken for the raw
// table's (RawAnchor) at compile time.
type Recorder struct {
	cfg    Config
	opener ingest.Opener
	log    *slog.Logger
	conv   *arrowconv.Converter

	mu      sync.Mutex
	durable map[string]*RangeSet // every offset confirmed durable, by source
	dirty   map[string]*RangeSet // offsets added since the last written flush
	nDirty  int                  // ranges added to dirty since then (an upper bound)

	kick     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}

	// flushMu serialises flushes and guards the stream and its lane.
	flushMu  sync.Mutex
	stream   ingest.Stream
	lane     *acklane.Lane[acklane.DerivedCoverage]
	written  int64 // coverage rows confirmed durable
	failures int64 // flushes that failed
}

// NewRecorder returns a recorder writing cfg.Table through opener and starts
// its flush loop. log may be nil.
func NewRecorder(cfg Config, opener ingest.Opener, log *slog.Logger) (*Recorder, error) {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.FlushRanges <= 0 {
		cfg.FlushRanges = DefaultFlushRanges
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, want := range Columns() {
		if !hasColumn(cfg.Columns, want) {
			return nil, fmt.Errorf("coverage table %s lacks column %s %s: create it with columns writer_id STRING, source STRING, start BIGINT, end BIGINT, _zb_emit_ts TIMESTAMP, or enable catalog.provision", cfg.Table, want.Name, strings.ToUpper(want.Type.DDL()))
		}
	}
	conv, err := arrowconv.New(cfg.Columns, arrowconv.Options{})
	if err != nil {
		return nil, fmt.Errorf("coverage table %s: %w", cfg.Table, err)
	}
	r := &Recorder{
		cfg: cfg, opener: opener, log: log, conv: conv,
		durable: map[string]*RangeSet{}, dirty: map[string]*RangeSet{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go r.loop()
	return r, nil
}

func hasColumn(cols []typemap.Column, want typemap.Column) bool {
	for _, c := range cols {
		if strings.EqualFold(c.Name, want.Name) {
			return c.Type.Kind == want.Type.Kind
		}
	}
	return false
}

// Durable records offsets whose raw rows the service confirmed durable, by
// source. Call it only after the durable ack (the ticket's confirmation),
// never at submission: that is what keeps coverage from leading the data.
func (r *Recorder) Durable(bySource map[string]*RangeSet) {
	if len(bySource) == 0 {
		return
	}
	r.mu.Lock()
	for src, set := range bySource {
		unionInto(r.durable, src, set)
		r.markDirtyLocked(src, set)
	}
	full := r.nDirty >= r.cfg.FlushRanges
	r.mu.Unlock()
	if full {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// markDirtyLocked adds set to the ranges of src the next flush writes.
func (r *Recorder) markDirtyLocked(src string, set *RangeSet) {
	unionInto(r.dirty, src, set)
	r.nDirty += set.Len()
}

// unionInto adds set to m[src], creating it when absent.
func unionInto(m map[string]*RangeSet, src string, set *RangeSet) {
	d := m[src]
	if d == nil {
		d = &RangeSet{}
		m[src] = d
	}
	d.Union(set)
}

// Covered returns the ranges of source recorded durable so far (written to
// the coverage table or not).
func (r *Recorder) Covered(source string) []Range {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d := r.durable[source]; d != nil {
		return d.Ranges()
	}
	return nil
}

// Stats are a recorder's counters.
type Stats struct {
	// Written counts coverage rows confirmed durable.
	Written int64
	// Failures counts flushes that failed (and were retried later).
	Failures int64
	// Pending counts the sources with ranges not yet written.
	Pending int
}

// Stats returns the recorder's counters.
func (r *Recorder) Stats() Stats {
	r.flushMu.Lock()
	s := Stats{Written: r.written, Failures: r.failures}
	r.flushMu.Unlock()
	r.mu.Lock()
	s.Pending = len(r.dirty)
	r.mu.Unlock()
	return s
}

func (r *Recorder) loop() {
	defer close(r.done)
	t := time.NewTicker(r.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		case <-r.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.WriteTimeout)
		if err := r.Flush(ctx); err != nil {
			r.log.Warn(fmt.Sprintf("coverage table %s: %v; the ranges are kept and written at the next flush (raw writes are not affected)", r.cfg.Table, err))
		}
		cancel()
	}
}

// Flush writes the ranges that changed since the last flush and returns
// once they are durable in the coverage table. For each source it writes
// the merged durable ranges that overlap or touch a change, so the table's
// rows grow coarser over time and a reader's union is always the writer's
// durable set as of the last flush. On failure the changes are kept for the
// next flush and the stream is reopened then.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	taken := r.dirty
	r.dirty, r.nDirty = map[string]*RangeSet{}, 0
	rows := r.rowsLocked(taken)
	r.mu.Unlock()
	if len(rows) == 0 {
		return nil
	}
	if err := r.write(ctx, rows); err != nil {
		r.failures++
		r.mu.Lock()
		for src, set := range taken {
			r.markDirtyLocked(src, set)
		}
		r.mu.Unlock()
		return fmt.Errorf("write %d coverage rows: %w", len(rows), err)
	}
	r.written += int64(len(rows))
	return nil
}

// row is one coverage row.
type row struct {
	WriterID string `json:"writer_id"`
	Source   string `json:"source"`
	Start    int64  `json:"start"`
	End      int64  `json:"end"`
}

// rowsLocked lists the rows to write for the changes in taken, sources in
// order; r.mu is held.
func (r *Recorder) rowsLocked(taken map[string]*RangeSet) []row {
	sources := make([]string, 0, len(taken))
	for src := range taken {
		sources = append(sources, src)
	}
	sort.Strings(sources)
	var out []row
	for _, src := range sources {
		var touched RangeSet
		for _, c := range taken[src].r {
			for _, d := range r.durable[src].Overlapping(c) {
				touched.AddRange(d)
			}
		}
		for _, d := range touched.r {
			out = append(out, row{WriterID: r.cfg.WriterID, Source: src, Start: d.Start, End: d.End})
		}
	}
	return out
}

// write submits rows on the coverage stream (opened on demand) and waits
// for the DerivedCoverage confirmation of its lane.
func (r *Recorder) write(ctx context.Context, rows []row) error {
	if err := r.connect(ctx); err != nil {
		return err
	}
	var last *acklane.Receipt
	for lo := 0; lo < len(rows); lo += maxRowsPerRecord {
		chunk := rows[lo:min(lo+maxRowsPerRecord, len(rows))]
		msgs := make([]arrowconv.Row, len(chunk))
		for i, c := range chunk {
			b, err := json.Marshal(c)
			if err != nil {
				return fmt.Errorf("coverage row %d: %w", lo+i, err)
			}
			msgs[i] = arrowconv.JSONRow(b)
		}
		res, err := r.conv.Convert(msgs)
		if err != nil {
			return fmt.Errorf("convert coverage rows: %w", err)
		}
		if len(res.RowErrors) > 0 {
			res.Record.Release()
			return fmt.Errorf("coverage table %s refuses its rows: %v", r.cfg.Table, res.RowErrors[0])
		}
		span, err := r.stream.Submit(ctx, res.Record)
		res.Record.Release()
		if err != nil {
			r.teardown()
			return fmt.Errorf("submit to %s: %w", r.cfg.Table, err)
		}
		confirm, receipt := acklane.NewDerivedCoverage()
		if err := r.lane.Enqueue(ctx, acklane.Pending[acklane.DerivedCoverage]{To: span.To, Confirm: confirm}); err != nil {
			r.teardown()
			return fmt.Errorf("track coverage rows [%d,%d) on %s: %w", span.From, span.To, r.cfg.Table, err)
		}
		last = receipt
	}
	// Acks are cumulative and the lane confirms in offset order: the last
	// receipt confirmed means every chunk is durable.
	if err := last.Wait(ctx); err != nil {
		r.teardown()
		return fmt.Errorf("coverage rows not confirmed durable in %s: %w", r.cfg.Table, err)
	}
	return nil
}

// connect opens the coverage stream and its DerivedCoverage lane if none
// is up; flushMu is held.
func (r *Recorder) connect(ctx context.Context) error {
	if r.stream != nil {
		return nil
	}
	s, err := r.opener.Open(ctx, r.cfg.Table, r.conv.Schema())
	if err != nil {
		return fmt.Errorf("open stream to %s: %w", r.cfg.Table, err)
	}
	r.stream = s
	r.lane = acklane.New[acklane.DerivedCoverage](s, acklane.Config{AckTimeout: r.cfg.WriteTimeout}, nil)
	return nil
}

// teardown drops the stream (its unconfirmed rows fail; the ranges stay
// dirty) so the next flush opens a new one; flushMu is held.
func (r *Recorder) teardown() {
	if r.lane != nil {
		r.lane.Close()
	}
	if r.stream != nil {
		_ = r.stream.Close()
	}
	r.stream, r.lane = nil, nil
}

// Close stops the flush loop, writes what changed since the last flush
// (bounded by ctx) and closes the stream. Ranges not written by then are
// lost to the coverage table — coverage lags, the raw rows are there — and
// the error says how many sources they concern.
func (r *Recorder) Close(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stop) })
	<-r.done
	err := r.Flush(ctx)
	r.flushMu.Lock()
	if r.stream != nil {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = r.stream.Drain(dctx)
		cancel()
	}
	r.teardown()
	r.flushMu.Unlock()
	if err != nil {
		return fmt.Errorf("coverage table %s: final flush: %w", r.cfg.Table, err)
	}
	return nil
}
