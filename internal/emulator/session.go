package emulator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// pending is one received ingest request waiting for durability.
type pending struct {
	offset int64
	rows   int64
	recvAt time.Time
	done   <-chan error // one value: nil when durable

	resolved bool
	err      error
}

// ackedNow is the done channel of a request that needs no storage.
func ackedNow() <-chan error {
	ch := make(chan error, 1)
	ch <- nil
	return ch
}

// session is the protocol-independent part of one ingest stream: it turns
// durability completions, in request order, into cumulative acks (honouring
// ack latency and stalls), and runs the stream's lifetime (rotation).
type session struct {
	srv   *Server
	table string
	ctx   context.Context

	// sendAck and sendClose write one protocol message; they are called with
	// sendMu held, so the stream is never written concurrently.
	sendMu    sync.Mutex
	sendAck   func(offset int64, records uint64) error
	sendClose func(offset int64, records uint64, grace time.Duration) error
	// lastOff and records are the cumulative ack position. They change only
	// with sendMu held; end reads them without it, so a Send blocked by a
	// client that stopped reading cannot hold up the end of the handler.
	lastOff atomic.Int64
	records atomic.Uint64

	queue   chan *pending
	failed  chan error
	drained chan struct{}
	// gone is closed when the stream's table is dropped (tableStore.gone);
	// tableID is that table's id. Nil gone: never.
	gone    <-chan struct{}
	tableID string

	// quota is the stream's throughput budget and stat its record in
	// Stats; both are used by the receive loop only (stat is locked).
	quota quota
	stat  *streamStat
}

func newSession(ctx context.Context, srv *Server, table string) *session {
	ss := &session{
		srv:     srv,
		table:   table,
		ctx:     ctx,
		queue:   make(chan *pending, 4096),
		failed:  make(chan error, 1),
		drained: make(chan struct{}),
	}
	ss.lastOff.Store(-1)
	return ss
}

// enqueue hands a received request to the ack loop; it blocks (flow control)
// when too many are waiting.
func (ss *session) enqueue(p *pending) error {
	select {
	case ss.queue <- p:
		return nil
	case <-ss.ctx.Done():
		return status.FromContextError(ss.ctx.Err()).Err()
	}
}

// finish tells the ack loop the client half-closed: no more requests.
func (ss *session) finish() { close(ss.queue) }

func (ss *session) fail(err error) {
	select {
	case ss.failed <- err:
	default:
	}
}

// resolve waits (block=true) or checks (block=false) for p's durability and
// its ack latency. It reports whether p is ready to be acked.
func (ss *session) resolve(p *pending, block bool) (bool, error) {
	if !p.resolved {
		if block {
			select {
			case p.err = <-p.done:
			case <-ss.ctx.Done():
				return false, ss.ctx.Err()
			}
		} else {
			select {
			case p.err = <-p.done:
			default:
				return false, nil
			}
		}
		p.resolved = true
	}
	if errors.Is(p.err, errTableDropped) {
		return false, droppedStatus(ss.table, ss.tableID)
	}
	if p.err != nil {
		return false, status.Errorf(codes.Internal, "storing batch at offset %d failed: %v", p.offset, p.err)
	}
	if lat, _ := ss.srv.currentFaults().ackFaults(ss.table); lat > 0 {
		wait := time.Until(p.recvAt.Add(lat))
		if wait > 0 {
			if !block {
				return false, nil
			}
			t := time.NewTimer(wait)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ss.ctx.Done():
				return false, ss.ctx.Err()
			}
		}
	}
	return true, nil
}

// ackLoop sends one cumulative ack per group of consecutive durable requests.
func (ss *session) ackLoop() {
	var carry *pending
	closed := false
	for {
		p := carry
		carry = nil
		if p == nil {
			var ok bool
			select {
			case p, ok = <-ss.queue:
				if !ok {
					close(ss.drained)
					return
				}
			case <-ss.ctx.Done():
				return
			}
		}
		if _, err := ss.resolve(p, true); err != nil {
			ss.fail(err)
			return
		}
		last, rows := p.offset, p.rows
	coalesce:
		for {
			select {
			case q, ok := <-ss.queue:
				if !ok {
					closed = true
					break coalesce
				}
				ready, err := ss.resolve(q, false)
				if err != nil {
					ss.fail(err)
					return
				}
				if !ready {
					carry = q
					break coalesce
				}
				last, rows = q.offset, rows+q.rows
			default:
				break coalesce
			}
		}
		for {
			if _, stall := ss.srv.currentFaults().ackFaults(ss.table); !stall {
				break
			}
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ss.ctx.Done():
				return
			}
		}
		ss.sendMu.Lock()
		ss.lastOff.Store(last)
		err := ss.sendAck(last, ss.records.Add(uint64(rows)))
		ss.sendMu.Unlock()
		if err != nil {
			ss.fail(err)
			return
		}
		ss.srv.stats.acked(ss.table, rows)
		if closed {
			close(ss.drained)
			return
		}
	}
}

// run supervises the stream until it ends: the client half-closes and every
// request is acked (OK), the receive side or the ack loop fails (that
// status), or the stream lifetime fault rotates it (close signal, then
// UNAVAILABLE 6002 once the grace period is over).
func (ss *session) run(recvDone <-chan error, f *Faults) error {
	var lifetime, graceEnd <-chan time.Time
	if f.StreamLifetime > 0 {
		t := time.NewTimer(f.StreamLifetime)
		defer t.Stop()
		lifetime = t.C
	}
	grace := f.rotationGrace()
	for {
		select {
		case err := <-recvDone:
			if err != nil {
				return err
			}
			recvDone = nil
		case <-ss.drained:
			return nil
		case err := <-ss.failed:
			return err
		case <-lifetime:
			lifetime = nil
			ss.sendMu.Lock()
			err := ss.sendClose(ss.lastOff.Load(), ss.records.Load(), grace)
			ss.sendMu.Unlock()
			if err != nil {
				return err
			}
			ss.srv.log.Info("stream rotation announced", "table", ss.table, "grace", grace)
			t := time.NewTimer(grace)
			defer t.Stop()
			graceEnd = t.C
		case <-graceEnd:
			// The close period is over: the call ends even with requests
			// stored but not yet acked. They stay stored, their acks are
			// lost with the call and the client resends them: a duplicate
			// that at-least-once delivery allows (the official SDK waits
			// for acks only up to the announced duration, then resends;
			// TestRotationDeadlineLeavesStoredBatchesUnacked).
			return rotationError()
		case <-ss.gone:
			return droppedStatus(ss.table, ss.tableID)
		case <-ss.ctx.Done():
			return status.FromContextError(ss.ctx.Err()).Err()
		}
	}
}

// droppedStatus is how a stream on a dropped table ends, and how an open
// racing the drop is refused: NOT_FOUND, the status the emulator gives an
// open on a table that does not exist (authorizeStream). Requests received
// and not yet durable at the drop are not acknowledged (the client sends
// them again on a new stream, to the table created again under the name, if
// any); rows acknowledged before it were in the dropped table and went with
// it. Assumption: no SDK file, doc or issue says what the service answers to
// a stream whose table is dropped while it writes; NOT_FOUND is its answer
// to a missing table (rust/sdk/src/lib.rs create_stream: an error for a
// table that "doesn't exist"), and the SDKs do not retry it
// (rust/sdk/src/errors.rs UNRETRIABLE_STATUS_CODES lists NotFound), so a
// client re-resolves the table rather than reconnect to the dropped one.
// Databricks documents re-creating a target table as unsupported by the
// connector ("Zerobus Ingest connector limitations", Workspace and target
// tables), and the service may hold acknowledged rows in its own durable
// buffer before they reach the table (same page, "Buffered data
// retention"): with the service, rows acknowledged shortly before a drop may
// be neither in the dropped table nor in a new one. The emulator stores
// before it acknowledges, so here they are in the dropped table.
func droppedStatus(table, tableID string) error {
	return status.Errorf(codes.NotFound, "table %s does not exist: it was dropped (table_id %s)", table, tableID)
}

// end logs how the stream ended and passes its status through. A stream
// the server ended itself (any status but OK, or Canceled: the client's
// doing) leaves its unacked rows to be resent: they are counted in
// RowsLeftUnacked.
func (ss *session) end(err error) error {
	if code := status.Code(err); code != codes.OK && code != codes.Canceled && ss.stat != nil {
		if left := ss.stat.received() - int64(ss.records.Load()); left > 0 {
			ss.srv.stats.leftUnacked(ss.table, left)
		}
	}
	ss.srv.log.Debug("stream ended", "table", ss.table, "code", status.Code(err).String(),
		"err", err, "acked_offset", ss.lastOff.Load(), "acked_records", ss.records.Load())
	return err
}

// recvStatus turns a receive error into the status the stream ends with.
func recvStatus(err error, what string) error {
	if st, ok := status.FromError(err); ok {
		return st.Err()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.InvalidArgument, fmt.Sprintf("%s: %v", what, err))
}

// nextBatch checks a batch's offset against the next one expected, on both
// stream kinds alike (offsets start at 0 and go up by one per batch; the
// text is the official mock server's, see nonIncrementalOffsetMessage),
// advances it, and rolls the error-rate fault for the batch.
func nextBatch(off int64, expected *int64, f *Faults) error {
	if off != *expected {
		return status.Errorf(codes.InvalidArgument, nonIncrementalOffsetMessage, *expected, off)
	}
	*expected++
	return injectedError(f, off)
}

// injectedError rolls the error-rate fault for one batch.
func injectedError(f *Faults, offset int64) error {
	if c, ok := f.pickError(); ok {
		return status.Errorf(c, "injected fault: %s at offset %d", c, offset)
	}
	return nil
}
