package ingest

import "context"

type observerKey struct{}

// WithObserver returns a ctx under which Open reports the events of the
// stream it opens to obs as well as to the client's Observer, for the whole
// life of that stream. The pool uses it to label one stream's reconnects
// with the member they belong to.
func WithObserver(ctx context.Context, obs Observer) context.Context {
	return context.WithValue(ctx, observerKey{}, obs)
}

// streamObserver is the observer of a stream opened under ctx: the client's
// (never nil: Config defaults it to NopObserver), teed to the one
// WithObserver put in ctx, if any.
func streamObserver(ctx context.Context, client Observer) Observer {
	extra, _ := ctx.Value(observerKey{}).(Observer)
	if extra == nil {
		return client
	}
	return tee{client, extra}
}

// tee sends every event to two observers, in order.
type tee [2]Observer

func (t tee) OnRotation(table string) {
	t[0].OnRotation(table)
	t[1].OnRotation(table)
}

func (t tee) OnReconnect(table string, reason error) {
	t[0].OnReconnect(table, reason)
	t[1].OnReconnect(table, reason)
}

func (t tee) OnRetry(table string, attempt int, err error) {
	t[0].OnRetry(table, attempt, err)
	t[1].OnRetry(table, attempt, err)
}

func (t tee) OnFailure(table string, err *Error) {
	t[0].OnFailure(table, err)
	t[1].OnFailure(table, err)
}

type singleAttemptKey struct{}

// WithSingleAttempt makes an Open under ctx try to connect once, without
// the retries within its recovery budget: for a caller that retries opens
// itself, with a back-off of its own (the pool, gated per writer), so that
// a dead endpoint costs one connection attempt per open, not a burst of
// them logged one by one. Reconnects of the stream, once open, keep their
// budget.
func WithSingleAttempt(ctx context.Context) context.Context {
	return context.WithValue(ctx, singleAttemptKey{}, true)
}

// firstConnectAttempts is how many attempts an Open under ctx makes.
func firstConnectAttempts(ctx context.Context, budget int) int {
	if single, _ := ctx.Value(singleAttemptKey{}).(bool); single {
		return 1
	}
	return budget
}
