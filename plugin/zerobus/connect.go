// Connecting: clients, the stream pool and the mapping of connect failures.

package zerobus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// poolConfig maps the output's knobs onto the pool's.
func (o *output) poolConfig() pool.Config {
	pc := pool.DefaultConfig()
	pc.MinStreams = o.cfg.StreamsMin
	pc.MaxStreams = o.cfg.StreamsMax
	pc.PerStreamMBps = o.cfg.PerStreamMBps
	pc.PeakMBps = o.cfg.PeakMBps
	pc.AckChannelCapacity = o.cfg.AckCapacity
	// The lane's AckTimeout is one durability wait before it counts a
	// retry (the slow-ack symptom) and waits again; ack.timeout is the
	// whole budget of one batch, enforced in WriteBatch.
	pc.AckTimeout = min(pc.AckTimeout, o.cfg.AckTimeout)
	return pc
}

// ensureClients creates the Zerobus client and the catalog on first use.
func (o *output) ensureClients() error {
	if o.opener == nil {
		if o.deps.opener != nil {
			o.opener = o.deps.opener
		} else {
			c, err := ingest.NewClient(ingest.Config{
				Endpoint:     o.cfg.Endpoint,
				WorkspaceURL: o.cfg.WorkspaceURL,
				WorkspaceID:  o.cfg.WorkspaceID,
				ClientID:     o.cfg.ClientID,
				ClientSecret: o.cfg.ClientSecret,
				Compression:  o.cfg.Compression,
				UserAgent:    userAgent(o.version),
				Observer:     clientObserver{log: o.log},
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
				Logger:       newSlogLogger(o.log),
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

// buildState makes the converter for columns and, unless prev is given to
// be reopened, a new connected pool. It maps connect failures: a concurrency
// reject asks the engine to back off for the service's hint.
func (o *output) buildState(ctx context.Context, cols []typemap.Column, prev *pool.Pool) (*writeState, error) {
	conv, err := arrowconv.New(cols, arrowconv.Options{NestedToString: o.cfg.NestedToString, EpochUnit: o.cfg.EpochUnit})
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", o.cfg.Table, err)
	}
	st := &writeState{columns: cols, names: map[string]bool{}, conv: conv}
	for _, c := range cols {
		st.names[strings.ToLower(c.Name)] = true
	}
	if prev != nil {
		if err := prev.Reopen(ctx, conv.Schema()); err != nil {
			return nil, mapConnectErr(fmt.Errorf("reopen streams of %s on the new schema: %w", o.cfg.Table, err))
		}
		st.pool = prev
		return st, nil
	}
	// A pool whose first Connect failed is kept (its members keep retrying
	// with back-off) and reused on the next attempt, so a refused connect
	// never turns into a fresh set of opens.
	var p *pool.Pool
	if sp := o.spare.Swap(nil); sp != nil {
		if sameSchema(sp.schema, conv.Schema()) {
			p = sp.pool
		} else {
			_ = sp.pool.Close(context.Background())
		}
	}
	if p == nil {
		p = pool.New(o.opener, o.cfg.Table, conv.Schema(), o.poolConfig(), poolObserver{o.met})
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := p.Connect(cctx); err != nil {
		if errors.Is(err, pool.ErrClosed) {
			return nil, err
		}
		o.spare.Store(&sparePool{pool: p, schema: conv.Schema()})
		err = fmt.Errorf("open streams to %s: %w", o.cfg.Table, err)
		if ingest.Classify(err).Class != ingest.FatalConfig && p.Stats().ConcurrencyRejects > 0 {
			return nil, service.NewErrBackOff(err, ingest.ResourceExhaustedBackoff)
		}
		return nil, mapConnectErr(err)
	}
	st.pool = p
	return st, nil
}

// connectTimeout bounds one Connect's wait for a healthy stream; the pool
// keeps retrying in the background and the engine calls Connect again.
const connectTimeout = 30 * time.Second

// sparePool is a pool kept after a failed Connect, with the schema it was
// built for.
type sparePool struct {
	pool   *pool.Pool
	schema *arrow.Schema
}

func sameSchema(a, b *arrow.Schema) bool { return a == b || (a != nil && b != nil && a.Equal(b)) }

// mapConnectErr turns a concurrency reject into a backoff request and leaves
// everything else (fatal config errors included, which must be loud) as is.
func mapConnectErr(err error) error {
	if ze := ingest.Classify(err); ze != nil && ze.Class == ingest.ConcurrencyReject {
		wait := ze.RetryAfter
		if wait <= 0 {
			wait = ingest.ResourceExhaustedBackoff
		}
		return service.NewErrBackOff(err, wait)
	}
	return err
}

// clientObserver logs the client's connection events. Rotations are normal
// and logged at debug; a stream failing for good is an error.
type clientObserver struct{ log *service.Logger }

func (c clientObserver) OnRotation(table string) {
	c.log.Debugf("zerobus stream to %s rotated by the service", table)
}

func (c clientObserver) OnReconnect(table string, reason error) {
	c.log.Debugf("zerobus stream to %s reconnected: %v", table, reason)
}

func (c clientObserver) OnRetry(table string, attempt int, err error) {
	c.log.Warnf("zerobus stream to %s: reconnect attempt %d failed: %v", table, attempt, err)
}

func (c clientObserver) OnFailure(table string, err *ingest.Error) {
	c.log.Errorf("zerobus stream to %s failed: %v", table, err)
}
