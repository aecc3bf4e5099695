// The primary-raw role: its preconditions, checked at connect and re-checked
// on an interval, never cached as a verdict.

package zerobus

import (
	"context"
	"errors"
	"fmt"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
)

// checkPrimaryRaw applies the primary-raw verdict for a described table:
// exported as metrics, and for the primary_raw role an error naming every
// unmet precondition.
func (o *output) checkPrimaryRaw(state *catalog.TableState) error {
	if o.cfg.Role != RolePrimaryRaw {
		return nil
	}
	unmet := catalog.CheckPrimaryRaw(state)
	o.met.PrimaryRaw(unmet)
	if len(unmet) == 0 {
		o.rawRefusal.Store(nil)
		return nil
	}
	err := error(&catalog.PreconditionError{Table: o.cfg.Table, Unmet: unmet})
	o.rawRefusal.Store(&err)
	o.log.Errorf("refusing to write: %v", err)
	return err
}

// startWatch re-checks the primary-raw preconditions on recheck_interval,
// never trusting a cached verdict: a property can change under a running
// pipeline.
func (o *output) startWatch() {
	o.watchMu.Lock()
	defer o.watchMu.Unlock()
	if o.cfg.Role != RolePrimaryRaw || o.watchStop != nil || o.closed.Load() {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	o.watchStop, o.watchDone = cancel, make(chan struct{})
	go func() {
		defer close(o.watchDone)
		catalog.WatchPrimaryRaw(ctx, o.cat, o.cfg.Table, o.cfg.RecheckInterval, func(err error) {
			var pe *catalog.PreconditionError
			switch {
			case err == nil:
				o.met.PrimaryRaw(nil)
				if o.rawRefusal.Swap(nil) != nil {
					o.log.Infof("table %s satisfies the primary_raw preconditions again: writing resumes", o.cfg.Table)
				}
			case errors.As(err, &pe):
				o.met.PrimaryRaw(pe.Unmet)
				o.rawRefusal.Store(&err)
				o.log.Errorf("refusing to write: %v", err)
			default:
				// Eligibility cannot be confirmed: refuse until it can.
				err = fmt.Errorf("cannot confirm the primary_raw preconditions of %s: %w", o.cfg.Table, err)
				o.rawRefusal.Store(&err)
				o.log.Errorf("refusing to write: %v", err)
			}
		})
	}()
}
