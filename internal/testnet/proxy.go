package testnet

import (
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
// machine. Any other method is answered 405 and counted.
type Proxy struct {
	// URL is the proxy's address, http://127.0.0.1:port.
	URL *url.URL

	srv *httptest.Server

	mu       sync.Mutex
	connects map[string]int // by CONNECT target (host:port)
	auth     []string       // Proxy-Authorization headers seen
	others   int
	tunnels  map[net.Conn]struct{}
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
	if r.Method != http.MethodConnect {
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
	go pipe(upstream, client)
	go pipe(client, upstream)
	wg.Wait()
	p.mu.Lock()
	delete(p.tunnels, client)
	delete(p.tunnels, upstream)
	p.mu.Unlock()
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
