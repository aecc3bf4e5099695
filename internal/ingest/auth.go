package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
)

// TokenSource supplies bearer tokens for gRPC calls.
type TokenSource interface {
	// Token returns a valid token, fetching or refreshing it if needed.
	Token(ctx context.Context) (string, error)
	// Invalidate drops the cached token so the next Token fetches a new one;
	// called when the service answers UNAUTHENTICATED or PERMISSION_DENIED.
	Invalidate()
}

// StaticToken returns a TokenSource that always returns tok. Invalidate is a
// no-op: a static token cannot be refreshed.
func StaticToken(tok string) TokenSource { return staticToken(tok) }

type staticToken string

func (s staticToken) Token(context.Context) (string, error) { return string(s), nil }
func (staticToken) Invalidate()                             {}

// Token fetch tuning. The service's tokens live about an hour; SDKs refresh
// about five minutes before expiry.
const (
	tokenRefreshMargin  = 5 * time.Minute
	tokenFetchAttempts  = 3
	tokenFetchBackoff   = 500 * time.Millisecond
	tokenResponseMaxLen = 1 << 20
)

// TableTokenSource fetches OAuth machine-to-machine tokens scoped to one
// table for the Zerobus ingest API, caching them until shortly before they
// expire. It is safe for concurrent use.
type TableTokenSource struct {
	httpClient   *http.Client
	workspaceURL string
	clientID     string
	clientSecret string
	table        string
	now          func() time.Time

	mu          sync.Mutex
	workspaceID string
	token       string
	refreshAt   time.Time
}

// NewTableTokenSource returns a token source for table (catalog.schema.table)
// that posts the per-table client-credentials form to
// {workspaceURL}/oidc/v1/token. An empty workspaceID is discovered from
// {workspaceURL}/.well-known/databricks-config on first use (the emulator and
// real workspaces both serve it). A nil httpClient means http.DefaultClient.
func NewTableTokenSource(httpClient *http.Client, workspaceURL, workspaceID, clientID, clientSecret, table string) (*TableTokenSource, error) {
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	if workspaceURL == "" {
		return nil, errors.New("token source: workspace URL is required")
	}
	if clientID == "" || clientSecret == "" {
		return nil, errors.New("token source: client id and client secret are required")
	}
	if _, _, _, err := splitTable(table); err != nil {
		return nil, fmt.Errorf("token source: %w", err)
	}
	return &TableTokenSource{
		httpClient:   httpClient,
		workspaceURL: strings.TrimRight(workspaceURL, "/"),
		workspaceID:  workspaceID,
		clientID:     clientID,
		clientSecret: clientSecret,
		table:        table,
		now:          time.Now,
	}, nil
}

// Token returns the cached token or fetches a new one. Token endpoint 5xx
// and network errors are retried a few times; 4xx answers are not. Errors
// are *Error: FatalConfig for 4xx, Transient otherwise.
func (s *TableTokenSource) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && s.now().Before(s.refreshAt) {
		return s.token, nil
	}
	if s.workspaceID == "" {
		id, err := discoverWorkspaceID(ctx, s.httpClient, s.workspaceURL)
		if err != nil {
			return "", &Error{Class: FatalConfig, Code: codes.Unauthenticated, Err: err}
		}
		s.workspaceID = id
	}
	var lastErr error
	for attempt := 0; attempt < tokenFetchAttempts; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return "", Classify(ctx.Err())
			case <-time.After(tokenFetchBackoff * time.Duration(attempt)):
			}
		}
		tok, lifetime, retryable, err := s.fetch(ctx)
		if err == nil {
			s.token = tok
			margin := tokenRefreshMargin
			if lifetime/2 < margin {
				margin = lifetime / 2
			}
			s.refreshAt = s.now().Add(lifetime - margin)
			return tok, nil
		}
		lastErr = err
		if !retryable || ctx.Err() != nil {
			break
		}
	}
	class := Transient
	var fe *fetchError
	if errors.As(lastErr, &fe) && !fe.retryable {
		class = FatalConfig
	}
	return "", &Error{Class: class, Code: codes.Unauthenticated, Err: lastErr}
}

// tokenSourceError marks a failure to obtain a token (as opposed to the
// service refusing one), so that it is not retried with a "fresh" token: that
// would only ask the token endpoint again with the same wrong secret.
type tokenSourceError struct{ err error }

func (e *tokenSourceError) Error() string { return e.err.Error() }
func (e *tokenSourceError) Unwrap() error { return e.err }

// serviceRejectedToken reports whether err is the service refusing our bearer
// token at stream setup (UNAUTHENTICATED or PERMISSION_DENIED): worth exactly
// one retry with a newly fetched token.
func serviceRejectedToken(err error) bool {
	var tse *tokenSourceError
	if errors.As(err, &tse) {
		return false
	}
	ce := Classify(err)
	return ce.Code == codes.Unauthenticated || ce.Code == codes.PermissionDenied
}

// Invalidate drops the cached token.
func (s *TableTokenSource) Invalidate() {
	s.mu.Lock()
	s.token = ""
	s.refreshAt = time.Time{}
	s.mu.Unlock()
}

type fetchError struct {
	retryable bool
	err       error
}

func (e *fetchError) Error() string { return e.err.Error() }
func (e *fetchError) Unwrap() error { return e.err }

// TokenForm returns the form the per-table token request posts: exported
// so tests (and the emulator's checks) can compare against the wire doc.
func TokenForm(workspaceID, table string) (url.Values, error) {
	cat, sch, _, err := splitTable(table)
	if err != nil {
		return nil, err
	}
	type detail struct {
		Type           string   `json:"type"`
		ObjectType     string   `json:"object_type"`
		ObjectFullPath string   `json:"object_full_path"`
		Privileges     []string `json:"privileges"`
		Operations     []string `json:"operations,omitempty"`
	}
	const ucPrivileges = "unity_catalog_privileges"
	details, err := json.Marshal([]detail{
		{Type: ucPrivileges, ObjectType: "CATALOG", ObjectFullPath: cat, Privileges: []string{"USE CATALOG"}},
		{Type: ucPrivileges, ObjectType: "SCHEMA", ObjectFullPath: cat + "." + sch, Privileges: []string{"USE SCHEMA"}},
		{Type: ucPrivileges, ObjectType: "TABLE", ObjectFullPath: table, Privileges: []string{"SELECT", "MODIFY"}, Operations: []string{"zerobuswrite"}},
	})
	if err != nil {
		return nil, fmt.Errorf("encode authorization details: %w", err)
	}
	return url.Values{
		"grant_type":            {"client_credentials"},
		"scope":                 {"all-apis"},
		"resource":              {"api://databricks/workspaces/" + workspaceID + "/zerobusDirectWriteApi"},
		"authorization_details": {string(details)},
	}, nil
}

func (s *TableTokenSource) fetch(ctx context.Context) (token string, lifetime time.Duration, retryable bool, err error) {
	form, err := TokenForm(s.workspaceID, s.table)
	if err != nil {
		return "", 0, false, &fetchError{err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.workspaceURL+"/oidc/v1/token", strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, false, &fetchError{err: fmt.Errorf("build token request: %w", err)}
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(s.clientID, s.clientSecret)
	resp, err := s.httpClient.Do(req)
	if err != nil {
		return "", 0, true, &fetchError{retryable: true, err: fmt.Errorf("token request for %s: %w", s.table, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, tokenResponseMaxLen))
	if err != nil {
		return "", 0, true, &fetchError{retryable: true, err: fmt.Errorf("read token response: %w", err)}
	}
	if resp.StatusCode != http.StatusOK {
		// The body may echo request details but never the secret; keep it
		// short all the same.
		retry := resp.StatusCode >= 500
		return "", 0, retry, &fetchError{retryable: retry, err: fmt.Errorf("token endpoint answered %s: %s", resp.Status, truncate(string(body), 200))}
	}
	var tr struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	if err := json.Unmarshal(body, &tr); err != nil {
		return "", 0, false, &fetchError{err: fmt.Errorf("decode token response: %w", err)}
	}
	if tr.AccessToken == "" {
		return "", 0, false, &fetchError{err: errors.New("token response has no access_token")}
	}
	if tr.ExpiresIn <= 0 {
		tr.ExpiresIn = 3600
	}
	return tr.AccessToken, time.Duration(tr.ExpiresIn) * time.Second, false, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// discoverWorkspaceID reads workspace_id from the workspace's
// /.well-known/databricks-config.
func discoverWorkspaceID(ctx context.Context, hc *http.Client, workspaceURL string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, workspaceURL+"/.well-known/databricks-config", nil)
	if err != nil {
		return "", fmt.Errorf("build workspace config request: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("discover workspace id: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("discover workspace id: %s answered %s; set the workspace id explicitly", workspaceURL, resp.Status)
	}
	var cfg struct {
		WorkspaceID json.RawMessage `json:"workspace_id"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, tokenResponseMaxLen)).Decode(&cfg); err != nil {
		return "", fmt.Errorf("decode workspace config: %w", err)
	}
	id := strings.Trim(string(cfg.WorkspaceID), `"`)
	if id == "" || id == "null" {
		return "", errors.New("discover workspace id: workspace config has no workspace_id; set it explicitly")
	}
	return id, nil
}

// WorkspaceIDFromEndpoint returns the workspace id the SDKs derive from a
// Zerobus endpoint: the first DNS label of its host
// (https://1234.zerobus.us-west-2.cloud.databricks.com → "1234"). Endpoints
// whose host is an IP address or a single label (loopback, the emulator) name
// no workspace: it returns an error and the id must come from configuration
// or from the workspace's /.well-known/databricks-config.
func WorkspaceIDFromEndpoint(endpoint string) (string, error) {
	host := endpoint
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil {
			return "", fmt.Errorf("parse endpoint %q: %w", endpoint, err)
		}
		host = u.Hostname()
	} else if h, _, err := net.SplitHostPort(endpoint); err == nil {
		host = h
	}
	if host == "" {
		return "", fmt.Errorf("endpoint %q has no host", endpoint)
	}
	if net.ParseIP(host) != nil {
		return "", fmt.Errorf("endpoint %q is an IP address and names no workspace", endpoint)
	}
	label, rest, found := strings.Cut(host, ".")
	if !found || label == "" || rest == "" {
		return "", fmt.Errorf("endpoint %q has no workspace label", endpoint)
	}
	return label, nil
}

// splitTable splits catalog.schema.table, requiring three non-empty parts.
func splitTable(table string) (catalog, schema, name string, err error) {
	parts := strings.Split(table, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", fmt.Errorf("table name %q must be catalog.schema.table", table)
	}
	return parts[0], parts[1], parts[2], nil
}
