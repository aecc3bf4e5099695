package bufpool

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The pool keeps at most its idle bound, in power-of-two classes, and
// hands out buffers of the length asked.
func TestBufPoolBounded(t *testing.T) {
	p := New(8 << 20)
	var held []*[]byte
	for range 6 {
		b := p.Get(2<<20 - 100)
		assert.Len(t, *b, 2<<20-100)
		assert.Equal(t, 2<<20, cap(*b))
		held = append(held, b)
	}
	for _, b := range held {
		p.Put(b)
	}
	assert.Equal(t, 8<<20, p.Idle(), "four 2 MiB buffers kept, two dropped")
	odd := make([]byte, 3000)
	p.Put(&odd)
	assert.Equal(t, 8<<20, p.Idle(), "a buffer of no class is not kept")
	huge := p.Get(1<<maxClass + 1)
	assert.Len(t, *huge, 1<<maxClass+1)
	small := p.Get(10)
	assert.Equal(t, 1<<minClass, cap(*small), "small buffers take the smallest class gRPC recycles")
}
