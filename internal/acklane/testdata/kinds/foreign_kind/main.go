// Package main must not compile: the set of confirmation kinds is closed, a
// callback cannot be used as one.
package main

import (
	"context"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
)

type waiter struct{}

func (waiter) WaitDurable(context.Context, uint64) error { return nil }

type callback func()

func main() {
	_ = acklane.New[callback](waiter{}, acklane.Config{}, nil)
}
