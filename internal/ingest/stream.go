// Package ingest is a pure-Go client for the Databricks Zerobus ingest
// service: OAuth M2M tokens, Arrow record batches streamed over Arrow Flight
// DoPut, and the classification of the errors the service returns.
//
// The layers above (the stream pool and the ack lanes) depend only on the
// Stream and Opener interfaces in this file. A Stream is one long-lived logical
// stream: it hides connections, reconnects on transient errors and on server
// rotation, resends what was not yet durable, and reports only what it cannot
// recover from.
//
// Files: stream.go holds these interfaces; client.go opens streams (Client,
// Config); arrowstream.go is the logical stream (ArrowStream); flightconn.go
// is one DoPut call under it; frames.go encodes record batches into IPC
// frames under the request cap, and rowsize.go finds rows too large for one
// request; wirecodec.go sends those frames without copying them; auth.go
// fetches tokens; transport.go checks URLs and builds the TLS, proxy and
// dial settings; ackclock.go remembers when each ack arrived; observer.go
// carries an Observer of open events; errors.go classifies failures. The
// protocol they speak is described in docs/protocol.md.
package ingest

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"
)

// Span is the half-open range [From, To) of logical row positions a submitted
// batch occupies on a Stream. Logical positions start at 0 when the Stream is
// opened and stay stable across the reconnects the Stream performs.
type Span struct{ From, To uint64 }

// Rows returns the number of rows in the span.
func (s Span) Rows() uint64 { return s.To - s.From }

// Stream is one long-lived logical Zerobus stream to one table with one schema.
//
// Submit, Durable and WaitDurable are safe for concurrent use. Rows become
// durable in submission order: Durable() == n means rows [0, n) are durable.
type Stream interface {
	// Submit hands rec to the stream and returns the logical rows it occupies.
	// It returns once the bytes are handed to the connection: flow control may
	// block it, durability never does. rec's schema must equal the stream's.
	Submit(ctx context.Context, rec arrow.RecordBatch) (Span, error)

	// WaitDurable blocks until Durable() >= row, the stream fails (the error
	// is an *Error whose Class says what to do), or ctx is done.
	WaitDurable(ctx context.Context, row uint64) error

	// Durable returns the logical durable watermark: every row below it is
	// durable on the service.
	Durable() uint64

	// Drain stops accepting submits and waits until every submitted row is
	// durable or ctx is done.
	Drain(ctx context.Context) error

	// Close releases the stream. Rows not yet durable are abandoned (their
	// waiters get an error); call Drain first to avoid that.
	Close() error
}

// FailureNotifier is the optional part of a Stream that reports its failure
// without being asked. The pool watches it so that a stream that dies while
// idle (nothing pending, so no WaitDurable returns the error) is counted and
// rebuilt at once, instead of passing for healthy until a Write finds it dead.
type FailureNotifier interface {
	// Failed returns a channel closed once the stream has failed: what
	// WaitDurable would report. Close does not close it.
	Failed() <-chan struct{}
	// Err returns the failure (an *Error) once Failed is closed, else nil.
	Err() error
}

// Opener opens logical streams. It is the only way the layers above create
// streams, which makes "never open a stream on the hot path" checkable.
type Opener interface {
	// Open opens a stream for the three-part table name with the given Arrow
	// schema and waits for the service's ready signal. An error is an *Error
	// classified as in Classify.
	Open(ctx context.Context, table string, schema *arrow.Schema) (Stream, error)
}
