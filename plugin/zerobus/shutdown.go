// The process's shutdown notice: what bounds an output's work once the
// binary received SIGTERM or SIGINT.
//
// Benthos stops a pipeline gracefully first: the inputs stop and the engine
// waits for every batch in flight to be acknowledged or refused, for up to
// three quarters of shutdown_timeout, before it cancels anything. A batch
// the output holds (the table not connected, the streams backing off) or
// whose acks stall would keep the pipeline alive all that time. With the
// notice, the output gives up held batches and the batches in flight
// waiting for their durable ack once close_timeout has passed since the
// notice (nacked: the input redelivers them; not sooner, since a batch
// refused before the engine's input stopped would be retried straight
// back), opens nothing more, and Close fits in what is left: the process
// exits within close_timeout (+ Benthos's own wind-down) in any state.

package zerobus

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// shutdownNotice is done once the process is stopping. Its ctx is an
// ordinary cancel context, so that context.AfterFunc on it (boundedAfter,
// once per batch) registers a callback instead of starting a goroutine.
type shutdownNotice struct {
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	at     time.Time // written before ctx is cancelled
}

func newShutdownNotice() *shutdownNotice {
	ctx, cancel := context.WithCancel(context.Background())
	return &shutdownNotice{ctx: ctx, cancel: cancel}
}

// processShutdown is the notice every output of the process listens to.
var processShutdown = newShutdownNotice()

func (n *shutdownNotice) begin() {
	n.once.Do(func() {
		n.at = time.Now()
		n.cancel()
	})
}

// since returns when the notice came, and whether it came.
func (n *shutdownNotice) since() (time.Time, bool) {
	if n.ctx.Err() == nil {
		return time.Time{}, false
	}
	return n.at, true
}

// BeginShutdown tells every zerobus output of the process that it is
// stopping: held batches and the batches in flight are given up (and
// redelivered by the input) close_timeout from now, nothing more is opened,
// and Close takes what is left of that. Idempotent.
func BeginShutdown() { processShutdown.begin() }

// NotifyShutdownOnSignal calls BeginShutdown when the process receives
// SIGTERM or SIGINT (Benthos receives them too and stops the pipeline). The
// binary calls it before it runs the CLI; stop ends the watch.
func NotifyShutdownOnSignal() (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
			BeginShutdown()
		case <-done:
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
		})
	}
}

// untilShutdown returns ctx, also cancelled when the notice comes.
func (n *shutdownNotice) untilShutdown(ctx context.Context) (context.Context, context.CancelFunc) {
	return n.boundedAfter(ctx, 0)
}

// boundedAfter returns ctx, also cancelled once d has passed since the
// notice.
func (n *shutdownNotice) boundedAfter(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	var timer *time.Timer
	var mu sync.Mutex
	stopped := false
	stop := context.AfterFunc(n.ctx, func() {
		at, _ := n.since()
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			timer = time.AfterFunc(time.Until(at.Add(d)), cancel)
		}
	})
	return ctx, func() {
		stop()
		mu.Lock()
		stopped = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}
