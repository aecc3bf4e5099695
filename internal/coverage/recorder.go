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

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
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

// CheckColumns returns an error naming the first coverage column that cols
// (a coverage table's columns as described) lacks or types otherwise, and
// the fix; nil when the table can take coverage rows.
func CheckColumns(table string, cols []typemap.Column) error {
	for _, want := range Columns() {
		if !hasColumn(cols, want) {
			return fmt.Errorf("coverage table %s lacks column %s %s: create it with columns writer_id STRING, source STRING, start BIGINT, end BIGINT, _zb_emit_ts TIMESTAMP, or enable catalog.provision", table, want.Name, strings.ToUpper(want.Type.DDL()))
		}
	}
	return nil
}

func hasColumn(cols []typemap.Column, want typemap.Column) bool {
	for _, c := range cols {
		if strings.EqualFold(c.Name, want.Name) {
			return c.Type.Kind == want.Type.Kind
		}
	}
	return false
}

// Defaults of a Recorder's Config.
const (
	DefaultFlushInterval = time.Second
	DefaultFlushRanges   = 1024
	DefaultWriteTimeout  = 30 * time.Second
	// maxRowsPerWrite bounds the rows of one Sink call (a row is ~100
	// bytes, so a write stays far below the service's request cap).
	maxRowsPerWrite = 4096
)

// Config tunes a Recorder.
type Config struct {
	// Table is the coverage table, catalog.schema.table (for messages).
	Table string
	// WriterID is stamped on every row.
	WriterID string
	// FlushInterval is how often changed ranges are written (zero:
	// DefaultFlushInterval).
	FlushInterval time.Duration
	// FlushRanges flushes early once this many changed ranges wait (zero:
	// DefaultFlushRanges).
	FlushRanges int
	// WriteTimeout bounds one background flush, its writes until durable
	// (zero: DefaultWriteTimeout).
	WriteTimeout time.Duration
}

// Sink writes coverage rows (JSON objects with the Columns) to the coverage
// table and returns nil only once they are durable there. The table writer
// provides it: an ordinary table writer of the coverage table whose streams
// have ack lanes of kind DerivedCoverage, so a coverage confirmation can
// never stand in for a raw table's (RawAnchor).
type Sink func(ctx context.Context, rows []arrowconv.StructuredRow) error

// Recorder holds one writer's coverage, source by source, and writes the
// ranges that changed to the coverage table in the background, through its
// Sink. It is fed only with offsets whose raw rows are durable (Durable),
// and nothing on the raw path ever waits for it: a coverage write that
// fails is logged and retried at the next flush, with the changed ranges
// kept. How the rows reach the table (streams, reconnects, back-off) is the
// Sink's business.
type Recorder struct {
	cfg   Config
	write Sink
	log   *slog.Logger

	mu      sync.Mutex
	durable map[string]*RangeSet // every offset confirmed durable, by source
	dirty   map[string]*RangeSet // offsets added since the last written flush
	nDirty  int                  // ranges added to dirty since then (an upper bound)
	// rewrite is set by Rewrite and cleared when a flush takes the
	// changes: Close flushes again while it is set.
	rewrite bool

	kick     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	// loopCtx ends when Close begins: a background flush in progress
	// gives up then, and Close's own final flush takes over.
	loopCtx    context.Context
	loopCancel context.CancelFunc

	// flushMu serialises flushes and guards the counters.
	flushMu  sync.Mutex
	written  int64 // coverage rows confirmed durable
	failures int64 // flushes that failed
	failing  int   // flushes failed in a row (the first one's warning was logged)
}

// NewRecorder returns a recorder writing cfg.Table through write and starts
// its flush loop. log may be nil.
func NewRecorder(cfg Config, write Sink, log *slog.Logger) *Recorder {
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
	r := &Recorder{
		cfg: cfg, write: write, log: log,
		durable: map[string]*RangeSet{}, dirty: map[string]*RangeSet{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	r.loopCtx, r.loopCancel = context.WithCancel(context.Background())
	go r.loop()
	return r
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

// Rewrite marks every durable range changed, so the next flush, started
// at once, writes the whole coverage again: for a coverage table created
// afresh (dropped, then re-created by provisioning), which holds none of the
// ranges written before.
func (r *Recorder) Rewrite() {
	r.mu.Lock()
	for src, set := range r.durable {
		r.markDirtyLocked(src, set)
	}
	r.rewrite = true
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
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
		ctx, cancel := context.WithTimeout(r.loopCtx, r.cfg.WriteTimeout)
		_ = r.Flush(ctx) // a failure is logged by Flush and retried at the next one
		cancel()
	}
}

// Flush writes the ranges that changed since the last flush and returns
// once they are durable in the coverage table. For each source it writes
// the merged durable ranges that overlap or touch a change, so the table's
// rows grow coarser over time and a reader's union is always the writer's
// durable set as of the last flush. On failure the changes are kept for the
// next flush; the first failure of a run is logged as a warning, the next
// ones at debug level (the Sink's writer explains its cause once), and the
// first success after them says so. Once Close began, failures are not
// logged: Close returns its final flush's error.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	taken := r.dirty
	r.dirty, r.nDirty, r.rewrite = map[string]*RangeSet{}, 0, false
	rows := r.rowsLocked(taken)
	r.mu.Unlock()
	if len(rows) == 0 {
		return nil
	}
	if err := r.writeRows(ctx, rows); err != nil {
		r.failures++
		r.mu.Lock()
		for src, set := range taken {
			r.markDirtyLocked(src, set)
		}
		r.mu.Unlock()
		err = fmt.Errorf("write %d coverage rows: %w", len(rows), err)
		msg := fmt.Sprintf("coverage table %s: %v; the ranges are kept and written at the next flush (raw writes are not affected)", r.cfg.Table, err)
		switch {
		case r.loopCtx.Err() != nil:
			// Closing: Close returns the final flush's error, and a
			// background flush cut short by Close is no news.
		case r.failing > 0:
			r.log.Debug(msg)
		default:
			r.log.Warn(msg)
		}
		r.failing++
		return err
	}
	if r.failing > 0 {
		r.log.Info(fmt.Sprintf("coverage table %s: written again after %d failed flushes; the ranges kept meanwhile are written", r.cfg.Table, r.failing))
		r.failing = 0
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

// writeRows hands rows to the Sink, at most maxRowsPerWrite at a time, and
// returns once every one is durable.
func (r *Recorder) writeRows(ctx context.Context, rows []row) error {
	for lo := 0; lo < len(rows); lo += maxRowsPerWrite {
		chunk := rows[lo:min(lo+maxRowsPerWrite, len(rows))]
		msgs := make([]arrowconv.StructuredRow, len(chunk))
		for i, c := range chunk {
			b, err := json.Marshal(c)
			if err != nil {
				return fmt.Errorf("coverage row %d: %w", lo+i, err)
			}
			msgs[i] = arrowconv.JSONRow(b)
		}
		if err := r.write(ctx, msgs); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the flush loop (a background flush in progress gives up) and
// writes what changed since the last written flush (and, when that write
// created the coverage table afresh, the whole coverage again), bounded by
// ctx. Ranges
// not written by then are lost to the coverage table — coverage lags, the
// raw rows are there — and the error says so. The Sink's writer is its
// owner's to close, after this.
func (r *Recorder) Close(ctx context.Context) error {
	r.stopOnce.Do(func() {
		close(r.stop)
		r.loopCancel()
	})
	<-r.done
	// A final flush whose write created the coverage table afresh asks for
	// the whole coverage again (Rewrite), and no loop is left to write it.
	for range maxCloseFlushes {
		if err := r.Flush(ctx); err != nil {
			return fmt.Errorf("coverage table %s: final flush: %w", r.cfg.Table, err)
		}
		r.mu.Lock()
		again := r.rewrite
		r.mu.Unlock()
		if !again {
			return nil
		}
	}
	return fmt.Errorf("coverage table %s: final flush: the table was created afresh %d times in a row; the coverage rewrite is left undone", r.cfg.Table, maxCloseFlushes)
}

// maxCloseFlushes bounds Close's flushes: the final one and the rewrites
// it asked for.
const maxCloseFlushes = 3
