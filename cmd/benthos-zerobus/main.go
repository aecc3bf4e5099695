// Command benthos-zerobus is a Redpanda Connect / Benthos v4 binary with the
// core components, the zerobus output, a prometheus metrics exporter, and a
// local Zerobus + Databricks workspace emulator (`benthos-zerobus emulator`).
package main

import (
	"context"

	"github.com/redpanda-data/benthos/v4/public/service"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/prometheus"
	"github.com/benthos-zerobus/benthos-zerobus/plugin/zerobus"
)

// Stamped at build time: -ldflags "-X main.version=... -X main.dateBuilt=...".
var (
	version   = "dev"
	dateBuilt = "unknown"
)

func main() {
	// One version: the output's user agent reports the binary's.
	zerobus.Version = version
	service.RunCLI(
		context.Background(),
		service.CLIOptSetBinaryName("benthos-zerobus"),
		service.CLIOptSetProductName("benthos-zerobus"),
		service.CLIOptSetVersion(version, dateBuilt),
		service.CLIOptAddCommand(emulator.Command()),
	)
}
