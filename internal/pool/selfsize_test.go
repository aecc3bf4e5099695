package pool_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

// The self-sizing pool against the emulator over real sockets, its streams
// held to a small per-stream quota so that a few seconds show it.

const quotaTable = "main.default.quota"

var quotaSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.LargeString, Nullable: true},
}, nil)

func quotaBatch(from, n int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, quotaSchema)
	defer b.Release()
	for i := from; i < from+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(i)
		b.Field(1).(*array.LargeStringBuilder).Append("row-" + strconv.FormatInt(i, 10))
	}
	return b.NewRecordBatch()
}

// sizeObserver records the pool's size metrics.
type sizeObserver struct {
	mu      sync.Mutex
	open    []int
	resizes map[string]int
}

func (o *sizeObserver) StreamObserver(string, int) acklane.Observer { return nil }
func (o *sizeObserver) IncRebuild(string, int)                      {}
func (o *sizeObserver) IncConcurrencyReject(string, int)            {}
func (o *sizeObserver) StreamsOpen(_ string, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.open = append(o.open, n)
}
func (o *sizeObserver) IncResize(_ string, dir string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.resizes == nil {
		o.resizes = map[string]int{}
	}
	o.resizes[dir]++
}

func (o *sizeObserver) counts() (maxOpen int, resizes map[string]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, n := range o.open {
		maxOpen = max(maxOpen, n)
	}
	out := map[string]int{}
	for k, v := range o.resizes {
		out[k] = v
	}
	return maxOpen, out
}

// quotaPool starts an emulator with faults and a self-sizing pool on it
// (base 2, max 5, the quota as its assumed per-stream rows/s, one change a
// second at most, extras retired after a second without saturation).
func quotaPool(t *testing.T, faults emulator.Faults, obs pool.Observer) (*emulator.Server, *pool.Pool, context.Context) {
	t.Helper()
	srv, err := emulator.Start(emulator.Config{
		HTTPAddr: "127.0.0.1:0",
		GRPCAddr: "127.0.0.1:0",
		DataDir:  t.TempDir(),
		Tables:   []string{quotaTable + ":id BIGINT NOT NULL, name STRING"},
		Faults:   faults,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	client, err := ingest.NewClient(ingest.Config{
		Endpoint:     srv.GRPCURL(),
		WorkspaceURL: srv.HTTPURL(),
		ClientID:     emulator.DefaultClientID,
		ClientSecret: emulator.DefaultClientSecret,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })

	cfg := pool.DefaultConfig()
	cfg.MinStreams, cfg.MaxStreams = 2, 5
	cfg.PerStreamRowsPerSec = float64(faults.StreamMaxRowsPerSec) // the workspace's quota, as configured
	cfg.GrowInterval, cfg.ShrinkAfter = time.Second, time.Second
	p := pool.New(client, quotaTable, quotaSchema, cfg, obs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	require.NoError(t, p.Connect(ctx))
	require.Equal(t, 2, p.Size())
	return srv, p, ctx
}

// load runs writers that each write 200-row batches (ids from next) and
// wait for them to be durable, until stop is closed; it returns the rows
// confirmed and the first error, when a write failed.
func load(ctx context.Context, p *pool.Pool, writers int, next *atomic.Int64, stop <-chan struct{}) (confirmed int64, firstErr error) {
	const per = 200
	var (
		wg   sync.WaitGroup
		n    atomic.Int64
		errs = make(chan error, writers)
	)
	for range writers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				from := next.Add(per) - per
				rec := quotaBatch(from, per)
				tk, err := p.Write(ctx, "", rec)
				rec.Release()
				if err == nil {
					err = tk.Wait(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
				n.Add(per)
			}
		})
	}
	wg.Wait()
	close(errs)
	return n.Load(), <-errs
}

func TestPoolGrowsUnderAQuotaAndShrinksAfterTheLoad(t *testing.T) {
	const quota = 2000 // rows/s per stream
	obs := &sizeObserver{}
	srv, p, ctx := quotaPool(t, emulator.Faults{StreamMaxRowsPerSec: quota}, obs)

	// 24 writers of 200-row batches, each waiting for its rows to be
	// durable before the next: 4,800 rows in flight, more than two
	// streams carry in a second, so rows queue in front of them.
	var (
		next      atomic.Int64
		maxSize   atomic.Int64
		stop      = make(chan struct{})
		done      = make(chan struct{})
		confirmed int64
		loadErr   error
	)
	go func() {
		defer close(done)
		confirmed, loadErr = load(ctx, p, 24, &next, stop)
	}()
	grew := assert.Eventually(t, func() bool {
		n := p.Size()
		if int64(n) > maxSize.Load() {
			maxSize.Store(int64(n))
		}
		return n >= 3
	}, 15*time.Second, 50*time.Millisecond, "the pool grows past its base under the quota")
	// Keep the load on a little longer, then stop it.
	time.Sleep(2 * time.Second)
	close(stop)
	<-done
	maxSize.Store(max(maxSize.Load(), int64(p.Size())))
	require.True(t, grew)
	require.NoError(t, loadErr, "no write failed")

	assert.Eventually(t, func() bool { return p.Size() == 2 }, 15*time.Second, 50*time.Millisecond,
		"the extras are retired once the load is gone")
	require.NoError(t, p.Close(ctx))

	// Every confirmed row is in the table exactly once.
	sent := next.Load() // ids [0, sent) were taken; the confirmed ones are durable
	rows, err := srv.TableRows(quotaTable, 0)
	require.NoError(t, err)
	seen := make(map[int64]int, len(rows))
	for _, r := range rows {
		id, ok := r["id"].(int64)
		require.True(t, ok, "id %T", r["id"])
		seen[id]++
	}
	for id, n := range seen {
		require.Equal(t, 1, n, "row %d stored %d times", id, n)
		require.Less(t, id, sent)
	}
	assert.EqualValues(t, confirmed, len(seen), "every confirmed row landed, once")

	var grows, shrinks int
	for _, c := range p.SizeChanges() {
		t.Logf("%s: %d → %d: %s", c.At.Format("15:04:05.000"), c.From, c.To, c.Reason)
		switch {
		case c.To > c.From:
			grows++
		case c.To < c.From:
			shrinks++
		}
	}
	assert.Positive(t, grows)
	assert.Equal(t, grows, shrinks, "each extra was retired")
	maxOpen, resizes := obs.counts()
	assert.Equal(t, grows, resizes["grow"])
	assert.Equal(t, shrinks, resizes["shrink"])
	assert.GreaterOrEqual(t, maxOpen, 3, "zerobus_streams_open saw the extras")
	st := srv.Stats().Tables[quotaTable]
	assert.Zero(t, st.StreamsRejected)
	t.Logf("max size %d, %d rows confirmed, %d streams opened", maxSize.Load(), confirmed, st.StreamsOpened)
	for _, s := range st.Streams {
		t.Logf("stream %d: %d rows, %.0f rows/s, throttled %d ms", s.ID, s.Rows, s.RowsPerSec, s.ThrottledMS)
	}
}

func TestPoolDoesNotGrowOnConcurrencyRejects(t *testing.T) {
	// The table admits two streams: the pool's base. Saturated, the pool
	// tries one extra, which is refused; the refusal holds growth, so over
	// several grow intervals the table sees that one refused open only,
	// and the writes never notice.
	const quota = 2000
	srv, p, ctx := quotaPool(t, emulator.Faults{StreamMaxRowsPerSec: quota, MaxStreamsPerTable: 2}, nil)
	var next atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	var loadErr error
	go func() {
		defer close(done)
		_, loadErr = load(ctx, p, 24, &next, stop)
	}()
	assert.Eventually(t, func() bool { return srv.Stats().Tables[quotaTable].StreamsRejected > 0 }, 15*time.Second, 50*time.Millisecond,
		"the saturated pool asks for an extra stream")
	// Four more grow intervals under the same saturation.
	time.Sleep(4 * time.Second)
	close(stop)
	<-done
	require.NoError(t, loadErr, "the refused extra cost no write")
	st := srv.Stats().Tables[quotaTable]
	assert.EqualValues(t, 1, st.StreamsRejected, "one refused open holds growth: no storm")
	assert.Equal(t, 2, p.Size())
	var grew, failed int
	for _, c := range p.SizeChanges() {
		t.Logf("%d → %d: %s", c.From, c.To, c.Reason)
		if c.To > c.From {
			grew++
		} else {
			failed++
		}
	}
	assert.Equal(t, 1, grew)
	assert.Equal(t, 1, failed, "the refused extra left")
	assert.EqualValues(t, 1, p.Stats().ConcurrencyRejects)
}
