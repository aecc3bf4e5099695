package emulator

import (
	"math/bits"
	"sync"
)

// recvBufferPool is the gRPC server's buffer pool (grpc-go's
// experimental.BufferPool): grpc-go's default pool (mem.DefaultBufferPool,
// buffers in tiers of 256 B, 4, 16 and 32 KB, 1 MB) without the clearing of
// every buffer it hands out. grpc-go fills whatever it takes from the pool
// before reading it (an HTTP/2 DATA frame's payload is read into it whole, a
// message it marshals is appended to it, a message it joins is copied into
// it), and keeps unzeroed pools of its own (internal/mem's
// NewDirtyBinaryTieredBufferPool); the default pool's clearing was a memclr of
// 16 KB per DATA frame received, a tenth of what the emulator spent per
// record batch in --ack-only mode. What is larger than the largest tier is
// allocated and left to the garbage collector.
type recvBufferPool struct {
	tiers [len(recvPoolTierBits)]sync.Pool
}

// recvPoolTierBits are the tiers' sizes, as powers of two, smallest first
// (mem.DefaultBufferPool's).
var recvPoolTierBits = [...]int{8, 12, 14, 15, 20}

// Get returns a buffer of length n whose contents are undefined.
func (p *recvBufferPool) Get(n int) *[]byte {
	need := bits.Len(uint(n - 1)) // the smallest 2^need >= n (64 for n = 0)
	for i, b := range recvPoolTierBits {
		if b >= need {
			if buf, _ := p.tiers[i].Get().(*[]byte); buf != nil {
				*buf = (*buf)[:n]
				return buf
			}
			buf := make([]byte, n, 1<<b)
			return &buf
		}
	}
	buf := make([]byte, n)
	return &buf
}

// Put keeps buf for a Get of at most its capacity, in the largest tier its
// capacity holds; a buffer larger than the largest tier is dropped.
func (p *recvBufferPool) Put(buf *[]byte) {
	c := cap(*buf)
	if c > 1<<recvPoolTierBits[len(recvPoolTierBits)-1] {
		return
	}
	for i := len(recvPoolTierBits) - 1; i >= 0; i-- {
		if c >= 1<<recvPoolTierBits[i] {
			p.tiers[i].Put(buf)
			return
		}
	}
}
