package acklane

import "time"

// Observer receives a lane's metrics. The plugin turns it into Benthos
// metrics labelled {table, stream}; every lane gets its own. A nil Observer
// passed to New is replaced by one that discards everything.
type Observer interface {
	// ObserveBurst records the size of one coalesced burst: the number of
	// items one pass of the lane confirmed on one cumulative ack, with one
	// WaitDurable or none when they were durable already (the coalesce
	// ratio; 1 means no pipelining).
	ObserveBurst(size int)
	// ObserveDeliveryLatency records, per confirmed item, the time from
	// submit to confirmation.
	ObserveDeliveryLatency(d time.Duration)
	// SetPending reports the rows submitted and not yet confirmed durable
	// (the enqueued high-water minus the delivered watermark): it climbs
	// under load when the stream is pipelined.
	SetPending(rows int64)
	// IncRetry counts a WaitDurable attempt that hit AckTimeout while the
	// stream was healthy: the slow-ack symptom.
	IncRetry()
	// IncPoisoned counts the failure of the lane's stream: the cause. It is
	// called once per lane, whether the lane's wait saw the failure or Fail
	// reported it.
	IncPoisoned(cause error)
}

// AckLagObserver is the optional part of an Observer that records the
// lane's own share of a batch's latency: from the moment the stream received
// the ack that made the batch durable to its confirmation. It is observed
// only when the lane's Waiter is an AckClock (ingest.ArrowStream is).
type AckLagObserver interface {
	ObserveAckLag(d time.Duration)
}

// AckClock is the optional part of a Waiter that says when the ack making
// row durable was received, and false when it does not know.
type AckClock interface {
	AckedAt(row uint64) (time.Time, bool)
}

type nopObserver struct{}

func (nopObserver) ObserveBurst(int)                     {}
func (nopObserver) ObserveDeliveryLatency(time.Duration) {}
func (nopObserver) SetPending(int64)                     {}
func (nopObserver) IncRetry()                            {}
func (nopObserver) IncPoisoned(error)                    {}
