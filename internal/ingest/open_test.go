package ingest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// silentEndpoint accepts TCP connections and never speaks HTTP/2, so a gRPC
// client stays "connecting" until its own connect deadline (20 s).
func silentEndpoint(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	return "http://" + lis.Addr().String()
}

// Opening a connection must honour ctx (the caller's on open, the stream's
// on reconnect, which Close cancels) from the start of the call, not only
// while waiting for the ready signal.
func TestOpenHonoursContextWhileConnecting(t *testing.T) {
	c := testClient(t, silentEndpoint(t), func(cfg *Config) { cfg.RecoveryAttempts = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.OpenArrowStream(ctx, testTable, testSchema)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second, "open returned long after its ctx ended")
}

func TestArrowStreamReadyTimeout(t *testing.T) {
	srv := &fakeFlightServer{noReady: func(int) bool { return true }}
	c := testClient(t, startFake(t, srv), func(cfg *Config) {
		cfg.ReadyTimeout = 150 * time.Millisecond
		cfg.RecoveryAttempts = 2
	})
	start := time.Now()
	_, err := c.Open(waitCtx(t), testTable, testSchema)
	elapsed := time.Since(start)
	require.Error(t, err)
	class, ok := ClassOf(err)
	require.True(t, ok)
	assert.Equal(t, Transient, class)
	assert.Contains(t, err.Error(), "no ready signal")
	assert.Equal(t, 2, srv.connCount(), "retried within the budget")
	assert.Less(t, elapsed, 2*time.Second)
	assert.GreaterOrEqual(t, elapsed, 300*time.Millisecond)
}

func TestArrowStreamSetupErrors(t *testing.T) {
	schemaErr, err := status.New(codes.InvalidArgument, "schema mismatch").WithDetails(&errdetails.ErrorInfo{
		Reason: SchemaValidationReason, Domain: "zerobus.databricks.com",
		Metadata: map[string]string{"causes": "MISSING_REQUIRED_COLUMN", "error_code": "8001"},
	})
	require.NoError(t, err)
	tests := []struct {
		name      string
		err       error
		class     Class
		attempts  int
		causes    []string
		retryWait time.Duration
	}{
		{"not found", status.Error(codes.NotFound, "no such table"), FatalConfig, 1, nil, 0},
		{"schema mismatch", schemaErr.Err(), FatalConfig, 1, []string{"MISSING_REQUIRED_COLUMN"}, 0},
		{"concurrency reject", status.Error(codes.ResourceExhausted, "too many streams"), ConcurrencyReject, 1, nil, ResourceExhaustedBackoff},
		{"pipeline blocked", status.Error(codes.Unavailable, "blocked. Error Code: 6006"), ConcurrencyReject, 1, nil, PipelineBlockedBackoff},
		{"transient retried", status.Error(codes.Unavailable, "flaky"), Transient, 4, nil, 0},
		{"unauthenticated retried once", status.Error(codes.Unauthenticated, "bad token"), FatalConfig, 2, nil, 0},
		{"permission denied retried once", status.Error(codes.PermissionDenied, "no grant. Error Code: 4024"), FatalConfig, 2, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &fakeFlightServer{setup: func(int, metadata.MD) error { return tt.err }}
			c := testClient(t, startFake(t, srv), nil)
			_, err := c.Open(waitCtx(t), testTable, testSchema)
			var ze *Error
			require.ErrorAs(t, err, &ze)
			assert.Equal(t, tt.class, ze.Class, ze.Error())
			assert.Equal(t, tt.causes, ze.Causes)
			assert.Equal(t, tt.retryWait, ze.RetryAfter)
			assert.Equal(t, tt.attempts, srv.connCount())
		})
	}
}

func TestArrowStreamInvalidatesTokenOnUnauthenticated(t *testing.T) {
	srv := &fakeFlightServer{setup: func(_ int, md metadata.MD) error {
		if md.Get("authorization")[0] != "Bearer tok-2" {
			return status.Error(codes.Unauthenticated, "expired token")
		}
		return nil
	}}
	tok := &countingToken{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.Token = tok })
	s := openStream(t, c)
	assert.Equal(t, 1, tok.invalidated)
	assert.Equal(t, 2, srv.connCount())
	submitAll(t, s, makeBatch(0, 1, 1))
	require.NoError(t, s.WaitDurable(waitCtx(t), 1))
}

func TestDialTarget(t *testing.T) {
	tests := []struct {
		endpoint, target, proto string
		wantErr                 bool
	}{
		{"https://123.zerobus.us-west-2.cloud.databricks.com", "123.zerobus.us-west-2.cloud.databricks.com:443", "tls", false},
		{"https://host:8443", "host:8443", "tls", false},
		{"http://127.0.0.1:50051", "127.0.0.1:50051", "insecure", false},
		{"123.zerobus.x.cloud.databricks.com:443", "123.zerobus.x.cloud.databricks.com:443", "tls", false},
		{"ftp://x", "", "", true},
		{"", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.endpoint, func(t *testing.T) {
			target, creds, err := dialTarget(tt.endpoint, nil)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.target, target)
			assert.Equal(t, tt.proto, creds.Info().SecurityProtocol)
		})
	}
}

func TestNewClientRequiresCredentials(t *testing.T) {
	_, err := NewClient(Config{Endpoint: "http://127.0.0.1:1"})
	assert.Error(t, err)
	c, err := NewClient(Config{Endpoint: "https://42.zerobus.r.cloud.databricks.com", WorkspaceURL: "https://w", ClientID: "a", ClientSecret: "b"})
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, "42", c.cfg.WorkspaceID)
	ts1, err := c.TokenSource("a.b.c")
	require.NoError(t, err)
	ts2, _ := c.TokenSource("a.b.c")
	ts3, _ := c.TokenSource("a.b.d")
	assert.Same(t, ts1, ts2)
	assert.NotSame(t, ts1, ts3, "tokens are table-scoped")
	_, err = c.Open(context.Background(), "a.b", testSchema)
	class, _ := ClassOf(err)
	assert.Equal(t, FatalConfig, class)
}

func TestArrowStreamFirstResultMustBeReadySignal(t *testing.T) {
	srv := &fakeFlightServer{noReady: func(int) bool { return true }}
	c := testClient(t, startFake(t, srv), nil)
	opened := make(chan error, 1)
	go func() {
		_, err := c.Open(waitCtx(t), testTable, testSchema)
		opened <- err
	}()
	require.Eventually(t, func() bool {
		fc := srv.conn(0)
		if fc == nil {
			return false
		}
		raw, _, _ := fc.snapshot()
		return len(raw) == 1 // the schema frame arrived
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, srv.conn(0).sendAck(3, 5, nil))
	err := <-opened
	class, ok := ClassOf(err)
	require.True(t, ok)
	assert.Equal(t, Poison, class)
	assert.Contains(t, err.Error(), "not the ready signal")
}
