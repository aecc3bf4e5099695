package catalog

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/databricks/databricks-sdk-go/logger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// logRecord is one captured log line and when it was logged.
type logRecord struct {
	at    time.Time
	level slog.Level
	msg   string
}

// captureHandler is a slog.Handler that keeps every record (attributes
// folded into the message) for assertions.
type captureHandler struct {
	mu      sync.Mutex
	records []logRecord
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *captureHandler) WithGroup(string) slog.Handler            { return h }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	h.records = append(h.records, logRecord{at: time.Now(), level: r.Level, msg: b.String()})
	h.mu.Unlock()
	return nil
}

// first returns the first record at level or above containing all of want.
func (h *captureHandler) first(level slog.Level, want ...string) (logRecord, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
next:
	for _, r := range h.records {
		if r.level < level {
			continue
		}
		for _, w := range want {
			if !strings.Contains(r.msg, w) {
				continue next
			}
		}
		return r, true
	}
	return logRecord{}, false
}

// cleanEnv keeps the developer's Databricks environment out of the SDK's
// unified auth.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"DATABRICKS_HOST", "DATABRICKS_TOKEN", "DATABRICKS_CLIENT_ID", "DATABRICKS_CLIENT_SECRET",
		"DATABRICKS_AUTH_TYPE", "DATABRICKS_CONFIG_PROFILE", "DATABRICKS_WAREHOUSE_ID"} {
		t.Setenv(k, "")
	}
	t.Setenv("DATABRICKS_CONFIG_FILE", "/nonexistent/databrickscfg")
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// serveConns accepts connections on a loopback listener and hands each to
// handle; when the test ends it closes the listener and every connection.
func serveConns(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		open  []net.Conn
		conns sync.WaitGroup
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		conns.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			conns.Add(1)
			go func() {
				defer conns.Done()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// garbage answers every connection with bytes that are neither TLS nor HTTP
// and closes it: a port that speaks no TLS.
func garbage(c net.Conn) {
	_, _ = c.Write([]byte("SSH-2.0-not-a-workspace\r\n\r\n"))
	_ = c.Close()
}

// silent reads whatever comes and never answers, until the connection is
// closed: a workspace that accepted and hangs.
func silent(c net.Conn) { _, _ = io.Copy(io.Discard, c) }

func TestUnreachableWorkspaceFailsFastLoudlyAndCancellably(t *testing.T) {
	for _, tc := range []struct {
		name  string
		host  func(t *testing.T) string
		cause string
		hint  string
	}{
		{"closed port, https", func(t *testing.T) string { return "https://" + closedPort(t) }, "connection refused", "nothing accepts connections there"},
		{"closed port, http", func(t *testing.T) string { return "http://" + closedPort(t) }, "connection refused", "check the host URL and port"},
		{"no TLS on https", func(t *testing.T) string { return "https://" + serveConns(t, garbage) }, "tls:", "does not speak TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t)
			host := tc.host(t)
			logs := &captureHandler{}
			uc, err := NewUC(UCConfig{Host: host, ClientID: "sp", ClientSecret: "s3cr3t", WarehouseID: "wh",
				CallTimeout: 5 * time.Second, Logger: slog.New(logs)})
			require.NoError(t, err)
			// Every request to this host fails and is logged: none is.
			_, requested := logs.first(slog.LevelDebug, host)
			assert.False(t, requested, "NewUC makes no request")

			start := time.Now()
			_, err = uc.Describe(context.Background(), "main.raw.events")
			elapsed := time.Since(start)
			require.Error(t, err)
			assert.Less(t, elapsed, 5*time.Second, "within the call timeout")
			var we *WorkspaceError
			require.ErrorAs(t, err, &we)
			assert.Equal(t, KindUnreachable, we.Kind, "%v", err)
			assert.False(t, we.Permanent(), "an unreachable workspace may come back")
			assert.False(t, ingest.IsPermanent(err))
			assert.Contains(t, err.Error(), "workspace "+host+": ")
			assert.Contains(t, err.Error(), tc.cause)
			assert.Contains(t, err.Error(), tc.hint)
			assert.NotContains(t, err.Error(), "s3cr3t")

			rec, ok := logs.first(slog.LevelWarn, "workspace request failed", host, tc.cause)
			require.True(t, ok, "the failed attempt is logged at warn with URL and cause")
			assert.Less(t, rec.at.Sub(start), 2*time.Second, "logged within 2s")
			t.Logf("elapsed %s; logged after %s: %s", elapsed, rec.at.Sub(start), rec.msg)
			t.Logf("error: %v", err)

			// Cancelling returns at once, whatever the SDK is doing.
			ctx, cancel := context.WithCancel(context.Background())
			go func() { time.Sleep(50 * time.Millisecond); cancel() }()
			start = time.Now()
			_, err = uc.Describe(ctx, "main.raw.events")
			require.Error(t, err)
			assert.Less(t, time.Since(start), 2*time.Second, "cancel returns within 2s")
		})
	}
}

func TestSilentWorkspaceIsBoundedAndCancellable(t *testing.T) {
	cleanEnv(t)
	host := "http://" + serveConns(t, silent)
	logs := &captureHandler{}
	uc, err := NewUC(UCConfig{Host: host, Token: "t", CallTimeout: time.Second, Logger: slog.New(logs)})
	require.NoError(t, err)

	start := time.Now()
	_, err = uc.Describe(context.Background(), "main.raw.events")
	elapsed := time.Since(start)
	require.Error(t, err)
	var we *WorkspaceError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, KindTimeout, we.Kind, "%v", err)
	assert.Contains(t, err.Error(), "no answer within 1s (call_timeout)")
	assert.GreaterOrEqual(t, elapsed, time.Second)
	assert.Less(t, elapsed, 2*time.Second, "bounded by the call timeout")

	long, err := NewUC(UCConfig{Host: host, Token: "t", Logger: slog.New(logs)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	start = time.Now()
	_, err = long.Describe(ctx, "main.raw.events")
	require.Error(t, err)
	assert.Less(t, time.Since(start), 2*time.Second, "cancel returns within 2s under the 30s default")
	require.ErrorAs(t, err, &we)
	assert.Equal(t, KindCanceled, we.Kind)
	assert.False(t, ingest.IsPermanent(err))
}

// TestWorkspaceComingBackIsUsed checks that a client whose first calls found
// the workspace down works once it is up, with its host metadata resolved.
func TestWorkspaceComingBackIsUsed(t *testing.T) {
	cleanEnv(t)
	addr := closedPort(t)
	logs := &captureHandler{}
	uc, err := NewUC(UCConfig{Host: "http://" + addr, Token: "t", WarehouseID: "wh", CallTimeout: 5 * time.Second,
		PollInterval: 10 * time.Millisecond, Logger: slog.New(logs)})
	require.NoError(t, err)
	_, err = uc.Describe(context.Background(), tbl)
	require.Error(t, err)

	reg, err := workspace.OpenRegistry("")
	require.NoError(t, err)
	ws := workspace.New(reg, workspace.Options{})
	var metadataFetches atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/databricks-config", func(w http.ResponseWriter, r *http.Request) {
		metadataFetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"host":"http://%s","workspace_id":"123"}`, addr)
	})
	mux.Handle("/", ws.Handler())
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err, "the port is free again")
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)

	out, err := uc.Reconcile(context.Background(), desiredEvents(t, RoleDerived))
	require.NoError(t, err)
	assert.Equal(t, 2, out.Statements)
	assert.Equal(t, int32(1), metadataFetches.Load(), "host metadata resolved once the workspace answered")
	_, ok := logs.first(slog.LevelInfo, "workspace reachable again")
	assert.True(t, ok)
}

func TestSDKLogsReachOurLogger(t *testing.T) {
	cleanEnv(t)
	logs := &captureHandler{}
	uc, err := NewUC(UCConfig{Host: "https://" + serveConns(t, garbage), Token: "t", CallTimeout: 5 * time.Second, Logger: slog.New(logs)})
	require.NoError(t, err)
	_, err = uc.Describe(context.Background(), tbl)
	require.Error(t, err)
	rec, ok := logs.first(slog.LevelWarn, "databricks-sdk: Failed to resolve host metadata")
	require.True(t, ok, "the SDK's [WARN] goes to the pipeline's logger")
	assert.Equal(t, slog.LevelWarn, rec.level)

	infoOnly := sdkLogger{slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	assert.False(t, infoOnly.Enabled(context.Background(), logger.LevelDebug), "the SDK skips what our level drops")
	assert.True(t, infoOnly.Enabled(context.Background(), logger.LevelWarn))
	l := sdkLogger{slog.New(logs)}
	l.Errorf(context.Background(), "boom %d", 7)
	rec, ok = logs.first(slog.LevelError, "databricks-sdk: boom 7")
	require.True(t, ok)
	assert.Equal(t, slog.LevelError, rec.level)
	assert.Equal(t, slog.LevelDebug-4, sdkLevel(logger.LevelTrace))
	assert.Equal(t, slog.LevelDebug, sdkLevel(logger.LevelDebug))
	assert.Equal(t, slog.LevelInfo, sdkLevel(logger.LevelInfo))
}

// fakeUC serves OIDC discovery, a token endpoint accepting client-id /
// client-secret, and tables answered by tables; it counts table requests.
func fakeUC(t *testing.T, tables http.HandlerFunc) (string, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	mux := http.NewServeMux()
	var base string
	mux.HandleFunc("GET /oidc/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"authorization_endpoint":"%[1]s/oidc/v1/authorize","token_endpoint":"%[1]s/oidc/v1/token"}`, base)
	})
	mux.HandleFunc("POST /oidc/v1/token", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"m2m","token_type":"Bearer","expires_in":3600}`)
	})
	mux.HandleFunc("/api/2.1/unity-catalog/tables/", func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		tables(w, r)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	base = srv.URL
	return srv.URL, &n
}

func apiError(status int, code, msg string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error_code":%q,"message":%q}`, code, msg)
	}
}

func TestWorkspaceRefusalsArePermanentAndSayWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answer    http.HandlerFunc
		table     string
		token     bool
		kind      ErrorKind
		permanent bool
		want      []string
	}{
		{"permission denied", apiError(403, "PERMISSION_DENIED", "User does not have USE SCHEMA on Schema 'main.raw'"), tbl, false, KindPermission, true, []string{
			"403 PERMISSION_DENIED: User does not have USE SCHEMA",
			"GRANT USE CATALOG ON CATALOG main TO `client-id`",
			"GRANT USE SCHEMA ON SCHEMA main.raw TO `client-id`",
			"GRANT SELECT, MODIFY ON TABLE main.raw.events TO `client-id`",
		}},
		{"invalid name", apiError(400, "INVALID_PARAMETER_VALUE", "[INVALID_SCHEMA_OR_RELATION_NAME] `main.raw.events` is not a valid name"), tbl, false, KindInvalidName, true, []string{
			"INVALID_SCHEMA_OR_RELATION_NAME", "each part ASCII letters, digits and underscore",
		}},
		{"bad token", apiError(401, "UNAUTHENTICATED", "invalid access token"), tbl, true, KindCredentials, true, []string{
			"401 UNAUTHENTICATED: invalid access token", "check the personal access token (from config field token)",
		}},
		{"other refusal", apiError(400, "INVALID_PARAMETER_VALUE", "nope"), tbl, false, KindService, true, []string{"400 INVALID_PARAMETER_VALUE: nope"}},
		{"unavailable", apiError(503, "TEMPORARILY_UNAVAILABLE", "later"), tbl, false, KindService, false, []string{"503 TEMPORARILY_UNAVAILABLE: later"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t)
			host, _ := fakeUC(t, tc.answer)
			cfg := UCConfig{Host: host, ClientID: "client-id", ClientSecret: "client-secret", CallTimeout: 5 * time.Second}
			if tc.token {
				cfg = UCConfig{Host: host, Token: "pat-value", CallTimeout: 5 * time.Second}
			}
			uc, err := NewUC(cfg)
			require.NoError(t, err)
			start := time.Now()
			_, err = uc.Describe(context.Background(), tc.table)
			require.Error(t, err)
			assert.Less(t, time.Since(start), 3*time.Second, "one attempt, no silent SDK retries")
			var we *WorkspaceError
			require.ErrorAs(t, err, &we)
			assert.Equal(t, tc.kind, we.Kind, "%v", err)
			assert.Equal(t, tc.permanent, we.Permanent())
			assert.Equal(t, tc.permanent, ingest.IsPermanent(err), "the table writer's predicate agrees")
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), "pat-value")
			assert.NotContains(t, err.Error(), "client-secret")
		})
	}
}

func TestDescribeRefusesInvalidNameWithoutARequest(t *testing.T) {
	cleanEnv(t)
	host, requests := fakeUC(t, apiError(500, "X", "must not be asked"))
	uc, err := NewUC(UCConfig{Host: host, Token: "t"})
	require.NoError(t, err)
	for _, name := range []string{"main.default.é", "main.raw", "a.b.c d"} {
		_, err := uc.Describe(context.Background(), name)
		require.Error(t, err, name)
		var tne *typemap.TableNameError
		assert.ErrorAs(t, err, &tne, name)
		assert.True(t, ingest.IsPermanent(err), name)
	}
	assert.Equal(t, int32(0), requests.Load())
}
