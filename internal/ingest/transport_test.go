package ingest_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/testnet"
)

func TestCheckURL(t *testing.T) {
	tests := []struct {
		raw     string
		tlsOn   bool
		wantErr string
	}{
		{"https://123.zerobus.us-west-2.cloud.databricks.com", true, ""},
		{"https://127.0.0.1:8443", true, ""},
		{"http://127.0.0.1:50051", false, ""},
		{"http://localhost:8080", false, ""},
		{"http://[::1]:8080", false, ""},
		{"http://zerobus.example.com", false, "field endpoint: plaintext http:// is only allowed for a loopback host"},
		{"http://127.0.0.1.example.com", false, "plaintext http://"},
		{"grpc://127.0.0.1:1", false, "field endpoint: scheme must be https"},
		{"127.0.0.1", false, "has no host"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			tlsOn, err := ingest.CheckURL("endpoint", tt.raw)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.tlsOn, tlsOn)
		})
	}
}

func TestCheckProxyURL(t *testing.T) {
	for raw, wantErr := range map[string]string{
		"http://proxy.corp:3128":        "",
		"http://user:pw@127.0.0.1:3128": "",
		"https://proxy.corp:3128":       "scheme must be http",
		"socks5://proxy.corp:1080":      "scheme must be http",
		"http://:3128":                  "has no host",
	} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		err = ingest.CheckProxyURL(u)
		if wantErr == "" {
			assert.NoError(t, err, raw)
			continue
		}
		require.Error(t, err, raw)
		assert.Contains(t, err.Error(), wantErr, raw)
		assert.NotContains(t, err.Error(), "pw@", "the password is redacted")
	}
}

// startTLSEmulator starts the emulator serving HTTPS and gRPC over TLS with
// a certificate of a CA made for the test.
func startTLSEmulator(t *testing.T) (*emulator.Server, testnet.Files) {
	t.Helper()
	ca := testnet.NewCA(t)
	srv, err := emulator.Start(emulator.Config{
		HTTPAddr:    "127.0.0.1:0",
		GRPCAddr:    "127.0.0.1:0",
		Tables:      []string{e2eTable + ":id BIGINT NOT NULL, name STRING"},
		TLSCertFile: ca.CertFile,
		TLSKeyFile:  ca.KeyFile,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	require.True(t, strings.HasPrefix(srv.GRPCURL(), "https://"), srv.GRPCURL())
	require.True(t, strings.HasPrefix(srv.HTTPURL(), "https://"), srv.HTTPURL())
	return srv, ca
}

// writeRows opens a stream, writes 100 rows and waits until they are
// durable.
func writeRows(t *testing.T, c *ingest.Client) error {
	t.Helper()
	s, err := c.Open(ctxTimeout(t, 10*time.Second), e2eTable, e2eSchema)
	if err != nil {
		return err
	}
	defer s.Close()
	b := e2eBatch(0, 100)
	defer b.Release()
	if _, err := s.Submit(context.Background(), b); err != nil {
		return err
	}
	return s.Drain(ctxTimeout(t, 10*time.Second))
}

func TestClientTLSCustomRoots(t *testing.T) {
	srv, ca := startTLSEmulator(t)

	// The CA of the test is not among the system roots: refused, naming the
	// certificate problem.
	c := e2eClient(t, srv, func(cfg *ingest.Config) { cfg.RecoveryAttempts = 1 })
	err := writeRows(t, c)
	require.Error(t, err)
	t.Logf("without the CA: %v", err)
	assert.Contains(t, err.Error(), "certificate signed by unknown authority")

	// The token request trusting the CA but gRPC on the system roots: the
	// stream is refused in its own TLS handshake.
	c = e2eClient(t, srv, func(cfg *ingest.Config) {
		cfg.HTTPClient = &http.Client{Transport: ingest.NewHTTPTransport(ca.ClientTLS(), nil)}
		cfg.RecoveryAttempts = 1
	})
	err = writeRows(t, c)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate signed by unknown authority")
	assert.Contains(t, err.Error(), "transport: authentication handshake failed", "the gRPC handshake, not the token request")

	// Trusting the CA, both the token request and the gRPC stream verify.
	c = e2eClient(t, srv, func(cfg *ingest.Config) { cfg.TLS = ca.ClientTLS() })
	require.NoError(t, writeRows(t, c))
	n, err := srv.TableRowCount(e2eTable)
	require.NoError(t, err)
	assert.Equal(t, int64(100), n)

	// A server name the certificate does not hold fails verification.
	c = e2eClient(t, srv, func(cfg *ingest.Config) {
		cfg.TLS = ca.ClientTLS()
		cfg.TLS.ServerName = "elsewhere.example.com"
		cfg.RecoveryAttempts = 1
	})
	err = writeRows(t, c)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "elsewhere.example.com")

	// Skipping verification connects without the CA.
	c = e2eClient(t, srv, func(cfg *ingest.Config) { cfg.TLS = &tls.Config{InsecureSkipVerify: true} })
	require.NoError(t, writeRows(t, c))
}

func TestClientThroughExplicitProxy(t *testing.T) {
	srv, ca := startTLSEmulator(t)
	proxy := testnet.StartProxy(t)
	pu := *proxy.URL
	pu.User = url.UserPassword("zb", "proxy-pass")
	c := e2eClient(t, srv, func(cfg *ingest.Config) {
		cfg.TLS = ca.ClientTLS()
		cfg.ProxyURL = &pu
	})
	require.NoError(t, writeRows(t, c))
	n, err := srv.TableRowCount(e2eTable)
	require.NoError(t, err)
	assert.Equal(t, int64(100), n)

	grpcHost := strings.TrimPrefix(srv.GRPCURL(), "https://")
	httpHost := strings.TrimPrefix(srv.HTTPURL(), "https://")
	got := proxy.Connects()
	assert.GreaterOrEqual(t, got[grpcHost], 1, "gRPC tunnelled: %v", got)
	assert.GreaterOrEqual(t, got[httpHost], 1, "token request tunnelled: %v", got)
	assert.Zero(t, proxy.Others())
	for _, a := range proxy.Auth() {
		assert.Equal(t, "Basic emI6cHJveHktcGFzcw==", a, "Basic zb:proxy-pass on every tunnel")
	}
	assert.Len(t, proxy.Auth(), got[grpcHost]+got[httpHost])
}

func TestClientProxyRefusal(t *testing.T) {
	srv, ca := startTLSEmulator(t)
	proxy := testnet.StartProxy(t)
	proxy.Close() // nothing listens there any more
	c := e2eClient(t, srv, func(cfg *ingest.Config) {
		cfg.TLS = ca.ClientTLS()
		cfg.ProxyURL = proxy.URL
		cfg.RecoveryAttempts = 1
	})
	err := writeRows(t, c)
	require.Error(t, err)
	assert.Contains(t, err.Error(), proxy.URL.Host, "the error names the proxy")
}
