// Package bufpool is a bounded pool of byte buffers for gRPC
// (mem.BufferPool) that does not clear what it hands out. The Zerobus client
// frames each batch into its buffers, and the emulator's gRPC server receives
// into them: clearing a buffer that is about to be overwritten whole was a
// memclr per frame on both sides.
package bufpool

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Pool is a mem.BufferPool of byte slices in power-of-two size classes
// from 2 KiB to 16 MiB that keeps at most maxIdle bytes of idle buffers, so
// its memory is bounded whatever the traffic did before. Unlike gRPC's
// public pools, Get does not clear the memory it hands out: gRPC fills
// whatever it takes from a pool before reading it (a DATA frame's payload is
// read into it whole, a message it marshals or joins is written into it),
// and so does every other caller here. Sizes outside the classes are
// allocated and left to the garbage collector, and only buffers of a class's
// exact size are kept.
type Pool struct {
	maxIdle int

	mu   sync.Mutex
	idle int
	free [maxClass + 1][]*[]byte
}

const (
	// minClass is 2 KiB: gRPC returns buffers of 1 KiB or less to no pool
	// (mem.NewBuffer treats them as plain slices), so smaller classes would
	// never be reused.
	minClass = 11
	// maxClass is 16 MiB, above the largest Zerobus frame the client
	// sends (ingest.DefaultMaxFrameBytes).
	maxClass = 24
)

var _ mem.BufferPool = (*Pool)(nil)

// New returns a pool that keeps at most maxIdle bytes of idle buffers.
func New(maxIdle int) *Pool { return &Pool{maxIdle: maxIdle} }

// class returns the size class of a buffer of size bytes, or -1 if it is
// not pooled.
func class(size int) int {
	c := max(bits.Len(uint(size-1)), minClass)
	if size <= 0 || c > maxClass {
		return -1
	}
	return c
}

// Get returns a buffer of length size, not cleared.
func (p *Pool) Get(size int) *[]byte {
	c := class(size)
	if c < 0 {
		b := make([]byte, size)
		return &b
	}
	p.mu.Lock()
	if n := len(p.free[c]); n > 0 {
		b := p.free[c][n-1]
		p.free[c][n-1] = nil
		p.free[c] = p.free[c][:n-1]
		p.idle -= 1 << c
		p.mu.Unlock()
		*b = (*b)[:size]
		return b
	}
	p.mu.Unlock()
	b := make([]byte, size, 1<<c)
	return &b
}

// Put keeps b for reuse unless the pool holds maxIdle bytes already or b is
// not one of its classes.
func (p *Pool) Put(b *[]byte) {
	c := class(cap(*b))
	if c < 0 || cap(*b) != 1<<c {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle+cap(*b) > p.maxIdle {
		return
	}
	p.idle += cap(*b)
	p.free[c] = append(p.free[c], b)
}

// Idle is the bytes of idle buffers the pool holds.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle
}
