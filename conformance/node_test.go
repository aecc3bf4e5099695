package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// conformanceDir is the directory holding this file, package.json and the
// node scripts: from this file's location, whatever the working directory of
// the test binary, or, when the build trimmed it, the working directory.
func conformanceDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if ok && filepath.IsAbs(file) {
		return filepath.Dir(file)
	}
	// Built with -trimpath (make test): file names carry no directory,
	// and go test runs in the package's directory.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("cannot locate conformance directory: %v", err)
	}
	return wd
}

// nodeBinary resolves node: $NODE_BINARY if set, else node on PATH. It fails (never
// skips) when node is missing, and when the SDK packages are not installed.
func nodeBinary(t testing.TB) string {
	t.Helper()
	dir := conformanceDir(t)
	for _, p := range []string{
		"node_modules/@databricks/zerobus-ingest-sdk-linux-x64-gnu/zerobus-ingest-sdk.linux-x64-gnu.node",
		"node_modules/apache-arrow/package.json",
	} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatalf("official Zerobus SDK conformance packages are not installed (%s missing).\n"+
				"Run the install step first:  npm ci --prefix conformance   (from the repository root; `make test` does this)", p)
		}
	}
	if n := os.Getenv("NODE_BINARY"); n != "" {
		return n
	}
	n, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found on PATH (set $NODE_BINARY): the conformance tests drive the official SDK through node: %v", err)
	}
	return n
}

// nodeResult is the one JSON line every conformance script prints.
type nodeResult struct {
	OK            bool    `json:"ok"`
	Error         string  `json:"error"`
	Code          string  `json:"code"`
	Retryable     *bool   `json:"retryable"`
	Rows          int64   `json:"rows"`
	Requests      int64   `json:"requests"`
	Batches       int64   `json:"batches"`
	IPCBytes      int64   `json:"ipc_bytes"`
	LastOffset    int64   `json:"last_offset"`
	Unacked       int64   `json:"unacked"`
	Seconds       float64 `json:"seconds"`
	OpenSeconds   float64 `json:"open_seconds"`
	IngestSeconds float64 `json:"ingest_seconds"`
	// CloseError is the SDK's close() failure when a rotation was announced
	// right after flush() resolved (see closeAfterFlush in lib.js).
	CloseError string `json:"close_error"`
	// EmptyBatchResult is what ingestRecordsOffset([]) returned
	// (sdk_json.js --empty-batch-first): null, a number, or "undefined".
	EmptyBatchResult json.RawMessage `json:"empty_batch_result"`
	// ElapsedMS is measured inside the script (from its start, node's own
	// boot excluded); set on failures.
	ElapsedMS int64 `json:"elapsed_ms"`

	Elapsed time.Duration `json:"-"` // wall time of the node process
	Stderr  string        `json:"-"`
	Exit    int           `json:"-"`
}

// runNode runs a conformance script with --key=value flags and parses its
// result line. It does not fail on a non-zero exit: callers assert on res.OK.
func runNode(t testing.TB, timeout time.Duration, script string, flags map[string]string) nodeResult {
	t.Helper()
	node := nodeBinary(t)
	args := []string{script}
	for k, v := range flags {
		args = append(args, fmt.Sprintf("--%s=%s", k, v))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = conformanceDir(t)
	cmd.Env = append(os.Environ(), "RUST_LOG=error")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	res := nodeResult{Elapsed: time.Since(start), Stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		res.Exit = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running node %s: %v\nstderr: %s", script, err, stderr.String())
	}
	if ctx.Err() != nil {
		t.Fatalf("node %s timed out after %v\nstdout: %s\nstderr: %s", script, timeout, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last := lines[len(lines)-1]
	if err := json.Unmarshal([]byte(last), &res); err != nil {
		t.Fatalf("node %s printed no result line (%v)\nstdout: %s\nstderr: %s", script, err, stdout.String(), stderr.String())
	}
	if res.OK != (res.Exit == 0) {
		t.Fatalf("node %s: result ok=%v but exit code %d: %s", script, res.OK, res.Exit, last)
	}
	// Only a scenario that rotates streams on purpose may see close() race a
	// rotation; anywhere else a failed close is a failure.
	if res.CloseError != "" {
		if flags["recovery"] != "true" {
			t.Fatalf("node %s: close failed without any rotation fault: %s", script, res.CloseError)
		}
		t.Logf("node %s: every row was flushed, then close() met a rotation: %s", script, res.CloseError)
	}
	return res
}
