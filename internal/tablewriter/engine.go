package tablewriter

import (
	"context"
	"errors"
)

// Engine is what one output writes through: a Writer for a static table or
// a Router for an interpolated one (exactly one of them is set), and the
// dead-letter writer beside it when the output has one.
type Engine struct {
	Writer      *Writer
	Router      *Router
	DeadLetters *DeadLetters
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
		return w.Open(ctx)
	}
	return nil
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
