// The clients the output builds for its table writer, and the mapping of its
// knobs onto the writer's config.

package zerobus

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/tablewriter"
)

// writerConfig maps the output's knobs onto the table writer's config. The
// contract file is read here, once.
func (c *outputConfig) writerConfig(writerID string) (tablewriter.Config, error) {
	wc := tablewriter.Config{
		Table:              c.Table,
		WriterID:           writerID,
		Principal:          c.ClientID,
		Provision:          c.Provision,
		Widen:              c.Widen,
		CommentsPolicy:     catalog.Policy(c.CommentsPolicy),
		ColumnDescriptions: c.ColumnDescriptions,
		Role:               catalog.Role(c.Role),
		RecheckInterval:    c.RecheckInterval,
		Convert:            arrowconv.Options{NestedToString: c.NestedToString, EpochUnit: c.EpochUnit, NTZFromZoned: c.ntzFromZoned()},
		Pool:               c.poolConfig(),
		AckTimeout:         c.AckTimeout,
		RedescribeTimeout:  c.CloseTimeout,
		MaxInFlightBytes:   int64(c.MaxInFlightBytes),
		DedupView:          c.DedupView,
		DedupViewName:      c.DedupViewName,
	}
	wc.Rescue = c.Rescue
	wc.SchemaMetadata = c.SchemaMetadata
	if c.CovSource != nil {
		wc.Coverage = &tablewriter.CoverageConfig{Table: c.CovTable, Position: c.position}
	}
	if c.ContractPath != "" {
		contract, err := catalog.LoadContract(c.ContractPath)
		if err != nil {
			return wc, fmt.Errorf("field %s.%s: %w", fCatalog, fContract, err)
		}
		wc.Contract = contract
	}
	return wc, nil
}

// position is a message's coverage source and offset.
func (c *outputConfig) position(r tablewriter.Row) (string, string, error) {
	src, err := rowString(c.CovSource, c.covSourceTmpl, r)
	if err != nil {
		return "", "", fmt.Errorf("field %s.source: %w", fCoverage, err)
	}
	off, err := rowString(c.CovOffset, c.covOffsetTmpl, r)
	if err != nil {
		return "", "", fmt.Errorf("field %s.offset: %w", fCoverage, err)
	}
	return src, off, nil
}

// poolConfig maps the output's knobs onto the pool's.
func (c *outputConfig) poolConfig() pool.Config {
	pc := pool.DefaultConfig()
	pc.MinStreams = c.StreamsMin
	pc.MaxStreams = c.StreamsMax
	pc.PerStreamMBps = c.PerStreamMBps
	pc.PeakMBps = c.PeakMBps
	pc.PerStreamRowsPerSec = c.PerStreamRows
	pc.PeakRowsPerSec = c.PeakRows
	pc.SelfSizing = c.SelfSizing
	pc.GrowInterval = c.GrowInterval
	pc.ShrinkAfter = c.ShrinkAfter
	pc.AckChannelCapacity = c.AckCapacity
	// The lane's AckTimeout is one durability wait before it counts a
	// retry (the slow-ack symptom) and waits again; ack.timeout is the
	// whole budget of one batch, enforced by the table writer.
	pc.AckTimeout = min(pc.AckTimeout, c.AckTimeout)
	return pc
}

// ensureClients creates the Zerobus client and the catalog on first use;
// called with o.mu held.
func (o *output) ensureClients() error {
	if o.opener == nil {
		if o.deps.opener != nil {
			o.opener = o.deps.opener
		} else {
			c, err := ingest.NewClient(ingest.Config{
				Endpoint:         o.cfg.Endpoint,
				WorkspaceURL:     o.cfg.WorkspaceURL,
				WorkspaceID:      o.cfg.WorkspaceID,
				ClientID:         o.cfg.ClientID,
				ClientSecret:     o.cfg.ClientSecret,
				CredentialSource: o.cfg.credSource,
				TLS:              o.cfg.TLS,
				ProxyURL:         o.cfg.ProxyURL,
				Compression:      o.cfg.Compression,
				UserAgent:        userAgent(o.version),
				Keepalive:        ingest.Keepalive{Time: o.cfg.KeepaliveTime, Timeout: o.cfg.KeepaliveTimeout},
				Observer:         newRedialLog(tablewriter.LogEvents(newSlogLogger(o.log)), newSlogLogger(o.log), o.cfg.Endpoint),
			})
			if err != nil {
				return fmt.Errorf("zerobus client: %w", err)
			}
			o.opener = c
		}
	}
	if o.cat == nil {
		if o.deps.catalog != nil {
			o.cat = o.deps.catalog
		} else {
			uc, err := catalog.NewUC(catalog.UCConfig{
				Host:         o.cfg.WorkspaceURL,
				ClientID:     o.cfg.ClientID,
				ClientSecret: o.cfg.ClientSecret,
				AuthType:     "oauth-m2m",
				WarehouseID:  o.cfg.WarehouseID,
				// The SDK's own InsecureSkipVerify is ignored once a
				// transport is given: tls carries it.
				HTTPTransport:    ingest.NewHTTPTransport(o.cfg.TLS, o.cfg.ProxyURL),
				Logger:           newSlogLogger(o.log),
				CallTimeout:      o.cfg.WSTimeout,
				CredentialSource: o.cfg.credSource,
			})
			if err != nil {
				return fmt.Errorf("catalog: %w", err)
			}
			o.cat = uc
		}
	}
	return nil
}

// userAgent names the product and the binary's version (the engine version
// the binary stamped through service.CLIOptSetVersion).
func userAgent(version string) string {
	if version == "" {
		version = "dev"
	}
	return "benthos-zerobus/" + version
}

// redialLog adds to the stream events' log a line for the replacement of
// the Zerobus connection (see ingest.RedialObserver): a warning, then, while
// replacements keep coming (an endpoint that stays silent is replaced at
// each failed open), at most one more per redialQuiet, the others at debug
// level: the writer explains the outage itself, once per cause.
type redialLog struct {
	ingest.Observer
	log      *slog.Logger
	endpoint string
	// lastWarn is when the last warning was logged (unix nanos; 0: never).
	lastWarn *atomic.Int64
}

// redialQuiet is the least time between two warnings of replaced
// connections.
const redialQuiet = 15 * time.Minute

func newRedialLog(events ingest.Observer, log *slog.Logger, endpoint string) redialLog {
	return redialLog{Observer: events, log: log, endpoint: endpoint, lastWarn: new(atomic.Int64)}
}

func (r redialLog) OnRedial(gen uint64, reason error) {
	msg := fmt.Sprintf("zerobus connection to %s replaced by a new one (connection #%d): %s; its streams are rebuilt on the new one and their unacknowledged rows resent", r.endpoint, gen, tablewriter.CauseText(reason))
	now := time.Now().UnixNano()
	if last := r.lastWarn.Load(); (last == 0 || now-last >= int64(redialQuiet)) && r.lastWarn.CompareAndSwap(last, now) {
		r.log.Warn(msg)
		return
	}
	r.log.Debug(msg)
}

// ntzFromZoned is whether a time lands in a TIMESTAMP_NTZ column as its UTC
// wall time: reconcile.timestamp_ntz_from_zoned, or catalog.schema_metadata,
// since the Avro decoder gives a local timestamp as a time in UTC whose
// wall clock is the local value (github.com/twmb/avro, Schema.Decode:
// "local-timestamp-millis/micros/nanos: time.Time (UTC; wall-clock fields
// encode/decode as if UTC, matching Java's reference impl)"), and such a
// field's column is a TIMESTAMP_NTZ.
func (c *outputConfig) ntzFromZoned() bool {
	return c.NTZFromZoned || c.SchemaMetadata != "" || c.RegistryURL != ""
}
