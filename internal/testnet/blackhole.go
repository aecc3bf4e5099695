package testnet

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BlackHole is a TCP forwarder on loopback to one upstream address that can
// make its connections go silent the way a NAT or a load balancer that
// dropped its state, or a crashed host, does: Silence stops every connection
// open at that moment in both directions, with no FIN and no RST. The
// sockets stay open, nothing more is read from or written to them, and
// bytes already read are dropped; so each peer sees a connection that is up
// and says nothing. Connections accepted afterwards forward normally, until
// the next Silence.
type BlackHole struct {
	ln       net.Listener
	upstream string
	done     chan struct{} // closed by Close: parked forwarders give up
	wg       sync.WaitGroup

	mu       sync.Mutex
	links    []*link // every connection accepted, silenced or not
	accepted int
	closed   bool
	down     bool // SetDown: connections are cut and new ones closed at once
}

// link is one forwarded connection: the accepted socket and its upstream.
type link struct {
	client, upstream net.Conn
	silenced         atomic.Bool
	ended            atomic.Bool // one side closed: an ordinary end
	// last is when a byte last crossed, either way (unix nanos).
	last atomic.Int64
}

// StartBlackHole listens on 127.0.0.1 (a free port) and forwards every
// connection to upstream (host:port, loopback); it is closed at the end of
// the test.
func StartBlackHole(tb testing.TB, upstream string) *BlackHole {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testnet: black hole listen: %v", err)
	}
	b := &BlackHole{ln: ln, upstream: upstream, done: make(chan struct{})}
	b.wg.Add(1)
	go b.accept()
	tb.Cleanup(b.Close)
	return b
}

// Addr is the address clients dial, 127.0.0.1:port.
func (b *BlackHole) Addr() string { return b.ln.Addr().String() }

// Accepted returns how many connections were accepted so far.
func (b *BlackHole) Accepted() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.accepted
}

// Silence black-holes every connection open now and returns how many it
// silenced (those already silenced included).
func (b *BlackHole) Silence() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.silenceLocked()
}

// silenceLocked silences every link and counts the open ones. The caller
// holds mu.
func (b *BlackHole) silenceLocked() int {
	n := 0
	for _, l := range b.links {
		l.silenced.Store(true)
		if !l.ended.Load() {
			n++
		}
	}
	return n
}

// SilenceWhenQuiet waits until no byte has crossed any open connection, in
// either direction, for quiet, then silences them all (see Silence). A test
// that counts duplicates strikes this way: a black hole that swallows the
// acknowledgement of data the server already stored makes the client resend
// that data (at-least-once delivery), which is a duplicate the test did not
// set out to measure. It polls every few milliseconds until ctx ends.
func (b *BlackHole) SilenceWhenQuiet(ctx context.Context, quiet time.Duration) (int, error) {
	tick := time.NewTicker(min(quiet/10+time.Millisecond, 20*time.Millisecond))
	defer tick.Stop()
	for {
		b.mu.Lock()
		idle := true
		now := time.Now().UnixNano()
		for _, l := range b.links {
			if !l.silenced.Load() && !l.ended.Load() && now-l.last.Load() < int64(quiet) {
				idle = false
				break
			}
		}
		if idle {
			n := b.silenceLocked()
			b.mu.Unlock()
			return n, nil
		}
		b.mu.Unlock()
		select {
		case <-tick.C:
		case <-ctx.Done():
			return 0, fmt.Errorf("testnet: no quiet %s on the black hole's connections: %w", quiet, ctx.Err())
		}
	}
}

// SetDown takes the upstream down (true) or brings it back (false), the way
// a host that is down but whose network answers looks: while down, every
// connection open is closed and every new one is closed as soon as it is
// accepted, so a client sees its requests fail at once (not hang).
func (b *BlackHole) SetDown(down bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.down = down
	if !down {
		return
	}
	for _, l := range b.links {
		_ = l.client.Close()
		_ = l.upstream.Close()
	}
}

// Close stops listening and closes every connection, silenced ones included.
func (b *BlackHole) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	close(b.done)
	_ = b.ln.Close()
	for _, l := range b.links {
		_ = l.client.Close()
		_ = l.upstream.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

func (b *BlackHole) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return // closed
		}
		b.mu.Lock()
		down := b.down
		b.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", b.upstream, 10*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{client: c, upstream: up}
		l.last.Store(time.Now().UnixNano())
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			return
		}
		if b.down { // SetDown(true) ran during the dial
			b.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			continue
		}
		b.links = append(b.links, l)
		b.accepted++
		b.wg.Add(2)
		b.mu.Unlock()
		go b.pipe(l, up, c)
		go b.pipe(l, c, up)
	}
}

// pipe copies src to dst until either fails or l is silenced; a silenced
// pipe drops what it read and parks, leaving both sockets open, until the
// black hole closes.
func (b *BlackHole) pipe(l *link, dst, src net.Conn) {
	defer b.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if l.silenced.Load() {
			<-b.done
			return
		}
		if n > 0 {
			l.last.Store(time.Now().UnixNano())
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			// An ordinary end, passed on as one: the peer sees it.
			l.ended.Store(true)
			_ = dst.Close()
			_ = src.Close()
			return
		}
	}
}
