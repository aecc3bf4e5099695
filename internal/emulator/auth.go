package emulator

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// tokenKind tells a workspace (UC REST) token from a table-scoped Zerobus one.
type tokenKind int

const (
	kindWorkspace tokenKind = iota
	kindZerobus
)

type tokenInfo struct {
	kind      tokenKind
	table     string // normalized full name, kindZerobus only
	principal string // the client id the token was issued to
	expires   time.Time
}

var (
	errTokenUnknown = errors.New("invalid access token")
	errTokenExpired = errors.New("access token expired")
)

// tokenStore issues and checks access tokens. A token is opaque to clients
// but self-contained: its kind, table scope and expiry, signed with HMAC-SHA256
// under a key kept in the data directory. Tokens therefore stay valid across
// an emulator restart on the same directory, as real tokens outlive a service
// restart, and a forged or altered token is refused.
type tokenStore struct {
	now func() time.Time
	key []byte
}

// tokenClaims is the signed payload of a token.
type tokenClaims struct {
	Kind    tokenKind `json:"k"`
	Table   string    `json:"t,omitempty"`
	Subject string    `json:"s,omitempty"`
	Expires int64     `json:"e"` // unix nanoseconds
	Nonce   string    `json:"n"`
}

func newTokenStore(now func() time.Time, key []byte) *tokenStore {
	return &tokenStore{now: now, key: key}
}

// loadTokenKey reads the signing key from path, creating it if missing.
func loadTokenKey(path string) ([]byte, error) {
	if b, err := os.ReadFile(path); err == nil && len(b) >= 32 {
		return b, nil
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate token key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("token key dir: %w", err)
	}
	if err := os.WriteFile(path, key, 0o600); err != nil {
		return nil, fmt.Errorf("write token key: %w", err)
	}
	return key, nil
}

func (ts *tokenStore) sign(payload string) string {
	m := hmac.New(sha256.New, ts.key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (ts *tokenStore) issue(info tokenInfo) (string, error) {
	nonce := make([]byte, 12)
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	raw, err := json.Marshal(tokenClaims{Kind: info.kind, Table: info.table, Subject: info.principal, Expires: info.expires.UnixNano(),
		Nonce: base64.RawURLEncoding.EncodeToString(nonce)})
	if err != nil {
		return "", fmt.Errorf("encode token: %w", err)
	}
	prefix := "emu-ws-"
	if info.kind == kindZerobus {
		prefix = "emu-zb-"
	}
	payload := prefix + base64.RawURLEncoding.EncodeToString(raw)
	return payload + "." + ts.sign(payload), nil
}

func (ts *tokenStore) lookup(tok string) (tokenInfo, error) {
	payload, sig, ok := strings.Cut(tok, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(ts.sign(payload))) {
		return tokenInfo{}, errTokenUnknown
	}
	body, ok := strings.CutPrefix(payload, "emu-zb-")
	if !ok {
		body, ok = strings.CutPrefix(payload, "emu-ws-")
	}
	if !ok {
		return tokenInfo{}, errTokenUnknown
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return tokenInfo{}, errTokenUnknown
	}
	var c tokenClaims
	if err := json.Unmarshal(raw, &c); err != nil {
		return tokenInfo{}, errTokenUnknown
	}
	info := tokenInfo{kind: c.Kind, table: c.Table, principal: c.Subject, expires: time.Unix(0, c.Expires)}
	if !ts.now().Before(info.expires) {
		return tokenInfo{}, errTokenExpired
	}
	return info, nil
}

func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// authorizeWorkspace validates the bearer of a UC REST / SQL request: a live
// workspace token. Ingest tokens are refused there, as on Databricks.
func (s *Server) authorizeWorkspace(r *http.Request) error {
	tok, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		return errors.New("missing bearer token")
	}
	info, err := s.tokens.lookup(tok)
	if err != nil {
		return err
	}
	if info.kind != kindWorkspace {
		return errors.New("a Zerobus ingest token is not valid for workspace APIs")
	}
	return nil
}

// authorizeStream checks a gRPC stream's metadata like the service: a live
// Zerobus token (UNAUTHENTICATED), a three-part table header
// (INVALID_ARGUMENT), a token scoped to that table (PERMISSION_DENIED), and
// an existing table (NOT_FOUND). It returns the table as of now: the stream's
// schema snapshot. With strict grants, the token's principal must hold the
// writer's grants on the table (PERMISSION_DENIED naming the missing one).
// Source: docs/protocol.md#authentication (the token is table-scoped),
// #request-metadata (every call carries authorization and
// x-databricks-zerobus-table-name), #table-names (exactly three non-empty
// dot-separated parts) and #errors-and-recovery (the status codes the SDKs
// handle).
// The order of the checks, and grants before existence, is the emulator's:
// no source says which the service reports first.
func (s *Server) authorizeStream(ctx context.Context, tableOverride string) (workspace.Table, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	tok, ok := bearer(first("authorization"))
	if !ok {
		return workspace.Table{}, status.Error(codes.Unauthenticated, "missing authorization: Bearer token")
	}
	info, err := s.tokens.lookup(tok)
	if err != nil {
		return workspace.Table{}, status.Error(codes.Unauthenticated, err.Error())
	}
	name := first("x-databricks-zerobus-table-name")
	if name == "" {
		name = tableOverride
	}
	if name == "" {
		return workspace.Table{}, status.Error(codes.InvalidArgument, "missing x-databricks-zerobus-table-name header")
	}
	if err := checkTableHeader(name); err != nil {
		return workspace.Table{}, err
	}
	if tableOverride != "" && workspace.NormalizeName(tableOverride) != workspace.NormalizeName(name) {
		return workspace.Table{}, status.Errorf(codes.InvalidArgument, "table_name %q does not match the x-databricks-zerobus-table-name header %q", tableOverride, name)
	}
	if _, _, _, err := typemap.ParseTableName(name); err != nil {
		return workspace.Table{}, status.Error(codes.InvalidArgument, err.Error())
	}
	if info.kind != kindZerobus {
		return workspace.Table{}, status.Errorf(codes.PermissionDenied, "token is not authorized for Zerobus writes to %s (no authorization_details for the table)", name)
	}
	if info.table != workspace.NormalizeName(name) {
		return workspace.Table{}, status.Errorf(codes.PermissionDenied, "token is not authorized for table %s", name)
	}
	// Grants are checked before existence, so a principal without them
	// gets PERMISSION_DENIED for a missing table too, never NOT_FOUND.
	// Source: Unity Catalog tells whether a table exists only to a caller
	// with USE_CATALOG on the catalog, USE_SCHEMA on the schema and SELECT
	// on (or ownership of) the table, or BROWSE (REST "Table Exists",
	// GET /api/2.1/unity-catalog/tables/{full_name}/exists: "The caller
	// must satisfy one of the following requirements"). Assumption: that
	// Zerobus applies the same rule at stream open; no SDK file, doc or
	// issue shows its answer for a missing table without grants. With
	// grants (or in open mode) a missing table is NOT_FOUND, which the SDKs
	// treat as non-retryable (errors.rs UNRETRIABLE_STATUS_CODES).
	if err := s.grants.check(info.principal, name); err != nil {
		return workspace.Table{}, err
	}
	t, ok := s.reg.Get(name)
	if !ok {
		return workspace.Table{}, status.Errorf(codes.NotFound, "table %s does not exist", name)
	}
	return t, nil
}

// checkTableHeader refuses a table name with a byte outside printable ASCII
// (0x20-0x7E). Unity Catalog object names never hold ASCII control
// characters (00-1F) or DELETE (7F) (docs.databricks.com, SQL language
// reference "Names"), and Zerobus writes only tables named with ASCII
// letters, digits and underscores (Zerobus Ingest connector limitations), so
// such a header can name no table the service writes; gRPC itself defines an
// ASCII metadata value as printable ASCII (PROTOCOL-HTTP2.md, ASCII-Value).
// Observed: the official SDK 1.3.0 sends a tab in the header (tonic accepts
// visible ASCII and tab) and refuses non-ASCII before sending; grpc-go
// clients refuse both. The stream is refused INVALID_ARGUMENT, not
// retryable, naming the byte (conformance TestSDKNonPrintableTableName).
func checkTableHeader(name string) error {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return status.Errorf(codes.InvalidArgument,
				"x-databricks-zerobus-table-name %q has a non-printable character (byte 0x%02x at offset %d): table names are printable ASCII", name, c, i)
		}
	}
	return nil
}

// authorizationDetail is one entry of the OAuth authorization_details array.
type authorizationDetail struct {
	Type           string   `json:"type"`
	ObjectType     string   `json:"object_type"`
	ObjectFullPath string   `json:"object_full_path"`
	Privileges     []string `json:"privileges"`
	Operations     []string `json:"operations"`
}

// zerobusScope checks the authorization_details of a Zerobus token request
// and returns the table it names. It wants what the SDKs send: the catalog
// with USE CATALOG, the schema with USE SCHEMA, and the table with SELECT and
// MODIFY.
func zerobusScope(raw string) (string, error) {
	var details []authorizationDetail
	if err := json.Unmarshal([]byte(raw), &details); err != nil {
		return "", fmt.Errorf("authorization_details is not a JSON array of objects: %v", err)
	}
	var table string
	for _, d := range details {
		if d.Type != "unity_catalog_privileges" {
			return "", fmt.Errorf("authorization_details: unsupported type %q", d.Type)
		}
		if strings.EqualFold(d.ObjectType, "TABLE") {
			if table != "" {
				return "", errors.New("authorization_details names more than one table")
			}
			table = d.ObjectFullPath
		}
	}
	if table == "" {
		return "", errors.New("authorization_details names no TABLE object")
	}
	cat, sch, _, err := typemap.ParseTableName(table)
	if err != nil {
		return "", fmt.Errorf("authorization_details: %v", err)
	}
	want := map[string]struct {
		path  string
		privs []string
	}{
		"CATALOG": {cat, []string{"USE CATALOG"}},
		"SCHEMA":  {cat + "." + sch, []string{"USE SCHEMA"}},
		"TABLE":   {table, []string{"SELECT", "MODIFY"}},
	}
	seen := map[string]bool{}
	for _, d := range details {
		ot := strings.ToUpper(d.ObjectType)
		w, ok := want[ot]
		if !ok {
			return "", fmt.Errorf("authorization_details: unsupported object_type %q", d.ObjectType)
		}
		if !strings.EqualFold(d.ObjectFullPath, w.path) {
			return "", fmt.Errorf("authorization_details: %s %q does not contain table %s", ot, d.ObjectFullPath, table)
		}
		for _, p := range w.privs {
			if !containsFold(d.Privileges, p) {
				return "", fmt.Errorf("authorization_details: %s %s lacks privilege %s", ot, d.ObjectFullPath, p)
			}
		}
		seen[ot] = true
	}
	for ot := range want {
		if !seen[ot] {
			return "", fmt.Errorf("authorization_details: missing the %s entry for %s", ot, table)
		}
	}
	return workspace.NormalizeName(table), nil
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// validResource accepts the Zerobus resource for this workspace. SDKs take
// the workspace id from the first DNS label of the Zerobus endpoint, which
// for a loopback endpoint is "127" or "localhost" rather than a real id; the
// emulator accepts those too, and nothing else.
func (s *Server) validResource(resource string) bool {
	id, ok := strings.CutPrefix(resource, "api://databricks/workspaces/")
	if !ok {
		return false
	}
	id, ok = strings.CutSuffix(id, "/zerobusDirectWriteApi")
	if !ok {
		return false
	}
	if id == s.cfg.WorkspaceID || id == "localhost" {
		return true
	}
	if s.grpcLn != nil {
		host, _, err := net.SplitHostPort(s.grpcLn.Addr().String())
		if err == nil && id == strings.Split(host, ".")[0] {
			return true
		}
	}
	return false
}

// handleToken is POST /oidc/v1/token: OAuth client_credentials with HTTP
// Basic (or form) client authentication.
func (s *Server) handleToken(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, errCode, desc string) {
		s.stats.add(&s.stats.tokenFails, 1)
		workspace.WriteJSON(w, code, map[string]string{"error": errCode, "error_description": desc})
	}
	if err := r.ParseForm(); err != nil {
		fail(http.StatusBadRequest, "invalid_request", "malformed form body")
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	idOK := subtle.ConstantTimeCompare([]byte(id), []byte(s.cfg.ClientID)) == 1
	secretOK := subtle.ConstantTimeCompare([]byte(secret), []byte(s.cfg.ClientSecret)) == 1
	if !idOK || !secretOK {
		s.log.Warn("token request refused: bad client credentials", "client_id", id)
		fail(http.StatusUnauthorized, "invalid_client", "Client authentication failed")
		return
	}
	if gt := r.PostForm.Get("grant_type"); gt != "client_credentials" {
		fail(http.StatusBadRequest, "unsupported_grant_type", fmt.Sprintf("grant_type %q is not supported", gt))
		return
	}
	scope := r.PostForm.Get("scope")
	if scope == "" {
		scope = "all-apis"
	}
	info := tokenInfo{kind: kindWorkspace, principal: id, expires: s.tokens.now().Add(s.cfg.TokenTTL)}
	resource := r.PostForm.Get("resource")
	details := r.PostForm.Get("authorization_details")
	switch {
	case resource != "":
		if !s.validResource(resource) {
			fail(http.StatusBadRequest, "invalid_target", fmt.Sprintf("resource %q is not api://databricks/workspaces/%s/zerobusDirectWriteApi", resource, s.cfg.WorkspaceID))
			return
		}
		if details == "" {
			fail(http.StatusBadRequest, "invalid_request", "authorization_details is required for the Zerobus resource")
			return
		}
		table, err := zerobusScope(details)
		if err != nil {
			fail(http.StatusBadRequest, "invalid_authorization_details", err.Error())
			return
		}
		info.kind, info.table = kindZerobus, table
	case details != "":
		fail(http.StatusBadRequest, "invalid_request", "authorization_details needs resource=api://databricks/workspaces/<id>/zerobusDirectWriteApi")
		return
	}
	tok, err := s.tokens.issue(info)
	if err != nil {
		fail(http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	s.stats.add(&s.stats.tokens, 1)
	w.Header().Set("Cache-Control", "no-store")
	workspace.WriteJSON(w, http.StatusOK, map[string]any{
		"access_token": tok,
		"token_type":   "Bearer",
		"expires_in":   int64(s.cfg.TokenTTL / time.Second),
		"scope":        scope,
	})
}
