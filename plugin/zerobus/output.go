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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
	zb "github.com/benthos-zerobus/benthos-zerobus/internal/zerobus"
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
// that tests replace: the stream opener (zerobusfake) and the catalog.
type deps struct {
	opener  zb.Opener
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

	// connMu serialises Connect and Close. Lock order: connMu, then
	// schemaMu, then watchMu; never the other way round.
	connMu sync.Mutex
	opener zb.Opener
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
	gen     int
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
		cfg:  cfg,
		log:  mgr.Logger(),
		met:  newMetrics(mgr.Metrics(), cfg.Table),
		id:   id,
		deps: d,

		refused: map[string]bool{},
	}
}

// poolConfig maps the output's knobs onto the pool's.
func (o *output) poolConfig() pool.Config {
	pc := pool.DefaultConfig()
	pc.MinStreams = o.cfg.StreamsMin
	pc.MaxStreams = o.cfg.StreamsMax
	pc.PerStreamMBps = o.cfg.PerStreamMBps
	pc.PeakMBps = o.cfg.PeakMBps
	pc.AckChannelCapacity = o.cfg.AckCapacity
	// The lane's AckTimeout is one durability wait before it counts a
	// retry (the slow-ack symptom) and waits again; ack.timeout is the
	// whole budget of one batch, enforced in WriteBatch.
	pc.AckTimeout = min(pc.AckTimeout, o.cfg.AckTimeout)
	return pc
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
	st, err := o.buildState(ctx, 0, state.Columns, nil)
	if err != nil {
		return err
	}
	o.st.Store(st)
	o.startWatch()
	return nil
}

// ensureClients creates the Zerobus client and the catalog on first use.
func (o *output) ensureClients() error {
	if o.opener == nil {
		if o.deps.opener != nil {
			o.opener = o.deps.opener
		} else {
			c, err := zb.NewClient(zb.Config{
				Endpoint:     o.cfg.Endpoint,
				WorkspaceURL: o.cfg.WorkspaceURL,
				WorkspaceID:  o.cfg.WorkspaceID,
				ClientID:     o.cfg.ClientID,
				ClientSecret: o.cfg.ClientSecret,
				Compression:  o.cfg.Compression,
				UserAgent:    "benthos-zerobus/" + Version,
				Observer:     clientObserver{log: o.log},
			})
			if err != nil {
				return fmt.Errorf("zerobus client: %w", err)
			}
			o.opener = c
		}
	}
	if o.cat == nil {
		if o.deps.catalog != nil {
			o.cat = o.deps.catalog
		} else {
			uc, err := catalog.NewUC(catalog.UCConfig{
				Host:         o.cfg.WorkspaceURL,
				ClientID:     o.cfg.ClientID,
				ClientSecret: o.cfg.ClientSecret,
				AuthType:     "oauth-m2m",
				WarehouseID:  o.cfg.WarehouseID,
				Logger:       newSlogLogger(o.log),
			})
			if err != nil {
				return fmt.Errorf("catalog: %w", err)
			}
			o.cat = uc
		}
	}
	return nil
}

// Version is stamped into the user agent.
var Version = "dev"

// buildState makes the converter for columns and, unless prev is given to
// be reopened, a new connected pool. It maps connect failures: a concurrency
// reject asks the engine to back off for the service's hint.
func (o *output) buildState(ctx context.Context, gen int, cols []typemap.Column, prev *pool.Pool) (*writeState, error) {
	conv, err := arrowconv.New(cols, arrowconv.Options{NestedToString: o.cfg.NestedToString, EpochUnit: o.cfg.EpochUnit})
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", o.cfg.Table, err)
	}
	st := &writeState{gen: gen, columns: cols, names: map[string]bool{}, conv: conv}
	for _, c := range cols {
		st.names[strings.ToLower(c.Name)] = true
	}
	if prev != nil {
		if err := prev.Reopen(ctx, conv.Schema()); err != nil {
			return nil, mapConnectErr(fmt.Errorf("reopen streams of %s on the new schema: %w", o.cfg.Table, err))
		}
		// Reopen clears the pool's fatal error before it replaces the
		// members; a replaced stream failing (the schema rejection that
		// brought us here) in between leaves that stale error behind. Every
		// member has been replaced now, so one more Reopen clears it for
		// good.
		if prev.Stats().Fatal != nil {
			if err := prev.Reopen(ctx, conv.Schema()); err != nil {
				return nil, mapConnectErr(fmt.Errorf("reopen streams of %s on the new schema: %w", o.cfg.Table, err))
			}
		}
		st.pool = prev
		return st, nil
	}
	// A pool whose first Connect failed is kept (its members keep retrying
	// with back-off) and reused on the next attempt, so a refused connect
	// never turns into a fresh set of opens.
	var p *pool.Pool
	if sp := o.spare.Swap(nil); sp != nil {
		if sameSchema(sp.schema, conv.Schema()) {
			p = sp.pool
		} else {
			_ = sp.pool.Close(context.Background())
		}
	}
	if p == nil {
		p = pool.New(o.opener, o.cfg.Table, conv.Schema(), o.poolConfig(), poolObserver{o.met})
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := p.Connect(cctx); err != nil {
		if errors.Is(err, pool.ErrClosed) {
			return nil, err
		}
		o.spare.Store(&sparePool{pool: p, schema: conv.Schema()})
		err = fmt.Errorf("open streams to %s: %w", o.cfg.Table, err)
		if zb.Classify(err).Class != zb.FatalConfig && p.Stats().ConcurrencyRejects > 0 {
			return nil, service.NewErrBackOff(err, zb.ResourceExhaustedBackoff)
		}
		return nil, mapConnectErr(err)
	}
	st.pool = p
	return st, nil
}

// connectTimeout bounds one Connect's wait for a healthy stream; the pool
// keeps retrying in the background and the engine calls Connect again.
const connectTimeout = 30 * time.Second

// sparePool is a pool kept after a failed Connect, with the schema it was
// built for.
type sparePool struct {
	pool   *pool.Pool
	schema *arrow.Schema
}

func sameSchema(a, b *arrow.Schema) bool { return a == b || (a != nil && b != nil && a.Equal(b)) }

// mapConnectErr turns a concurrency reject into a backoff request and leaves
// everything else (fatal config errors included, which must be loud) as is.
func mapConnectErr(err error) error {
	if ze := zb.Classify(err); ze != nil && ze.Class == zb.ConcurrencyReject {
		wait := ze.RetryAfter
		if wait <= 0 {
			wait = zb.ResourceExhaustedBackoff
		}
		return service.NewErrBackOff(err, wait)
	}
	return err
}

// syncMetadata reconciles an existing table's comments, properties and
// writer registration without changing its columns.
func (o *output) syncMetadata(ctx context.Context, state *catalog.TableState) (*catalog.TableState, error) {
	d, err := o.desiredFromColumns(state.Columns)
	if err != nil {
		return nil, err
	}
	out, err := o.cat.Reconcile(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("reconcile table %s: %w", o.cfg.Table, err)
	}
	if err := o.cat.RegisterWriter(ctx, o.cfg.Table, catalog.WriterInfo{ID: o.id, Role: catalog.Role(o.cfg.Role)}); err != nil {
		return nil, fmt.Errorf("register writer on %s: %w", o.cfg.Table, err)
	}
	if out.State != nil {
		return out.State, nil
	}
	return state, nil
}

// desiredFromColumns is the desired table for columns as they are (the live
// ones, plus any to add), with the config's comments, contract, role and
// policies. Existing columns are passed through untouched, so a DECIMAL or
// TIMESTAMP_NTZ column never round-trips through its Arrow wire type.
func (o *output) desiredFromColumns(cols []typemap.Column) (catalog.DesiredTable, error) {
	d := catalog.DesiredTable{FullName: o.cfg.Table, Columns: cols, Comments: map[string]string{}}
	return d, o.applyConfig(&d)
}

// desiredForCreate is the desired table for a table created from the
// fields of a first batch, plus the converter's reserved columns.
func (o *output) desiredForCreate(schema *arrow.Schema) (catalog.DesiredTable, error) {
	d, err := catalog.DesiredFromArrow(o.cfg.Table, schema, reservedColumns()...)
	if err != nil {
		return d, err
	}
	return d, o.applyConfig(&d)
}

// applyConfig sets the role, policies, contract and column descriptions.
func (o *output) applyConfig(d *catalog.DesiredTable) error {
	d.Role = catalog.Role(o.cfg.Role)
	d.AllowWidening = o.cfg.Widen
	d.CommentsPolicy = catalog.Policy(o.cfg.CommentsPolicy)
	if o.cfg.ContractPath != "" {
		c, err := catalog.LoadContract(o.cfg.ContractPath)
		if err != nil {
			return fmt.Errorf("field %s.%s: %w", fCatalog, fContract, err)
		}
		d.ApplyContract(c)
	}
	if d.Comments == nil {
		d.Comments = map[string]string{}
	}
	for k, v := range o.cfg.ColumnDescriptions {
		d.Comments[k] = v
	}
	return nil
}

// checkPrimaryRaw applies the primary-raw verdict for a described table:
// exported as metrics, and for the primary_raw role an error naming every
// unmet precondition.
func (o *output) checkPrimaryRaw(state *catalog.TableState) error {
	if o.cfg.Role != RolePrimaryRaw {
		return nil
	}
	unmet := catalog.CheckPrimaryRaw(state)
	o.met.PrimaryRaw(unmet)
	if len(unmet) == 0 {
		o.rawRefusal.Store(nil)
		return nil
	}
	err := error(&catalog.PreconditionError{Table: o.cfg.Table, Unmet: unmet})
	o.rawRefusal.Store(&err)
	o.log.Errorf("refusing to write: %v", err)
	return err
}

// startWatch re-checks the primary-raw preconditions on recheck_interval,
// never trusting a cached verdict: a property can change under a running
// pipeline.
func (o *output) startWatch() {
	o.watchMu.Lock()
	defer o.watchMu.Unlock()
	if o.cfg.Role != RolePrimaryRaw || o.watchStop != nil || o.closed.Load() {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	o.watchStop, o.watchDone = cancel, make(chan struct{})
	go func() {
		defer close(o.watchDone)
		catalog.WatchPrimaryRaw(ctx, o.cat, o.cfg.Table, o.cfg.RecheckInterval, func(err error) {
			var pe *catalog.PreconditionError
			switch {
			case err == nil:
				o.met.PrimaryRaw(nil)
				if o.rawRefusal.Swap(nil) != nil {
					o.log.Infof("table %s satisfies the primary_raw preconditions again: writing resumes", o.cfg.Table)
				}
			case errors.As(err, &pe):
				o.met.PrimaryRaw(pe.Unmet)
				o.rawRefusal.Store(&err)
				o.log.Errorf("refusing to write: %v", err)
			default:
				// Eligibility cannot be confirmed: refuse until it can.
				err = fmt.Errorf("cannot confirm the primary_raw preconditions of %s: %w", o.cfg.Table, err)
				o.rawRefusal.Store(&err)
				o.log.Errorf("refusing to write: %v", err)
			}
		})
	}()
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

// writeOnce converts batch against st, submits the good rows and waits
// for them. It returns the rows that failed conversion and the state used.
func (o *output) writeOnce(ctx context.Context, st *writeState, batch service.MessageBatch) ([]arrowconv.RowError, *writeState, error) {
	lay := o.layout(st, batch)
	res, st, err := o.convert(ctx, st, batch, lay.order)
	if err != nil {
		return nil, st, err
	}
	defer res.Record.Release()
	o.met.Reconciled(res.Reconciled)
	if res.Record.NumRows() > 0 {
		if err := o.submitAndWait(ctx, st, res, lay); err != nil {
			return nil, st, err
		}
	}
	return append(lay.keyErrs, res.RowErrors...), st, nil
}

// layout says in which order a batch is converted and which stream group
// each message belongs to. Without an ordering key the batch is converted
// as is and sent as one record (round-robin over the pool). With one, the
// messages are ordered by group, the pool member their key maps to
// (pool.Pick), so the converted record splits into one contiguous slice per
// member without copying, and a batch costs at most one Write per stream.
// Rows keep their batch order within a group.
type layout struct {
	order   []int    // message indices in conversion order; nil = as is
	group   []int    // group of each message index; nil without ordering key
	keys    []string // a key of each group, written as the group's key
	keyErrs []arrowconv.RowError
}

func (o *output) layout(st *writeState, batch service.MessageBatch) layout {
	if o.cfg.OrderingKey == nil {
		return layout{}
	}
	n := max(st.pool.Size(), 1)
	// Group n holds empty keys: no ordering asked, written round-robin.
	lay := layout{group: make([]int, len(batch)), keys: make([]string, n+1)}
	buckets := make([][]int, n+1)
	for i, m := range batch {
		key, err := o.cfg.OrderingKey.TryString(m)
		if err != nil {
			lay.group[i] = -1
			lay.keyErrs = append(lay.keyErrs, arrowconv.RowError{Index: i, Column: fOrderingKey, Err: err})
			continue
		}
		// The group is the pool member the key maps to, and the group is
		// written under one of its own keys: every row of a key lands on
		// the member Pick(key) names, whatever else shares its batch.
		g := st.pool.Pick(key)
		if g < 0 {
			g = n
		}
		lay.group[i] = g
		if len(buckets[g]) == 0 {
			lay.keys[g] = key
		}
		buckets[g] = append(buckets[g], i)
	}
	lay.order = make([]int, 0, len(batch))
	for _, b := range buckets {
		lay.order = append(lay.order, b...)
	}
	return lay
}

// convert converts the messages of batch listed in order (all, in batch
// order, when nil) against st. Indices in the result refer to batch. With
// provisioning on, rows failing on a field the table lacks trigger one
// evolution (add the columns, reopen the pool) and a second conversion.
func (o *output) convert(ctx context.Context, st *writeState, batch service.MessageBatch, order []int) (arrowconv.Result, *writeState, error) {
	rows := make([]arrowconv.Row, 0, len(batch))
	if order == nil {
		for _, m := range batch {
			rows = append(rows, m)
		}
	} else {
		for _, i := range order {
			rows = append(rows, batch[i])
		}
	}
	conv := func(st *writeState) (arrowconv.Result, error) {
		res, err := st.conv.Convert(rows)
		if err != nil {
			return res, fmt.Errorf("convert batch for %s: %w", o.cfg.Table, err)
		}
		if order != nil {
			for r, i := range res.SourceIndex {
				res.SourceIndex[r] = order[i]
			}
			for k := range res.RowErrors {
				res.RowErrors[k].Index = order[res.RowErrors[k].Index]
			}
		}
		return res, nil
	}
	res, err := conv(st)
	if err != nil {
		return res, st, err
	}
	if !o.cfg.Provision || !hasUnknownField(res.RowErrors) {
		return res, st, nil
	}
	next, err := o.evolve(ctx, st, batch, res.RowErrors)
	if err != nil {
		res.Record.Release()
		return arrowconv.Result{}, st, err
	}
	if next == st {
		return res, st, nil // nothing could be added: the row errors stand
	}
	res.Record.Release()
	res, err = conv(next)
	return res, next, err
}

func hasUnknownField(errs []arrowconv.RowError) bool {
	for _, e := range errs {
		if errors.Is(e.Err, arrowconv.ErrUnknownField) {
			return true
		}
	}
	return false
}

// structured decodes the messages listed in idx (all when idx is nil) for
// schema inference; undecodable messages are skipped (they fail conversion
// with their own error).
func structured(batch service.MessageBatch, idx []int) []map[string]any {
	var out []map[string]any
	add := func(m *service.Message) {
		v, err := m.AsStructured()
		if err != nil {
			return
		}
		if obj, ok := v.(map[string]any); ok {
			out = append(out, obj)
		}
	}
	if idx == nil {
		for _, m := range batch {
			add(m)
		}
		return out
	}
	for _, i := range idx {
		add(batch[i])
	}
	return out
}

// createFromBatch creates the absent table from the fields of the first
// batch, then opens the pool on it.
func (o *output) createFromBatch(ctx context.Context, batch service.MessageBatch) (*writeState, error) {
	o.schemaMu.Lock()
	defer o.schemaMu.Unlock()
	if st := o.st.Load(); st != nil && st.pool != nil {
		return st, nil // another batch created it meanwhile
	}
	reserved := map[string]bool{}
	for _, c := range reservedColumns() {
		reserved[strings.ToLower(c.Name)] = true
	}
	fields, conflicts := inferFields(func(n string) bool { return reserved[strings.ToLower(n)] }, structured(batch, nil))
	for _, c := range conflicts {
		o.log.Warnf("table %s: cannot infer a column type: %v", o.cfg.Table, c)
	}
	if len(fields) == 0 {
		return nil, fmt.Errorf("table %s does not exist and no column could be inferred from a batch of %d messages", o.cfg.Table, len(batch))
	}
	d, err := o.desiredForCreate(arrow.NewSchema(fields, nil))
	if err != nil {
		return nil, err
	}
	out, err := o.cat.Reconcile(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("create table %s: %w", o.cfg.Table, err)
	}
	o.log.Infof("table %s provisioned (%d statements)", o.cfg.Table, out.Statements)
	state := out.State
	if state == nil {
		if state, err = o.cat.Describe(ctx, o.cfg.Table); err != nil {
			return nil, fmt.Errorf("describe table %s after create: %w", o.cfg.Table, err)
		}
		if state == nil {
			return nil, fmt.Errorf("table %s still absent after create", o.cfg.Table)
		}
	}
	if err := o.cat.RegisterWriter(ctx, o.cfg.Table, catalog.WriterInfo{ID: o.id, Role: catalog.Role(o.cfg.Role)}); err != nil {
		o.log.Warnf("register writer on %s: %v", o.cfg.Table, err)
	}
	if err := o.checkPrimaryRaw(state); err != nil {
		return nil, err
	}
	st, err := o.buildState(ctx, 1, state.Columns, nil)
	if err != nil {
		return nil, err
	}
	if o.closed.Load() {
		_ = st.pool.Close(ctx)
		return nil, errors.New("zerobus: output closed")
	}
	o.st.Store(st)
	o.startWatch()
	return st, nil
}

// evolve adds columns for the new fields of the messages that failed on an
// unknown field, then reopens the pool on the new schema. It runs once per
// drift: a caller that finds the state already replaced uses the new one.
func (o *output) evolve(ctx context.Context, seen *writeState, batch service.MessageBatch, errs []arrowconv.RowError) (*writeState, error) {
	o.schemaMu.Lock()
	defer o.schemaMu.Unlock()
	if cur := o.st.Load(); cur != seen {
		return cur, nil // someone else evolved the table meanwhile
	}
	var idx []int
	for _, e := range errs {
		if errors.Is(e.Err, arrowconv.ErrUnknownField) {
			idx = append(idx, e.Index)
		}
	}
	known := func(n string) bool { return seen.names[strings.ToLower(n)] || o.refused[strings.ToLower(n)] }
	fields, conflicts := inferFields(known, structured(batch, idx))
	for _, c := range conflicts {
		o.log.Warnf("table %s: cannot infer a column type for a new field: %v", o.cfg.Table, c)
	}
	add := make([]typemap.Column, 0, len(fields))
	var names []string
	for _, f := range fields {
		t, err := typemap.FromArrow(f.Type)
		if !typemap.ValidIdentifier(f.Name) || err != nil {
			o.log.Warnf("table %s: not adding a column for field %q (not a valid column name or type: %v); its rows fail", o.cfg.Table, f.Name, err)
			o.refused[strings.ToLower(f.Name)] = true
			continue
		}
		add = append(add, typemap.Column{Name: f.Name, Type: t, Nullable: true})
		names = append(names, f.Name)
	}
	if len(add) == 0 {
		return seen, nil
	}
	d, err := o.desiredFromColumns(append(append([]typemap.Column{}, seen.columns...), add...))
	if err != nil {
		return nil, err
	}
	o.log.Infof("table %s: messages carry new fields %v: adding columns", o.cfg.Table, names)
	out, err := o.cat.Reconcile(ctx, d)
	var refused *catalog.RefusedError
	if errors.As(err, &refused) {
		// Retrying cannot help: remember the fields, let their rows fail
		// alone (a fallback output dead-letters them), keep writing.
		o.log.Errorf("table %s: %v; rows carrying %v fail", o.cfg.Table, err, names)
		for _, n := range names {
			o.refused[strings.ToLower(n)] = true
		}
		return seen, nil
	}
	if err != nil {
		return nil, fmt.Errorf("add columns %v to %s: %w", names, o.cfg.Table, err)
	}
	state := out.State
	if state == nil {
		if state, err = o.cat.Describe(ctx, o.cfg.Table); err != nil || state == nil {
			return nil, fmt.Errorf("describe table %s after evolving: %v", o.cfg.Table, err)
		}
	}
	next, err := o.buildState(ctx, seen.gen+1, state.Columns, seen.pool)
	if err != nil {
		return nil, err
	}
	o.st.Store(next)
	return next, nil
}

// redescribe handles a SCHEMA_VALIDATION_FAILED from the service: the table
// changed under us. It describes the table afresh and, if its columns
// differ, reopens the pool on them. The failed batch is nacked regardless
// and is converted against the new schema when redelivered.
func (o *output) redescribe(ctx context.Context, seen *writeState) {
	o.schemaMu.Lock()
	defer o.schemaMu.Unlock()
	if o.st.Load() != seen {
		return
	}
	state, err := o.cat.Describe(ctx, o.cfg.Table)
	if err != nil || state == nil {
		o.log.Errorf("re-describe table %s after a schema rejection: %v", o.cfg.Table, err)
		return
	}
	if sameColumns(state.Columns, seen.columns) {
		return
	}
	next, err := o.buildState(ctx, seen.gen+1, state.Columns, seen.pool)
	if err != nil {
		o.log.Errorf("reopen streams of %s on the re-described schema: %v", o.cfg.Table, err)
		return
	}
	o.log.Infof("table %s changed under the pipeline: streams reopened on its new schema", o.cfg.Table)
	o.st.Store(next)
}

func sameColumns(a, b []typemap.Column) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Nullable != b[i].Nullable || !a[i].Type.Equal(b[i].Type) {
			return false
		}
	}
	return true
}

// part is one slice of a converted record bound for one stream group.
type part struct {
	key    string
	rec    arrow.RecordBatch
	bytes  int64
	ticket *pool.Ticket
}

// submitAndWait submits the converted rows (one slice per ordering-key
// group) and waits for every ticket. Nothing here reads a submitted
// watermark: only the tickets, settled by the ack lanes after the durable
// ack, decide the outcome.
func (o *output) submitAndWait(ctx context.Context, st *writeState, res arrowconv.Result, lay layout) error {
	parts := split(res, lay)
	defer func() {
		for _, p := range parts {
			p.rec.Release()
		}
	}()
	for i := range parts {
		t, err := st.pool.Write(ctx, parts[i].key, parts[i].rec)
		if err != nil {
			o.onWriteErr(ctx, st, err)
			return fmt.Errorf("submit %d rows to %s: %w", parts[i].rec.NumRows(), o.cfg.Table, err)
		}
		parts[i].ticket = t
	}
	// ack.timeout bounds the wait for the whole batch: past it the batch is
	// nacked (and redelivered), never acked.
	wctx, cancel := context.WithTimeoutCause(ctx, o.cfg.AckTimeout,
		fmt.Errorf("no durable ack within ack.timeout (%s)", o.cfg.AckTimeout))
	defer cancel()
	var firstErr error
	for i := range parts {
		if err := parts[i].ticket.Wait(wctx); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		o.met.Sent(parts[i].ticket.Stream, parts[i].rec.NumRows(), parts[i].bytes)
	}
	if firstErr != nil {
		o.onWriteErr(ctx, st, firstErr)
		if cause := context.Cause(wctx); cause != nil {
			return fmt.Errorf("rows for %s not confirmed durable: %w (%w)", o.cfg.Table, firstErr, cause)
		}
		return fmt.Errorf("rows for %s not confirmed durable: %w", o.cfg.Table, firstErr)
	}
	return nil
}

// onWriteErr reacts to a stream error: a schema rejection re-describes the
// table so the redelivered batch meets the new schema.
func (o *output) onWriteErr(ctx context.Context, st *writeState, err error) {
	var ze *zb.Error
	if errors.As(err, &ze) && ze.IsSchemaMismatch() {
		o.log.Warnf("table %s rejected the stream schema (%v): re-describing", o.cfg.Table, err)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.cfg.CloseTimeout)
		defer cancel()
		o.redescribe(rctx, st)
	}
}

// split cuts the converted record into one zero-copy slice per stream
// group (the whole record, key "", without an ordering key). Rows of one
// group are contiguous because layout ordered the conversion by group.
func split(res arrowconv.Result, lay layout) []part {
	n := int(res.Record.NumRows())
	// Bytes are the Arrow size of the record, shared pro rata among slices.
	total := recordBytes(res.Record)
	var parts []part
	for lo := 0; lo < n; {
		hi, g := lo, -1
		if lay.group != nil {
			g = lay.group[res.SourceIndex[lo]]
		}
		for hi < n && (lay.group == nil || lay.group[res.SourceIndex[hi]] == g) {
			hi++
		}
		b := total * int64(hi-lo) / int64(n)
		key := ""
		if g >= 0 {
			key = lay.keys[g]
		}
		parts = append(parts, part{key: key, rec: res.Record.NewSlice(int64(lo), int64(hi)), bytes: b})
		lo = hi
	}
	return parts
}

// recordBytes is the size of the buffers of rec's columns.
func recordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	var walk func(d arrow.ArrayData)
	walk = func(d arrow.ArrayData) {
		for _, b := range d.Buffers() {
			if b != nil {
				n += int64(b.Len())
			}
		}
		for _, c := range d.Children() {
			walk(c)
		}
	}
	for _, col := range rec.Columns() {
		walk(col.Data())
	}
	return n
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

// clientObserver logs the client's connection events. Rotations are normal
// and logged at debug; a stream failing for good is an error.
type clientObserver struct{ log *service.Logger }

func (c clientObserver) OnRotation(table string) {
	c.log.Debugf("zerobus stream to %s rotated by the service", table)
}

func (c clientObserver) OnReconnect(table string, reason error) {
	c.log.Debugf("zerobus stream to %s reconnected: %v", table, reason)
}

func (c clientObserver) OnRetry(table string, attempt int, err error) {
	c.log.Warnf("zerobus stream to %s: reconnect attempt %d failed: %v", table, attempt, err)
}

func (c clientObserver) OnFailure(table string, err *zb.Error) {
	c.log.Errorf("zerobus stream to %s failed: %v", table, err)
}

// reservedColumns are the converter's metadata columns as table columns,
// added to every table the output creates.
func reservedColumns() []typemap.Column {
	rc := arrowconv.ReservedColumns()
	out := make([]typemap.Column, len(rc))
	for i, r := range rc {
		out[i] = r.Column()
	}
	return out
}
