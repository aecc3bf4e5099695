package pool_test

import (
	"context"
	"fmt"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

// Example shows the calls an output makes: Connect once, then per batch
// Write (fire-and-forget submit) and Wait (the lane's coalesced confirmation),
// and Close with the close timeout.
func Example() {
	ctx := context.Background()
	opener := ingestfake.NewOpener(ingestfake.Config{AckLatency: time.Millisecond})

	cfg := pool.DefaultConfig()
	cfg.PeakMBps = 150 // 15 KB rows at 10,000 rows/s
	p := pool.New(opener, "main.default.events", ingestfake.TestSchema, cfg, nil)
	fmt.Println("streams:", p.Size())
	if err := p.Connect(ctx); err != nil {
		fmt.Println("connect:", err)
		return
	}

	rec := ingestfake.NewRecord(ingestfake.TestSchema, 3)
	defer rec.Release()
	ticket, err := p.Write(ctx, "", rec)
	if err != nil {
		fmt.Println("write:", err) // nack the batch
		return
	}
	if err := ticket.Wait(ctx); err != nil {
		fmt.Println("not durable:", err) // nack the batch
		return
	}
	fmt.Println("durable rows:", ticket.Span.Rows())

	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fmt.Println("close:", p.Close(closeCtx))
	fmt.Println("opens:", opener.Opens())
	// Output:
	// streams: 2
	// durable rows: 3
	// close: <nil>
	// opens: 2
}
