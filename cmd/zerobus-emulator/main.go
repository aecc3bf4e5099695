// Command zerobus-emulator runs a local Databricks workspace + Zerobus ingest
// emulator: OAuth M2M, Unity Catalog and SQL statements over HTTP, and
// Zerobus (Arrow Flight DoPut and the JSON EphemeralStream) over gRPC, with
// tables stored as Parquet + a Delta log. It is a separate binary so that the
// product binary, benthos-zerobus, links none of it.
package main

import (
	"fmt"
	"os"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

// Stamped at build time: -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := emulator.App(version).Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
