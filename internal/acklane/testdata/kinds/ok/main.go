// Package main is the positive control of the lane-kind compile test: the
// same program as its siblings with matching kinds must compile.
package main

import (
	"context"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
)

type waiter struct{}

func (waiter) WaitDurable(context.Context, uint64) error { return nil }

func main() {
	raw := acklane.New[acklane.RawAnchor](waiter{}, acklane.Config{}, nil)
	c, _ := acklane.NewRawAnchor()
	_ = raw.Enqueue(context.Background(), acklane.Pending[acklane.RawAnchor]{To: 1, Confirm: c})

	derived := acklane.New[acklane.DerivedCoverage](waiter{}, acklane.Config{}, nil)
	d, _ := acklane.NewDerivedCoverage()
	_ = derived.Enqueue(context.Background(), acklane.Pending[acklane.DerivedCoverage]{To: 1, Confirm: d})
}
