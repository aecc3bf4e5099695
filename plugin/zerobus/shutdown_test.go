package zerobus

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// Once the process is stopping, a batch waiting for a stalled ack is nacked
// when close_timeout has passed since the notice, a held batch (the table
// not connected) is refused instead of held (here at once: close_timeout
// has passed), and Connect opens nothing more.
func TestShutdownBoundsWritesAndRefusesHeldBatches(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true}, "close_timeout: 300ms\n", nil)
	h.out.shutdown = newShutdownNotice()
	h.connect(t)
	done := writeAsync(context.Background(), h.out, msgs(`{"id":1}`, `{"id":2}`))
	waitSubmitted(t, h.opener, 1)

	h.out.shutdown.begin()
	begun := time.Now()
	select {
	case err := <-done:
		require.Error(t, err, "not durable: nacked, never acked")
		assert.Less(t, time.Since(begun), 2*time.Second)
		assert.GreaterOrEqual(t, time.Since(begun), 250*time.Millisecond, "it waited for its ack until close_timeout")
	case <-time.After(5 * time.Second):
		t.Fatal("the stalled batch was not nacked after close_timeout")
	}

	// The streams stop for good: the next batch would be held, but the
	// process is stopping, so it is refused (and counted).
	for _, s := range h.opener.Streams() {
		s.Poison(&ingest.Error{Class: ingest.FatalConfig, Err: errors.New("PERMISSION_DENIED")})
	}
	require.Eventually(t, func() bool {
		err := h.out.WriteBatch(context.Background(), msgs(`{"id":3}`))
		return err != nil && !errors.Is(err, service.ErrNotConnected)
	}, 10*time.Second, 10*time.Millisecond)
	opens := h.opener.OpenAttempts()
	require.NoError(t, h.out.Connect(context.Background()), "stopping: the engine is let through to WriteBatch")
	assert.Equal(t, opens, h.opener.OpenAttempts(), "nothing is opened once stopping")
	assert.GreaterOrEqual(t, h.out.tally.notDelivered(), int64(3), "the rows not delivered are counted for Close's line")
}

// A batch split over streams (ordering_key) whose one part is durable and
// whose other parts are still waiting for their acks when the shutdown bound
// passes fails only those other rows, as table failures: the line Close
// writes counts them among the rows not delivered (the input redelivers
// them), and only them.
func TestShutdownCountsRowsOfAPartlyDurableBatch(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true, KeepRecords: true}, "close_timeout: 300ms\nordering_key: ${! this.msg }\nstreams:\n  min: 4\n", nil)
	h.out.shutdown = newShutdownNotice()
	h.connect(t)
	var bodies []string
	for i := 0; i < 12; i++ {
		bodies = append(bodies, `{"id":`+itoa(int64(i))+`,"msg":"k`+itoa(int64(i%6))+`"}`)
	}
	done := writeAsync(context.Background(), h.out, msgs(bodies...))
	waitSubmitted(t, h.opener, 12)

	// Ack one stream that holds rows; the others stall.
	var acked uint64
	for _, s := range h.opener.Streams() {
		if n := s.Submitted(); n > 0 {
			s.AckAll()
			acked = n
			break
		}
	}
	require.Positive(t, acked)
	require.Less(t, acked, uint64(12), "the batch spans more than one stream")
	h.out.shutdown.begin()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the partly durable batch was not failed after close_timeout")
	}
	var berr *service.BatchError
	require.ErrorAs(t, err, &berr, "part of the batch is durable: only the rest fails")
	assert.Equal(t, int(12-acked), berr.IndexedErrors())
	tt := h.out.tally.tables[testTable]
	require.NotNil(t, tt)
	assert.Equal(t, int64(12-acked), tt.unconfirmed, "the rows failed at the shutdown bound are counted, the durable ones are not")
	assert.Equal(t, int64(acked), tt.delivered, "the durable part of the batch is counted delivered")
	assert.Equal(t, int64(1), tt.batches)
}

// logCapture is an output logger whose lines a test reads back.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *logCapture) lines(substr string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range strings.Split(c.buf.String(), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// newLoggedOutput is an output over a fake opener and catalog whose log a
// test reads, with its own shutdown notice; it is not connected.
func newLoggedOutput(t *testing.T, fc ingestfake.Config, extraYAML string) (*output, *ingestfake.Opener, *logCapture) {
	t.Helper()
	cfg, err := parseYAML(t, minimalYAML+extraYAML)
	require.NoError(t, err)
	cat := catalogfake.New()
	cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	logs := &logCapture{}
	log := service.NewLoggerFromSlog(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	opener := ingestfake.NewOpener(fc)
	o, err := newOutput(cfg, service.MockResources(service.MockResourcesOptUseLogger(log)), deps{opener: opener, catalog: cat})
	require.NoError(t, err)
	o.shutdown = newShutdownNotice()
	return o, opener, logs
}

// The outage of issue 35: the table never connected, a batch held, SIGTERM.
// Close's line says that no row was delivered and that the held rows were
// handed back, with their number, never that every row was delivered.
func TestShutdownCloseLineAfterAnOutageCountsHeldRows(t *testing.T) {
	o, _, logs := newLoggedOutput(t, ingestfake.Config{}, "close_timeout: 100ms\n")
	o.shutdown.begin()
	err := o.WriteBatch(context.Background(), msgs(`{"id":1}`, `{"id":2}`, `{"id":3}`, `{"id":4}`))
	require.Error(t, err, "held while stopping: nacked")
	require.NotErrorIs(t, err, service.ErrNotConnected, "not held again: the engine would keep it")
	require.NoError(t, o.Close(context.Background()))

	closed := logs.lines("zerobus: closed")
	require.Len(t, closed, 1, "one close line")
	assert.Contains(t, closed[0], "level=WARN")
	assert.Contains(t, closed[0], "main.default.events: 0 rows delivered, 4 rows not delivered (4 held and never sent, the table not connected; 1 batch) handed back to the input, nacked: it redelivers them")
	assert.NotContains(t, closed[0], "every row")
}

// A connected output stopping: the rows acknowledged are counted delivered,
// the batch whose acks stalled past close_timeout handed back as sent but
// not confirmed; with nothing handed back the line says so, at info.
func TestShutdownCloseLineCountsDeliveredAndUnconfirmedRows(t *testing.T) {
	for _, stall := range []bool{false, true} {
		t.Run(map[bool]string{false: "all acked", true: "acks stalled"}[stall], func(t *testing.T) {
			o, opener, logs := newLoggedOutput(t, ingestfake.Config{ManualAck: true}, "close_timeout: 200ms\n")
			h := &harness{out: o, opener: opener}
			h.connect(t)
			done := writeAsync(context.Background(), o, msgs(`{"id":1}`, `{"id":2}`))
			waitSubmitted(t, opener, 2)
			for _, s := range opener.Streams() {
				s.AckAll()
			}
			require.NoError(t, <-done)
			if stall {
				done = writeAsync(context.Background(), o, msgs(`{"id":3}`, `{"id":4}`, `{"id":5}`))
				waitSubmitted(t, opener, 5)
			}
			o.shutdown.begin()
			if stall {
				require.Error(t, <-done, "not durable within close_timeout: nacked")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = o.Close(ctx)
			_ = o.Close(ctx)

			closed := logs.lines("zerobus: closed")
			require.Len(t, closed, 1, "one close line, however often Close is called")
			if !stall {
				assert.Contains(t, closed[0], "level=INFO")
				assert.Contains(t, closed[0], "zerobus: closed; main.default.events: 2 rows delivered, none handed back")
				return
			}
			assert.Contains(t, closed[0], "level=WARN")
			assert.Contains(t, closed[0], "main.default.events: 2 rows delivered, 3 rows not delivered (3 sent but not confirmed durable within close_timeout; 1 batch) handed back to the input, nacked: it redelivers them")
		})
	}
}

// With an interpolated table the line names each table the rows were meant
// for, those of held batches too (their table evaluated for the count).
func TestShutdownCloseLineCountsPerTable(t *testing.T) {
	o, _, logs := newLoggedOutput(t, ingestfake.Config{}, "close_timeout: 100ms\n")
	interp, err := service.NewInterpolatedString(`main.default.${! this.t }`)
	require.NoError(t, err)
	o.cfg.TableInterp, o.cfg.Table = interp, "main.default.${! this.t }"
	o.shutdown.begin()
	require.Error(t, o.WriteBatch(context.Background(), msgs(`{"id":1,"t":"b"}`, `{"id":2,"t":"a"}`, `{"id":3,"t":"b"}`)))
	require.NoError(t, o.Close(context.Background()))
	closed := logs.lines("zerobus: closed")
	require.Len(t, closed, 1)
	assert.Contains(t, closed[0], "main.default.a: 0 rows delivered, 1 row not delivered (1 held and never sent, the table not connected; 1 batch) handed back to the input, nacked: it redelivers them; main.default.b: 0 rows delivered, 2 rows not delivered (2 held and never sent")
}

// The tally's line: tables by name, held and unconfirmed rows apart, the
// batches counted; handedBack only when a row was.
func TestDeliveryTallyLine(t *testing.T) {
	var tally deliveryTally
	line, back := tally.line()
	assert.False(t, back)
	assert.Equal(t, "zerobus: closed; no row reached any table's writer: none delivered, none handed back", line)

	tally.seen("c.d.quiet")
	tally.delivered(map[string]int{"a.b.two": 7})
	tally.delivered(map[string]int{"a.b.two": 3, "a.b.one": 1})
	line, back = tally.line()
	assert.False(t, back)
	assert.Equal(t, "zerobus: closed; a.b.one: 1 row delivered, none handed back; a.b.two: 10 rows delivered, none handed back; c.d.quiet: 0 rows delivered, none handed back", line)

	tally.handedBack(map[string]int{"a.b.two": 4}, true)
	tally.handedBack(map[string]int{"a.b.two": 5}, false)
	tally.handedBack(map[string]int{"c.d.quiet": 1}, false)
	line, back = tally.line()
	assert.True(t, back)
	assert.Equal(t, "zerobus: closed; a.b.one: 1 row delivered, none handed back; "+
		"a.b.two: 10 rows delivered, 9 rows not delivered (4 held and never sent, the table not connected, 5 sent but not confirmed durable within close_timeout; 2 batches) handed back to the input, nacked: it redelivers them; "+
		"c.d.quiet: 0 rows delivered, 1 row not delivered (1 sent but not confirmed durable within close_timeout; 1 batch) handed back to the input, nacked: it redelivers them", line)
	assert.Equal(t, int64(10), tally.notDelivered())

	// Rows refused alone (they did not fit, no dead-letter table) are not
	// delivered either, and say so.
	tally.refused(map[string]int{"a.b.one": 2})
	line, back = tally.line()
	assert.True(t, back)
	assert.Contains(t, line, "a.b.one: 1 row delivered, 2 rows not delivered (2 refused alone, not fitting the table or failed by a processor, with no dead-letter table) handed back to the input")
	assert.Equal(t, int64(12), tally.notDelivered())
}

// SIGTERM while Connect waits out the writer's back-off (the same cause
// again, as minutes into an outage): Connect returns nil at once, saying
// the output never connected, so the engine hands its held batches back to
// WriteBatch, not the back-off error, which the engine would sleep (up to a
// minute) past its forced stop, the held rows never handed back and the
// close line counting none of them.
func TestShutdownEndsConnectsWaitInTheHandBack(t *testing.T) {
	o, opener, logs := newLoggedOutput(t, ingestfake.Config{}, "close_timeout: 100ms\n")
	opener.SetOpenHook(func(context.Context, int, string, *arrow.Schema) error {
		return &ingest.Error{Class: ingest.FatalConfig, Code: codes.PermissionDenied, Err: errors.New("User does not have MODIFY on Table 'main.default.events'")}
	})
	var bo *service.ErrBackOff
	require.ErrorAs(t, o.Connect(context.Background()), &bo, "the first failure of a cause goes to the engine")

	done := make(chan error, 1)
	go func() { done <- o.Connect(context.Background()) }()
	time.Sleep(150 * time.Millisecond) // waiting in Connect: the same cause
	o.shutdown.begin()
	begun := time.Now()
	select {
	case err := <-done:
		require.NoError(t, err, "nil: the engine hands its held batches back")
		assert.Less(t, time.Since(begun), 500*time.Millisecond)
	case <-time.After(5 * time.Second):
		t.Fatal("Connect kept waiting after the notice")
	}
	lines := logs.lines("stopping before table main.default.events ever connected")
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0], "being handed back to the input now")
	assert.Contains(t, lines[0], `The engine's next line, \"Output type zerobus is now active\", marks only that hand-back: the output never connected`)

	// The held batch comes back, is nacked and counted.
	require.Error(t, o.WriteBatch(context.Background(), msgs(`{"id":1}`, `{"id":2}`)))
	require.NoError(t, o.Connect(context.Background()), "still nil, the line not repeated")
	_ = o.Close(context.Background())
	assert.Len(t, logs.lines("ever connected"), 1)
	closed := logs.lines("zerobus: closed")
	require.Len(t, closed, 1)
	assert.Contains(t, closed[0], "main.default.events: 0 rows delivered, 2 rows not delivered (2 held and never sent")
}
