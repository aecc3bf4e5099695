package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCreatedConfigLintsAndRuns is a newcomer's first config: the one
// `benthos-zerobus create stdin//zerobus` prints. With only the required
// fields filled in (endpoint, workspace URL, table, credentials) it lints
// clean and runs against the emulator binary, landing the rows it reads.
// The printed optional fields are empty defaults, never examples posing as
// values (a corporate proxy, an ordering key).
func TestCreatedConfigLintsAndRuns(t *testing.T) {
	t.Parallel()
	const table = "main.default.created"
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--table", table+":id BIGINT NOT NULL, device STRING, _zb_emit_ts TIMESTAMP")

	printed, err := exec.Command(binary(t), "create", "stdin//zerobus").Output()
	require.NoError(t, err)
	for _, example := range []string{"proxy.corp.example.com", "this.device_id", "kafka_key"} {
		assert.NotContains(t, string(printed), example, "an example printed as a value")
	}

	// Fill in the required fields: the lines `create` marks "(required)" under
	// the output, and the empty credentials.
	fill := map[string]string{
		"endpoint":      grpcURL,
		"workspace_url": httpURL,
		"table":         table,
		"client_id":     "emulator",
		"client_secret": "emulator-secret",
	}
	var out []string
	inOutput, filled := false, map[string]bool{}
	for _, line := range strings.Split(string(printed), "\n") {
		if strings.HasPrefix(line, "output:") {
			inOutput = true
		} else if line != "" && !strings.HasPrefix(line, " ") {
			inOutput = false
		}
		if inOutput && strings.HasPrefix(line, "    ") && !strings.HasPrefix(line, "     ") {
			key, _, _ := strings.Cut(strings.TrimSpace(line), ":")
			if v, ok := fill[key]; ok {
				line = "    " + key + ": " + v
				filled[key] = true
			}
		}
		if strings.Contains(line, "(required)") && inOutput {
			t.Errorf("a required field left unfilled: %q", line)
		}
		out = append(out, line)
	}
	require.Len(t, filled, len(fill), "every required field found in:\n%s", printed)
	cfg := filepath.Join(t.TempDir(), "created.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(strings.Join(out, "\n")), 0o600))

	lint, err := exec.Command(binary(t), "lint", cfg).CombinedOutput()
	require.NoError(t, err, "benthos-zerobus lint of the created config:\n%s", lint)
	assert.Empty(t, strings.TrimSpace(string(lint)))

	// Run it: three rows on stdin; the pipeline ends at EOF once they are
	// durable. The printed HTTP server binds 0.0.0.0:4195; keep it on a
	// free loopback port here.
	cmd := exec.Command(binary(t), "run", "--set", "http.address=127.0.0.1:0", cfg)
	cmd.Stdin = strings.NewReader(`{"id":1,"device":"a"}` + "\n" + `{"id":2,"device":"b"}` + "\n" + `{"id":3}` + "\n")
	cmd.WaitDelay = 5 * time.Second
	timer := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	logs, err := cmd.CombinedOutput()
	timer.Stop()
	require.NoError(t, err, "the created config failed to run:\n%s", logs)
	assert.Contains(t, string(logs), "proxy_url=(environment)")
	assert.Contains(t, string(logs), "ordering_key=(none: round-robin)")

	assert.Equal(t, int64(3), readTableInfo(t, httpURL, table).RowCount, "every row read is durable; logs:\n%s", logs)
	rows := readRows(t, httpURL, table)
	require.Len(t, rows, 3)
}

// TestCreatedReplayConfigLints: the config `create zerobus_replay//drop`
// prints lints clean once its required fields are filled in; its optional
// bounds print as 0, which means no bound (a window [0, 0) would select no
// row and need the _zb_offset column).
func TestCreatedReplayConfigLints(t *testing.T) {
	printed, err := exec.Command(binary(t), "create", "zerobus_replay//drop").Output()
	require.NoError(t, err)
	fill := map[string]string{"workspace_url": "https://dbc-a1b2c3d4-e5f6.cloud.databricks.com", "table": "main.bronze.orders"}
	var out []string
	filled := map[string]bool{}
	for _, line := range strings.Split(string(printed), "\n") {
		if strings.HasPrefix(line, "    ") && !strings.HasPrefix(line, "     ") {
			key, _, _ := strings.Cut(strings.TrimSpace(line), ":")
			if v, ok := fill[key]; ok && !filled[key] {
				line, filled[key] = "    "+key+": "+v, true
			}
		}
		out = append(out, line)
	}
	require.Len(t, filled, len(fill), "every required field found in:\n%s", printed)
	cfg := filepath.Join(t.TempDir(), "replay.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(strings.Join(out, "\n")), 0o600))
	lint, err := exec.Command(binary(t), "lint", cfg).CombinedOutput()
	require.NoError(t, err, "benthos-zerobus lint of the created replay config:\n%s", lint)
	assert.Empty(t, strings.TrimSpace(string(lint)))
}
