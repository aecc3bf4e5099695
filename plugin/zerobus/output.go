// Package zerobus is the `zerobus` Benthos batch output: it writes message
// batches into a Databricks Unity Catalog managed Delta table through the
// Zerobus ingest service, as Apache Arrow over Arrow Flight.
//
// A batch is converted to one Arrow record against the table's described
// schema, submitted fire-and-forget to a small pool of long-lived streams, and
// acknowledged upstream (WriteBatch returns nil) only once the stream's ack
// lane confirms every row durable. Rows that do not fit the table fail alone
// through a service.BatchError naming the message index and column.
package zerobus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

func init() {
	service.MustRegisterBatchOutput("zerobus", Spec(), newOutputFromConfig)
}

// newOutputFromConfig is the registered constructor.
func newOutputFromConfig(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
	cfg, err := parseConfig(conf)
	if err != nil {
		return nil, service.BatchPolicy{}, 0, err
	}
	o := newOutput(cfg, mgr, deps{})
	return o, cfg.Batching, cfg.MaxInFlight, nil
}

// deps are the collaborators the output builds for itself in production and
// that tests replace: the stream opener (ingestfake) and the catalog.
type deps struct {
	opener  ingest.Opener
	catalog catalog.TableCatalog
}

// output is the zerobus BatchOutput. It is safe for the engine's
// max_in_flight concurrent WriteBatch calls.
type output struct {
	cfg  *outputConfig
	log  *service.Logger
	met  *metrics
	id   string
	deps deps
	// version is the binary's, for the user agent.
	version string

	// connMu serialises Connect and Close. Lock order: connMu, then
	// schemaMu, then watchMu; never the other way round.
	connMu sync.Mutex
	opener ingest.Opener
	cat    catalog.TableCatalog
	closed atomic.Bool

	// schemaMu serialises everything that changes the table or the target
	// schema (create on first write, add columns on drift, re-describe on a
	// SCHEMA_VALIDATION_FAILED), so one drift causes one reconcile and one
	// pool reopen however many batches notice it at once.
	schemaMu sync.Mutex
	st       atomic.Pointer[writeState]
	// refused holds (lower-cased) new fields the catalog refused to add or
	// that cannot be columns; guarded by schemaMu.
	refused map[string]bool
	// widenRefused maps a (lower-cased) column the catalog refused to widen
	// to the refusal, so its rows fail at once instead of re-planning every
	// batch; written under schemaMu, read without it.
	widenRefused sync.Map
	// widenHinted holds the columns the "catalog.widen would widen it" hint
	// was logged for.
	widenHinted sync.Map
	// spare is a pool whose Connect failed, kept for the next attempt.
	spare atomic.Pointer[sparePool]

	// rawRefusal holds the unmet primary-raw precondition error, nil while
	// the role is satisfied (or the role is derived).
	rawRefusal atomic.Pointer[error]
	watchMu    sync.Mutex
	watchStop  context.CancelFunc
	watchDone  chan struct{}

	loggedKnobs sync.Once
}

// writeState is the immutable target the write path uses: replaced as a
// whole (copy on write) when the table schema changes.
type writeState struct {
	columns []typemap.Column
	names   map[string]bool // lower-cased column names
	conv    *arrowconv.Converter
	// pool is nil while the table does not exist yet: it is created from the
	// first batch (catalog.provision).
	pool *pool.Pool
}

func newOutput(cfg *outputConfig, mgr *service.Resources, d deps) *output {
	id := mgr.Label()
	if id == "" {
		id = "zerobus"
	}
	return &output{
		cfg:     cfg,
		log:     mgr.Logger(),
		met:     newMetrics(mgr.Metrics(), cfg.Table),
		id:      id,
		deps:    d,
		version: mgr.EngineVersion(),

		refused: map[string]bool{},
	}
}

// Connect describes (and with provisioning, reconciles) the table, builds
// the converter and opens the stream pool. The engine retries it with
// backoff until it returns nil.
func (o *output) Connect(ctx context.Context) error {
	o.connMu.Lock()
	defer o.connMu.Unlock()
	if o.closed.Load() {
		return errors.New("zerobus: output closed")
	}
	o.loggedKnobs.Do(func() {
		o.log.Infof("zerobus output settings: %s", knobsLine(o.cfg.knobs(pool.Size(o.poolConfig()))))
	})
	if err := o.ensureClients(); err != nil {
		return err
	}
	if st := o.st.Load(); st != nil && (st.pool != nil || o.cfg.Provision) {
		return nil // already connected; a reconnect after ErrNotConnected
	}

	state, err := o.cat.Describe(ctx, o.cfg.Table)
	if err != nil {
		return fmt.Errorf("describe table %s: %w", o.cfg.Table, err)
	}
	if state == nil {
		if !o.cfg.Provision {
			return fmt.Errorf("table %s does not exist and catalog.provision is false: create it or enable provisioning", o.cfg.Table)
		}
		o.log.Infof("table %s does not exist: it will be created from the first batch (catalog.provision)", o.cfg.Table)
		o.st.Store(&writeState{})
		return nil
	}
	if o.cfg.Provision {
		if state, err = o.syncMetadata(ctx, state); err != nil {
			return err
		}
	}
	if err := o.checkPrimaryRaw(state); err != nil {
		return err
	}
	st, err := o.buildState(ctx, state.Columns, nil)
	if err != nil {
		return err
	}
	o.st.Store(st)
	o.startWatch()
	return nil
}

// WriteBatch converts the batch, submits the good rows to the pool and
// returns nil only once every one of them is durable. Rows that do not fit
// the table fail through a *service.BatchError naming the message index and
// the column; the good rows are durable before it is returned. A cancelled
// ctx returns an error (a nack), never nil.
func (o *output) WriteBatch(ctx context.Context, batch service.MessageBatch) error {
	if p := o.rawRefusal.Load(); p != nil {
		return *p
	}
	st := o.st.Load()
	if st == nil {
		return service.ErrNotConnected
	}
	if len(batch) == 0 {
		return nil
	}
	var err error
	if st.pool == nil {
		if st, err = o.createFromBatch(ctx, batch); err != nil {
			return err
		}
	}

	var rowErrs []arrowconv.RowError
	for attempt := 0; ; attempt++ {
		var used *writeState
		rowErrs, used, err = o.writeOnce(ctx, st, batch)
		// A batch converted just before another one evolved the table meets
		// a pool already switched to the new schema: convert it again.
		if err != nil && errors.Is(err, pool.ErrSchemaMismatch) && attempt < 3 {
			if cur := o.st.Load(); cur != used {
				st = cur
				continue
			}
		}
		if err != nil {
			return err
		}
		break
	}
	o.met.RowErrors(len(rowErrs))
	if len(rowErrs) == 0 {
		return nil
	}
	berr := service.NewBatchError(batch, fmt.Errorf("zerobus: %d of %d rows do not fit table %s (first: %v)", len(rowErrs), len(batch), o.cfg.Table, rowErrs[0]))
	for _, re := range rowErrs {
		berr = berr.Failed(re.Index, re) // "message i: column c: reason"
	}
	return berr
}

// Close drains and closes the streams within close_timeout; rows not durable
// by then are abandoned and their batches nacked (never acked).
func (o *output) Close(ctx context.Context) error {
	o.connMu.Lock()
	defer o.connMu.Unlock()
	if o.closed.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.cfg.CloseTimeout)
	defer cancel()
	// Under schemaMu so that a table being created from a first batch either
	// stores its pool before this (and it is closed here) or sees closed.
	o.schemaMu.Lock()
	o.closed.Store(true)
	st := o.st.Load()
	o.schemaMu.Unlock()
	o.watchMu.Lock()
	if o.watchStop != nil {
		o.watchStop()
	}
	o.watchMu.Unlock()
	var errs []error
	if sp := o.spare.Swap(nil); sp != nil {
		_ = sp.pool.Close(ctx)
	}
	if st != nil && st.pool != nil {
		if err := st.pool.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close streams of %s: %w", o.cfg.Table, err))
		}
	}
	if o.watchDone != nil {
		select {
		case <-o.watchDone:
		case <-ctx.Done():
		}
	}
	if o.deps.opener == nil {
		if c, ok := o.opener.(io.Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if c, ok := o.cat.(io.Closer); ok && o.deps.catalog == nil {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
