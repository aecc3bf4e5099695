// Package e2e runs Benthos pipelines with the zerobus output against the
// real emulator (in process, over real sockets) and the real Zerobus client,
// and the built benthos-zerobus binary as a subprocess.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/prometheus"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/zerobus"
)

const (
	eventsTable = "main.default.events"
	eventsCols  = "id BIGINT NOT NULL, msg STRING, level STRING, ts TIMESTAMP"
)

// startEmulator starts an in-process emulator on free loopback ports.
func startEmulator(tb testing.TB, faults emulator.Faults, tables ...string) *emulator.Server {
	tb.Helper()
	srv, err := emulator.Start(emulator.Config{
		HTTPAddr: "127.0.0.1:0",
		GRPCAddr: "127.0.0.1:0",
		DataDir:  tb.TempDir(),
		Tables:   tables,
		Faults:   faults,
	})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = srv.Close() })
	return srv
}

// outputYAML is a zerobus output pointed at srv; extra is indented under
// the zerobus key.
func outputYAML(srv *emulator.Server, table, extra string) string {
	y := fmt.Sprintf(`zerobus:
  endpoint: %s
  workspace_url: %s
  table: %s
  client_id: %s
  client_secret: %s
`, srv.GRPCURL(), srv.HTTPURL(), table, emulator.DefaultClientID, emulator.DefaultClientSecret)
	for _, l := range strings.Split(strings.TrimRight(extra, "\n"), "\n") {
		if l != "" {
			y += "  " + l + "\n"
		}
	}
	return y
}

// runStream builds and runs a stream until it ends by itself or timeout.
func runStream(tb testing.TB, b *service.StreamBuilder, timeout time.Duration) {
	tb.Helper()
	s, err := b.Build()
	require.NoError(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	require.NoError(tb, s.Run(ctx))
}

// repoRoot finds the module root from this file's location.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(tb, ok)
	root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	_, err := os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(tb, err)
	return root
}

// rowsByID reads back every stored row of table keyed by its id column.
func rowsByID(tb testing.TB, srv *emulator.Server, table string) map[int64]map[string]any {
	tb.Helper()
	rows, err := srv.TableRows(table, 0)
	require.NoError(tb, err)
	out := map[int64]map[string]any{}
	for _, r := range rows {
		id, ok := asInt64(r["id"])
		require.True(tb, ok, "row without an integer id: %v", r)
		out[id] = r
	}
	return out
}

func asInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case int32:
		return int64(x), true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	case float64:
		return int64(x), true
	}
	return 0, false
}
