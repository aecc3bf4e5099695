package ingest

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testTable = "main.default.t1"

func submitAll(t *testing.T, s Stream, batches ...arrow.RecordBatch) []Span {
	t.Helper()
	var spans []Span
	for _, b := range batches {
		sp, err := s.Submit(context.Background(), b)
		require.NoError(t, err)
		b.Release()
		spans = append(spans, sp)
	}
	return spans
}

// openStream opens a stream of testSchema on testTable, closed when the
// test ends.
func openStream(t *testing.T, c *Client) Stream {
	t.Helper()
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// waitFailure waits for row to be durable on s and returns the *Error the
// wait must fail with.
func waitFailure(t *testing.T, s Stream, row uint64) *Error {
	t.Helper()
	var ze *Error
	require.ErrorAs(t, s.WaitDurable(waitCtx(t), row), &ze)
	return ze
}

func waitCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestArrowStreamWireShape(t *testing.T) {
	srv := &fakeFlightServer{}
	c := testClient(t, startFake(t, srv), nil)
	s := openStream(t, c)

	spans := submitAll(t, s, makeBatch(0, 3, 5), makeBatch(3, 4, 5), makeBatch(7, 1, 5))
	assert.Equal(t, []Span{{0, 3}, {3, 7}, {7, 8}}, spans)
	require.NoError(t, s.WaitDurable(waitCtx(t), 8))
	assert.Equal(t, uint64(8), s.Durable())

	fc := srv.conn(0)
	assert.Equal(t, []string{"Bearer test-token"}, fc.md.Get("authorization"))
	assert.Equal(t, []string{testTable}, fc.md.Get("x-databricks-zerobus-table-name"))
	require.NotEmpty(t, fc.md.Get("user-agent"))
	assert.Regexp(t, `^benthos-zerobus/test`, fc.md.Get("user-agent")[0])

	raw, offsets, ids := fc.snapshot()
	require.Len(t, raw, 4)
	schemaFrame := raw[0]
	assert.False(t, schemaFrame.hasDescriptor, "no FlightDescriptor")
	assert.Empty(t, schemaFrame.appMetadata, "schema frame has no app_metadata")
	assert.Zero(t, schemaFrame.bodyLen, "schema frame has no body")
	wantHeader, err := c.encoder.schemaHeader(testSchema)
	require.NoError(t, err)
	assert.Equal(t, wantHeader, schemaFrame.header)
	for i, f := range raw[1:] {
		assert.False(t, f.hasDescriptor)
		assert.JSONEq(t, `{"offset_id":`+itoa(i)+`}`, f.appMetadata)
	}
	assert.Equal(t, []int64{0, 1, 2}, offsets)
	assert.Equal(t, seq(0, 8), ids)
	require.NoError(t, s.Drain(waitCtx(t)))
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestArrowStreamCumulativeAcks(t *testing.T) {
	// The server acks nothing by itself; the test drives acks.
	srv := &fakeFlightServer{onFrame: func(frameEvent) reply { return reply{noAck: true} }}
	c := testClient(t, startFake(t, srv), nil)
	s := openStream(t, c)
	submitAll(t, s, makeBatch(0, 5, 1), makeBatch(5, 5, 1))
	require.Eventually(t, func() bool { _, off, _ := srv.conn(0).snapshot(); return len(off) == 2 }, 10*time.Second, 5*time.Millisecond)

	waited := make(chan error, 1)
	go func() { waited <- s.WaitDurable(waitCtx(t), 10) }()

	before := time.Now()
	require.NoError(t, srv.conn(0).sendAck(0, 3, nil))
	require.Eventually(t, func() bool { return s.Durable() == 3 }, 10*time.Second, time.Millisecond)
	select {
	case <-waited:
		t.Fatal("WaitDurable(10) returned at durable 3")
	case <-time.After(30 * time.Millisecond):
	}
	_, known := s.(*ArrowStream).AckedAt(4)
	assert.False(t, known, "row 4 is not durable: no ack time")
	require.NoError(t, srv.conn(0).sendAck(0, 2, nil)) // stale acks never move it back
	require.NoError(t, srv.conn(0).sendAck(1, 10, nil))
	require.NoError(t, <-waited)
	assert.Equal(t, uint64(10), s.Durable())

	// AckedAt dates each row by the ack that made it durable.
	first, ok := s.(*ArrowStream).AckedAt(3)
	require.True(t, ok)
	second, ok := s.(*ArrowStream).AckedAt(4)
	require.True(t, ok)
	assert.False(t, first.Before(before))
	assert.GreaterOrEqual(t, second.Sub(first), 30*time.Millisecond, "rows 4..10 were acked by the second ack")
	last, ok := s.(*ArrowStream).AckedAt(10)
	require.True(t, ok)
	assert.Equal(t, second, last)
}

func TestArrowStreamAckAboveSentIsPoison(t *testing.T) {
	srv := &fakeFlightServer{onFrame: func(ev frameEvent) reply { return reply{ackRows: uint64p(ev.rows + 1)} }}
	obs := &recordingObserver{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.Observer = obs })
	s := openStream(t, c)
	submitAll(t, s, makeBatch(0, 4, 1))
	ze := waitFailure(t, s, 4)
	assert.Equal(t, Poison, ze.Class)
	assert.Contains(t, ze.Error(), "exceeds the 4 rows sent")
	_, _, _, failures := obs.counts()
	assert.Equal(t, 1, failures)
	_, err := s.Submit(context.Background(), makeBatch(4, 1, 1))
	assert.ErrorAs(t, err, &ze)
}

func TestArrowStreamBackpressure(t *testing.T) {
	srv := &fakeFlightServer{onFrame: func(frameEvent) reply { return reply{noAck: true} }}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.MaxInflightBatches = 2 })
	s := openStream(t, c)
	submitAll(t, s, makeBatch(0, 1, 1), makeBatch(1, 1, 1))

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	third := makeBatch(2, 1, 1)
	defer third.Release()
	_, err := s.Submit(short, third)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	done := make(chan Span, 1)
	go func() {
		sp, err := s.Submit(context.Background(), third)
		assert.NoError(t, err)
		done <- sp
	}()
	select {
	case <-done:
		t.Fatal("submit passed the in-flight bound")
	case <-time.After(50 * time.Millisecond):
	}
	require.Eventually(t, func() bool { _, off, _ := srv.conn(0).snapshot(); return len(off) == 2 }, 10*time.Second, time.Millisecond)
	require.NoError(t, srv.conn(0).sendAck(0, 1, nil))
	select {
	case sp := <-done:
		assert.Equal(t, Span{2, 3}, sp)
	case <-time.After(5 * time.Second):
		t.Fatal("submit not released by the ack")
	}
}

func TestArrowStreamDrainAndClose(t *testing.T) {
	srv := &fakeFlightServer{onFrame: func(ev frameEvent) reply {
		if ev.frame == 2 {
			return reply{noAck: true}
		}
		return reply{}
	}}
	c := testClient(t, startFake(t, srv), nil)
	s, err := c.Open(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	submitAll(t, s, makeBatch(0, 2, 1), makeBatch(2, 2, 1), makeBatch(4, 2, 1))

	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.Drain(short), context.DeadlineExceeded, "the last batch is never acked")
	assert.Equal(t, uint64(4), s.Durable())
	_, err = s.Submit(context.Background(), makeBatch(6, 1, 1))
	require.ErrorIs(t, err, ErrStreamClosed, "draining refuses submits")

	waitErr := make(chan error, 1)
	go func() { waitErr <- s.WaitDurable(context.Background(), 6) }()
	require.NoError(t, s.Close())
	err = <-waitErr
	require.ErrorIs(t, err, ErrStreamClosed)
	require.NoError(t, s.Close(), "close is idempotent")
}

func TestArrowStreamSchemaMismatch(t *testing.T) {
	srv := &fakeFlightServer{}
	c := testClient(t, startFake(t, srv), nil)
	s := openStream(t, c)
	other := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "name", Type: arrow.BinaryTypes.LargeString}}, nil)
	rec := makeBatch(0, 1, 1)
	defer rec.Release()
	mismatched := arrowRecordWithSchema(t, rec, other)
	defer mismatched.Release()
	_, err := s.Submit(context.Background(), mismatched)
	assert.ErrorIs(t, err, ErrSchemaMismatch, "nullability differs")
}

func TestArrowStreamConcurrentSubmits(t *testing.T) {
	srv := &fakeFlightServer{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.MaxInflightBatches = 8 })
	s := openStream(t, c)

	var mu sync.Mutex
	var spans []Span
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				b := makeBatch(0, int64(1+i%5), 8)
				sp, err := s.Submit(context.Background(), b)
				b.Release()
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				spans = append(spans, sp)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Slice(spans, func(i, j int) bool { return spans[i].From < spans[j].From })
	var next uint64
	for _, sp := range spans {
		require.Equal(t, next, sp.From, "spans are contiguous and disjoint")
		next = sp.To
	}
	require.NoError(t, s.Drain(waitCtx(t)))
	assert.Equal(t, next, s.Durable())
	assert.Len(t, srv.allIDs(), int(next))
}

func arrowRecordWithSchema(t *testing.T, rec arrow.RecordBatch, schema *arrow.Schema) arrow.RecordBatch {
	t.Helper()
	return array.NewRecordBatch(schema, rec.Columns(), rec.NumRows())
}

// doneHook reports when the code under test first asks for ctx.Done, which
// in reserve means it is about to block for capacity.
type doneHook struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func (c *doneHook) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

// An empty batch reserves in-flight capacity and gives it back at once; a
// Submit that blocked on that reservation must be woken, or it waits for an
// ack that will never come.
func TestArrowStreamEmptyBatchReleasesCapacity(t *testing.T) {
	srv := &fakeFlightServer{}
	c := testClient(t, startFake(t, srv), func(cfg *Config) { cfg.MaxInflightBatches = 1 })
	s, err := c.OpenArrowStream(waitCtx(t), testTable, testSchema)
	require.NoError(t, err)
	defer s.Close()

	s.sendMu.Lock() // hold the empty batch between reserve and send
	emptyDone := make(chan error, 1)
	go func() {
		empty := makeBatch(0, 0, 1)
		defer empty.Release()
		_, err := s.Submit(context.Background(), empty)
		emptyDone <- err
	}()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inflight == 1
	}, 10*time.Second, time.Millisecond)

	ctx := &doneHook{Context: context.Background(), waiting: make(chan struct{})}
	fullDone := make(chan error, 1)
	go func() {
		b := makeBatch(0, 1, 1)
		defer b.Release()
		_, err := s.Submit(ctx, b)
		fullDone <- err
	}()
	<-ctx.waiting
	s.sendMu.Unlock()
	require.NoError(t, <-emptyDone)

	select {
	case err := <-fullDone:
		require.NoError(t, err)
	case <-time.After(3 * time.Second):
		t.Fatal("Submit still waits for capacity the empty batch gave back")
	}
	require.NoError(t, s.WaitDurable(waitCtx(t), 1))
}

// Failed lets the pool learn that an idle stream died (no WaitDurable is
// there to return the error): it closes when the stream fails, with Err the
// failure, and never because of Close.
func TestArrowStreamFailedChannel(t *testing.T) {
	t.Run("failure", func(t *testing.T) {
		srv := &fakeFlightServer{onFrame: func(ev frameEvent) reply { return reply{ackRows: uint64p(ev.rows + 1)} }}
		c := testClient(t, startFake(t, srv), nil)
		s, err := c.OpenArrowStream(waitCtx(t), testTable, testSchema)
		require.NoError(t, err)
		defer s.Close()
		require.NoError(t, s.Err())
		submitAll(t, s, makeBatch(0, 4, 1))
		select {
		case <-s.Failed():
		case <-waitCtx(t).Done():
			t.Fatal("Failed not closed after the stream failed")
		}
		class, ok := ClassOf(s.Err())
		require.True(t, ok, "Err is the *Error: %v", s.Err())
		assert.Equal(t, Poison, class)
	})
	t.Run("close", func(t *testing.T) {
		c := testClient(t, startFake(t, &fakeFlightServer{}), nil)
		s, err := c.OpenArrowStream(waitCtx(t), testTable, testSchema)
		require.NoError(t, err)
		require.NoError(t, s.Close())
		select {
		case <-s.Failed():
			t.Fatal("Close is not a failure")
		default:
		}
		assert.NoError(t, s.Err())
	})
}
