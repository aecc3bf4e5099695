package coverage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
)

const covTable = "main.default.events_zb_coverage"

// sink is a Sink that keeps the rows it was handed, failing with err while
// it is set.
type sink struct {
	mu    sync.Mutex
	err   error
	calls int
	rows  [][2]int64    // (start, end) of every row written
	block chan struct{} // when set, a write waits for it or its ctx
}

func (s *sink) write(ctx context.Context, rows []arrowconv.StructuredRow) error {
	s.mu.Lock()
	s.calls++
	err, block := s.err, s.block
	s.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rows {
		b, err := r.AsBytes()
		if err != nil {
			return err
		}
		var v row
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		if v.WriterID != "w1" || v.Source != "t/0" {
			return errors.New("unexpected row " + string(b))
		}
		s.rows = append(s.rows, [2]int64{v.Start, v.End})
	}
	return nil
}

func (s *sink) fail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

func (s *sink) written() [][2]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][2]int64(nil), s.rows...)
}

func newTestRecorder(t *testing.T, s *sink, log *slog.Logger) *Recorder {
	t.Helper()
	r := NewRecorder(Config{Table: covTable, WriterID: "w1", FlushInterval: time.Hour, FlushRanges: 1 << 30}, s.write, log)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func set(rs ...Range) map[string]*RangeSet {
	var s RangeSet
	for _, r := range rs {
		s.AddRange(r)
	}
	return map[string]*RangeSet{"t/0": &s}
}

// A flush writes, per source, the merged durable ranges that a change
// touched: the rows grow coarser, and the union of all rows is the durable
// set.
func TestRecorderFlushWritesTheMergedRangesThatChanged(t *testing.T) {
	s := &sink{}
	r := newTestRecorder(t, s, nil)
	ctx := context.Background()
	require.NoError(t, r.Flush(ctx), "nothing to write")
	assert.Zero(t, s.calls, "nothing written for nothing")

	r.Durable(set(Range{0, 10}))
	require.NoError(t, r.Flush(ctx))
	r.Durable(set(Range{10, 20}, Range{30, 40}))
	require.NoError(t, r.Flush(ctx))
	r.Durable(set(Range{50, 60}))
	require.NoError(t, r.Flush(ctx))
	assert.Equal(t, [][2]int64{{0, 10}, {0, 20}, {30, 40}, {50, 60}}, s.written())
	assert.Equal(t, []Range{{0, 20}, {30, 40}, {50, 60}}, r.Covered("t/0"))
	assert.Equal(t, int64(4), r.Stats().Written)
}

// A failed coverage write keeps the changes: the next flush writes them.
// The first failure of a run is a warning, the next ones are not repeated
// at that level, and the recovery is said once.
func TestRecorderKeepsChangesAcrossAFailedWrite(t *testing.T) {
	s := &sink{}
	var logs bytes.Buffer
	r := newTestRecorder(t, s, slog.New(slog.NewTextHandler(&logs, nil)))
	ctx := context.Background()
	r.Durable(set(Range{0, 5}))
	require.NoError(t, r.Flush(ctx))

	s.fail(errors.New("coverage endpoint gone"))
	r.Durable(set(Range{5, 8}))
	require.ErrorContains(t, r.Flush(ctx), "coverage endpoint gone")
	require.Error(t, r.Flush(ctx))
	assert.Equal(t, int64(2), r.Stats().Failures)
	assert.Equal(t, 1, r.Stats().Pending)
	assert.Equal(t, 1, strings.Count(logs.String(), "level=WARN"), "one warning for the run of failures:\n%s", logs.String())
	assert.Contains(t, logs.String(), covTable)

	s.fail(nil)
	require.NoError(t, r.Flush(ctx))
	assert.Equal(t, [][2]int64{{0, 5}, {0, 8}}, s.written())
	assert.Equal(t, 0, r.Stats().Pending)
	assert.Contains(t, logs.String(), "written again")
}

// Close gives up a background flush in progress (it never waits out the
// write timeout) and writes the last changes with its own bound.
func TestRecorderCloseCutsABackgroundFlushShort(t *testing.T) {
	s := &sink{block: make(chan struct{})}
	r := NewRecorder(Config{Table: covTable, WriterID: "w1", FlushInterval: time.Millisecond, WriteTimeout: time.Hour}, s.write, nil)
	r.Durable(set(Range{0, 5}))
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.calls > 0
	}, 10*time.Second, time.Millisecond, "the loop flushes")

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := r.Close(ctx)
	assert.Less(t, time.Since(start), 5*time.Second, "close is bounded by its ctx, not the write timeout")
	require.ErrorContains(t, err, "final flush")
	assert.Empty(t, s.written())

	s2 := &sink{}
	r2 := NewRecorder(Config{Table: covTable, WriterID: "w1", FlushInterval: time.Hour}, s2.write, nil)
	r2.Durable(set(Range{0, 5}))
	require.NoError(t, r2.Close(context.Background()))
	assert.Equal(t, [][2]int64{{0, 5}}, s2.written(), "Close's final flush writes the last changes")
}

// A coverage table without the expected columns is refused, naming the
// column and the fix.
func TestCheckColumnsRefusesATableWithoutItsColumns(t *testing.T) {
	err := CheckColumns(covTable, Columns()[:2])
	require.ErrorContains(t, err, "lacks column start BIGINT")
	assert.ErrorContains(t, err, "catalog.provision")
	assert.ErrorContains(t, err, covTable)
	require.NoError(t, CheckColumns(covTable, Columns()))
}

// Rewrite writes the whole durable set again at the next flush, merged:
// what a coverage table created afresh needs.
func TestRecorderRewriteWritesEverythingAgain(t *testing.T) {
	s := &sink{}
	r := newTestRecorder(t, s, nil)
	ctx := context.Background()
	r.Durable(set(Range{0, 10}, Range{20, 30}))
	require.NoError(t, r.Flush(ctx))
	r.Durable(set(Range{10, 15}))
	require.NoError(t, r.Flush(ctx))
	require.NoError(t, r.Flush(ctx), "nothing changed: nothing written")
	assert.Equal(t, [][2]int64{{0, 10}, {20, 30}, {0, 15}}, s.written())

	r.Rewrite()
	require.NoError(t, r.Flush(ctx))
	assert.Equal(t, [][2]int64{{0, 15}, {20, 30}}, s.written()[3:], "every durable range, merged")
}
