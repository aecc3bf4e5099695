// Package zerobus is the `zerobus` Benthos batch output: it writes message
// batches into a Databricks Unity Catalog managed Delta table through the
// Zerobus ingest service, as Apache Arrow over Arrow Flight.
//
// This package is the config spec and a thin adapter: the table's lifecycle
// and the path of a batch (convert → submit → wait until durable) are the
// engine's, internal/tablewriter. The adapter builds the engine's clients,
// maps its row errors to a service.BatchError, a concurrency reject to a
// back-off, and a stopped engine to service.ErrNotConnected, so the Benthos
// engine reconnects and the writer heals without a restart.
package zerobus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/memlimit"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/tablewriter"
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
	o, err := newOutput(cfg, mgr, deps{})
	if err != nil {
		return nil, service.BatchPolicy{}, 0, err
	}
	return o, cfg.Batching, cfg.MaxInFlight, nil
}

// deps are the collaborators the output builds for itself in production and
// that tests replace: the stream opener (ingestfake) and the catalog.
type deps struct {
	opener  ingest.Opener
	catalog catalog.TableCatalog
}

// output is the zerobus BatchOutput: an adapter over one table writer, or,
// with an interpolated table, a router of writers; plus an optional
// dead-letter writer.
type output struct {
	cfg     *outputConfig
	log     *service.Logger
	mgr     *service.Resources
	deps    deps
	version string // the binary's, for the user agent
	wcfg    tablewriter.Config

	// mu guards building the clients and the writers on the first Connect;
	// the write path reads eng without it.
	mu     sync.Mutex
	opener ingest.Opener
	cat    catalog.TableCatalog
	eng    atomic.Pointer[tablewriter.Engine]

	// shutdown is the process's stopping notice (shutdown.go).
	shutdown *shutdownNotice
	// tally counts, per table, the rows delivered and the rows handed
	// back while the pipeline stopped: Close says how many, once.
	tally     deliveryTally
	closeLine sync.Once

	// connectCause is the cause of the last error Connect returned while
	// the writer backs off ("" once connected): Connect returns a cause to
	// the engine once (see Connect). connectMu serialises Connect (the
	// engine never calls it concurrently; tests might).
	connectMu    sync.Mutex
	connectCause string
	// connected is set once a Connect opened the writer; stoppingLine
	// says once that the output stops without ever having connected.
	connected    atomic.Bool
	stoppingLine sync.Once

	loggedKnobs sync.Once
	// unhealth removes the output from the health endpoint.
	unhealth func()
	// releaseMem gives back this output's share of the soft memory limit.
	releaseMem func()
	// unregistry removes the schema_registry block's entry from the
	// health endpoint (nil without one).
	unregistry func()
}

func newOutput(cfg *outputConfig, mgr *service.Resources, d deps) (*output, error) {
	id := mgr.Label()
	if id == "" {
		id = "zerobus"
	}
	wcfg, err := cfg.writerConfig(id)
	if err != nil {
		return nil, err
	}
	if wcfg.Coverage != nil {
		// The coverage table's writer has metrics of its own, labelled
		// with that table.
		wcfg.Coverage.Observer = func(table string) tablewriter.Observer {
			return tablewriter.NewMetrics(metricsSink{mgr.Metrics()}, table)
		}
	}
	unregistry, err := cfg.schemaRegistry(mgr, &wcfg)
	if err != nil {
		return nil, err
	}
	o := &output{
		unregistry: unregistry,
		cfg:        cfg,
		log:        mgr.Logger(),
		mgr:        mgr,
		deps:       d,
		version:    mgr.EngineVersion(),
		shutdown:   processShutdown,
		wcfg:       wcfg,
	}
	if cfg.TableInterp == nil {
		o.tally.seen(cfg.Table)
	}
	_, o.unhealth, err = healthhttp.Attach(mgr, mgr.Label(), healthhttp.Output{Health: o.health, MaxAckAge: cfg.AckTimeout})
	if err != nil {
		o.log.Warnf("zerobus: no health endpoint %s: %v", healthhttp.Path, err)
	}
	return o, nil
}

// health lists the output's tables for the health endpoint.
func (o *output) health() []healthhttp.Table {
	return healthhttp.Tables(o.cfg.Table, o.eng.Load())
}

// Connect opens the table writer: describe (and with provisioning,
// reconcile) the table, then open the stream pool. The engine retries it
// with back-off until it returns nil; after WriteBatch reported
// ErrNotConnected (the streams stopped for good) it describes the table
// afresh and opens new streams. A failure is returned once per cause; while
// the cause persists, Connect itself waits the back-off and tries again.
func (o *output) Connect(ctx context.Context) error {
	o.loggedKnobs.Do(func() {
		o.log.Infof("zerobus output settings: %s", knobsLine(o.cfg.knobs(pool.Size(o.wcfg.Pool))))
		limit, set, release := memlimit.Reserve(memlimit.Share(int64(o.cfg.MaxInFlightBytes), o.cfg.MaxInFlight, o.cfg.Batching.ByteSize))
		o.mu.Lock()
		o.releaseMem = release
		o.mu.Unlock()
		if set {
			o.log.Infof("zerobus: Go soft memory limit set to %d MiB (48 MiB + max_in_flight_bytes + max_in_flight × 4 × batching.byte_size over the zerobus outputs; never below 1.25 × the live heap + 32 MiB) since GOMEMLIMIT is unset; set GOMEMLIMIT to choose your own", limit>>20)
		}
		if o.cfg.TLS != nil && o.cfg.TLS.InsecureSkipVerify {
			o.log.Warnf("zerobus: tls.skip_cert_verify is true: the certificates of %s and %s are NOT verified, so anyone on the path can read the credentials and the rows; use it only on a test rig", o.cfg.Endpoint, o.cfg.WorkspaceURL)
		}
	})
	if _, stopping := o.shutdown.since(); stopping {
		// Nothing more is opened: the engine hands its batches to
		// WriteBatch, which gives them up at the shutdown bound
		// (redelivered by the input).
		return o.connectWhileStopping()
	}
	ctx, cancel := o.shutdown.untilShutdown(ctx)
	defer cancel()
	o.connectMu.Lock()
	defer o.connectMu.Unlock()
	for {
		e, err := o.engine()
		if err != nil {
			return err
		}
		err = e.Open(ctx)
		if err == nil {
			if _, stopping := o.shutdown.since(); stopping && !o.connected.Load() && !anyStreamUp(e) {
				// Open returned as the process stops, before any
				// stream reached the service: a hand-back, not a
				// connection.
				return o.connectWhileStopping()
			}
			o.connectCause = ""
			o.connected.Store(true)
			return nil
		}
		if _, stopping := o.shutdown.since(); stopping {
			return o.connectWhileStopping()
		}
		if ingest.IsPermanent(err) {
			// A rotated secret in the environment is picked up here.
			o.reloadCredentials(ctx)
		}
		wait, ok := tablewriter.RetryAfter(err)
		if !ok {
			o.connectCause = ""
			return err
		}
		// The writer's lifecycle decided when to try again, and said why
		// once per change of cause. Benthos logs every error Connect
		// returns ("Failed to connect to zerobus: …", at error level,
		// whatever the back-off): so the first failure of a cause is
		// returned (the engine waits, then calls Connect again) and,
		// while the same cause persists, Connect waits here and tries
		// again itself, returning once it connects, the cause changes or
		// ctx ends (the pipeline stopping).
		cause := tablewriter.Classify(o.cfg.Table, err).Cause
		if cause != o.connectCause {
			o.connectCause = cause
			return service.NewErrBackOff(err, min(wait, connectPoll))
		}
		// Asked again at least every connectPoll: an Open still in its
		// wait tries nothing (and logs nothing), but opens at once once
		// the streams of the failed open connected by themselves.
		t := time.NewTimer(min(wait, connectPoll))
		select {
		case <-ctx.Done():
			t.Stop()
			if _, stopping := o.shutdown.since(); stopping {
				// Not the back-off: the engine would sleep it (minutes
				// into an outage) past its forced stop, never handing
				// its held batches back.
				return o.connectWhileStopping()
			}
			return service.NewErrBackOff(err, wait)
		case <-t.C:
		}
	}
}

// connectWhileStopping is Connect once the process is stopping: nil, so
// that the engine hands the batches it holds to WriteBatch, which nacks them
// at the shutdown bound (the input redelivers them; its position does not
// advance).
//
// Benthos v4.60's output loop reads no batch before Connect returns nil, and
// logs "Output type zerobus is now active" at once when it first does
// (initConnection in
// github.com/redpanda-data/benthos/blob/v4.60.0/internal/component/output/async_writer.go).
// Its other path, blocking in Connect until the engine's soft stop and
// returning that error, closes the output without that line but never
// hands the held batches back: the engine soft-stops the output only at its
// forced stop, three quarters of shutdown_timeout (Stop in
// github.com/redpanda-data/benthos/blob/v4.60.0/internal/stream/type.go),
// because the input waits for their acks first. Measured with the binary,
// 10 rows held, close_timeout 2s: exit 15.0 s after SIGTERM instead of
// 2.0 s, and the rows never counted (docs/reliability.md). So the output
// takes the hand-back, and for an output that never connected says, in the
// line just before the engine's, what that engine line means.
func (o *output) connectWhileStopping() error {
	if !o.connected.Load() {
		what := "table " + o.cfg.Table
		if o.cfg.TableInterp != nil {
			what = "any table"
		}
		o.stoppingLine.Do(func() {
			o.log.Warnf("zerobus: stopping before %s ever connected: no stream ever reached the service and nothing was written; the batches the engine holds are being handed back to the input now, nacked within close_timeout (it redelivers them). The engine's next line, \"Output type zerobus is now active\", marks only that hand-back: the output never connected", what)
		})
	}
	return nil
}

// anyStreamUp reports whether a stream of e's tables is connected to the
// service now.
func anyStreamUp(e *tablewriter.Engine) bool {
	var tables []tablewriter.TableHealth
	if e.Writer != nil {
		tables = append(tables, e.Writer.Health())
	}
	if e.Router != nil {
		tables = append(tables, e.Router.Health()...)
	}
	for _, t := range tables {
		for _, s := range t.Streams {
			if s.State == tablewriter.StateUp {
				return true
			}
		}
	}
	return false
}

// connectPoll is the longest Connect waits before asking the writer again
// while it backs off: how soon it notices that its streams connected.
const connectPoll = time.Second

// reloadCredentials re-reads the credentials taken from the environment;
// when they changed (a rotated secret), the writers and clients are dropped
// so the next Connect builds them with the new ones.
func (o *output) reloadCredentials(ctx context.Context) {
	o.mu.Lock()
	defer o.mu.Unlock()
	id, secret := o.cfg.ClientID, o.cfg.ClientSecret
	o.cfg.loadCredentials()
	if id == o.cfg.ClientID && secret == o.cfg.ClientSecret {
		return
	}
	o.log.Infof("zerobus: the credentials in the environment changed (%s): reconnecting with them", o.cfg.credSource)
	_ = o.closeLocked(ctx)
	o.eng.Store(nil)
	o.opener, o.cat = nil, nil
}

// engine returns the writers, creating them and their clients on first use.
func (o *output) engine() (*tablewriter.Engine, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e := o.eng.Load(); e != nil {
		return e, nil
	}
	if err := o.ensureClients(); err != nil {
		return nil, err
	}
	log, opener, cat := newSlogLogger(o.log), o.opener, o.cat
	newWriter := func(cfg tablewriter.Config) *tablewriter.Writer {
		met := tablewriter.NewMetrics(metricsSink{o.mgr.Metrics()}, cfg.Table)
		return tablewriter.New(cfg, opener, cat, log, met)
	}
	e := &tablewriter.Engine{}
	if o.cfg.TableInterp == nil {
		e.Writer = newWriter(o.wcfg)
	} else {
		e.Router = tablewriter.NewRouter(func(table string) *tablewriter.Writer {
			cfg := o.wcfg
			cfg.Table = table
			return newWriter(cfg)
		}, tablewriter.RouterConfig{MaxOpen: o.cfg.MaxOpenTables, CloseTimeout: o.cfg.CloseTimeout, Log: log,
			Evictions: tablewriter.NewEvictionCounter(metricsSink{o.mgr.Metrics()})})
	}
	if o.cfg.DLTable != "" {
		cfg := o.wcfg
		cfg.Table, cfg.CreateColumns, cfg.Contract, cfg.Role, cfg.Coverage = o.cfg.DLTable, tablewriter.DeadLetterColumns(), nil, catalog.RoleDerived, nil
		cfg.DedupView, cfg.DedupViewName = false, "" // dead letters have no source position
		cfg.Registry, cfg.Fast = nil, nil            // a dead letter is a row of its own columns
		e.DeadLetters = tablewriter.NewDeadLetters(newWriter(cfg), o.cfg.DLPayload)
	}
	o.eng.Store(e)
	return e, nil
}

// WriteBatch writes the batch and returns nil only once every row of it is
// durable. Rows that do not fit the table fail through a *service.BatchError
// naming the message index and the column; the good rows are durable before
// it is returned. A cancelled ctx returns an error (a nack), never nil.
//
// While the table is not connected it returns service.ErrNotConnected: the
// engine holds the batch, calls Connect (which waits as the writer's
// lifecycle decided) and writes it again. Once the process is stopping, a
// held batch is refused and a batch in flight waits for its durable ack,
// both at most close_timeout from the notice: both are nacked (redelivered).
func (o *output) WriteBatch(ctx context.Context, batch service.MessageBatch) error {
	ctx, cancel := o.shutdown.boundedAfter(ctx, o.cfg.CloseTimeout)
	defer cancel()
	rb, err := newRowBatch(batch)
	if err != nil {
		return err
	}
	res, err := o.writeBatch(ctx, rb)
	if err == nil {
		o.tally.delivered(o.rowsPerTable(rb, res.tables, nil))
		return nil
	}
	_, stopping := o.shutdown.since()
	held := errors.Is(err, service.ErrNotConnected)
	if held {
		if !stopping {
			return err // held: the engine reconnects and writes it again
		}
		// Stopping with the table not connected: the batch is nacked, but
		// only at the end of the shutdown bound (close_timeout from the
		// notice). This output's signal handler can see SIGTERM before the
		// engine's does; a nack while the input still consumes is retried
		// straight back into the output, and the engine's stop then waits
		// for that retry until its forced-termination timeout (measured:
		// 20 s instead of 2 s, 1 run in 3 under load).
		<-ctx.Done()
		err = fmt.Errorf("zerobus: stopping while table %s is not connected: %d rows not written (nacked; the input redelivers them)", o.cfg.Table, rb.len())
	}
	var berr *service.BatchError
	isBatchErr := errors.As(err, &berr)
	if isBatchErr {
		// The rows that did not fail are durable; those that failed alone
		// (not table failures) are refused back to the input.
		o.tally.delivered(o.rowsPerTable(rb, res.tables, func(i int) bool { _, failed := res.failed[i]; return !failed }))
		o.tally.refused(o.rowsPerTable(rb, res.tables, func(i int) bool { table, failed := res.failed[i]; return failed && !table }))
	}
	if stopping || ctx.Err() != nil {
		// A whole-batch error: every row is redelivered. A batch error:
		// the rows that failed as table failures are (a batch split over
		// streams whose other parts were durable), not those that do not
		// fit the table.
		keep := func(int) bool { return true }
		if isBatchErr {
			keep = func(i int) bool { return res.failed[i] }
		}
		if back := o.rowsPerTable(rb, res.tables, keep); len(back) > 0 {
			o.tally.handedBack(back, held)
		}
	}
	return err
}

// writeResult is what writeBatch learnt of a batch: each row's table, when
// the table is interpolated and the rows were routed (nil otherwise), and,
// with a *service.BatchError, the rows that failed, true for those that
// failed as table failures (a *tablewriter.TableError: not confirmed
// durable, redelivered by the input). Both are by row (rowBatch).
type writeResult struct {
	tables []string
	failed map[int]bool
}

// rowsPerTable counts the rows of batch for which keep holds (every row if
// keep is nil) by table: tables[i] when the writer resolved it, else the
// output's table, or its interpolation evaluated now.
func (o *output) rowsPerTable(rb *rowBatch, tables []string, keep func(int) bool) map[string]int {
	if len(tables) == 0 && o.cfg.TableInterp == nil {
		// One table: count without a map update per row.
		n := rb.len()
		if keep != nil {
			n = 0
			for i := range rb.len() {
				if keep(i) {
					n++
				}
			}
		}
		if n == 0 {
			return map[string]int{}
		}
		return map[string]int{o.cfg.Table: n}
	}
	counts := map[string]int{}
	for i := range rb.len() {
		if keep != nil && !keep(i) {
			continue
		}
		table := o.cfg.Table
		switch {
		case i < len(tables) && tables[i] != "":
			table = tables[i]
		case o.cfg.TableInterp != nil:
			if t, err := rowString(o.cfg.TableInterp, o.cfg.tableTmpl, rb.rows[i]); err == nil && t != "" {
				table = t
			}
		}
		counts[table]++
	}
	return counts
}

// writeBatch is WriteBatch's work.
func (o *output) writeBatch(ctx context.Context, rb *rowBatch) (writeResult, error) {
	var res writeResult
	e := o.eng.Load()
	if e == nil {
		return res, service.ErrNotConnected
	}
	var keyOf tablewriter.KeyFunc
	if o.cfg.OrderingKey != nil {
		keyOf = func(i int) (string, error) { return rowString(o.cfg.OrderingKey, o.cfg.orderingTmpl, rb.rows[i]) }
	}
	var tableOf tablewriter.TableFunc
	if o.cfg.TableInterp != nil {
		// The router resolves each row's table once, through this: the
		// tally counts the rows by the same names.
		res.tables = make([]string, rb.len())
		tableOf = func(i int) (string, error) {
			t, err := rowString(o.cfg.TableInterp, o.cfg.tableTmpl, rb.rows[i])
			if err == nil {
				res.tables[i] = t
			}
			return t, err
		}
	}
	rowErrs, err := e.Write(ctx, rb.rows, rb.failed, tableOf, keyOf)
	if errors.Is(err, tablewriter.ErrNotOpen) {
		// The bare sentinel: the engine holds the batch, reconnects and
		// writes it again (the writer logged why, once).
		return res, service.ErrNotConnected
	}
	if err != nil {
		return res, err
	}
	if len(rowErrs) == 0 {
		return res, nil
	}
	table := o.cfg.Table
	if tableOf != nil {
		if t := res.tables[rowErrs[0].Index]; t != "" {
			table = t // the resolved name of an interpolated table
		}
	}
	berr := service.NewBatchError(rb.msgs, fmt.Errorf("zerobus: %d of %d rows do not fit table %s (first: %v)", len(rowErrs), rb.len(), table, rowErrs[0]))
	res.failed = make(map[int]bool, len(rowErrs))
	for _, re := range rowErrs {
		berr = berr.Failed(rb.msgIndex(re.Index), re) // "message i: column c: reason"
		var te *tablewriter.TableError
		res.failed[re.Index] = errors.As(re.Err, &te)
	}
	return res, berr
}

// Close drains and closes the streams within close_timeout; rows not durable
// by then are abandoned and their batches nacked (never acked). Then it
// closes the clients it built.
//
// Once the process is stopping, Close takes only what is left of
// close_timeout since the notice (at least closeFloor), and it says once,
// per table, how many rows were delivered and how many were handed back
// (nacked); it says so too whenever rows were handed back.
func (o *output) Close(ctx context.Context) error {
	bound := o.cfg.CloseTimeout
	if at, stopping := o.shutdown.since(); stopping {
		bound = max(min(bound, time.Until(at.Add(o.cfg.CloseTimeout))), closeFloor)
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	o.unhealth()
	if o.unregistry != nil {
		o.unregistry()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.releaseMem != nil {
		o.releaseMem()
	}
	err := o.closeLocked(ctx)
	_, stopping := o.shutdown.since()
	o.closeLine.Do(func() {
		if line, handedBack := o.tally.line(); handedBack {
			o.log.Warn(line)
		} else if stopping {
			o.log.Info(line)
		}
	})
	return err
}

// closeFloor is the least time Close takes to drain once the process is
// stopping, even when close_timeout since the notice has passed: enough to
// settle the lanes and end the streams' calls.
const closeFloor = 250 * time.Millisecond

// closeLocked closes the writers and the clients the output built; o.mu is
// held.
func (o *output) closeLocked(ctx context.Context) error {
	var errs []error
	if e := o.eng.Load(); e != nil {
		errs = append(errs, e.Close(ctx))
	}
	if c, ok := o.opener.(io.Closer); ok && o.deps.opener == nil {
		errs = append(errs, c.Close())
	}
	if c, ok := o.cat.(io.Closer); ok && o.deps.catalog == nil {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// metricsSink makes the table writers' metric handles in the pipeline's
// Benthos metrics (nil-safe: MockResources has none).
type metricsSink struct{ m *service.Metrics }

func (s metricsSink) Counter(name string, keys ...string) tablewriter.Counter {
	return s.m.NewCounter(name, keys...)
}

func (s metricsSink) Gauge(name string, keys ...string) tablewriter.Gauge {
	return s.m.NewGauge(name, keys...)
}

func (s metricsSink) Timer(name string, keys ...string) tablewriter.Timer {
	return s.m.NewTimer(name, keys...)
}
