package emulator

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// execSQL runs one statement through the SQL statements API and returns its
// final state and error class text ("" when it succeeded).
func execSQL(t testing.TB, srv endpoints, token, stmt string) (state, msg string) {
	t.Helper()
	body, err := json.Marshal(map[string]string{"warehouse_id": "wh", "statement": stmt, "wait_timeout": "10s"})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, srv.HTTPURL()+"/api/2.0/sql/statements", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out struct {
		Status struct {
			State string `json:"state"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		} `json:"status"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	if out.Status.Error != nil {
		msg = out.Status.Error.Message
	}
	return out.Status.State, msg
}

// A table dropped under an open stream: the stream ends NOT_FOUND, a new
// open is refused NOT_FOUND as for a missing table, and the table created
// again under the name is a new table (new id, Delta version 0, none of the
// old rows, its own storage location), which streams write again.
func TestDropTableEndsStreamsAndRecreatesEmpty(t *testing.T) {
	srv := startEmu(t, nil)
	conn := dial(t, srv)
	ztok := zerobusToken(t, srv, testTable)
	before, ok := srv.Registry().Get(testTable)
	require.True(t, ok)

	p, _, err := openPut(t, conn, ztok, testTable, testSchema)
	require.NoError(t, err)
	require.NoError(t, p.send(makeBatch(0, 10), 0))
	p.waitRecords(10)
	require.EqualValues(t, 10, rowCount(t, srv, testTable))
	oldDir := srv.tableDir(testTable)

	wtok := workspaceToken(t, srv)
	state, msg := execSQL(t, srv, wtok, "DROP TABLE "+testTable)
	require.Equal(t, "SUCCEEDED", state, msg)

	// The open stream ends NOT_FOUND; a batch sent now is never acked.
	_ = p.send(makeBatch(10, 5), 1)
	_, err = p.awaitRecords(15)
	require.Error(t, err)
	assert.Equal(t, codes.NotFound, status.Code(err), err.Error())
	assert.Contains(t, err.Error(), "was dropped")

	_, _, err = openPut(t, conn, ztok, testTable, testSchema)
	assert.Equal(t, codes.NotFound, status.Code(err), "an open on the dropped table: %v", err)
	_, statErr := os.Stat(oldDir)
	assert.True(t, os.IsNotExist(statErr), "the dropped table's files are removed: %v", statErr)

	// Dropping it again fails as Databricks does; IF EXISTS does not.
	state, msg = execSQL(t, srv, wtok, "DROP TABLE "+testTable)
	assert.Equal(t, "FAILED", state)
	assert.Contains(t, msg, "[TABLE_OR_VIEW_NOT_FOUND]")
	state, msg = execSQL(t, srv, wtok, "drop table if exists "+testTable+";")
	assert.Equal(t, "SUCCEEDED", state, msg)

	state, msg = execSQL(t, srv, wtok, "CREATE TABLE "+testTable+" (id BIGINT NOT NULL, name STRING, amount DECIMAL(10,2), ts TIMESTAMP)")
	require.Equal(t, "SUCCEEDED", state, msg)
	after, ok := srv.Registry().Get(testTable)
	require.True(t, ok)
	assert.NotEqual(t, before.TableID, after.TableID, "a re-created table is a new table")
	assert.NotEqual(t, tableLocation(before), tableLocation(after), "with its own storage location")
	assert.EqualValues(t, 0, rowCount(t, srv, testTable), "none of the dropped table's rows")
	assert.EqualValues(t, 0, srv.Stats().Tables[testTable].DeltaVersion, "Delta version 0: the CREATE")

	p2, _, err := openPut(t, conn, ztok, testTable, testSchema)
	require.NoError(t, err)
	require.NoError(t, p2.send(makeBatch(100, 3), 0))
	p2.waitRecords(3)
	require.NoError(t, p2.finish())
	rows := readRows(t, srv, testTable, 0)
	require.Len(t, rows, 3)
	assert.EqualValues(t, 100, rows[0]["id"])
	assert.EqualValues(t, 1, srv.Stats().Tables[testTable].DeltaVersion)
}

// The grants on a dropped table go with it: the table created again under
// the name has none, so a strict writer is refused until they are granted
// again.
func TestDropTableTakesItsGrants(t *testing.T) {
	srv := startEmu(t, func(c *Config) { c.Grants.Strict = true })
	require.NoError(t, srv.UpdateGrants(
		change(SecurableCatalog, "main", []string{PrivUseCatalog}, nil),
		change(SecurableSchema, "main.default", []string{PrivUseSchema}, nil),
		change(SecurableTable, testTable, []string{PrivSelect, PrivModify}, nil),
	))
	require.NoError(t, openStatus(t, srv))

	_, err := srv.Workspace().Drop(testTable)
	require.NoError(t, err)
	_, grants := srv.Grants()
	for _, g := range grants {
		assert.NotEqual(t, SecurableTable, g.SecurableType, "grant on the dropped table kept: %+v", g)
	}
	wtok := workspaceToken(t, srv)
	state, msg := execSQL(t, srv, wtok, "CREATE TABLE "+testTable+" (id BIGINT NOT NULL, name STRING, amount DECIMAL(10,2), ts TIMESTAMP)")
	require.Equal(t, "SUCCEEDED", state, msg)
	err = openStatus(t, srv)
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "SELECT on Table 'main.default.events'")
}

// A data directory left holding a dropped table's files (the emulator
// stopped between the drop and their removal) is not taken for the table
// created again under the name.
func TestStaleDirectoryOfADroppedTableIsNotReused(t *testing.T) {
	dir := t.TempDir()
	srv := startEmu(t, func(c *Config) { c.DataDir = dir })
	conn := dial(t, srv)
	p, _, err := openPut(t, conn, zerobusToken(t, srv, testTable), testTable, testSchema)
	require.NoError(t, err)
	require.NoError(t, p.send(makeBatch(0, 4), 0))
	p.waitRecords(4)
	require.NoError(t, p.finish())
	require.NoError(t, srv.Close())

	// The registry alone forgets the table, as after a crash mid-drop.
	reg := srv.Registry()
	_, err = reg.Drop(testTable)
	require.NoError(t, err)

	srv2 := startEmu(t, func(c *Config) { c.DataDir = dir })
	assert.EqualValues(t, 0, rowCount(t, srv2, testTable), "the seeded table is new: none of the old rows")
	assert.EqualValues(t, 0, srv2.Stats().Tables[testTable].DeltaVersion)
}
