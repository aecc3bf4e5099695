// Package e2e runs Benthos pipelines with the zerobus output against the
// real emulator (in process, over real sockets) and the real Zerobus client,
// and the built benthos-zerobus binary as a subprocess.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/kafka"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/prometheus"
	_ "github.com/benthos-zerobus/benthos-zerobus/plugin/schemaregistry"
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
	return zerobusOutput(srv.GRPCURL(), srv.HTTPURL(), table, extra)
}

// newStream is a stream builder logging at warn level, with output as its
// output.
func newStream(tb testing.TB, output string) *service.StreamBuilder {
	tb.Helper()
	b := service.NewStreamBuilder()
	require.NoError(tb, b.SetLoggerYAML("level: warn"))
	require.NoError(tb, b.AddOutputYAML(output))
	return b
}

// startStream builds b and runs the stream in the background, bounded by
// the returned context (90s). stop stops it within 15s, waits for it to end
// and returns the error of stopping; the test's cleanup stops it too.
func startStream(tb testing.TB, b *service.StreamBuilder) (ctx context.Context, stop func() error) {
	tb.Helper()
	s, err := b.Build()
	require.NoError(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()
	var once sync.Once
	var stopErr error
	stop = func() error {
		once.Do(func() {
			stopErr = s.StopWithin(15 * time.Second)
			cancel()
			<-runDone
		})
		return stopErr
	}
	tb.Cleanup(func() { _ = stop() })
	return ctx, stop
}

// startProducer is startStream for a stream fed through a batch producer.
func startProducer(tb testing.TB, b *service.StreamBuilder) (service.MessageBatchHandlerFunc, context.Context, func() error) {
	tb.Helper()
	produce, err := b.AddBatchProducerFunc()
	require.NoError(tb, err)
	ctx, stop := startStream(tb, b)
	return produce, ctx, stop
}

// dlqBatching turns the output's own batching off. The engine's output
// batcher reduces a per-row batch error to one error for each upstream
// transaction, so a row-level dead-letter queue needs the rows batched
// before the output (at the input) and passed through unbatched.
const dlqBatching = "batching:\n  count: 0\n  period: \"\"\n"

// deadLetter is a row the fallback output received, with the error the
// zerobus output failed it with.
type deadLetter struct {
	Error string         `json:"error"`
	Row   map[string]any `json:"row"`
}

// writeWithFallback runs a pipeline whose zerobus output (with extra
// output YAML) falls back to a file, sends each batch in turn, stops the
// pipeline and returns the dead letters.
func writeWithFallback(t *testing.T, srv *emulator.Server, table, extra string, batches ...service.MessageBatch) []deadLetter {
	t.Helper()
	dlq := filepath.Join(t.TempDir(), "dlq.jsonl")
	produce, ctx, stop := startProducer(t, newStream(t, fmt.Sprintf(`
fallback:
  - %s
  - file:
      path: %s
      codec: lines
    processors:
      - mapping: |
          root.error = @fallback_error
          root.row = this
`, strings.ReplaceAll(outputYAML(srv, table, dlqBatching+extra), "\n", "\n    "), dlq)))
	for _, batch := range batches {
		require.NoError(t, produce(ctx, batch))
	}
	require.NoError(t, stop())

	f, err := os.Open(dlq)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var dead []deadLetter
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var d deadLetter
		require.NoError(t, json.Unmarshal(sc.Bytes(), &d), sc.Text())
		dead = append(dead, d)
	}
	require.NoError(t, sc.Err())
	return dead
}

// assertAtLeastOnce asserts the delivery contract on dups, the rows of a
// table stored more than once, given the emulator's counters for it (st):
// each must be a row the emulator left unacknowledged when it ended a
// stream itself (a rotation's close period over, a refused batch, a
// failure). Such a row may be stored already; its ack is lost with the
// stream and the output resends it, which at-least-once delivery allows
// (docs/protocol.md) and a loaded machine makes frequent (issue 27). A row
// stored twice for any other reason fails it: one the emulator acked and
// the output sent again, one resent over a connection the output gave up
// on, raw rows resent for their coverage. It returns the bound, for the
// test's log.
func assertAtLeastOnce(t *testing.T, st emulator.TableStats, dups int) int64 {
	t.Helper()
	assert.LessOrEqual(t, int64(dups), st.RowsLeftUnacked,
		"every duplicate is a row the emulator left unacknowledged when it ended a stream (at-least-once); rows received=%d acked=%d",
		st.RowsReceived, st.RowsAcked)
	return st.RowsLeftUnacked
}

// repoRoot finds the module root from this file's location, or from the
// working directory go test gives the package when the build trimmed it.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	dir := sourceDir()
	if dir == "" {
		// Built with -trimpath (make test): file names carry no
		// directory, and go test runs in the package's directory.
		wd, err := os.Getwd()
		require.NoError(tb, err)
		dir = wd
	}
	root := filepath.Clean(filepath.Join(dir, "..", ".."))
	_, err := os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(tb, err)
	return root
}

// sourceDir is this file's directory as the compiler saw it, or "" when
// the build trimmed it (-trimpath).
func sourceDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	return filepath.Dir(file)
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

// indentBy prefixes every line of s with n spaces (a trailing newline
// dropped), to put a YAML block under a key.
func indentBy(s string, n int) string {
	pad := strings.Repeat(" ", n)
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		out = append(out, pad+l)
	}
	return strings.Join(out, "\n")
}

// eventually polls cond every tick for up to wait and, if it never holds,
// fails the test with what and what the last poll saw. cond runs off the
// test goroutine (testify's Eventually), so it must not fail the test: it
// returns what it saw instead, and a failed fetch is a poll that did not
// hold.
func eventually(t testing.TB, wait, tick time.Duration, what string, cond func() (ok bool, saw string)) {
	t.Helper()
	var last atomic.Value // string; the poller may still run when Eventually gives up
	if !assert.Eventually(t, func() bool {
		ok, saw := cond()
		last.Store(saw)
		return ok
	}, wait, tick) {
		t.Fatalf("%s (last: %v)", what, last.Load())
	}
}
