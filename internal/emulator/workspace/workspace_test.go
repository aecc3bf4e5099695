package workspace

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/databricks/databricks-sdk-go/service/catalog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type harness struct {
	t     *testing.T
	ws    *Workspace
	srv   *httptest.Server
	clock *fakeClock
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	reg, err := OpenRegistry("")
	require.NoError(t, err)
	clock := &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	if opts.Now == nil {
		opts.Now = clock.Now
	}
	ws := New(reg, opts)
	srv := httptest.NewServer(ws.Handler())
	t.Cleanup(srv.Close)
	return &harness{t: t, ws: ws, srv: srv, clock: clock}
}

func (h *harness) do(method, path string, body any) (int, []byte) {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(h.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	require.NoError(h.t, err)
	req.Header.Set("Authorization", "Bearer good")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	return resp.StatusCode, b
}

// sql executes a statement and returns the decoded response.
func (h *harness) sql(stmt string) statementResponse {
	h.t.Helper()
	code, b := h.do("POST", "/api/2.0/sql/statements", map[string]any{"warehouse_id": "wh", "statement": stmt, "wait_timeout": "10s"})
	require.Equal(h.t, http.StatusOK, code, string(b))
	var resp statementResponse
	require.NoError(h.t, json.Unmarshal(b, &resp))
	require.NotEmpty(h.t, resp.StatementID)
	return resp
}

func (h *harness) mustSQL(stmt string) {
	h.t.Helper()
	resp := h.sql(stmt)
	require.Equal(h.t, "SUCCEEDED", resp.Status.State, "%s: %+v", stmt, resp.Status.Error)
}

func (h *harness) table(name string) Table {
	h.t.Helper()
	tb, ok := h.ws.Registry().Get(name)
	require.True(h.t, ok, "table %s", name)
	return tb
}

func TestCreateTableEffects(t *testing.T) {
	tests := []struct {
		name      string
		sql       string
		wantProps map[string]string
	}{
		{
			name: "plain table gets deletion vectors and table-feature protocol",
			sql:  "CREATE TABLE c.s.plain (id BIGINT)",
			wantProps: map[string]string{
				"delta.enableDeletionVectors": "true", "delta.minReaderVersion": "3", "delta.minWriterVersion": "7",
			},
		},
		{
			name: "deletion vectors off and no features keeps the legacy protocol",
			sql:  "CREATE TABLE c.s.legacy (id BIGINT) TBLPROPERTIES ('delta.enableDeletionVectors'='false')",
			wantProps: map[string]string{
				"delta.enableDeletionVectors": "false", "delta.minReaderVersion": "1", "delta.minWriterVersion": "2",
			},
		},
		{
			name: "uniform turns on column mapping and raises the protocol",
			sql: "CREATE TABLE c.s.uni (id BIGINT) USING DELTA TBLPROPERTIES ('delta.enableIcebergCompatV2'='true', " +
				"'delta.universalFormat.enabledFormats'='iceberg', 'delta.enableDeletionVectors'='false')",
			wantProps: map[string]string{
				"delta.enableIcebergCompatV2": "true", "delta.universalFormat.enabledFormats": "iceberg",
				"delta.enableDeletionVectors": "false", "delta.columnMapping.mode": "name",
				"delta.minReaderVersion": "3", "delta.minWriterVersion": "7",
			},
		},
		{
			name: "a timestamp_ntz column enables its feature",
			sql:  "CREATE TABLE c.s.ntz (ts TIMESTAMP_NTZ) TBLPROPERTIES ('delta.enableDeletionVectors'='false')",
			wantProps: map[string]string{
				"delta.enableDeletionVectors": "false", "delta.feature.timestampNtz": "supported",
				"delta.minReaderVersion": "3", "delta.minWriterVersion": "7",
			},
		},
		{
			name: "an explicit higher protocol is kept",
			sql:  "CREATE TABLE c.s.proto (id INT) TBLPROPERTIES ('delta.enableDeletionVectors'='false', 'delta.minReaderVersion'='2', 'delta.minWriterVersion'='5')",
			wantProps: map[string]string{
				"delta.enableDeletionVectors": "false", "delta.minReaderVersion": "2", "delta.minWriterVersion": "5",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{})
			h.mustSQL(tc.sql)
			name := strings.Fields(tc.sql)[2]
			tb := h.table(name)
			assert.Equal(t, tc.wantProps, tb.Properties)
			assert.Equal(t, "MANAGED", tb.TableType)
			assert.EqualValues(t, 1, tb.Version)
		})
	}
}

func TestCreateExistingIsDistinguishable(t *testing.T) {
	h := newHarness(t, Options{})
	h.mustSQL("CREATE TABLE c.s.t (id BIGINT COMMENT 'first')")

	resp := h.sql("CREATE TABLE C.S.T (other STRING)")
	assert.Equal(t, "FAILED", resp.Status.State)
	require.NotNil(t, resp.Status.Error)
	assert.Equal(t, "ALREADY_EXISTS", resp.Status.Error.ErrorCode)
	assert.Equal(t, "42P07", resp.Status.SQLState)
	assert.Contains(t, resp.Status.Error.Message, "[TABLE_OR_VIEW_ALREADY_EXISTS]")

	resp = h.sql("CREATE TABLE IF NOT EXISTS c.s.t (other STRING)")
	assert.Equal(t, "SUCCEEDED", resp.Status.State)
	assert.Equal(t, "id", h.table("c.s.t").Columns[0].Name, "IF NOT EXISTS leaves the table alone")

	// Other failures carry other codes and SQL states.
	for _, stmt := range []string{"DROP TABLE c.s.missing", "ALTER TABLE c.s.missing ADD COLUMNS (a INT)", "CREATE TABLE c.s.u (a INT, A STRING)"} {
		resp := h.sql(stmt)
		assert.Equal(t, "FAILED", resp.Status.State, stmt)
		assert.NotEqual(t, "ALREADY_EXISTS", resp.Status.Error.ErrorCode, stmt)
		assert.NotEqual(t, "42P07", resp.Status.SQLState, stmt)
	}
	assert.Contains(t, h.sql("DROP VIEW c.s.t").Status.Error.Message, "[WRONG_COMMAND_FOR_OBJECT_TYPE]")
}

func TestAlterEffects(t *testing.T) {
	h := newHarness(t, Options{})
	h.mustSQL("CREATE TABLE c.s.t (id INT NOT NULL, name STRING) COMMENT 'orig'")

	h.mustSQL("ALTER TABLE c.s.t ADD COLUMNS (`a``b` STRUCT<x:INT> COMMENT 'nested', note STRING)")
	tb := h.table("c.s.t")
	require.Len(t, tb.Columns, 4)
	assert.Equal(t, "a`b", tb.Columns[2].Name)
	assert.Equal(t, "nested", tb.Columns[2].Comment)
	assert.True(t, tb.Columns[2].Nullable)
	assert.EqualValues(t, 2, tb.Version)

	h.mustSQL("ALTER TABLE c.s.t ALTER COLUMN name COMMENT 'x''); DROP TABLE y; --'")
	assert.Equal(t, "x'); DROP TABLE y; --", h.table("c.s.t").Columns[1].Comment)

	h.mustSQL("ALTER TABLE c.s.t ALTER COLUMN id DROP NOT NULL")
	assert.True(t, h.table("c.s.t").Columns[0].Nullable)

	h.mustSQL("ALTER TABLE c.s.t SET TAGS ('owner'='team', 'pii')")
	assert.Equal(t, map[string]string{"owner": "team", "pii": ""}, h.table("c.s.t").Tags)

	before := h.table("c.s.t").Version
	h.mustSQL("COMMENT ON TABLE c.s.t IS 'new comment'")
	tb = h.table("c.s.t")
	assert.Equal(t, "new comment", tb.Comment)
	assert.Equal(t, before, tb.Version, "a table comment is not a schema change")

	h.mustSQL("ALTER TABLE c.s.t SET TBLPROPERTIES ('pipeline.managed'='benthos-zerobus')")
	tb = h.table("c.s.t")
	assert.Equal(t, "benthos-zerobus", tb.Properties["pipeline.managed"])
	assert.Equal(t, before+1, tb.Version)

	h.mustSQL("ALTER TABLE c.s.t SET TBLPROPERTIES ('pipeline.managed'='benthos-zerobus')")
	assert.Equal(t, before+1, h.table("c.s.t").Version, "setting an unchanged property is no new version")

	failures := []struct {
		sql, wantIn string
	}{
		{"ALTER TABLE c.s.t ADD COLUMNS (note INT)", "FIELDS_ALREADY_EXISTS"},
		{"ALTER TABLE c.s.t ADD COLUMNS (NOTE INT)", "FIELDS_ALREADY_EXISTS"},
		{"ALTER TABLE c.s.t ADD COLUMNS (z INT NOT NULL)", "NOT NULL"},
		{"ALTER TABLE c.s.t ADD COLUMNS (`has space` INT)", "DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES"},
		{"ALTER TABLE c.s.t ALTER COLUMN missing COMMENT 'x'", "UNRESOLVED_COLUMN"},
		{"ALTER TABLE c.s.t ADD COLUMNS (ts TIMESTAMP_NTZ)", "delta.feature.timestampNtz"},
	}
	for _, f := range failures {
		resp := h.sql(f.sql)
		assert.Equal(t, "FAILED", resp.Status.State, f.sql)
		if assert.NotNil(t, resp.Status.Error, f.sql) {
			assert.Contains(t, resp.Status.Error.Message, f.wantIn, f.sql)
		}
	}
	assert.Len(t, h.table("c.s.t").Columns, 4, "failed statements change nothing")

	h.mustSQL("ALTER TABLE c.s.t SET TBLPROPERTIES ('delta.feature.timestampNtz'='supported')")
	h.mustSQL("ALTER TABLE c.s.t ADD COLUMNS (ts TIMESTAMP_NTZ)")
	assert.Equal(t, typemap.TimestampNTZ, h.table("c.s.t").Columns[4].Type.Kind)

	// Partial names resolve against the request's catalog and schema.
	code, b := h.do("POST", "/api/2.0/sql/statements", map[string]any{
		"warehouse_id": "wh", "catalog": "c", "schema": "s", "statement": "COMMENT ON TABLE t IS 'short'",
	})
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), `"SUCCEEDED"`)
	assert.Equal(t, "short", h.table("c.s.t").Comment)
	assert.Equal(t, "FAILED", h.sql("COMMENT ON TABLE t IS 'x'").Status.State, "no default catalog")
}

func TestColumnMappingAllowsAnyName(t *testing.T) {
	h := newHarness(t, Options{})
	h.mustSQL("CREATE TABLE c.s.t (`has space` INT, `x'); DROP TABLE y; --` STRING) TBLPROPERTIES ('delta.columnMapping.mode'='name')")
	tb := h.table("c.s.t")
	assert.Equal(t, "has space", tb.Columns[0].Name)
	assert.Equal(t, "x'); DROP TABLE y; --", tb.Columns[1].Name)
	assert.False(t, typemap.ValidIdentifier(tb.Columns[1].Name), "accepted by SQL though Zerobus could not ingest it")
}

func TestWideningRules(t *testing.T) {
	const widen = "'delta.enableTypeWidening'='true'"
	const iceberg = "'delta.enableIcebergCompatV2'='true', 'delta.universalFormat.enabledFormats'='iceberg', 'delta.enableDeletionVectors'='false'"
	tests := []struct {
		name, props, from, to string
		ok                    bool
		wantIn                string
	}{
		{"off by default", "'a'='b'", "INT", "BIGINT", false, "delta.enableTypeWidening"},
		{"int to bigint", widen, "INT", "BIGINT", true, ""},
		{"tinyint to int", widen, "TINYINT", "INT", true, ""},
		{"float to double", widen, "FLOAT", "DOUBLE", true, ""},
		{"decimal grows", widen, "DECIMAL(10,2)", "DECIMAL(12,4)", true, ""},
		{"narrowing refused", widen, "BIGINT", "INT", false, "not a supported type widening"},
		{"int to double is lossy", widen, "BIGINT", "DOUBLE", false, "not a supported type widening"},
		{"string to int refused", widen, "STRING", "INT", false, "not a supported type widening"},
		{"iceberg int to bigint", widen + ", " + iceberg, "INT", "BIGINT", true, ""},
		{"iceberg decimal same scale", widen + ", " + iceberg, "DECIMAL(10,2)", "DECIMAL(12,2)", true, ""},
		{"iceberg refuses tinyint to int", widen + ", " + iceberg, "TINYINT", "INT", false, "Iceberg V2"},
		{"iceberg refuses decimal scale change", widen + ", " + iceberg, "DECIMAL(10,2)", "DECIMAL(12,4)", false, "Iceberg V2"},
		{"same type is a no-op", "'a'='b'", "INT", "INT", true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{})
			h.mustSQL("CREATE TABLE c.s.t (v " + tc.from + ") TBLPROPERTIES (" + tc.props + ")")
			before := h.table("c.s.t")
			resp := h.sql("ALTER TABLE c.s.t ALTER COLUMN v TYPE " + tc.to)
			after := h.table("c.s.t")
			if !tc.ok {
				require.Equal(t, "FAILED", resp.Status.State)
				assert.Contains(t, resp.Status.Error.Message, tc.wantIn)
				assert.Equal(t, before.Columns, after.Columns)
				return
			}
			require.Equal(t, "SUCCEEDED", resp.Status.State, "%+v", resp.Status.Error)
			assert.Equal(t, typemap.MustParse(tc.to), after.Columns[0].Type)
			if tc.from == tc.to {
				assert.Equal(t, before.Version, after.Version)
			} else {
				assert.Equal(t, before.Version+1, after.Version)
			}
		})
	}
}

func TestIcebergRejectsVariant(t *testing.T) {
	h := newHarness(t, Options{})
	resp := h.sql("CREATE TABLE c.s.t (v VARIANT) TBLPROPERTIES ('delta.universalFormat.enabledFormats'='iceberg')")
	require.Equal(t, "FAILED", resp.Status.State)
	assert.Contains(t, resp.Status.Error.Message, "Iceberg")
	h.mustSQL("CREATE TABLE c.s.ok (v VARIANT)")
}

func TestTablesEndpointShape(t *testing.T) {
	h := newHarness(t, Options{})
	h.mustSQL("CREATE TABLE main.sales.orders (id BIGINT NOT NULL COMMENT 'key', " +
		"items ARRAY<STRUCT<sku:STRING NOT NULL, qty:INT>>, price DECIMAL(10,2), attrs MAP<STRING,STRING>, ts TIMESTAMP) " +
		"COMMENT 'orders' TBLPROPERTIES ('team'='x')")

	code, b := h.do("GET", "/api/2.1/unity-catalog/tables/main.sales.orders", nil)
	require.Equal(t, http.StatusOK, code, string(b))

	var info catalog.TableInfo
	require.NoError(t, json.Unmarshal(b, &info), "the SDK's type parses the response")
	assert.Equal(t, "orders", info.Name)
	assert.Equal(t, "main", info.CatalogName)
	assert.Equal(t, "sales", info.SchemaName)
	assert.Equal(t, "main.sales.orders", info.FullName)
	assert.Equal(t, catalog.TableTypeManaged, info.TableType)
	assert.Equal(t, catalog.DataSourceFormatDelta, info.DataSourceFormat)
	assert.Equal(t, "orders", info.Comment)
	assert.NotEmpty(t, info.Owner)
	assert.Equal(t, "x", info.Properties["team"])
	assert.Contains(t, info.StorageLocation, info.TableId)
	assert.Equal(t, h.clock.Now().UnixMilli(), info.CreatedAt)
	require.Len(t, info.Columns, 5)

	id := info.Columns[0]
	assert.Equal(t, 0, id.Position)
	assert.False(t, id.Nullable)
	assert.Equal(t, "key", id.Comment)
	assert.Equal(t, catalog.ColumnTypeNameLong, id.TypeName)
	assert.Equal(t, "bigint", id.TypeText)
	assert.JSONEq(t, `{"name":"id","type":"long","nullable":false,"metadata":{"comment":"key"}}`, id.TypeJson)

	items := info.Columns[1]
	assert.Equal(t, 1, items.Position)
	assert.Equal(t, catalog.ColumnTypeNameArray, items.TypeName)
	assert.Equal(t, "array<struct<sku:string,qty:int>>", items.TypeText)
	assert.JSONEq(t, `{"name":"items","nullable":true,"metadata":{},"type":{"type":"array","containsNull":true,
		"elementType":{"type":"struct","fields":[
			{"name":"sku","type":"string","nullable":false,"metadata":{}},
			{"name":"qty","type":"integer","nullable":true,"metadata":{}}]}}}`, items.TypeJson)

	price := info.Columns[2]
	assert.Equal(t, catalog.ColumnTypeNameDecimal, price.TypeName)
	assert.Equal(t, 10, price.TypePrecision)
	assert.Equal(t, 2, price.TypeScale)
	assert.Equal(t, "decimal(10,2)", price.TypeText)
	assert.Equal(t, catalog.ColumnTypeNameMap, info.Columns[3].TypeName)
	assert.Equal(t, catalog.ColumnTypeNameTimestamp, info.Columns[4].TypeName)

	// type_json parses back to the registry's columns.
	tb := h.table("main.sales.orders")
	for i, c := range info.Columns {
		back, err := typemap.ParseColumnTypeJSON(c.TypeJson)
		require.NoError(t, err)
		assert.Equal(t, tb.Columns[i], back)
	}

	// Raw JSON keeps nullable=false and position=0 explicit.
	var raw map[string]any
	require.NoError(t, json.Unmarshal(b, &raw))
	col0 := raw["columns"].([]any)[0].(map[string]any)
	assert.Equal(t, false, col0["nullable"])
	assert.EqualValues(t, 0, col0["position"])
	_, hasIceberg := raw["delta_uniform_iceberg"]
	assert.False(t, hasIceberg, "no Iceberg block without Iceberg reads")

	code, b = h.do("GET", "/api/2.1/unity-catalog/tables/main.sales.missing", nil)
	assert.Equal(t, http.StatusNotFound, code)
	assert.JSONEq(t, `{"error_code":"TABLE_DOES_NOT_EXIST","message":"Table 'main.sales.missing' does not exist."}`, string(b))

	code, b = h.do("GET", "/api/2.1/unity-catalog/tables/MAIN.sales.orders/exists", nil)
	assert.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"table_exists":true}`, string(b))
	code, b = h.do("GET", "/api/2.1/unity-catalog/tables/main.sales.missing/exists", nil)
	assert.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"table_exists":false}`, string(b))

	code, b = h.do("GET", "/api/2.1/unity-catalog/tables?catalog_name=main&schema_name=sales", nil)
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), `"full_name":"main.sales.orders"`)
}

func TestTagAssignments(t *testing.T) {
	h := newHarness(t, Options{})
	h.mustSQL("CREATE TABLE c.s.t (id INT)")
	h.mustSQL("ALTER TABLE c.s.t SET TAGS ('b'='2', 'a'='1')")
	code, b := h.do("GET", "/api/2.1/unity-catalog/entity-tag-assignments/tables/c.s.t/tags", nil)
	require.Equal(t, http.StatusOK, code, string(b))
	var resp catalog.ListEntityTagAssignmentsResponse
	require.NoError(t, json.Unmarshal(b, &resp))
	require.Len(t, resp.TagAssignments, 2)
	assert.Equal(t, "a", resp.TagAssignments[0].TagKey)
	assert.Equal(t, "1", resp.TagAssignments[0].TagValue)
	assert.Equal(t, "c.s.t", resp.TagAssignments[0].EntityName)
}

func TestTemporaryCredentials(t *testing.T) {
	h := newHarness(t, Options{CredentialTTL: 15 * time.Minute})
	h.mustSQL("CREATE TABLE c.s.t (id INT)")
	tb := h.table("c.s.t")

	tests := []struct {
		name     string
		body     map[string]any
		wantCode int
		wantErr  string
	}{
		{"read", map[string]any{"table_id": tb.TableID, "operation": "READ"}, http.StatusOK, ""},
		{"read_write on managed", map[string]any{"table_id": tb.TableID, "operation": "READ_WRITE"}, http.StatusForbidden, "PERMISSION_DENIED"},
		{"unknown table", map[string]any{"table_id": "00000000-0000-4000-8000-000000000000", "operation": "READ"}, http.StatusNotFound, "TABLE_DOES_NOT_EXIST"},
		{"bad operation", map[string]any{"table_id": tb.TableID, "operation": "WRITE"}, http.StatusBadRequest, "INVALID_PARAMETER_VALUE"},
		{"no table id", map[string]any{"operation": "READ"}, http.StatusBadRequest, "INVALID_PARAMETER_VALUE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, b := h.do("POST", "/api/2.0/unity-catalog/temporary-table-credentials", tc.body)
			require.Equal(t, tc.wantCode, code, string(b))
			if tc.wantErr != "" {
				var e apiError
				require.NoError(t, json.Unmarshal(b, &e))
				assert.Equal(t, tc.wantErr, e.ErrorCode)
				assert.NotEmpty(t, e.Message)
				return
			}
			var resp catalog.GenerateTemporaryTableCredentialResponse
			require.NoError(t, json.Unmarshal(b, &resp))
			require.NotNil(t, resp.AwsTempCredentials)
			assert.NotEmpty(t, resp.AwsTempCredentials.AccessKeyId)
			assert.NotEmpty(t, resp.AwsTempCredentials.SecretAccessKey)
			assert.NotEmpty(t, resp.AwsTempCredentials.SessionToken)
			assert.Equal(t, h.clock.Now().Add(15*time.Minute).UnixMilli(), resp.ExpirationTime)
			assert.Equal(t, "s3://emulator-metastore/__unitystorage/tables/"+tb.TableID, resp.Url)
		})
	}

	denied := newHarness(t, Options{DenyExternalAccess: true})
	denied.mustSQL("CREATE TABLE c.s.t (id INT)")
	code, _ := denied.do("POST", "/api/2.0/unity-catalog/temporary-table-credentials",
		map[string]any{"table_id": denied.table("c.s.t").TableID, "operation": "READ"})
	assert.Equal(t, http.StatusForbidden, code)
}

// icebergOf reads delta_uniform_iceberg from the tables endpoint.
func (h *harness) icebergOf(name string) *icebergJSON {
	h.t.Helper()
	code, b := h.do("GET", "/api/2.1/unity-catalog/tables/"+name, nil)
	require.Equal(h.t, http.StatusOK, code, string(b))
	var raw struct {
		DeltaUniformIceberg *icebergJSON `json:"delta_uniform_iceberg"`
	}
	require.NoError(h.t, json.Unmarshal(b, &raw))
	return raw.DeltaUniformIceberg
}

func TestIcebergConversionLagsAndMSCKForces(t *testing.T) {
	h := newHarness(t, Options{IcebergLag: 2 * time.Second})
	h.mustSQL("CREATE TABLE c.s.t (id INT) TBLPROPERTIES ('delta.enableIcebergCompatV2'='true', " +
		"'delta.universalFormat.enabledFormats'='iceberg', 'delta.enableDeletionVectors'='false')")

	assert.Nil(t, h.icebergOf("c.s.t"), "nothing converted right after CREATE")
	h.clock.Advance(2 * time.Second)
	ice := h.icebergOf("c.s.t")
	require.NotNil(t, ice)
	assert.EqualValues(t, 0, ice.ConvertedDeltaVersion)
	assert.Contains(t, ice.MetadataLocation, "/metadata/00000-")

	h.ws.NoteDataCommit("c.s.t")
	h.clock.Advance(time.Second)
	h.ws.NoteDataCommit("C.S.T")
	v, ok := h.ws.DeltaVersion("c.s.t")
	require.True(t, ok)
	assert.EqualValues(t, 2, v)
	assert.EqualValues(t, 0, h.icebergOf("c.s.t").ConvertedDeltaVersion, "lags the data")

	h.clock.Advance(time.Second)
	ice = h.icebergOf("c.s.t")
	assert.EqualValues(t, 1, ice.ConvertedDeltaVersion, "first commit is 2s old")
	assert.Equal(t, h.clock.Now().Add(-2*time.Second).UnixMilli(), ice.ConvertedDeltaTimestamp)

	h.mustSQL("ALTER TABLE c.s.t ADD COLUMNS (n STRING)")
	v, _ = h.ws.DeltaVersion("c.s.t")
	assert.EqualValues(t, 3, v, "a schema change is a Delta commit too")
	assert.EqualValues(t, 1, h.icebergOf("c.s.t").ConvertedDeltaVersion)

	h.mustSQL("MSCK REPAIR TABLE c.s.t SYNC METADATA")
	assert.EqualValues(t, 3, h.icebergOf("c.s.t").ConvertedDeltaVersion, "MSCK forces the conversion")
	assert.Equal(t, 1, h.ws.Stats().ByKind[KindRepairSyncMetadata])

	assert.Equal(t, "FAILED", h.sql("MSCK REPAIR TABLE c.s.missing SYNC METADATA").Status.State)
}

func TestIcebergWithoutLag(t *testing.T) {
	h := newHarness(t, Options{IcebergLag: -1})
	h.mustSQL("CREATE TABLE c.s.t (id INT) TBLPROPERTIES ('delta.universalFormat.enabledFormats'='iceberg')")
	h.ws.NoteDataCommit("c.s.t")
	assert.EqualValues(t, 1, h.icebergOf("c.s.t").ConvertedDeltaVersion)
}

func TestPreexistingTablesCountAsConverted(t *testing.T) {
	h := newHarness(t, Options{})
	_, err := h.ws.Registry().Create(Table{FullName: "c.s.t", Columns: mustColumns(t, "id INT"),
		Properties: map[string]string{PropEnabledFormats: "iceberg"}})
	require.NoError(t, err)
	ice := h.icebergOf("c.s.t")
	require.NotNil(t, ice)
	assert.EqualValues(t, 0, ice.ConvertedDeltaVersion)
	h.ws.NoteDataCommit("c.s.t")
	assert.EqualValues(t, 0, h.icebergOf("c.s.t").ConvertedDeltaVersion)
	h.clock.Advance(DefaultIcebergLag)
	assert.EqualValues(t, 1, h.icebergOf("c.s.t").ConvertedDeltaVersion)
}

func TestStatementProtocol(t *testing.T) {
	h := newHarness(t, Options{})

	badRequests := []struct {
		name string
		body map[string]any
		want string
	}{
		{"no warehouse", map[string]any{"statement": "COMMENT ON TABLE c.s.t IS 'x'"}, "warehouse_id"},
		{"no statement", map[string]any{"warehouse_id": "wh"}, "statement"},
		{"bad wait", map[string]any{"warehouse_id": "wh", "statement": "x", "wait_timeout": "3s"}, "wait_timeout"},
		{"bad wait unit", map[string]any{"warehouse_id": "wh", "statement": "x", "wait_timeout": "1m"}, "wait_timeout"},
	}
	for _, tc := range badRequests {
		t.Run(tc.name, func(t *testing.T) {
			code, b := h.do("POST", "/api/2.0/sql/statements", tc.body)
			assert.Equal(t, http.StatusBadRequest, code)
			assert.Contains(t, string(b), tc.want)
		})
	}
	assert.Equal(t, 0, h.ws.Stats().Statements, "rejected requests are not statements")

	// wait_timeout 0s: PENDING, then RUNNING on the first poll, then the result.
	code, b := h.do("POST", "/api/2.0/sql/statements", map[string]any{"warehouse_id": "wh", "statement": "CREATE TABLE c.s.t (id INT)", "wait_timeout": "0s"})
	require.Equal(t, http.StatusOK, code)
	var resp statementResponse
	require.NoError(t, json.Unmarshal(b, &resp))
	assert.Equal(t, "PENDING", resp.Status.State)
	states := []string{}
	for i := 0; i < 3; i++ {
		code, b = h.do("GET", "/api/2.0/sql/statements/"+resp.StatementID, nil)
		require.Equal(t, http.StatusOK, code)
		var polled statementResponse
		require.NoError(t, json.Unmarshal(b, &polled))
		states = append(states, polled.Status.State)
	}
	assert.Equal(t, []string{"RUNNING", "SUCCEEDED", "SUCCEEDED"}, states)

	// A failed statement is HTTP 200 with state FAILED, also when polled.
	failed := h.sql("SELECT 1")
	assert.Equal(t, "FAILED", failed.Status.State)
	code, b = h.do("GET", "/api/2.0/sql/statements/"+failed.StatementID, nil)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), "unsupported statement: SELECT 1")

	code, _ = h.do("GET", "/api/2.0/sql/statements/nope", nil)
	assert.Equal(t, http.StatusNotFound, code)

	code, b = h.do("POST", "/api/2.0/sql/statements", map[string]any{"warehouse_id": "wh", "statement": "COMMENT ON TABLE c.s.t IS :c",
		"parameters": []map[string]string{{"name": "c", "value": "x"}}})
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), "FAILED")

	st := h.ws.Stats()
	assert.Equal(t, 3, st.Statements)
	assert.Equal(t, 2, st.Failed)
	assert.Equal(t, map[StatementKind]int{KindCreateTable: 1, KindUnsupported: 2}, st.ByKind)
	log := h.ws.Executed()
	require.Len(t, log, 3)
	assert.Equal(t, "SELECT 1", log[1].Text)
	assert.Equal(t, "FAILED", log[1].State)
}

func TestAuthorizeGuardsEveryRoute(t *testing.T) {
	h := newHarness(t, Options{Authorize: func(r *http.Request) error {
		if r.Header.Get("Authorization") != "Bearer good" {
			return errors.New("bad token")
		}
		return nil
	}})
	h.mustSQL("CREATE TABLE c.s.t (id INT)")
	for _, path := range []string{
		"/api/2.1/unity-catalog/tables/c.s.t",
		"/api/2.1/unity-catalog/tables/c.s.t/exists",
		"/api/2.0/sql/statements/x",
	} {
		resp, err := http.Get(h.srv.URL + path)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
		assert.Contains(t, string(b), `"error_code":"UNAUTHENTICATED"`, path)
	}
	resp, err := http.Post(h.srv.URL+"/api/2.0/sql/statements", "application/json",
		strings.NewReader(`{"warehouse_id":"wh","statement":"COMMENT ON TABLE c.s.t IS 'x'"}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Equal(t, 1, h.ws.Stats().Statements, "an unauthorized statement is not executed")

	code, b := h.do("GET", "/api/2.0/nothing", nil)
	assert.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, string(b), "ENDPOINT_NOT_FOUND")
}

func TestWithCreateDefaults(t *testing.T) {
	in := Table{FullName: "c.s.t", Columns: mustColumns(t, "ts TIMESTAMP_NTZ"),
		Properties: map[string]string{PropEnabledFormats: "iceberg"}}
	out := WithCreateDefaults(in)
	assert.Equal(t, map[string]string{
		PropEnabledFormats: "iceberg", PropColumnMappingMode: "name", PropDeletionVectors: "true",
		PropFeatureTimestampNT: "supported", PropMinReaderVersion: "3", PropMinWriterVersion: "7",
	}, out.Properties)
	assert.Equal(t, map[string]string{PropEnabledFormats: "iceberg"}, in.Properties, "the input is not modified")
}

func TestStatementLogIsBounded(t *testing.T) {
	h := newHarness(t, Options{})
	for i := 0; i < maxRetainedStatements+5; i++ {
		h.ws.run(executeRequest{WarehouseID: "wh", Statement: "SELECT 1"})
	}
	assert.Len(t, h.ws.Executed(), maxRetainedStatements)
	assert.Equal(t, maxRetainedStatements+5, h.ws.Stats().Statements)
	h.ws.mu.Lock()
	assert.Len(t, h.ws.statements, maxRetainedStatements)
	h.ws.mu.Unlock()
}

func TestTableNameRules(t *testing.T) {
	tests := []struct {
		sql string
		ok  bool
	}{
		{"CREATE TABLE `c`.`s`.`with-dash` (id INT)", true},
		{"CREATE TABLE c.s.`x'); DROP TABLE y; --` (id INT)", false}, // spaces are not allowed in UC names
		{"CREATE TABLE c.s.`a.b` (id INT)", false},
		{"CREATE TABLE c.s.`a/b` (id INT)", false},
		{"CREATE TABLE c.s.`tab\tbed` (id INT)", false},
		{"CREATE TABLE c.s.`" + strings.Repeat("x", 256) + "` (id INT)", false},
	}
	for _, tc := range tests {
		t.Run(tc.sql[:min(len(tc.sql), 40)], func(t *testing.T) {
			h := newHarness(t, Options{})
			resp := h.sql(tc.sql)
			if tc.ok {
				assert.Equal(t, "SUCCEEDED", resp.Status.State)
				return
			}
			require.Equal(t, "FAILED", resp.Status.State)
			assert.Contains(t, resp.Status.Error.Message, "INVALID_SCHEMA_OR_RELATION_NAME")
			assert.Empty(t, h.ws.Registry().List())
		})
	}
}

func TestConcurrentStatements(t *testing.T) {
	h := newHarness(t, Options{})
	h.mustSQL("CREATE TABLE c.s.t (id INT)")
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			body := map[string]any{"warehouse_id": "wh", "statement": "ALTER TABLE c.s.t ADD COLUMNS (c" + string(rune('a'+i)) + " STRING)"}
			b, _ := json.Marshal(body)
			resp, err := http.Post(h.srv.URL+"/api/2.0/sql/statements", "application/json", bytes.NewReader(b))
			if assert.NoError(t, err) {
				resp.Body.Close()
			}
		}(i)
	}
	wg.Wait()
	tb := h.table("c.s.t")
	assert.Len(t, tb.Columns, 9)
	assert.EqualValues(t, 9, tb.Version)
	v, _ := h.ws.DeltaVersion("c.s.t")
	assert.EqualValues(t, 8, v)
	assert.Equal(t, 9, h.ws.Stats().Statements)
}

func TestSeedDataCommits(t *testing.T) {
	h := newHarness(t, Options{})
	_, err := h.ws.Registry().Create(Table{FullName: "c.s.t", Columns: mustColumns(t, "id INT"),
		Properties: map[string]string{PropEnabledFormats: "iceberg"}})
	require.NoError(t, err)
	h.ws.SeedDataCommits("c.s.t", 7)
	v, ok := h.ws.DeltaVersion("c.s.t")
	require.True(t, ok)
	assert.EqualValues(t, 7, v)
	assert.EqualValues(t, 7, h.icebergOf("c.s.t").ConvertedDeltaVersion)
	h.ws.NoteDataCommit("c.s.t")
	v, _ = h.ws.DeltaVersion("c.s.t")
	assert.EqualValues(t, 8, v)
	assert.EqualValues(t, 7, h.icebergOf("c.s.t").ConvertedDeltaVersion)
	_, ok = h.ws.DeltaVersion("c.s.missing")
	assert.False(t, ok)
}
