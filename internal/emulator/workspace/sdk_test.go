package workspace

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/databricks/databricks-sdk-go"
	"github.com/databricks/databricks-sdk-go/apierr"
	"github.com/databricks/databricks-sdk-go/client"
	"github.com/databricks/databricks-sdk-go/service/catalog"
	"github.com/databricks/databricks-sdk-go/service/sql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDrivenByDatabricksSDK drives the workspace with the real
// databricks-sdk-go client (PAT auth, so no OIDC endpoints are needed).
func TestDrivenByDatabricksSDK(t *testing.T) {
	dir := t.TempDir()
	reg, err := OpenRegistry(dir)
	require.NoError(t, err)
	ws := New(reg, Options{IcebergLag: time.Hour, Authorize: func(r *http.Request) error {
		if r.Header.Get("Authorization") != "Bearer pat-token" {
			return errors.New("unknown token")
		}
		return nil
	}})
	srv := httptest.NewServer(ws.Handler())
	t.Cleanup(srv.Close)

	w, err := databricks.NewWorkspaceClient(&databricks.Config{Host: srv.URL, Token: "pat-token"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err = w.Tables.Get(ctx, catalog.GetTableRequest{FullName: "main.raw.events"})
	require.Error(t, err)
	assert.True(t, errors.Is(err, apierr.ErrNotFound), "404 maps to ErrNotFound: %v", err)
	exists, err := w.Tables.Exists(ctx, catalog.ExistsRequest{FullName: "main.raw.events"})
	require.NoError(t, err)
	assert.False(t, exists.TableExists)

	exec := func(stmt, wait string) *sql.StatementResponse {
		t.Helper()
		resp, err := w.StatementExecution.ExecuteStatement(ctx, sql.ExecuteStatementRequest{
			WarehouseId: "wh-1", Statement: stmt, WaitTimeout: wait,
		})
		require.NoError(t, err)
		return resp
	}
	create := "CREATE TABLE main.raw.events (id BIGINT NOT NULL, body STRUCT<k:STRING,v:ARRAY<INT>> COMMENT 'payload') " +
		"USING DELTA TBLPROPERTIES ('delta.enableIcebergCompatV2'='true', 'delta.universalFormat.enabledFormats'='iceberg', " +
		"'delta.enableDeletionVectors'='false', 'delta.enableTypeWidening'='true')"
	resp := exec(create, "30s")
	require.Equal(t, sql.StatementStateSucceeded, resp.Status.State, "%+v", resp.Status.Error)

	again := exec(create, "30s")
	assert.Equal(t, sql.StatementStateFailed, again.Status.State)
	assert.Equal(t, "42P07", again.Status.SqlState)
	assert.Equal(t, sql.ServiceErrorCodeAlreadyExists, again.Status.Error.ErrorCode)

	// wait_timeout 0s: the SDK's ExecuteAndWait polls until the statement ends.
	done, err := w.StatementExecution.ExecuteAndWait(ctx, sql.ExecuteStatementRequest{
		WarehouseId: "wh-1", Statement: "ALTER TABLE main.raw.events ADD COLUMNS (`x'); DROP TABLE y; --` INT COMMENT 'odd')", WaitTimeout: "0s",
	})
	require.NoError(t, err)
	assert.Equal(t, sql.StatementStateSucceeded, done.Status.State)
	exec("ALTER TABLE main.raw.events ALTER COLUMN `x'); DROP TABLE y; --` TYPE BIGINT", "5s")

	info, err := w.Tables.Get(ctx, catalog.GetTableRequest{FullName: "main.raw.events"})
	require.NoError(t, err)
	assert.Equal(t, "main.raw.events", info.FullName)
	assert.Equal(t, catalog.TableTypeManaged, info.TableType)
	require.Len(t, info.Columns, 3)
	assert.Equal(t, catalog.ColumnTypeNameStruct, info.Columns[1].TypeName)
	assert.Equal(t, "struct<k:string,v:array<int>>", info.Columns[1].TypeText)
	assert.Equal(t, "x'); DROP TABLE y; --", info.Columns[2].Name)
	assert.Equal(t, catalog.ColumnTypeNameLong, info.Columns[2].TypeName)
	assert.Equal(t, "name", info.Properties["delta.columnMapping.mode"])
	assert.Equal(t, "7", info.Properties["delta.minWriterVersion"])

	// The raw response carries delta_uniform_iceberg, which TableInfo lacks.
	var raw struct {
		DeltaUniformIceberg *struct {
			ConvertedDeltaVersion int64 `json:"converted_delta_version"`
		} `json:"delta_uniform_iceberg"`
	}
	ws.NoteDataCommit("main.raw.events")
	exec("MSCK REPAIR TABLE main.raw.events SYNC METADATA", "")
	cli, err := client.New(w.Config)
	require.NoError(t, err)
	require.NoError(t, cli.Do(ctx, http.MethodGet, "/api/2.1/unity-catalog/tables/main.raw.events", nil, nil, nil, &raw))
	require.NotNil(t, raw.DeltaUniformIceberg)
	assert.EqualValues(t, 3, raw.DeltaUniformIceberg.ConvertedDeltaVersion, "create, add, widen, one data commit")

	creds, err := w.TemporaryTableCredentials.GenerateTemporaryTableCredentials(ctx, catalog.GenerateTemporaryTableCredentialRequest{
		TableId: info.TableId, Operation: catalog.TableOperationRead,
	})
	require.NoError(t, err)
	require.NotNil(t, creds.AwsTempCredentials)
	assert.Greater(t, creds.ExpirationTime, time.Now().UnixMilli())
	_, err = w.TemporaryTableCredentials.GenerateTemporaryTableCredentials(ctx, catalog.GenerateTemporaryTableCredentialRequest{
		TableId: info.TableId, Operation: catalog.TableOperationReadWrite,
	})
	require.Error(t, err)
	assert.True(t, errors.Is(err, apierr.ErrPermissionDenied), "%v", err)

	st := ws.Stats()
	assert.Equal(t, 5, st.Statements)
	assert.Equal(t, 1, st.Failed)

	// The registry persisted what the SQL did.
	reopened, err := OpenRegistry(dir)
	require.NoError(t, err)
	tb, ok := reopened.Get("main.raw.events")
	require.True(t, ok)
	assert.Len(t, tb.Columns, 3)

	bad, err := databricks.NewWorkspaceClient(&databricks.Config{Host: srv.URL, Token: "wrong"})
	require.NoError(t, err)
	_, err = bad.Tables.Get(ctx, catalog.GetTableRequest{FullName: "main.raw.events"})
	require.Error(t, err)
	assert.True(t, errors.Is(err, apierr.ErrUnauthenticated), "%v", err)
}

// TestDropDrivenByDatabricksSDK drops tables with the real databricks-sdk-go
// client: TablesAPI.Delete (DELETE /api/2.1/unity-catalog/tables/{full_name})
// and SQL DROP TABLE [IF EXISTS]. A missing table is ErrNotFound for the
// DELETE and TABLE_OR_VIEW_NOT_FOUND for DROP TABLE without IF EXISTS; a
// table created again is a new table (new table_id, its own storage
// location, Delta version 0) and the registry persisted the drop.
func TestDropDrivenByDatabricksSDK(t *testing.T) {
	dir := t.TempDir()
	reg, err := OpenRegistry(dir)
	require.NoError(t, err)
	var dropped []Table
	ws := New(reg, Options{IcebergLag: time.Hour, OnDrop: func(tb Table) { dropped = append(dropped, tb) }})
	srv := httptest.NewServer(ws.Handler())
	t.Cleanup(srv.Close)
	w, err := databricks.NewWorkspaceClient(&databricks.Config{Host: srv.URL, Token: "pat-token"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exec := func(stmt string) *sql.StatementResponse {
		t.Helper()
		resp, err := w.StatementExecution.ExecuteStatement(ctx, sql.ExecuteStatementRequest{WarehouseId: "wh-1", Statement: stmt, WaitTimeout: "10s"})
		require.NoError(t, err)
		return resp
	}
	const name = "main.raw.gone"
	require.Equal(t, sql.StatementStateSucceeded, exec("CREATE TABLE "+name+" (id BIGINT)").Status.State)
	first, err := w.Tables.Get(ctx, catalog.GetTableRequest{FullName: name})
	require.NoError(t, err)
	ws.NoteDataCommit(name)
	v, _ := ws.DeltaVersion(name)
	require.EqualValues(t, 1, v)

	require.NoError(t, w.Tables.Delete(ctx, catalog.DeleteTableRequest{FullName: name}))
	require.Len(t, dropped, 1)
	assert.Equal(t, first.TableId, dropped[0].TableID)
	_, err = w.Tables.Get(ctx, catalog.GetTableRequest{FullName: name})
	assert.True(t, errors.Is(err, apierr.ErrNotFound), "%v", err)
	err = w.Tables.Delete(ctx, catalog.DeleteTableRequest{FullName: name})
	assert.True(t, errors.Is(err, apierr.ErrNotFound), "a second DELETE: %v", err)

	failed := exec("DROP TABLE " + name)
	assert.Equal(t, sql.StatementStateFailed, failed.Status.State)
	assert.Equal(t, "42P01", failed.Status.SqlState)
	assert.Contains(t, failed.Status.Error.Message, "[TABLE_OR_VIEW_NOT_FOUND]")
	assert.Equal(t, sql.StatementStateSucceeded, exec("DROP TABLE IF EXISTS "+name).Status.State)
	assert.Len(t, dropped, 1, "IF EXISTS on a missing table drops nothing")

	require.Equal(t, sql.StatementStateSucceeded, exec("CREATE TABLE "+name+" (id BIGINT, v STRING)").Status.State)
	second, err := w.Tables.Get(ctx, catalog.GetTableRequest{FullName: name})
	require.NoError(t, err)
	assert.NotEqual(t, first.TableId, second.TableId)
	assert.NotEqual(t, first.StorageLocation, second.StorageLocation)
	assert.Len(t, second.Columns, 2)
	v, _ = ws.DeltaVersion(name)
	assert.EqualValues(t, 0, v, "a re-created table starts at Delta version 0")

	require.Equal(t, sql.StatementStateSucceeded, exec("DROP TABLE "+name).Status.State)
	require.Len(t, dropped, 2)
	assert.Equal(t, second.TableId, dropped[1].TableID)
	reopened, err := OpenRegistry(dir)
	require.NoError(t, err)
	_, ok := reopened.Get(name)
	assert.False(t, ok, "the drop is persisted")
}
