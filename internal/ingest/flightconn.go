package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/benthos-zerobus/benthos-zerobus/internal/bufpool"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// Metadata keys every Zerobus call carries.
const (
	HeaderAuthorization = "authorization"
	HeaderTableName     = "x-databricks-zerobus-table-name"
)

// ackMessage is the PutResult app_metadata the service sends
// (docs/protocol.md#arrow-flight-doput: ready signal first, then cumulative
// acks, close_stream_duration_ms announcing rotation).
type ackMessage struct {
	AckUpToOffset         int64   `json:"ack_up_to_offset"`
	AckUpToRecords        uint64  `json:"ack_up_to_records"`
	CloseStreamDurationMs *uint64 `json:"close_stream_duration_ms,omitempty"`
}

// flightConn is one DoPut call: one physical connection-level stream. Its
// wire offsets and row counts start at 0 (offset_id starts at 0 on every
// connection and rises by 1 per frame, docs/protocol.md#arrow-flight-doput). Sends are serialized by the owning
// ArrowStream's sendMu; the reader goroutine delivers acks to it.
type flightConn struct {
	gen    uint64 // the owning stream's connection generation
	chGen  uint64 // the generation of the gRPC channel the call runs on
	call   flight.FlightService_DoPutClient
	cancel context.CancelFunc
	// base is the logical row position of the first row sent on this
	// connection: rows durable before it opened.
	base uint64

	nextOffset int64         // next offset_id; guarded by the stream's sendMu
	wf         wireFrame     // the frame being sent, reused; guarded by sendMu
	rowsSent   atomic.Uint64 // rows handed to Send, counted before Send

	rotating atomic.Bool // close signal seen: send nothing more
	broken   atomic.Bool // a Send failed: the reader will see why
	// abandoned is set by whoever cancels the call to replace it (the ack
	// watchdog, a rotation cutting a stuck Send): they recover, the reader
	// does not.
	abandoned  atomic.Bool
	halfClosed atomic.Bool
	closeOnce  sync.Once
	done       chan struct{} // closed when the reader exits
}

// usable reports whether new data may go out on c.
func (c *flightConn) usable() bool { return !c.rotating.Load() && !c.broken.Load() }

// halfClose ends the client side of the call once. The caller holds the
// stream's sendMu: CloseSend must not run concurrently with a Send.
func (c *flightConn) halfClose() {
	if c.halfClosed.CompareAndSwap(false, true) {
		_ = c.call.CloseSend()
	}
}

// close cancels the call; the reader exits.
func (c *flightConn) close() { c.closeOnce.Do(c.cancel) }

// sentUpTo is the logical position after the last row sent on c.
func (c *flightConn) sentUpTo() uint64 { return c.base + c.rowsSent.Load() }

// send writes frames with consecutive offset_ids (see sendFrame); frames
// left unsent after an error go back to pool. The caller holds the stream's
// sendMu.
func (c *flightConn) send(frames []frame, pool *bufpool.Pool) error {
	for i := range frames {
		if err := c.sendFrame(frames[i], pool); err != nil {
			releaseFrames(frames[i+1:], pool)
			return err
		}
	}
	return nil
}

// sendFrame writes f with the next offset_id through flightCodec, handing
// its buffers to gRPC (see wireFrame), which returns them to pool once
// written. A failed Send marks c broken. The caller holds the stream's
// sendMu.
func (c *flightConn) sendFrame(f frame, pool *bufpool.Pool) error {
	c.wf = wireFrame{env: f.env, body: f.body, offset: c.nextOffset, pool: pool}
	c.rowsSent.Add(uint64(f.rows))
	err := c.call.SendMsg(&c.wf)
	if c.wf.env != nil { // gRPC failed before marshalling: still ours
		pool.Put(c.wf.env)
		pool.Put(c.wf.body)
	}
	c.wf = wireFrame{}
	if err != nil {
		c.broken.Store(true)
		return fmt.Errorf("send frame offset %d: %w", c.nextOffset, err)
	}
	c.nextOffset++
	return nil
}

// connParams are what opening one connection needs.
type connParams struct {
	channels    *channels
	codec       flightCodec
	token       TokenSource
	table       string
	schemaFrame []byte
	ready       time.Duration
	// endpoint is the endpoint's host:port, named in a network failure.
	endpoint string
}

// openFlightConn starts a DoPut call, sends the schema frame and waits for the
// ready signal. When the service refused the token (see
// serviceRejectedToken) it drops the token and tries once more. Errors are
// classified *Error.
//
// An open that failed the way a silently dead transport makes calls fail
// (see transportSuspect) replaces the channel it tried, so that the next
// attempt dials a new connection instead of waiting on the dead one again.
func openFlightConn(ctx context.Context, p connParams, gen uint64) (*flightConn, error) {
	c, chGen, err := openFlightConnOnce(ctx, p, gen)
	if err != nil && serviceRejectedToken(err) {
		p.token.Invalidate()
		c, chGen, err = openFlightConnOnce(ctx, p, gen)
	}
	if err != nil {
		e := Classify(err)
		if ctx.Err() == nil {
			p.suspect(chGen, e)
		}
		return nil, withNetCause(e, p.endpoint, err)
	}
	return c, nil
}

// withNetCause is e (classified from err) naming its network cause when it
// is a transient failure to reach the endpoint or the workspace (see
// NetCauseOf): the class and codes stay e's.
func withNetCause(e *Error, endpoint string, err error) *Error {
	if e.Class != Transient {
		return e
	}
	nc := NetCauseOf(FieldEndpoint, endpoint, err)
	if nc == nil {
		return e
	}
	return &Error{Class: e.Class, Code: e.Code, ServiceCode: e.ServiceCode, Causes: e.Causes, RetryAfter: e.RetryAfter, Err: nc}
}

// suspect replaces channel generation chGen when e points at the transport
// under it (see transportSuspect); a generation already replaced is left.
func (p connParams) suspect(chGen uint64, e *Error) {
	if chGen != 0 && transportSuspect(e) {
		_, _ = p.channels.replace(chGen, redialReason(e)) // a failed dial keeps the old channel
	}
}

// openFlightConnOnce opens one call on the current channel; chGen is that
// channel's generation (0 if no call was started).
func openFlightConnOnce(ctx context.Context, p connParams, gen uint64) (_ *flightConn, chGen uint64, _ error) {
	callCtx, cancel, stop, err := callContext(ctx, p.token, p.table)
	if err != nil {
		return nil, 0, err
	}
	ch := p.channels.acquire()
	p.channels.hold(callCtx, ch) // released when the call's context ends
	call, err := ch.flight.DoPut(callCtx, p.codec.callOption())
	if err != nil {
		cancel()
		stop()
		return nil, ch.gen, fmt.Errorf("start DoPut for %s: %w", p.table, err)
	}
	if err := awaitReady(ctx, call, p, cancel, stop); err != nil {
		return nil, ch.gen, err
	}
	return &flightConn{gen: gen, chGen: ch.gen, call: call, cancel: cancel, done: make(chan struct{})}, ch.gen, nil
}

func parseAck(b []byte) (*ackMessage, error) {
	var ack ackMessage
	if err := json.Unmarshal(b, &ack); err != nil {
		return nil, poisonf("decode PutResult app_metadata %q: %w", truncate(string(b), 200), err)
	}
	return &ack, nil
}

// callContext fetches a token and returns the context of a new call to the
// stream's table, carrying the auth and table headers. The call outlives ctx,
// but until it is ready ctx bounds it: starting a call blocks while the
// channel connects (up to gRPC's 20 s connect deadline), which must not hold
// up Close or an open the caller gave up on. stop detaches the call from ctx;
// it reports false if ctx ended first and cancelled the call.
func callContext(ctx context.Context, ts TokenSource, table string) (callCtx context.Context, cancel context.CancelFunc, stop func() bool, err error) {
	tok, err := ts.Token(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("token for %s: %w", table, &tokenSourceError{err})
	}
	callCtx, cancel = context.WithCancel(context.Background())
	callCtx = metadata.AppendToOutgoingContext(callCtx,
		HeaderAuthorization, "Bearer "+tok,
		HeaderTableName, table,
	)
	return callCtx, cancel, context.AfterFunc(ctx, cancel), nil
}

// awaitReady sends the schema frame on a new call and waits up to p.ready
// for the service's first PutResult, which must be the ready signal
// ({"ack_up_to_offset":-1,"ack_up_to_records":0}, sent once auth, table and
// schema checks pass: docs/protocol.md#arrow-flight-doput). cancel and stop are the
// call's, from callContext: on success the call is detached from ctx, on
// failure it is cancelled.
func awaitReady(ctx context.Context, call flight.FlightService_DoPutClient, p connParams,
	cancel context.CancelFunc, stop func() bool,
) (err error) {
	ready := false
	defer func() {
		if !ready {
			cancel()
			stop() // the call is cancelled already; drop the hook from ctx
		}
	}()
	if err := call.Send(&flight.FlightData{DataHeader: p.schemaFrame}); err != nil {
		// The status, if any, comes from Recv.
		if _, rerr := call.Recv(); rerr != nil {
			err = rerr
		}
		return fmt.Errorf("send schema for %s: %w", p.table, err)
	}

	got := make(chan error, 1)
	go func() {
		res, err := call.Recv()
		if err == nil {
			err = checkReady(res, p.table)
		}
		got <- err
	}()
	timer := time.NewTimer(p.ready)
	defer timer.Stop()
	select {
	case err := <-got:
		if err != nil {
			return fmt.Errorf("wait for ready signal on %s: %w", p.table, err)
		}
		if ready = stop(); !ready { // ctx ended meanwhile and cancelled the call
			return fmt.Errorf("wait for ready signal on %s: %w", p.table, ctx.Err())
		}
		return nil
	case <-timer.C:
		return &Error{Class: Transient, Code: codes.DeadlineExceeded,
			Err: fmt.Errorf("no ready signal on %s within %s", p.table, p.ready)}
	case <-ctx.Done():
		return fmt.Errorf("wait for ready signal on %s: %w", p.table, ctx.Err())
	}
}

// checkReady vets the first PutResult of a call: it must be the ready signal.
func checkReady(res *flight.PutResult, table string) error {
	ack, err := parseAck(res.GetAppMetadata())
	if err != nil {
		return err
	}
	if ack.AckUpToOffset != -1 || ack.AckUpToRecords != 0 {
		return poisonf("first PutResult on %s is not the ready signal: offset %d records %d", table, ack.AckUpToOffset, ack.AckUpToRecords)
	}
	return nil
}
