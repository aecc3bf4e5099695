package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/testnet"
)

// TLS and proxy tests: the emulator serves HTTPS and gRPC over TLS with a
// certificate of a CA made at test time, and a CONNECT proxy on loopback
// counts the tunnels.
//
// Loopback and proxies: net/http's ProxyFromEnvironment and grpc-go (which
// uses it) never proxy localhost or a loopback IP, whatever HTTPS_PROXY says.
// So the proxied tests name hosts under .invalid (RFC 2606: never resolves),
// which the test proxy tunnels to 127.0.0.1 at the same port: a connection
// that bypassed the proxy could not even resolve its host, so rows landing
// proves every path (OAuth, Unity Catalog, gRPC) went through the proxy.

const (
	tlsZerobusHost   = "123.zerobus.invalid" // first label = emulator.DefaultWorkspaceID
	tlsWorkspaceHost = "workspace.invalid"
)

// startTLSEmulator starts an in-process emulator serving TLS, with the
// events table, and returns it with its CA.
func startTLSEmulator(t *testing.T) (*emulator.Server, testnet.Files) {
	t.Helper()
	ca := testnet.NewCA(t, tlsZerobusHost, tlsWorkspaceHost)
	srv, err := emulator.Start(emulator.Config{
		HTTPAddr:    "127.0.0.1:0",
		GRPCAddr:    "127.0.0.1:0",
		DataDir:     t.TempDir(),
		Tables:      []string{eventsTable + ":" + eventsCols},
		TLSCertFile: ca.CertFile,
		TLSKeyFile:  ca.KeyFile,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	require.True(t, strings.HasPrefix(srv.GRPCURL(), "https://127.0.0.1:"), srv.GRPCURL())
	return srv, ca
}

// tlsBlock is the output's tls block trusting ca, as YAML under zerobus.
func tlsBlock(ca testnet.Files) string {
	return "tls:\n  enabled: true\n  root_cas: |\n    " + strings.ReplaceAll(strings.TrimSpace(string(ca.CAPEM)), "\n", "\n    ") + "\n"
}

// renamed is u with its host replaced by host, keeping the port.
func renamed(t *testing.T, u, host string) string {
	t.Helper()
	p, err := url.Parse(u)
	require.NoError(t, err)
	p.Host = net.JoinHostPort(host, p.Port())
	return p.String()
}

// syncLog is a goroutine-safe log sink.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// writeEvents runs a pipeline with output, sends n events in one batch and
// waits up to wait for it to be acknowledged. It returns the pipeline's
// warn+ logs and the produce error.
func writeEvents(t *testing.T, output string, n int, wait time.Duration) (string, error) {
	t.Helper()
	logs := &syncLog{}
	b := service.NewStreamBuilder()
	b.SetLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	require.NoError(t, b.AddOutputYAML(output))
	produce, ctx, stop := startProducer(t, b)
	var batch service.MessageBatch
	for i := 0; i < n; i++ {
		batch = append(batch, service.NewMessage(fmt.Appendf(nil, `{"id":%d,"msg":"m%d","level":"info"}`, i, i)))
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := produce(pctx, batch)
	_ = stop()
	return logs.String(), err
}

func TestTLSCustomRootCA(t *testing.T) {
	srv, ca := startTLSEmulator(t)
	logs, err := writeEvents(t, outputYAML(srv, eventsTable, tlsBlock(ca)), 200, 30*time.Second)
	require.NoError(t, err, logs)
	assert.Len(t, rowsByID(t, srv, eventsTable), 200, "every row lands through TLS")
	assert.NotContains(t, logs, "skip_cert_verify is true")
}

func TestTLSWithoutCAFailsNamingTheCertificate(t *testing.T) {
	t.Parallel()
	srv, _ := startTLSEmulator(t)
	logs, err := writeEvents(t, outputYAML(srv, eventsTable, ""), 10, 3*time.Second)
	require.Error(t, err, "nothing can be acknowledged without trusting the server")
	assert.Contains(t, logs, "x509: certificate signed by unknown authority", "the log says why")
	n, cerr := srv.TableRowCount(eventsTable)
	require.NoError(t, cerr)
	assert.Zero(t, n)
}

func TestTLSSkipCertVerifyWorksAndWarns(t *testing.T) {
	srv, _ := startTLSEmulator(t)
	logs, err := writeEvents(t, outputYAML(srv, eventsTable, "tls:\n  enabled: true\n  skip_cert_verify: true\n"), 50, 30*time.Second)
	require.NoError(t, err, logs)
	assert.Len(t, rowsByID(t, srv, eventsTable), 50)
	assert.Contains(t, logs, "tls.skip_cert_verify is true: the certificates of "+srv.GRPCURL()+" and "+srv.HTTPURL()+" are NOT verified")
}

// proxiedYAML is the output pointed at srv through the .invalid names,
// trusting ca, with extra.
func proxiedYAML(t *testing.T, srv *emulator.Server, ca testnet.Files, extra string) string {
	y := outputYAML(srv, eventsTable, tlsBlock(ca)+extra)
	y = strings.Replace(y, "endpoint: "+srv.GRPCURL(), "endpoint: "+renamed(t, srv.GRPCURL(), tlsZerobusHost), 1)
	return strings.Replace(y, "workspace_url: "+srv.HTTPURL(), "workspace_url: "+renamed(t, srv.HTTPURL(), tlsWorkspaceHost), 1)
}

// assertTunnelled checks the proxy opened tunnels to both endpoints and
// nothing else.
func assertTunnelled(t *testing.T, srv *emulator.Server, proxy *testnet.Proxy) {
	t.Helper()
	got := proxy.Connects()
	grpcTarget := strings.TrimPrefix(renamed(t, srv.GRPCURL(), tlsZerobusHost), "https://")
	httpTarget := strings.TrimPrefix(renamed(t, srv.HTTPURL(), tlsWorkspaceHost), "https://")
	assert.GreaterOrEqual(t, got[grpcTarget], 1, "gRPC went through the proxy: %v", got)
	// One tunnel for the OAuth token client, one for the Unity Catalog
	// client: two transports, each keeping its connection.
	assert.GreaterOrEqual(t, got[httpTarget], 2, "OAuth and Unity Catalog went through the proxy: %v", got)
	assert.Len(t, got, 2, "no other target: %v", got)
	assert.Zero(t, proxy.Others(), "only CONNECT")
}

func TestProxyURLCarriesBothPaths(t *testing.T) {
	srv, ca := startTLSEmulator(t)
	proxy := testnet.StartProxy(t)
	logs, err := writeEvents(t, proxiedYAML(t, srv, ca, "proxy_url: "+proxy.URL.String()+"\n"), 200, 30*time.Second)
	require.NoError(t, err, logs)
	assert.Len(t, rowsByID(t, srv, eventsTable), 200)
	assertTunnelled(t, srv, proxy)
	assertNoCredentialSeen(t, proxy)
}

// assertNoCredentialSeen checks that nothing the proxy read (CONNECT
// requests and every tunnel's bytes) holds a credential of the output: the
// OAuth client secret (form or Basic) or a bearer token, on the OAuth,
// Unity Catalog and gRPC paths alike.
func assertNoCredentialSeen(t *testing.T, proxy *testnet.Proxy) {
	t.Helper()
	basic := base64.StdEncoding.EncodeToString([]byte(emulator.DefaultClientID + ":" + emulator.DefaultClientSecret))
	for _, needle := range []string{emulator.DefaultClientSecret, basic, "Bearer", "bearer", "\nAuthorization:", "\nauthorization:", "access_token"} {
		assert.False(t, proxy.Seen(needle), "the proxy read %q in clear", needle)
	}
}

// TestBinaryHonoursHTTPSProxy runs the binary (a fresh process, since
// net/http reads the proxy environment once per process) with HTTPS_PROXY
// set and no proxy_url.
func TestBinaryHonoursHTTPSProxy(t *testing.T) {
	t.Parallel()
	srv, ca := startTLSEmulator(t)
	proxy := testnet.StartProxy(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, ca.CAPEM, 0o600))
	run := func(t *testing.T, output string, env ...string) string {
		cfg := filepath.Join(t.TempDir(), "config.yaml")
		y := "input:\n  generate:\n    count: 300\n    interval: \"\"\n    batch_size: 100\n    mapping: |\n      root.id = counter()\n      root.msg = \"via proxy\"\n" +
			"output:\n" + indentBy(output, 2) + "\n" + "http:\n  address: " + freeAddr(t) + "\n"
		require.NoError(t, os.WriteFile(cfg, []byte(y), 0o600))
		p := start(t, append(env, "NO_PROXY=", "no_proxy=", "HTTP_PROXY=", "http_proxy=", "https_proxy="), "run", cfg)
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case err := <-done:
			require.NoError(t, err, p.out.String())
		case <-time.After(90 * time.Second):
			t.Fatalf("the pipeline did not finish:\n%s", p.out.String())
		}
		return p.out.String()
	}
	rootCAsFile := "tls:\n  enabled: true\n  root_cas_file: " + caFile + "\n"
	out := run(t, strings.Replace(proxiedYAML(t, srv, ca, ""), tlsBlock(ca), rootCAsFile, 1), "HTTPS_PROXY="+proxy.URL.String())
	assert.Len(t, rowsByID(t, srv, eventsTable), 300, out)
	assert.Contains(t, out, "proxy_url=(environment)")
	assertTunnelled(t, srv, proxy)

	// Loopback endpoints never use the environment's proxy.
	before := proxy.Connects()
	out = run(t, outputYAML(srv, eventsTable, rootCAsFile), "HTTPS_PROXY="+proxy.URL.String())
	assert.Len(t, rowsByID(t, srv, eventsTable), 300, "the same ids again: %s", out)
	n, err := srv.TableRowCount(eventsTable)
	require.NoError(t, err)
	assert.Equal(t, int64(600), n)
	assert.Equal(t, before, proxy.Connects(), "no tunnel for 127.0.0.1")

	// A plaintext (loopback) emulator with every proxy variable set: no
	// plaintext request and no tunnel reaches the proxy (a proxy carrying
	// plaintext would read the client secret and the tokens).
	plain := startEmulator(t, emulator.Faults{}, eventsTable+":"+eventsCols)
	out = run(t, outputYAML(plain, eventsTable, ""), "HTTPS_PROXY="+proxy.URL.String(), "HTTP_PROXY="+proxy.URL.String(), "ALL_PROXY="+proxy.URL.String())
	assert.Len(t, rowsByID(t, plain, eventsTable), 300, out)
	assert.Equal(t, before, proxy.Connects(), "no tunnel for a plaintext target")
	assert.Zero(t, proxy.Others(), "no plaintext request through the proxy")
	assertNoCredentialSeen(t, proxy)
}
