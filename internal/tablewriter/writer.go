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
// in liveness.go. Everything that knows or changes the table's schema is
// the schema authority (authority.go): it hands the write path immutable
// snapshots and, when the table changes, has the writer switch its streams
// to the new one.
//
// Follow one batch in write.go, Write top to bottom: admit (the table
// created from the batch when absent, the streams up) → positionsOf
// (coverage.go) → convert on the current snapshot (a drift goes to the
// authority, which may add or widen columns, and the batch is converted
// again on the snapshot it hands back; rescue.go; the positions stamped) →
// send: split by stream, pool.Write per part, each ticket's Wait (settled
// by the stream's ack lane after the durable ack), recordDurable. A batch
// converted just before another evolved the table is converted again.
package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/backoff"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/coverage"
	"github.com/benthos-zerobus/benthos-zerobus/internal/fastpath"
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
	// Fast, when set, converts a batch of Schema Registry framed Avro
	// values from their bytes (fastpath: straight into the columns for one
	// planned schema id, the registry codec otherwise), and a batch of
	// Protobuf values of one schema id and message index whose message it
	// plans; any other batch takes the usual path. Nil: off.
	Fast *fastpath.Path
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
	// SchemaMetadata is the metadata key under which messages carry the
	// registry schema schema_registry_decode stored (the output's
	// catalog.schema_metadata): with Provision, a table created from such
	// messages and every column added for them take the registry's types
	// (registryschema.go). Empty: off, types are inferred from values.
	SchemaMetadata string
	// Registry, when set, decodes Schema Registry framed values (the
	// output's schema_registry): their schema, fetched by id, types the
	// table as SchemaMetadata's does (one source of types: not both), and
	// values the fast path (Fast) does not take are decoded by it
	// (schemasource.go). Values that are not framed are read as before.
	Registry RegistryDecoder
	// Comment is the table comment asked for (comments policy permitting);
	// CreateProperties are set on a table this writer creates, never on an
	// existing one. The coverage table's writer sets both.
	Comment          string
	CreateProperties map[string]string
	// DedupView keeps a deduplicating view beside the table (with
	// Provision and Coverage): catalog.DesiredTable.DedupView, named
	// DedupViewName, or catalog.DefaultDedupView of the table when that is
	// empty (one view per table of an interpolated table name).
	DedupView     bool
	DedupViewName string
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
// Locks, taken only in this order: openMu (Open, Close), then the schema
// authority's (anything that changes the table or the snapshot, and a
// stop), then watchMu (the primary-raw watch); covMu (the coverage
// recorder and writer, made once) is taken under openMu or the authority's
// lock and takes none. Write takes none of them on its fast path: it loads
// the current state atomically.
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

	// schema is the table schema authority: it describes and changes the
	// table and hands out the snapshots the write path converts on
	// (authority.go).
	schema *authority
	// st is what the write path writes on: nil while not open.
	st atomic.Pointer[state]
	// stopped holds pools whose streams stopped for good, closed by the next
	// Open; guarded by the authority's lock.
	stopped []*pool.Pool
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
	// recording counts the Writes that may still record coverage (Close
	// waits for them before the final flush).
	recording recording

	// abortSchema ends the authority's closing ctx (Close, once its ctx
	// ended while it waited for the authority's lock, and when done).
	abortSchema context.CancelCauseFunc

	// newPool makes the stream pool: pool.New (raw-anchor lanes), or a
	// pool of another lane kind for a companion table (coverage.go).
	newPool func(ingest.Opener, string, *arrow.Schema, pool.Config, pool.Observer) *pool.Pool
}

// state is what the write path writes on: a snapshot of the table's schema
// and the stream pool open on it. It is replaced as a whole when either
// changes; the write path never changes it.
type state struct {
	// snap is nil while the table does not exist yet: it is created from
	// the first batch (Provision).
	snap *snapshot
	// pool is nil while the table does not exist yet.
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
	// One gate for every pool this writer opens: while the endpoint stays
	// unreachable its streams' opens are spaced by one back-off that grows
	// across members, pools and open→fail cycles, up to
	// TransientBackoffMax (at most about 2.5 opens a minute).
	cfg.Pool.OpenGate = backoff.NewGate(TransientBackoffInitial, TransientBackoffMax, backoff.DefaultJitter)
	w := &Writer{
		cfg:     cfg,
		life:    newLifecycle(cfg.Table, log),
		budget:  newBudget(cfg.MaxInFlightBytes),
		opener:  opener,
		cat:     cat,
		log:     log,
		obs:     obs,
		newPool: pool.New,
	}
	closing, abort := context.WithCancelCause(context.Background())
	w.abortSchema = abort
	w.schema = &authority{cfg: cfg, cat: cat, log: log, reserved: w.tableReserved(),
		current: w.snapshot, install: w.install, closing: closing}
	a := w.schema
	a.src = newSchemaSource(cfg)
	if ms, ok := a.src.(*metadataSchemas); ok {
		ms.schemas.stale = func(claimed, actual string) {
			a.warnf("table %s: a registry schema in metadata %q carries the fingerprint %s, but its content's is %s: a mapping changed the schema "+
				"and kept the original's fingerprint. It is parsed for each message (slower) so that it is never taken for the original; "+
				"leave the fingerprint out of a schema you rewrite (docs/schema-registry.md, \"Debezium change events\")",
				cfg.Table, cfg.SchemaMetadata, shortFingerprint(claimed), shortFingerprint(actual))
		}
	}
	return w
}

// snapshot is the snapshot the writer writes on now: nil while not open or
// before a provisioned table exists.
func (w *Writer) snapshot() *snapshot {
	if st := w.st.Load(); st != nil {
		return st.snap
	}
	return nil
}

// Columns returns the table's columns as the writer currently targets them;
// nil while not open or before a provisioned table exists.
func (w *Writer) Columns() []typemap.Column {
	if snap := w.snapshot(); snap != nil {
		return snap.columns()
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
		if err := w.stopIfStopped(st.pool, nil); err == nil {
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
	sp := w.spare.Load()
	if err := w.life.beginOpen(sp != nil && sp.pool.AnyConnected()); err != nil {
		return err
	}
	w.closeStopped(ctx)
	w.startHealth()
	w.startOutageWatch()
	if err := w.open(ctx); err != nil {
		f := w.classify(err)
		v := w.life.failed(f)
		if v.Action == GiveUp {
			return err
		}
		return &WaitError{Err: err, Wait: v.Wait, Advice: f.netAdvice()}
	}
	st := w.st.Load()
	w.life.opened(st != nil && st.pool == nil)
	return nil
}

// Phase returns where the writer is in its lifecycle.
func (w *Writer) Phase() Phase { return w.life.Phase() }

// open is Open's work, with openMu held: the table as the router handed
// it over or as described afresh (with provisioning, its metadata
// reconciled and the reserved columns it lacks added), then its snapshot
// and streams.
func (w *Writer) open(ctx context.Context) error {
	// Described moments ago by this table's previous writer (the router
	// evicted it): no second describe and reconcile. A table changed
	// meanwhile is caught by the schema rejection path.
	ts := w.schema.takeSeed()
	if ts == nil {
		var err error
		if ts, err = w.schema.describe(ctx); err != nil {
			return err
		}
		if ts == nil {
			if !w.cfg.Provision {
				return fmt.Errorf("table %s: %w and catalog.provision is false", w.cfg.Table, errTableMissing)
			}
			if last := w.schema.last.Load(); last != nil {
				// It existed, and is gone: dropped under the running
				// output. Created again at once from the schema the output
				// wrote, not inferred again from the next batch, so the
				// rows held meanwhile land with the same columns.
				return w.recreate(ctx, last)
			}
			w.infof("table %s does not exist: it will be created from the first batch (catalog.provision)", w.cfg.Table)
			w.st.Store(&state{})
			return nil
		}
		missing, err := w.missingReservedColumns(ts.Columns)
		if err != nil {
			return err
		}
		if w.cfg.Provision {
			if ts, err = w.schema.syncMetadata(ctx, ts, missing); err != nil {
				return err
			}
		}
	}
	snap, err := w.schema.snapshotOf(ts)
	if err != nil {
		return err
	}
	return w.openOn(ctx, snap)
}

// recreate creates the table again, with the columns of last, the table as
// the writer wrote on it (or was handed it) before it vanished (dropped
// while the output wrote to it), says so in one line, and opens the streams
// on it. It is a new table (another table_id, an empty Delta log): the rows
// acknowledged before the drop were in the dropped one and went with it;
// the rows held or redelivered since land in this one.
func (w *Writer) recreate(ctx context.Context, last *catalog.TableState) error {
	ts, statements, err := w.schema.createTable(ctx, w.schema.desiredFromColumns(slices.Clone(last.Columns)), "table")
	if err != nil {
		return err
	}
	w.infof("table %s was dropped while the output wrote to it: created it again with the %d columns it was written with (catalog.provision; %d statements, new table_id %s); rows acknowledged before the drop went with the dropped table, the rows held since land in the new one",
		w.cfg.Table, len(last.Columns), statements, ts.TableID)
	if err := w.cat.RegisterWriter(ctx, w.cfg.Table, catalog.WriterInfo{ID: w.cfg.WriterID, Role: w.cfg.Role}); err != nil {
		w.warnf("register writer on %s: %v", w.cfg.Table, err)
	}
	snap, err := w.schema.snapshotOf(ts)
	if err != nil {
		return err
	}
	return w.openOn(ctx, snap)
}

// openOn opens the writer's streams on snap.
func (w *Writer) openOn(ctx context.Context, snap *snapshot) error {
	if err := w.checkPrimaryRaw(snap.table); err != nil {
		return err
	}
	if err := w.ensureCoverage(ctx); err != nil {
		return err
	}
	p, err := w.connect(ctx, snap.schema())
	if err != nil {
		return err
	}
	w.st.Store(&state{snap: snap, pool: p})
	w.schema.last.Store(snap.table)
	w.startWatch()
	return nil
}

// install is the schema authority's switch of the writer to the snapshot
// next, called with its lock held: the pool reopens on next's schema, or,
// for a table the first batch just created, opens on it.
func (w *Writer) install(ctx context.Context, next *snapshot) error {
	st := w.st.Load()
	switch {
	case w.life.isClosed():
		return ErrClosed
	case st == nil:
		return errDropped
	case st.pool == nil:
		if err := w.openOn(ctx, next); err != nil {
			return err
		}
		w.life.opened(false)
		return nil
	}
	if err := st.pool.Reopen(ctx, next.schema()); err != nil {
		if errors.Is(context.Cause(ctx), ErrClosed) {
			return ErrClosed // cut short by Close, which closes the pool
		}
		err = fmt.Errorf("reopen streams of %s on the new schema: %w", w.cfg.Table, err)
		// Cut short, the pool is switched in part (its schema is next's,
		// some streams still on the old one): no snapshot matches it, and
		// every batch would fail on a schema mismatch. Stop it: the next
		// Open describes the table afresh and opens new streams.
		w.stopLocked(st.pool, err)
		return err
	}
	w.st.Store(&state{snap: next, pool: st.pool})
	w.schema.last.Store(next.table)
	return nil
}

// Described returns the table as this writer last described it, with the
// columns it writes now; nil while not open. The router hands it to the
// next writer of the same table (Seed).
func (w *Writer) Described() *catalog.TableState {
	st := w.st.Load()
	if st == nil || st.pool == nil {
		return nil
	}
	c := *st.snap.table
	return &c
}

// Seed makes the next Open use ts instead of describing the table (and, if
// the table is gone by then, create it again with ts's columns, with
// provisioning).
func (w *Writer) Seed(ts *catalog.TableState) {
	w.schema.seed.Store(ts)
	w.schema.last.Store(ts)
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

// stopIfStopped turns a pool p that stopped for good, or a write that failed
// for a reason no retry on these streams can fix (writeErr permanent: a
// grant revoked, credentials refused), into ErrNotOpen: the writer forgets
// its state and the lifecycle records one open→fail cycle and decides the
// wait before the next Open, which describes the table afresh and opens new
// streams. Only the first write to see it records the cycle.
func (w *Writer) stopIfStopped(p *pool.Pool, writeErr error) error {
	if p == nil {
		return nil
	}
	cause := p.Stopped()
	if cause == nil && permanentStreamErr(writeErr) {
		cause = writeErr
	}
	if cause == nil {
		return nil
	}
	w.schema.mu.Lock()
	w.stopLocked(p, cause)
	w.schema.mu.Unlock()
	return fmt.Errorf("%w: %w", ErrNotOpen, cause)
}

// stopLocked forgets the state written on pool p, when it is still the
// current one, for cause: p waits in stopped for the next Open to close it,
// and the lifecycle records the cycle. The authority's lock is held.
func (w *Writer) stopLocked(p *pool.Pool, cause error) {
	if st := w.st.Load(); st != nil && st.pool == p {
		w.st.Store(nil)
		w.lastStopped.Store(p)
		w.stopped = append(w.stopped, p)
		w.life.failed(w.classify(cause))
	}
}

// classify is the writer's Classify: with provisioning, a table found
// missing (dropped under the running output) is no fault a person must fix,
// since the next open creates it again (recreate): it is retried at once,
// not backed off.
func (w *Writer) classify(err error) Fault {
	f := classify(w.cfg.Table, w.cfg.Principal, err)
	if f.Cause == causeTableMissing && w.cfg.Provision {
		f.Class = FaultTransient
		f.Advice = "nothing: catalog.provision creates it again at the next open, with the columns the output wrote"
	}
	return f
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
	w.schema.mu.Lock()
	stopped := w.stopped
	w.stopped = nil
	w.schema.mu.Unlock()
	for _, p := range stopped {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = p.Close(cctx)
		cancel()
	}
}

// Close drains and closes the streams within ctx; rows not durable by then
// are abandoned and their writes fail (never acknowledged). A change of the
// table still in progress when ctx ends (a reopen, a catalog call) is cut
// short rather than waited for. It does not close the opener or the
// catalog, which the caller owns.
func (w *Writer) Close(ctx context.Context) error {
	w.openMu.Lock()
	defer w.openMu.Unlock()
	// Under the authority's lock so that a table being created from a first
	// batch either stores its pool before this (and it is closed here) or
	// sees closed. A change of the table holding the lock when ctx ends is
	// cut short, so the wait for it stays within ctx.
	stopAbort := context.AfterFunc(ctx, func() { w.abortSchema(ErrClosed) })
	w.schema.mu.Lock()
	stopAbort()
	if !w.life.draining() {
		w.schema.mu.Unlock()
		return nil
	}
	st := w.st.Swap(nil)
	w.schema.mu.Unlock()
	defer w.life.closed()
	defer w.abortSchema(ErrClosed)
	w.watchMu.Lock()
	if w.watchStop != nil {
		w.watchStop()
	}
	w.watchMu.Unlock()
	w.health.stop()
	if co, ok := w.obs.(CloseObserver); ok {
		co.ObserveClosed()
	}
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
	// After the streams, and after the writes their drain confirmed have
	// recorded it: the ranges their last acks confirmed are written with
	// the final flush.
	w.recording.wait(ctx)
	w.closeCoverage(ctx)
	return err
}

// connect returns a connected pool for schema: a new one, or the pool an
// earlier Open failed to connect (its members keep retrying with back-off),
// so a refused open never turns into a fresh set of opens; one that stopped
// for good is closed.
func (w *Writer) connect(ctx context.Context, schema *arrow.Schema) (*pool.Pool, error) {
	var p *pool.Pool
	if sp := w.spare.Swap(nil); sp != nil {
		if sameSchema(sp.schema, schema) && sp.pool.Stopped() == nil {
			p = sp.pool
		} else {
			_ = sp.pool.Close(context.Background())
		}
	}
	if p == nil {
		p = w.newPool(w.opener, w.cfg.Table, schema, w.cfg.Pool, poolObserver{Observer: w.obs, links: &w.links})
	}
	cctx, cancel := context.WithTimeout(ctx, w.cfg.ConnectTimeout)
	defer cancel()
	if err := p.Connect(cctx); err != nil {
		if errors.Is(err, pool.ErrClosed) {
			return nil, err
		}
		w.spare.Store(&sparePool{pool: p, schema: schema})
		return nil, &OpenError{Table: w.cfg.Table, Err: err, Rejects: p.Stats().ConcurrencyRejects}
	}
	return p, nil
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
// to log: rotations, reconnects and failed reconnect attempts at debug
// level (the writer explains an outage once per cause), a stream failing
// for good as an error.
func LogEvents(log *slog.Logger) ingest.Observer { return logEvents{log} }

type logEvents struct{ log *slog.Logger }

func (l logEvents) OnRotation(table string) {
	l.log.Debug(fmt.Sprintf("zerobus stream to %s rotated by the service", table))
}

func (l logEvents) OnReconnect(table string, reason error) {
	l.log.Debug(fmt.Sprintf("zerobus stream to %s reconnected: %v", table, reason))
}

// OnRetry is at debug level: a reconnect that keeps failing ends in the
// stream's failure (OnFailure), and an outage is explained by the writer,
// once per cause, with its back-off; a line per attempt would repeat it.
func (l logEvents) OnRetry(table string, attempt int, err error) {
	l.log.Debug(fmt.Sprintf("zerobus stream to %s: reconnect attempt %d failed: %s", table, attempt, CauseText(err)))
}

// OnFailure logs the stream's failure when it happens (what to do about a
// permanent one is the lifecycle's explanation, once per cause).
func (l logEvents) OnFailure(table string, err *ingest.Error) {
	l.log.Error(fmt.Sprintf("zerobus stream to %s failed: %v", table, err))
}
