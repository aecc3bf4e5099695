package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/databricks/databricks-sdk-go/logger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// TestMain quiets the SDK's own logger: the emulator serves no
// /.well-known/databricks-config, and the SDK warns about it on every client.
func TestMain(m *testing.M) {
	logger.DefaultLogger = &logger.SimpleLogger{Level: logger.LevelError}
	os.Exit(m.Run())
}

// emulated is a UC backend talking, through databricks-sdk-go, to the
// emulator's workspace over a real socket.
type emulated struct {
	ws  *workspace.Workspace
	url string
	uc  *UC
}

func newEmulated(t *testing.T, opts workspace.Options) *emulated {
	t.Helper()
	return newEmulatedBehind(t, opts, func(h http.Handler) http.Handler { return h })
}

// newEmulatedBehind is newEmulated with the workspace's handler wrapped by
// front (a request counter, say).
func newEmulatedBehind(t *testing.T, opts workspace.Options, front func(http.Handler) http.Handler) *emulated {
	t.Helper()
	cleanEnv(t)
	reg, err := workspace.OpenRegistry("")
	require.NoError(t, err)
	ws := workspace.New(reg, opts)
	srv := httptest.NewServer(front(ws.Handler()))
	t.Cleanup(srv.Close)
	e := &emulated{ws: ws, url: srv.URL}
	e.uc = e.client(t)
	return e
}

// client returns a fresh backend (empty drift cache) on the same workspace.
func (e *emulated) client(t *testing.T) *UC {
	t.Helper()
	uc, err := NewUC(UCConfig{Host: e.url, Token: "t", WarehouseID: "wh", PollInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	return uc
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (e *emulated) statements() int { return e.ws.Stats().Statements }

func eventsSchema(extra ...arrow.Field) *arrow.Schema {
	fields := []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "user-name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
		{Name: "at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	}
	return arrow.NewSchema(append(fields, extra...), nil)
}

func desiredEvents(t *testing.T, role Role, extra ...arrow.Field) DesiredTable {
	t.Helper()
	d, err := DesiredFromArrow(tbl, eventsSchema(extra...), reservedEmitTS)
	require.NoError(t, err)
	d.Role = role
	d.Comments = map[string]string{"id": "Event id", "user_name": "Who did it"}
	d.Comment = "Raw events"
	d.Properties = map[string]string{"zerobus.source": "topic-a"}
	d.Tags = map[string]string{"domain": "events"}
	return d
}

func TestUCCreateEvolveIdempotent(t *testing.T) {
	e := newEmulated(t, workspace.Options{IcebergLag: -1})
	ctx := context.Background()

	state, err := e.uc.Describe(ctx, tbl)
	require.NoError(t, err)
	assert.Nil(t, state, "absent table describes as nil")

	d := desiredEvents(t, RolePrimaryRaw)
	out, err := e.uc.Reconcile(ctx, d)
	require.NoError(t, err)
	assert.True(t, out.Plan.Creates())
	require.Len(t, out.Applied, 1)
	assert.True(t, out.ColumnsChanged())
	assert.Equal(t, 2, out.Statements, "CREATE TABLE + SET TAGS")
	assert.Equal(t, 2, e.statements())
	assert.Equal(t, 1, e.ws.Stats().ByKind[workspace.KindCreateTable])

	s := out.State
	require.NotNil(t, s)
	assert.NotEmpty(t, s.TableID)
	assert.Equal(t, "MANAGED", s.TableType)
	assert.Equal(t, "Raw events", s.Comment)
	var names []string
	for _, c := range s.Columns {
		names = append(names, c.Name)
	}
	assert.Equal(t, []string{"id", "user_name", "tags", "at", "_zb_emit_ts"}, names)
	id, _ := s.Column("id")
	assert.Equal(t, "Event id", id.Comment)
	assert.True(t, id.Type.Equal(typemap.Primitive(typemap.Int)))
	emit, _ := s.Column("_zb_emit_ts")
	assert.Equal(t, reservedEmitTS.Comment, emit.Comment)
	assert.False(t, emit.Nullable)
	tags, _ := s.Column("tags")
	assert.Equal(t, "array<string>", tags.Type.Text())
	assert.Equal(t, map[string]string{"domain": "events"}, s.Tags)
	assert.Equal(t, "topic-a", s.Properties["zerobus.source"])
	assert.Empty(t, CheckPrimaryRaw(s), "a primary-raw table we create passes its own preconditions")
	require.NotNil(t, s.IcebergConvertedVersion, "delta_uniform_iceberg read from the raw response")

	// Reconcile twice: no statement, from the cache or from a fresh describe.
	out, err = e.uc.Reconcile(ctx, d)
	require.NoError(t, err)
	assert.Zero(t, out.Statements)
	assert.True(t, out.Plan.Empty())
	assert.Empty(t, out.Applied)
	assert.False(t, out.ColumnsChanged())
	fresh := e.client(t)
	out, err = fresh.Reconcile(ctx, d)
	require.NoError(t, err)
	assert.Zero(t, out.Statements)
	assert.Equal(t, 2, e.statements(), "an in-sync catalog issues no statement")

	// Drift: a new field adds its column with its comment, once.
	d2 := desiredEvents(t, RolePrimaryRaw, arrow.Field{Name: "email", Type: arrow.BinaryTypes.String, Nullable: true})
	d2.Comments["email"] = "Contact address"
	out, err = fresh.Reconcile(ctx, d2)
	require.NoError(t, err)
	assert.Equal(t, 2, out.Statements, "ADD COLUMNS + comment hash bookkeeping")
	assert.True(t, out.ColumnsChanged())
	assert.Equal(t, 1, e.ws.Stats().ByKind[workspace.KindAddColumns])
	email, ok := out.State.Column("email")
	require.True(t, ok)
	assert.Equal(t, "Contact address", email.Comment)
	assert.True(t, email.Nullable)
	assert.Empty(t, CheckPrimaryRaw(out.State), "evolution keeps the table eligible")

	before := e.statements()
	for _, c := range []*UC{fresh, e.uc, e.client(t)} {
		out, err = c.Reconcile(ctx, d2)
		require.NoError(t, err)
		assert.Zero(t, out.Statements)
	}
	assert.Equal(t, before, e.statements())
	assert.Zero(t, e.ws.Stats().Failed)
}

func TestUCCommentSync(t *testing.T) {
	e := newEmulated(t, workspace.Options{})
	ctx := context.Background()
	d := desiredEvents(t, RoleDerived)
	_, err := e.uc.Reconcile(ctx, d)
	require.NoError(t, err)

	// The contract's description changes: rewritten once.
	d.Comments["id"] = "Event identifier"
	out, err := e.uc.Reconcile(ctx, d)
	require.NoError(t, err)
	assert.Equal(t, 2, out.Statements, "ALTER COLUMN COMMENT + hash bookkeeping")
	assert.False(t, out.ColumnsChanged(), "a comment change needs no stream reopen")
	assert.Equal(t, 1, e.ws.Stats().ByKind[workspace.KindAlterColumnComment])
	id, _ := out.State.Column("id")
	assert.Equal(t, "Event identifier", id.Comment)

	// A human edits it.
	require.NoError(t, e.uc.Execute(ctx, "ALTER TABLE main.raw.events ALTER COLUMN id COMMENT 'curated by hand'"))
	before := e.statements()
	fresh := e.client(t)
	out, err = fresh.Reconcile(ctx, d)
	require.NoError(t, err)
	assert.Zero(t, out.Statements, "respect leaves the human edit")
	require.Len(t, out.Plan.Notes, 1)
	assert.Contains(t, out.Plan.Notes[0], `"id"`)
	id, _ = out.State.Column("id")
	assert.Equal(t, "curated by hand", id.Comment)
	assert.Equal(t, before, e.statements())

	d.CommentsPolicy = PolicyRestore
	out, err = fresh.Reconcile(ctx, d)
	require.NoError(t, err)
	assert.Equal(t, 1, out.Statements, "restore rewrites the comment")
	id, _ = out.State.Column("id")
	assert.Equal(t, "Event identifier", id.Comment)

	out, err = e.client(t).Reconcile(ctx, d)
	require.NoError(t, err)
	assert.Zero(t, out.Statements)
}

func TestUCTypeChanges(t *testing.T) {
	e := newEmulated(t, workspace.Options{})
	ctx := context.Background()
	d := desiredEvents(t, RoleDerived)
	_, err := e.uc.Reconcile(ctx, d)
	require.NoError(t, err)

	wider := desiredEvents(t, RoleDerived)
	wider.Columns[0].Type = typemap.Primitive(typemap.Long) // id int → bigint

	before := e.statements()
	_, err = e.uc.Reconcile(ctx, wider)
	var re *RefusedError
	require.ErrorAs(t, err, &re, "widening is opt-in")
	require.Len(t, re.Refusals, 1)
	assert.Equal(t, "id", re.Refusals[0].Column)
	assert.Equal(t, before, e.statements(), "a refused plan executes nothing")

	wider.AllowWidening = true
	out, err := e.uc.Reconcile(ctx, wider)
	require.NoError(t, err)
	assert.Equal(t, 2, out.Statements, "enable type widening + ALTER COLUMN TYPE")
	id, _ := out.State.Column("id")
	assert.Equal(t, "bigint", id.Type.Text())

	lossy := desiredEvents(t, RoleDerived)
	lossy.AllowWidening = true
	lossy.Columns[0].Type = typemap.Primitive(typemap.Double)
	_, err = e.uc.Reconcile(ctx, lossy)
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "id", re.Refusals[0].Column)
	assert.Contains(t, re.Error(), "lossy")
}

func TestUCHostileIdentifiers(t *testing.T) {
	e := newEmulated(t, workspace.Options{})
	ctx := context.Background()
	hostile := []string{"a`b", "x'); DROP TABLE y; --"}
	d := DesiredTable{FullName: tbl, Columns: []typemap.Column{
		{Name: hostile[0], Type: typemap.Primitive(typemap.String), Nullable: true, Comment: `it's \ "quoted"`},
		{Name: hostile[1], Type: typemap.Primitive(typemap.Long), Nullable: true},
	}}
	out, err := e.uc.Reconcile(ctx, d)
	require.NoError(t, err)
	require.Len(t, out.State.Columns, 2)
	assert.Equal(t, hostile[0], out.State.Columns[0].Name)
	assert.Equal(t, `it's \ "quoted"`, out.State.Columns[0].Comment)
	assert.Equal(t, hostile[1], out.State.Columns[1].Name)
	assert.Len(t, e.ws.Registry().List(), 1, "no other table appeared")
	out, err = e.client(t).Reconcile(ctx, d)
	require.NoError(t, err)
	assert.Zero(t, out.Statements)
}

func TestUCRecheckCatchesFlippedProperty(t *testing.T) {
	e := newEmulated(t, workspace.Options{})
	ctx := context.Background()
	_, err := e.uc.Reconcile(ctx, desiredEvents(t, RolePrimaryRaw))
	require.NoError(t, err)
	require.NoError(t, RecheckPrimaryRaw(ctx, e.uc, tbl))

	require.NoError(t, e.uc.Execute(ctx, "ALTER TABLE main.raw.events SET TBLPROPERTIES ('delta.enableDeletionVectors'='true')"))
	err = RecheckPrimaryRaw(ctx, e.uc, tbl)
	var pe *PreconditionError
	require.ErrorAs(t, err, &pe, "the re-check describes afresh instead of trusting the cache")
	require.Len(t, pe.Unmet, 1)
	assert.Equal(t, PreDeletionVectors, pe.Unmet[0].Precondition)

	// A derived table is refused the role, naming each precondition.
	other := desiredEvents(t, RoleDerived)
	other.FullName = "main.raw.derived"
	_, err = e.uc.Reconcile(ctx, other)
	require.NoError(t, err)
	err = RecheckPrimaryRaw(ctx, e.uc, "main.raw.derived")
	require.ErrorAs(t, err, &pe)
	var names []string
	for _, u := range pe.Unmet {
		names = append(names, u.Precondition)
	}
	assert.Equal(t, []string{PreIcebergReads, PreColumnMapping, PreDeletionVectors}, names, "the emulator, like workspaces, enables deletion vectors by default")

	err = RecheckPrimaryRaw(ctx, e.uc, "main.raw.absent")
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, PreRegistered, pe.Unmet[0].Precondition)
}

func TestUCVendCredentials(t *testing.T) {
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	e := newEmulated(t, workspace.Options{Now: func() time.Time { return now }, CredentialTTL: 15 * time.Minute})
	ctx := context.Background()
	_, err := e.uc.Reconcile(ctx, desiredEvents(t, RoleDerived))
	require.NoError(t, err)

	v, err := e.uc.VendCredentials(ctx, tbl, AccessRead)
	require.NoError(t, err)
	require.NotNil(t, v.AWS)
	assert.NotEmpty(t, v.AWS.AccessKeyID)
	assert.NotEmpty(t, v.AWS.SecretAccessKey)
	assert.NotEmpty(t, v.AWS.SessionToken)
	assert.True(t, v.Expiration.Equal(now.Add(15*time.Minute)), "expiration %s", v.Expiration)
	assert.False(t, v.ExpiresWithin(now, 5*time.Minute))
	assert.True(t, v.ExpiresWithin(now.Add(11*time.Minute), 5*time.Minute), "time to refresh")
	state := e.uc.Cached(tbl)
	assert.Contains(t, v.URL, state.TableID)
	assert.NotContains(t, v.String(), v.AWS.SecretAccessKey)

	// A stale cached table id (the table was re-created) is re-described once.
	stale := *state
	stale.TableID = "00000000-0000-0000-0000-000000000000"
	e.uc.remember(tbl, &stale)
	v, err = e.uc.VendCredentials(ctx, tbl, AccessRead)
	require.NoError(t, err)
	assert.Contains(t, v.URL, state.TableID)
	assert.Equal(t, state.TableID, e.uc.Cached(tbl).TableID)

	_, err = e.uc.VendCredentials(ctx, tbl, AccessReadWrite)
	require.ErrorIs(t, err, ErrReadWriteOnManaged)
	assert.Contains(t, err.Error(), "vend READ credentials only")

	_, err = e.uc.VendCredentials(ctx, "main.raw.absent", AccessRead)
	assert.ErrorContains(t, err, "does not exist")

	denied := newEmulated(t, workspace.Options{DenyExternalAccess: true})
	_, err = denied.uc.Reconcile(ctx, desiredEvents(t, RoleDerived))
	require.NoError(t, err)
	_, err = denied.uc.VendCredentials(ctx, tbl, AccessRead)
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrReadWriteOnManaged))
}

// A table created with its writer's registration in the CREATE costs
// three calls on UC's rate-limited API, the describe that found it absent
// included: the CREATE and one describe after (no second describe before
// it, no ALTER to register, no tag read while no plan has tags).
func TestUCProvisionedTableCostsThreeCalls(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	e := newEmulatedBehind(t, workspace.Options{}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/api/") {
				mu.Lock()
				calls = append(calls, r.Method+" "+r.URL.Path)
				mu.Unlock()
			}
			h.ServeHTTP(w, r)
		})
	})
	uc := e.client(t)
	ctx := context.Background()

	live, err := uc.Describe(ctx, tbl)
	require.NoError(t, err)
	require.Nil(t, live, "absent")
	d, err := DesiredFromArrow(tbl, eventsSchema(), reservedEmitTS)
	require.NoError(t, err)
	w := WriterInfo{ID: "pipeline/orders-1", Role: RoleDerived}
	key, val := WriterProperty(w)
	d.Properties = map[string]string{key: val}
	out, err := uc.Reconcile(ctx, d)
	require.NoError(t, err)
	require.NotNil(t, out.State)
	require.NoError(t, uc.RegisterWriter(ctx, tbl, w))
	assert.JSONEq(t, `{"role":"derived"}`, out.State.Properties["zerobus.writer.pipeline_orders_1"])
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, calls, 3, "describe, CREATE, describe: %v", calls)
	assert.Equal(t, "POST /api/2.0/sql/statements", calls[1])
	assert.Equal(t, calls[0], calls[2])
	assert.Equal(t, 1, e.statements(), "the CREATE only: registering found itself recorded")
}

func TestUCRegisterWriter(t *testing.T) {
	e := newEmulated(t, workspace.Options{})
	ctx := context.Background()
	_, err := e.uc.Reconcile(ctx, desiredEvents(t, RoleDerived))
	require.NoError(t, err)
	before := e.statements()
	w := WriterInfo{ID: "pipeline/orders-1", Source: "orders", Role: RoleDerived}
	require.NoError(t, e.uc.RegisterWriter(ctx, tbl, w))
	require.NoError(t, e.uc.RegisterWriter(ctx, tbl, w))
	require.NoError(t, e.client(t).RegisterWriter(ctx, tbl, w))
	assert.Equal(t, before+1, e.statements(), "registering is idempotent")
	s, err := e.uc.Describe(ctx, tbl)
	require.NoError(t, err)
	assert.JSONEq(t, `{"source":"orders","role":"derived"}`, s.Properties["zerobus.writer.pipeline_orders_1"])

	assert.Error(t, e.uc.RegisterWriter(ctx, "main.raw.absent", w))
	// A different desired shape must not drop the writer record.
	out, err := e.uc.Reconcile(ctx, desiredEvents(t, RoleDerived))
	require.NoError(t, err)
	assert.Zero(t, out.Statements)
}

func TestUCConcurrentCreate(t *testing.T) {
	e := newEmulated(t, workspace.Options{})
	ctx := context.Background()
	// Two writers (two backends, no shared lock) race to create the table,
	// one of them with an extra column: both converge on the union.
	a := desiredEvents(t, RoleDerived)
	b := desiredEvents(t, RoleDerived, arrow.Field{Name: "extra", Type: arrow.PrimitiveTypes.Int64, Nullable: true})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, d := range []DesiredTable{a, b} {
		uc := e.client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = uc.Reconcile(ctx, d)
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	s, err := e.uc.Describe(ctx, tbl)
	require.NoError(t, err)
	_, ok := s.Column("extra")
	assert.True(t, ok)
	out, err := e.client(t).Reconcile(ctx, b)
	require.NoError(t, err)
	assert.Zero(t, out.Statements)
}

func TestUCStatementErrors(t *testing.T) {
	e := newEmulated(t, workspace.Options{})
	ctx := context.Background()
	_, err := e.uc.Reconcile(ctx, desiredEvents(t, RoleDerived))
	require.NoError(t, err)

	err = e.uc.Execute(ctx, "CREATE TABLE main.raw.events (a INT)")
	require.Error(t, err)
	assert.True(t, IsAlreadyExists(err), "%v", err)
	var se *StatementError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "FAILED", se.State)

	err = e.uc.Execute(ctx, "DROP TABLE main.raw.missing")
	require.Error(t, err)
	assert.False(t, IsAlreadyExists(err), "%v", err)

	noWarehouse, err := NewUC(UCConfig{Host: e.url, Token: "t"})
	require.NoError(t, err)
	_, err = noWarehouse.Reconcile(ctx, func() DesiredTable { d := desiredEvents(t, RoleDerived); d.FullName = "main.raw.other"; return d }())
	assert.ErrorContains(t, err, "warehouse_id")

	_, err = NewUC(UCConfig{Host: e.url, Token: "t", ClientID: "id", ClientSecret: "secret"})
	assert.ErrorContains(t, err, "auth_type")
}

// countingTransport counts statement polls on their way to the emulator.
type countingTransport struct {
	mu    sync.Mutex
	polls int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/2.0/sql/statements/") {
		c.mu.Lock()
		c.polls++
		c.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestUCPollsAsynchronousStatements(t *testing.T) {
	e := newEmulated(t, workspace.Options{})
	ct := &countingTransport{}
	// A statement timeout under 5s asks for wait_timeout=0s: the warehouse
	// answers PENDING and the backend polls.
	uc, err := NewUC(UCConfig{Host: e.url, Token: "t", WarehouseID: "wh", PollInterval: 5 * time.Millisecond,
		StatementTimeout: 4 * time.Second, HTTPTransport: ct})
	require.NoError(t, err)
	out, err := uc.Reconcile(context.Background(), desiredEvents(t, RoleDerived))
	require.NoError(t, err)
	assert.Equal(t, 2, out.Statements)
	assert.GreaterOrEqual(t, ct.polls, 2, "each statement was polled to completion")
	assert.NotNil(t, out.State)
}

// raceTransport runs before once, just before the first statement whose text
// contains marker reaches the warehouse: another writer getting there first.
type raceTransport struct {
	marker string
	once   sync.Once
	before func()
}

func (rt *raceTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && r.URL.Path == "/api/2.0/sql/statements" && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if strings.Contains(string(body), rt.marker) {
			rt.once.Do(rt.before)
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestUCAddColumnRaceIsAlreadyExists(t *testing.T) {
	e := newEmulated(t, workspace.Options{})
	ctx := context.Background()
	_, err := e.uc.Reconcile(ctx, desiredEvents(t, RoleDerived))
	require.NoError(t, err)

	drifted := desiredEvents(t, RoleDerived, arrow.Field{Name: "extra", Type: arrow.PrimitiveTypes.Int64, Nullable: true})
	rt := &raceTransport{marker: "ADD COLUMNS", before: func() {
		_, err := e.client(t).Reconcile(ctx, drifted)
		require.NoError(t, err)
	}}
	racer, err := NewUC(UCConfig{Host: e.url, Token: "t", WarehouseID: "wh", PollInterval: 5 * time.Millisecond, HTTPTransport: rt})
	require.NoError(t, err)
	out, err := racer.Reconcile(ctx, drifted)
	require.NoError(t, err, "losing the race to add a column is not an error")
	failed := 0
	for _, s := range e.ws.Executed() {
		if s.State == "FAILED" {
			failed++
			assert.Contains(t, s.Message, "already exists")
		}
	}
	assert.Equal(t, 1, failed, "our ADD COLUMNS failed as already existing")
	_, ok := out.State.Column("extra")
	assert.True(t, ok)
	require.Len(t, out.Applied, 1, "the re-plan after the race was empty")
	assert.Equal(t, 1, out.Statements)
}

// TestUCOAuthM2M checks the unified-auth wiring of NewUC for OAuth M2M: the
// SDK fetches a token with the client credentials and every API call carries
// it. A minimal OIDC front sits before the emulated workspace.
func TestUCOAuthM2M(t *testing.T) {
	cleanEnv(t)
	reg, err := workspace.OpenRegistry("")
	require.NoError(t, err)
	ws := workspace.New(reg, workspace.Options{Authorize: func(r *http.Request) error {
		if r.Header.Get("Authorization") != "Bearer m2m-access-token" {
			return errors.New("missing or wrong bearer token")
		}
		return nil
	}})
	var tokenRequests int
	var mu sync.Mutex
	mux := http.NewServeMux()
	var srvURL string
	mux.HandleFunc("GET /oidc/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"authorization_endpoint":"%[1]s/oidc/v1/authorize","token_endpoint":"%[1]s/oidc/v1/token"}`, srvURL)
	})
	mux.HandleFunc("POST /oidc/v1/token", func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		if !ok || id != "client-id" || secret != "client-secret" {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		mu.Lock()
		tokenRequests++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"m2m-access-token","token_type":"Bearer","expires_in":3600,"scope":"all-apis"}`)
	})
	mux.Handle("/", ws.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	srvURL = srv.URL

	uc, err := NewUC(UCConfig{Host: srv.URL, ClientID: "client-id", ClientSecret: "client-secret", WarehouseID: "wh"})
	require.NoError(t, err)
	out, err := uc.Reconcile(context.Background(), desiredEvents(t, RoleDerived))
	require.NoError(t, err)
	assert.Equal(t, 2, out.Statements)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 1, tokenRequests, "one token serves every call until it expires")

	// A distinctive secret: the refusal message legitimately says "secret".
	bad, err := NewUC(UCConfig{Host: srv.URL, ClientID: "client-id", ClientSecret: "wr0ng-s3cr3t", WarehouseID: "wh"})
	require.NoError(t, err)
	_, err = bad.Describe(context.Background(), tbl)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "wr0ng-s3cr3t", "the secret is not echoed")
	var we *WorkspaceError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, KindCredentials, we.Kind)
	assert.True(t, we.Permanent())
	assert.Contains(t, err.Error(), `refused the OAuth client credentials of client_id "client-id" (from config fields client_id/client_secret): invalid_client`)
}

// TestUCProtocolVersionsNeverLowered: a table desired with the primary-raw
// properties (delta.minReaderVersion 2) that the workspace raised to reader
// version 3 for its table features converges in one pass: no ALTER tries to
// lower the version (the emulator refuses a downgrade, as Delta does), no
// "did not converge" warning, and no empty key in the comment hashes.
func TestUCProtocolVersionsNeverLowered(t *testing.T) {
	e := newEmulated(t, workspace.Options{IcebergLag: -1})
	ctx := context.Background()
	d, err := DesiredFromArrow(tbl, eventsSchema(), reservedEmitTS)
	require.NoError(t, err)
	d.Properties = PrimaryRawProperties()
	d.Comment = "Coverage of something"
	out, err := e.uc.Reconcile(ctx, d)
	require.NoError(t, err)
	require.Len(t, out.Applied, 1, "created in one pass: %v", out.Applied)
	assert.Equal(t, "3", out.State.Properties[PropMinReaderVersion], "the workspace raised the reader version for the table features")
	hashes := map[string]string{}
	require.NoError(t, json.Unmarshal([]byte(out.State.Properties[PropCommentHashes]), &hashes))
	assert.NotContains(t, hashes, "", "no empty key in %s", PropCommentHashes)
	assert.Contains(t, hashes, tableCommentKey)

	p := Plan(out.State, d)
	assert.True(t, p.Empty(), "a table above the desired protocol version is current: %s", p)
	for _, c := range []*UC{e.uc, e.client(t)} {
		out, err = c.Reconcile(ctx, d)
		require.NoError(t, err)
		assert.Zero(t, out.Statements)
	}
	assert.Zero(t, e.ws.Stats().Failed)

	// The emulator refuses a downgrade as Delta does.
	err = e.uc.Execute(ctx, "ALTER TABLE "+tbl+" SET TBLPROPERTIES ('delta.minReaderVersion'='2')")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "DELTA_INVALID_PROTOCOL_DOWNGRADE")
}
