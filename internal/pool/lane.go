package pool

import (
	"context"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
)

// lane is a member stream's ack lane as the pool uses it. The pool is not
// generic: each lane is an acklane.Lane[C] of the kind the pool was made
// with (NewOf), behind this interface, and only the typed lane itself makes
// the confirmations it enqueues, so no pool can put a confirmation of
// another kind on its lanes.
type lane interface {
	// confirm enqueues a new confirmation of the lane's kind for the rows
	// below to, submitted at submittedAt, and returns the receipt it
	// settles. On an error nothing was enqueued.
	confirm(ctx context.Context, to uint64, submittedAt time.Time) (*acklane.Receipt, error)
	// kind names the lane's confirmation kind.
	kind() acklane.Kind

	Delivered() uint64
	Pending() int64
	PendingRows() uint64
	Health() acklane.Health
	Failed() <-chan struct{}
	Err() error
	Fail(err error)
	Drain(ctx context.Context) error
	Close()
}

// kindLane is the lane of kind C: an acklane.Lane[C] that makes its own
// confirmations.
type kindLane[C acklane.Confirmation] struct {
	*acklane.Lane[C]
}

// newKindLane starts a lane of kind C waiting on w.
func newKindLane[C acklane.Confirmation](w acklane.Waiter, cfg acklane.Config, obs acklane.Observer) lane {
	return kindLane[C]{acklane.New[C](w, cfg, obs)}
}

func (l kindLane[C]) confirm(ctx context.Context, to uint64, submittedAt time.Time) (*acklane.Receipt, error) {
	c, r := acklane.NewConfirmation[C]()
	if err := l.Enqueue(ctx, acklane.Pending[C]{To: to, Confirm: c, SubmittedAt: submittedAt}); err != nil {
		return nil, err
	}
	return r, nil
}

func (kindLane[C]) kind() acklane.Kind { return acklane.KindOf[C]() }
