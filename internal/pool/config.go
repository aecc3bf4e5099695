package pool

import (
	"errors"
	"fmt"
	"github.com/benthos-zerobus/benthos-zerobus/internal/backoff"
	"log/slog"
	"math"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
)

// Config tunes a pool. Zero fields take the value of DefaultConfig, except
// SelfSizing (false keeps the size fixed) and Logger (nil discards).
type Config struct {
	// MinStreams is the floor of the pool size.
	MinStreams int
	// MaxStreams caps the pool size, whatever the bandwidth asks for.
	MaxStreams int
	// PerStreamMBps is the bandwidth one stream can carry (Zerobus documents
	// about 100 MB/s); lower it to leave headroom.
	PerStreamMBps float64
	// PeakMBps is the table's expected peak bandwidth; zero sizes the pool
	// at MinStreams.
	PeakMBps float64
	// PerStreamRowsPerSec is the rows per second one stream can carry
	// (Databricks' quotas page gives 100,000 by default; older copies of the
	// limitations page still say 15,000);
	// PeakRowsPerSec the table's expected peak in rows per second (zero:
	// unknown). The static size is the larger of the byte and the row need.
	PerStreamRowsPerSec, PeakRowsPerSec float64
	// SelfSizing lets the pool add one stream at a time, up to MaxStreams,
	// while its streams are saturated, and retire those extras once traffic
	// has fallen for ShrinkAfter (see Decide). DefaultConfig turns it on.
	SelfSizing bool
	// GrowInterval is the least time between two changes of size.
	GrowInterval time.Duration
	// ShrinkAfter is how long no stream may have been saturated before an
	// extra stream is retired.
	ShrinkAfter time.Duration
	// Logger receives one line per change of size, with its reason; nil
	// discards them.
	Logger *slog.Logger
	// AckChannelCapacity bounds each stream's ack lane; a full lane blocks
	// writers (backpressure). It counts claims (one per Write), not rows or
	// bytes: the bytes behind the claims pending on all lanes are bounded
	// by the caller's byte budget (tablewriter.Config.MaxInFlightBytes,
	// held by each writer until its claim settles) and, per stream, by
	// ingest.Config.MaxInflightBytes (encoded bytes not yet acked).
	AckChannelCapacity int
	// AckTimeout bounds one durability wait of a lane before it counts a
	// retry and waits again (see acklane.Config).
	AckTimeout time.Duration
	// OpenBackoffInitial and OpenBackoffMax bound the exponential back-off
	// between open attempts of one member; a concurrency reject waits at
	// least its RetryAfter.
	OpenBackoffInitial, OpenBackoffMax time.Duration
	// RebuildBudget is how many consecutive failed attempts (streams that
	// died before confirming anything, opens that failed with Poison) a
	// member may make before it is given up until Reopen.
	RebuildBudget int
	// PickTimeout bounds how long Write waits for a healthy member.
	PickTimeout time.Duration
	// OpenGate, when set, spaces the opens of the base members after a
	// failed one: one open per wait while they fail, the wait growing
	// across failures of any member and of any pool sharing the gate (a
	// table writer shares one across the pools it opens), so that an
	// endpoint that stays unreachable costs a few opens a minute, not a
	// burst per member and per pool. Each open then makes one connection
	// attempt (ingest.WithSingleAttempt): the gate is its retry. And
	// Connect reports the failure as soon as every member tried once.
	// Nil: each member backs off on its own (OpenBackoffInitial..Max).
	OpenGate *backoff.Gate
}

// DefaultConfig returns conservative defaults: two to sixteen streams sized at
// 100 MB/s and 100,000 rows/s each (the documented default per-stream
// quotas), self-sizing with one change per 2 s at most and extras
// retired after a minute without saturation, a 2048-item ack lane, 30 s per ack wait, open back-off from
// 1 s to 60 s (a pipeline-blocked reject asks for a minute), five attempts per
// rebuild and a 30 s wait for a healthy stream.
func DefaultConfig() Config {
	return Config{
		MinStreams:          2,
		MaxStreams:          16,
		PerStreamMBps:       100,
		PerStreamRowsPerSec: DefaultPerStreamRowsPerSec,
		SelfSizing:          true,
		GrowInterval:        DefaultGrowInterval,
		ShrinkAfter:         DefaultShrinkAfter,
		AckChannelCapacity:  acklane.DefaultCapacity,
		AckTimeout:          30 * time.Second,
		OpenBackoffInitial:  time.Second,
		OpenBackoffMax:      time.Minute,
		RebuildBudget:       5,
		PickTimeout:         30 * time.Second,
	}
}

// Sizing defaults.
const (
	// DefaultPerStreamRowsPerSec is the default per-stream row quota of
	// "Zerobus Ingest quotas"
	// (https://docs.databricks.com/aws/en/ingestion/zerobus-quotas, and
	// Azure's https://learn.microsoft.com/en-us/azure/databricks/ingestion/zerobus-limits;
	// read 2026-12-03): "Records per second per stream: 100,000
	// (benchmarked with 1 KB messages), adjustable". It was 15,000, and
	// older copies of the limitations page still say so (the Japanese,
	// Russian and Portuguese ones, read the same day): a workspace held to
	// it sets streams.per_stream_rows_per_sec: 15000. Self-sizing corrects
	// a pool whose streams carry less (their ack lag rises).
	DefaultPerStreamRowsPerSec = 100_000
	// DefaultGrowInterval is the least time between two changes of size:
	// one stream at a time, each given time to show its effect.
	DefaultGrowInterval = 2 * time.Second
	// DefaultShrinkAfter is how long traffic must stay below saturation
	// before an extra stream is retired: long enough that a pause between
	// bursts does not close and reopen streams.
	DefaultShrinkAfter = time.Minute
)

// Validate reports settings that are wrong rather than merely unset.
func (c Config) Validate() error {
	var errs []error
	if c.MinStreams < 0 || c.MaxStreams < 0 {
		errs = append(errs, fmt.Errorf("stream counts must not be negative (min %d, max %d)", c.MinStreams, c.MaxStreams))
	}
	if c.MinStreams > 0 && c.MaxStreams > 0 && c.MinStreams > c.MaxStreams {
		errs = append(errs, fmt.Errorf("min streams %d exceeds max streams %d", c.MinStreams, c.MaxStreams))
	}
	if c.PerStreamMBps < 0 || c.PeakMBps < 0 {
		errs = append(errs, fmt.Errorf("bandwidths must not be negative (per stream %g, peak %g)", c.PerStreamMBps, c.PeakMBps))
	}
	if c.PerStreamRowsPerSec < 0 || c.PeakRowsPerSec < 0 {
		errs = append(errs, fmt.Errorf("row rates must not be negative (per stream %g, peak %g)", c.PerStreamRowsPerSec, c.PeakRowsPerSec))
	}
	if c.GrowInterval < 0 || c.ShrinkAfter < 0 {
		errs = append(errs, fmt.Errorf("grow interval %s and shrink-after %s must not be negative", c.GrowInterval, c.ShrinkAfter))
	}
	if c.AckChannelCapacity < 0 || c.RebuildBudget < 0 {
		errs = append(errs, fmt.Errorf("ack channel capacity %d and rebuild budget %d must not be negative", c.AckChannelCapacity, c.RebuildBudget))
	}
	if c.AckTimeout < 0 || c.OpenBackoffInitial < 0 || c.OpenBackoffMax < 0 || c.PickTimeout < 0 {
		errs = append(errs, errors.New("durations must not be negative"))
	}
	if c.OpenBackoffInitial > 0 && c.OpenBackoffMax > 0 && c.OpenBackoffInitial > c.OpenBackoffMax {
		errs = append(errs, fmt.Errorf("open backoff initial %s exceeds max %s", c.OpenBackoffInitial, c.OpenBackoffMax))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pool config: %w", err)
	}
	return nil
}

// withDefaults fills unset fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MinStreams <= 0 {
		c.MinStreams = d.MinStreams
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = max(d.MaxStreams, c.MinStreams)
	}
	if c.PerStreamMBps <= 0 {
		c.PerStreamMBps = d.PerStreamMBps
	}
	if c.PerStreamRowsPerSec <= 0 {
		c.PerStreamRowsPerSec = d.PerStreamRowsPerSec
	}
	if c.GrowInterval <= 0 {
		c.GrowInterval = d.GrowInterval
	}
	if c.ShrinkAfter <= 0 {
		c.ShrinkAfter = d.ShrinkAfter
	}
	if c.AckChannelCapacity <= 0 {
		c.AckChannelCapacity = d.AckChannelCapacity
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = d.AckTimeout
	}
	if c.OpenBackoffInitial <= 0 {
		c.OpenBackoffInitial = d.OpenBackoffInitial
	}
	if c.OpenBackoffMax <= 0 {
		c.OpenBackoffMax = max(d.OpenBackoffMax, c.OpenBackoffInitial)
	}
	if c.RebuildBudget <= 0 {
		c.RebuildBudget = d.RebuildBudget
	}
	if c.PickTimeout <= 0 {
		c.PickTimeout = d.PickTimeout
	}
	return c
}

// Size returns the number of streams a pool starts with for cfg (its base,
// which self-sizing never goes below): enough streams to carry PeakMBps at
// PerStreamMBps each and PeakRowsPerSec at PerStreamRowsPerSec each, the
// larger of the two, at least MinStreams, at most MaxStreams. Both matter:
// 15 KB rows at 10,000 rows/s is 150 MB/s and needs two 100 MB/s streams;
// 20-byte rows at 250,000 rows/s is 5 MB/s and needs three 100,000 rows/s
// streams. Unset fields take their defaults.
func Size(cfg Config) int {
	cfg = cfg.withDefaults()
	n := cfg.MinStreams
	// The epsilon keeps 300/100 from rounding up to 4 on float noise.
	if cfg.PeakMBps > 0 {
		n = max(n, int(math.Ceil(cfg.PeakMBps/cfg.PerStreamMBps-1e-9)))
	}
	if cfg.PeakRowsPerSec > 0 {
		n = max(n, int(math.Ceil(cfg.PeakRowsPerSec/cfg.PerStreamRowsPerSec-1e-9)))
	}
	return max(1, min(n, max(cfg.MaxStreams, 1)))
}
