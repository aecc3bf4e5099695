package zerobus

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigKeepalive(t *testing.T) {
	c, err := parseYAML(t, minimalYAML)
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, c.KeepaliveTime)
	assert.Equal(t, 5*time.Second, c.KeepaliveTimeout)
	assert.LessOrEqual(t, c.KeepaliveTime+c.KeepaliveTimeout, 20*time.Second, "a dead connection is found within 20 s at the defaults")
	line := knobsLine(c.knobs(2))
	assert.Contains(t, line, "keepalive.time=10s keepalive.timeout=5s")

	c, err = parseYAML(t, minimalYAML+"keepalive:\n  time: 30s\n  timeout: 2s\n")
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, c.KeepaliveTime)
	assert.Equal(t, 2*time.Second, c.KeepaliveTimeout)

	// Both bad fields are named at once.
	_, err = parseYAML(t, minimalYAML+"keepalive:\n  time: 5s\n  timeout: 0s\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "field keepalive.time: must be at least 10s (gRPC's floor), got 5s")
	assert.Contains(t, err.Error(), "field keepalive.timeout: must be positive, got 0s")
}

func TestLintKeepalive(t *testing.T) {
	linter := lintEnv(t, "")
	for _, tt := range []struct {
		block, want string
		line        int
	}{
		{"    keepalive:\n      time: 5s\n", `field keepalive.time: must be a duration of at least 10s (gRPC's floor), got "5s"`, 21},
		{"    keepalive:\n      time: 10s\n      timeout: -1s\n", `field keepalive.timeout: must be a positive duration such as 30s or 5m, got "-1s"`, 22},
	} {
		lints, err := linter.LintYAML([]byte(lintBase + tt.block))
		require.NoError(t, err)
		require.Len(t, lints, 1, "%v", lints)
		assert.Equal(t, tt.line, lints[0].Line, "line of %q", lints[0].What)
		assert.Contains(t, lints[0].What, tt.want)
	}
	lints, err := linter.LintYAML([]byte(lintBase + "    keepalive:\n      time: 10s\n      timeout: 5s\n"))
	require.NoError(t, err)
	assert.Empty(t, lints, "the defaults lint clean")
	assert.True(t, strings.HasSuffix(lintBase, "recheck_interval: 5m\n"), "the keepalive block goes under zerobus")
}
