package coverage

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
)

// A coverage table created afresh by Close's final flush (it had been
// dropped, and that flush's write re-created it) is given the whole
// durable coverage before Close returns, not only the last changes: the
// Rewrite asked for during the final flush has no flush loop left to run it.
func TestRecorderCloseWritesARewriteAskedForByTheFinalFlush(t *testing.T) {
	s := &sink{}
	var r *Recorder
	var recreate atomic.Bool
	write := func(ctx context.Context, rows []arrowconv.StructuredRow) error {
		err := s.write(ctx, rows)
		if recreate.CompareAndSwap(true, false) {
			r.Rewrite() // this write created the table afresh
		}
		return err
	}
	r = NewRecorder(Config{Table: covTable, WriterID: "w1", FlushInterval: time.Hour, FlushRanges: 1 << 30}, write, nil)
	ctx := context.Background()
	r.Durable(set(Range{0, 10}))
	require.NoError(t, r.Flush(ctx))
	r.Durable(set(Range{20, 30}))

	recreate.Store(true)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, r.Close(cctx))
	assert.Equal(t, [][2]int64{{0, 10}, {20, 30}, {0, 10}, {20, 30}}, s.written(),
		"the final flush's changes, then the whole coverage again")
	assert.Zero(t, r.Stats().Pending)
}
