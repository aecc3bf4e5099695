package emulator

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// open_error refuses new stream opens with its code while a stream already
// open keeps writing; cleared, opens pass again. A code that is not a gRPC
// error code is refused by name.
func TestOpenErrorRefusesNewStreamsOnly(t *testing.T) {
	srv := startEmu(t, nil)
	conn := dial(t, srv)
	tok := zerobusToken(t, srv, testTable)
	open, _, err := openPut(t, conn, tok, testTable, testSchema)
	require.NoError(t, err)

	var f Faults
	require.NoError(t, json.Unmarshal([]byte(`{"open_error":"PERMISSION_DENIED"}`), &f))
	require.NoError(t, srv.SetFaults(f))
	_, _, err = openPut(t, conn, tok, testTable, testSchema)
	require.Error(t, err)
	assert.Equal(t, codes.PermissionDenied, status.Code(err))
	assert.EqualValues(t, 1, srv.Stats().Tables[testTable].StreamsRejected)
	require.NoError(t, open.finish(), "the stream open before the fault ends cleanly")

	require.NoError(t, srv.SetFaults(Faults{}))
	_, _, err = openPut(t, conn, tok, testTable, testSchema)
	require.NoError(t, err, "cleared: opens pass")

	err = srv.SetFaults(Faults{OpenError: "NOT_A_CODE"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "open_error")
	b, err := json.Marshal(Faults{OpenError: "UNAVAILABLE"})
	require.NoError(t, err)
	assert.Contains(t, string(b), `"open_error":"UNAVAILABLE"`)
}
