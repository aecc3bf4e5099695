package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tokenServer is a minimal OAuth endpoint that records what it was sent.
type tokenServer struct {
	t         *testing.T
	calls     atomic.Int32
	failFirst int32 // answer this many calls with failStatus
	failCode  int
	expiresIn int64
	lastForm  atomic.Value // url.Values
	// secret is the accepted client secret; empty means "secret".
	secret string
}

func (ts *tokenServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/.well-known/databricks-config":
		_ = json.NewEncoder(w).Encode(map[string]any{"oidc_endpoint": "x/oidc", "workspace_id": "123"})
		return
	case "/oidc/v1/token":
	default:
		http.NotFound(w, r)
		return
	}
	n := ts.calls.Add(1)
	if n <= ts.failFirst {
		http.Error(w, "nope", ts.failCode)
		return
	}
	user, pass, ok := r.BasicAuth()
	want := ts.secret
	if want == "" {
		want = "secret"
	}
	if !ok || user != "cid" || pass != want {
		http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
		return
	}
	if r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
		http.Error(w, "content type", http.StatusBadRequest)
		return
	}
	require.NoError(ts.t, r.ParseForm())
	ts.lastForm.Store(r.PostForm)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"access_token": fmt.Sprintf("tok-%d", n), "token_type": "Bearer", "expires_in": ts.expiresIn,
	})
}

func TestTableTokenSourceForm(t *testing.T) {
	ts := &tokenServer{t: t, expiresIn: 3600}
	srv := httptest.NewServer(ts)
	defer srv.Close()

	src, err := NewTableTokenSource(srv.Client(), srv.URL, "", "cid", "secret", "main.default.t1")
	require.NoError(t, err)
	tok, err := src.Token(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "tok-1", tok)

	form := ts.lastForm.Load().(url.Values)
	assert.Equal(t, []string{"client_credentials"}, form["grant_type"])
	assert.Equal(t, []string{"all-apis"}, form["scope"])
	assert.Equal(t, []string{"api://databricks/workspaces/123/zerobusDirectWriteApi"}, form["resource"], "workspace id discovered from databricks-config")
	var details []map[string]any
	require.NoError(t, json.Unmarshal([]byte(form["authorization_details"][0]), &details))
	require.Len(t, details, 3)
	want := []map[string]any{
		{"type": "unity_catalog_privileges", "object_type": "CATALOG", "object_full_path": "main", "privileges": []any{"USE CATALOG"}},
		{"type": "unity_catalog_privileges", "object_type": "SCHEMA", "object_full_path": "main.default", "privileges": []any{"USE SCHEMA"}},
		{"type": "unity_catalog_privileges", "object_type": "TABLE", "object_full_path": "main.default.t1", "privileges": []any{"SELECT", "MODIFY"}, "operations": []any{"zerobuswrite"}},
	}
	assert.Equal(t, want, details)
}

func TestTableTokenSourceCachingAndRefresh(t *testing.T) {
	ts := &tokenServer{t: t, expiresIn: 3600}
	srv := httptest.NewServer(ts)
	defer srv.Close()
	src, err := NewTableTokenSource(srv.Client(), srv.URL, "42", "cid", "secret", "c.s.t")
	require.NoError(t, err)
	now := time.Unix(1_000_000, 0)
	src.now = func() time.Time { return now }
	ctx := context.Background()

	tok, err := src.Token(ctx)
	require.NoError(t, err)
	assert.Equal(t, "tok-1", tok)
	tok, _ = src.Token(ctx)
	assert.Equal(t, "tok-1", tok, "cached")

	now = now.Add(54 * time.Minute)
	tok, _ = src.Token(ctx)
	assert.Equal(t, "tok-1", tok, "still more than 5 minutes left")

	now = now.Add(2 * time.Minute) // 4 minutes left
	tok, _ = src.Token(ctx)
	assert.Equal(t, "tok-2", tok, "refreshed within 5 minutes of expiry")

	src.Invalidate()
	tok, _ = src.Token(ctx)
	assert.Equal(t, "tok-3", tok, "invalidate forces a fetch")
	assert.Equal(t, int32(3), ts.calls.Load())
}

func TestTableTokenSourceErrors(t *testing.T) {
	tests := []struct {
		name      string
		failFirst int32
		failCode  int
		secret    string
		wantTok   string
		wantClass Class
		wantCalls int32
	}{
		{"5xx retried then success", 1, http.StatusServiceUnavailable, "s3cr3t-ok", "tok-2", 0, 2},
		{"5xx exhausts retries", 10, http.StatusInternalServerError, "s3cr3t-ok", "", Transient, tokenFetchAttempts},
		{"4xx not retried", 10, http.StatusBadRequest, "s3cr3t-ok", "", FatalConfig, 1},
		{"wrong secret", 0, 0, "wr0ng-s3cr3t", "", FatalConfig, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Distinctive secrets: refusal messages legitimately say "secret".
			ts := &tokenServer{t: t, expiresIn: 3600, failFirst: tt.failFirst, failCode: tt.failCode, secret: "s3cr3t-ok"}
			srv := httptest.NewServer(ts)
			defer srv.Close()
			src, err := NewTableTokenSource(srv.Client(), srv.URL, "1", "cid", tt.secret, "c.s.t")
			require.NoError(t, err)
			tok, err := src.Token(context.Background())
			assert.Equal(t, tt.wantCalls, ts.calls.Load())
			if tt.wantTok != "" {
				require.NoError(t, err)
				assert.Equal(t, tt.wantTok, tok)
				return
			}
			require.Error(t, err)
			class, ok := ClassOf(err)
			require.True(t, ok)
			assert.Equal(t, tt.wantClass, class)
			assert.NotContains(t, err.Error(), tt.secret, "secret never in errors")
		})
	}
}

func TestTableTokenSourceNetworkErrorIsTransient(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	deadURL := srv.URL
	srv.Close()
	src, err := NewTableTokenSource(nil, deadURL, "1", "cid", "secret", "c.s.t")
	require.NoError(t, err)
	_, err = src.Token(context.Background())
	class, ok := ClassOf(err)
	require.True(t, ok)
	assert.Equal(t, Transient, class)
}

func TestNewTableTokenSourceValidates(t *testing.T) {
	_, err := NewTableTokenSource(nil, "http://x", "1", "cid", "secret", "only.two")
	assert.Error(t, err)
	_, err = NewTableTokenSource(nil, "http://x", "1", "", "secret", "a.b.c")
	assert.Error(t, err)
	_, err = NewTableTokenSource(nil, "", "1", "cid", "secret", "a.b.c")
	assert.Error(t, err)
}

func TestWorkspaceIDFromEndpoint(t *testing.T) {
	tests := []struct {
		endpoint string
		want     string
		wantErr  bool
	}{
		{"https://1234567890.zerobus.us-west-2.cloud.databricks.com", "1234567890", false},
		{"https://987.zerobus.westeurope.azuredatabricks.net:443", "987", false},
		{"987.zerobus.westeurope.azuredatabricks.net:443", "987", false},
		{"http://127.0.0.1:50051", "", true},
		{"http://[::1]:50051", "", true},
		{"http://localhost:50051", "", true},
		{"https://", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.endpoint, func(t *testing.T) {
			got, err := WorkspaceIDFromEndpoint(tt.endpoint)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestStaticToken(t *testing.T) {
	s := StaticToken("abc")
	s.Invalidate()
	tok, err := s.Token(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "abc", tok)
}

// TestClientUsesOAuthTokenPerTable: without a token override the client
// fetches a table-scoped token (workspace id discovered for a loopback
// endpoint) and sends it as the bearer.
func TestClientUsesOAuthTokenPerTable(t *testing.T) {
	ts := &tokenServer{t: t, expiresIn: 3600}
	oauth := httptest.NewServer(ts)
	defer oauth.Close()
	srv := &fakeFlightServer{}
	endpoint := startFake(t, srv)
	c, err := NewClient(Config{
		Endpoint: endpoint, WorkspaceURL: oauth.URL, ClientID: "cid", ClientSecret: "secret",
		ReadyTimeout: 2 * time.Second,
	})
	require.NoError(t, err)
	defer c.Close()
	s, err := c.Open(context.Background(), "cat.sch.tbl", testSchema)
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, []string{"Bearer tok-1"}, srv.conn(0).md.Get("authorization"))
	form := ts.lastForm.Load().(url.Values)
	assert.Equal(t, "api://databricks/workspaces/123/zerobusDirectWriteApi", form.Get("resource"))
	assert.Contains(t, form.Get("authorization_details"), `"object_full_path":"cat.sch.tbl"`)
}
