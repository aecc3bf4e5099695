package ingest_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
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
		{"http://zerobus.example.com", false, "field endpoint: plaintext http:// is only allowed for a loopback host (localhost, 127.x.y.z or ::1: the emulator)"},
		{"http://127.1:50051", false, "plaintext http://"},
		{"http://127.000.0.1:50051", false, "plaintext http://"},
		{"http://127.0.0.256:50051", false, "plaintext http://"},
		{"http://[0:0:0:0:0:0:0:1]:50051", false, "plaintext http://"},
		{"http://LOCALHOST:8080", false, ""},
		{"http://127.255.0.9:8080", false, ""},
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
		"https://proxy.corp:3128":       "https:// proxies are not supported; use an HTTP CONNECT proxy",
		"socks5://proxy.corp:1080":      "socks5:// proxies are not supported",
		"ftp://proxy.corp:21":           "scheme must be http",
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
	assertNoCredentialSeen(t, proxy)
}

// assertNoCredentialSeen checks that nothing the proxy read holds a
// credential of the client: the OAuth client secret (form or Basic), or a
// bearer token.
func assertNoCredentialSeen(t *testing.T, proxy *testnet.Proxy) {
	t.Helper()
	basic := base64.StdEncoding.EncodeToString([]byte(emulator.DefaultClientID + ":" + emulator.DefaultClientSecret))
	for _, needle := range []string{emulator.DefaultClientSecret, basic, "Bearer", "bearer", "\nAuthorization:", "\nauthorization:", "access_token"} {
		assert.False(t, proxy.Seen(needle), "the proxy read %q in clear", needle)
	}
}

// TestPlaintextLoopbackIsNeverProxied: with a plaintext (loopback) emulator
// and an explicit proxy, neither the OAuth request nor the gRPC stream goes
// through the proxy: a plaintext request through a proxy would hand it the
// client secret and the tokens in clear (issue 19's recording proxy saw
// both).
func TestPlaintextLoopbackIsNeverProxied(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{})
	require.True(t, strings.HasPrefix(srv.GRPCURL(), "http://127.0.0.1:"), srv.GRPCURL())
	proxy := testnet.StartProxy(t)
	c := e2eClient(t, srv, func(cfg *ingest.Config) { cfg.ProxyURL = proxy.URL })
	require.NoError(t, writeRows(t, c))
	n, err := srv.TableRowCount(e2eTable)
	require.NoError(t, err)
	assert.Equal(t, int64(100), n)
	assert.Empty(t, proxy.Connects(), "no tunnel for a plaintext target")
	assert.Zero(t, proxy.Others(), "no plaintext request through the proxy")
	assertNoCredentialSeen(t, proxy)
}

// TestHTTPTransportKeepsPlaintextOnLoopback: the workspace transport
// refuses a plaintext request to any other host (a redirect from the
// workspace included: net/http forwards Authorization on a same-host
// redirect from https to http), sends one to a loopback host directly
// whatever proxy is set, and proxies https.
func TestHTTPTransportKeepsPlaintextOnLoopback(t *testing.T) {
	proxy := testnet.StartProxy(t)
	var hits atomic.Int64
	ws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://workspace.invalid/api/2.1/unity-catalog/tables", http.StatusFound)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(ws.Close)
	client := &http.Client{Transport: ingest.NewHTTPTransport(nil, proxy.URL)}

	req, err := http.NewRequest(http.MethodGet, ws.URL+"/direct", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer dapi-secret-token")
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, int64(1), hits.Load(), "straight to the loopback host")

	req, err = http.NewRequest(http.MethodGet, ws.URL+"/redirect", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer dapi-secret-token")
	_, err = client.Do(req)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "refusing plaintext http:// request to workspace.invalid")

	_, err = client.Get("http://10.1.2.3:8080/api")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "refusing plaintext http:// request to 10.1.2.3:8080")

	assert.Empty(t, proxy.Connects())
	assert.Zero(t, proxy.Others())
	assert.False(t, proxy.Seen("dapi-secret-token"))

	// https goes through the proxy, by CONNECT (the proxy tunnels to
	// 127.0.0.1 at the port named).
	tlsWS := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(tlsWS.Close)
	pool := x509.NewCertPool()
	pool.AddCert(tlsWS.Certificate())
	client = &http.Client{Transport: ingest.NewHTTPTransport(&tls.Config{RootCAs: pool}, proxy.URL)}
	req, err = http.NewRequest(http.MethodGet, tlsWS.URL+"/api", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer dapi-secret-token")
	resp, err = client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 1, proxy.Connects()[strings.TrimPrefix(tlsWS.URL, "https://")])
	assert.False(t, proxy.Seen("dapi-secret-token"), "the tunnel carries TLS only")
}

// TestClientRefusesRemotePlaintextEndpoint: the client itself refuses a
// plaintext endpoint that is not loopback, whatever called it.
func TestClientRefusesRemotePlaintextEndpoint(t *testing.T) {
	for _, ep := range []string{"http://zerobus.example.com:80", "http://127.1:50051", "http://10.1.2.3:50051"} {
		_, err := ingest.NewClient(ingest.Config{Endpoint: ep, Token: ingest.StaticToken("t")})
		require.Error(t, err, ep)
		assert.Contains(t, err.Error(), "only a loopback host is reached without TLS", ep)
	}
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
