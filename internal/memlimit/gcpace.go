package memlimit

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
)

// HeapFloor is the heap the collector may let garbage fill before it
// collects while the live heap is small (below HeapFloor/2).
//
// Why: the collector's default (GOGC=100) collects whenever the heap
// doubles the live data, and a pipeline of small rows keeps only a few MiB
// live, so it collected every 10–20 ms, each cycle taking one of a small
// machine's two cores for several ms. On the issue 12 pipeline (raw JSON
// rows, 2 cores) that was about a third of the process's CPU and most of
// its gap to the same pipeline into drop. HeapFloor equals Base, the part
// of the soft limit this package already reserves for everything outside
// the outputs' in-flight data, so pacing never lets the heap past memory
// the limit has not already granted; the limit stays the backstop.
const HeapFloor = Base

// maxGCPercent bounds the GC percent pacing sets, however small the live
// heap (a near-empty heap would otherwise ask for tens of thousands).
const maxGCPercent = 1000

// gcPercentFor is the GC percent that puts the collector's heap goal
// (live + live × percent/100) at about HeapFloor, and never below the
// default 100: with live data above HeapFloor/2 the collector runs exactly
// as with GOGC unset.
func gcPercentFor(live int64) int {
	if live <= 0 {
		return maxGCPercent
	}
	f := int64(HeapFloor)
	if v, err := strconv.Atoi(os.Getenv("ZEROBUS_EXP_FLOOR")); err == nil {
		f = int64(v) << 20
	}
	return int(min(max(100*(f-live)/live, 100), maxGCPercent))
}

var (
	paced  int           // the GC percent this package set last; 0 = not pacing
	gcStop chan struct{} // stops the per-cycle hook; nil when not pacing
)

// startPacingLocked begins pacing the collector after each cycle, unless
// it is already, GOGC is set in the environment (the user's choice wins,
// GOGC=100 included), or something else in the process changed the GC
// percent from the default.
func startPacingLocked() {
	if gcStop != nil || os.Getenv("GOGC") != "" || gcPercent() != 100 {
		return
	}
	gcStop = make(chan struct{})
	paceLocked()
	hookNextGC(gcStop)
}

// paceLocked sets the GC percent for the live heap the last collection
// marked; when something else changed the percent since pacing last set
// it, it leaves theirs and stops.
func paceLocked() {
	want := gcPercentFor(liveHeap())
	if paced != 0 && gcPercent() != paced {
		stopPacingLocked()
		return
	}
	debug.SetGCPercent(want)
	paced = want
}

// stopPacingLocked stops pacing and, when the GC percent is still the one
// it set, puts back the default.
func stopPacingLocked() {
	if gcStop == nil {
		return
	}
	close(gcStop)
	gcStop = nil
	if paced != 0 && gcPercent() == paced {
		debug.SetGCPercent(100)
	}
	paced = 0
}

// Pacing reports the GC percent pacing set last, 0 when not pacing.
func Pacing() int {
	mu.Lock()
	defer mu.Unlock()
	return paced
}

// sentinel is an object whose only use is to be collected: its finalizer
// runs once after each collection, re-paces the collector and arms the
// next sentinel. It holds a pointer so that it is not tiny-allocated (a
// finalizer on a tiny object may never run).
type sentinel struct{ _ *byte }

func hookNextGC(done chan struct{}) {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		mu.Lock()
		defer mu.Unlock()
		if gcStop != done {
			return // stopped (and perhaps restarted) since
		}
		paceLocked()
		if gcStop == done {
			hookNextGC(done)
		}
	})
}

// gcPercent is the GC percent in force (the runtime's GOGC), read without
// changing it.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	return int(s[0].Value.Uint64())
}
