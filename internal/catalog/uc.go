package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/databricks/databricks-sdk-go"
	"github.com/databricks/databricks-sdk-go/apierr"
	"github.com/databricks/databricks-sdk-go/client"
	"github.com/databricks/databricks-sdk-go/config"
	uccatalog "github.com/databricks/databricks-sdk-go/service/catalog"
	"github.com/databricks/databricks-sdk-go/service/sql"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// UCConfig configures the Unity Catalog backend. Authentication is the
// SDK's unified auth: OAuth M2M (ClientID + ClientSecret), a personal access
// token, a config-file profile, or the DATABRICKS_* environment variables,
// which fill in whatever is left empty here.
type UCConfig struct {
	Host         string
	ClientID     string
	ClientSecret string
	Token        string
	Profile      string
	// AuthType picks the method when several are configured ("oauth-m2m",
	// "pat").
	AuthType string
	// WarehouseID is the SQL warehouse DDL runs on (DATABRICKS_WAREHOUSE_ID
	// if empty). Describe and credential vending do not need it.
	WarehouseID string
	// PollInterval is the wait between polls of a running statement
	// (default 500ms).
	PollInterval time.Duration
	// StatementTimeout bounds one statement, polling included (default 5m).
	StatementTimeout time.Duration
	// CallTimeout bounds every single workspace call: a describe, a tags
	// read, a credential vend, one statement submission or poll, the SDK's
	// configuration and token requests included (default 30s). The SDK's
	// own retries are limited to one attempt per request; the caller's
	// back-off decides when to try again.
	CallTimeout time.Duration
	// CredentialSource says where the credentials come from, for messages
	// when they are refused, e.g. "config fields client_id/client_secret" or
	// "env DATABRICKS_CLIENT_ID/DATABRICKS_CLIENT_SECRET". Empty means
	// inferred from which fields are set here and from the environment.
	CredentialSource string
	// HTTPTransport replaces the SDK's HTTP transport (tests, proxies).
	HTTPTransport http.RoundTripper
	// Logger receives the plans, the statements applied, failed workspace
	// requests and databricks-sdk-go's own log lines (default: none).
	Logger *slog.Logger
}

// String describes the configuration without its secrets, so it can be
// logged.
func (c UCConfig) String() string {
	redact := func(s string) string {
		if s == "" {
			return ""
		}
		return "<redacted>"
	}
	return fmt.Sprintf("UCConfig{host=%s auth_type=%s client_id=%s client_secret=%s token=%s profile=%s warehouse_id=%s}",
		c.Host, c.AuthType, c.ClientID, redact(c.ClientSecret), redact(c.Token), c.Profile, c.WarehouseID)
}

// GoString keeps %#v from printing secrets.
func (c UCConfig) GoString() string { return c.String() }

// UC is the Unity Catalog TableCatalog backend on databricks-sdk-go. It keeps
// the last described state of every table it reconciled (the drift cache) so
// a Reconcile with nothing to change costs no request; Describe always
// fetches afresh and refreshes that cache.
type UC struct {
	cfg         UCConfig
	host        string
	source      string
	warehouse   string
	poll        time.Duration
	timeout     time.Duration
	callTimeout time.Duration
	log         *slog.Logger
	sdkLog      sdkLogger
	transport   *watchTransport

	// initMu guards the lazily built SDK clients (see clients).
	initMu   sync.Mutex
	w        *databricks.WorkspaceClient
	raw      *client.DatabricksClient
	clientID string
	authType string

	mu    sync.Mutex
	cache map[string]*TableState
	// wantTags is set once a Reconcile asked for tags: only then does a
	// describe read them (a second call on the rate-limited API, per
	// describe), since only a plan with tags looks at them.
	wantTags atomic.Bool
	// absent holds when a describe last found a table absent (seenAbsent).
	absent map[string]time.Time
	locks  map[string]*sync.Mutex
	// views remembers, per deduplicating view, what ensureView last did.
	views map[string]viewState
}

var _ TableCatalog = (*UC)(nil)

// maxRounds bounds how often Reconcile re-describes and re-plans after
// applying (another writer may have created or changed the table meanwhile).
const maxRounds = 3

// NewUC builds the UC backend. It checks the configuration it can check
// without the network (an ambiguous auth choice, a malformed host) and makes
// no request: databricks-sdk-go resolves its configuration with a request
// (host metadata) that neither a timeout nor a context of ours would bound,
// so the SDK client is built on the first call instead, under that call's
// timeout and context (see clients). A Logger also receives the SDK's own
// log lines (RouteSDKLogs).
func NewUC(cfg UCConfig) (*UC, error) {
	if cfg.Token != "" && (cfg.ClientID != "" || cfg.ClientSecret != "") && cfg.AuthType == "" {
		return nil, errors.New("catalog: both a token and OAuth client credentials are configured: set auth_type to \"pat\" or \"oauth-m2m\"")
	}
	host := cfg.Host
	if host == "" {
		host = os.Getenv("DATABRICKS_HOST")
	}
	if host != "" {
		if _, err := url.Parse(host); err != nil {
			return nil, fmt.Errorf("catalog: host %q: %w", host, err)
		}
	}
	warehouse := cfg.WarehouseID
	if warehouse == "" {
		warehouse = os.Getenv("DATABRICKS_WAREHOUSE_ID")
	}
	u := &UC{
		cfg:         cfg,
		host:        host,
		source:      credentialSource(cfg),
		warehouse:   warehouse,
		poll:        cfg.PollInterval,
		timeout:     cfg.StatementTimeout,
		callTimeout: cfg.CallTimeout,
		log:         cfg.Logger,
		cache:       map[string]*TableState{},
		absent:      map[string]time.Time{},
		locks:       map[string]*sync.Mutex{},
		views:       map[string]viewState{},
	}
	if u.poll <= 0 {
		u.poll = 500 * time.Millisecond
	}
	if u.timeout <= 0 {
		u.timeout = 5 * time.Minute
	}
	if u.callTimeout <= 0 {
		u.callTimeout = DefaultCallTimeout
	}
	if u.log == nil {
		u.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	} else {
		RouteSDKLogs(u.log)
	}
	u.sdkLog = sdkLogger{u.log}
	base := cfg.HTTPTransport
	if base == nil {
		base = http.DefaultTransport.(*http.Transport).Clone()
	}
	u.transport = &watchTransport{base: base, log: u.log}
	return u, nil
}

// credentialSource says where the credentials NewUC will use come from.
func credentialSource(cfg UCConfig) string {
	switch {
	case cfg.CredentialSource != "":
		return cfg.CredentialSource
	case cfg.ClientID != "" && cfg.ClientSecret != "":
		return "config fields client_id/client_secret"
	case cfg.ClientID != "" && os.Getenv("DATABRICKS_CLIENT_SECRET") != "":
		return "config field client_id, env DATABRICKS_CLIENT_SECRET"
	case cfg.Token != "":
		return "config field token"
	case cfg.Profile != "":
		return "profile " + cfg.Profile + " of the Databricks config file"
	case os.Getenv("DATABRICKS_CLIENT_ID") != "":
		return "env DATABRICKS_CLIENT_ID/DATABRICKS_CLIENT_SECRET"
	case os.Getenv("DATABRICKS_TOKEN") != "":
		return "env DATABRICKS_TOKEN"
	}
	return ""
}

// fromSource is " (from <source>)" for messages, or "".
func (u *UC) fromSource() string {
	if u.source == "" {
		return ""
	}
	return " (from " + u.source + ")"
}

// pinnedAuthType is the auth type to give the SDK: the configured one, or the
// one the credentials make plain (OAuth M2M for a client id and secret, PAT
// for a token alone), from the configuration or the environment. Left empty,
// the SDK tries every credential strategy in turn, each with its own
// requests, and reports a refused secret only as "cannot configure default
// credentials"; pinned, it makes one attempt and keeps the cause.
func pinnedAuthType(cfg UCConfig) string {
	if cfg.AuthType != "" || cfg.Profile != "" || os.Getenv("DATABRICKS_AUTH_TYPE") != "" || os.Getenv("DATABRICKS_CONFIG_PROFILE") != "" {
		return cfg.AuthType
	}
	or := func(v, env string) string {
		if v != "" {
			return v
		}
		return os.Getenv(env)
	}
	id, secret := or(cfg.ClientID, "DATABRICKS_CLIENT_ID"), or(cfg.ClientSecret, "DATABRICKS_CLIENT_SECRET")
	token := or(cfg.Token, "DATABRICKS_TOKEN")
	switch {
	case id != "" && secret != "" && token == "":
		return "oauth-m2m"
	case token != "" && id == "" && secret == "":
		return "pat"
	}
	return ""
}

// warehouseID is the SQL warehouse statements run on: from the
// configuration or the environment, else from the resolved SDK configuration
// (a profile may name it).
func (u *UC) warehouseID() string {
	u.initMu.Lock()
	defer u.initMu.Unlock()
	return u.warehouse
}

// principal is the OAuth client id the SDK authenticates with (the service
// principal's application id), or "" (a token, or not resolved yet).
func (u *UC) principal() string {
	u.initMu.Lock()
	defer u.initMu.Unlock()
	if u.clientID != "" {
		return u.clientID
	}
	return u.cfg.ClientID
}

// clients returns the SDK clients, building them on first use. Building
// resolves the configuration, which fetches the workspace's host metadata
// (/.well-known/databricks-config); when that fetch gets no answer at all,
// the clients are not kept, so the next call resolves again once the
// workspace is back instead of running without its metadata for good. The
// SDK is given the call timeout as its HTTP timeout and a one-attempt retry
// budget, and the auth type is pinned when the credentials make it plain,
// so that a refused secret is reported as such rather than as "cannot
// configure default credentials".
func (u *UC) clients() (*databricks.WorkspaceClient, *client.DatabricksClient, error) {
	u.initMu.Lock()
	defer u.initMu.Unlock()
	if u.w != nil {
		return u.w, u.raw, nil
	}
	cfg := &databricks.Config{
		Host:                u.cfg.Host,
		ClientID:            u.cfg.ClientID,
		ClientSecret:        u.cfg.ClientSecret,
		Token:               u.cfg.Token,
		Profile:             u.cfg.Profile,
		AuthType:            pinnedAuthType(u.cfg),
		WarehouseID:         u.cfg.WarehouseID,
		HTTPTransport:       u.transport,
		HTTPTimeoutSeconds:  int((u.callTimeout + time.Second - 1) / time.Second),
		RetryTimeoutSeconds: sdkRetryTimeoutSeconds,
	}
	var metaErr error
	cfg.HostMetadataResolver = func(ctx context.Context, host string) (*config.HostMetadata, error) {
		m, err := (*config.Config)(cfg).DefaultHostMetadataResolver()(ctx, host)
		metaErr = err
		return m, err
	}
	w, err := databricks.NewWorkspaceClient(cfg)
	var ue *url.Error
	if errors.As(metaErr, &ue) && !tokenRefused(ue.Err) {
		return nil, nil, metaErr
	}
	if errors.As(err, &ue) {
		// A request failed (a token refusal, an unreachable endpoint):
		// the call explains it; the configuration may be fine.
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, &sdkConfigError{fmt.Errorf("databricks workspace client: %w", err)}
	}
	raw, err := client.New(w.Config)
	if err != nil {
		return nil, nil, &sdkConfigError{fmt.Errorf("databricks api client: %w", err)}
	}
	u.w, u.raw = w, raw
	u.clientID, u.authType = w.Config.ClientID, w.Config.AuthType
	if u.warehouse == "" {
		u.warehouse = w.Config.WarehouseID
	}
	return w, raw, nil
}

// Describe fetches the table from UC (one GET of the tables endpoint, read
// raw so delta_uniform_iceberg, which the SDK's TableInfo lacks, is kept) and
// refreshes the drift cache. A missing table is nil, nil.
func (u *UC) Describe(ctx context.Context, table string) (*TableState, error) {
	if err := typemap.CheckTableName(table); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	type answer struct {
		body    []byte
		missing bool
	}
	got, err := callWorkspace(ctx, u, "describe table "+table, table, func(ctx context.Context, _ *databricks.WorkspaceClient, raw *client.DatabricksClient) (answer, error) {
		var body []byte
		err := raw.Do(ctx, http.MethodGet, "/api/2.1/unity-catalog/tables/"+url.PathEscape(table), nil, nil, nil, &body)
		var ae *apierr.APIError
		if errors.As(err, &ae) && ae.IsMissing() {
			return answer{missing: true}, nil
		}
		return answer{body: body}, err
	})
	if err != nil {
		return nil, err
	}
	if got.missing {
		u.remember(table, nil)
		return nil, nil
	}
	state, err := tableStateFromJSON(got.body)
	if err != nil {
		return nil, fmt.Errorf("catalog: describe table %s: %w", table, err)
	}
	if u.wantTags.Load() {
		state.Tags = u.tags(ctx, state.FullName)
	}
	u.remember(table, state)
	return state, nil
}

// tags reads a table's tags, or nil when they cannot be read (the plan then
// relies on PropTagsHash): tags are bookkeeping, never a reason to fail.
func (u *UC) tags(ctx context.Context, table string) map[string]string {
	list, err := callWorkspace(ctx, u, "read tags of "+table, table, func(ctx context.Context, w *databricks.WorkspaceClient, _ *client.DatabricksClient) ([]uccatalog.EntityTagAssignment, error) {
		return w.EntityTagAssignments.ListAll(ctx, uccatalog.ListEntityTagAssignmentsRequest{EntityType: "tables", EntityName: table})
	})
	if err != nil {
		u.log.Debug("catalog: cannot read table tags", "table", table, "error", err)
		return nil
	}
	tags := make(map[string]string, len(list))
	for _, t := range list {
		tags[t.TagKey] = t.TagValue
	}
	return tags
}

// tableStateFromJSON converts a UC tables GET response.
func tableStateFromJSON(body []byte) (*TableState, error) {
	var info uccatalog.TableInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("decode table info: %w", err)
	}
	var uniform struct {
		DeltaUniformIceberg *struct {
			ConvertedDeltaVersion *int64 `json:"converted_delta_version"`
		} `json:"delta_uniform_iceberg"`
	}
	if err := json.Unmarshal(body, &uniform); err != nil {
		return nil, fmt.Errorf("decode delta_uniform_iceberg: %w", err)
	}
	s := &TableState{
		FullName:   info.FullName,
		TableID:    info.TableId,
		TableType:  string(info.TableType),
		Properties: info.Properties,
		Comment:    info.Comment,
		// A view's query text as Unity Catalog keeps it (TableInfo
		// view_definition).
		ViewDefinition: info.ViewDefinition,
	}
	if s.Properties == nil {
		s.Properties = map[string]string{}
	}
	if uniform.DeltaUniformIceberg != nil {
		s.IcebergConvertedVersion = uniform.DeltaUniformIceberg.ConvertedDeltaVersion
	}
	cols := slices.Clone(info.Columns)
	slices.SortStableFunc(cols, func(a, b uccatalog.ColumnInfo) int { return a.Position - b.Position })
	for _, ci := range cols {
		c, err := columnFromInfo(ci)
		if err != nil {
			return nil, err
		}
		s.Columns = append(s.Columns, c)
	}
	return s, nil
}

// columnFromInfo prefers type_json (it keeps nested nullability) over
// type_text.
func columnFromInfo(ci uccatalog.ColumnInfo) (typemap.Column, error) {
	if ci.TypeJson != "" {
		c, err := typemap.ParseColumnTypeJSON(ci.TypeJson)
		if err != nil {
			return typemap.Column{}, fmt.Errorf("column %q: %w", ci.Name, err)
		}
		c.Name, c.Comment = ci.Name, ci.Comment
		return c, nil
	}
	t, err := typemap.Parse(ci.TypeText)
	if err != nil {
		return typemap.Column{}, fmt.Errorf("column %q: type_text %q: %w", ci.Name, ci.TypeText, err)
	}
	return typemap.Column{Name: ci.Name, Type: t, Nullable: ci.Nullable, Comment: ci.Comment}, nil
}

func (u *UC) remember(table string, s *TableState) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if s == nil {
		delete(u.cache, table)
		u.absent[table] = time.Now()
		return
	}
	delete(u.absent, table)
	u.cache[table] = s
}

// absentFresh is how long a describe that found a table absent stands in
// for the describe Reconcile makes before it plans: a writer describes its
// table at open and, finding it absent, creates it from its first batch
// moments later. Planning on "absent" is safe even when someone created
// the table meanwhile: the plan is CREATE TABLE IF NOT EXISTS (a no-op
// then), and the describe after it re-plans against the table found.
const absentFresh = 5 * time.Second

// seenAbsent reports whether the last describe of table, within
// absentFresh, found it absent.
func (u *UC) seenAbsent(table string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	at, ok := u.absent[table]
	return ok && time.Since(at) < absentFresh
}

// Cached returns the last described state of a table, or nil.
func (u *UC) Cached(table string) *TableState {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.cache[table]
}

func (u *UC) tableLock(table string) *sync.Mutex {
	u.mu.Lock()
	defer u.mu.Unlock()
	l, ok := u.locks[table]
	if !ok {
		l = &sync.Mutex{}
		u.locks[table] = l
	}
	return l
}

// Reconcile plans against the cached state first: when that plan is empty
// nothing is requested at all. Otherwise it describes afresh (unless a
// describe found the table absent within absentFresh), plans, logs the
// plan and applies it statement by statement, then re-describes and re-plans
// (another writer may have raced it) until the plan is empty. Calls for one
// table are serialised.
//
// With DedupView set, the view is then brought in line with the table as
// reconciled (ensureView): created when absent, redefined when the table's
// columns changed since it was defined.
func (u *UC) Reconcile(ctx context.Context, desired DesiredTable) (ReconcileOutcome, error) {
	l := u.tableLock(desired.FullName)
	l.Lock()
	defer l.Unlock()
	out, err := u.reconcileTable(ctx, desired)
	if err == nil && desired.DedupView != "" && out.State != nil {
		n := u.ensureView(ctx, desired.DedupView, out.State)
		out.Statements += n
	}
	return out, err
}

// reconcileTable is Reconcile's work on the table itself, under its lock.
func (u *UC) reconcileTable(ctx context.Context, desired DesiredTable) (ReconcileOutcome, error) {
	if cached := u.Cached(desired.FullName); cached != nil {
		if p := Plan(cached, desired); p.Empty() {
			return ReconcileOutcome{Plan: p, State: cached}, nil
		}
	}
	if len(desired.Tags) > 0 {
		u.wantTags.Store(true)
	}
	var out ReconcileOutcome
	var live *TableState
	if !u.seenAbsent(desired.FullName) {
		var err error
		if live, err = u.Describe(ctx, desired.FullName); err != nil {
			return out, err
		}
	}
	for round := 1; ; round++ {
		p := Plan(live, desired)
		if round == 1 || p.Refused() != nil {
			out.Plan = p
		}
		out.State = live
		u.logPlan(ctx, p)
		if err := p.RefusedError(); err != nil {
			u.log.Error("catalog: plan refused", "table", p.Table, "error", err)
			return out, err
		}
		if p.Empty() {
			return out, nil
		}
		if round > maxRounds {
			if onlyMetadata(p) {
				u.log.Warn("catalog: metadata did not converge; writing anyway", "table", p.Table, "plan", p.String())
				return out, nil
			}
			return out, fmt.Errorf("catalog: table %s did not converge after %d rounds: %s", p.Table, maxRounds, p)
		}
		n, err := u.apply(ctx, p)
		out.Statements += n
		out.Applied = append(out.Applied, p)
		if err != nil && !IsAlreadyExists(err) {
			return out, err
		}
		if err != nil {
			u.log.Warn("catalog: raced another writer; re-planning", "table", p.Table, "error", err)
		}
		if live, err = u.Describe(ctx, desired.FullName); err != nil {
			return out, err
		}
	}
}

// onlyMetadata reports whether a plan changes no column.
func onlyMetadata(p ReconcilePlan) bool {
	for _, s := range p.Steps {
		switch s.Kind {
		case StepSetComment, StepSetProperty, StepSetTags:
		default:
			return false
		}
	}
	return true
}

// logPlan logs a plan before it is applied: one record per step and one
// warning per note, so each line stays readable.
func (u *UC) logPlan(ctx context.Context, p ReconcilePlan) {
	if p.Empty() && len(p.Notes) == 0 {
		u.log.Debug("catalog: table up to date", "table", p.Table)
		return
	}
	for i, s := range p.Steps {
		level := slog.LevelInfo
		if s.Kind == StepRefuse {
			level = slog.LevelError
		}
		u.log.Log(ctx, level, "catalog: plan", "table", p.Table, "step", i+1, "of", len(p.Steps), "change", s.String())
	}
	for _, n := range p.Notes {
		u.log.Warn("catalog: plan note", "table", p.Table, "note", n)
	}
}

// apply executes a plan's statements in order, stopping at the first failure.
// It returns how many statements it executed.
func (u *UC) apply(ctx context.Context, p ReconcilePlan) (int, error) {
	stmts, err := p.SQL()
	if err != nil {
		return 0, fmt.Errorf("catalog: %w", err)
	}
	for i, stmt := range stmts {
		u.log.Info("catalog: applying", "table", p.Table, "step", i+1, "sql", stmt)
		if err := u.Execute(ctx, stmt); err != nil {
			return i + 1, fmt.Errorf("catalog: table %s: %s: %w", p.Table, p.Steps[i], err)
		}
	}
	return len(stmts), nil
}

// StatementError is a statement the warehouse failed, canceled or closed.
type StatementError struct {
	StatementID string
	State       string
	ErrorCode   string
	SQLState    string
	Message     string
}

func (e *StatementError) Error() string {
	s := fmt.Sprintf("statement %s %s", e.StatementID, e.State)
	if e.ErrorCode != "" {
		s += " (" + e.ErrorCode + ")"
	}
	if e.SQLState != "" {
		s += " [SQLSTATE " + e.SQLState + "]"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// AlreadyExists reports whether the statement failed because the table or
// column it creates exists already (SQLSTATE 42P07 / 42710 / 42711, error
// class *_ALREADY_EXISTS, or the message says so).
func (e *StatementError) AlreadyExists() bool {
	switch e.SQLState {
	case "42P07", "42710", "42711":
		return true
	}
	return strings.Contains(strings.ToUpper(e.ErrorCode), "ALREADY_EXISTS") ||
		strings.Contains(strings.ToUpper(e.Message), "ALREADY_EXISTS") ||
		strings.Contains(strings.ToLower(e.Message), "already exists")
}

// IsAlreadyExists reports whether err is a statement failure that says the
// object exists already: another writer got there first.
func IsAlreadyExists(err error) bool {
	var se *StatementError
	return errors.As(err, &se) && se.AlreadyExists()
}

// Execute runs one SQL statement on the warehouse and waits for it, polling
// until it is terminal or StatementTimeout passes (then it is canceled). A
// statement that ends other than SUCCEEDED is a *StatementError.
func (u *UC) Execute(ctx context.Context, statement string) error {
	ctx, cancel := context.WithTimeout(ctx, u.timeout)
	defer cancel()
	// The synchronous wait asked of the warehouse must fit in one call.
	wait := waitTimeout(min(u.timeout, u.callTimeout-time.Second))
	resp, err := callWorkspace(ctx, u, "execute statement", "", func(ctx context.Context, w *databricks.WorkspaceClient, _ *client.DatabricksClient) (*sql.StatementResponse, error) {
		warehouse := u.warehouseID()
		if warehouse == "" {
			return nil, &sdkConfigError{errors.New("no warehouse_id configured: DDL runs on a SQL warehouse")}
		}
		return w.StatementExecution.ExecuteStatement(ctx, sql.ExecuteStatementRequest{
			WarehouseId:   warehouse,
			Statement:     statement,
			WaitTimeout:   wait,
			OnWaitTimeout: sql.ExecuteStatementRequestOnWaitTimeoutContinue,
		})
	})
	if err != nil {
		return err
	}
	t := time.NewTimer(u.poll)
	defer t.Stop()
	for running(resp) {
		select {
		case <-ctx.Done():
			u.cancelStatement(resp.StatementId)
			return fmt.Errorf("statement %s: %w", resp.StatementId, ctx.Err())
		case <-t.C:
		}
		id := resp.StatementId
		if resp, err = callWorkspace(ctx, u, "poll statement "+id, "", func(ctx context.Context, w *databricks.WorkspaceClient, _ *client.DatabricksClient) (*sql.StatementResponse, error) {
			return w.StatementExecution.GetStatementByStatementId(ctx, id)
		}); err != nil {
			return err
		}
		t.Reset(u.poll)
	}
	if resp.Status == nil {
		return fmt.Errorf("statement %s: response without a status", resp.StatementId)
	}
	if resp.Status.State == sql.StatementStateSucceeded {
		return nil
	}
	se := &StatementError{StatementID: resp.StatementId, State: string(resp.Status.State), SQLState: resp.Status.SqlState}
	if e := resp.Status.Error; e != nil {
		se.ErrorCode, se.Message = string(e.ErrorCode), e.Message
	}
	return se
}

func running(resp *sql.StatementResponse) bool {
	if resp.Status == nil {
		return false
	}
	switch resp.Status.State {
	case sql.StatementStatePending, sql.StatementStateRunning:
		return true
	}
	return false
}

// cancelStatement asks the warehouse to stop a statement we gave up on.
func (u *UC) cancelStatement(id string) {
	_, err := callWorkspace(context.Background(), u, "cancel statement "+id, "", func(ctx context.Context, w *databricks.WorkspaceClient, _ *client.DatabricksClient) (struct{}, error) {
		return struct{}{}, w.StatementExecution.CancelExecution(ctx, sql.CancelExecutionRequest{StatementId: id})
	})
	if err != nil {
		u.log.Warn("catalog: cancel statement", "statement_id", id, "error", err)
	}
}

// waitTimeout is the synchronous wait asked of the warehouse: 30s, or less
// when the statement timeout is shorter ("0s", i.e. asynchronous, below the
// API's 5s minimum).
func waitTimeout(limit time.Duration) string {
	w := min(30*time.Second, limit)
	if w < 5*time.Second {
		return "0s"
	}
	return fmt.Sprintf("%ds", int(w/time.Second))
}

// state returns the cached state of a table, describing it when not cached;
// a missing table is an error.
func (u *UC) state(ctx context.Context, table string) (*TableState, error) {
	if s := u.Cached(table); s != nil {
		return s, nil
	}
	s, err := u.Describe(ctx, table)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("catalog: table %s does not exist", table)
	}
	return s, nil
}

// WriterProperty is the table property RegisterWriter records w under, and
// its value. A writer that creates its table sets it in the CREATE's
// TBLPROPERTIES, so that registering afterwards finds it recorded and costs
// no statement (and no describe) on Unity Catalog's rate-limited API.
func WriterProperty(w WriterInfo) (key, value string) {
	v, _ := json.Marshal(struct {
		Source string `json:"source,omitempty"`
		Role   Role   `json:"role,omitempty"`
	}{w.Source, w.Role})
	return PropWriterPrefix + typemap.SafeIdentifier(w.ID), string(v)
}

// RegisterWriter records the writer as table property
// zerobus.writer.<id> = {"source":…,"role":…}. It issues a statement only
// when the recorded value differs.
func (u *UC) RegisterWriter(ctx context.Context, table string, w WriterInfo) error {
	if w.ID == "" {
		return errors.New("catalog: register writer: empty writer id")
	}
	l := u.tableLock(table)
	l.Lock()
	defer l.Unlock()
	key, val := WriterProperty(w)
	s, err := u.state(ctx, table)
	if err != nil {
		return fmt.Errorf("catalog: register writer %s: %w", w.ID, err)
	}
	if s.Properties[key] == val {
		return nil
	}
	p := ReconcilePlan{Table: table, Steps: []Step{{Kind: StepSetProperty, Properties: map[string]string{key: val}}}}
	if _, err := u.apply(ctx, p); err != nil {
		return fmt.Errorf("catalog: register writer %s: %w", w.ID, err)
	}
	_, err = u.Describe(ctx, table)
	return err
}

func (u *UC) generate(ctx context.Context, s *TableState, access Access) (*uccatalog.GenerateTemporaryTableCredentialResponse, error) {
	return callWorkspace(ctx, u, "vend "+string(access)+" credentials for "+s.FullName, s.FullName,
		func(ctx context.Context, w *databricks.WorkspaceClient, _ *client.DatabricksClient) (*uccatalog.GenerateTemporaryTableCredentialResponse, error) {
			return w.TemporaryTableCredentials.GenerateTemporaryTableCredentials(ctx, uccatalog.GenerateTemporaryTableCredentialRequest{
				TableId:   s.TableID,
				Operation: uccatalog.TableOperation(access),
			})
		})
}

// ErrReadWriteOnManaged explains a READ_WRITE vend refused on a managed table.
var ErrReadWriteOnManaged = errors.New("managed Delta tables vend READ credentials only: writes go through Zerobus, READ_WRITE storage credentials are refused")

// VendCredentials asks UC for temporary table credentials (READ serves the
// Iceberg recovery read path). They inherit the principal's privileges; the
// workspace must allow external data access (EXTERNAL USE SCHEMA).
func (u *UC) VendCredentials(ctx context.Context, table string, access Access) (*VendedCredentials, error) {
	if access != AccessRead && access != AccessReadWrite {
		return nil, fmt.Errorf("catalog: vend credentials: access %q: want %s or %s", access, AccessRead, AccessReadWrite)
	}
	s, err := u.state(ctx, table)
	if err != nil {
		return nil, fmt.Errorf("catalog: vend credentials for %s: %w", table, err)
	}
	resp, err := u.generate(ctx, s, access)
	if apierr.IsMissing(err) && u.Cached(table) == s {
		// The cached table id may be stale (the table was re-created).
		if s, err = u.Describe(ctx, table); err == nil && s == nil {
			err = fmt.Errorf("table %s does not exist", table)
		}
		if err != nil {
			return nil, fmt.Errorf("catalog: vend credentials for %s: %w", table, err)
		}
		resp, err = u.generate(ctx, s, access)
	}
	if err != nil {
		if access == AccessReadWrite && strings.EqualFold(s.TableType, "MANAGED") {
			return nil, fmt.Errorf("catalog: vend %s credentials for %s: %w (%w)", access, table, ErrReadWriteOnManaged, err)
		}
		return nil, fmt.Errorf("catalog: vend %s credentials for %s: %w", access, table, err)
	}
	v := &VendedCredentials{URL: resp.Url, Expiration: time.UnixMilli(resp.ExpirationTime)}
	switch {
	case resp.AwsTempCredentials != nil:
		a := resp.AwsTempCredentials
		v.AWS = &AWSCreds{AccessKeyID: a.AccessKeyId, SecretAccessKey: a.SecretAccessKey, SessionToken: a.SessionToken, AccessPoint: a.AccessPoint}
	case resp.AzureUserDelegationSas != nil:
		v.AzureSAS = resp.AzureUserDelegationSas.SasToken
	case resp.GcpOauthToken != nil:
		v.GCPToken = resp.GcpOauthToken.OauthToken
	default:
		return nil, fmt.Errorf("catalog: vend credentials for %s: the response holds no AWS, Azure SAS or GCP credential", table)
	}
	return v, nil
}
