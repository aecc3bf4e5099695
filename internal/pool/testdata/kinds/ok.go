// The positive control of the pool's lane-kind compile test: this file,
// added to package pool, must compile. A coverage pool's lane enqueues the
// confirmations of its own kind.
package pool

import (
	"context"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
)

var _ lane = kindLane[acklane.DerivedCoverage]{}

func proofOK(o ingest.Opener, l kindLane[acklane.DerivedCoverage]) {
	_ = NewOf[acklane.DerivedCoverage](o, "t", nil, Config{}, nil)
	d, _ := acklane.NewConfirmation[acklane.DerivedCoverage]()
	_ = l.Enqueue(context.Background(), acklane.Pending[acklane.DerivedCoverage]{To: 1, Confirm: d})
}
