// How the client reaches the service and the workspace: which URLs are
// accepted, TLS, and proxies.

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
	"strings"
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
			return false, fmt.Errorf("field %s: plaintext http:// is only allowed for a loopback host (the emulator), got %q; use https://", field, u.Hostname())
		}
		return false, nil
	default:
		return false, fmt.Errorf("field %s: scheme must be https (or http for a loopback host), got %q", field, u.Scheme)
	}
}

// IsLoopback reports whether host is localhost or a loopback IP address.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckProxyURL validates an explicit proxy: an http:// URL with a host,
// optionally with user:password for Basic proxy authentication. It is the
// proxy kind both paths speak: net/http and the gRPC dialer below open
// tunnels with HTTP CONNECT over a plain connection to the proxy.
func CheckProxyURL(u *url.URL) error {
	if u.Scheme != "http" {
		return fmt.Errorf("proxy %s: scheme must be http (an HTTP CONNECT proxy), got %q", u.Redacted(), u.Scheme)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("proxy %s: has no host", u.Redacted())
	}
	return nil
}

// NewHTTPTransport returns the transport of the workspace HTTP calls (OAuth
// tokens, workspace discovery, Unity Catalog through databricks-sdk-go): a
// clone of http.DefaultTransport whose TLS client config is tlsConf (nil
// means the system roots) and whose proxy is proxy, or, when proxy is nil,
// the environment's (HTTPS_PROXY, HTTP_PROXY, NO_PROXY; never for a loopback
// host).
func NewHTTPTransport(tlsConf *tls.Config, proxy *url.URL) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if tlsConf != nil {
		t.TLSClientConfig = tlsConf.Clone()
	}
	t.Proxy = http.ProxyFromEnvironment
	if proxy != nil {
		t.Proxy = http.ProxyURL(proxy)
	}
	return t
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
