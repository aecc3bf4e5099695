package arrowconv

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

type keptKey int

// A converter keeps its callers' values by key, each key apart, at most
// maxKept of them: when full it drops them all before keeping the next.
func TestConverterKeepsValuesWithinItsBound(t *testing.T) {
	c := mustConverter(t, "id BIGINT", Options{})
	assert.Nil(t, c.Kept(keptKey(1)))
	c.Keep(keptKey(1), "a")
	c.Keep(1, "an int key is another key")
	assert.Equal(t, "a", c.Kept(keptKey(1)))
	assert.Equal(t, "an int key is another key", c.Kept(1))
	for i := 2; i < maxKept; i++ {
		c.Keep(keptKey(i), i)
	}
	assert.Equal(t, "a", c.Kept(keptKey(1)), "bound not passed yet")
	c.Keep(keptKey(maxKept), "next")
	assert.Nil(t, c.Kept(keptKey(1)), "full: dropped")
	assert.Equal(t, "next", c.Kept(keptKey(maxKept)))
	assert.Len(t, c.kept.m, 1)
}
