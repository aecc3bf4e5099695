// How the client reaches the service and the workspace: which URLs are
// accepted, TLS, and proxies.
//
// The rules, enforced here for both paths (gRPC and the workspace's HTTP):
//   - plaintext http:// reaches a loopback host only (IsLoopback), so a
//     credential never crosses a network in the clear;
//   - a plaintext request never goes through a proxy, explicit or from the
//     environment: it goes straight to the loopback host;
//   - a proxy is an HTTP CONNECT proxy: it sees the target's host:port and
//     a TLS tunnel, never a request, header or token.

package ingest

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"

	"google.golang.org/grpc"

	"github.com/benthos-zerobus/benthos-zerobus/internal/lintrule"
)

// CheckURL validates the endpoint or workspace URL of the config field named
// field and reports whether TLS is used: always for https, never for http,
// which is accepted only for a loopback host so that a credential never
// crosses a network in the clear.
func CheckURL(field, raw string) (tlsOn bool, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return false, fmt.Errorf("field %s: %w", field, err)
	}
	if u.Host == "" {
		return false, fmt.Errorf("field %s: %q has no host; want https://host[:port]", field, raw)
	}
	switch u.Scheme {
	case "https":
		return true, nil
	case "http":
		if !IsLoopback(u.Hostname()) {
			return false, fmt.Errorf("field %s: plaintext http:// is only allowed for a loopback host (localhost, 127.x.y.z or ::1: the emulator), got %q; use https://", field, u.Hostname())
		}
		return false, nil
	default:
		return false, fmt.Errorf("field %s: scheme must be https (or http for a loopback host), got %q", field, u.Scheme)
	}
}

// loopbackHost is the one loopback predicate, shared with the lint rules.
var loopbackHost = regexp.MustCompile(lintrule.LoopbackHostname)

// IsLoopback reports whether host (a URL's hostname: no port, IPv6 without
// brackets) is loopback: localhost, 127.a.b.c in canonical dotted-quad form
// or ::1. The lint rules match the same pattern (lintrule.LoopbackHostPort),
// so `lint` accepts exactly the plaintext URLs `run` accepts; shorthand
// forms such as 127.1 are refused by both.
func IsLoopback(host string) bool { return loopbackHost.MatchString(host) }

// CheckProxyURL validates an explicit proxy: an http:// URL with a host,
// optionally with user:password for Basic proxy authentication. It is the
// proxy kind both paths speak: net/http and the gRPC dialer below open
// tunnels with HTTP CONNECT over a plain connection to the proxy, and only
// TLS (to an https:// target) travels in the tunnel. https:// (TLS to the
// proxy) and socks5:// proxies are refused: the gRPC dialer speaks neither.
func CheckProxyURL(u *url.URL) error {
	switch u.Scheme {
	case "http":
	case "https", "socks5", "socks5h":
		return fmt.Errorf("proxy %s: %s:// proxies are not supported; use an HTTP CONNECT proxy, http://[user:password@]host:port (the tunnel carries TLS from end to end)", u.Redacted(), u.Scheme)
	default:
		return fmt.Errorf("proxy %s: scheme must be http (an HTTP CONNECT proxy), got %q", u.Redacted(), u.Scheme)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("proxy %s: has no host", u.Redacted())
	}
	return nil
}

// proxyFor is the Proxy function of the workspace transport: every request
// passes it, so it is where the plaintext rule holds for redirects too. A
// plaintext http:// request goes straight to a loopback host, never through
// a proxy, and is refused for any other host (a redirect from https to
// http would otherwise carry the Authorization header in the clear). An
// https:// request goes through explicit, or the environment's proxy
// (HTTPS_PROXY, NO_PROXY; never for a loopback host), by CONNECT.
func proxyFor(explicit *url.URL) func(*http.Request) (*url.URL, error) {
	return func(r *http.Request) (*url.URL, error) {
		switch r.URL.Scheme {
		case "http":
			if !IsLoopback(r.URL.Hostname()) {
				return nil, fmt.Errorf("refusing plaintext http:// request to %s: only a loopback host is reached without TLS", r.URL.Host)
			}
			return nil, nil
		case "https":
			if explicit != nil {
				return explicit, nil
			}
			return http.ProxyFromEnvironment(r)
		default:
			return nil, fmt.Errorf("refusing %s:// request to %s: only https (or http to a loopback host)", r.URL.Scheme, r.URL.Host)
		}
	}
}

// NewHTTPTransport returns the transport of the workspace HTTP calls (OAuth
// tokens, workspace discovery, Unity Catalog through databricks-sdk-go): a
// clone of http.DefaultTransport whose TLS client config is tlsConf (nil
// means the system roots) and whose proxy is proxy, or, when proxy is nil,
// the environment's (HTTPS_PROXY, NO_PROXY; never for a loopback host).
// Plaintext http:// requests reach a loopback host directly and no other
// (see proxyFor).
func NewHTTPTransport(tlsConf *tls.Config, proxy *url.URL) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if tlsConf != nil {
		t.TLSClientConfig = tlsConf.Clone()
	}
	t.Proxy = proxyFor(proxy)
	return t
}

// proxyDialOptions are the gRPC dial options of the proxy rules for target
// (host:port), and the target to dial. A plaintext target (loopback only)
// is never proxied: grpc-go's environment proxy is turned off for it and
// proxy is not used. Over TLS, an explicit proxy is reached by CONNECT (see
// dialViaProxy); without one grpc-go honours HTTPS_PROXY / NO_PROXY itself,
// by CONNECT too, never for a loopback host.
func proxyDialOptions(target string, plaintext bool, proxy *url.URL, userAgent string) ([]grpc.DialOption, string, error) {
	if plaintext {
		host, _, err := net.SplitHostPort(target)
		if err != nil || !IsLoopback(host) {
			return nil, "", fmt.Errorf("plaintext endpoint %s: only a loopback host is reached without TLS; use https://", target)
		}
		return []grpc.DialOption{grpc.WithNoProxy()}, target, nil
	}
	if proxy == nil {
		return nil, target, nil
	}
	if err := CheckProxyURL(proxy); err != nil {
		return nil, "", err
	}
	// A custom dialer turns grpc-go's environment proxy off; passthrough
	// hands the dialer the host name for the proxy to resolve.
	return []grpc.DialOption{grpc.WithContextDialer(dialViaProxy(proxy, userAgent))}, "passthrough:///" + target, nil
}

// endpointTLS is the TLS config of an https endpoint: a copy of custom (nil
// means the system roots) naming serverName unless custom names another,
// and never below TLS 1.2.
func endpointTLS(custom *tls.Config, serverName string) *tls.Config {
	conf := &tls.Config{}
	if custom != nil {
		conf = custom.Clone()
	}
	if conf.MinVersion < tls.VersionTLS12 {
		conf.MinVersion = tls.VersionTLS12
	}
	if conf.ServerName == "" {
		conf.ServerName = serverName
	}
	return conf
}

// dialViaProxy returns a gRPC dialer that reaches addr through an HTTP
// CONNECT tunnel opened on proxy: what grpc-go does by itself for a proxy
// from the environment (the proxy dialer of grpc-go's transport package), done here for an
// explicit one, which grpc-go has no option for. addr is passed to the proxy
// unresolved (the target's scheme is passthrough), as grpc-go does by default.
func dialViaProxy(proxy *url.URL, userAgent string) func(context.Context, string) (net.Conn, error) {
	proxyAddr := proxy.Host
	if proxy.Port() == "" {
		proxyAddr = net.JoinHostPort(proxy.Hostname(), "80")
	}
	return func(ctx context.Context, addr string) (tunnel net.Conn, err error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", proxyAddr)
		if err != nil {
			return nil, fmt.Errorf("dial proxy %s: %w", proxy.Redacted(), err)
		}
		// Cancelling ctx aborts the handshake; the tunnel outlives ctx.
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		defer func() {
			if !stop() && err == nil {
				err = fmt.Errorf("proxy %s: CONNECT %s: %w", proxy.Redacted(), addr, ctx.Err())
			}
			if err != nil {
				tunnel = nil
				conn.Close()
			}
		}()
		req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Host: addr}, Host: addr, Header: http.Header{"User-Agent": {userAgent}}}
		if u := proxy.User; u != nil {
			pw, _ := u.Password()
			req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pw)))
		}
		if err := req.Write(conn); err != nil {
			return nil, fmt.Errorf("proxy %s: send CONNECT %s: %w", proxy.Redacted(), addr, err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, fmt.Errorf("proxy %s: read CONNECT %s answer: %w", proxy.Redacted(), addr, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("proxy %s: CONNECT %s refused: %s", proxy.Redacted(), addr, resp.Status)
		}
		if br.Buffered() > 0 {
			return &bufferedConn{Conn: conn, r: br}, nil
		}
		return conn, nil
	}
}

// bufferedConn is a tunnel whose first bytes were read with the proxy's
// answer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
