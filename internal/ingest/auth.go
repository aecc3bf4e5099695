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

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
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
	// source says where the client credentials came from, for messages.
	source string
	table  string
	now    func() time.Time

	mu          sync.Mutex
	workspaceID string
	token       string
	refreshAt   time.Time
}

// TokenSourceOption adjusts a TableTokenSource.
type TokenSourceOption func(*TableTokenSource)

// WithCredentialSource records where the client credentials came from (for
// example "config fields client_id/client_secret" or "env
// DATABRICKS_CLIENT_ID/DATABRICKS_CLIENT_SECRET"), so that a refusal by the
// token endpoint can say which credential to fix. Empty leaves it unsaid.
func WithCredentialSource(source string) TokenSourceOption {
	return func(s *TableTokenSource) { s.source = source }
}

// NewTableTokenSource returns a token source for table (catalog.schema.table)
// that posts the per-table client-credentials form to
// {workspaceURL}/oidc/v1/token. An empty workspaceID is discovered from
// {workspaceURL}/.well-known/databricks-config on first use (the emulator and
// real workspaces both serve it). A nil httpClient means http.DefaultClient.
func NewTableTokenSource(httpClient *http.Client, workspaceURL, workspaceID, clientID, clientSecret, table string, opts ...TokenSourceOption) (*TableTokenSource, error) {
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
	s := &TableTokenSource{
		httpClient:   httpClient,
		workspaceURL: strings.TrimRight(workspaceURL, "/"),
		workspaceID:  workspaceID,
		clientID:     clientID,
		clientSecret: clientSecret,
		table:        table,
		now:          time.Now,
	}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Token returns the cached token or fetches a new one. Token endpoint 5xx
// and network errors are retried a few times; 4xx answers are not. Errors
// are *Error: FatalConfig for 4xx (wrapping a *CredentialError that says what
// was refused and what to do), Transient otherwise.
func (s *TableTokenSource) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && s.now().Before(s.refreshAt) {
		return s.token, nil
	}
	if s.workspaceID == "" {
		id, err := discoverWorkspaceID(ctx, s.httpClient, s.workspaceURL)
		if err != nil {
			// An unreachable workspace may come back; an answer without a
			// workspace id will not.
			class := FatalConfig
			var ne *discoveryNetError
			if errors.As(err, &ne) {
				class = Transient
			}
			return "", &Error{Class: class, Code: codes.Unauthenticated, Err: err}
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
	if resp.StatusCode >= 500 {
		return "", 0, true, &fetchError{retryable: true, err: fmt.Errorf("token endpoint %s answered %s: %s", req.URL, resp.Status, truncate(string(body), 200))}
	}
	if resp.StatusCode != http.StatusOK {
		return "", 0, false, &fetchError{err: s.refusal(req.URL.String(), resp.StatusCode, body)}
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

// refusal builds the *CredentialError for a 4xx answer of the token
// endpoint. The OAuth error body (RFC 6749 §5.2: error, error_description)
// may echo request details but never the secret; the description is kept
// short all the same.
func (s *TableTokenSource) refusal(endpoint string, status int, body []byte) *CredentialError {
	e := &CredentialError{
		Endpoint: endpoint, Status: status, ClientID: s.clientID, Source: s.source,
		Table: s.table, WorkspaceID: s.workspaceID,
	}
	var oe struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	if json.Unmarshal(body, &oe) == nil && oe.Error != "" {
		e.OAuthError, e.Description = oe.Error, truncate(oe.Description, 200)
	} else {
		e.Description = truncate(strings.TrimSpace(string(body)), 200)
	}
	return e
}

// CredentialError is the token endpoint refusing a token request (HTTP 4xx).
// Its message names the client id and where it came from (never the secret)
// and says what to do; it is permanent: the same request will be refused
// again until the configuration or the grants change.
type CredentialError struct {
	// Endpoint is the token endpoint URL.
	Endpoint string
	// Status is the HTTP status of the refusal.
	Status int
	// OAuthError and Description are the RFC 6749 error fields, when given.
	OAuthError  string
	Description string
	ClientID    string
	// Source says where the credentials came from (see WithCredentialSource).
	Source      string
	Table       string
	WorkspaceID string
}

// Permanent reports true: retrying the same credentials cannot help.
func (e *CredentialError) Permanent() bool { return true }

// Error says what was refused, the endpoint's reason, and the remedy.
func (e *CredentialError) Error() string {
	var b strings.Builder
	from := ""
	if e.Source != "" {
		from = " (from " + e.Source + ")"
	}
	switch {
	case e.clientRefused():
		fmt.Fprintf(&b, "token endpoint %s refused the OAuth client credentials of client_id %q%s", e.Endpoint, e.ClientID, from)
	case e.OAuthError == "invalid_target":
		fmt.Fprintf(&b, "token endpoint %s refused the Zerobus resource of workspace id %q for client_id %q%s", e.Endpoint, e.WorkspaceID, e.ClientID, from)
	default:
		fmt.Fprintf(&b, "token endpoint %s refused a token for table %s to client_id %q%s", e.Endpoint, e.Table, e.ClientID, from)
	}
	fmt.Fprintf(&b, ": %d %s", e.Status, http.StatusText(e.Status))
	if e.OAuthError != "" {
		b.WriteString(" " + e.OAuthError)
	}
	if e.Description != "" {
		b.WriteString(": " + e.Description)
	}
	b.WriteString("; " + e.Hint())
	return b.String()
}

// clientRefused reports whether the client credentials themselves were
// refused (HTTP 401, or RFC 6749 invalid_client / unauthorized_client).
func (e *CredentialError) clientRefused() bool {
	return e.Status == http.StatusUnauthorized || e.OAuthError == "invalid_client" || e.OAuthError == "unauthorized_client"
}

// Hint says what to do about the refusal.
func (e *CredentialError) Hint() string {
	switch {
	case e.clientRefused():
		return "check the service principal's OAuth secret (it may be wrong, expired or rotated: create a new one under the service principal's Secrets) and that client_id is that service principal's application id"
	case e.OAuthError == "invalid_target":
		return "check workspace_id (or the Zerobus endpoint, whose first DNS label names the workspace)"
	case e.Status == http.StatusForbidden || e.OAuthError == "invalid_authorization_details" || e.OAuthError == "access_denied":
		return typemap.GrantHint(e.Table, e.ClientID)
	default:
		return "check client_id, client_secret and the table name"
	}
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
		return "", &discoveryNetError{fmt.Errorf("discover workspace id from %s: %w", workspaceURL, err)}
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

// discoveryNetError is a workspace-id discovery that never got an answer (the
// workspace was unreachable): worth retrying, unlike an answer without an id.
type discoveryNetError struct{ err error }

func (e *discoveryNetError) Error() string { return e.err.Error() }
func (e *discoveryNetError) Unwrap() error { return e.err }

// splitTable checks table against typemap.CheckTableName (three non-empty
// parts of ASCII letters, digits and underscore: a name the table header can
// carry) and splits it. The error is a permanent *typemap.TableNameError.
func splitTable(table string) (catalog, schema, name string, err error) {
	if err := typemap.CheckTableName(table); err != nil {
		return "", "", "", err
	}
	parts := strings.Split(table, ".")
	return parts[0], parts[1], parts[2], nil
}
