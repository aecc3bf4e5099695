package e2e

import (
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdS3Port takes 127.0.0.1:9000 (MinIO's port, the emulator's S3
// endpoint's old default) for the whole test: it listens there, waiting up
// to 30 s while another process holds the port (which may let it go at any
// time, and with it the test's premise).
func holdS3Port(t *testing.T) string {
	t.Helper()
	const addr = "127.0.0.1:9000"
	deadline := time.Now().Add(30 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			t.Cleanup(func() { ln.Close() })
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("cannot take %s for the test (held by another process for 30 s): %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readAddrFile waits for the emulator's --addr-file and parses it.
func readAddrFile(t *testing.T, p *proc, path string) map[string]string {
	t.Helper()
	eventually(t, 30*time.Second, 20*time.Millisecond, "the emulator wrote no --addr-file", func() (bool, string) {
		_, err := os.Stat(path)
		return err == nil, p.out.String()
	})
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "addr-file line %q", line)
		vars[k] = v
	}
	return vars
}

// TestEmulatorPortsWithS3PortTaken: with 127.0.0.1:9000 taken, the emulator
// binary starts at its default S3 address (a free port) beside a second
// emulator on the demo's settings (every port free), each reporting the
// ports it picked; asked for the taken port it exits non-zero at once,
// naming the port and the flag.
func TestEmulatorPortsWithS3PortTaken(t *testing.T) {
	taken := holdS3Port(t)

	var s3s []string
	for i := 0; i < 2; i++ {
		path := filepath.Join(t.TempDir(), "addr.env")
		args := []string{"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--data", t.TempDir(), "--addr-file", path}
		if i == 1 {
			args = append(args, "--s3", "127.0.0.1:0") // the demo's settings
		}
		p := startBinary(t, emulatorBinary(t), nil, args...)
		vars := readAddrFile(t, p, path)
		for _, k := range []string{"DATABRICKS_HOST", "ZEROBUS_ENDPOINT", "ZEROBUS_EMULATOR_S3"} {
			require.NotEmpty(t, vars[k], k)
			assert.False(t, strings.HasSuffix(vars[k], ":0"), "%s=%s: the port picked, not :0", k, vars[k])
			assert.NotEqual(t, "http://"+taken, vars[k], k)
		}
		code, resp := httpGet(vars["DATABRICKS_HOST"] + "/emulator/v1/health")
		require.Equal(t, http.StatusOK, code, resp)
		assert.Contains(t, resp, `"status":"ok"`)
		assert.Contains(t, resp, vars["ZEROBUS_EMULATOR_S3"])
		assert.Contains(t, p.out.String(), "S3 storage endpoint:             "+vars["ZEROBUS_EMULATOR_S3"])
		s3s = append(s3s, vars["ZEROBUS_EMULATOR_S3"])
	}
	assert.NotEqual(t, s3s[0], s3s[1], "two emulators side by side")

	cmd := exec.Command(emulatorBinary(t), "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--s3", taken, "--data", t.TempDir())
	cmd.WaitDelay = 5 * time.Second
	done := make(chan struct{})
	timer := time.AfterFunc(20*time.Second, func() { close(done); _ = cmd.Process.Kill() })
	out, err := cmd.CombinedOutput()
	timer.Stop()
	select {
	case <-done:
		t.Fatalf("the emulator did not exit within 20 s with its S3 port taken:\n%s", out)
	default:
	}
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "want a non-zero exit, got %v:\n%s", err, out)
	assert.NotZero(t, exit.ExitCode())
	assert.Contains(t, string(out), "S3 storage port "+taken+" (--s3) is already in use")
	assert.NotContains(t, string(out), "Zerobus emulator running")
}

// TestDemoScript runs scripts/demo.sh (make demo) with 127.0.0.1:9000
// taken: the demo runs to the end and shows the rows that landed; asked to
// put the emulator's S3 endpoint on the taken port, it fails at once with
// the emulator's error instead of starting the pipeline.
func TestDemoScript(t *testing.T) {
	taken := holdS3Port(t)
	root := repoRoot(t)
	run := func(env ...string) (string, error) {
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "demo.sh"), binary(t), emulatorBinary(t))
		cmd.Dir = root
		cmd.Env = append(os.Environ(), env...)
		cmd.WaitDelay = 5 * time.Second
		timer := time.AfterFunc(90*time.Second, func() { _ = cmd.Process.Kill() })
		defer timer.Stop()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := run("LOG_LEVEL=WARN")
	require.NoError(t, err, "make demo:\n%s", out)
	assert.Contains(t, out, "== emulator up")
	assert.Contains(t, out, `"row_count":1000`)

	out, err = run("DEMO_S3_ADDR=" + taken)
	require.Error(t, err, "the demo must fail:\n%s", out)
	assert.Contains(t, out, "the emulator failed to start")
	assert.Contains(t, out, "S3 storage port "+taken+" (--s3) is already in use")
	assert.NotContains(t, out, "emulator up")
}
