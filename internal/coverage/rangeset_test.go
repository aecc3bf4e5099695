package coverage

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRangeSetAddMergesOverlappingAndAdjacent(t *testing.T) {
	var s RangeSet
	s.Add(10, 20)
	s.Add(30, 40)
	assert.Equal(t, []Range{{10, 20}, {30, 40}}, s.Ranges())
	s.Add(20, 25) // touches [10,20)
	assert.Equal(t, []Range{{10, 25}, {30, 40}}, s.Ranges())
	s.Add(26, 30) // touches [30,40), leaves 25 out
	assert.Equal(t, []Range{{10, 25}, {26, 40}}, s.Ranges())
	s.Add(25, 26) // fills the hole
	assert.Equal(t, []Range{{10, 40}}, s.Ranges())
	s.Add(0, 5)
	s.Add(50, 60)
	s.Add(3, 55) // swallows everything
	assert.Equal(t, []Range{{0, 60}}, s.Ranges())
	s.Add(7, 7) // empty
	s.Add(9, 2) // inverted
	assert.Equal(t, []Range{{0, 60}}, s.Ranges())
	assert.Equal(t, int64(60), s.Count())
}

func TestRangeSetGapsOfAWindow(t *testing.T) {
	var s RangeSet
	s.Add(10, 20)
	s.Add(30, 40)
	assert.Equal(t, []Range{{0, 10}, {20, 30}, {40, 50}}, s.Gaps(0, 50))
	assert.Equal(t, []Range{{20, 30}}, s.Gaps(15, 35))
	assert.Nil(t, s.Gaps(12, 18))
	assert.True(t, s.Covers(30, 40))
	assert.False(t, s.Covers(30, 41))
	assert.Nil(t, s.Gaps(5, 5))
	var empty RangeSet
	assert.Equal(t, []Range{{3, 9}}, empty.Gaps(3, 9))
}

func TestRangeSetOverlapping(t *testing.T) {
	var s RangeSet
	s.Add(0, 10)
	s.Add(20, 30)
	s.Add(40, 50)
	assert.Equal(t, []Range{{20, 30}}, s.Overlapping(Range{25, 26}))
	assert.Equal(t, []Range{{0, 10}, {20, 30}}, s.Overlapping(Range{10, 20}), "touching ranges count")
	assert.Nil(t, s.Overlapping(Range{12, 18}))
}

// model is the reference: one bool per offset in [0, size).
type model []bool

func (m model) ranges() []Range {
	var out []Range
	for i := 0; i < len(m); i++ {
		if !m[i] {
			continue
		}
		j := i
		for j < len(m) && m[j] {
			j++
		}
		out = append(out, Range{int64(i), int64(j)})
		i = j
	}
	return out
}

// Property: whatever ranges are added in whatever order, the set equals the
// union of the offsets added, in canonical form (sorted, disjoint,
// non-adjacent), and Gaps/Contains agree with the model.
func TestRangeSetMatchesModelUnderRandomAdds(t *testing.T) {
	const size = 300
	rng := rand.New(rand.NewPCG(11, 7))
	for trial := 0; trial < 500; trial++ {
		var s RangeSet
		m := make(model, size)
		for op := 0; op < 1+rng.IntN(40); op++ {
			a := rng.Int64N(size)
			b := a + rng.Int64N(min(25, size-a)+1)
			if rng.IntN(10) == 0 {
				a, b = b, a // inverted: adds nothing
			}
			s.Add(a, b)
			for x := a; x < b; x++ {
				m[x] = true
			}
		}
		want := m.ranges()
		got := s.Ranges()
		require.Equal(t, want, got, "trial %d", trial)
		for i := 1; i < len(got); i++ {
			require.Greater(t, got[i].Start, got[i-1].End, "canonical: disjoint and non-adjacent")
		}
		for x := int64(0); x < size; x++ {
			require.Equal(t, m[x], s.Contains(x), "trial %d offset %d", trial, x)
		}
		a := rng.Int64N(size)
		b := a + rng.Int64N(size-a+1)
		var gaps RangeSet
		for _, g := range s.Gaps(a, b) {
			require.Less(t, g.Start, g.End)
			gaps.AddRange(g)
		}
		for x := a; x < b; x++ {
			require.Equal(t, !m[x], gaps.Contains(x), "trial %d: gap at %d in window [%d,%d)", trial, x, a, b)
		}
	}
}

// Property: union is commutative and idempotent, so two writers' coverage
// merges to the same set whichever is read first, and re-reading a row
// changes nothing (never last-write-wins).
func TestRangeSetUnionIsOrderFreeAndIdempotent(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	random := func() *RangeSet {
		var s RangeSet
		for i := 0; i < rng.IntN(20); i++ {
			a := rng.Int64N(1000)
			s.Add(a, a+rng.Int64N(50))
		}
		return &s
	}
	for trial := 0; trial < 300; trial++ {
		a, b := random(), random()
		var ab, ba RangeSet
		ab.Union(a)
		ab.Union(b)
		ba.Union(b)
		ba.Union(a)
		require.Equal(t, ab.Ranges(), ba.Ranges())
		before := ab.Ranges()
		ab.Union(a)
		ab.Union(b)
		require.Equal(t, before, ab.Ranges())
		require.GreaterOrEqual(t, ab.Count(), max(a.Count(), b.Count()))
	}
}
