package zerobus

import (
	"strconv"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/tablewriter"
)

// Metric names. The engine already emits output_sent, output_batch_sent,
// output_error, output_latency_ns and the connection metrics for every
// output, so none of those is repeated here.
const (
	mCoalesceRatio     = "zerobus_ack_coalesce_ratio"
	mAckBursts         = "zerobus_ack_bursts_total"
	mAckBurstItems     = "zerobus_ack_burst_items_total"
	mPendingOffsets    = "zerobus_pending_offsets"
	mDeliveryLatency   = "zerobus_delivery_latency"
	mAckLaneRetry      = "zerobus_ack_lane_retry_total"
	mAckLanePoisoned   = "zerobus_ack_lane_poisoned_total"
	mStreamRebuilds    = "zerobus_stream_rebuilds_total"
	mConcurrencyReject = "zerobus_concurrency_rejects_total"
	mTypeReconcile     = "zerobus_type_reconcile_total"
	mRowsSent          = "zerobus_rows_sent_total"
	mBytesSent         = "zerobus_bytes_sent_total"
	mRowErrors         = "zerobus_row_errors_total"
	mPrimaryRawUnmet   = "zerobus_primary_raw_unmet"
)

// allPreconditions lists every primary-raw precondition the catalog can
// report, so a met one is exported as 0 rather than absent.
var allPreconditions = []string{
	catalog.PreRegistered,
	catalog.PreIcebergReads,
	catalog.PreColumnMapping,
	catalog.PreProtocol,
	catalog.PreDeletionVectors,
	catalog.PreColumnTypes,
}

// metrics holds the zerobus_* metric handles of one output. Per-stream
// handles are created on first use and cached, so the hot path never builds
// label sets. All methods are safe for concurrent use and cheap; with a nil
// *service.Metrics (as in MockResources) they record nothing.
type metrics struct {
	table string
	m     *service.Metrics

	rowErrors *service.MetricCounter
	unmet     *service.MetricGauge
	reconcile *service.MetricCounter
	rejects   *service.MetricCounter

	mu      sync.Mutex
	streams map[int]*streamMetrics
}

// streamMetrics are the {table, stream}-labelled handles of one stream.
type streamMetrics struct {
	coalesce   *service.MetricGauge
	bursts     *service.MetricCounter
	burstItems *service.MetricCounter
	pending    *service.MetricGauge
	latency    *service.MetricTimer
	retries    *service.MetricCounter
	poisoned   *service.MetricCounter
	rebuilds   *service.MetricCounter
	rows       *service.MetricCounter
	bytes      *service.MetricCounter
}

func newMetrics(m *service.Metrics, table string) *metrics {
	return &metrics{
		table:     table,
		m:         m,
		rowErrors: m.NewCounter(mRowErrors, "table"),
		unmet:     m.NewGauge(mPrimaryRawUnmet, "table", "precondition"),
		reconcile: m.NewCounter(mTypeReconcile, "table", "kind"),
		rejects:   m.NewCounter(mConcurrencyReject, "table", "stream"),
		streams:   map[int]*streamMetrics{},
	}
}

func (x *metrics) stream(i int) *streamMetrics {
	x.mu.Lock()
	defer x.mu.Unlock()
	if s, ok := x.streams[i]; ok {
		return s
	}
	labels := []string{"table", "stream"}
	m := x.m
	s := &streamMetrics{
		coalesce:   m.NewGauge(mCoalesceRatio, labels...),
		bursts:     m.NewCounter(mAckBursts, labels...),
		burstItems: m.NewCounter(mAckBurstItems, labels...),
		pending:    m.NewGauge(mPendingOffsets, labels...),
		latency:    m.NewTimer(mDeliveryLatency, labels...),
		retries:    m.NewCounter(mAckLaneRetry, labels...),
		poisoned:   m.NewCounter(mAckLanePoisoned, labels...),
		rebuilds:   m.NewCounter(mStreamRebuilds, labels...),
		rows:       m.NewCounter(mRowsSent, labels...),
		bytes:      m.NewCounter(mBytesSent, labels...),
	}
	x.streams[i] = s
	return s
}

// metrics is the table writer's observer: every pool member gets a lane
// observer bound to its {table, stream} handles.
var _ tablewriter.Observer = (*metrics)(nil)

// StreamObserver implements pool.Observer.
func (x *metrics) StreamObserver(_ string, index int) acklane.Observer {
	return laneObserver{s: x.stream(index), table: x.table, stream: strconv.Itoa(index)}
}

// IncRebuild implements pool.Observer.
func (x *metrics) IncRebuild(_ string, index int) {
	x.stream(index).rebuilds.Incr(1, x.table, strconv.Itoa(index))
}

// IncConcurrencyReject implements pool.Observer. Rejects happen at open,
// before a stream exists, so they carry stream="pool".
func (x *metrics) IncConcurrencyReject(string) {
	x.rejects.Incr(1, x.table, "pool")
}

// laneObserver is one stream's acklane.Observer.
type laneObserver struct {
	s             *streamMetrics
	table, stream string
}

var _ acklane.Observer = laneObserver{}

// ObserveBurst records how many pending batches one durability wait
// confirmed: the coalesce ratio (1 = not pipelining).
func (l laneObserver) ObserveBurst(size int) {
	l.s.coalesce.Set(int64(size), l.table, l.stream)
	l.s.bursts.Incr(1, l.table, l.stream)
	l.s.burstItems.Incr(int64(size), l.table, l.stream)
}

// ObserveDeliveryLatency records submit-to-confirmation time of one batch.
func (l laneObserver) ObserveDeliveryLatency(d time.Duration) {
	l.s.latency.Timing(d.Nanoseconds(), l.table, l.stream)
}

// SetPending records the batches submitted but not yet confirmed durable.
func (l laneObserver) SetPending(n int64) { l.s.pending.Set(n, l.table, l.stream) }

// IncRetry counts a durability wait that timed out on a healthy stream
// (the slow-ack symptom).
func (l laneObserver) IncRetry() { l.s.retries.Incr(1, l.table, l.stream) }

// IncPoisoned counts a stream failure seen by the lane (the cause).
func (l laneObserver) IncPoisoned() { l.s.poisoned.Incr(1, l.table, l.stream) }

// Sent counts rows and bytes confirmed durable on a stream.
func (x *metrics) Sent(stream int, rows, bytes int64) {
	s := x.stream(stream)
	l := strconv.Itoa(stream)
	s.rows.Incr(rows, x.table, l)
	s.bytes.Incr(bytes, x.table, l)
}

// RowErrors counts rows that failed conversion.
func (x *metrics) RowErrors(n int) {
	if n > 0 {
		x.rowErrors.Incr(int64(n), x.table)
	}
}

// Reconciled counts emit-time type reconciliations by kind.
func (x *metrics) Reconciled(kinds map[string]int) {
	for k, n := range kinds {
		if n > 0 {
			x.reconcile.Incr(int64(n), x.table, k)
		}
	}
}

// PrimaryRaw exports the primary-raw verdict: 1 for each unmet
// precondition, 0 for the others.
func (x *metrics) PrimaryRaw(unmet []catalog.Unmet) {
	bad := map[string]bool{}
	for _, u := range unmet {
		bad[u.Precondition] = true
	}
	for _, p := range allPreconditions {
		v := int64(0)
		if bad[p] {
			v = 1
		}
		x.unmet.Set(v, x.table, p)
	}
}
