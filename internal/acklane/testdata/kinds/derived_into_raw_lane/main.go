// Package main must not compile: a derived-coverage confirmation handed to a
// raw-anchor lane.
package main

import (
	"context"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
)

type waiter struct{}

func (waiter) WaitDurable(context.Context, uint64) error { return nil }

func main() {
	raw := acklane.New[acklane.RawAnchor](waiter{}, acklane.Config{}, nil)
	d, _ := acklane.NewDerivedCoverage()
	_ = raw.Enqueue(context.Background(), acklane.Pending[acklane.DerivedCoverage]{To: 1, Confirm: d})
}
