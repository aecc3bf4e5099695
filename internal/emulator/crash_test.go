package emulator

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const childDirEnv = "ZEROBUS_EMULATOR_TEST_CHILD_DIR"

// TestMain lets the test binary double as a standalone emulator process for
// the kill -9 test.
func TestMain(m *testing.M) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		srv, err := Start(Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: dir, Tables: []string{testTableSpec}})
		if err != nil {
			fmt.Fprintln(os.Stderr, "child emulator:", err)
			os.Exit(1)
		}
		fmt.Printf("READY %s %s\n", srv.HTTPURL(), srv.GRPCURL())
		select {} // until SIGKILL
	}
	os.Exit(m.Run())
}

func startChild(t *testing.T, dir string) (*exec.Cmd, remoteEmu) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	f := strings.Fields(line)
	require.Len(t, f, 3, line)
	require.Equal(t, "READY", f[0])
	return cmd, remoteEmu{httpURL: f[1], grpcURL: f[2]}
}

// TestSurvivesKill9 writes to an emulator in a child process, SIGKILLs it
// right after an ack (and with one more batch in flight), restarts on the
// same directory, and checks every acked row is there and no batch is torn.
func TestSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	cmd, remote := startChild(t, dir)
	conn := dial(t, remote)
	p, _, err := openPut(t, conn, zerobusToken(t, remote, testTable), testTable, testSchema)
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		rec := makeBatch(i*100, 100)
		require.NoError(t, p.send(rec, int64(i)))
		rec.Release()
	}
	acks := p.waitRecords(300)
	acked := acks[len(acks)-1].Records
	rec := makeBatch(300, 100)
	require.NoError(t, p.send(rec, 3)) // in flight at the kill
	rec.Release()
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	srv := startEmu(t, func(c *Config) { c.DataDir = dir })
	n := rowCount(t, srv, testTable)
	assert.GreaterOrEqual(t, n, int64(acked), "every acked row survives kill -9")
	assert.Contains(t, []int64{300, 400}, n, "a batch is committed whole or not at all")
	rows := readRows(t, srv, testTable, 0)
	assert.Len(t, rows, int(n))
}

func TestChildRestartTiming(t *testing.T) {
	// A restarted emulator serves immediately: recovery is a log replay.
	dir := t.TempDir()
	srv := startEmu(t, func(c *Config) { c.DataDir = dir })
	require.NoError(t, srv.Close())
	start := time.Now()
	startEmu(t, func(c *Config) { c.DataDir = dir })
	assert.Less(t, time.Since(start), 2*time.Second)
}
