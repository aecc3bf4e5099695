// Must not compile: a coverage pool's pending item carrying a raw-anchor
// confirmation.
package pool

import (
	"context"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
)

func proofRawInCoveragePending(l kindLane[acklane.DerivedCoverage]) {
	c, _ := acklane.NewConfirmation[acklane.RawAnchor]()
	_ = l.Enqueue(context.Background(), acklane.Pending[acklane.DerivedCoverage]{To: 1, Confirm: c})
}
