// Command benthos-zerobus is a Redpanda Connect / Benthos v4 binary with the
// core components, the zerobus output, the zerobus_replay input, the redpanda
// (Kafka) input, the schema_registry_decode processor and a prometheus
// metrics exporter. The local emulator is a
// binary of its own, cmd/zerobus-emulator.
//
// The redpanda input (plugin/kafka) and the schema_registry_decode processor
// (plugin/schemaregistry) are registered here only, not by plugin/zerobus: a
// Redpanda Connect build that imports the output has its own.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/redpanda-data/benthos/v4/public/service"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"

	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/kafka"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/prometheus"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/schemaregistry"
	"github.com/benthos-zerobus/benthos-zerobus/plugin/zerobus"
	"github.com/benthos-zerobus/benthos-zerobus/plugin/zerobusreplay"
)

// Stamped at build time: -ldflags "-X main.version=... -X main.dateBuilt=...".
var (
	version   = "dev"
	dateBuilt = "unknown"
)

// main runs the Benthos CLI. A pipeline whose zerobus_replay input refused
// its table ends like one that finished, so the exit status is set here:
// zerobusreplay.RefusedExitCode, for scripts that run a replay.
//
// SIGTERM and SIGINT also reach the zerobus outputs (zerobus.BeginShutdown),
// so that a held or stalled batch does not keep the process alive past
// close_timeout.
func main() {
	stopNotify := zerobus.NotifyShutdownOnSignal()
	code, err := service.RunCLIToCode(
		context.Background(),
		service.CLIOptSetBinaryName("benthos-zerobus"),
		service.CLIOptSetProductName("benthos-zerobus"),
		service.CLIOptSetVersion(version, dateBuilt),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err.Error())
	}
	stopNotify()
	if code == 0 && zerobusreplay.Refused() {
		code = zerobusreplay.RefusedExitCode
	}
	os.Exit(code)
}
