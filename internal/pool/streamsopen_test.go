package pool_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

// A closed pool reports no stream open: the gauge of a writer closed (or
// evicted by the router) does not stay at its last value.
func TestClosedPoolReportsNoStreamOpen(t *testing.T) {
	ctx := testCtx(t)
	obs := &sizeObserver{}
	p := pool.New(ingestfake.NewOpener(ingestfake.Config{}), table, ingestfake.TestSchema, fastConfig(2), obs)
	require.NoError(t, p.Connect(ctx))
	require.Eventually(t, func() bool { n, _ := obs.counts(); return n == 2 }, 10*time.Second, 5*time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, p.Close(cctx))
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Equal(t, 0, obs.open[len(obs.open)-1], "streams open after Close: %v", obs.open)
}
