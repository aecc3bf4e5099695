package testnet

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
)

// Proxy is an HTTP CONNECT proxy on loopback. Whatever host a CONNECT names,
// it tunnels to that port on 127.0.0.1, so a test can name a host that is
// not loopback-looking (and that no DNS knows) and still stay on the
// machine. Any other method is answered 405 and counted. It records what
// it could read (every byte a client sent it, tunnels included, up to
// recordCap) so that a test can prove a secret never reached it in clear.
type Proxy struct {
	// URL is the proxy's address, http://127.0.0.1:port.
	URL *url.URL

	srv *httptest.Server

	mu       sync.Mutex
	connects map[string]int // by CONNECT target (host:port)
	auth     []string       // Proxy-Authorization headers seen
	others   int
	tunnels  map[net.Conn]struct{}
	seen     bytes.Buffer // what clients sent, as the proxy saw it
}

// recordCap bounds what a Proxy records.
const recordCap = 16 << 20

// record keeps b as seen by the proxy (up to recordCap).
func (p *Proxy) record(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if room := recordCap - p.seen.Len(); room > 0 {
		p.seen.Write(b[:min(len(b), room)])
	}
}

// recorder is a client's side of a tunnel: what the proxy reads from it is
// recorded.
type recorder struct {
	net.Conn
	p *Proxy
}

func (r recorder) Read(b []byte) (int, error) {
	n, err := r.Conn.Read(b)
	r.p.record(b[:n])
	return n, err
}

// StartProxy starts a proxy, closed at the end of the test.
func StartProxy(tb testing.TB) *Proxy {
	tb.Helper()
	p := &Proxy{connects: map[string]int{}, tunnels: map[net.Conn]struct{}{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	u, err := url.Parse(p.srv.URL)
	if err != nil {
		tb.Fatalf("testnet: proxy URL: %v", err)
	}
	p.URL = u
	tb.Cleanup(p.Close)
	return p
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	var head bytes.Buffer
	_ = r.Header.Write(&head)
	p.record([]byte(r.Method + " " + r.RequestURI + "\r\n" + head.String()))
	if r.Method != http.MethodConnect {
		body, _ := io.ReadAll(io.LimitReader(r.Body, recordCap))
		p.record(body)
		p.mu.Lock()
		p.others++
		p.mu.Unlock()
		http.Error(w, "only CONNECT", http.StatusMethodNotAllowed)
		return
	}
	_, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	upstream, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	client, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	p.mu.Lock()
	p.connects[r.Host]++
	if a := r.Header.Get("Proxy-Authorization"); a != "" {
		p.auth = append(p.auth, a)
	}
	p.tunnels[client], p.tunnels[upstream] = struct{}{}, struct{}{}
	p.mu.Unlock()
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		client.Close()
		upstream.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	go pipe(upstream, recorder{Conn: client, p: p})
	go pipe(client, upstream)
	wg.Wait()
	p.mu.Lock()
	delete(p.tunnels, client)
	delete(p.tunnels, upstream)
	p.mu.Unlock()
}

// Seen reports whether needle occurs in what clients sent the proxy:
// request lines, headers and bodies, and the bytes of every tunnel.
func (p *Proxy) Seen(needle string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Contains(p.seen.Bytes(), []byte(needle))
}

// Connects returns how many tunnels were opened to each CONNECT target.
func (p *Proxy) Connects() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.connects))
	for k, v := range p.connects {
		out[k] = v
	}
	return out
}

// Auth returns the Proxy-Authorization headers of the tunnels opened.
func (p *Proxy) Auth() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.auth...)
}

// Others returns how many requests were not CONNECT.
func (p *Proxy) Others() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.others
}

// Close stops the proxy and cuts the open tunnels.
func (p *Proxy) Close() {
	p.mu.Lock()
	for c := range p.tunnels {
		c.Close()
	}
	p.mu.Unlock()
	p.srv.Close()
}
