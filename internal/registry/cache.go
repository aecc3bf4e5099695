package registry

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"
)

// Cache bounds: Redpanda Connect's schema_registry_decode keeps a schema for
// cache_duration (default 10m) after it was fetched; the count bound is this
// project's, so that a topic of ever new ids cannot grow memory without end.
const (
	DefaultCacheDuration = 10 * time.Minute
	DefaultCacheSize     = 1000
	// MaxNegativeDuration is the longest a schema id the registry does not
	// know (or a schema that cannot be used) is remembered, so that a stream
	// of such messages does not ask the registry once per message, yet a
	// schema registered late is found soon.
	MaxNegativeDuration = 30 * time.Second
)

// Cache holds values by schema id, each for TTL after it was loaded, at most
// Max of them (the least recently used goes first). Concurrent Gets of one
// id load it once. Errors that fail messages (not Retryable) are kept for at
// most MaxNegativeDuration; Retryable ones and the caller's context errors are
// not kept. It is safe for concurrent use.
type Cache[V any] struct {
	ttl time.Duration
	max int
	now func() time.Time

	// mu is held for reading only by a hit on the most recently used id
	// (hit), the usual Get (every value of a batch of one schema id after
	// its first), so that concurrent batches do not queue for it per value.
	mu      sync.RWMutex
	entries map[int]*cacheEntry[V]
	lru     *list.List // of *cacheEntry[V], most recently used first
	loads   int
}

type cacheEntry[V any] struct {
	id      int
	val     V
	err     error
	expires time.Time
	ready   chan struct{} // closed once val or err is set
	elem    *list.Element
}

// NewCache makes a cache; ttl and max default when not positive.
func NewCache[V any](ttl time.Duration, max int) *Cache[V] {
	if ttl <= 0 {
		ttl = DefaultCacheDuration
	}
	if max <= 0 {
		max = DefaultCacheSize
	}
	return &Cache[V]{ttl: ttl, max: max, now: time.Now, entries: map[int]*cacheEntry[V]{}, lru: list.New()}
}

// Get returns id's value, loading it with load when it is not held or has
// expired.
func (c *Cache[V]) Get(ctx context.Context, id int, load func(context.Context) (V, error)) (V, error) {
	if e := c.hit(id); e != nil {
		return e.val, e.err // set once, before e was ready
	}
	for {
		c.mu.Lock()
		e := c.entries[id]
		if e != nil && e.loaded() && !c.now().Before(e.expires) {
			c.removeLocked(e)
			e = nil
		}
		if e == nil {
			e = &cacheEntry[V]{id: id, ready: make(chan struct{})}
			c.entries[id] = e
			e.elem = c.lru.PushFront(e)
			c.loads++
			c.mu.Unlock()
			return c.fill(ctx, e, load)
		}
		c.lru.MoveToFront(e.elem)
		c.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			var zero V
			return zero, ctx.Err()
		}
		if e.err != nil && isContextErr(e.err) {
			continue // the loader gave up: load it here
		}
		return e.val, e.err
	}
}

// hit is Get's fast path, under the read lock: id's entry when it is
// loaded, has not expired and is already the most recently used, so that
// the one change a hit makes, moving it to the front of the LRU order, would
// change nothing. nil leaves the Get to the write-locked path (a load, an
// expiry, a move to the front).
func (c *Cache[V]) hit(id int) *cacheEntry[V] {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e := c.entries[id]
	if e == nil || e.elem == nil || c.lru.Front() != e.elem || !e.loaded() || !c.now().Before(e.expires) {
		return nil
	}
	if e.err != nil && isContextErr(e.err) {
		return nil
	}
	return e
}

// fill loads e and keeps or drops it.
func (c *Cache[V]) fill(ctx context.Context, e *cacheEntry[V], load func(context.Context) (V, error)) (V, error) {
	v, err := load(ctx)
	c.mu.Lock()
	e.val, e.err = v, err
	ttl := c.ttl
	switch {
	case err == nil:
	case Retryable(err) || isContextErr(err):
		c.removeLocked(e)
	default:
		ttl = min(ttl, MaxNegativeDuration)
	}
	e.expires = c.now().Add(ttl)
	close(e.ready)
	c.evictLocked()
	c.mu.Unlock()
	return v, err
}

// evictLocked drops the least recently used loaded entries past max.
func (c *Cache[V]) evictLocked() {
	for el := c.lru.Back(); el != nil && len(c.entries) > c.max; {
		prev := el.Prev()
		if e := el.Value.(*cacheEntry[V]); e.loaded() {
			c.removeLocked(e)
		}
		el = prev
	}
}

func (c *Cache[V]) removeLocked(e *cacheEntry[V]) {
	if c.entries[e.id] == e {
		delete(c.entries, e.id)
	}
	if e.elem != nil {
		c.lru.Remove(e.elem)
		e.elem = nil
	}
}

// Len is how many ids are held (loading or loaded).
func (c *Cache[V]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}

// Loads is how many loads were started, for tests and metrics.
func (c *Cache[V]) Loads() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.loads
}

func (e *cacheEntry[V]) loaded() bool {
	select {
	case <-e.ready:
		return true
	default:
		return false
	}
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
