package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// Engine is what one output writes through: a Writer for a static table or
// a Router for an interpolated one (exactly one of them is set), and the
// dead-letter writer beside it when the output has one.
type Engine struct {
	Writer      *Writer
	Router      *Router
	DeadLetters *DeadLetters

	// opened is set once Open has succeeded: from then on the dead-letter
	// table no longer gates the output (see Open).
	opened atomic.Bool
}

// DeadLetterWriter returns the dead-letter table's writer; nil without one.
func (e *Engine) DeadLetterWriter() *Writer {
	if e.DeadLetters == nil {
		return nil
	}
	return e.DeadLetters.Writer()
}

// Open opens the table writer (or reopens the router's writers), then the
// dead-letter writer, and returns the first error: Open is retried as a
// whole, and each step is a no-op once open.
//
// The dead-letter table gates only the first Open, so a misconfigured one
// is reported before any row is written. Once the output has been open, a
// dead-letter table that fails (dropped, grant revoked) is the dead
// letters' problem alone: DeadLetters.Write reopens its writer, bounded,
// and fails only the bad rows back, while the good rows keep flowing;
// holding every batch for it would stall the table for rows that fit.
func (e *Engine) Open(ctx context.Context) error {
	if e.Writer != nil {
		if err := e.Writer.Open(ctx); err != nil {
			return err
		}
	}
	if e.Router != nil {
		if err := e.Router.Reconnect(ctx); err != nil {
			return err
		}
	}
	if w := e.DeadLetterWriter(); w != nil {
		if err := w.Open(ctx); err != nil && !e.opened.Load() {
			return err
		}
	}
	e.opened.Store(true)
	return nil
}

// Write writes one batch through the engine and is the whole write path of
// the output: the rows go to the table writer, or with a Router to each
// row's table (tableOf, unused without one); the rows that fail alone are
// then written to the dead-letter table, when there is one, before Write
// returns.
//
// It returns the rows that still failed (index into rows, column, cause),
// or an error for the whole batch. The verdict "not connected" is an error
// wrapping ErrNotOpen: nothing was written and the caller should hold the
// batch and Open again (the writer's lifecycle says when). Any other error
// means the batch is to be failed and redelivered. keyOf may be nil.
func (e *Engine) Write(ctx context.Context, rows []Row, tableOf TableFunc, keyOf KeyFunc) ([]RowError, error) {
	var rowErrs []RowError
	var sourceOf func(int) string
	switch {
	case e.Router != nil:
		tables := make([]string, len(rows))
		tableErrs := make([]error, len(rows))
		for i := range rows {
			tables[i], tableErrs[i] = tableOf(i)
		}
		sourceOf = func(i int) string { return tables[i] }
		rowErrs = e.Router.WriteRouted(ctx, rows, func(i int) (string, error) { return tables[i], tableErrs[i] }, keyOf)
		if AllNotOpen(rowErrs, len(rows)) {
			return nil, fmt.Errorf("%w: no table of the batch is open (first: %v)", ErrNotOpen, rowErrs[0].Err)
		}
	case e.Writer != nil:
		table := e.Writer.cfg.Table
		sourceOf = func(int) string { return table }
		var err error
		if rowErrs, err = e.Writer.Write(ctx, rows, keyOf); err != nil {
			return nil, err
		}
	default:
		return nil, ErrNotOpen
	}
	if len(rowErrs) > 0 && e.DeadLetters != nil {
		// The batch is acknowledged only once its dead letters are
		// durable too. DeadLetters.Write retries them alone, bounded;
		// what it still cannot write comes back as row errors, so only
		// the bad rows fail: the good ones are durable and never sent
		// again. Never "not connected": holding the batch would write
		// the good rows again.
		rest, err := e.DeadLetters.Write(ctx, sourceOf, rows, rowErrs)
		if err != nil {
			if errors.Is(err, ErrNotOpen) {
				return nil, fmt.Errorf("dead letters not written: %s", err)
			}
			return nil, err
		}
		rowErrs = rest
	}
	return rowErrs, nil
}

// Close drains and closes every writer within ctx and joins their errors.
func (e *Engine) Close(ctx context.Context) error {
	var errs []error
	if e.Writer != nil {
		errs = append(errs, e.Writer.Close(ctx))
	}
	if e.Router != nil {
		errs = append(errs, e.Router.Close(ctx))
	}
	if w := e.DeadLetterWriter(); w != nil {
		errs = append(errs, w.Close(ctx))
	}
	return errors.Join(errs...)
}
