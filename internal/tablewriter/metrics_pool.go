package tablewriter

import (
	"sync"

	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

// The pool's size metrics.
const (
	// mStreamsOpen is the number of the table's streams open (healthy) now.
	mStreamsOpen = "zerobus_streams_open"
	// mPoolResizes counts the self-sizing pool's changes, by direction
	// (grow, shrink).
	mPoolResizes = "zerobus_pool_resizes_total"
)

// resizeDirections are the direction label values of mPoolResizes.
var resizeDirections = []string{pool.Grow.String(), pool.Shrink.String()}

// sizeMetrics are the handles of the pool's size metrics, made on the
// pool's first report (its sizer's first sample), with every series at 0.
type sizeMetrics struct {
	once    sync.Once
	open    Gauge
	resizes Counter
}

func (x *Metrics) size() *sizeMetrics {
	s := &x.sizes
	s.once.Do(func() {
		s.open = x.m.Gauge(mStreamsOpen, "table")
		s.resizes = x.m.Counter(mPoolResizes, "table", "direction")
		for _, d := range resizeDirections {
			s.resizes.Incr(0, x.table, d)
		}
	})
	return s
}

var _ pool.ResizeObserver = (*Metrics)(nil)

// StreamsOpen implements pool.ResizeObserver.
func (x *Metrics) StreamsOpen(_ string, n int) { x.size().open.Set(int64(n), x.table) }

// IncResize implements pool.ResizeObserver.
func (x *Metrics) IncResize(_ string, direction string) {
	x.size().resizes.Incr(1, x.table, direction)
}
