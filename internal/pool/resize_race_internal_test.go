package pool

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// TestHealthAndWriteWhileTheSizerResizes reads the pool's health and writes
// while extras join and leave: the members list is the sizer's to change,
// and nothing may read it without the pool's lock (run with -race).
func TestHealthAndWriteWhileTheSizerResizes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := ingestfake.NewOpener(ingestfake.Config{})
	cfg := sizingConfig(4)
	cfg.PickTimeout = 10 * time.Second
	p := New(o, "main.default.resize", ingestfake.TestSchema, cfg, nil)
	require.NoError(t, p.Connect(ctx))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				p.resize(Decision{Action: Grow, Reason: "test"})
			} else {
				p.resize(Decision{Action: Shrink, Reason: "test"})
			}
			time.Sleep(time.Millisecond)
		}
	})
	for range 300 {
		_ = p.Health()
		tk, err := p.Write(ctx, "", ingestfake.NewRecord(ingestfake.TestSchema, 1))
		if err == nil {
			require.NoError(t, tk.Wait(ctx))
		}
	}
	close(stop)
	wg.Wait()
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	require.NoError(t, p.Close(cctx))
}
