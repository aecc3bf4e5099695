package memlimit

import (
	"os"
	"runtime"
	"runtime/debug"
)

// HeapFloor is the heap the collector may let garbage fill before it
// collects while the live heap is small (below HeapFloor/2).
//
// Why: the collector's default (GOGC=100) collects whenever the heap
// doubles the live data, and a pipeline of small rows keeps only 10–20 MiB
// live, so it collected every 10–20 ms, each cycle taking one of a small
// machine's two cores for several ms: on the issue 12 pipelines (2 cores)
// about a fifth of the process's CPU, and the scheduling stalls behind
// much of their gap to the same pipeline into drop.
//
// 40 MiB is the largest floor that kept the default pipeline's peak
// resident set under its 128 MiB target with a margin (BenchmarkPeakRSS:
// 114–121 MiB at 40, 132–136 MiB at 48, 108–112 MiB at 32; the binary's
// own pages are about 60 MiB of it); it is below Base, the part of the
// soft limit this package reserves for everything outside the outputs'
// in-flight data, so pacing never lets the heap past memory the limit has
// not already granted, and the limit stays the backstop.
const HeapFloor = 40 << 20

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
	return int(min(max(100*(HeapFloor-live)/live, 100), maxGCPercent))
}

var (
	paced int    // the GC percent pacing set last; 0 = not pacing
	epoch uint64 // bumped when pacing stops, so the armed cycle hook retires
)

// startPacingLocked begins pacing the collector after each cycle, unless
// it is already, GOGC is set in the environment (the user's choice wins,
// GOGC=100 included), or something else in the process changed the GC
// percent from the default.
func startPacingLocked() {
	if paced != 0 || os.Getenv("GOGC") != "" || gcPercent() != 100 {
		return
	}
	paceLocked()
	hookNextGC(epoch)
}

// paceLocked sets the GC percent for the live heap the last collection
// marked; when something else changed the percent since pacing last set
// it, it leaves theirs and stops.
func paceLocked() {
	if paced != 0 && gcPercent() != paced {
		stopPacingLocked()
		return
	}
	paced = gcPercentFor(liveHeap())
	debug.SetGCPercent(paced)
}

// stopPacingLocked stops pacing and, when the GC percent is still the one
// it set, puts back the default.
func stopPacingLocked() {
	if paced == 0 {
		return
	}
	epoch++
	if gcPercent() == paced {
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

// hookNextGC arms a sentinel for pacing epoch e: after the next
// collection it re-paces and re-arms, unless pacing stopped since.
func hookNextGC(e uint64) {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		mu.Lock()
		defer mu.Unlock()
		if epoch != e || paced == 0 {
			return
		}
		if paceLocked(); paced != 0 {
			hookNextGC(e)
		}
	})
}

// gcPercent is the GC percent in force (the runtime's GOGC), read without
// changing it.
func gcPercent() int { return int(runtimeMetric("/gc/gogc:percent", 100)) }
