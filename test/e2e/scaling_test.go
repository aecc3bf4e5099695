package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

// TestThreeInstancesShareATableCappedAtEightStreams runs three pipelines
// ("instances", as three pods of one Deployment would be) into one table
// that admits 8 concurrent streams, each writing 150,000 rows of its own,
// with self-sizing on (the default) and the emulator holding each stream
// to 20,000 rows/s, so that every instance's pool wants more streams than
// the table has left. Every row lands exactly once, and the refused opens
// stay few: an instance whose extra stream is refused holds its growth,
// and a refused base stream backs off (the anti-storm rule).
func TestThreeInstancesShareATableCappedAtEightStreams(t *testing.T) {
	t.Parallel()
	const (
		instances = 3
		perInst   = 150_000
		batch     = 1000
	)
	srv := startEmulator(t, emulator.Faults{MaxStreamsPerTable: 8, StreamMaxRowsPerSec: 20_000, AckOnly: false},
		smallTable+":"+smallCols)

	type inst struct {
		produce service.MessageBatchHandlerFunc
		ctx     context.Context
		stop    func() error
	}
	var all []inst
	for range instances {
		// The workspace's quota, as its user configures it (below it the
		// pool counts a stream saturated and grows).
		produce, ctx, stop := startProducer(t, newStream(t, outputYAML(srv, smallTable, "streams:\n  per_stream_rows_per_sec: 20000\n")))
		all = append(all, inst{produce, ctx, stop})
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, instances*perInst/batch)
	for i, in := range all {
		wg.Go(func() {
			// Sixteen writers per instance, each waiting for its batch to be
			// acknowledged (durable) before the next, as an input would.
			var w sync.WaitGroup
			next := make(chan int)
			for range 16 {
				w.Go(func() {
					for lo := range next {
						var b service.MessageBatch
						for id := lo; id < lo+batch; id++ {
							b = append(b, service.NewMessage(fmt.Appendf(nil, `{"id":%d,"msg":"m"}`, id)))
						}
						if err := in.produce(in.ctx, b); err != nil {
							errs <- fmt.Errorf("instance %d rows [%d,%d): %w", i, lo, lo+batch, err)
						}
					}
				})
			}
			for lo := i * perInst; lo < (i+1)*perInst; lo += batch {
				next <- lo
			}
			close(next)
			w.Wait()
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		t.Error(err) // a batch the pipeline could not deliver: none should be
	}
	for i, in := range all {
		require.NoError(t, in.stop(), "instance %d stops cleanly", i)
	}

	rows, err := srv.TableRows(smallTable, 0)
	require.NoError(t, err)
	seen := make(map[int64]int, len(rows))
	for _, r := range rows {
		id, ok := asInt64(r["id"])
		require.True(t, ok, "row without an integer id: %v", r)
		seen[id]++
	}
	dups := 0
	for _, n := range seen {
		if n > 1 {
			dups++
		}
	}
	missing := 0
	for id := range instances * perInst {
		if seen[int64(id)] == 0 {
			missing++
		}
	}
	st := srv.Stats().Tables[smallTable]
	t.Logf("%d rows from %d instances in %s: %d stored, %d distinct; streams opened %d, refused %d, at most %d at once",
		instances*perInst, instances, took.Round(time.Millisecond), len(rows), len(seen), st.StreamsOpened, st.StreamsRejected, st.MaxConcurrentStreams)
	assert.Zero(t, missing, "every row lands")
	assert.Zero(t, dups, "no row lands twice")
	assert.Len(t, rows, instances*perInst)
	assert.LessOrEqual(t, st.MaxConcurrentStreams, int64(8), "the cap held")
	assert.Less(t, st.StreamsRejected, int64(30), "refused opens stay few: no storm")
	// Whether the pools reached the cap depends on how fast this machine
	// feeds them (TestPoolGrowsUnderAQuotaAndShrinksAfterTheLoad proves the
	// growth); the log says how far they went.
	if st.MaxConcurrentStreams <= int64(2*instances) {
		t.Logf("the pools did not grow past their base this time")
	}
}
