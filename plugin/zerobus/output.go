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

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
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

// output is the zerobus BatchOutput: an adapter over one table writer.
type output struct {
	cfg     *outputConfig
	log     *service.Logger
	met     *metrics
	deps    deps
	version string // the binary's, for the user agent
	wcfg    tablewriter.Config

	// mu guards building the clients and the writer on the first Connect;
	// w is read without it on the write path.
	mu     sync.Mutex
	opener ingest.Opener
	cat    catalog.TableCatalog
	w      atomic.Pointer[tablewriter.Writer]

	loggedKnobs sync.Once
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
	return &output{
		cfg:     cfg,
		log:     mgr.Logger(),
		met:     newMetrics(mgr.Metrics(), cfg.Table),
		deps:    d,
		version: mgr.EngineVersion(),
		wcfg:    wcfg,
	}, nil
}

// Connect opens the table writer: describe (and with provisioning,
// reconcile) the table, then open the stream pool. The engine retries it
// with back-off until it returns nil; after WriteBatch reported
// ErrNotConnected (the streams stopped for good) it describes the table
// afresh and opens new streams.
func (o *output) Connect(ctx context.Context) error {
	o.loggedKnobs.Do(func() {
		o.log.Infof("zerobus output settings: %s", knobsLine(o.cfg.knobs(tablewriter.PoolSize(o.wcfg.Pool))))
		if o.cfg.TLS != nil && o.cfg.TLS.InsecureSkipVerify {
			o.log.Warnf("zerobus: tls.skip_cert_verify is true: the certificates of %s and %s are NOT verified, so anyone on the path can read the credentials and the rows; use it only on a test rig", o.cfg.Endpoint, o.cfg.WorkspaceURL)
		}
	})
	w, err := o.writer()
	if err != nil {
		return err
	}
	if err := w.Open(ctx); err != nil {
		if wait, ok := tablewriter.RetryAfter(err); ok {
			return service.NewErrBackOff(err, wait)
		}
		return err
	}
	return nil
}

// writer returns the table writer, creating it and its clients on first use.
func (o *output) writer() (*tablewriter.Writer, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if w := o.w.Load(); w != nil {
		return w, nil
	}
	if err := o.ensureClients(); err != nil {
		return nil, err
	}
	w := tablewriter.New(o.wcfg, o.opener, o.cat, newSlogLogger(o.log), o.met)
	o.w.Store(w)
	return w, nil
}

// WriteBatch writes the batch and returns nil only once every row of it is
// durable. Rows that do not fit the table fail through a *service.BatchError
// naming the message index and the column; the good rows are durable before
// it is returned. A cancelled ctx returns an error (a nack), never nil.
func (o *output) WriteBatch(ctx context.Context, batch service.MessageBatch) error {
	w := o.w.Load()
	if w == nil {
		return service.ErrNotConnected
	}
	rows := make([]tablewriter.Row, len(batch))
	for i, m := range batch {
		rows[i] = m
	}
	var keyOf tablewriter.KeyFunc
	if o.cfg.OrderingKey != nil {
		keyOf = func(i int) (string, error) { return o.cfg.OrderingKey.TryString(batch[i]) }
	}
	rowErrs, err := w.Write(ctx, rows, keyOf)
	if err != nil {
		if errors.Is(err, tablewriter.ErrNotOpen) {
			o.log.Warnf("zerobus: %v", err)
			return service.ErrNotConnected
		}
		return err
	}
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
// by then are abandoned and their batches nacked (never acked). Then it
// closes the clients it built.
func (o *output) Close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.CloseTimeout)
	defer cancel()
	o.mu.Lock()
	defer o.mu.Unlock()
	var errs []error
	if w := o.w.Load(); w != nil {
		errs = append(errs, w.Close(ctx))
	}
	if c, ok := o.opener.(io.Closer); ok && o.deps.opener == nil {
		errs = append(errs, c.Close())
	}
	if c, ok := o.cat.(io.Closer); ok && o.deps.catalog == nil {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
