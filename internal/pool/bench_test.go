package pool_test

import (
	"context"
	"testing"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

// BenchmarkWriteWait measures the pool's own cost per batch (pick, submit to
// a fake, enqueue, coalesced confirm) with many concurrent writers, at zero
// and at 5 ms ack latency: with pipelining, latency should barely move it.
func BenchmarkWriteWait(b *testing.B) {
	for _, latency := range []time.Duration{0, 5 * time.Millisecond} {
		b.Run("ack latency "+latency.String(), func(b *testing.B) {
			ctx := context.Background()
			o := ingestfake.NewOpener(ingestfake.Config{AckLatency: latency})
			p := pool.New(o, table, ingestfake.TestSchema, fastConfig(2), nil)
			if err := p.Connect(ctx); err != nil {
				b.Fatal(err)
			}
			rec := ingestfake.NewRecord(ingestfake.TestSchema, 100)
			defer rec.Release()
			b.SetParallelism(32) // 32 × GOMAXPROCS writers, like max_in_flight
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tk, err := p.Write(ctx, "", rec)
					if err != nil {
						b.Error(err)
						return
					}
					if err := tk.Wait(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			if err := p.Close(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}
