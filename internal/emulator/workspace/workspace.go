package workspace

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Options configures a Workspace. The zero value is usable.
type Options struct {
	// Authorize validates a request's credentials (the emulator core checks
	// the bearer token it issued). It runs on every route; an error gives a
	// 401 JSON response. Nil allows every request.
	Authorize func(r *http.Request) error
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// IcebergLag is how long after a Delta commit the asynchronous Iceberg
	// conversion reports it in delta_uniform_iceberg.converted_delta_version.
	// Zero means DefaultIcebergLag; a negative value means no lag.
	IcebergLag time.Duration
	// CredentialTTL is the lifetime of vended temporary table credentials.
	// Zero means DefaultCredentialTTL.
	CredentialTTL time.Duration
	// StorageLocation returns a table's storage_location (also the url of its
	// credentials). Nil means "s3://emulator-metastore/__unitystorage/tables/<table_id>".
	StorageLocation func(Table) string
	// Owner is the owner given to tables created by SQL; "" means
	// "emulator@databricks.local".
	Owner string
	// OnDrop, when set, is called with a table just dropped (SQL DROP TABLE
	// or the UC DELETE), after it left the registry and before the request
	// is answered: the emulator core ends the streams open on it and removes
	// its storage there, so a table created again under its name starts
	// empty.
	OnDrop func(Table)
	// DenyExternalAccess refuses every temporary-credential request, as a
	// metastore without external data access (or a principal without
	// EXTERNAL USE SCHEMA) does.
	DenyExternalAccess bool
}

// Defaults for Options.
const (
	// maxRetainedStatements bounds the statement log and the statements
	// that can still be polled; Stats keeps counting past it.
	maxRetainedStatements = 10000

	DefaultIcebergLag    = 2 * time.Second
	DefaultCredentialTTL = time.Hour
)

// Stats counts the SQL statements the workspace received.
type Stats struct {
	// Statements counts every statement submitted with a warehouse, whatever
	// its outcome. A catalog that is in sync must issue none.
	Statements int
	// Failed counts statements that ended FAILED.
	Failed int
	// ByKind counts statements per kind (KindUnsupported / KindInvalid for
	// those that did not parse).
	ByKind map[StatementKind]int
}

// ExecutedStatement is one entry of the statement log.
type ExecutedStatement struct {
	ID        string
	Text      string
	Kind      StatementKind
	State     string // SUCCEEDED | FAILED
	ErrorCode string
	Message   string
	SQLState  string
}

// Workspace serves the Unity Catalog and SQL endpoints of an emulated
// Databricks workspace over a Registry.
type Workspace struct {
	reg  *Registry
	opts Options

	mu         sync.Mutex
	stats      Stats
	log        []ExecutedStatement
	statements map[string]*statementRecord
	iceberg    map[string]*icebergState // key: normalized full name
}

type statementRecord struct {
	exec     ExecutedStatement
	polled   bool // the first GET after a 0s wait sees the final state
	deferred bool // the POST answered PENDING
}

// New returns a Workspace serving reg. A non-nil Options.Now also becomes
// the registry's clock (Registry.SetClock), so created_at/updated_at follow it.
func New(reg *Registry, opts Options) *Workspace {
	if opts.Now == nil {
		opts.Now = time.Now
	} else {
		reg.SetClock(opts.Now)
	}
	if opts.IcebergLag == 0 {
		opts.IcebergLag = DefaultIcebergLag
	} else if opts.IcebergLag < 0 {
		opts.IcebergLag = 0
	}
	if opts.CredentialTTL <= 0 {
		opts.CredentialTTL = DefaultCredentialTTL
	}
	if opts.StorageLocation == nil {
		opts.StorageLocation = func(t Table) string {
			return "s3://emulator-metastore/__unitystorage/tables/" + t.TableID
		}
	}
	if opts.Owner == "" {
		opts.Owner = "emulator@databricks.local"
	}
	return &Workspace{
		reg:        reg,
		opts:       opts,
		stats:      Stats{ByKind: map[StatementKind]int{}},
		statements: map[string]*statementRecord{},
		iceberg:    map[string]*icebergState{},
	}
}

// Registry returns the registry the workspace serves.
func (w *Workspace) Registry() *Registry { return w.reg }

// Stats returns a copy of the statement counters.
func (w *Workspace) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	s.ByKind = make(map[StatementKind]int, len(w.stats.ByKind))
	for k, v := range w.stats.ByKind {
		s.ByKind[k] = v
	}
	return s
}

// Executed returns the log of statements received, oldest first (the most
// recent 10000).
func (w *Workspace) Executed() []ExecutedStatement {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]ExecutedStatement(nil), w.log...)
}

// Handler returns the HTTP handler for the workspace's REST API:
//
//	GET  /api/2.1/unity-catalog/tables/{full_name}
//	GET  /api/2.1/unity-catalog/tables/{full_name}/exists
//	DELETE /api/2.1/unity-catalog/tables/{full_name}
//	GET  /api/2.1/unity-catalog/tables?catalog_name=&schema_name=
//	GET  /api/2.1/unity-catalog/entity-tag-assignments/tables/{full_name}/tags
//	POST /api/2.0/sql/statements
//	GET  /api/2.0/sql/statements/{statement_id}
//	POST /api/2.0/unity-catalog/temporary-table-credentials
//
// Every /api/ route goes through Options.Authorize. Unknown routes get a 404
// ENDPOINT_NOT_FOUND JSON error (the emulator core serves the OIDC and
// /.well-known routes itself).
func (w *Workspace) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/2.1/unity-catalog/tables/{full_name}", w.handleGetTable)
	mux.HandleFunc("GET /api/2.1/unity-catalog/tables/{full_name}/exists", w.handleTableExists)
	mux.HandleFunc("DELETE /api/2.1/unity-catalog/tables/{full_name}", w.handleDeleteTable)
	mux.HandleFunc("GET /api/2.1/unity-catalog/tables", w.handleListTables)
	mux.HandleFunc("GET /api/2.1/unity-catalog/entity-tag-assignments/{entity_type}/{entity_name}/tags", w.handleListTags)
	mux.HandleFunc("POST /api/2.0/sql/statements", w.handleExecute)
	mux.HandleFunc("POST /api/2.0/sql/statements/", w.handleExecute)
	mux.HandleFunc("GET /api/2.0/sql/statements/{statement_id}", w.handleGetStatement)
	mux.HandleFunc("POST /api/2.0/unity-catalog/temporary-table-credentials", w.handleCredentials)
	mux.HandleFunc("/", func(rw http.ResponseWriter, r *http.Request) {
		WriteError(rw, http.StatusNotFound, "ENDPOINT_NOT_FOUND", fmt.Sprintf("No API found for '%s %s'", r.Method, r.URL.Path))
	})
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if w.opts.Authorize != nil && strings.HasPrefix(r.URL.Path, "/api/") {
			if err := w.opts.Authorize(r); err != nil {
				WriteError(rw, http.StatusUnauthorized, "UNAUTHENTICATED", fmt.Sprintf("Credential was not sent or was of an unsupported type for this API: %v", err))
				return
			}
		}
		mux.ServeHTTP(rw, r)
	})
}

// apiError is the Databricks REST error body.
type apiError struct {
	ErrorCode string `json:"error_code"`
	Message   string `json:"message"`
	Details   []any  `json:"details,omitempty"`
}

// WriteError writes the Databricks REST error body {"error_code","message"}
// with the given HTTP status.
func WriteError(rw http.ResponseWriter, status int, code, msg string) {
	WriteJSON(rw, status, apiError{ErrorCode: code, Message: msg})
}

// WriteJSON writes v as a JSON response with the given HTTP status.
func WriteJSON(rw http.ResponseWriter, status int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	_ = json.NewEncoder(rw).Encode(v) // the client went away; nothing to do
}

func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return errors.New("empty request body")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("malformed request body: %w", err)
	}
	return nil
}

// RandomHex returns n random bytes, hex-encoded.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}

// --- statements ---

type executeRequest struct {
	WarehouseID   string `json:"warehouse_id"`
	Statement     string `json:"statement"`
	WaitTimeout   string `json:"wait_timeout"`
	OnWaitTimeout string `json:"on_wait_timeout"`
	Catalog       string `json:"catalog"`
	Schema        string `json:"schema"`
	Parameters    []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
		Type  string `json:"type"`
	} `json:"parameters"`
}

type statementResponse struct {
	StatementID string          `json:"statement_id"`
	Status      statementStatus `json:"status"`
	Manifest    *resultManifest `json:"manifest,omitempty"`
	Result      *resultData     `json:"result,omitempty"`
}

type statementStatus struct {
	State    string        `json:"state"`
	Error    *serviceError `json:"error,omitempty"`
	SQLState string        `json:"sql_state,omitempty"`
}

type serviceError struct {
	ErrorCode string `json:"error_code"`
	Message   string `json:"message"`
}

type resultManifest struct {
	Format          string         `json:"format"`
	Schema          map[string]any `json:"schema"`
	TotalChunkCount int            `json:"total_chunk_count"`
	TotalRowCount   int            `json:"total_row_count"`
	Truncated       bool           `json:"truncated"`
}

type resultData struct {
	ChunkIndex int `json:"chunk_index"`
	RowCount   int `json:"row_count"`
	RowOffset  int `json:"row_offset"`
}

// parseWaitTimeout validates wait_timeout as the service does: "" (the
// default, 10s), "0s", or 5s to 50s.
func parseWaitTimeout(s string) (time.Duration, error) {
	if s == "" {
		return 10 * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || !strings.HasSuffix(s, "s") || (d != 0 && (d < 5*time.Second || d > 50*time.Second)) {
		return 0, fmt.Errorf("wait_timeout %q: must be 0s or between 5s and 50s", s)
	}
	return d, nil
}

func (w *Workspace) handleExecute(rw http.ResponseWriter, r *http.Request) {
	var req executeRequest
	if err := decodeBody(r, &req); err != nil {
		WriteError(rw, http.StatusBadRequest, "MALFORMED_REQUEST", err.Error())
		return
	}
	if req.WarehouseID == "" {
		WriteError(rw, http.StatusBadRequest, "INVALID_PARAMETER_VALUE", "warehouse_id is required")
		return
	}
	if req.Statement == "" {
		WriteError(rw, http.StatusBadRequest, "INVALID_PARAMETER_VALUE", "statement is required")
		return
	}
	wait, err := parseWaitTimeout(req.WaitTimeout)
	if err != nil {
		WriteError(rw, http.StatusBadRequest, "INVALID_PARAMETER_VALUE", err.Error())
		return
	}
	rec := w.run(req)
	if wait == 0 {
		// An asynchronous submission: the statement ran, but the caller
		// learns its outcome by polling, as with a real warehouse.
		w.mu.Lock()
		rec.deferred = true
		w.mu.Unlock()
		WriteJSON(rw, http.StatusOK, statementResponse{StatementID: rec.exec.ID, Status: statementStatus{State: "PENDING"}})
		return
	}
	WriteJSON(rw, http.StatusOK, responseFor(rec.exec))
}

func (w *Workspace) handleGetStatement(rw http.ResponseWriter, r *http.Request) {
	id := r.PathValue("statement_id")
	w.mu.Lock()
	rec, ok := w.statements[id]
	var exec ExecutedStatement
	running := false
	if ok {
		exec = rec.exec
		// The first poll of a deferred statement reports RUNNING so that
		// clients exercise their polling loop; later polls see the result.
		if rec.deferred && !rec.polled {
			running = true
			rec.polled = true
		}
	}
	w.mu.Unlock()
	if !ok {
		WriteError(rw, http.StatusNotFound, "RESOURCE_DOES_NOT_EXIST", fmt.Sprintf("statement %q does not exist", id))
		return
	}
	if running {
		WriteJSON(rw, http.StatusOK, statementResponse{StatementID: id, Status: statementStatus{State: "RUNNING"}})
		return
	}
	WriteJSON(rw, http.StatusOK, responseFor(exec))
}

func responseFor(e ExecutedStatement) statementResponse {
	resp := statementResponse{StatementID: e.ID, Status: statementStatus{State: e.State}}
	if e.State == "FAILED" {
		resp.Status.Error = &serviceError{ErrorCode: e.ErrorCode, Message: e.Message}
		resp.Status.SQLState = e.SQLState
		return resp
	}
	resp.Manifest = &resultManifest{Format: "JSON_ARRAY", Schema: map[string]any{"column_count": 0, "columns": []any{}}}
	resp.Result = &resultData{}
	return resp
}

// run parses and executes one statement, records it and counts it.
func (w *Workspace) run(req executeRequest) *statementRecord {
	exec := ExecutedStatement{ID: NewUUID(), Text: req.Statement, State: "SUCCEEDED"}
	var serr *sqlError
	if len(req.Parameters) > 0 {
		exec.Kind = KindUnsupported
		serr = unsupported("statement parameters (the emulator executes literal DDL only)")
	} else if st, perr := parseStatement(req.Statement); perr != nil {
		exec.Kind = KindInvalid
		if perr.Class == "UNSUPPORTED_FEATURE" {
			exec.Kind = KindUnsupported
		}
		serr = perr
	} else {
		exec.Kind = st.Kind
		serr = w.execute(st, req.Catalog, req.Schema)
	}
	if serr != nil {
		exec.State = "FAILED"
		exec.ErrorCode = serr.Code
		exec.Message = serr.Error()
		exec.SQLState = serr.SQLState
	}
	rec := &statementRecord{exec: exec}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.Statements++
	w.stats.ByKind[exec.Kind]++
	if exec.State == "FAILED" {
		w.stats.Failed++
	}
	w.log = append(w.log, exec)
	w.statements[exec.ID] = rec
	if len(w.log) > maxRetainedStatements {
		delete(w.statements, w.log[0].ID)
		w.log = w.log[1:]
	}
	return rec
}

// --- tables ---

// tableJSON is the UC TableInfo shape.
type tableJSON struct {
	Name                string            `json:"name"`
	CatalogName         string            `json:"catalog_name"`
	SchemaName          string            `json:"schema_name"`
	FullName            string            `json:"full_name"`
	TableType           string            `json:"table_type"`
	DataSourceFormat    string            `json:"data_source_format,omitempty"`
	StorageLocation     string            `json:"storage_location,omitempty"`
	ViewDefinition      string            `json:"view_definition,omitempty"`
	TableID             string            `json:"table_id"`
	Properties          map[string]string `json:"properties"`
	Comment             string            `json:"comment,omitempty"`
	Owner               string            `json:"owner,omitempty"`
	CreatedAt           int64             `json:"created_at"`
	CreatedBy           string            `json:"created_by,omitempty"`
	UpdatedAt           int64             `json:"updated_at"`
	UpdatedBy           string            `json:"updated_by,omitempty"`
	Columns             []columnJSON      `json:"columns"`
	DeltaUniformIceberg *icebergJSON      `json:"delta_uniform_iceberg,omitempty"`
}

type columnJSON struct {
	Name          string `json:"name"`
	Position      int    `json:"position"`
	Nullable      bool   `json:"nullable"`
	Comment       string `json:"comment,omitempty"`
	TypeName      string `json:"type_name"`
	TypeText      string `json:"type_text"`
	TypeJSON      string `json:"type_json"`
	TypePrecision int    `json:"type_precision"`
	TypeScale     int    `json:"type_scale"`
}

type icebergJSON struct {
	MetadataLocation        string `json:"metadata_location"`
	ConvertedDeltaVersion   int64  `json:"converted_delta_version"`
	ConvertedDeltaTimestamp int64  `json:"converted_delta_timestamp"`
}

func (w *Workspace) handleGetTable(rw http.ResponseWriter, r *http.Request) {
	name := r.PathValue("full_name")
	t, ok := w.reg.Get(name)
	if !ok {
		if v, ok := w.View(name); ok {
			WriteJSON(rw, http.StatusOK, describeView(v))
			return
		}
		WriteError(rw, http.StatusNotFound, "TABLE_DOES_NOT_EXIST", fmt.Sprintf("Table '%s' does not exist.", NormalizeName(name)))
		return
	}
	WriteJSON(rw, http.StatusOK, w.describe(t))
}

// describeView renders v as UC's TableInfo of a view: table_type VIEW, its
// query as view_definition, the columns it was defined with, and no
// storage (a view holds no data).
func describeView(v View) tableJSON {
	return tableJSON{
		Name: v.Name(), CatalogName: v.CatalogName(), SchemaName: v.SchemaName(), FullName: v.FullName,
		TableType: "VIEW", TableID: v.TableID, ViewDefinition: v.Definition, Properties: map[string]string{},
		Owner: v.Owner, CreatedAt: v.CreatedAt.UnixMilli(), CreatedBy: v.Owner, UpdatedAt: v.UpdatedAt.UnixMilli(), UpdatedBy: v.Owner,
		Columns: describeColumns(v.Columns),
	}
}

// describeColumns renders columns as UC's ColumnInfo list, positions from 0:
// the one rendering of a table's and a view's columns.
func describeColumns(cols []typemap.Column) []columnJSON {
	out := make([]columnJSON, len(cols))
	for i, c := range cols {
		out[i] = columnJSON{
			Name: c.Name, Position: i, Nullable: c.Nullable, Comment: c.Comment,
			TypeName: string(c.Type.Kind), TypeText: c.Type.Text(), TypeJSON: typemap.ColumnTypeJSON(c),
			TypePrecision: c.Type.Precision, TypeScale: c.Type.Scale,
		}
	}
	return out
}

// handleDeleteTable is UC's "Delete a table" (databricks-sdk-go
// TablesAPI.Delete: DELETE /api/2.1/unity-catalog/tables/{full_name}, no
// body, an empty answer): the table is dropped as by DROP TABLE. A missing
// table is 404 TABLE_DOES_NOT_EXIST, as GET answers for it (the SDK maps it
// to apierr.ErrNotFound); the endpoint has no IF EXISTS.
func (w *Workspace) handleDeleteTable(rw http.ResponseWriter, r *http.Request) {
	name := r.PathValue("full_name")
	switch err := w.DropView(name); {
	case err == nil:
		WriteJSON(rw, http.StatusOK, struct{}{})
		return
	case !errors.Is(err, ErrNotFound):
		WriteError(rw, http.StatusInternalServerError, "INTERNAL_ERROR", err.Error())
		return
	}
	if _, err := w.Drop(name); err != nil {
		WriteError(rw, http.StatusNotFound, "TABLE_DOES_NOT_EXIST", fmt.Sprintf("Table '%s' does not exist.", NormalizeName(name)))
		return
	}
	WriteJSON(rw, http.StatusOK, struct{}{})
}

// Drop drops the table named fullName: it leaves the registry (a table
// created again under the name is a new one, Registry.Drop), its Delta
// version and Iceberg conversion state are forgotten, and Options.OnDrop
// removes its streams and storage. A missing table gives ErrNotFound
// (wrapped).
func (w *Workspace) Drop(fullName string) (Table, error) {
	t, err := w.reg.Drop(fullName)
	if err != nil {
		return Table{}, err
	}
	w.mu.Lock()
	delete(w.iceberg, NormalizeName(t.FullName))
	w.mu.Unlock()
	if w.opts.OnDrop != nil {
		w.opts.OnDrop(t)
	}
	return t, nil
}

func (w *Workspace) handleTableExists(rw http.ResponseWriter, r *http.Request) {
	_, ok := w.reg.Get(r.PathValue("full_name"))
	ok = ok || w.isView(r.PathValue("full_name"))
	WriteJSON(rw, http.StatusOK, map[string]bool{"table_exists": ok})
}

func (w *Workspace) handleListTables(rw http.ResponseWriter, r *http.Request) {
	cat, sch := strings.ToLower(r.URL.Query().Get("catalog_name")), strings.ToLower(r.URL.Query().Get("schema_name"))
	if cat == "" || sch == "" {
		WriteError(rw, http.StatusBadRequest, "INVALID_PARAMETER_VALUE", "catalog_name and schema_name are required")
		return
	}
	out := []tableJSON{}
	for _, t := range w.reg.List() {
		if t.CatalogName() == cat && t.SchemaName() == sch {
			out = append(out, w.describe(t))
		}
	}
	for _, v := range w.Views() {
		if v.CatalogName() == cat && v.SchemaName() == sch {
			out = append(out, describeView(v))
		}
	}
	WriteJSON(rw, http.StatusOK, map[string]any{"tables": out})
}

// describe renders t as UC's TableInfo.
func (w *Workspace) describe(t Table) tableJSON {
	loc := w.opts.StorageLocation(t)
	out := tableJSON{
		Name: t.Name(), CatalogName: t.CatalogName(), SchemaName: t.SchemaName(), FullName: t.FullName,
		TableType: t.TableType, DataSourceFormat: "DELTA", StorageLocation: loc, TableID: t.TableID,
		Properties: t.Properties, Comment: t.Comment, Owner: t.Owner,
		CreatedAt: t.CreatedAt.UnixMilli(), CreatedBy: t.Owner, UpdatedAt: t.UpdatedAt.UnixMilli(), UpdatedBy: t.Owner,
		Columns: describeColumns(t.Columns),
	}
	if out.Properties == nil {
		out.Properties = map[string]string{}
	}
	if t.IcebergReads() {
		if v, at, ok := w.IcebergConverted(t.FullName); ok {
			out.DeltaUniformIceberg = &icebergJSON{
				MetadataLocation:        fmt.Sprintf("%s/metadata/%05d-%s.metadata.json", loc, v, t.TableID),
				ConvertedDeltaVersion:   v,
				ConvertedDeltaTimestamp: at.UnixMilli(),
			}
		}
	}
	return out
}

type tagAssignmentJSON struct {
	EntityName string `json:"entity_name"`
	EntityType string `json:"entity_type"`
	TagKey     string `json:"tag_key"`
	TagValue   string `json:"tag_value,omitempty"`
}

func (w *Workspace) handleListTags(rw http.ResponseWriter, r *http.Request) {
	typ, name := r.PathValue("entity_type"), r.PathValue("entity_name")
	if typ != "tables" {
		WriteError(rw, http.StatusBadRequest, "INVALID_PARAMETER_VALUE", fmt.Sprintf("entity_type %q: the emulator serves tags of tables only", typ))
		return
	}
	t, ok := w.reg.Get(name)
	if !ok {
		WriteError(rw, http.StatusNotFound, "TABLE_DOES_NOT_EXIST", fmt.Sprintf("Table '%s' does not exist.", NormalizeName(name)))
		return
	}
	keys := make([]string, 0, len(t.Tags))
	for k := range t.Tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := []tagAssignmentJSON{}
	for _, k := range keys {
		out = append(out, tagAssignmentJSON{EntityName: t.FullName, EntityType: typ, TagKey: k, TagValue: t.Tags[k]})
	}
	WriteJSON(rw, http.StatusOK, map[string]any{"tag_assignments": out})
}

// --- temporary table credentials ---

type credentialsRequest struct {
	TableID   string `json:"table_id"`
	Operation string `json:"operation"`
}

type awsCredentials struct {
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
	SessionToken    string `json:"session_token"`
}

type credentialsResponse struct {
	AwsTempCredentials awsCredentials `json:"aws_temp_credentials"`
	ExpirationTime     int64          `json:"expiration_time"`
	URL                string         `json:"url"`
}

// handleCredentials vends temporary table credentials. Like the service, it
// vends READ for managed tables and refuses READ_WRITE on them with 403
// PERMISSION_DENIED (managed tables may only be written by Databricks
// itself); EXTERNAL tables get either operation.
func (w *Workspace) handleCredentials(rw http.ResponseWriter, r *http.Request) {
	var req credentialsRequest
	if err := decodeBody(r, &req); err != nil {
		WriteError(rw, http.StatusBadRequest, "MALFORMED_REQUEST", err.Error())
		return
	}
	if req.TableID == "" {
		WriteError(rw, http.StatusBadRequest, "INVALID_PARAMETER_VALUE", "table_id is required")
		return
	}
	if req.Operation != "READ" && req.Operation != "READ_WRITE" {
		WriteError(rw, http.StatusBadRequest, "INVALID_PARAMETER_VALUE", fmt.Sprintf("operation %q: must be READ or READ_WRITE", req.Operation))
		return
	}
	t, ok := w.reg.GetByID(req.TableID)
	if !ok {
		WriteError(rw, http.StatusNotFound, "TABLE_DOES_NOT_EXIST", fmt.Sprintf("Table with id '%s' does not exist.", req.TableID))
		return
	}
	if w.opts.DenyExternalAccess {
		WriteError(rw, http.StatusForbidden, "PERMISSION_DENIED", fmt.Sprintf("Credential vending for table '%s' is not allowed: the metastore does not allow external data access or the principal lacks EXTERNAL USE SCHEMA.", t.FullName))
		return
	}
	if req.Operation == "READ_WRITE" && t.TableType == "MANAGED" {
		WriteError(rw, http.StatusForbidden, "PERMISSION_DENIED", fmt.Sprintf("READ_WRITE temporary credentials are not supported for managed table '%s'; only READ is vended for managed tables.", t.FullName))
		return
	}
	WriteJSON(rw, http.StatusOK, credentialsResponse{
		AwsTempCredentials: awsCredentials{
			AccessKeyID:     "ASIAEMULATOR" + strings.ToUpper(RandomHex(4)),
			SecretAccessKey: RandomHex(20),
			SessionToken:    "emulator-session-" + RandomHex(32),
		},
		ExpirationTime: w.opts.Now().Add(w.opts.CredentialTTL).UnixMilli(),
		URL:            w.opts.StorageLocation(t),
	})
}
