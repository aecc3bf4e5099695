// Must not compile: a raw-anchor pending item handed to the lane of a
// coverage pool.
package pool

import (
	"context"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
)

func proofRawIntoCoverageLane(l kindLane[acklane.DerivedCoverage]) {
	c, _ := acklane.NewRawAnchor()
	_ = l.Enqueue(context.Background(), acklane.Pending[acklane.RawAnchor]{To: 1, Confirm: c})
}
