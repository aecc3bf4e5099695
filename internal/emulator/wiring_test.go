package emulator

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// icebergTable is created through the SQL statements API with Iceberg reads
// on, as the primary-raw preconditions require.
const icebergTable = "main.default.ice"

const createIcebergTable = "CREATE TABLE " + icebergTable +
	" (id BIGINT NOT NULL, name STRING, amount DECIMAL(10,2), ts TIMESTAMP) TBLPROPERTIES (" +
	"'delta.enableIcebergCompatV2'='true', 'delta.universalFormat.enabledFormats'='iceberg', " +
	"'delta.enableDeletionVectors'='false')"

// ucTable is the part of UC's TableInfo these tests look at.
type ucTable struct {
	FullName   string            `json:"full_name"`
	Properties map[string]string `json:"properties"`
	Iceberg    *struct {
		ConvertedDeltaVersion int64 `json:"converted_delta_version"`
	} `json:"delta_uniform_iceberg"`
}

// convertedVersion is the table's converted_delta_version, -1 when UC
// reports no converted version yet.
func (u ucTable) convertedVersion() int64 {
	if u.Iceberg == nil {
		return -1
	}
	return u.Iceberg.ConvertedDeltaVersion
}

// getUCTable fetches a table through the UC REST API with a workspace token,
// failing the test if it cannot: call it on the test goroutine only.
func getUCTable(t testing.TB, srv endpoints, name string) ucTable {
	t.Helper()
	out, err := fetchUCTable(srv, workspaceToken(t, srv), name)
	require.NoError(t, err)
	return out
}

// fetchUCTable fetches a table through the UC REST API with token. It
// never fails the test, so a poller can call it.
func fetchUCTable(srv endpoints, token, name string) (ucTable, error) {
	var out ucTable
	req, err := http.NewRequest(http.MethodGet, srv.HTTPURL()+"/api/2.1/unity-catalog/tables/"+name, nil)
	if err != nil {
		return out, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return out, err
	}
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("GET table %s: HTTP %d, body %q", name, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return out, fmt.Errorf("GET table %s: body %q: %w", name, body, err)
	}
	return out, nil
}

// runSQL executes one statement through the SQL statements API and requires
// it to succeed.
func runSQL(t testing.TB, srv endpoints, stmt string) {
	t.Helper()
	state, msg := execSQL(t, srv, workspaceToken(t, srv), stmt)
	require.Equal(t, "SUCCEEDED", state, "%s: %s", stmt, msg)
}

// ingest writes rows [from, from+n) to table over one DoPut stream and waits
// for their ack, so they are one durable data commit.
func ingest(t testing.TB, srv endpoints, table string, from, n int) {
	t.Helper()
	p, _, err := openPut(t, dial(t, srv), zerobusToken(t, srv, table), table, testSchema)
	require.NoError(t, err)
	rec := makeBatch(from, n)
	defer rec.Release()
	require.NoError(t, p.send(rec, 0))
	p.waitRecords(uint64(n))
	require.NoError(t, p.finish())
}

func TestSeededTablesGetCreateDefaults(t *testing.T) {
	tests := []struct {
		name  string
		spec  string
		table string
		want  map[string]string
		// protocol is the protocol action of the table's Delta version 0.
		protocol string
	}{
		{
			name:  "plain columns",
			spec:  testTableSpec,
			table: testTable,
			want: map[string]string{
				"delta.enableDeletionVectors": "true",
				"delta.minReaderVersion":      "3",
				"delta.minWriterVersion":      "7",
			},
			protocol: `{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["deletionVectors"],"writerFeatures":["deletionVectors"]}`,
		},
		{
			name:  "timestamp_ntz column",
			spec:  "main.default.ntz:id BIGINT NOT NULL, at TIMESTAMP_NTZ",
			table: "main.default.ntz",
			want: map[string]string{
				"delta.enableDeletionVectors": "true",
				"delta.feature.timestampNtz":  "supported",
				"delta.minReaderVersion":      "3",
				"delta.minWriterVersion":      "7",
			},
			protocol: `{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["timestampNtz","deletionVectors"],"writerFeatures":["timestampNtz","deletionVectors"]}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := startEmu(t, func(c *Config) { c.Tables = []string{tc.spec} })
			got := getUCTable(t, srv, tc.table)
			assert.Equal(t, tc.table, got.FullName)
			assert.Equal(t, tc.want, got.Properties)

			parts := strings.Split(tc.table, ".")
			log, err := os.ReadFile(filepath.Join(srv.DataDir(), parts[0], parts[1], parts[2], "_delta_log", "00000000000000000000.json"))
			require.NoError(t, err)
			assert.Contains(t, string(log), `"protocol":`+tc.protocol, "the Delta log agrees with the UC properties")
		})
	}
}

func TestDataCommitsDriveIcebergConversion(t *testing.T) {
	tests := []struct {
		name string
		lag  time.Duration
		// repair forces the conversion with MSCK REPAIR TABLE … SYNC
		// METADATA instead of waiting for the lag to pass.
		repair bool
	}{
		{name: "catches up after the lag", lag: time.Second},
		{name: "forced by MSCK REPAIR", lag: time.Hour, repair: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := startEmu(t, func(c *Config) { c.IcebergLag = tc.lag })
			runSQL(t, srv, createIcebergTable)
			if tc.repair {
				runSQL(t, srv, "MSCK REPAIR TABLE "+icebergTable+" SYNC METADATA")
				assert.EqualValues(t, 0, getUCTable(t, srv, icebergTable).convertedVersion(), "the CREATE is converted")
			}

			ingest(t, srv, icebergTable, 0, 10)
			v, ok := srv.Workspace().DeltaVersion(icebergTable)
			require.True(t, ok)
			require.EqualValues(t, 1, v, "one data commit after the CREATE")
			assert.Less(t, getUCTable(t, srv, icebergTable).convertedVersion(), v, "the conversion lags the data commit")

			if tc.repair {
				runSQL(t, srv, "MSCK REPAIR TABLE "+icebergTable+" SYNC METADATA")
				assert.Equal(t, v, getUCTable(t, srv, icebergTable).convertedVersion())
				return
			}
			token := workspaceToken(t, srv)
			var last atomic.Value // what the last poll saw (the poller may still run when Eventually gives up)
			if !assert.Eventually(t, func() bool {
				u, err := fetchUCTable(srv, token, icebergTable)
				if err != nil {
					last.Store(err.Error())
					return false
				}
				last.Store(fmt.Sprintf("converted version %d", u.convertedVersion()))
				return u.convertedVersion() == v
			}, 10*time.Second, 50*time.Millisecond) {
				t.Errorf("the conversion never caught up with version %d (last: %v)", v, last.Load())
			}
		})
	}
}

func TestDeltaVersionSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := func(c *Config) {
		c.DataDir = dir
		c.IcebergLag = time.Hour
	}
	srv := startEmu(t, cfg)
	runSQL(t, srv, createIcebergTable)
	for i := range 3 {
		ingest(t, srv, testTable, i*10, 10)
	}
	for i := range 2 {
		ingest(t, srv, icebergTable, i*10, 10)
	}
	ws := srv.Workspace()
	seeded, _ := ws.DeltaVersion(testTable)
	iceberg, _ := ws.DeltaVersion(icebergTable)
	require.EqualValues(t, 3, seeded)
	require.EqualValues(t, 2, iceberg)
	require.Less(t, getUCTable(t, srv, icebergTable).convertedVersion(), iceberg, "an hour's lag: nothing converted yet")
	require.NoError(t, srv.Close())

	srv2 := startEmu(t, cfg)
	ws2 := srv2.Workspace()
	v, ok := ws2.DeltaVersion(testTable)
	require.True(t, ok)
	assert.Equal(t, seeded, v)
	v, ok = ws2.DeltaVersion(icebergTable)
	require.True(t, ok)
	assert.Equal(t, iceberg, v)
	assert.Equal(t, iceberg, getUCTable(t, srv2, icebergTable).convertedVersion(), "replayed versions count as converted")

	// New commits continue from the replayed version.
	ingest(t, srv2, icebergTable, 100, 5)
	v, _ = ws2.DeltaVersion(icebergTable)
	assert.Equal(t, iceberg+1, v)
	assert.Equal(t, iceberg, getUCTable(t, srv2, icebergTable).convertedVersion(), "the new commit lags")
	assert.EqualValues(t, 25, rowCount(t, srv2, icebergTable))
}
