package arrowconv

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Column storage is recycled across batches. Each Convert call fills plain Go
// slices taken from buffers and hands them to the record as Arrow buffers
// whose allocator is buffers: when the caller releases the record (and every
// slice of it), Arrow calls Free and the storage goes back to the pool for the
// next batch, instead of each batch allocating (and zeroing, and the GC later
// sweeping) its megabytes afresh. A record that is never released is simply
// collected. Storage is pooled in power-of-two size classes through sync.Pool,
// so it is safe for concurrent Convert calls and what the pipeline stops
// using is given back to the GC within two collections: the pool holds no
// memory that no batch needs.
var buffers bufPool

const (
	// minPoolShift is the smallest pooled class, 4 KiB: smaller buffers cost
	// less to allocate than to pool.
	minPoolShift = 12
	// poolClasses pooled classes reach 4 KiB << 19 = 2 GiB.
	poolClasses = 20
)

// bufPool is a memory.Allocator over size-classed sync.Pools of byte slices.
type bufPool struct {
	classes [poolClasses]sync.Pool // of *[]byte, class k holding cap >= 4 KiB << k
	boxes   sync.Pool              // spare *[]byte, so that Free does not allocate
	freed   atomic.Int64           // bytes of storage given back, for tests
}

var _ memory.Allocator = (*bufPool)(nil)

// get returns an empty slice with capacity at least n, recycled when the pool
// has one.
func (p *bufPool) get(n int) []byte {
	if n <= 0 {
		return nil
	}
	k := max(bits.Len(uint(n-1)), minPoolShift) - minPoolShift // ceil(log2 n), from 4 KiB
	if k >= poolClasses {
		return make([]byte, 0, n)
	}
	if v := p.classes[k].Get(); v != nil {
		bp := v.(*[]byte)
		b := *bp
		*bp = nil
		p.boxes.Put(bp)
		return b[:0]
	}
	return make([]byte, 0, 1<<(k+minPoolShift))
}

// Allocate returns a slice of length size (memory.Allocator). Its bytes are
// not zeroed when recycled: the nodes write every byte they hand over.
func (p *bufPool) Allocate(size int) []byte { return p.get(size)[:size] }

// Reallocate resizes b to size, keeping its contents (memory.Allocator).
func (p *bufPool) Reallocate(size int, b []byte) []byte {
	if size <= cap(b) {
		return b[:size]
	}
	nb := p.Allocate(size)
	copy(nb, b)
	p.Free(b)
	return nb
}

// Free gives b's storage back to the pool (memory.Allocator). The caller must
// not use b afterwards. Slices too small to pool, or not 8-byte aligned (so
// that any class may hold int64 values), are left to the GC.
func (p *bufPool) Free(b []byte) {
	c := cap(b)
	if c < 1<<minPoolShift || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 != 0 {
		return
	}
	k := bits.Len(uint(c)) - 1 - minPoolShift // floor(log2 c), from 4 KiB
	if k >= poolClasses {
		return
	}
	p.freed.Add(int64(c))
	if poisonFreed {
		full := b[:c]
		for i := range full {
			full[i] = 0xa5
		}
	}
	bp, _ := p.boxes.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	*bp = b[:0]
	p.classes[k].Put(bp)
}

// dataHint is what the previous batch's variable-length data of a column
// came to: the bytes of its values, and how many values it had.
type dataHint struct{ bytes, values int }

// size is the data buffer to take for a batch expecting values values: the
// previous batch's bytes per value times values, and a sixty-fourth more
// for values a little longer than the last batch's (the pool rounds it up
// to its next class anyway). Data that outgrows its buffer is appended to
// fresh memory from the GC, and sized by the last batch's bytes alone, a
// full batch after a small one (flushed by the batching period) grew its
// string columns from the small one's size.
func (h dataHint) size(values int) int {
	n := h.bytes
	if h.values > 0 && values > 0 {
		n = int(int64(h.bytes) * int64(values) / int64(h.values))
	}
	return n + n/64
}

// fixedWidth are the element types of pooled typed slices.
type fixedWidth interface {
	int8 | int16 | int32 | int64 | float32 | float64
}

// getSlice returns an empty []T with capacity at least n from the pool.
func getSlice[T fixedWidth](n int) []T {
	var z T
	size := int(unsafe.Sizeof(z))
	b := buffers.get(n * size)
	if cap(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b[:cap(b)]))), cap(b)/size)[:0]
}

// bytesOf views s as bytes, keeping its capacity, so that the pool can take
// the whole allocation back.
func bytesOf[T fixedWidth](s []T) []byte {
	if cap(s) == 0 {
		return nil
	}
	var z T
	size := int(unsafe.Sizeof(z))
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s[:cap(s)]))), cap(s)*size)[:len(s)*size]
}

// pooledBuffer wraps b as an Arrow buffer that returns to the pool when
// released.
func pooledBuffer(b []byte) *memory.Buffer {
	return memory.NewBufferWithAllocator(b, &buffers)
}

// pooledSlice wraps s as an Arrow buffer that returns to the pool when
// released.
func pooledSlice[T fixedWidth](s []T) *memory.Buffer {
	return pooledBuffer(bytesOf(s))
}

// newData is array.NewData taking over the caller's reference to each buffer
// (NewData retains its own), so that the last release of the array returns
// pooled storage to the pool.
func newData(dt arrow.DataType, n int, bufs []*memory.Buffer, children []arrow.ArrayData, nulls int) arrow.ArrayData {
	d := array.NewData(dt, n, bufs, children, nulls, 0)
	for _, b := range bufs {
		if b != nil {
			b.Release()
		}
	}
	return d
}
