// Must not compile: a pool's lane kind is one of the closed set of
// confirmation kinds; a callback is not one.
package pool

import "github.com/benthos-zerobus/benthos-zerobus/internal/ingest"

type callback func()

func proofForeignKind(o ingest.Opener) {
	_ = NewOf[callback](o, "t", nil, Config{}, nil)
}
