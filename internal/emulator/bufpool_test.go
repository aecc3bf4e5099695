package emulator

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// recvBufferPool hands out buffers of the length asked for, reuses a
// returned one for a Get its capacity holds, and never one too small.
func TestRecvBufferPool(t *testing.T) {
	var p recvBufferPool
	for _, n := range []int{0, 1, 256, 257, 4096, 16384, 20000, 1 << 20, 1<<20 + 1} {
		b := p.Get(n)
		assert.Len(t, *b, n)
		p.Put(b)
	}
	// A buffer whose capacity lies between tiers serves the lower tier.
	odd := make([]byte, 10, 20000)
	p.Put(&odd)
	reused := false
	for range 20 { // sync.Pool may drop what it holds
		b := p.Get(16384)
		assert.Len(t, *b, 16384)
		assert.GreaterOrEqual(t, cap(*b), 16384)
		if cap(*b) == 20000 {
			reused = true
			break
		}
		p.Put(&odd)
	}
	assert.True(t, reused, "a returned buffer is reused")
	// Nothing larger than the largest tier is kept.
	huge := make([]byte, 2<<20)
	p.Put(&huge)
	assert.NotEqual(t, 2<<20, cap(*p.Get(1 << 20)))
}
