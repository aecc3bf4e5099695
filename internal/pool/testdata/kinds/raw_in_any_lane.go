// Must not compile: the lane adapter, generic over its kind, cannot make a
// raw-anchor confirmation for its own lane whatever kind it is instantiated
// with; only acklane.NewConfirmation[C] fits.
package pool

import (
	"context"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
)

func (l kindLane[C]) proofRawInAnyLane() {
	c, _ := acklane.NewRawAnchor()
	_ = l.Enqueue(context.Background(), acklane.Pending[C]{To: 1, Confirm: c})
}
