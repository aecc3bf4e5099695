// Package memlimit sets the Go runtime's soft memory limit from the
// zerobus outputs' own bounds on the data they hold, when the user set none.
//
// Why: the outputs bound their live data (max_in_flight batches of
// messages held by the Benthos engine, plus max_in_flight_bytes of Arrow
// records and IPC frames), but with the collector's default GOGC=100 the
// heap grows to twice the live data before it collects, so the resident
// set was about twice the bound (issue 12: 15 KB rows at 330–413 MiB with
// about 150 MiB live). A soft limit a little above the bound makes the
// collector run before that overshoot instead of after it; below the
// limit nothing changes. It is only ever set when GOMEMLIMIT is unset (a
// user's GOMEMLIMIT, "off" included, always wins) and when nothing else in
// the process set one, and it is logged once by the output that sets it.
package memlimit

import (
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// Base is the share of the process outside the outputs' in-flight data:
// the engine, the input, the runtime's own structures. Measured at about
// 17 MiB of anonymous memory for a one-row run of the binary; the rest is
// headroom for inputs and processors.
const Base = 48 << 20

// PerBatchFactor multiplies a batch's byte bound (batching.byte_size) into
// the memory one batch held by the Benthos engine costs: the batcher adds
// a whole input batch before it checks byte_size, so a batch reaches about
// twice byte_size; and a message built by a mapping holds both its decoded
// value and the serialized bytes the byte_size check made.
const PerBatchFactor = 4

// The limit never goes below floor(live heap): when the process holds
// more than the outputs' estimate (other components, a larger input), the
// collector still gets room to work (at worst as with GOGC=25 plus 32 MiB)
// instead of running without pause at the limit. It is re-read every
// refreshEvery.
var refreshEvery = time.Second

func floor(live int64) int64 { return live + live/4 + 32<<20 }

var (
	mu     sync.Mutex
	shares int64         // the sum of the live reservations
	ours   int64         // the limit this package set; 0 = none
	stop   chan struct{} // stops the refresh loop; nil when not running
)

// Share is the memory an output may hold: maxInFlightBytes of converted
// data plus maxInFlight batches of messages of at most batchBytes each
// (times PerBatchFactor). It is 0, meaning no estimate, when batchBytes is
// 0 (a count-only batching policy does not bound a batch's bytes).
func Share(maxInFlightBytes int64, maxInFlight int, batchBytes int) int64 {
	if batchBytes <= 0 || maxInFlightBytes <= 0 || maxInFlight <= 0 {
		return 0
	}
	return maxInFlightBytes + int64(maxInFlight)*int64(batchBytes)*PerBatchFactor
}

// Reserve adds share to the limit and returns the limit now in force and
// whether this package set it. It sets nothing when share is 0, when
// GOMEMLIMIT is set in the environment, or when something else in the
// process set a limit. The returned release gives the share back (and
// lifts the limit when it was the last); call it once.
func Reserve(share int64) (limit int64, set bool, release func()) {
	mu.Lock()
	defer mu.Unlock()
	cur := debug.SetMemoryLimit(-1)
	if share <= 0 || os.Getenv("GOMEMLIMIT") != "" || (cur != math.MaxInt64 && cur != ours) {
		return cur, false, func() {}
	}
	shares += share
	applyLocked()
	if stop == nil {
		stop = make(chan struct{})
		go refresh(stop, refreshEvery)
	}
	var once sync.Once
	return ours, true, func() {
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			if ours == 0 || debug.SetMemoryLimit(-1) != ours {
				stopLocked() // someone else changed it since: theirs now
				return
			}
			if shares -= share; shares > 0 {
				applyLocked()
				return
			}
			stopLocked()
			debug.SetMemoryLimit(math.MaxInt64)
		})
	}
}

// applyLocked sets the limit to Base + shares, or the floor above the live
// heap when that is higher.
func applyLocked() {
	ours = max(Base+shares, floor(liveHeap()))
	debug.SetMemoryLimit(ours)
}

func stopLocked() {
	if stop != nil {
		close(stop)
		stop = nil
	}
	shares, ours = 0, 0
}

// refresh keeps the limit above the floor as the live heap changes, until
// stopped or until someone else changes the limit.
func refresh(done chan struct{}, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		mu.Lock()
		if stop == done {
			if debug.SetMemoryLimit(-1) != ours {
				stopLocked() // someone else set one: theirs now
			} else {
				applyLocked()
			}
		}
		mu.Unlock()
	}
}

// liveHeap returns the bytes of heap objects marked live by the last
// collection.
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}
