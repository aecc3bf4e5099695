// Package tablewriter is the engine behind the zerobus output: a Writer owns
// one target table's whole lifecycle — describe, create on absent, evolve on
// drift, widen, re-describe after a schema rejection, the primary-raw watch,
// the stream pool — and the path of one batch: convert → submit → wait until
// durable.
//
// It knows nothing of Benthos. The output (plugin/zerobus) builds its Config,
// opener and catalog, maps row errors to a batch error, a concurrency reject
// to a back-off and ErrNotOpen to "not connected"; tests drive it directly
// with ingestfake and catalogfake.
//
// Its phases (idle, opening, open, waiting for the table, backing off,
// draining, closed) and the one decision of when to open again after a
// failure live in lifecycle.go; what it knows of its streams' connections,
// in liveness.go.
//
// Follow one batch: Write (this file) → writeOnce, layout, convert
// (write.go; convert may evolve the table: evolve in schema.go, widenings in
// widen.go) → submitAndWait: pool.Write per stream group, then each ticket's
// Wait, which the stream's ack lane settles after the durable ack.
package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/coverage"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Row is one message to write: its bytes, and possibly a value already
// decoded (*service.Message satisfies it).
type Row = arrowconv.StructuredRow

// RowError is a row that failed alone, naming its index in the batch and the
// column.
type RowError = arrowconv.RowError

// KeyFunc returns the ordering key of row i of a batch: rows of one key
// always travel on one stream, in order; "" spreads the row round-robin. An
// error fails row i alone (column OrderingKeyColumn).
type KeyFunc func(i int) (string, error)

// OrderingKeyColumn names the ordering key in the row error of a row whose
// key could not be computed.
const OrderingKeyColumn = "ordering_key"

// ErrNotOpen is returned by Write while the writer is not open: before Open,
// and after its streams stopped for good (a fatal configuration error, or
// every stream out of rebuilds). Open again to recover; nothing submitted is
// acknowledged meanwhile.
var ErrNotOpen = errors.New("tablewriter: not open")

// ErrClosed is returned by Open and Write after Close.
var ErrClosed = errors.New("tablewriter: closed")

// Config is what a Writer needs to know of its table and its knobs. The zero
// value of every duration means the package default.
type Config struct {
	// Table is the three-part name catalog.schema.table.
	Table string
	// WriterID identifies this writer in the table's writer registration.
	WriterID string
	// Principal is the service principal's application id (the OAuth
	// client id), named in the grants a refusal asks for; "" when unknown.
	Principal string
	// Provision creates the table when absent and adds columns on drift.
	Provision bool
	// CreateColumns are the columns an absent table is created with (plus
	// the reserved ones); nil: inferred from the first batch.
	CreateColumns []typemap.Column
	// Widen widens a narrow numeric column when a value outgrows it (with
	// Provision).
	Widen              bool
	CommentsPolicy     catalog.Policy
	Contract           *catalog.Contract // loaded once by the caller; nil: none
	ColumnDescriptions map[string]string
	Role               catalog.Role
	// RecheckInterval is how often the primary-raw preconditions are
	// re-checked.
	RecheckInterval time.Duration
	// Convert tunes the converter.
	Convert arrowconv.Options
	// Pool sizes and tunes the stream pool.
	Pool pool.Config
	// AckTimeout bounds the wait for one batch to be durable; past it the
	// batch fails (and is redelivered), never acknowledged.
	AckTimeout time.Duration
	// ConnectTimeout bounds one Open's wait for a healthy stream.
	ConnectTimeout time.Duration
	// RedescribeTimeout bounds a re-describe after a schema rejection.
	RedescribeTimeout time.Duration
	// SchemaRefreshInterval is the least time between two re-describes
	// triggered by rows carrying fields the table lacks (without Provision).
	SchemaRefreshInterval time.Duration
	// MaxInFlightBytes bounds the data of the batches Write converts,
	// sends and waits for at once (zero: DefaultMaxInFlightBytes). Write
	// reserves a batch's bytes before converting it, waiting under its ctx,
	// and holds them until the batch is durable or failed; a batch larger
	// than the whole budget is admitted alone. The estimate is the
	// messages' bytes (for messages holding only a decoded value, the Arrow
	// bytes per row of the last converted batch; before the first one, the
	// whole budget), corrected to the Arrow size once converted.
	//
	// It is also the bound, in bytes, of what the pool's ack lanes hold:
	// every claim in a lane belongs to a Write that holds its reservation
	// until the claim settles, so a lane's AckChannelCapacity (a count of
	// claims) is never what limits memory.
	MaxInFlightBytes int64
	// Coverage, when set, stamps each row's source and offset and records
	// the durable ranges in a companion table (see CoverageConfig).
	Coverage *CoverageConfig
	// HealthInterval is how often an Observer that is a HealthObserver is
	// given the writer's Health (zero: DefaultHealthInterval).
	HealthInterval time.Duration
	// Rescue names a nullable VARIANT rescue column (created or, with
	// Provision, added): the fields that do not fit go there instead of
	// failing the row (rescue.go). Empty: none.
	Rescue string
	// Comment is the table comment asked for (comments policy permitting);
	// CreateProperties are set on a table this writer creates, never on an
	// existing one. The coverage table's writer sets both.
	Comment          string
	CreateProperties map[string]string
}

// Defaults of the Config durations.
const (
	DefaultAckTimeout        = 5 * time.Minute
	DefaultConnectTimeout    = 30 * time.Second
	DefaultRedescribeTimeout = 30 * time.Second
	DefaultRecheckInterval   = 5 * time.Minute
	DefaultSchemaRefresh     = 30 * time.Second
)

func (c Config) withDefaults() Config {
	if c.AckTimeout <= 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.RedescribeTimeout <= 0 {
		c.RedescribeTimeout = DefaultRedescribeTimeout
	}
	if c.RecheckInterval <= 0 {
		c.RecheckInterval = DefaultRecheckInterval
	}
	if c.SchemaRefreshInterval == 0 {
		c.SchemaRefreshInterval = DefaultSchemaRefresh
	}
	if c.MaxInFlightBytes <= 0 {
		c.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if c.HealthInterval <= 0 {
		c.HealthInterval = DefaultHealthInterval
	}
	return c
}

// Observer receives the writer's metrics. Every method may be called
// concurrently and must be cheap.
type Observer interface {
	pool.Observer
	// Sent counts rows and bytes confirmed durable on a stream.
	Sent(stream int, rows, bytes int64)
	// RowErrors counts rows that failed alone.
	RowErrors(n int)
	// Reconciled counts emit-time type reconciliations by kind.
	Reconciled(kinds map[string]int)
	// PrimaryRaw exports the primary-raw verdict (nil: every precondition
	// met).
	PrimaryRaw(unmet []catalog.Unmet)
}

// Writer writes batches into one table. Open, Write and Close are safe for
// concurrent use; Write is meant to be called by many goroutines at once
// (that is what keeps the streams pipelined).
//
// Locks, taken only in this order: openMu (Open, Close), then schemaMu
// (anything that changes the table or the target schema), then watchMu (the
// primary-raw watch). Write takes none of them on its fast path: it loads the
// current state atomically.
type Writer struct {
	cfg    Config
	opener ingest.Opener
	cat    catalog.TableCatalog
	log    *slog.Logger
	obs    Observer

	openMu sync.Mutex
	// life is the writer's phase and the history of its failures: the one
	// place that decides when to open again (lifecycle.go).
	life *lifecycle

	// budget bounds the bytes of the batches in flight (MaxInFlightBytes).
	budget *budget
	// rowBytes is the Arrow bytes per row of the last converted batch: the
	// estimate for rows that hold only a decoded value. 0: none converted.
	rowBytes atomic.Int64

	// schemaMu serialises everything that changes the table or the target
	// schema (create on first write, add columns on drift, re-describe on a
	// SCHEMA_VALIDATION_FAILED, a stop), so one drift causes one reconcile
	// and one pool reopen however many batches notice it at once.
	schemaMu sync.Mutex
	// st is the current target: nil while not open.
	st atomic.Pointer[state]
	// stopped holds pools whose streams stopped for good, closed by the next
	// Open; guarded by schemaMu.
	stopped []*pool.Pool
	// lastRefresh is when refresh last described the table; guarded by
	// schemaMu.
	lastRefresh time.Time
	// refused holds the new fields the catalog refused to add or that
	// cannot be columns, with why (schema.go).
	refused *refusedFields
	// widenRefused maps a (lower-cased) column the catalog refused to widen
	// to the refusal, so its rows fail at once instead of re-planning every
	// batch; written under schemaMu, read without it.
	widenRefused sync.Map
	// widenHinted holds the columns the "catalog.widen would widen it" hint
	// was logged for.
	widenHinted sync.Map
	// seed, when set, stands in for the next Open's describe; described is
	// the table the writer opened on.
	seed, described atomic.Pointer[catalog.TableState]
	// spare is a pool whose Open failed, kept for the next attempt.
	spare atomic.Pointer[sparePool]
	// lastStopped is the pool that stopped last, for Health while the
	// writer is not open.
	lastStopped atomic.Pointer[pool.Pool]
	// health runs the loop that feeds the health gauges (health.go).
	health healthLoop
	// links is what the client said of its streams' connections
	// (liveness.go).
	links links
	// outageSig releases the writes waiting to submit once no stream is
	// connected; the outage watch (started by Open, stopped by Close under
	// openMu) raises and clears it.
	outageSig              atomic.Pointer[outageSignal]
	outageQuit, outageDone chan struct{}

	// rawRefusal holds the unmet primary-raw precondition error, nil while
	// the role is satisfied (or the role is derived).
	rawRefusal atomic.Pointer[error]
	watchMu    sync.Mutex
	watchStop  context.CancelFunc
	watchDone  chan struct{}

	// cov records the coverage (nil without it or before the first open);
	// covMu serialises its creation.
	cov   atomic.Pointer[coverage.Recorder]
	covMu sync.Mutex
	// covW is the coverage table's writer, its Sink (coverage.go).
	covW atomic.Pointer[Writer]

	// newPool makes the stream pool: pool.New (raw-anchor lanes), or a
	// pool of another lane kind for a companion table (coverage.go).
	newPool func(ingest.Opener, string, *arrow.Schema, pool.Config, pool.Observer) *pool.Pool
}

// state is the immutable target the write path uses: replaced as a whole
// (copy on write) when the table schema changes.
type state struct {
	columns []typemap.Column
	names   map[string]bool // lower-cased column names
	conv    *arrowconv.Converter
	// pool is nil while the table does not exist yet: it is created from the
	// first batch (Provision).
	pool *pool.Pool
}

// New returns a writer for cfg.Table that opens streams with opener and
// describes and changes the table through cat. log and obs may be nil.
func New(cfg Config, opener ingest.Opener, cat catalog.TableCatalog, log *slog.Logger, obs Observer) *Writer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if obs == nil {
		obs = nopObserver{}
	}
	cfg = cfg.withDefaults()
	if cfg.Pool.Logger == nil {
		cfg.Pool.Logger = log // the pool logs its changes of size
	}
	return &Writer{
		cfg:     cfg,
		life:    newLifecycle(cfg.Table, log),
		budget:  newBudget(cfg.MaxInFlightBytes),
		opener:  opener,
		cat:     cat,
		log:     log,
		obs:     obs,
		refused: &refusedFields{},
		newPool: pool.New,
	}
}

// Columns returns the table's columns as the writer currently targets them;
// nil while not open or before a provisioned table exists.
func (w *Writer) Columns() []typemap.Column {
	if st := w.st.Load(); st != nil {
		return st.columns
	}
	return nil
}

// Open describes (and with provisioning, reconciles) the table, builds the
// converter and opens the stream pool. It returns nil at once when already
// open. After the streams stopped (Write returned ErrNotOpen) it closes them,
// describes the table afresh and opens new ones: the way back from a fault
// fixed outside (grants granted, a workspace back, a table repaired).
//
// The lifecycle decides whether it may try: while the wait chosen after the
// last failure has not passed, Open tries nothing and returns a *WaitError
// with what is left of it; a failed open returns a *WaitError with the wait
// before the next one (RetryAfter reads it).
func (w *Writer) Open(ctx context.Context) error {
	w.openMu.Lock()
	defer w.openMu.Unlock()
	if w.life.isClosed() {
		return ErrClosed
	}
	if st := w.st.Load(); st != nil && w.life.writable() && (st.pool != nil || w.cfg.Provision) {
		if err := w.stopIfStopped(st, nil); err == nil {
			// Open, but while no stream reaches the service the engine
			// holds its batches and asks again soon (liveness.go).
			if cause := w.outage(st); cause != nil {
				var oe *outageError
				wait := outagePoll
				if errors.As(cause, &oe) {
					wait = outageWait(oe.age)
				}
				return &WaitError{Err: cause, Wait: wait, Held: true}
			}
			return nil
		}
		// The streams stopped for good: the lifecycle backs off (below).
	}
	if err := w.life.beginOpen(); err != nil {
		return err
	}
	w.closeStopped(ctx)
	w.startHealth()
	w.startOutageWatch()
	if err := w.open(ctx); err != nil {
		v := w.life.failed(classify(w.cfg.Table, w.cfg.Principal, err))
		if v.Action == GiveUp {
			return err
		}
		return &WaitError{Err: err, Wait: v.Wait}
	}
	st := w.st.Load()
	w.life.opened(st != nil && st.pool == nil)
	return nil
}

// Phase returns where the writer is in its lifecycle.
func (w *Writer) Phase() Phase { return w.life.Phase() }

// open is Open's work, with openMu held.
func (w *Writer) open(ctx context.Context) error {
	if ts := w.seed.Swap(nil); ts != nil {
		// Described moments ago by this table's previous writer (the
		// router evicted it): no second describe and reconcile. A table
		// changed meanwhile is caught by the schema rejection path.
		return w.openOn(ctx, ts)
	}
	ts, err := w.cat.Describe(ctx, w.cfg.Table)
	if err != nil {
		return fmt.Errorf("describe table %s: %w", w.cfg.Table, err)
	}
	if ts == nil {
		if !w.cfg.Provision {
			return fmt.Errorf("table %s: %w and catalog.provision is false", w.cfg.Table, errTableMissing)
		}
		w.infof("table %s does not exist: it will be created from the first batch (catalog.provision)", w.cfg.Table)
		w.st.Store(&state{})
		return nil
	}
	missing, err := w.missingCoverageColumns(ts.Columns)
	if err != nil {
		return err
	}
	if w.cfg.Provision {
		if ts, err = w.syncMetadata(ctx, ts, missing); err != nil {
			return err
		}
	}
	return w.openOn(ctx, ts)
}

// openOn opens the writer on the described table ts.
func (w *Writer) openOn(ctx context.Context, ts *catalog.TableState) error {
	if err := w.checkPrimaryRaw(ts); err != nil {
		return err
	}
	if err := w.ensureCoverage(ctx); err != nil {
		return err
	}
	st, err := w.buildState(ctx, ts.Columns, nil)
	if err != nil {
		return err
	}
	w.st.Store(st)
	w.described.Store(ts)
	w.startWatch()
	return nil
}

// Described returns the table as this writer last described it, with the
// columns it writes now; nil while not open. The router hands it to the
// next writer of the same table (Seed).
func (w *Writer) Described() *catalog.TableState {
	ts, st := w.described.Load(), w.st.Load()
	if ts == nil || st == nil || st.pool == nil {
		return nil
	}
	c := *ts
	c.Columns = st.columns
	return &c
}

// Seed makes the next Open use ts instead of describing the table.
func (w *Writer) Seed(ts *catalog.TableState) { w.seed.Store(ts) }

// Write converts rows, submits the good ones and returns only once every one
// of them is durable. Rows that do not fit the table come back as row errors
// (naming the row index and the column); the good rows are durable before
// Write returns. An error means nothing is acknowledged: the whole batch is
// to be retried. ErrNotOpen (wrapped) asks the caller to Open again; it is
// never returned once a row of the batch was submitted. When part of the
// batch is durable and the rest could not be submitted or confirmed, the
// rest come back as row errors wrapping a *TableError (to be retried, not
// dead-lettered), so the durable rows are never sent again. keyOf may be
// nil (no ordering).
func (w *Writer) Write(ctx context.Context, rows []Row, keyOf KeyFunc) ([]RowError, error) {
	if p := w.rawRefusal.Load(); p != nil {
		return nil, *p
	}
	st := w.st.Load()
	if st == nil || !w.life.writable() {
		return nil, w.life.notOpen()
	}
	if len(rows) == 0 {
		return nil, nil
	}
	// Reserve the batch's bytes before anything converts it, and hold them
	// until it is settled: the data in flight stays within the budget
	// whatever the row size.
	resv, err := w.budget.acquire(ctx, w.estimateBytes(rows))
	if err != nil {
		return nil, fmt.Errorf("write %d rows to %s: %w", len(rows), w.cfg.Table, err)
	}
	defer resv.release()
	if st.pool == nil {
		if st, err = w.createFromBatch(ctx, rows); err != nil {
			return nil, err
		}
	} else if err := w.stopIfStopped(st, nil); err != nil {
		return nil, err
	} else if cause := w.outage(st); cause != nil {
		// No stream reaches the service: hold the batch (the engine
		// reconnects) rather than queue it behind a dead connection.
		return nil, fmt.Errorf("%w: %w", ErrNotOpen, cause)
	}

	// With coverage, a row whose source or offset cannot be had fails
	// alone, before conversion.
	pos, posErrs := w.positionsOf(rows)
	var rowErrs []RowError
	var used *state
	for attempt := 0; ; attempt++ {
		rowErrs, used, err = w.writeOnce(ctx, st, rows, keyOf, resv, pos)
		// A batch converted just before another one evolved the table meets
		// a pool already switched to the new schema: convert it again.
		if err != nil && errors.Is(err, pool.ErrSchemaMismatch) && attempt < 3 {
			if cur := w.st.Load(); cur != nil && cur != used {
				st = cur
				continue
			}
		}
		if err != nil {
			if serr := w.stopIfStopped(used, err); serr != nil {
				return nil, fmt.Errorf("%w (%w)", serr, err)
			}
			return nil, err
		}
		break
	}
	if cur := w.st.Load(); len(rowErrs) < len(rows) && cur != nil && used != nil && cur.pool == used.pool {
		// Rows are durable on the streams still open: the failure
		// history is over. (A batch confirmed by streams that stopped
		// meanwhile says nothing of the new ones.)
		w.life.progress()
	}
	rowErrs = append(rowErrs, posErrs...)
	w.obs.RowErrors(len(rowErrs))
	return rowErrs, nil
}

// estimateBytes is a batch's reservation before conversion: the bytes of
// its messages; a message holding only a decoded value (AsBytes would
// serialize it) counts the Arrow bytes per row of the last converted batch.
// Before any batch was converted that is unknown, and the batch takes the
// whole budget: the first batch converts alone and sets the estimate.
func (w *Writer) estimateBytes(rows []Row) int64 {
	per := w.rowBytes.Load()
	var n int64
	for _, r := range rows {
		if !r.HasStructured() {
			if b, err := r.AsBytes(); err == nil {
				n += int64(len(b))
				continue
			}
		}
		if per == 0 {
			return w.cfg.MaxInFlightBytes
		}
		n += per
	}
	return n
}

// stopIfStopped turns a pool that stopped for good, or a write that failed
// for a reason no retry on these streams can fix (writeErr permanent: a
// grant revoked, credentials refused), into ErrNotOpen: the writer forgets
// its state and the lifecycle records one open→fail cycle and decides the
// wait before the next Open, which describes the table afresh and opens new
// streams. Only the first write to see it records the cycle.
func (w *Writer) stopIfStopped(st *state, writeErr error) error {
	if st == nil || st.pool == nil {
		return nil
	}
	cause := st.pool.Stopped()
	if cause == nil && permanentStreamErr(writeErr) {
		cause = writeErr
	}
	if cause == nil {
		return nil
	}
	w.schemaMu.Lock()
	if w.st.CompareAndSwap(st, nil) {
		w.lastStopped.Store(st.pool)
		w.stopped = append(w.stopped, st.pool)
		w.life.failed(classify(w.cfg.Table, w.cfg.Principal, cause))
	}
	w.schemaMu.Unlock()
	return fmt.Errorf("%w: %w", ErrNotOpen, cause)
}

// permanentStreamErr reports whether a write failed for a reason that
// retrying on the same streams cannot fix: a FatalConfig stream error other
// than a schema rejection (which re-describes the table and retries).
func permanentStreamErr(err error) bool {
	var ze *ingest.Error
	if err == nil || !errors.As(err, &ze) {
		return false
	}
	return ze.Class == ingest.FatalConfig && !ze.IsSchemaMismatch()
}

// closeStopped closes the pools whose streams stopped; what they had not
// confirmed was failed already (and is redelivered).
func (w *Writer) closeStopped(ctx context.Context) {
	w.schemaMu.Lock()
	stopped := w.stopped
	w.stopped = nil
	w.schemaMu.Unlock()
	for _, p := range stopped {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = p.Close(cctx)
		cancel()
	}
}

// Close drains and closes the streams within ctx; rows not durable by then
// are abandoned and their writes fail (never acknowledged). It does not
// close the opener or the catalog, which the caller owns.
func (w *Writer) Close(ctx context.Context) error {
	w.openMu.Lock()
	defer w.openMu.Unlock()
	// Under schemaMu so that a table being created from a first batch either
	// stores its pool before this (and it is closed here) or sees closed.
	w.schemaMu.Lock()
	if !w.life.draining() {
		w.schemaMu.Unlock()
		return nil
	}
	st := w.st.Swap(nil)
	w.schemaMu.Unlock()
	defer w.life.closed()
	w.watchMu.Lock()
	if w.watchStop != nil {
		w.watchStop()
	}
	w.watchMu.Unlock()
	w.health.stop()
	w.stopOutageWatch()
	w.closeStopped(ctx)
	if sp := w.spare.Swap(nil); sp != nil {
		_ = sp.pool.Close(ctx)
	}
	var err error
	if st != nil && st.pool != nil {
		if cerr := st.pool.Close(ctx); cerr != nil {
			err = fmt.Errorf("close streams of %s: %w", w.cfg.Table, cerr)
		}
		if n := st.pool.Stats().NackedAtClose; n > 0 {
			// The output says how many rows were not delivered, once.
			w.log.Debug(fmt.Sprintf("close: %d rows of %s were not durable within the close bound; their batches were nacked and will be redelivered", n, w.cfg.Table))
		}
	}
	if w.watchDone != nil {
		select {
		case <-w.watchDone:
		case <-ctx.Done():
		}
	}
	// After the streams: the ranges their last acks confirmed are written
	// with the final flush.
	w.closeCoverage(ctx)
	return err
}

// buildState makes the converter for cols and, unless prev is given to be
// reopened, a new connected pool.
func (w *Writer) buildState(ctx context.Context, cols []typemap.Column, prev *pool.Pool) (*state, error) {
	conv, err := arrowconv.New(cols, w.cfg.Convert)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", w.cfg.Table, err)
	}
	st := &state{columns: cols, names: map[string]bool{}, conv: conv}
	for _, c := range cols {
		st.names[strings.ToLower(c.Name)] = true
	}
	if prev != nil {
		if err := prev.Reopen(ctx, conv.Schema()); err != nil {
			return nil, fmt.Errorf("reopen streams of %s on the new schema: %w", w.cfg.Table, err)
		}
		st.pool = prev
		return st, nil
	}
	// A pool whose first Open failed is kept (its members keep retrying
	// with back-off) and reused on the next attempt, so a refused open never
	// turns into a fresh set of opens; one that stopped for good is closed.
	var p *pool.Pool
	if sp := w.spare.Swap(nil); sp != nil {
		if sameSchema(sp.schema, conv.Schema()) && sp.pool.Stopped() == nil {
			p = sp.pool
		} else {
			_ = sp.pool.Close(context.Background())
		}
	}
	if p == nil {
		p = w.newPool(w.opener, w.cfg.Table, conv.Schema(), w.cfg.Pool, poolObserver{Observer: w.obs, links: &w.links})
	}
	cctx, cancel := context.WithTimeout(ctx, w.cfg.ConnectTimeout)
	defer cancel()
	if err := p.Connect(cctx); err != nil {
		if errors.Is(err, pool.ErrClosed) {
			return nil, err
		}
		w.spare.Store(&sparePool{pool: p, schema: conv.Schema()})
		return nil, &OpenError{Table: w.cfg.Table, Err: err, Rejects: p.Stats().ConcurrencyRejects}
	}
	st.pool = p
	return st, nil
}

// OpenError is an Open that could not get a healthy stream. Rejects counts
// the opens the service refused for concurrency: with any, and no fatal
// error, the lifecycle backs off (FaultThrottled) rather than retry at once.
type OpenError struct {
	Table   string
	Err     error
	Rejects int64
}

func (e *OpenError) Error() string { return fmt.Sprintf("open streams to %s: %v", e.Table, e.Err) }
func (e *OpenError) Unwrap() error { return e.Err }

// sparePool is a pool kept after a failed Open, with the schema it was built
// for.
type sparePool struct {
	pool   *pool.Pool
	schema *arrow.Schema
}

func sameSchema(a, b *arrow.Schema) bool { return a == b || (a != nil && b != nil && a.Equal(b)) }

func (w *Writer) infof(format string, args ...any) { w.log.Info(fmt.Sprintf(format, args...)) }
func (w *Writer) warnf(format string, args ...any) { w.log.Warn(fmt.Sprintf(format, args...)) }
func (w *Writer) errorf(format string, args ...any) {
	w.log.Error(fmt.Sprintf(format, args...))
}

// nopObserver records nothing (a nil lane observer is replaced by the
// lane's own no-op).
type nopObserver struct{}

func (nopObserver) StreamObserver(string, int) acklane.Observer { return nil }
func (nopObserver) IncRebuild(string, int)                      {}
func (nopObserver) IncConcurrencyReject(string, int)            {}
func (nopObserver) Sent(int, int64, int64)                      {}
func (nopObserver) RowErrors(int)                               {}
func (nopObserver) Reconciled(map[string]int)                   {}
func (nopObserver) PrimaryRaw([]catalog.Unmet)                  {}

// LogEvents is an ingest.Observer that logs the client's connection events
// to log: rotations and reconnects are normal (debug), a failed reconnect
// attempt is a warning, a stream failing for good an error.
func LogEvents(log *slog.Logger) ingest.Observer { return logEvents{log} }

type logEvents struct{ log *slog.Logger }

func (l logEvents) OnRotation(table string) {
	l.log.Debug(fmt.Sprintf("zerobus stream to %s rotated by the service", table))
}

func (l logEvents) OnReconnect(table string, reason error) {
	l.log.Debug(fmt.Sprintf("zerobus stream to %s reconnected: %v", table, reason))
}

func (l logEvents) OnRetry(table string, attempt int, err error) {
	l.log.Warn(fmt.Sprintf("zerobus stream to %s: reconnect attempt %d failed: %v", table, attempt, err))
}

// OnFailure logs the stream's failure when it happens (what to do about a
// permanent one is the lifecycle's explanation, once per cause).
func (l logEvents) OnFailure(table string, err *ingest.Error) {
	l.log.Error(fmt.Sprintf("zerobus stream to %s failed: %v", table, err))
}
