// Package main must not compile: a raw-anchor pending item carrying a
// derived-coverage confirmation.
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
	_ = raw.Enqueue(context.Background(), acklane.Pending[acklane.RawAnchor]{To: 1, Confirm: d})
}
