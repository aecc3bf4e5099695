package workspace

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dedupQuery is the query catalog.DedupViewQuery renders for main.default.t
// (the catalog package's tests check that it still does).
const dedupQuery = "SELECT * FROM `main`.`default`.`t` QUALIFY `_zb_source` IS NULL OR `_zb_offset` IS NULL OR row_number() OVER (PARTITION BY `_zb_source`, `_zb_offset` ORDER BY `_zb_emit_ts`) = 1"

func (h *harness) failsWith(stmt, class, sqlState string) {
	h.t.Helper()
	resp := h.sql(stmt)
	require.Equal(h.t, "FAILED", resp.Status.State, stmt)
	require.NotNil(h.t, resp.Status.Error)
	assert.Contains(h.t, resp.Status.Error.Message, "["+class+"]", stmt)
	assert.Equal(h.t, sqlState, resp.Status.SQLState, "%s: %s", stmt, resp.Status.Error.Message)
}

// TestViewStatements: the view statements the output emits succeed, the
// service's refusals are the service's (missing table, existing object,
// wrong object kind, an unknown column), and what the emulator does not
// evaluate is refused, never ignored.
func TestViewStatements(t *testing.T) {
	h := newHarness(t, Options{})
	create := "CREATE VIEW `main`.`default`.`t_dedup` AS " + dedupQuery
	h.failsWith(create, "TABLE_OR_VIEW_NOT_FOUND", "42P01")
	h.mustSQL("CREATE TABLE main.default.t (id BIGINT, _zb_source STRING, _zb_offset BIGINT, _zb_emit_ts TIMESTAMP)")
	h.mustSQL(create)
	h.failsWith(create, "TABLE_OR_VIEW_ALREADY_EXISTS", "42P07")
	v, ok := h.ws.View("main.default.t_dedup")
	require.True(t, ok)
	assert.Equal(t, dedupQuery, v.Definition)
	assert.Len(t, v.Columns, 4)
	id := v.TableID

	// The view's columns are bound when it is defined: a new column of the
	// table shows once the view is defined again, by ALTER VIEW (same id).
	h.mustSQL("ALTER TABLE main.default.t ADD COLUMNS (extra STRING)")
	v, _ = h.ws.View("main.default.t_dedup")
	assert.Len(t, v.Columns, 4)
	h.mustSQL("ALTER VIEW `main`.`default`.`t_dedup` AS " + dedupQuery)
	v, _ = h.ws.View("main.default.t_dedup")
	assert.Len(t, v.Columns, 5)
	assert.Equal(t, id, v.TableID, "ALTER VIEW keeps the view (and its grants)")
	h.mustSQL("CREATE OR REPLACE VIEW main.default.t_dedup AS " + dedupQuery)
	v, _ = h.ws.View("main.default.t_dedup")
	assert.NotEqual(t, id, v.TableID, "CREATE OR REPLACE is a new view")

	// One name space for tables and views.
	h.failsWith("CREATE VIEW main.default.t AS "+dedupQuery, "TABLE_OR_VIEW_ALREADY_EXISTS", "42P07")
	h.failsWith("CREATE OR REPLACE VIEW main.default.t AS "+dedupQuery, "EXPECT_VIEW_NOT_TABLE.NO_ALTERNATIVE", "42809")
	h.failsWith("ALTER VIEW main.default.t AS "+dedupQuery, "EXPECT_VIEW_NOT_TABLE.USE_ALTER_TABLE", "42809")
	h.failsWith("ALTER VIEW main.default.nope AS "+dedupQuery, "TABLE_OR_VIEW_NOT_FOUND", "42P01")
	h.failsWith("CREATE TABLE main.default.t_dedup (a INT)", "TABLE_OR_VIEW_ALREADY_EXISTS", "42P07")
	h.failsWith("ALTER TABLE main.default.t_dedup ADD COLUMNS (a INT)", "EXPECT_TABLE_NOT_VIEW.USE_ALTER_VIEW", "42809")
	h.failsWith("COMMENT ON TABLE main.default.t_dedup IS 'x'", "UNSUPPORTED_FEATURE", "0A000")
	h.failsWith("DROP TABLE main.default.t_dedup", "WRONG_COMMAND_FOR_OBJECT_TYPE", "42809")
	h.failsWith("DROP VIEW main.default.t", "WRONG_COMMAND_FOR_OBJECT_TYPE", "42809")
	h.failsWith("CREATE VIEW main.default.v2 AS SELECT * FROM main.default.t QUALIFY row_number() OVER (PARTITION BY nope ORDER BY _zb_emit_ts) = 1",
		"UNRESOLVED_COLUMN.WITH_SUGGESTION", "42703")

	// Valid Databricks SQL the emulator does not evaluate.
	for _, q := range []string{
		"CREATE VIEW main.default.v2 AS SELECT id FROM main.default.t",
		"CREATE VIEW main.default.v2 AS SELECT * FROM main.default.t",
		"CREATE VIEW main.default.v2 AS SELECT * EXCEPT (extra) FROM main.default.t QUALIFY row_number() OVER (PARTITION BY id ORDER BY id) = 1",
		"CREATE VIEW main.default.v2 AS SELECT * FROM main.default.t WHERE id > 1",
		"CREATE VIEW main.default.v2 AS SELECT * FROM main.default.t QUALIFY rank() OVER (PARTITION BY id ORDER BY id) = 1",
		"CREATE VIEW main.default.v2 AS SELECT * FROM main.default.t QUALIFY row_number() OVER (PARTITION BY id ORDER BY id) = 2",
		"CREATE VIEW main.default.v2 AS SELECT * FROM main.default.t QUALIFY row_number() OVER (PARTITION BY id ORDER BY id NULLS LAST) = 1",
		"CREATE TEMPORARY VIEW v2 AS SELECT * FROM main.default.t",
		"CREATE OR REPLACE TABLE main.default.v2 (a INT)",
		"CREATE VIEW IF NOT EXISTS main.default.v2 AS " + dedupQuery,
		"CREATE VIEW main.default.v2 COMMENT 'c' AS " + dedupQuery,
		"CREATE VIEW main.default.v2 WITH SCHEMA EVOLUTION AS " + dedupQuery,
		"CREATE VIEW main.default.v3 AS SELECT * FROM main.default.t_dedup QUALIFY row_number() OVER (PARTITION BY id ORDER BY id) = 1",
	} {
		h.failsWith(q, "UNSUPPORTED_FEATURE", "0A000")
	}
	// Not SQL.
	for _, q := range []string{
		"CREATE VIEW main.default.v2 AS SELECT * FROM main.default.t QUALIFY row_number( OVER (PARTITION BY id ORDER BY id) = 1",
		"CREATE VIEW main.default.v2 AS SELECT * FROM main.default.t QUALIFY row_number() OVER (PARTITION BY id ORDER BY id = 1",
		"CREATE VIEW main.default.v2",
		"DROP VIEW",
		"CREATE VIEW main.default.v2 AS SELECT * EXCLUDE (extra) FROM main.default.t QUALIFY row_number() OVER (PARTITION BY id ORDER BY id) = 1",
	} {
		h.failsWith(q, "PARSE_SYNTAX_ERROR", "42601")
	}
	h.failsWith("CREATE VIEW main.default.v2 AS SELECT * FROM main.default.t QUALIFY row_number() OVER (PARTITION BY id) = 1", "_LEGACY_ERROR_TEMP_1037", "")
	_, ok = h.ws.View("main.default.v2")
	assert.False(t, ok, "no refused statement created a view")

	// UC: the view is a table entry of type VIEW with its query.
	code, b := h.do("GET", "/api/2.1/unity-catalog/tables/main.default.t_dedup", nil)
	require.Equal(t, http.StatusOK, code, string(b))
	var info struct {
		TableType      string `json:"table_type"`
		ViewDefinition string `json:"view_definition"`
		Columns        []struct {
			Name     string `json:"name"`
			TypeText string `json:"type_text"`
		} `json:"columns"`
	}
	require.NoError(t, json.Unmarshal(b, &info))
	assert.Equal(t, "VIEW", info.TableType)
	assert.Equal(t, dedupQuery, info.ViewDefinition)
	require.Len(t, info.Columns, 5)
	assert.Equal(t, "extra", info.Columns[4].Name)
	code, b = h.do("GET", "/api/2.1/unity-catalog/tables?catalog_name=main&schema_name=default", nil)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(b), `"table_type":"VIEW"`)

	h.mustSQL("DROP VIEW main.default.t_dedup")
	h.failsWith("DROP VIEW main.default.t_dedup", "TABLE_OR_VIEW_NOT_FOUND", "42P01")
	h.mustSQL("DROP VIEW IF EXISTS main.default.t_dedup")
	code, _ = h.do("GET", "/api/2.1/unity-catalog/tables/main.default.t_dedup", nil)
	assert.Equal(t, http.StatusNotFound, code)
}

// TestViewEvaluate: each (source, offset) once, the earliest emitted; rows
// without a position all kept; only the view's columns.
func TestViewEvaluate(t *testing.T) {
	h := newHarness(t, Options{})
	h.mustSQL("CREATE TABLE main.default.t (id BIGINT, _zb_source STRING, _zb_offset BIGINT, _zb_emit_ts TIMESTAMP)")
	h.mustSQL("CREATE VIEW main.default.v AS " + dedupQuery)
	h.mustSQL("ALTER TABLE main.default.t ADD COLUMNS (later STRING)")
	v, _ := h.ws.View("main.default.v")
	raw := []map[string]any{
		{"id": int64(1), "_zb_source": "a/0", "_zb_offset": int64(0), "_zb_emit_ts": "2026-01-01T00:00:02.5Z", "later": nil},
		{"id": int64(2), "_zb_source": "a/0", "_zb_offset": int64(0), "_zb_emit_ts": "2026-01-01T00:00:02.25Z", "later": "x"},
		{"id": int64(3), "_zb_source": "a/0", "_zb_offset": int64(1), "_zb_emit_ts": "2026-01-01T00:00:01Z", "later": nil},
		{"id": int64(4), "_zb_source": "a/1", "_zb_offset": int64(0), "_zb_emit_ts": "2026-01-01T00:00:01Z", "later": nil},
		{"id": int64(5), "_zb_source": nil, "_zb_offset": nil, "_zb_emit_ts": "2026-01-01T00:00:01Z", "later": nil},
		{"id": int64(6), "_zb_source": nil, "_zb_offset": nil, "_zb_emit_ts": "2026-01-01T00:00:01Z", "later": nil},
		{"id": int64(7), "_zb_source": "a/0", "_zb_offset": int64(1), "_zb_emit_ts": "2026-01-01T00:00:03Z", "later": nil},
	}
	rows, err := v.Evaluate(raw, h.table("main.default.t"))
	require.NoError(t, err)
	var ids []int64
	for _, r := range rows {
		ids = append(ids, r["id"].(int64))
		assert.NotContains(t, r, "later", "the view's columns are those it was defined with")
	}
	assert.Equal(t, []int64{2, 3, 4, 5, 6}, ids)
}

// TestViewsPersist: an emulator reopened on its data directory has its
// views, with their query, columns and id, and evaluates them; a dropped
// view stays dropped.
func TestViewsPersist(t *testing.T) {
	dir := t.TempDir()
	open := func() *Workspace {
		reg, err := OpenRegistry(dir)
		require.NoError(t, err)
		return New(reg, Options{})
	}
	w := open()
	run := func(w *Workspace, stmt string) {
		t.Helper()
		rec := w.run(executeRequest{Statement: stmt})
		require.Equal(t, "SUCCEEDED", rec.exec.State, "%s: %s", stmt, rec.exec.Message)
	}
	run(w, "CREATE TABLE main.default.t (id BIGINT, _zb_source STRING, _zb_offset BIGINT, _zb_emit_ts TIMESTAMP)")
	run(w, "CREATE VIEW main.default.t_dedup AS "+dedupQuery)
	run(w, "CREATE VIEW main.default.gone AS "+dedupQuery)
	run(w, "DROP VIEW main.default.gone")
	before, _ := w.View("main.default.t_dedup")

	w = open()
	after, ok := w.View("main.default.t_dedup")
	require.True(t, ok, "the view survived the restart")
	assert.Equal(t, before.TableID, after.TableID)
	assert.Equal(t, dedupQuery, after.Definition)
	assert.Equal(t, len(before.Columns), len(after.Columns))
	_, ok = w.View("main.default.gone")
	assert.False(t, ok, "a dropped view stays dropped")
	tb, _ := w.Registry().Get("main.default.t")
	rows, err := after.Evaluate([]map[string]any{
		{"id": int64(1), "_zb_source": "a", "_zb_offset": int64(0), "_zb_emit_ts": "2026-01-01T00:00:02Z"},
		{"id": int64(2), "_zb_source": "a", "_zb_offset": int64(0), "_zb_emit_ts": "2026-01-01T00:00:01Z"},
	}, tb)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	assert.Equal(t, int64(2), rows[0]["id"])
	run(w, "ALTER VIEW main.default.t_dedup AS "+dedupQuery)
}

// TestCreateTableAndViewOfOneNameRace: tables and views share one name
// space, so of a CREATE TABLE and a CREATE VIEW of one name run at once
// exactly one succeeds, and the other is TABLE_OR_VIEW_ALREADY_EXISTS.
// With the names checked under two locks one after the other, both could
// pass their check and both succeed. Run with -race too.
func TestCreateTableAndViewOfOneNameRace(t *testing.T) {
	h := newHarness(t, Options{})
	h.mustSQL("CREATE TABLE main.default.t (id BIGINT, _zb_source STRING, _zb_offset BIGINT, _zb_emit_ts TIMESTAMP)")
	const rounds = 300
	for i := range rounds {
		name := fmt.Sprintf("main.default.x%d", i)
		stmts := []string{"CREATE TABLE " + name + " (a INT)", "CREATE VIEW " + name + " AS " + dedupQuery}
		var errs [2]*sqlError
		var start, done sync.WaitGroup
		start.Add(1)
		for j, text := range stmts {
			st, serr := parseStatement(text)
			require.Nil(t, serr, text)
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				errs[j] = h.ws.execute(st, "main", "default")
			}()
		}
		start.Done()
		done.Wait()
		_, isTable := h.ws.reg.Get(name)
		_, isView := h.ws.View(name)
		require.False(t, isTable && isView, "round %d: %s is both a table and a view (table: %v, view: %v)", i, name, errs[0], errs[1])
		require.True(t, (errs[0] == nil) != (errs[1] == nil), "round %d: exactly one CREATE succeeds (table: %v, view: %v)", i, errs[0], errs[1])
		for _, e := range errs {
			if e != nil {
				require.Equal(t, "TABLE_OR_VIEW_ALREADY_EXISTS", e.Class, "round %d", i)
			}
		}
	}
}
