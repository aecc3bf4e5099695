package tablewriter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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

// ErrProcessorFailed marks the row error of a message that a processor
// before the output failed (its error flag, service.Message.GetError): the
// message is not the value the pipeline meant to write, so it is never
// converted or written to the table, and never used to infer columns; it
// goes to the dead-letter table, or fails back to the pipeline, with the
// processor's own error.
var ErrProcessorFailed = errors.New("failed in a processor")

// ProcessorFailed is the row error of message i, failed by a processor with
// err: "message i: failed in a processor: <err>".
func ProcessorFailed(i int, err error) RowError {
	return RowError{Index: i, Err: fmt.Errorf("%w: %w", ErrProcessorFailed, err)}
}

// Write writes one batch through the engine and is the whole write path of
// the output: the rows go to the table writer, or with a Router to each
// row's table (tableOf, unused without one); the rows that fail alone are
// then written to the dead-letter table, when there is one, before Write
// returns.
//
// failed are the rows a processor failed already (ProcessorFailed, in
// index order): they are left out of the table's write and are dead-lettered
// (or returned) with the others that fail.
//
// It returns the rows that still failed (index into rows, column, cause),
// or an error for the whole batch. The verdict "not connected" is an error
// wrapping ErrNotOpen: nothing was written and the caller should hold the
// batch and Open again (the writer's lifecycle says when). Any other error
// means the batch is to be failed and redelivered. keyOf may be nil.
func (e *Engine) Write(ctx context.Context, rows []Row, failed []RowError, tableOf TableFunc, keyOf KeyFunc) ([]RowError, error) {
	if e.Writer == nil && e.Router == nil {
		return nil, ErrNotOpen
	}
	// keep maps an index of the rows written to its index in rows; nil
	// when every row is written.
	var keep []int
	write, wTableOf, wKeyOf := rows, tableOf, keyOf
	if len(failed) > 0 {
		skip := make(map[int]bool, len(failed))
		for _, f := range failed {
			skip[f.Index] = true
		}
		keep = make([]int, 0, len(rows))
		write = make([]Row, 0, len(rows))
		for i, r := range rows {
			if !skip[i] {
				keep = append(keep, i)
				write = append(write, r)
			}
		}
		if tableOf != nil {
			wTableOf = func(j int) (string, error) { return tableOf(keep[j]) }
		}
		if keyOf != nil {
			wKeyOf = func(j int) (string, error) { return keyOf(keep[j]) }
		}
	}
	var rowErrs []RowError
	var sourceOf func(int) string
	switch {
	case e.Router != nil:
		tables := make([]string, len(write))
		tableErrs := make([]error, len(write))
		for j := range write {
			tables[j], tableErrs[j] = wTableOf(j)
		}
		sourceOf = func(i int) string { return tables[i] }
		if len(write) > 0 {
			rowErrs = e.Router.WriteRouted(ctx, write, func(j int) (string, error) { return tables[j], tableErrs[j] }, wKeyOf)
			if AllNotOpen(rowErrs, len(write)) {
				return nil, fmt.Errorf("%w: no table of the batch is open (first: %v)", ErrNotOpen, rowErrs[0].Err)
			}
		}
		if keep != nil {
			// A failed row's table, for its dead letter: its interpolation
			// evaluated now ("" when it fails too).
			bound := tables
			tables = make([]string, len(rows))
			for j, i := range keep {
				tables[i] = bound[j]
			}
			for _, f := range failed {
				if t, err := tableOf(f.Index); err == nil {
					tables[f.Index] = t
				}
			}
		}
	default:
		table := e.Writer.cfg.Table
		sourceOf = func(int) string { return table }
		if len(write) > 0 {
			var err error
			if rowErrs, err = e.Writer.Write(ctx, write, wKeyOf); err != nil {
				return nil, err
			}
		}
	}
	if keep != nil {
		rowErrs = mergeFailed(rowErrs, keep, failed)
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

// mergeFailed maps the row errors of the rows written (indices into the
// written rows, keep[j] being row j's index in the batch) back to the
// batch's indices and merges them with failed, in index order.
func mergeFailed(rowErrs []RowError, keep []int, failed []RowError) []RowError {
	out := make([]RowError, 0, len(rowErrs)+len(failed))
	for _, re := range rowErrs {
		if re.Index >= 0 && re.Index < len(keep) {
			re.Index = keep[re.Index]
		}
		out = append(out, re)
	}
	out = append(out, failed...)
	slices.SortStableFunc(out, func(a, b RowError) int { return cmp.Compare(a.Index, b.Index) })
	return out
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
