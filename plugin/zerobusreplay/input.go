package zerobusreplay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog/rest"
	_ "github.com/apache/iceberg-go/io/gocloud/s3" // s3:// file IO for vended credentials
	"github.com/apache/iceberg-go/table"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
)

// icebergRESTPath is where Unity Catalog serves its Iceberg REST catalog
// (Databricks docs, "Access Databricks tables from Apache Iceberg clients").
const icebergRESTPath = "/api/2.1/unity-catalog/iceberg-rest"

// keyExpiresAt is the load-table config key carrying the expiry of vended
// S3 credentials (Iceberg REST spec, LoadTableResult config).
const keyExpiresAt = "s3.session-token-expires-at-ms"

// filesPerRead is how many data files one scan read (iceberg-go
// Scan.ReadTasks) covers. One read opens one file IO and shares it, with
// its S3 client and connections, over its files, which is what makes a
// table of many small files fast to replay; iceberg-go also caches the
// Parquet footers of a read's files until the read ends, so the count is
// bounded to keep that cache small. Files are still decoded one at a time
// (scan concurrency 1) and streamed one Arrow batch at a time, so what the
// input holds at once is bounded whatever the table size: the open file's
// reader, the batch being converted and the one decoded ahead of it, and the
// footers of at most filesPerRead files.
const filesPerRead = 64

// planConcurrency is how many manifests planning reads at once.
const planConcurrency = 4

// input is the zerobus_replay BatchInput.
type input struct {
	cfg Config
	log *service.Logger

	mRows       *service.MetricCounter
	mLag        *service.MetricGauge
	mNotVisible *service.MetricGauge
	mGaps       *service.MetricGauge

	// ctx bounds the scan's iterators for the input's lifetime.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	ready    bool
	uc       *catalog.UC
	cat      *rest.Catalog
	rec      *configRecorder
	ident    table.Identifier
	tbl      *table.Table
	creds    *vendedCredentials
	files    *readPlan // the current read's files, fetched ahead
	snapshot int64
	filter   iceberg.BooleanExpression
	scan     *table.Scan
	tasks    []table.FileScanTask
	taskIdx  int // first file of the current read
	readEnd  int // end of the current read's files
	next     func() (arrow.RecordBatch, error, bool)
	stop     func()
	conv     *rowConverter
	rows     int64
}

func newInput(cfg Config, mgr *service.Resources) *input {
	ctx, cancel := context.WithCancel(context.Background())
	m := mgr.Metrics()
	return &input{
		cfg: cfg, log: mgr.Logger(), ctx: ctx, cancel: cancel,
		files:       &readPlan{readAhead: cfg.ReadAhead},
		mRows:       m.NewCounter("zerobus_replay_rows"),
		mLag:        m.NewGauge("zerobus_replay_iceberg_lag_versions"),
		mNotVisible: m.NewGauge("zerobus_replay_rows_not_visible"),
		mGaps:       m.NewGauge("zerobus_replay_coverage_gaps"),
	}
}

// Connect checks the table, settles the read-after-write hazard as
// configured, reports coverage and plans the scan. Once planned it is a
// no-op, so a reconnect resumes where the scan is.
//
// A refusal (isRefusal: the table is missing, fails a precondition, is not
// granted, the selection has gaps under require_complete …) is logged once
// at ERROR and ends the input with service.ErrEndOfInput, so the pipeline
// stops instead of the engine retrying a Connect that cannot succeed; the
// process learns of it through Refused. Other errors are returned and the
// engine retries them with back-off.
func (in *input) Connect(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.ready {
		return nil
	}
	err := in.connect(ctx)
	if err != nil && isRefusal(err) {
		refusals.Add(1)
		in.log.Errorf("zerobus_replay: refused, nothing replayed, the input ends (benthos-zerobus exits with status %d): %v", RefusedExitCode, err)
		return service.ErrEndOfInput
	}
	if err != nil {
		return err // the engine logs it and retries with back-off
	}
	in.ready = true
	return nil
}

func (in *input) connect(ctx context.Context) error {
	c := in.cfg
	in.log.Infof("zerobus_replay: workspace_url=%s table=%s client_id=%s client_secret=<redacted> (credentials from %s) warehouse_id=%q where=[%s] batch_size=%d read_ahead=%d consistency=%s force_timeout=%s require_primary_raw=%t require_complete=%t coverage_table=%s credential_refresh_margin=%s workspace_timeout=%s",
		c.WorkspaceURL, c.Table, c.ClientID, c.credSource, c.WarehouseID, c.Where, c.BatchSize, c.ReadAhead, c.Consistency, c.ForceTimeout,
		c.RequirePrimary, c.RequireComplete, c.CoverageTable, c.RefreshMargin, c.WorkspaceTimeout)
	if in.uc == nil {
		uc, err := catalog.NewUC(catalog.UCConfig{
			Host: c.WorkspaceURL, ClientID: c.ClientID, ClientSecret: c.ClientSecret, AuthType: "oauth-m2m",
			WarehouseID: c.WarehouseID, CallTimeout: c.WorkspaceTimeout, CredentialSource: c.credSource,
			Logger: slog.New(slog.DiscardHandler),
			// The output's rules: plaintext only to loopback (redirects
			// included), never through a proxy.
			HTTPTransport: ingest.NewHTTPTransport(nil, nil),
		})
		if err != nil {
			return fmt.Errorf("unity catalog client: %w", err)
		}
		in.uc = uc
	}
	state, err := in.uc.Describe(ctx, c.Table)
	if err != nil {
		return fmt.Errorf("describe table %s: %w", c.Table, err)
	}
	if state == nil {
		return refuse(fmt.Errorf("table %s does not exist (field %s)", c.Table, fTable))
	}
	if c.RequirePrimary {
		if unmet := catalog.CheckPrimaryRaw(state); len(unmet) > 0 {
			return &catalog.PreconditionError{Table: c.Table, Unmet: unmet}
		}
	} else if !catalog.IcebergReadsOn(state.Properties) {
		// Never converted to Iceberg, so never served by the REST catalog.
		return refuse(fmt.Errorf("table %s has no Iceberg reads (%s does not list iceberg), so the Iceberg REST catalog cannot serve it", c.Table, catalog.PropUniversalFormats))
	}
	filter, err := buildFilter(c.Where, state)
	if err != nil {
		return refuse(err)
	}
	in.filter = filter

	in.ident = restIdent(c.Table)
	if in.cat == nil {
		in.rec = newConfigRecorder()
		tokenURL, err := url.Parse(c.WorkspaceURL + "/oidc/v1/token")
		if err != nil {
			return fmt.Errorf("field %s: %w", fWorkspaceURL, err)
		}
		cctx, cancel := context.WithTimeout(ctx, c.WorkspaceTimeout)
		cat, err := rest.NewCatalog(cctx, "uc", c.WorkspaceURL+icebergRESTPath,
			rest.WithCredential(c.ClientID+":"+c.ClientSecret), rest.WithAuthURI(tokenURL), rest.WithScope("all-apis"),
			rest.WithWarehouseLocation(strings.SplitN(c.Table, ".", 2)[0]), // the UC catalog
			rest.WithHeaders(map[string]string{"X-Iceberg-Access-Delegation": "vended-credentials"}),
			rest.WithCustomTransport(in.rec))
		cancel()
		if err != nil {
			return fmt.Errorf("iceberg REST catalog %s: %w", c.WorkspaceURL+icebergRESTPath, err)
		}
		in.cat = cat
	}
	if state, err = in.firstConversion(ctx, state); err != nil {
		return err
	}
	if err := in.loadTable(ctx); err != nil {
		return err
	}
	if err := in.convertCoverage(ctx); err != nil {
		return err
	}
	if err := in.settleConsistency(ctx, state); err != nil {
		return err
	}
	if err := in.reportCoverage(ctx); err != nil {
		return err
	}
	return in.plan(ctx)
}

// loadTable (re)loads the table through the REST catalog, which vends
// storage credentials, and makes its file IO renew them (vendedCredentials)
// by reloading the table when they are about to expire.
func (in *input) loadTable(ctx context.Context) error {
	tbl, cfg, err := in.loadIdent(ctx, in.ident)
	if err != nil {
		return fmt.Errorf("load table %s through the Iceberg REST catalog: %w", in.cfg.Table, err)
	}
	in.creds = &vendedCredentials{
		margin: in.cfg.RefreshMargin, cfg: cfg, debugf: in.log.Debugf,
		reload: func(ctx context.Context) (map[string]string, error) {
			_, cfg, err := in.loadIdent(ctx, in.ident)
			if err != nil {
				return nil, fmt.Errorf("load table %s through the Iceberg REST catalog: %w", in.cfg.Table, err)
			}
			return cfg, nil
		},
	}
	fsF, err := renewingFS(ctx, tbl, cfg, in.creds)
	if err != nil {
		return fmt.Errorf("table %s: %w", in.cfg.Table, err)
	}
	in.tbl = table.New(tbl.Identifier(), tbl.Metadata(), tbl.MetadataLocation(), withWholeFiles(fsF, in.files), in.cat)
	return nil
}

// loadIdent loads one table and returns it with the config (vended
// credentials) the catalog answered with.
func (in *input) loadIdent(ctx context.Context, ident table.Identifier) (*table.Table, map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, in.cfg.WorkspaceTimeout)
	defer cancel()
	tbl, err := in.cat.LoadTable(ctx, ident)
	if err != nil {
		return nil, nil, err
	}
	return tbl, in.rec.last(strings.Join(ident, "/")), nil
}

// restIdent is the Iceberg REST identifier (schema, table) of the checked
// three-part name catalog.schema.table; the catalog is the REST catalog's
// warehouse.
func restIdent(full string) table.Identifier {
	parts := strings.Split(full, ".")
	return table.Identifier{parts[1], parts[2]}
}

// convertedVersion is the Delta version state's Iceberg metadata was last
// converted from, or -1 when it never was.
func convertedVersion(state *catalog.TableState) int64 {
	if state.IcebergConvertedVersion == nil {
		return -1
	}
	return *state.IcebergConvertedVersion
}

// settleConsistency compares the Iceberg conversion with the Delta log and,
// for force, makes the catalog convert and waits for it.
func (in *input) settleConsistency(ctx context.Context, state *catalog.TableState) error {
	converted := convertedVersion(state)
	dl, err := readDeltaLog(ctx, in.rec.last(strings.Join(in.ident, "/")), in.tbl.Location(), converted)
	if err != nil {
		return fmt.Errorf("read the Delta log of %s: %w", in.cfg.Table, err)
	}
	lag := max(dl.version-converted, 0)
	in.mLag.Set(lag)
	in.mNotVisible.Set(dl.rowsAfter)
	if lag == 0 {
		in.log.Infof("zerobus_replay: Iceberg metadata of %s is current (converted Delta version %d)", in.cfg.Table, converted)
		return nil
	}
	if in.cfg.Consistency == ConsistencyTolerate {
		in.log.Warnf("zerobus_replay: reading the latest Iceberg snapshot of %s, which lags the Delta table: converted Delta version %d, Delta version %d (%d versions behind); %d rows committed to Delta are not visible yet and will not be replayed (consistency: force waits for them)",
			in.cfg.Table, converted, dl.version, lag, dl.rowsAfter)
		return nil
	}
	in.log.Infof("zerobus_replay: Iceberg metadata of %s lags (converted %d, Delta %d, %d rows not visible): running MSCK REPAIR TABLE … SYNC METADATA and waiting up to %s",
		in.cfg.Table, converted, dl.version, dl.rowsAfter, in.cfg.ForceTimeout)
	if err := in.syncMetadata(ctx, in.cfg.Table, dl.version); err != nil {
		return err
	}
	in.mLag.Set(0)
	in.mNotVisible.Set(0)
	return in.loadTable(ctx)
}

// firstConversion makes, with consistency: force, the catalog convert a
// table that has no Iceberg metadata yet (the REST catalog cannot load it
// until then) and returns its state after. Otherwise it returns state.
func (in *input) firstConversion(ctx context.Context, state *catalog.TableState) (*catalog.TableState, error) {
	if in.cfg.Consistency != ConsistencyForce || state.IcebergConvertedVersion != nil {
		return state, nil
	}
	in.log.Infof("zerobus_replay: %s has no Iceberg metadata yet: running MSCK REPAIR TABLE … SYNC METADATA and waiting up to %s", state.FullName, in.cfg.ForceTimeout)
	if err := in.syncMetadata(ctx, state.FullName, 0); err != nil {
		return nil, err
	}
	after, err := in.uc.Describe(ctx, state.FullName)
	if err != nil {
		return nil, fmt.Errorf("describe table %s: %w", state.FullName, err)
	}
	if after == nil {
		return nil, refuse(fmt.Errorf("table %s no longer exists", state.FullName))
	}
	return after, nil
}

// syncMetadata runs MSCK REPAIR TABLE … SYNC METADATA on table and waits,
// bounded by force_timeout, until its Iceberg conversion reaches version.
func (in *input) syncMetadata(ctx context.Context, table string, version int64) error {
	quoted, err := catalog.QuoteTableName(table)
	if err != nil {
		return fmt.Errorf("field %s: %w", fTable, err)
	}
	wctx, cancel := context.WithTimeout(ctx, in.cfg.ForceTimeout)
	defer cancel()
	if err := in.uc.Execute(wctx, "MSCK REPAIR TABLE "+quoted+" SYNC METADATA"); err != nil {
		return fmt.Errorf("consistency: force: MSCK REPAIR TABLE %s SYNC METADATA: %w", table, err)
	}
	for {
		st, err := in.uc.Describe(wctx, table)
		if err == nil && st != nil && st.IcebergConvertedVersion != nil && *st.IcebergConvertedVersion >= version {
			in.log.Infof("zerobus_replay: Iceberg metadata of %s reached Delta version %d", table, *st.IcebergConvertedVersion)
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("consistency: force: the Iceberg conversion of %s did not reach Delta version %d within %s (field %s)", table, version, in.cfg.ForceTimeout, fForceTimeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// plan pins the current snapshot and plans its data files.
func (in *input) plan(ctx context.Context) error {
	snap := in.tbl.CurrentSnapshot()
	if snap == nil {
		in.log.Infof("zerobus_replay: %s has no Iceberg snapshot yet: nothing to replay", in.cfg.Table)
		return nil
	}
	in.snapshot = snap.SnapshotID
	in.scan = in.newScan()
	// Planning reads one manifest per commit: read planConcurrency of them
	// at a time (a planning scan's concurrency does not touch data files).
	planScan := in.tbl.Scan(append(in.scanOptions(), table.WithMaxConcurrency(planConcurrency))...)
	tasks, err := planScan.PlanFiles(ctx)
	_ = planScan.Close()
	if err != nil {
		return fmt.Errorf("plan the scan of %s (snapshot %d): %w", in.cfg.Table, in.snapshot, err)
	}
	in.tasks = tasks
	in.log.Infof("zerobus_replay: replaying %s snapshot %d: %d data files selected by %s", in.cfg.Table, in.snapshot, len(tasks), in.cfg.Where)
	return nil
}

// newScan is the scan that reads the planned files, one file at a time.
func (in *input) newScan() *table.Scan {
	return in.tbl.Scan(append(in.scanOptions(), table.WithMaxConcurrency(1))...)
}

// scanOptions are the snapshot, batch size and row filter of every scan.
func (in *input) scanOptions() []table.ScanOption {
	opts := []table.ScanOption{table.WithSnapshotID(in.snapshot), table.WithArrowBatchSize(in.cfg.BatchSize)}
	if in.filter != nil {
		opts = append(opts, table.WithRowFilter(in.filter))
	}
	return opts
}

// ReadBatch returns the rows of the next Arrow batch as messages, reading
// the planned data files filesPerRead at a time; it ends with
// service.ErrEndOfInput after the last file.
func (in *input) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.ready {
		return nil, nil, service.ErrNotConnected
	}
	for {
		if in.next == nil {
			if in.taskIdx >= len(in.tasks) {
				in.log.Infof("zerobus_replay: %s replayed: %d rows", in.cfg.Table, in.rows)
				return nil, nil, service.ErrEndOfInput
			}
			if err := in.openRead(); err != nil {
				return nil, nil, err
			}
		}
		rec, err, ok := in.next()
		if !ok {
			in.closeRead()
			in.taskIdx = in.readEnd
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read %s of %s: %w", in.readFiles(), in.cfg.Table, err)
		}
		batch, err := in.convert(rec)
		rec.Release()
		if err != nil {
			return nil, nil, fmt.Errorf("%s of %s: %w", in.readFiles(), in.cfg.Table, err)
		}
		if len(batch) == 0 {
			continue
		}
		in.rows += int64(len(batch))
		in.mRows.Incr(int64(len(batch)))
		return batch, func(context.Context, error) error { return nil }, nil
	}
}

// openRead starts reading the next filesPerRead data files with one scan
// read. Expiring storage credentials are renewed by the file IO itself
// (vendedCredentials), request by request.
func (in *input) openRead() error {
	in.readEnd = min(in.taskIdx+filesPerRead, len(in.tasks))
	in.files.set(in.tasks[in.taskIdx:in.readEnd])
	_, seq, err := in.scan.ReadTasks(in.ctx, in.tasks[in.taskIdx:in.readEnd])
	if err != nil {
		return fmt.Errorf("read %s of %s: %w", in.readFiles(), in.cfg.Table, err)
	}
	in.next, in.stop = iter.Pull2(seq)
	return nil
}

// readFiles names the data files of the current read, for errors.
func (in *input) readFiles() string {
	first := in.tasks[in.taskIdx].File.FilePath()
	if in.readEnd-in.taskIdx == 1 {
		return "data file " + first
	}
	return fmt.Sprintf("data files %d to %d of %d (%s to %s)", in.taskIdx+1, in.readEnd, len(in.tasks), first, in.tasks[in.readEnd-1].File.FilePath())
}

func (in *input) closeRead() {
	if in.stop != nil {
		in.stop()
	}
	in.next, in.stop = nil, nil
}

func (in *input) convert(rec arrow.RecordBatch) (service.MessageBatch, error) {
	if in.conv == nil || !in.conv.schema.Equal(rec.Schema()) {
		in.conv = newRowConverter(rec.Schema())
	}
	return in.conv.messages(rec)
}

// Close stops the scan.
func (in *input) Close(context.Context) error {
	in.cancel()
	in.mu.Lock()
	defer in.mu.Unlock()
	in.closeRead()
	if in.scan != nil {
		_ = in.scan.Close()
	}
	return nil
}

// buildFilter turns the selection into an Iceberg row filter (nil for all
// rows); a condition on a reserved column the table lacks is an error.
func buildFilter(w Where, state *catalog.TableState) (iceberg.BooleanExpression, error) {
	var preds []iceberg.BooleanExpression
	need := func(col, field string) error {
		if _, ok := state.Column(col); !ok {
			return fmt.Errorf("field %s.%s: table %s has no %s column", fWhere, field, state.FullName, col)
		}
		return nil
	}
	if !w.EmitFrom.IsZero() {
		if err := need(ColEmitTS, fEmitFrom); err != nil {
			return nil, err
		}
		preds = append(preds, iceberg.GreaterThanEqual(iceberg.Reference(ColEmitTS), iceberg.Timestamp(w.EmitFrom.UnixMicro())))
	}
	if !w.EmitTo.IsZero() {
		if err := need(ColEmitTS, fEmitTo); err != nil {
			return nil, err
		}
		preds = append(preds, iceberg.LessThan(iceberg.Reference(ColEmitTS), iceberg.Timestamp(w.EmitTo.UnixMicro())))
	}
	if w.Source != "" {
		if err := need(ColSource, fSource); err != nil {
			return nil, err
		}
		preds = append(preds, iceberg.EqualTo(iceberg.Reference(ColSource), w.Source))
	}
	if w.OffsetFrom != nil {
		if err := need(ColOffset, fOffsetFrom); err != nil {
			return nil, err
		}
		preds = append(preds, iceberg.GreaterThanEqual(iceberg.Reference(ColOffset), *w.OffsetFrom))
	}
	if w.OffsetTo != nil {
		if err := need(ColOffset, fOffsetTo); err != nil {
			return nil, err
		}
		preds = append(preds, iceberg.LessThan(iceberg.Reference(ColOffset), *w.OffsetTo))
	}
	switch len(preds) {
	case 0:
		return nil, nil
	case 1:
		return preds[0], nil
	default:
		return iceberg.NewAnd(preds[0], preds[1], preds[2:]...), nil
	}
}

// configRecorder is the REST catalog's transport: it keeps the config
// (vended credentials and their expiry) of each load-table answer, which
// iceberg-go does not expose, so the input knows when to renew them and can
// list the Delta log with them.
// newConfigRecorder records over the output's transport rules, as the Unity
// Catalog client does: plaintext only to a loopback host (redirects
// included), an https:// request through the environment's proxy by
// CONNECT only. The Iceberg REST catalog's token request carries the client
// secret.
func newConfigRecorder() *configRecorder {
	return &configRecorder{base: ingest.NewHTTPTransport(nil, nil)}
}

type configRecorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	cfgs map[string]map[string]string // "<namespace>/<table>" → config
}

func (r *configRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	_, tbl, ok := strings.Cut(req.URL.Path, "/namespaces/")
	if !ok {
		return resp, nil
	}
	nsName, tName, ok := strings.Cut(tbl, "/tables/")
	if !ok || strings.Contains(tName, "/") {
		return resp, nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("read load-table response: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var lt struct {
		Config map[string]string `json:"config"`
	}
	if json.Unmarshal(body, &lt) == nil {
		r.mu.Lock()
		if r.cfgs == nil {
			r.cfgs = map[string]map[string]string{}
		}
		r.cfgs[unescape(nsName)+"/"+unescape(tName)] = lt.Config
		r.mu.Unlock()
	}
	return resp, nil
}

func (r *configRecorder) last(key string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfgs[key]
}

var errNoCredentials = errors.New("the catalog vended no storage credentials with the table")
