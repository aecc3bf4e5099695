package registry

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a settable time for a Cache.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestCache(ttl time.Duration, max int) (*Cache[int], *clock) {
	c := NewCache[int](ttl, max)
	clk := &clock{t: time.Unix(1e9, 0)}
	c.now = clk.now
	return c, clk
}

func TestCacheKeepsAValueForItsDurationThenReloads(t *testing.T) {
	c, clk := newTestCache(10*time.Minute, 10)
	var loads atomic.Int64
	load := func(context.Context) (int, error) { return int(loads.Add(1)), nil }
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if v, _ := c.Get(ctx, 7, load); v != 1 {
			t.Fatalf("get %d = %d, want the first load", i, v)
		}
	}
	clk.add(10*time.Minute - time.Second)
	if v, _ := c.Get(ctx, 7, load); v != 1 {
		t.Fatalf("before expiry = %d", v)
	}
	clk.add(time.Second)
	if v, _ := c.Get(ctx, 7, load); v != 2 {
		t.Fatalf("at expiry = %d, want a reload", v)
	}
}

func TestCacheBoundEvictsTheLeastRecentlyUsed(t *testing.T) {
	c, _ := newTestCache(time.Hour, 3)
	ctx := context.Background()
	loads := map[int]int{}
	load := func(id int) func(context.Context) (int, error) {
		return func(context.Context) (int, error) { loads[id]++; return id, nil }
	}
	for _, id := range []int{1, 2, 3, 1, 4} { // 2 is the least recently used when 4 comes
		if v, err := c.Get(ctx, id, load(id)); err != nil || v != id {
			t.Fatal(v, err)
		}
	}
	if c.Len() != 3 {
		t.Fatalf("len = %d, want the bound 3", c.Len())
	}
	for _, id := range []int{1, 3, 4} {
		_, _ = c.Get(ctx, id, load(id))
	}
	if loads[1] != 1 || loads[3] != 1 || loads[4] != 1 {
		t.Fatalf("loads = %v: 1, 3 and 4 should still be held", loads)
	}
	_, _ = c.Get(ctx, 2, load(2))
	if loads[2] != 2 {
		t.Fatalf("loads of 2 = %d, want it evicted and loaded again", loads[2])
	}
}

func TestCacheLoadsAnIDOnceForConcurrentGets(t *testing.T) {
	c, _ := newTestCache(time.Hour, 10)
	release := make(chan struct{})
	var loads atomic.Int64
	load := func(context.Context) (int, error) { loads.Add(1); <-release; return 5, nil }
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := c.Get(context.Background(), 9, load); v != 5 || err != nil {
				t.Error(v, err)
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	if loads.Load() != 1 {
		t.Fatalf("loads = %d, want 1", loads.Load())
	}
}

func TestCacheKeepsMessageErrorsBrieflyAndRegistryFaultsNot(t *testing.T) {
	c, clk := newTestCache(10*time.Minute, 10)
	ctx := context.Background()
	var loads atomic.Int64
	notFound := func(context.Context) (int, error) {
		loads.Add(1)
		return 0, &NotFoundError{ID: 3, Code: 40403, Message: "Schema 3 not found"}
	}
	for i := 0; i < 5; i++ {
		if _, err := c.Get(ctx, 3, notFound); !strings.Contains(fmtErr(err), "40403") {
			t.Fatal(err)
		}
	}
	if loads.Load() != 1 {
		t.Fatalf("loads = %d: an unknown id is remembered, not asked per message", loads.Load())
	}
	clk.add(MaxNegativeDuration)
	_, _ = c.Get(ctx, 3, notFound)
	if loads.Load() != 2 {
		t.Fatalf("loads = %d: an unknown id is asked again after %s", loads.Load(), MaxNegativeDuration)
	}

	down := func(context.Context) (int, error) {
		loads.Add(1)
		return 0, &UnreachableError{URL: "http://x", Err: errors.New("refused")}
	}
	loads.Store(0)
	for i := 0; i < 3; i++ {
		_, _ = c.Get(ctx, 4, down)
	}
	if loads.Load() != 3 || c.Len() != 1 {
		t.Fatalf("loads = %d, len = %d: an unreachable registry is asked again every time and nothing is kept", loads.Load(), c.Len())
	}
}

func TestCacheWaiterHonoursItsContext(t *testing.T) {
	c, _ := newTestCache(time.Hour, 10)
	release := make(chan struct{})
	go func() {
		_, _ = c.Get(context.Background(), 1, func(context.Context) (int, error) { <-release; return 1, nil })
	}()
	time.Sleep(10 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Get(ctx, 1, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	close(release)
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestParseHeader(t *testing.T) {
	id, body, err := ParseHeader([]byte{0, 0, 0, 1, 2, 'x'})
	if err != nil || id != 258 || string(body) != "x" {
		t.Fatal(id, body, err)
	}
	for _, tc := range []struct {
		v    []byte
		want string
	}{
		{[]byte{0, 0, 1}, "3 bytes, shorter than the 5-byte header"},
		{nil, "0 bytes"},
		{[]byte(`{"id":1}`), "first byte 0x7b, not the magic byte 0x00: it looks like JSON"},
		{[]byte{1, 0, 0, 0, 1}, "first byte 0x01"},
	} {
		_, _, err := ParseHeader(tc.v)
		var nf *NotFramedError
		if !errors.As(err, &nf) || !strings.HasPrefix(err.Error(), "value is not in the Schema Registry wire format (") || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%q: err = %v, want %q", tc.v, err, tc.want)
		}
	}
}

// A Get of the most recently used id, loaded and not expired (every value
// of a batch of one schema id after its first), takes the read lock only:
// it is answered while another reader holds the cache. An id that must move
// to the front of the LRU order still takes the write lock, so the
// eviction order is the one it was.
func TestCacheHitOnTheMostRecentlyUsedTakesTheReadLock(t *testing.T) {
	c, _ := newTestCache(time.Hour, 10)
	ctx := context.Background()
	load := func(id int) func(context.Context) (int, error) {
		return func(context.Context) (int, error) { return id, nil }
	}
	for _, id := range []int{1, 2} {
		if v, err := c.Get(ctx, id, load(id)); v != id || err != nil {
			t.Fatal(v, err)
		}
	}
	c.mu.RLock() // another reader
	got := make(chan int, 1)
	go func() { v, _ := c.Get(ctx, 2, nil); got <- v }()
	select {
	case v := <-got:
		if v != 2 {
			t.Fatalf("hit = %d, want 2", v)
		}
	case <-time.After(5 * time.Second):
		c.mu.RUnlock()
		t.Fatal("a hit on the most recently used id waited for a reader")
	}
	go func() { v, _ := c.Get(ctx, 1, nil); got <- v }()
	select {
	case v := <-got:
		c.mu.RUnlock()
		t.Fatalf("id 1 = %d without the write lock: its move to the front was skipped", v)
	case <-time.After(20 * time.Millisecond):
	}
	c.mu.RUnlock()
	if v := <-got; v != 1 {
		t.Fatalf("id 1 = %d", v)
	}
	if front := c.lru.Front().Value.(*cacheEntry[int]).id; front != 1 {
		t.Fatalf("most recently used = %d, want 1", front)
	}
}
