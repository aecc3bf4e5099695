package arrowconv

import (
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/stretchr/testify/require"
)

// TestHeldRecordSurvivesLaterBatches holds one record while later batches
// recycle the pool: its storage must not be handed out again before it is
// released.
func TestHeldRecordSurvivesLaterBatches(t *testing.T) {
	c := mustConverter(t, benchDefs, Options{})
	rows := benchRows(512)
	held, err := c.ConvertJSON(rows[:256])
	require.NoError(t, err)
	defer held.Record.Release()
	slice := held.Record.NewSlice(10, 20)
	defer slice.Release()
	for range 5 {
		res, err := c.ConvertJSON(rows[256:])
		require.NoError(t, err)
		res.Record.Release()
	}
	again, err := c.ConvertJSON(rows[:256])
	require.NoError(t, err)
	defer again.Record.Release()
	require.True(t, array.RecordEqual(again.Record, held.Record), "a held record was overwritten")
	want := again.Record.NewSlice(10, 20)
	defer want.Release()
	require.True(t, array.RecordEqual(want, slice), "a held slice was overwritten")
	validateRecord(t, held.Record)
}

// TestReleaseReturnsStorage checks that releasing a record hands all its
// pooled column storage back to the pool, and only then.
func TestReleaseReturnsStorage(t *testing.T) {
	c := mustConverter(t, benchDefs, Options{})
	rows := benchRows(4096)
	res, err := c.ConvertJSON(rows)
	require.NoError(t, err)
	pooled := int64(0)
	var walk func(d arrow.ArrayData)
	walk = func(d arrow.ArrayData) {
		for _, b := range d.Buffers() {
			if b != nil && cap(b.Buf()) >= 1<<minPoolShift {
				pooled += int64(cap(b.Buf()))
			}
		}
		for _, ch := range d.Children() {
			walk(ch)
		}
	}
	for _, col := range res.Record.Columns() {
		walk(col.Data())
	}
	require.Positive(t, pooled)
	slice := res.Record.NewSlice(1, 2)
	before := buffers.freed.Load()
	res.Record.Release()
	require.Equal(t, before, buffers.freed.Load(), "storage freed while a slice still holds it")
	slice.Release()
	require.Equal(t, pooled, buffers.freed.Load()-before)
}

func TestBufPoolClasses(t *testing.T) {
	var p bufPool
	require.Nil(t, p.get(0))
	for _, n := range []int{1, 100, 4095, 4096, 4097, 1 << 20, 3<<20 + 1} {
		b := p.get(n)
		require.Zero(t, len(b))
		require.GreaterOrEqual(t, cap(b), n)
		p.Free(b)
	}
	b := p.Allocate(5000)
	require.Len(t, b, 5000)
	b[4999] = 7
	b = p.Reallocate(9000, b)
	require.Len(t, b, 9000)
	require.Equal(t, byte(7), b[4999])
	p.Free(b)

	// A typed slice keeps its whole capacity through bytesOf.
	s := append(getSlice[int64](1000), 1, 2, 3)
	bs := bytesOf(s)
	require.Len(t, bs, 24)
	require.Equal(t, cap(s)*8, cap(bs))
}

// TestValidityMatchesReference drives the lazy bitmap through random adds
// and truncates and checks its bits, null count and values buffer against a
// plain []bool.
func TestValidityMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for round := range 2000 {
		var v validity
		var want []bool
		v.resetBits(0)
		for range r.IntN(80) {
			switch op := r.IntN(10); {
			case op == 0 && len(want) > 0:
				k := r.IntN(len(want) + 1)
				v.truncateBits(k)
				want = want[:k]
			default:
				ok := r.IntN(8) != 0 || round%3 == 0
				v.add(ok)
				want = append(want, ok)
			}
		}
		require.Equal(t, len(want), v.length())
		nulls := 0
		for _, ok := range want {
			if !ok {
				nulls++
			}
		}
		if round%2 == 0 {
			buf, gotNulls := v.takeBits()
			require.Equal(t, nulls, gotNulls)
			if nulls == 0 {
				require.Nil(t, buf)
				continue
			}
			for i, ok := range want {
				require.Equal(t, ok, bitutil.BitIsSet(buf.Bytes(), i), "bit %d of %v", i, want)
			}
			buf.Release()
		} else {
			buf := v.takeValues()
			for i, ok := range want {
				require.Equal(t, ok, bitutil.BitIsSet(buf.Bytes(), i), "bit %d of %v", i, want)
			}
			buf.Release()
		}
		require.Zero(t, v.length())
	}
}
