package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// refusingTokenEndpoint answers every token request with status and body.
func refusingTokenEndpoint(t *testing.T, status int, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestTokenRefusalSaysWhichCredentialAndWhatToDo(t *testing.T) {
	const secret = "s3cr3t-value"
	tests := []struct {
		name   string
		status int
		body   string
		want   []string
	}{
		{"wrong secret", http.StatusUnauthorized, `{"error":"invalid_client","error_description":"Client authentication failed"}`, []string{
			`/oidc/v1/token refused the OAuth client credentials of client_id "sp-app-id" (from env DATABRICKS_CLIENT_ID/DATABRICKS_CLIENT_SECRET)`,
			"401 Unauthorized invalid_client: Client authentication failed",
			"check the service principal's OAuth secret",
		}},
		{"wrong workspace", http.StatusBadRequest, `{"error":"invalid_target","error_description":"bad resource"}`, []string{
			`refused the Zerobus resource of workspace id "42" for client_id "sp-app-id"`,
			"check workspace_id",
		}},
		{"privileges refused", http.StatusForbidden, `{"error":"access_denied"}`, []string{
			`refused a token for table main.raw.events to client_id "sp-app-id"`,
			"GRANT SELECT, MODIFY ON TABLE main.raw.events TO `sp-app-id`",
			"GRANT USE CATALOG ON CATALOG main TO `sp-app-id`",
		}},
		{"not JSON", http.StatusBadRequest, "plain refusal", []string{"400 Bad Request: plain refusal", "check client_id, client_secret and the table name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := refusingTokenEndpoint(t, tt.status, tt.body)
			src, err := NewTableTokenSource(nil, url, "42", "sp-app-id", secret, "main.raw.events",
				WithCredentialSource("env DATABRICKS_CLIENT_ID/DATABRICKS_CLIENT_SECRET"))
			require.NoError(t, err)
			_, err = src.Token(context.Background())
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), secret, "the secret is never in a message")
			var ce *CredentialError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tt.status, ce.Status)
			assert.True(t, IsPermanent(err))
			class, _ := ClassOf(err)
			assert.Equal(t, FatalConfig, class)
		})
	}
}

func TestWorkspaceIDDiscoveryUnreachableIsTransient(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	dead := srv.URL
	srv.Close()
	src, err := NewTableTokenSource(nil, dead, "", "cid", "secret", "c.s.t")
	require.NoError(t, err)
	_, err = src.Token(context.Background())
	require.Error(t, err)
	class, _ := ClassOf(err)
	assert.Equal(t, Transient, class, "an unreachable workspace may come back: %v", err)
	assert.False(t, IsPermanent(err))
	assert.Contains(t, err.Error(), "discover workspace id from "+dead)

	// A workspace that answers without an id will not get one by retrying.
	noID := httptest.NewServer(http.NotFoundHandler())
	defer noID.Close()
	src, err = NewTableTokenSource(nil, noID.URL, "", "cid", "secret", "c.s.t")
	require.NoError(t, err)
	_, err = src.Token(context.Background())
	assert.True(t, IsPermanent(err), "%v", err)
}

func TestIsPermanent(t *testing.T) {
	fatal := &Error{Class: FatalConfig, Code: codes.NotFound, Err: errors.New("no table")}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"canceled", context.Canceled, false},
		{"deadline", fmt.Errorf("open: %w", context.DeadlineExceeded), false},
		{"plain transport error", errors.New("connection reset by peer"), false},
		{"unavailable", status.Error(codes.Unavailable, "down"), false},
		{"rotation", status.Error(codes.Unavailable, "Error Code: 6002"), false},
		{"resource exhausted", status.Error(codes.ResourceExhausted, "busy"), false},
		{"offset gap is poison", status.Error(codes.InvalidArgument, "Non-incremental offset: expected 1, actual 3"), false},
		{"permission denied", status.Error(codes.PermissionDenied, "nope"), true},
		{"unauthenticated", status.Error(codes.Unauthenticated, "bad token"), true},
		{"not found", status.Error(codes.NotFound, "no such table"), true},
		{"invalid name under any code", status.Error(codes.Internal, "[INVALID_SCHEMA_OR_RELATION_NAME] `a.b.c d` is not a valid name"), true},
		{"classified and wrapped", fmt.Errorf("open stream to t: %w", fatal), true},
		{"transient classified", &Error{Class: Transient, Err: errors.New("x")}, false},
		{"table name rule", typemap.CheckTableName("main.default.é"), true},
		{"credential refusal", &CredentialError{Status: http.StatusUnauthorized}, true},
		{"grant hint keeps the class", WithGrantHint(status.Error(codes.PermissionDenied, "nope"), "a.b.c", "sp"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, IsPermanent(tt.err), "%v", tt.err)
		})
	}
}

func TestWithGrantHint(t *testing.T) {
	denied := status.Error(codes.PermissionDenied, "User does not have MODIFY on table")
	err := WithGrantHint(denied, "main.raw.events", "sp-app-id")
	assert.Contains(t, err.Error(), "User does not have MODIFY on table; grant the writer explicit privileges")
	assert.Contains(t, err.Error(), "GRANT USE SCHEMA ON SCHEMA main.raw TO `sp-app-id`")
	assert.Equal(t, codes.PermissionDenied, Classify(err).Code, "the status is still reachable")

	missing := &Error{Class: FatalConfig, Code: codes.Unknown, ServiceCode: ServiceCodeMissingGrants, Err: errors.New("missing grants")}
	assert.Contains(t, WithGrantHint(missing, "a.b.c", "").Error(), "GRANT SELECT, MODIFY ON TABLE a.b.c TO `<service principal application id>`")

	other := status.Error(codes.Unavailable, "down")
	assert.Same(t, other, WithGrantHint(other, "a.b.c", "sp"), "other errors pass unchanged")
	assert.Nil(t, WithGrantHint(nil, "a.b.c", "sp"))
}

func TestOpenRefusesInvalidTableNamePermanently(t *testing.T) {
	srv := &fakeFlightServer{}
	c := testClient(t, startFake(t, srv), nil)
	for _, name := range []string{"main.default.é", "main.default", "a.b.c d"} {
		_, err := c.Open(waitCtx(t), name, testSchema)
		require.Error(t, err, name)
		assert.True(t, IsPermanent(err), "%s: %v", name, err)
		var tne *typemap.TableNameError
		assert.ErrorAs(t, err, &tne, name)
	}
	_, err := c.Open(waitCtx(t), "main.default.é", testSchema)
	assert.ErrorContains(t, err, "each part may hold only ASCII letters, digits and underscore")
	assert.Equal(t, 0, srv.connCount(), "refused before any call: gRPC would refuse the header anyway")
}

func TestOpenPermissionDeniedSaysTheGrants(t *testing.T) {
	srv := &fakeFlightServer{setup: func(int, metadata.MD) error {
		return status.Error(codes.PermissionDenied, "PERMISSION_DENIED: User does not have MODIFY on Table 'main.default.t1'")
	}}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.ClientID = "sp-app-id" })
	_, err := c.Open(waitCtx(t), testTable, testSchema)
	require.Error(t, err)
	assert.True(t, IsPermanent(err))
	for _, w := range []string{
		"GRANT USE CATALOG ON CATALOG main TO `sp-app-id`",
		"GRANT USE SCHEMA ON SCHEMA main.default TO `sp-app-id`",
		"GRANT SELECT, MODIFY ON TABLE main.default.t1 TO `sp-app-id`",
	} {
		assert.Contains(t, err.Error(), w)
	}
}

func TestOpenWithWrongSecretIsPermanentAndNamesTheSource(t *testing.T) {
	ts := &tokenServer{t: t, expiresIn: 3600}
	oauth := httptest.NewServer(ts)
	defer oauth.Close()
	srv := &fakeFlightServer{}
	c, err := NewClient(Config{
		Endpoint: startFake(t, srv), WorkspaceURL: oauth.URL, ClientID: "cid", ClientSecret: "wrong-secret",
		CredentialSource: "config fields client_id/client_secret", ReadyTimeout: 2 * time.Second,
	})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Open(waitCtx(t), "cat.sch.tbl", testSchema)
	require.Error(t, err)
	assert.True(t, IsPermanent(err))
	assert.Contains(t, err.Error(), `client_id "cid" (from config fields client_id/client_secret)`)
	assert.NotContains(t, err.Error(), "wrong-secret")
	assert.Equal(t, int32(1), ts.calls.Load(), "a refused secret is asked once, not retried")
	assert.Equal(t, 0, srv.connCount())
}
