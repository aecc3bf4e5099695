package tablewriter

import (
	"strconv"
	"sync"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

// Sink makes the labelled metric handles Metrics records into; the output
// backs it with the Benthos metrics of its pipeline. A handle may be a nil
// pointer whose methods do nothing.
type Sink interface {
	Counter(name string, labelKeys ...string) Counter
	Gauge(name string, labelKeys ...string) Gauge
	Timer(name string, labelKeys ...string) Timer
}

// Counter, Gauge and Timer are metric handles; labelValues follow the keys
// they were made with.
type (
	Counter interface {
		Incr(n int64, labelValues ...string)
	}
	Gauge interface {
		Set(v int64, labelValues ...string)
	}
	Timer interface {
		Timing(v int64, labelValues ...string)
	}
)

// Metric names. The Benthos engine already emits output_sent, output_batch_sent,
// output_error, output_latency_ns and the connection metrics for every
// output, so none of those is repeated here.
const (
	mCoalesceRatio     = "zerobus_ack_coalesce_ratio"
	mAckBursts         = "zerobus_ack_bursts_total"
	mAckBurstItems     = "zerobus_ack_burst_items_total"
	mPendingOffsets    = "zerobus_pending_offsets"
	mDeliveryLatency   = "zerobus_delivery_latency"
	mAckLaneLag        = "zerobus_ack_lane_lag"
	mAckLaneRetry      = "zerobus_ack_lane_retry_total"
	mAckLanePoisoned   = "zerobus_ack_lane_poisoned_total"
	mStreamRebuilds    = "zerobus_stream_rebuilds_total"
	mConcurrencyReject = "zerobus_concurrency_rejects_total"
	mStreamReconnects  = "zerobus_stream_reconnects_total"
	mTypeReconcile     = "zerobus_type_reconcile_total"
	mRowsSent          = "zerobus_rows_sent_total"
	mBytesSent         = "zerobus_bytes_sent_total"
	mRowErrors         = "zerobus_row_errors_total"
	mPrimaryRawUnmet   = "zerobus_primary_raw_unmet"
	mRescuedFields     = "zerobus_rescued_fields_total"
	// mTableEvictions counts the writers a Router evicted to make room for
	// another table (max_open_tables); output-wide, no table label.
	mTableEvictions = "zerobus_table_evictions_total"
	// From the writer's Health, every HealthInterval.
	mAckAge       = "zerobus_ack_age_ms"
	mStreamState  = "zerobus_stream_state"
	mBackpressure = "zerobus_backpressure_waiters"
	// mPendingBatches is the writes (batches, or their share of a stream)
	// submitted on a stream and not yet durable: in-flight batches.
	mPendingBatches = "zerobus_pending_batches"
	// mInflightBytes and mInflightLimit are the table's in-flight byte
	// budget in use and its limit (max_in_flight_bytes).
	mInflightBytes = "zerobus_inflight_bytes"
	mInflightLimit = "zerobus_inflight_bytes_limit"
	// mTableState is the table's state, its worst stream's or stopped
	// while it is not open: it exists before the table has a stream, so an
	// output that never connected shows as stopped.
	mTableState = "zerobus_table_state"
	// mUnreachable is for how long no stream of the table has been
	// connected (0 while one is): past OutageGrace new batches are held.
	mUnreachable = "zerobus_unreachable_seconds"
	// mDeadLetters counts the dead letters made durable in a dead-letter
	// table (labelled with the dead-letter table).
	mDeadLetters = "zerobus_dead_letter_rows_total"
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

// Metrics holds the zerobus_* metric handles of one table writer. Per-stream
// handles are created when the pool makes its members (every series then
// exists at 0 from start-up) and cached, so the hot path never builds label
// sets. All methods are safe for concurrent use and cheap. It is the
// writer's Observer.
type Metrics struct {
	table string
	m     Sink

	rowErrors Counter
	rescued   Counter
	unmet     Gauge
	reconcile Counter
	waiters   Gauge
	tbl       tableGauges

	mu      sync.Mutex
	dead    Counter // zerobus_dead_letter_rows_total, a dead-letter table's
	streams map[int]*streamMetrics
	sizes   sizeMetrics // the pool's size (metrics_pool.go)
}

// streamMetrics are the {table, stream}-labelled handles of one stream.
type streamMetrics struct {
	label      string
	coalesce   Timer
	bursts     Counter
	burstItems Counter
	pending    Gauge
	latency    Timer
	lag        Timer
	retries    Counter
	poisoned   Counter
	rebuilds   Counter
	rejects    Counter
	reconnects Counter
	rows       Counter
	bytes      Counter
	ackAge     Gauge
	state      Gauge
	batches    Gauge
}

// tableGauges are the {table}-labelled gauges ObserveHealth refreshes.
type tableGauges struct {
	inflight, limit, state, unreachable Gauge
}

// reconcileKinds are the emit-time reconciliations the converter counts,
// exported at 0 from start-up.
var reconcileKinds = []string{arrowconv.ReconcileNestedToString, arrowconv.ReconcileFieldNameCase, arrowconv.ReconcileNTZFromZoned}

// reconnectCauses are the cause label values of zerobus_stream_reconnects_total.
var reconnectCauses = []string{causeRotation, causeTransient, causeReject}

const (
	causeRotation  = "rotation"  // the service rotated the stream (normal)
	causeTransient = "transient" // a retryable error: the environment
	causeReject    = "reject"    // a concurrency reject at reconnect: a limit
)

// NewMetrics makes the handles of table's metrics in m; the table-level
// series exist at 0 from here on, each stream's once the pool makes it.
func NewMetrics(m Sink, table string) *Metrics {
	x := &Metrics{
		table:     table,
		m:         m,
		rowErrors: m.Counter(mRowErrors, "table"),
		rescued:   m.Counter(mRescuedFields, "table", "column"),
		unmet:     m.Gauge(mPrimaryRawUnmet, "table", "precondition"),
		reconcile: m.Counter(mTypeReconcile, "table", "kind"),
		waiters:   m.Gauge(mBackpressure, "table", "on"),
		tbl: tableGauges{
			inflight:    m.Gauge(mInflightBytes, "table"),
			limit:       m.Gauge(mInflightLimit, "table"),
			state:       m.Gauge(mTableState, "table"),
			unreachable: m.Gauge(mUnreachable, "table"),
		},
		streams: map[int]*streamMetrics{},
	}
	x.rowErrors.Incr(0, table)
	x.tbl.inflight.Set(0, table)
	x.tbl.limit.Set(0, table)
	x.tbl.state.Set(StateValue(StateRebuilding), table) // not opened yet
	x.tbl.unreachable.Set(0, table)
	for _, on := range waitsOn {
		x.waiters.Set(0, table, on)
	}
	for _, k := range reconcileKinds {
		x.reconcile.Incr(0, table, k)
	}
	return x
}

// NewEvictionCounter makes zerobus_table_evictions_total in m, at 0 from
// here on: the Router's count of writers evicted to make room for another
// table. It has no table label: its rate, not which table, says whether
// max_open_tables is too small.
func NewEvictionCounter(m Sink) Counter {
	c := m.Counter(mTableEvictions)
	c.Incr(0)
	return c
}

// stream returns the handles of stream i, creating its series at 0.
func (x *Metrics) stream(i int) *streamMetrics {
	x.mu.Lock()
	defer x.mu.Unlock()
	if s, ok := x.streams[i]; ok {
		return s
	}
	labels := []string{"table", "stream"}
	m := x.m
	s := &streamMetrics{
		label:      strconv.Itoa(i),
		coalesce:   m.Timer(mCoalesceRatio, labels...),
		bursts:     m.Counter(mAckBursts, labels...),
		burstItems: m.Counter(mAckBurstItems, labels...),
		pending:    m.Gauge(mPendingOffsets, labels...),
		latency:    m.Timer(mDeliveryLatency, labels...),
		lag:        m.Timer(mAckLaneLag, labels...),
		retries:    m.Counter(mAckLaneRetry, labels...),
		poisoned:   m.Counter(mAckLanePoisoned, labels...),
		rebuilds:   m.Counter(mStreamRebuilds, labels...),
		rejects:    m.Counter(mConcurrencyReject, labels...),
		reconnects: m.Counter(mStreamReconnects, "table", "stream", "cause"),
		rows:       m.Counter(mRowsSent, labels...),
		bytes:      m.Counter(mBytesSent, labels...),
		ackAge:     m.Gauge(mAckAge, labels...),
		state:      m.Gauge(mStreamState, labels...),
		batches:    m.Gauge(mPendingBatches, labels...),
	}
	t, l := x.table, s.label
	for _, c := range []Counter{s.bursts, s.burstItems, s.retries, s.poisoned, s.rebuilds, s.rejects, s.rows, s.bytes} {
		c.Incr(0, t, l)
	}
	for _, c := range reconnectCauses {
		s.reconnects.Incr(0, t, l, c)
	}
	s.pending.Set(0, t, l)
	s.batches.Set(0, t, l)
	s.ackAge.Set(0, t, l)
	s.state.Set(StateValue(StateRebuilding), t, l) // opening
	x.streams[i] = s
	return s
}

// waitsOn are the label values of zerobus_backpressure_waiters: what
// writes wait for.
var waitsOn = []string{waitBudget, waitLane, waitStream}

const (
	waitBudget = "budget" // room in the in-flight byte budget
	waitLane   = "lane"   // room in a stream's full ack lane
	waitStream = "stream" // a healthy stream
)

var _ HealthObserver = (*Metrics)(nil)

// ObserveHealth implements HealthObserver: per stream, the age of the
// oldest rows submitted and not yet durable (0 when none wait: an idle
// stream is not a slow one) and the state (0 up, 1 rebuilding, 2 stopped);
// per table, the writes waiting, by what they wait for.
func (x *Metrics) ObserveHealth(h TableHealth) {
	var lane int64
	if len(h.Streams) == 0 && h.State == StateStopped {
		// Stopped before any pool could say (a describe failed): every
		// stream this table had is stopped.
		x.mu.Lock()
		for _, s := range x.streams {
			s.state.Set(StateValue(StateStopped), x.table, s.label)
			s.ackAge.Set(0, x.table, s.label)
		}
		x.mu.Unlock()
	}
	for _, sh := range h.Streams {
		s := x.stream(sh.Index)
		s.ackAge.Set(h.Age(sh.OldestPending).Milliseconds(), x.table, s.label)
		s.pending.Set(int64(sh.PendingRows), x.table, s.label)
		s.batches.Set(sh.PendingBatches, x.table, s.label)
		s.state.Set(StateValue(sh.State), x.table, s.label)
		lane += sh.LaneFullWriters
	}
	x.waiters.Set(int64(h.BudgetWaiters), x.table, waitBudget)
	x.waiters.Set(lane, x.table, waitLane)
	x.waiters.Set(h.StreamWaiters, x.table, waitStream)
	x.tbl.inflight.Set(h.BudgetInUseBytes, x.table)
	x.tbl.limit.Set(h.BudgetLimitBytes, x.table)
	x.tbl.state.Set(StateValue(h.State), x.table)
	x.tbl.unreachable.Set(int64(h.Age(h.Unreachable).Seconds()), x.table)
}

var _ CloseObserver = (*Metrics)(nil)

// ObserveClosed implements CloseObserver: a closed table has nothing in
// flight, nothing waiting and nothing down, so its table gauges read 0 (its
// series stay, as the exporter cannot drop them).
func (x *Metrics) ObserveClosed() {
	x.tbl.state.Set(StateValue(StateUp), x.table)
	x.tbl.unreachable.Set(0, x.table)
	x.tbl.inflight.Set(0, x.table)
	for _, on := range waitsOn {
		x.waiters.Set(0, x.table, on)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, s := range x.streams {
		s.pending.Set(0, x.table, s.label)
		s.batches.Set(0, x.table, s.label)
		s.ackAge.Set(0, x.table, s.label)
	}
}

// Metrics is the table writer's observer: every pool member gets a lane
// observer bound to its {table, stream} handles.
var _ Observer = (*Metrics)(nil)

// StreamObserver implements pool.Observer; the pool asks once per member
// when it is made, which is when the member's series appear (at 0).
func (x *Metrics) StreamObserver(_ string, index int) acklane.Observer {
	return laneObserver{s: x.stream(index), table: x.table}
}

// IncRebuild implements pool.Observer.
func (x *Metrics) IncRebuild(_ string, index int) {
	s := x.stream(index)
	s.rebuilds.Incr(1, x.table, s.label)
}

// IncConcurrencyReject implements pool.Observer: an open of the member
// refused by the service for concurrency (too many streams or pipelines).
func (x *Metrics) IncConcurrencyReject(_ string, index int) {
	s := x.stream(index)
	s.rejects.Incr(1, x.table, s.label)
}

// laneObserver is one stream's acklane.Observer.
type laneObserver struct {
	s     *streamMetrics
	table string
}

var (
	_ acklane.Observer       = laneObserver{}
	_ acklane.AckLagObserver = laneObserver{}
)

// ObserveBurst records how many pending batches one durability wait
// confirmed: the coalesce ratio (1 = not pipelining), as a distribution so
// that "p50 < 2 over 5 min" can be alerted on. Benthos has no plain
// histogram, so it is a timer whose value is the burst size; the project's
// prometheus exporter exports timers named *_ratio as histograms of the raw
// value (buckets 1, 2, 4, … 1024).
func (l laneObserver) ObserveBurst(size int) {
	l.s.coalesce.Timing(int64(size), l.table, l.s.label)
	l.s.bursts.Incr(1, l.table, l.s.label)
	l.s.burstItems.Incr(int64(size), l.table, l.s.label)
}

// ObserveDeliveryLatency records submit-to-confirmation time of one batch.
func (l laneObserver) ObserveDeliveryLatency(d time.Duration) {
	l.s.latency.Timing(d.Nanoseconds(), l.table, l.s.label)
}

// ObserveAckLag records, per batch, the time from the durable ack reaching
// the client to the batch's confirmation: what the ack lane adds to the
// service's ack latency.
func (l laneObserver) ObserveAckLag(d time.Duration) {
	l.s.lag.Timing(d.Nanoseconds(), l.table, l.s.label)
}

// SetPending records the rows submitted but not yet confirmed durable.
func (l laneObserver) SetPending(rows int64) { l.s.pending.Set(rows, l.table, l.s.label) }

// IncRetry counts a durability wait that timed out on a healthy stream
// (the slow-ack symptom).
func (l laneObserver) IncRetry() { l.s.retries.Incr(1, l.table, l.s.label) }

// IncPoisoned counts a stream failure seen by the lane, by what it is: a
// concurrency reject when reconnecting is a limit of the service, counted
// with the rejects; anything else is our stream dying (the cause signal
// the runbook branches on).
func (l laneObserver) IncPoisoned(cause error) {
	if ingest.ConcurrencyRejectOf(cause) != nil {
		l.s.rejects.Incr(1, l.table, l.s.label)
		return
	}
	l.s.poisoned.Incr(1, l.table, l.s.label)
}

// Sent counts rows and bytes confirmed durable on a stream.
func (x *Metrics) Sent(stream int, rows, bytes int64) {
	s := x.stream(stream)
	s.rows.Incr(rows, x.table, s.label)
	s.bytes.Incr(bytes, x.table, s.label)
}

// StreamEvents implements pool.StreamEventer: the reconnects the client
// makes inside member index's logical stream, counted by cause.
func (x *Metrics) StreamEvents(_ string, index int) ingest.Observer {
	return streamEvents{s: x.stream(index), table: x.table}
}

// streamEvents counts one stream's in-client reconnects by cause.
type streamEvents struct {
	ingest.NopObserver
	s     *streamMetrics
	table string
}

var _ pool.StreamEventer = (*Metrics)(nil)

// OnReconnect counts a connection the logical stream replaced: a rotation
// the service announced, a concurrency reject, or a transient error.
func (e streamEvents) OnReconnect(_ string, reason error) {
	cause := causeTransient
	if ze := ingest.Classify(reason); ze != nil {
		switch {
		case ze.IsRotation():
			cause = causeRotation
		case ze.Class == ingest.ConcurrencyReject:
			cause = causeReject
		}
	}
	e.s.reconnects.Incr(1, e.table, e.s.label, cause)
}

// DeadLettered counts n dead letters made durable in this writer's table
// (a dead-letter table); NewDeadLetters calls it with 0 so that the series
// exists from start-up.
func (x *Metrics) DeadLettered(n int) {
	x.deadLetters().Incr(int64(n), x.table)
}

// deadLetters returns the dead-letter counter, made on first use: only a
// dead-letter table's writer has the series.
func (x *Metrics) deadLetters() Counter {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.dead == nil {
		x.dead = x.m.Counter(mDeadLetters, "table")
	}
	return x.dead
}

// RowErrors counts rows that failed conversion.
func (x *Metrics) RowErrors(n int) {
	if n > 0 {
		x.rowErrors.Incr(int64(n), x.table)
	}
}

// Reconciled counts emit-time type reconciliations by kind.
func (x *Metrics) Reconciled(kinds map[string]int) {
	for k, n := range kinds {
		if n > 0 {
			x.reconcile.Incr(int64(n), x.table, k)
		}
	}
}

// PrimaryRaw exports the primary-raw verdict: 1 for each unmet
// precondition, 0 for the others.
func (x *Metrics) PrimaryRaw(unmet []catalog.Unmet) {
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

// Rescued counts n fields moved into the rescue column, by the column they
// did not fit (RescueUnknownField for fields the table has no column for).
func (x *Metrics) Rescued(column string, n int) {
	x.rescued.Incr(int64(n), x.table, column)
}
