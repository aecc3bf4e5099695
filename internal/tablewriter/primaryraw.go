// The primary-raw role: its preconditions, checked at connect and re-checked
// on an interval, never cached as a verdict.

package tablewriter

import (
	"context"
	"errors"
	"fmt"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
)

// checkPrimaryRaw applies the primary-raw verdict for a described table:
// exported as metrics, and for the primary_raw role an error naming every
// unmet precondition.
func (w *Writer) checkPrimaryRaw(state *catalog.TableState) error {
	if w.cfg.Role != catalog.RolePrimaryRaw {
		return nil
	}
	unmet := catalog.CheckPrimaryRaw(state)
	w.obs.PrimaryRaw(unmet)
	if len(unmet) == 0 {
		w.rawRefusal.Store(nil)
		return nil
	}
	err := error(&catalog.PreconditionError{Table: w.cfg.Table, Unmet: unmet})
	w.rawRefusal.Store(&err)
	w.errorf("refusing to write: %v", err)
	return err
}

// startWatch re-checks the primary-raw preconditions on recheck_interval,
// never trusting a cached verdict: a property can change under a running
// pipeline.
func (w *Writer) startWatch() {
	w.watchMu.Lock()
	defer w.watchMu.Unlock()
	if w.cfg.Role != catalog.RolePrimaryRaw || w.watchStop != nil || w.life.isClosed() {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.watchStop, w.watchDone = cancel, make(chan struct{})
	go func() {
		defer close(w.watchDone)
		catalog.WatchPrimaryRaw(ctx, w.cat, w.cfg.Table, w.cfg.RecheckInterval, func(err error) {
			var pe *catalog.PreconditionError
			switch {
			case err == nil:
				w.obs.PrimaryRaw(nil)
				if w.rawRefusal.Swap(nil) != nil {
					w.infof("table %s satisfies the primary_raw preconditions again: writing resumes", w.cfg.Table)
				}
			case errors.As(err, &pe):
				w.obs.PrimaryRaw(pe.Unmet)
				w.rawRefusal.Store(&err)
				w.errorf("refusing to write: %v", err)
			default:
				// Eligibility cannot be confirmed: refuse until it can.
				err = fmt.Errorf("cannot confirm the primary_raw preconditions of %s: %w", w.cfg.Table, err)
				w.rawRefusal.Store(&err)
				w.errorf("refusing to write: %v", err)
			}
		})
	}()
}
