package arrowconv

import "sync"

// maxKept bounds the values a Converter keeps for its callers (Keep); when
// full they are dropped (they are cheap to make again).
const maxKept = 256

// kept holds what callers made for one Converter (the Avro fast path's
// plans, by schema id), so that it lives and dies with the converter: a
// table that evolves gets a new converter, and what was made for its old
// columns goes with the old one once no batch holds it, rather than staying
// referenced by a cache keyed by the converter.
type kept struct {
	mu sync.Mutex
	m  map[any]any
}

// Kept returns the value kept on c under key by Keep; nil when none is.
func (c *Converter) Kept(key any) any {
	c.kept.mu.Lock()
	defer c.kept.mu.Unlock()
	return c.kept.m[key]
}

// Keep keeps v on c under key, a comparable value of a type of the caller's
// own so that callers do not meet each other's keys. At most maxKept values
// are kept: when full, all are dropped first.
func (c *Converter) Keep(key, v any) {
	c.kept.mu.Lock()
	defer c.kept.mu.Unlock()
	if c.kept.m == nil || len(c.kept.m) >= maxKept {
		c.kept.m = map[any]any{}
	}
	c.kept.m[key] = v
}
