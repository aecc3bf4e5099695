package zerobusreplay

import (
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// read_ahead defaults to 1, and lint and ParseConfig refuse values outside
// [0, maxReadAhead], naming the field.
func TestReadAheadConfig(t *testing.T) {
	c, err := parse(t, "workspace_url: https://x\ntable: a.b.c\nclient_id: i\nclient_secret: s\n")
	require.NoError(t, err)
	assert.Equal(t, 1, c.ReadAhead)
	c, err = parse(t, "workspace_url: https://x\ntable: a.b.c\nclient_id: i\nclient_secret: s\nread_ahead: 0\n")
	require.NoError(t, err)
	assert.Equal(t, 0, c.ReadAhead)

	env := service.NewEnvironment()
	for _, bad := range []string{"-1", "17"} {
		_, err := parse(t, "workspace_url: https://x\ntable: a.b.c\nclient_id: i\nclient_secret: s\nread_ahead: "+bad+"\n")
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "field read_ahead")
		err = env.NewStreamBuilder().AddInputYAML("zerobus_replay:\n  workspace_url: https://x\n  table: a.b.c\n  read_ahead: " + bad + "\n")
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "field read_ahead: must be between 0 and 16")
	}
}
