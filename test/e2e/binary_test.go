package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binaries builds cmd/benthos-zerobus and cmd/zerobus-emulator once per
// test process into one directory.
func binaries(tb testing.TB) string {
	tb.Helper()
	root := repoRoot(tb)
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "benthos-zerobus-e2e-")
		if buildErr != nil {
			return
		}
		buildErr = goBuild(root, "-o", buildDir+string(filepath.Separator), "./cmd/benthos-zerobus", "./cmd/zerobus-emulator")
	})
	require.NoError(tb, buildErr)
	return buildDir
}

// goBuild runs go build with args in the repository at root; its error
// carries the compiler's output.
func goBuild(root string, args ...string) error {
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// binary is the product binary, bin/benthos-zerobus as built by make build.
func binary(tb testing.TB) string { return filepath.Join(binaries(tb), "benthos-zerobus") }

// emulatorBinary is the emulator's own binary, bin/zerobus-emulator.
func emulatorBinary(tb testing.TB) string { return filepath.Join(binaries(tb), "zerobus-emulator") }

// proc is a subprocess whose output is captured.
type proc struct {
	cmd *exec.Cmd
	out *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs the product binary with args.
func start(tb testing.TB, env []string, args ...string) *proc {
	tb.Helper()
	return startBinary(tb, binary(tb), env, args...)
}

// startBinary runs the binary at path with args, its output captured, and
// interrupts it (then kills it) at cleanup.
func startBinary(tb testing.TB, path string, env []string, args ...string) *proc {
	tb.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	buf := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	require.NoError(tb, cmd.Start())
	p := &proc{cmd: cmd, out: buf}
	tb.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
	})
	return p
}

// startEmulatorProcess runs the zerobus-emulator binary and waits until
// its listeners accept. Every listener binds 127.0.0.1:0 and the emulator
// reports the ports it got (--addr-file): a port found free and passed on
// could be taken meanwhile (by any outgoing connection's ephemeral port).
// extra may name --s3 (a later flag wins).
func startEmulatorProcess(tb testing.TB, extra ...string) (httpURL, grpcURL string, p *proc) {
	tb.Helper()
	vars, p := startEmulatorProcessVars(tb, extra...)
	return vars["DATABRICKS_HOST"], vars["ZEROBUS_ENDPOINT"], p
}

// startEmulatorProcessVars is startEmulatorProcess returning every line of
// the --addr-file (DATABRICKS_HOST, ZEROBUS_ENDPOINT, ZEROBUS_EMULATOR_S3,
// and KAFKA_BROKERS with --kafka).
func startEmulatorProcessVars(tb testing.TB, extra ...string) (map[string]string, *proc) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "addr.env")
	args := append([]string{"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--s3", "127.0.0.1:0", "--data", tb.TempDir(), "--log-level", "warn", "--addr-file", path}, extra...)
	p := startBinary(tb, emulatorBinary(tb), nil, args...)
	vars := map[string]string{}
	eventually(tb, 30*time.Second, 20*time.Millisecond, "emulator did not start", func() (bool, string) {
		raw, err := os.ReadFile(path)
		if err != nil || !strings.Contains(p.out.String(), "Zerobus emulator running") {
			return false, p.out.String()
		}
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				vars[k] = v
			}
		}
		return vars["DATABRICKS_HOST"] != "" && vars["ZEROBUS_ENDPOINT"] != "", string(raw) + p.out.String()
	})
	return vars, p
}

type tableInfo struct {
	FullName string `json:"full_name"`
	RowCount int64  `json:"row_count"`
	Columns  []struct {
		Name     string `json:"name"`
		TypeName string `json:"type_name"`
		TypeText string `json:"type_text"`
	} `json:"columns"`
}

// readTableInfo reads table's description from the emulator process at
// httpURL, failing the test when it cannot.
func readTableInfo(tb testing.TB, httpURL, table string) tableInfo {
	tb.Helper()
	ti, err := fetchTableInfo(httpURL, table)
	require.NoError(tb, err)
	return ti
}

// fetchTableInfo is readTableInfo without the test: for polls, and for
// goroutines other than the test's.
func fetchTableInfo(httpURL, table string) (tableInfo, error) {
	var ti tableInfo
	resp, err := http.Get(httpURL + "/emulator/v1/tables/" + table)
	if err != nil {
		return ti, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ti, fmt.Errorf("GET /emulator/v1/tables/%s: HTTP %d, want 200", table, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&ti); err != nil {
		return ti, fmt.Errorf("GET /emulator/v1/tables/%s: %w", table, err)
	}
	return ti, nil
}

// putFaults replaces the fault set of the emulator process at httpURL with
// body (the JSON of PUT /emulator/v1/faults).
func putFaults(tb testing.TB, httpURL, body string) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPut, httpURL+"/emulator/v1/faults", strings.NewReader(body))
	require.NoError(tb, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(tb, err)
	_ = resp.Body.Close()
	require.Equal(tb, http.StatusOK, resp.StatusCode, "PUT faults %s", body)
}

// emulatorStats reads the counters of the emulator process at httpURL.
func emulatorStats(tb testing.TB, httpURL string) emulator.Stats {
	tb.Helper()
	resp, err := http.Get(httpURL + "/emulator/v1/stats")
	require.NoError(tb, err)
	defer resp.Body.Close()
	var st emulator.Stats
	require.NoError(tb, json.NewDecoder(resp.Body).Decode(&st))
	return st
}

// quickstartTable is the table scripts/demo.sh (make demo) creates for
// config/examples/quickstart.yaml.
const (
	quickstartTable = "main.default.quickstart"
	quickstartCols  = "id BIGINT NOT NULL, device STRING, temperature DOUBLE, reading_ts TIMESTAMP, tags ARRAY<STRING>, _zb_emit_ts TIMESTAMP"
)

func TestBinaryQuickstart(t *testing.T) {
	t.Parallel()
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--table", quickstartTable+":"+quickstartCols)
	const rows = 3000
	logs := runExample(t, httpURL, grpcURL, "quickstart.yaml", fmt.Sprintf("QUICKSTART_COUNT=%d", rows), "LOG_LEVEL=INFO", "GOMEMLIMIT=")

	ti := readTableInfo(t, httpURL, quickstartTable)
	assert.Equal(t, int64(rows), ti.RowCount, "every generated row is durable once the pipeline exits")
	got := readRows(t, httpURL, quickstartTable)
	require.Len(t, got, rows)
	ids := map[float64]bool{}
	for _, r := range got {
		ids[r["id"].(float64)] = true
		assert.NotNil(t, r["_zb_emit_ts"], "the reserved column is stamped")
		assert.NotNil(t, r["reading_ts"])
		assert.Len(t, r["tags"], 2)
	}
	assert.Len(t, ids, rows, "each id exactly once")

	// The start-up line logs every knob, with the derived pool size, and no secret.
	assert.Contains(t, logs, "pool_size=2")
	assert.Contains(t, logs, "max_in_flight=16")
	// The example batches by count alone, which bounds no batch's bytes:
	// no soft memory limit is derived (plugin/zerobus tests the defaults').
	assert.NotContains(t, logs, "Go soft memory limit")
	assert.Contains(t, logs, "client_secret=set")
	assert.NotContains(t, logs, "emulator-secret")
}

func TestBinaryLintsExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "config", "examples", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out, err := exec.Command(binary(t), append([]string{"lint"}, files...)...).CombinedOutput()
	require.NoError(t, err, "benthos-zerobus lint:\n%s", out)

	// And a broken config fails lint with the field named.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(`
input:
  stdin: {}
output:
  zerobus:
    endpoint: http://127.0.0.1:1
    workspace_url: http://127.0.0.1:2
    table: only.two
    compression: brotli
`), 0o600))
	out, err = exec.Command(binary(t), "lint", bad).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "field table")
	assert.Contains(t, string(out), "brotli")
}

// runForPeakRSS runs the product binary on the config file cfg to its end
// and returns its peak resident set in bytes, how long it ran and its
// output. The kernel keeps the peak itself (VmHWM), so polling only has to
// catch the process alive; a peak in its last 10 ms would be missed. The rusage
// ru_maxrss at exit is not used: Go starts a child with vfork, and the
// kernel records the parent's resident set (this test process's) as the
// child's high-water mark at exec, so it reports the larger of the two.
func runForPeakRSS(b *testing.B, cfg string) (peak int64, took time.Duration, out string) {
	b.Helper()
	began := time.Now()
	p := start(b, nil, "run", cfg)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	for {
		select {
		case err := <-done:
			require.NoError(b, err, "pipeline failed:\n%s", p.out.String())
			require.Positive(b, peak, "the binary's VmHWM was never read")
			return peak, time.Since(began), p.out.String()
		case <-time.After(10 * time.Millisecond):
			if v, err := vmHWM(p.cmd.Process.Pid); err == nil {
				peak = max(peak, v)
			}
		}
	}
}

// vmHWM reads the peak resident set size of pid, in bytes.
func vmHWM(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "VmHWM:") {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:")), "%d kB", &kb); err != nil {
				return 0, err
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// runExample runs one config/examples file through the binary against an
// emulator subprocess and waits for it to finish by itself.
func runExample(t *testing.T, httpURL, grpcURL, file string, env ...string) string {
	t.Helper()
	env = append(env, "ZEROBUS_ENDPOINT="+grpcURL, "DATABRICKS_HOST="+httpURL, "HTTP_ADDRESS="+freeAddr(t))
	p := start(t, env, "run", filepath.Join(repoRoot(t), "config", "examples", file))
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "%s exited with an error:\n%s", file, p.out.String())
	case <-time.After(90 * time.Second):
		t.Fatalf("%s did not finish:\n%s", file, p.out.String())
	}
	return p.out.String()
}

func readRows(t *testing.T, httpURL, table string) []map[string]any {
	t.Helper()
	resp, err := http.Get(httpURL + "/emulator/v1/tables/" + table + "/rows?limit=0")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var rows []map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rows))
	return rows
}

func TestBinaryExampleDeadLetterQueue(t *testing.T) {
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--table", eventsTable+":"+eventsCols)
	dlq := filepath.Join(t.TempDir(), "dlq.jsonl")
	runExample(t, httpURL, grpcURL, "dead_letter_queue.yaml", "DLQ_COUNT=1000", "DLQ_PATH="+dlq)

	assert.Equal(t, int64(900), readTableInfo(t, httpURL, eventsTable).RowCount, "every row without the unknown field lands")
	b, err := os.ReadFile(dlq)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 100, "exactly the rows with the unknown field are dead-lettered")
	var first deadLetter
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	assert.Contains(t, first.Error, `column "unexpected"`)
	assert.Contains(t, first.Row, "unexpected")
}

func TestBinaryExampleOrderingByKey(t *testing.T) {
	const table = "main.default.readings"
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--table", table+":device STRING NOT NULL, seq BIGINT NOT NULL, value DOUBLE")
	runExample(t, httpURL, grpcURL, "ordering_by_key.yaml", "ORDERING_COUNT=4000")

	rows := readRows(t, httpURL, table)
	require.Len(t, rows, 4000)
	last := map[string]float64{}
	for _, r := range rows {
		dev, seq := r["device"].(string), r["seq"].(float64)
		if prev, ok := last[dev]; ok {
			assert.Greater(t, seq, prev, "device %s rows out of order", dev)
		}
		last[dev] = seq
	}
	assert.Len(t, last, 8)
}

func TestBinaryExampleProvisioning(t *testing.T) {
	const table = "main.bronze.orders"
	httpURL, grpcURL, _ := startEmulatorProcess(t)
	logs := runExample(t, httpURL, grpcURL, "provisioning.yaml", "PROVISION_COUNT=1000")
	// Created from a batch without region, then evolved: the ALTER path ran.
	assert.Contains(t, logs, "table "+table+" provisioned")
	assert.Contains(t, logs, "table "+table+": messages carry new fields [region]: adding columns")

	info := readTableInfo(t, httpURL, table)
	assert.Equal(t, int64(1000), info.RowCount)
	types := map[string]string{}
	for _, c := range info.Columns {
		types[c.Name] = c.TypeName
	}
	assert.Equal(t, "LONG", types["order_id"])
	assert.Equal(t, "STRING", types["customer"])
	assert.Equal(t, "DOUBLE", types["amount"])
	assert.Equal(t, "STRING", types["region"], "the field first seen mid-stream became a column")
}

// writeConfig writes a product config running input → output (YAML blocks
// from column 0) with the HTTP server off and the logger at level, and
// returns its path.
func writeConfig(tb testing.TB, level, input, output string) string {
	tb.Helper()
	cfg := filepath.Join(tb.TempDir(), "config.yaml")
	y := "http:\n  enabled: false\nlogger:\n  level: " + level + "\ninput:\n" + indentBy(input, 2) + "\noutput:\n" + indentBy(output, 2) + "\n"
	require.NoError(tb, os.WriteFile(cfg, []byte(y), 0o600))
	return cfg
}

// zerobusOutput is the zerobus output block (from column 0) writing table
// on the emulator at grpcURL and httpURL with its default credentials, with
// extra knob lines (each block from column 0, as under "zerobus:").
func zerobusOutput(grpcURL, httpURL, table string, extra ...string) string {
	y := fmt.Sprintf("zerobus:\n  endpoint: %s\n  workspace_url: %s\n  table: %s\n  client_id: %s\n  client_secret: %s\n",
		grpcURL, httpURL, table, emulator.DefaultClientID, emulator.DefaultClientSecret)
	for _, e := range extra {
		for _, l := range strings.Split(strings.TrimRight(e, "\n"), "\n") {
			if l != "" {
				y += "  " + l + "\n"
			}
		}
	}
	return y
}

// repeatInput generates rows rows of {"id": n, "msg": "x" repeated size
// times} in input batches of batch.
func repeatInput(rows, batch, size int) string {
	return fmt.Sprintf("generate:\n  count: %d\n  interval: \"\"\n  batch_size: %d\n  mapping: |\n    root.id = counter()\n    root.msg = \"x\".repeat(%d)\n", rows, batch, size)
}
