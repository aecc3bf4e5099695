package acklane

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrNoReceipt is what Wait returns on a nil *Receipt: there is nothing
// whose durability could be confirmed, so waiting must not pass for
// "durable".
var ErrNoReceipt = errors.New("acklane: wait on a nil receipt: no rows to confirm")

// Receipt is the waiting side of one confirmation: the caller that submitted
// rows (WriteBatch) waits on it, the lane settles it exactly once, either
// confirmed (the rows are durable) or failed (they may not be).
//
// A nil *Receipt ignores settlement, which models "nobody waits"; waiting on
// it is an error (ErrNoReceipt), never a confirmation.
type Receipt struct {
	done chan struct{}
	once sync.Once
	err  error // written once before done is closed
}

// newReceipt returns an unsettled receipt.
func newReceipt() *Receipt { return &Receipt{done: make(chan struct{})} }

// Wait blocks until the receipt is settled or ctx is done. It returns nil only
// if the lane confirmed the rows as durable; a failure returns the lane's error
// and a done ctx returns an error wrapping ctx.Err(), so that a caller never
// mistakes "gave up waiting" for "durable". On a nil receipt it returns
// ErrNoReceipt.
func (r *Receipt) Wait(ctx context.Context) error {
	if r == nil {
		return ErrNoReceipt
	}
	select {
	case <-r.done:
		return r.err
	default:
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("waiting for durable ack: %w", ctx.Err())
	}
}

// Done returns a channel closed once the receipt is settled.
func (r *Receipt) Done() <-chan struct{} { return r.done }

// Err returns nil while unsettled or after a confirmation, and the failure
// otherwise.
func (r *Receipt) Err() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

// Settled reports whether the receipt was confirmed or failed.
func (r *Receipt) Settled() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// settle records err (nil = confirmed) the first time it is called and
// reports whether this call settled the receipt.
func (r *Receipt) settle(err error) bool {
	if r == nil {
		return false
	}
	settled := false
	r.once.Do(func() {
		r.err = err
		close(r.done)
		settled = true
	})
	return settled
}

// RawAnchor confirms rows of the raw anchor lane: its confirmation is what
// lets the source advance (in Benthos, WriteBatch returning nil, which acks
// the input). It is a value, not a callback; the lane only settles its Receipt.
type RawAnchor struct{ r *Receipt }

// NewRawAnchor returns a raw-anchor confirmation and the receipt it settles.
func NewRawAnchor() (RawAnchor, *Receipt) {
	r := newReceipt()
	return RawAnchor{r: r}, r
}

// Receipt returns the receipt this confirmation settles.
func (c RawAnchor) Receipt() *Receipt { return c.r }

func (c RawAnchor) receipt() *Receipt { return c.r }

// Kind returns KindRawAnchor.
func (RawAnchor) Kind() Kind { return KindRawAnchor }

// DerivedCoverage confirms rows of a derived lane (output computed from raw
// data): its confirmation advances that lane's coverage and must never stand in
// for a raw-anchor confirmation, which is why it is a distinct type.
type DerivedCoverage struct{ r *Receipt }

// NewDerivedCoverage returns a derived-coverage confirmation and the receipt
// it settles.
func NewDerivedCoverage() (DerivedCoverage, *Receipt) {
	r := newReceipt()
	return DerivedCoverage{r: r}, r
}

// Receipt returns the receipt this confirmation settles.
func (c DerivedCoverage) Receipt() *Receipt { return c.r }

func (c DerivedCoverage) receipt() *Receipt { return c.r }

// Kind returns KindDerivedCoverage.
func (DerivedCoverage) Kind() Kind { return KindDerivedCoverage }

// Confirmation is the closed set of confirmation kinds. A lane is
// instantiated with exactly one kind, so Lane[RawAnchor] accepts only
// Pending[RawAnchor]: handing it a DerivedCoverage does not compile. The
// unexported method keeps other packages from adding kinds.
type Confirmation interface {
	RawAnchor | DerivedCoverage
	receipt() *Receipt
	Kind() Kind
}

// Kind names a confirmation kind, for health reports, logs and tests; the
// separation itself is the types', never a comparison of names.
type Kind string

// The confirmation kinds.
const (
	KindRawAnchor       Kind = "raw_anchor"
	KindDerivedCoverage Kind = "derived_coverage"
)

// KindOf returns the name of confirmation kind C.
func KindOf[C Confirmation]() Kind {
	var c C
	return c.Kind()
}

// NewConfirmation returns a new confirmation of kind C and the receipt it
// settles: what code generic over the kind (a stream pool whose lanes are
// Lane[C]) uses to make the confirmations of its own lanes, and only of
// them, since the result is a C.
func NewConfirmation[C Confirmation]() (C, *Receipt) {
	var c C
	r := newReceipt()
	switch p := any(&c).(type) {
	case *RawAnchor:
		p.r = r
	case *DerivedCoverage:
		p.r = r
	default: // unreachable: Confirmation is a closed set
		panic(fmt.Sprintf("acklane: confirmation kind %T has no constructor", c))
	}
	return c, r
}
