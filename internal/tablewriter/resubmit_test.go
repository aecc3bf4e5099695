package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// refusedAtReconnect is how a logical stream dies when the service rotates
// it (close_stream_duration_ms) while refusing new streams with
// RESOURCE_EXHAUSTED: its reconnect is refused, and it fails Poison with
// the service's wait (ingest's retryReconnect). The wait is long so that
// the member does not come back within a test.
func refusedAtReconnect() *ingest.Error {
	return &ingest.Error{Class: ingest.Poison, Code: codes.ResourceExhausted, RetryAfter: time.Minute,
		Err: fmt.Errorf("reconnect refused: %w", ingestfake.ErrConcurrencyReject(time.Minute))}
}

type writeResult struct {
	rowErrs []RowError
	err     error
}

// writeAsync starts a Write of batch and returns where its result comes.
func writeAsync(w *Writer, batch []Row) <-chan writeResult {
	done := make(chan writeResult, 1)
	go func() {
		rowErrs, err := w.Write(context.Background(), batch, nil)
		done <- writeResult{rowErrs, err}
	}()
	return done
}

func awaitWrite(t *testing.T, done <-chan writeResult) writeResult {
	t.Helper()
	select {
	case res := <-done:
		return res
	case <-time.After(20 * time.Second):
		t.Fatal("Write did not return")
		return writeResult{}
	}
}

// writeOnOneOfTwo opens a writer over two streams that acknowledge only
// when told, starts a one-row Write and returns once the row is submitted:
// the stream that holds it, and the other one.
func writeOnOneOfTwo(t *testing.T) (h *harness, done <-chan writeResult, got, other *ingestfake.Stream) {
	t.Helper()
	h = newHarness(t, ingestfake.Config{ManualAck: true}, nil, nil)
	streams, err := h.opener.WaitOpens(context.Background(), 2)
	require.NoError(t, err)
	require.Len(t, streams, 2)
	done = writeAsync(h.w, rows(`{"id":1,"msg":"a"}`))
	require.Eventually(t, func() bool { return streams[0].Submitted()+streams[1].Submitted() > 0 }, 10*time.Second, time.Millisecond)
	if streams[0].Submitted() > 0 {
		return h, done, streams[0], streams[1]
	}
	return h, done, streams[1], streams[0]
}

// A batch whose stream dies before any of its rows is confirmed, for a
// cause a new stream heals (here the service rotated the stream and
// refused its reconnect for now: RESOURCE_EXHAUSTED, retryable in the
// official SDK), is written again on a stream still open: the output
// running, nothing is nacked. This is the path that nacked a batch of
// TestFaultMatrix/throttling/mid under load.
func TestBatchOfAStreamRefusedAtReconnectIsWrittenOnAnother(t *testing.T) {
	_, done, first, second := writeOnOneOfTwo(t)
	first.Poison(refusedAtReconnect())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, second.WaitSubmitted(ctx, 1), "the batch is written again on the stream still open")
	second.AckAll()
	res := awaitWrite(t, done)
	require.NoError(t, res.err, "written again, never failed")
	assert.Empty(t, res.rowErrs)
}

// When every stream is refused, the batch waits for one (the pool never
// opens another stream sooner than the service asked) and, once no stream
// has been connected for OutageGrace, is held: ErrNotOpen, which the output
// turns into "not connected" (the engine keeps the batch and writes it
// again after Connect), never a nack.
func TestBatchHeldWhenEveryStreamIsRefusedAtReconnect(t *testing.T) {
	_, done, first, second := writeOnOneOfTwo(t)
	second.Poison(refusedAtReconnect())
	first.Poison(refusedAtReconnect())

	res := awaitWrite(t, done)
	require.Error(t, res.err)
	assert.ErrorIs(t, res.err, ErrNotOpen, "held, not failed: %v", res.err)
}

// A stream that is up but never acknowledges is no stream death: past
// ack.timeout the batch fails (the input redelivers it), as before, and is
// not written again behind the caller's back.
func TestAckTimeoutStillFailsTheBatch(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true}, func(c *Config) { c.AckTimeout = 300 * time.Millisecond }, nil)
	res := awaitWrite(t, writeAsync(h.w, rows(`{"id":1,"msg":"a"}`)))
	require.Error(t, res.err)
	assert.False(t, errors.Is(res.err, ErrNotOpen), "a timeout is a failure, not a hold: %v", res.err)
	var total uint64
	for _, s := range h.opener.Streams() {
		total += s.Submitted()
	}
	assert.Equal(t, uint64(1), total, "submitted once")
	for _, s := range h.opener.Streams() {
		s.AckAll() // so that Close drains at once
	}
}

// A stream refused for a cause only a person can fix is not written to
// again: the writer stops its streams and holds (stopIfStopped),
// rather than moving the batch from stream to stream.
func TestBatchOfAStreamRefusedForGoodIsNotResubmitted(t *testing.T) {
	_, done, first, second := writeOnOneOfTwo(t)
	first.Poison(ingestfake.ErrFatalConfig("PERMISSION_DENIED: missing MODIFY"))
	res := awaitWrite(t, done)
	require.Error(t, res.err)
	assert.ErrorIs(t, res.err, ErrNotOpen)
	assert.Zero(t, second.Submitted(), "not resubmitted")
}

// streamDied is the one judge of which failures of a batch none of whose
// rows was confirmed are written again.
func TestStreamDied(t *testing.T) {
	died := fmt.Errorf("rows for %s not confirmed durable: pool: stream 0 (generation 1) rows [0,1): acklane: stream failed: %w", testTable, refusedAtReconnect())
	outage := &outageError{table: testTable, age: time.Second, cause: refusedAtReconnect()}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"reconnect refused for concurrency", context.Background(), died, true},
		{"reconnects used up", context.Background(), fmt.Errorf("ticket: %w", &ingest.Error{Class: ingest.Poison, Code: codes.Unavailable, Err: errors.New("reconnect budget of 4 attempts exhausted")}), true},
		{"a transient submit failure", context.Background(), fmt.Errorf("submit: %w", ingestfake.ErrTransient("unavailable")), true},
		{"held already: no stream connected", context.Background(), fmt.Errorf("%w: %w", ErrNotOpen, fmt.Errorf("%w: %w", errOutage, outage)), false},
		{"ack.timeout", context.Background(), fmt.Errorf("%w (%w)", fmt.Errorf("waiting for durable ack: %w", context.DeadlineExceeded), errors.New("no durable ack within ack.timeout")), false},
		{"the caller's ctx ended", cancelled, died, false},
		{"refused for good", context.Background(), fmt.Errorf("ticket: %w", ingestfake.ErrFatalConfig("PERMISSION_DENIED")), false},
		{"the writer closed", context.Background(), fmt.Errorf("%w: %w", ErrClosed, refusedAtReconnect()), false},
		{"no class", context.Background(), errors.New("pool: no healthy stream"), false},
	} {
		assert.Equal(t, c.want, streamDied(c.ctx, c.err), c.name)
	}
}
