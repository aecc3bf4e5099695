package testnet

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer accepts connections on loopback and echoes what they send; it
// counts the connections that ended (EOF or reset) on its side.
type echoServer struct {
	ln    net.Listener
	ended chan struct{}
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln, ended: make(chan struct{}, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_, _ = io.Copy(c, c)
				_ = c.Close()
				e.ended <- struct{}{}
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return e
}

// roundTrip writes msg on c and reads its echo within wait.
func roundTrip(c net.Conn, msg string, wait time.Duration) (string, error) {
	if err := c.SetDeadline(time.Now().Add(wait)); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, len(msg))
	n, err := io.ReadFull(c, buf)
	return string(buf[:n]), err
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestBlackHoleSilencesOpenConnectionsOnly(t *testing.T) {
	echo := startEcho(t)
	bh := StartBlackHole(t, echo.ln.Addr().String())

	old := dial(t, bh.Addr())
	if got, err := roundTrip(old, "hello", 5*time.Second); err != nil || got != "hello" {
		t.Fatalf("before the black hole: echo %q, %v; want hello", got, err)
	}
	if n := bh.Silence(); n != 1 {
		t.Fatalf("Silence silenced %d connections, want 1", n)
	}

	// The old connection is silent: the write is accepted (the socket is
	// open), no echo comes back, and neither side sees an end: the read
	// times out rather than failing with EOF or a reset.
	_, err := roundTrip(old, "lost", 300*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a silenced connection: got %v, want a read timeout (no FIN, no RST)", err)
	}
	select {
	case <-echo.ended:
		t.Fatal("the upstream side of a silenced connection was closed")
	default:
	}

	// A new connection passes.
	fresh := dial(t, bh.Addr())
	if got, err := roundTrip(fresh, "again", 5*time.Second); err != nil || got != "again" {
		t.Fatalf("a connection made after the black hole: echo %q, %v; want again", got, err)
	}
	if got := bh.Accepted(); got != 2 {
		t.Fatalf("Accepted() = %d, want 2", got)
	}

	// Close ends everything, silenced connections included.
	bh.Close()
	if err := old.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after Close a silenced connection reads %v, want its end", err)
	}
}

func TestBlackHolePassesAnOrdinaryEnd(t *testing.T) {
	echo := startEcho(t)
	bh := StartBlackHole(t, echo.ln.Addr().String())
	c := dial(t, bh.Addr())
	if _, err := roundTrip(c, "x", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	select {
	case <-echo.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the client's close did not reach the upstream")
	}
	if n := bh.Silence(); n != 0 {
		t.Fatalf("Silence counted %d open connections after the only one ended, want 0", n)
	}
}

func TestBlackHoleSilenceWhenQuiet(t *testing.T) {
	echo := startEcho(t)
	bh := StartBlackHole(t, echo.ln.Addr().String())
	c := dial(t, bh.Addr())
	if _, err := roundTrip(c, "first", 5*time.Second); err != nil {
		t.Fatal(err)
	}

	// Traffic every 20 ms keeps a 200 ms quiet from coming until it stops.
	stop := make(chan struct{})
	talked := make(chan error, 1)
	go func() {
		defer close(talked)
		for i := 0; i < 25; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := roundTrip(c, "p", 5*time.Second); err != nil {
				talked <- err
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := bh.SilenceWhenQuiet(ctx, 200*time.Millisecond)
	close(stop)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-talked; err != nil {
		t.Fatalf("traffic before the quiet: %v", err)
	}
	if n != 1 {
		t.Fatalf("silenced %d connections, want 1", n)
	}
	// 25 round trips 20 ms apart take at least 500 ms: the strike waited.
	if took := time.Since(began); took < 500*time.Millisecond {
		t.Fatalf("struck after %s, while traffic still flowed", took)
	}
	if _, err := roundTrip(c, "lost", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after the quiet strike: got %v, want a read timeout", err)
	}

	// A quiet that never comes ends with ctx.
	c2 := dial(t, bh.Addr())
	if _, err := roundTrip(c2, "y", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := bh.SilenceWhenQuiet(short, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SilenceWhenQuiet without quiet: %v, want the context's deadline", err)
	}
}

// SetDown cuts the connections open and closes new ones at once; brought
// back, new connections forward again.
func TestBlackHoleDown(t *testing.T) {
	e := startEcho(t)
	b := StartBlackHole(t, e.ln.Addr().String())
	c := dial(t, b.Addr())
	got, err := roundTrip(c, "a", 5*time.Second)
	if err != nil || got != "a" {
		t.Fatalf("before: %q %v", got, err)
	}
	b.SetDown(true)
	if _, err := roundTrip(c, "b", 5*time.Second); err == nil {
		t.Fatal("the open connection was not cut")
	}
	if _, err := roundTrip(dial(t, b.Addr()), "c", 5*time.Second); err == nil {
		t.Fatal("a new connection was forwarded while down")
	}
	b.SetDown(false)
	if got, err := roundTrip(dial(t, b.Addr()), "d", 5*time.Second); err != nil || got != "d" {
		t.Fatalf("back: %q %v", got, err)
	}
}
