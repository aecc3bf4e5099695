package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

// workspaceToken fetches a workspace OAuth token from the emulator, as the
// SDK's M2M auth would.
func workspaceToken(t *testing.T, srv *emulator.Server) string {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {"all-apis"}}
	req, err := http.NewRequest(http.MethodPost, srv.HTTPURL()+"/oidc/v1/token", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(emulator.DefaultClientID, emulator.DefaultClientSecret)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var body struct {
		AccessToken string `json:"access_token"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.NotEmpty(t, body.AccessToken)
	return body.AccessToken
}

// workspaceCall sends one authenticated workspace REST request and decodes
// its JSON answer into out.
func workspaceCall(t *testing.T, srv *emulator.Server, token, method, path string, in, out any) {
	t.Helper()
	var body bytes.Buffer
	if in != nil {
		require.NoError(t, json.NewEncoder(&body).Encode(in))
	}
	req, err := http.NewRequest(method, srv.HTTPURL()+path, &body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s %s", method, path)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
}

// execSQL runs one statement on the emulator's SQL warehouse, as a human
// with a notebook would, and requires it to succeed.
func execSQL(t *testing.T, srv *emulator.Server, token, statement string) {
	t.Helper()
	var res struct {
		Status struct {
			State string `json:"state"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		} `json:"status"`
	}
	workspaceCall(t, srv, token, http.MethodPost, "/api/2.0/sql/statements",
		map[string]string{"warehouse_id": "wh", "statement": statement, "wait_timeout": "30s"}, &res)
	require.Equal(t, "SUCCEEDED", res.Status.State, "statement %q: %+v", statement, res.Status.Error)
}

// ucColumnTypes describes table through Unity Catalog's tables endpoint:
// column name → type_text.
func ucColumnTypes(t *testing.T, srv *emulator.Server, token, table string) map[string]string {
	t.Helper()
	var info struct {
		Columns []struct {
			Name     string `json:"name"`
			TypeText string `json:"type_text"`
		} `json:"columns"`
	}
	workspaceCall(t, srv, token, http.MethodGet, "/api/2.1/unity-catalog/tables/"+url.PathEscape(table), nil, &info)
	out := map[string]string{}
	for _, c := range info.Columns {
		out[c.Name] = c.TypeText
	}
	return out
}

func TestOutOfRangeValueWidensColumn(t *testing.T) {
	const table = "main.default.counters"
	const provision = "catalog:\n  provision: true\n  warehouse_id: wh\n"
	// uniform is a table a human created through SQL with Iceberg reads on:
	// Iceberg V2 widens only int to bigint, so SMALLINT cannot become BIGINT.
	const uniform = "CREATE TABLE `main`.`default`.`counters` (id BIGINT NOT NULL, n SMALLINT) USING DELTA TBLPROPERTIES (" +
		"'delta.enableIcebergCompatV2'='true', 'delta.universalFormat.enabledFormats'='iceberg', " +
		"'delta.enableDeletionVectors'='false', 'delta.enableTypeWidening'='true')"
	tests := []struct {
		name      string
		seed      string // emulator table spec; empty: created by createSQL
		createSQL string
		catalog   string
		wantType  string // n's type afterwards, as UC describes it
		wantRows  map[int64]int64
		wantDead  []string // substrings of the one dead letter's error
	}{
		{
			name: "provision and widen: the row lands, INT becomes BIGINT", seed: table + ":id BIGINT NOT NULL, n INT",
			catalog: provision + "  widen: true\n", wantType: "bigint",
			wantRows: map[int64]int64{0: 5, 1: 7, 2: 3000000000, 3: -3000000000},
		},
		{
			name: "without widen the row is dead-lettered naming n", seed: table + ":id BIGINT NOT NULL, n INT",
			catalog: provision, wantType: "int",
			wantRows: map[int64]int64{0: 5, 1: 7, 3: 8},
			wantDead: []string{"message 1", `column "n"`, "out of range for INT"},
		},
		{
			name: "iceberg reads refuse SMALLINT to BIGINT, naming n", createSQL: uniform,
			catalog: provision + "  widen: true\n", wantType: "smallint",
			wantRows: map[int64]int64{0: 5, 1: 7, 3: 8},
			wantDead: []string{"message 1", `column "n"`, "Iceberg", "refused"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var seed []string
			if tc.seed != "" {
				seed = append(seed, tc.seed)
			}
			srv := startEmulator(t, emulator.Faults{}, seed...)
			token := workspaceToken(t, srv)
			if tc.createSQL != "" {
				execSQL(t, srv, token, tc.createSQL)
			}
			third := `{"id":3,"n":8}`
			if len(tc.wantDead) == 0 {
				third = `{"id":3,"n":-3000000000}`
			}
			// A row that fits lands first, on the narrow column.
			dead := writeWithFallback(t, srv, table, tc.catalog, service.MessageBatch{
				service.NewMessage([]byte(`{"id":0,"n":5}`)),
			}, service.MessageBatch{
				service.NewMessage([]byte(`{"id":1,"n":7}`)),
				service.NewMessage([]byte(`{"id":2,"n":3000000000}`)),
				service.NewMessage([]byte(third)),
			})

			assert.Equal(t, tc.wantType, ucColumnTypes(t, srv, token, table)["n"])
			got := rowsByID(t, srv, table)
			require.Len(t, got, len(tc.wantRows), "rows: %v", got)
			for id, n := range tc.wantRows {
				require.Contains(t, got, id)
				v, ok := asInt64(got[id]["n"])
				require.True(t, ok, "row %d n = %v", id, got[id]["n"])
				assert.Equal(t, n, v, "row %d n", id)
			}
			if len(tc.wantDead) == 0 {
				assert.Empty(t, dead)
				return
			}
			require.Len(t, dead, 1, "dead letters: %+v", dead)
			v, _ := asInt64(dead[0].Row["id"])
			assert.Equal(t, int64(2), v, "the out-of-range row is the one dead-lettered")
			for _, sub := range tc.wantDead {
				assert.Contains(t, dead[0].Error, sub)
			}
		})
	}
}
