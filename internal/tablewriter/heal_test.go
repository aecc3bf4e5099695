package tablewriter

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

var errDenied = &ingest.Error{Class: ingest.FatalConfig, Code: codes.PermissionDenied, Err: errors.New("PERMISSION_DENIED: missing MODIFY")}

// A fatal error on a running stream stops the pool; Write then says
// ErrNotOpen, and the next Open (the engine's reconnect) describes the table
// afresh and writes again on new streams: no restart, nothing acknowledged
// that was not durable.
func TestFatalStreamErrorHealsOnReopen(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, nil, nil)
	require.Empty(t, h.write(t, rows(`{"id":1,"msg":"a"}`)))
	describes := h.cat.Describes()

	for _, s := range h.opener.Streams() {
		s.Poison(errDenied)
	}
	require.Eventually(t, func() bool {
		_, err := h.w.Write(context.Background(), rows(`{"id":2,"msg":"b"}`), nil)
		return errors.Is(err, ErrNotOpen)
	}, 10*time.Second, 10*time.Millisecond, "a stopped pool reports ErrNotOpen")
	_, err := h.w.Write(context.Background(), rows(`{"id":2,"msg":"b"}`), nil)
	require.ErrorIs(t, err, ErrNotOpen, "it stays not open until Open")
	assert.Contains(t, err.Error(), "PERMISSION_DENIED", "the cause is named")

	opensBefore := h.opener.Opens()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	skipWait(h.w)
	require.NoError(t, h.w.Open(ctx))
	assert.Greater(t, h.cat.Describes(), describes, "Open described the table afresh")
	assert.Greater(t, h.opener.Opens(), opensBefore, "new streams were opened")
	require.Empty(t, h.write(t, rows(`{"id":2,"msg":"b"}`)))
}

// Grants that arrive late: the first opens are refused for good
// (PERMISSION_DENIED), Open fails loudly; once the opener accepts, the next
// Open succeeds and rows land — the refused pool is not reused.
func TestOpenRefusedThenGrantedWritesWithoutRestart(t *testing.T) {
	cat := catalogfake.New()
	cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	opener := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true})
	var granted atomic.Bool
	opener.SetOpenHook(func(context.Context, int, string, *arrow.Schema) error {
		if granted.Load() {
			return nil
		}
		return errDenied
	})
	w := New(Config{Table: testTable, Pool: testPoolConfig(), ConnectTimeout: 2 * time.Second}, opener, cat, nil, nil)
	defer w.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for range 3 {
		err := w.Open(ctx)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "PERMISSION_DENIED")
		_, werr := w.Write(ctx, rows(`{"id":1,"msg":"a"}`), nil)
		require.ErrorIs(t, werr, ErrNotOpen)
	}
	granted.Store(true)
	skipWait(w)
	require.NoError(t, w.Open(ctx))
	rowErrs, err := w.Write(ctx, rows(`{"id":1,"msg":"a"}`, `{"id":2,"msg":"b"}`), nil)
	require.NoError(t, err)
	require.Empty(t, rowErrs)
	var n int64
	for _, s := range opener.Streams() {
		for _, r := range s.Records() {
			n += r.NumRows()
		}
	}
	assert.Equal(t, int64(2), n)
}

// After Close, Open and Write report ErrClosed, not ErrNotOpen: there is
// nothing to reconnect to.
func TestClosedWriterStaysClosed(t *testing.T) {
	h := newHarness(t, ingestfake.Config{}, nil, nil)
	require.NoError(t, h.w.Close(context.Background()))
	_, err := h.w.Write(context.Background(), rows(`{"id":1}`), nil)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, h.w.Open(context.Background()), ErrClosed)
}

// Without provisioning, a column added to the table while the pipeline runs
// is picked up: the first row failing on it triggers a re-describe (at most
// once per interval), the streams reopen on the new schema and the rows land.
func TestUnknownFieldRefreshesSchemaWithoutProvisioning(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, func(c *Config) { c.SchemaRefreshInterval = time.Hour }, nil)
	failed := h.write(t, rows(`{"id":1,"msg":"a","region":"eu"}`))
	require.Len(t, failed, 1, "the table has no region column yet")
	assert.Contains(t, failed[0], "region")
	describes := h.cat.Describes()

	h.cat.Put(testTable, "id BIGINT NOT NULL, msg STRING, region STRING", nil)
	failed = h.write(t, rows(`{"id":2,"msg":"b","region":"eu"}`))
	require.Len(t, failed, 1, "within the interval the table is not described again")
	assert.Equal(t, describes, h.cat.Describes())

	h.w.schema.mu.Lock()
	h.w.schema.lastRefresh = time.Time{} // the interval has passed
	h.w.schema.mu.Unlock()
	require.Empty(t, h.write(t, rows(`{"id":3,"msg":"c","region":"eu"}`)))
	assert.Equal(t, describes+1, h.cat.Describes())
	vals, _ := submittedColumn(t, h.opener, "region")
	assert.Equal(t, []string{"eu"}, vals)
}

// Close is bounded: rows not durable by its deadline fail their writes
// (never acknowledged) and the count is known.
func TestCloseNacksWhatIsNotDurable(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true}, nil, nil)
	done := make(chan error, 1)
	go func() {
		_, err := h.w.Write(context.Background(), rows(`{"id":1,"msg":"a"}`, `{"id":2,"msg":"b"}`, `{"id":3,"msg":"c"}`), nil)
		done <- err
	}()
	require.Eventually(t, func() bool {
		for _, s := range h.opener.Streams() {
			if s.Submitted() > 0 {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)
	st := h.w.st.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_ = h.w.Close(ctx)
	assert.Less(t, time.Since(start), 3*time.Second, "close is bounded")
	require.Error(t, <-done, "the write was nacked, never acknowledged")
	assert.Equal(t, uint64(3), st.pool.Stats().NackedAtClose)
}
