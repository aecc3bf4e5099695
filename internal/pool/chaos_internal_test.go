package pool

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// TestChaosPoisonUnderLoad poisons random streams while many writers Write
// and Wait. Whatever fails, a ticket confirms only rows its own stream made
// durable, no span of a stream is confirmed twice, every ticket settles by
// Close, and the pool opens exactly one stream per rebuild.
func TestChaosPoisonUnderLoad(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	o := ingestfake.NewOpener(ingestfake.Config{AckLatency: 200 * time.Microsecond})
	cfg := DefaultConfig()
	cfg.MinStreams, cfg.MaxStreams = 3, 3
	cfg.OpenBackoffInitial, cfg.OpenBackoffMax = time.Millisecond, 2*time.Millisecond
	cfg.RebuildBudget = 1000
	cfg.PickTimeout = 20 * time.Second
	p := New(o, "main.default.chaos", ingestfake.TestSchema, cfg, nil)
	require.NoError(t, p.Connect(ctx))

	type key struct {
		stream ingest.Stream
		span   ingest.Span
	}
	var (
		mu        sync.Mutex
		confirmed = map[key]bool{}
		tickets   []*Ticket
	)
	var ok, failed, writeErrs atomic.Int64
	tick := make(chan struct{}, 1)

	const writers, perWriter = 24, 60
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for range perWriter {
				k := ""
				if rng.IntN(2) == 0 {
					k = fmt.Sprintf("key-%d", rng.IntN(8))
				}
				rec := ingestfake.NewRecord(ingestfake.TestSchema, 1+rng.IntN(4))
				tk, err := p.Write(ctx, k, rec)
				rec.Release()
				if err != nil {
					writeErrs.Add(1)
					continue
				}
				mu.Lock()
				tickets = append(tickets, tk)
				mu.Unlock()
				if err := tk.Wait(ctx); err != nil {
					failed.Add(1)
					continue
				}
				fs := tk.stream.(*ingestfake.Stream)
				assert.GreaterOrEqual(t, fs.Durable(), tk.Span.To, "confirmed beyond the durable ack")
				mu.Lock()
				kk := key{tk.stream, tk.Span}
				assert.False(t, confirmed[kk], "span confirmed twice")
				confirmed[kk] = true
				mu.Unlock()
				if ok.Add(1)%40 == 0 {
					select {
					case tick <- struct{}{}:
					default:
					}
				}
			}
		})
	}

	done, writersDone := make(chan struct{}), make(chan struct{})
	var poisons int
	go func() {
		defer close(done)
		rng := rand.New(rand.NewPCG(seed, 1<<40))
		for {
			select {
			case <-tick:
			case <-writersDone:
				return
			}
			streams := o.Streams()
			s := streams[len(streams)-1-rng.IntN(min(3, len(streams)))]
			if !s.Closed() {
				s.Poison(ingestfake.ErrPoison("chaos"))
				poisons++
			}
			if ok.Load() >= writers*perWriter*3/4 {
				return
			}
		}
	}()
	wg.Wait()
	close(writersDone)
	<-done

	closeCtx, cancelClose := context.WithTimeout(ctx, 20*time.Second)
	defer cancelClose()
	_ = p.Close(closeCtx) // an error only says something was nacked
	for i, tk := range tickets {
		select {
		case <-tk.Done():
		default:
			t.Fatalf("ticket %d unsettled after Close", i)
		}
	}
	st := p.Stats()
	t.Logf("poisons=%d rebuilds=%d opens=%d confirmed=%d failed=%d write errors=%d",
		poisons, st.Rebuilds, st.Opens, ok.Load(), failed.Load(), writeErrs.Load())
	assert.Positive(t, ok.Load())
	assert.Positive(t, st.Rebuilds)
	assert.LessOrEqual(t, st.Opens, int64(p.Size())+st.Rebuilds, "one open per rebuild, no storm")
	assert.Equal(t, st.OpenAttempts, st.Opens)
	assert.Zero(t, o.Live())
}
