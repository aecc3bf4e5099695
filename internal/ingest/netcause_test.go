package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// silentAddr is a loopback black hole: it accepts connections and never
// answers, as a firewall that drops packets after the handshake, or a hung
// proxy, does.
func silentAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range held {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// openErr opens one stream (a single connection attempt, given connect to
// connect and shake hands) with endpoint and workspace, within bound, and
// returns its error.
func openErr(t *testing.T, endpoint, workspace string, connect, bound time.Duration) error {
	t.Helper()
	c, err := ingest.NewClient(ingest.Config{
		Endpoint: endpoint, WorkspaceURL: workspace, WorkspaceID: "123",
		ClientID: emulator.DefaultClientID, ClientSecret: emulator.DefaultClientSecret,
		RecoveryAttempts: 1,
		// A connection attempt that gets no answer gives up after connect
		// (gRPC's default is 20 s), as the pool's open then sees it.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: connect})},
	})
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	s, err := c.OpenArrowStream(ctx, "main.default.t", ingestfake.TestSchema)
	if err == nil {
		_ = s.Close()
	}
	require.Error(t, err)
	return err
}

// Each kind of network failure, met on real sockets through the client's
// own open, is named with the host or address and the field to check:
// the gRPC endpoint's (whose dial errors reach us flattened in a status
// message) and the workspace's token endpoint's (net/http errors).
func TestNetCauseNamesEachKindOnRealSockets(t *testing.T) {
	srv, err := emulator.Start(emulator.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(),
		Tables: []string{"main.default.t:id BIGINT"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	hostOf := func(u string) string { return strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://") }
	refused := closedAddr(t)
	// A TLS server (speaking HTTP/2, as gRPC asks) whose certificate no
	// root of this machine signs.
	untrusted := httptest.NewUnstartedServer(http.NotFoundHandler())
	untrusted.EnableHTTP2 = true
	untrusted.StartTLS()
	t.Cleanup(untrusted.Close)

	for _, tc := range []struct {
		name, endpoint, workspace string
		field                     string
		kind                      ingest.NetKind
		host                      string // the host or address named
		advice                    string
	}{
		{"endpoint does not resolve", "https://123.zerobus.nope.invalid", srv.HTTPURL(),
			ingest.FieldEndpoint, ingest.NetUnresolved, "123.zerobus.nope.invalid", "does not resolve from this machine; a typo, or DNS/proxy settings"},
		{"endpoint refuses", "http://" + refused, srv.HTTPURL(),
			ingest.FieldEndpoint, ingest.NetRefused, refused, "nothing accepts connections at " + refused},
		{"endpoint is plaintext, spoken TLS to", "https://" + hostOf(srv.GRPCURL()), srv.HTTPURL(),
			ingest.FieldEndpoint, ingest.NetTLS, hostOf(srv.GRPCURL()), "does not speak TLS"},
		{"endpoint's certificate is not trusted", "https://" + hostOf(untrusted.URL), srv.HTTPURL(),
			ingest.FieldEndpoint, ingest.NetTLS, hostOf(untrusted.URL), "authority this machine does not trust"},
		{"endpoint is a black hole", "http://" + silentAddr(t), srv.HTTPURL(),
			ingest.FieldEndpoint, ingest.NetTimeout, "", "does not answer"},
		{"workspace does not resolve", srv.GRPCURL(), "https://ws.nope.invalid",
			ingest.FieldWorkspace, ingest.NetUnresolved, "ws.nope.invalid", "check `workspace_url`: host ws.nope.invalid does not resolve"},
		{"workspace refuses", srv.GRPCURL(), "http://" + refused,
			ingest.FieldWorkspace, ingest.NetRefused, refused, "check `workspace_url`"},
		{"workspace is plaintext, spoken TLS to", srv.GRPCURL(), "https://" + hostOf(srv.HTTPURL()),
			ingest.FieldWorkspace, ingest.NetTLS, hostOf(srv.HTTPURL()), "does not speak TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The black hole is given a second to connect; the others
			// answer, but a TLS handshake under the race detector on a
			// loaded 2-core machine has taken over a second.
			connect := 8 * time.Second
			if tc.kind == ingest.NetTimeout {
				connect = time.Second
			}
			err := openErr(t, tc.endpoint, tc.workspace, connect, 10*time.Second)
			nc := ingest.NetCauseOf("", "", err)
			require.NotNil(t, nc, "no network cause found in %v", err)
			assert.Equal(t, tc.field, nc.Field, "%v", err)
			assert.Equal(t, tc.kind, nc.Kind, "%v", err)
			if tc.host != "" {
				assert.Equal(t, tc.host, nc.Host, "%v", err)
				assert.Contains(t, err.Error(), tc.host, "the error itself names the host")
			}
			assert.Contains(t, nc.Advice(), tc.advice)
			assert.Contains(t, nc.Advice(), "`"+tc.field+"`")
			assert.False(t, ingest.IsPermanent(err), "a network failure heals by itself: transient")
			t.Logf("%s: %s; what to do: %s", tc.name, nc.Summary(), nc.Advice())
		})
	}
}

// The typed errors are found through any chain; a gRPC status message is
// read when nothing typed is left.
func TestNetCauseFromTypedErrorsAndStatusText(t *testing.T) {
	dns := fmt.Errorf("describe: %w", &net.DNSError{Err: "no such host", Name: "adb-1.cloud.example", IsNotFound: true})
	nc := ingest.NetCauseOf("", "", dns)
	require.NotNil(t, nc)
	assert.Equal(t, ingest.NetUnresolved, nc.Kind)
	assert.Equal(t, "adb-1.cloud.example", nc.Host)

	st := status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.1.2.3:443: connect: connection refused"`)
	nc = ingest.NetCauseOf(ingest.FieldEndpoint, "zb.example:443", st)
	require.NotNil(t, nc)
	assert.Equal(t, ingest.NetRefused, nc.Kind)
	assert.Equal(t, "10.1.2.3:443", nc.Host, "the address the text names")

	st = status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate has expired or is not yet valid"`)
	nc = ingest.NetCauseOf(ingest.FieldEndpoint, "zb.example:443", st)
	require.NotNil(t, nc)
	assert.Equal(t, ingest.NetTLS, nc.Kind)
	assert.Contains(t, nc.Summary(), "certificate has expired")

	assert.Nil(t, ingest.NetCauseOf("", "", errors.New("PERMISSION_DENIED: no MODIFY")), "not a network failure")
	assert.Nil(t, ingest.NetCauseOf("", "", nil))
	wrapped := fmt.Errorf("open: %w", nc)
	assert.Same(t, nc, ingest.NetCauseOf("", "", wrapped), "a cause already named is kept")
}
