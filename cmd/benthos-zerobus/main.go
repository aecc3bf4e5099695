// Command benthos-zerobus is a Redpanda Connect / Benthos v4 binary with the
// core components, the zerobus output, the zerobus_replay input and a prometheus metrics exporter. The
// local emulator is a binary of its own, cmd/zerobus-emulator.
package main

import (
	"context"

	"github.com/redpanda-data/benthos/v4/public/service"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"

	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/prometheus"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/zerobus"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/zerobusreplay"
)

// Stamped at build time: -ldflags "-X main.version=... -X main.dateBuilt=...".
var (
	version   = "dev"
	dateBuilt = "unknown"
)

func main() {
	service.RunCLI(
		context.Background(),
		service.CLIOptSetBinaryName("benthos-zerobus"),
		service.CLIOptSetProductName("benthos-zerobus"),
		service.CLIOptSetVersion(version, dateBuilt),
	)
}
