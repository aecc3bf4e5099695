// The gRPC connection the streams share: its keepalive, and its replacement
// when it looks dead.

package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
)

// Keepalive defaults and bounds. A connection that stops answering (a NAT or
// load balancer that dropped its state, a crashed host: no FIN, no RST) is
// found dead within Time + Timeout of the last frame read from it: 15 s at
// the defaults. Time cannot go below MinKeepaliveTime, grpc-go's floor
// (keepalive.ClientParameters; WithKeepaliveParams raises anything lower),
// which is also the rate the service is assumed to permit: it publishes no
// keepalive policy, the official SDK sets no HTTP/2 keepalive of its own
// (databricks/zerobus-sdk rust/sdk/src/arrow_stream.rs builds each Flight
// channel with only connect_timeout and timeout), and a gRPC server's
// default policy answers pings more often than every 5 minutes with GOAWAY
// too_many_pings; one ping per 10 quiet seconds, only while streams are
// open, is the common cloud front ends' allowance and what the emulator
// enforces (internal/emulator).
const (
	DefaultKeepaliveTime    = 10 * time.Second
	DefaultKeepaliveTimeout = 5 * time.Second
	MinKeepaliveTime        = 10 * time.Second
)

// Keepalive configures the HTTP/2 pings that find a dead connection. Zero
// fields mean the defaults.
type Keepalive struct {
	// Time is how long the connection may stay quiet (nothing read) before
	// a ping is sent; below MinKeepaliveTime it is raised to it.
	Time time.Duration
	// Timeout is how long a ping may go unanswered before the connection
	// is closed and every call on it fails UNAVAILABLE.
	Timeout time.Duration
}

func (k Keepalive) withDefaults() Keepalive {
	if k.Time <= 0 {
		k.Time = DefaultKeepaliveTime
	}
	k.Time = max(k.Time, MinKeepaliveTime)
	if k.Timeout <= 0 {
		k.Timeout = DefaultKeepaliveTimeout
	}
	return k
}

// DetectionBound is the longest a dead connection with calls open goes
// unnoticed: a ping after Time of quiet, unanswered for Timeout.
func (k Keepalive) DetectionBound() time.Duration {
	k = k.withDefaults()
	return k.Time + k.Timeout
}

// dialOption is k as a gRPC dial option. Pings go only while calls are
// open (PermitWithoutStream false): the pool keeps its streams open, so a
// connection in use is always watched, and an idle one needs no pings that
// a strict server could count against it.
func (k Keepalive) dialOption() grpc.DialOption {
	k = k.withDefaults()
	return grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: k.Time, Timeout: k.Timeout})
}

// channel is one gRPC connection (a grpc.ClientConn: one HTTP/2 transport
// at a time) and its generation. Calls take a reference for as long as they
// live; a retired channel is closed once its last call ended.
type channel struct {
	gen    uint64
	conn   *grpc.ClientConn
	flight flight.FlightServiceClient

	calls   int  // calls holding a reference; under channels.mu
	retired bool // replaced; closed when calls reaches 0; under channels.mu
}

// channels holds the channel new calls go on and replaces it when a call on
// it failed the way a silently dead transport makes calls fail (see
// transportSuspect). Such a transport fails every call on it at about the
// same time: the
// generation makes the first failure replace the channel and the others,
// which name the same generation, find it replaced already. Calls on a
// retired channel run on until they end; the retired channel is closed
// after the last.
type channels struct {
	dial func() (*grpc.ClientConn, error)
	// onRedial, if set, learns of each replacement (after it happened).
	onRedial func(gen uint64, reason error)

	mu      sync.Mutex
	cur     *channel
	retired map[*channel]struct{} // not yet closed
	closed  bool
}

func newChannels(dial func() (*grpc.ClientConn, error), onRedial func(uint64, error)) (*channels, error) {
	conn, err := dial()
	if err != nil {
		return nil, err
	}
	return &channels{
		dial:     dial,
		onRedial: onRedial,
		cur:      &channel{gen: 1, conn: conn, flight: flight.NewFlightServiceClient(conn)},
		retired:  map[*channel]struct{}{},
	}, nil
}

// acquire returns the current channel with a reference taken for a call;
// release gives it back.
func (cs *channels) acquire() *channel {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.cur.calls++
	return cs.cur
}

// hold ties one reference to ch to ctx, the context of a call on ch: the
// reference is given back when ctx ends, which every call's does.
func (cs *channels) hold(ctx context.Context, ch *channel) {
	context.AfterFunc(ctx, func() { cs.release(ch) })
}

// release gives back a reference to ch and closes ch if it was the last one
// of a retired channel.
func (cs *channels) release(ch *channel) {
	cs.mu.Lock()
	ch.calls--
	last := ch.retired && ch.calls == 0
	if last {
		delete(cs.retired, ch)
	}
	cs.mu.Unlock()
	if last {
		_ = ch.conn.Close()
	}
}

// gen returns the generation of the current channel.
func (cs *channels) gen() uint64 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.cur.gen
}

// replace dials a new channel in place of generation gen, unless gen was
// replaced already or the client is closed, and starts connecting it at
// once, so that it is ready when the streams come back. The old channel is
// closed once the calls still on it ended (those on a dead transport end
// with it). It reports whether it replaced the channel; an error is a dial
// that failed (the old channel then stays).
func (cs *channels) replace(gen uint64, reason error) (bool, error) {
	cs.mu.Lock()
	if cs.closed || cs.cur.gen != gen {
		cs.mu.Unlock()
		return false, nil
	}
	conn, err := cs.dial()
	if err != nil {
		cs.mu.Unlock()
		return false, err
	}
	old := cs.cur
	cs.cur = &channel{gen: old.gen + 1, conn: conn, flight: flight.NewFlightServiceClient(conn)}
	old.retired = true
	closeOld := old.calls == 0
	if !closeOld {
		cs.retired[old] = struct{}{}
	}
	newGen := cs.cur.gen
	cs.mu.Unlock()
	conn.Connect()
	if closeOld {
		_ = old.conn.Close()
	}
	if cs.onRedial != nil {
		cs.onRedial(newGen, reason)
	}
	return true, nil
}

// close closes every channel, the current one and retired ones still in
// use; calls on them fail.
func (cs *channels) close() error {
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		return nil
	}
	cs.closed = true
	all := []*channel{cs.cur}
	for ch := range cs.retired {
		all = append(all, ch)
	}
	cs.retired = nil
	cs.mu.Unlock()
	var errs []error
	for _, ch := range all {
		if err := ch.conn.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close zerobus client: %w", err)
	}
	return nil
}

// transportSuspect reports whether a call failing with e points at a
// transport that gRPC still takes for healthy: DEADLINE_EXCEEDED from the
// client's own clocks (no ready signal in time, no ack with rows
// outstanding) or from a call that could not start. Over such a transport
// (a NAT that dropped its state before keepalive noticed) every new call
// waits for a ready signal that never comes, so the channel is replaced.
// A transport gRPC knows is gone needs no replacement: keepalive, a reset
// or an EOF close it, calls fail UNAVAILABLE, and the next call dials a new
// connection, with gRPC's own back-off while the endpoint refuses. A
// service-coded error is the service's answer, never suspect. Replacing a
// channel that was healthy after all costs one new connection: the calls
// still on the old one run on.
func transportSuspect(e *Error) bool {
	return e != nil && e.Class == Transient && e.ServiceCode == "" && e.Code == codes.DeadlineExceeded
}

// redialReason is what a replacement reports: the failure that caused it.
func redialReason(e *Error) error {
	return fmt.Errorf("it looks dead (no answer while the transport seems up): %w", e)
}
