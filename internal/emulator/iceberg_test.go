package emulator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/catalog/rest"
	_ "github.com/apache/iceberg-go/io/gocloud/s3" // s3:// file IO
	"github.com/apache/iceberg-go/table"
	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// icebergRow is one row of icebergTable as compared here.
type icebergRow struct {
	id     int64
	name   string // "<null>" for null
	amount string
	tsUS   int64
}

// wantRows are the rows makeBatch writes for ids [from, to).
func wantRows(from, to int) []icebergRow {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var out []icebergRow
	for i := from; i < to; i++ {
		name := fmt.Sprintf("row-%d", i)
		if i%5 == 4 {
			name = "<null>"
		}
		out = append(out, icebergRow{id: int64(i), name: name, amount: fmt.Sprintf("%d.%02d", i, i%100), tsUS: base.Add(time.Duration(i) * time.Second).UnixMicro()})
	}
	return out
}

// scanIceberg loads icebergTable through the emulator's Iceberg REST catalog
// with iceberg-go (vended credentials, S3 file IO) and returns its rows.
func scanIceberg(t *testing.T, srv *Server) []icebergRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cat, err := rest.NewCatalog(ctx, "uc", srv.HTTPURL()+icebergRESTPrefix,
		rest.WithOAuthToken(workspaceToken(t, srv)), rest.WithWarehouseLocation("main"))
	require.NoError(t, err)
	tbl, err := cat.LoadTable(ctx, table.Identifier{"default", "ice"})
	require.NoError(t, err)
	at, err := tbl.Scan().ToArrowTable(ctx)
	require.NoError(t, err)
	defer at.Release()
	tr := array.NewTableReader(at, 1024)
	defer tr.Release()
	var out []icebergRow
	for tr.Next() {
		rec := tr.RecordBatch()
		col := func(name string) arrow.Array {
			idx := rec.Schema().FieldIndices(name)
			require.Len(t, idx, 1, "column %s", name)
			return rec.Column(idx[0])
		}
		ids, names, amounts, tss := col("id"), col("name"), col("amount").(*array.Decimal128), col("ts")
		scale := amounts.DataType().(*arrow.Decimal128Type).Scale
		require.Equal(t, int32(2), scale, "DECIMAL(10,2) reads as decimal(10,2)")
		for i := 0; i < int(rec.NumRows()); i++ {
			r := icebergRow{id: ids.(*array.Int64).Value(i), name: "<null>", amount: amounts.Value(i).ToString(scale), tsUS: int64(tss.(*array.Timestamp).Value(i))}
			if names.IsValid(i) {
				r.name = names.ValueStr(i)
			}
			out = append(out, r)
		}
	}
	require.NoError(t, tr.Err())
	return out
}

func TestIcebergReadThroughRESTCatalog(t *testing.T) {
	// A lag long enough that only MSCK REPAIR TABLE … SYNC METADATA
	// converts within the test.
	srv := startEmu(t, func(c *Config) { c.IcebergLag = time.Hour })
	runSQL(t, srv, createIcebergTable)
	ingest(t, srv, icebergTable, 0, 100)
	ingest(t, srv, icebergTable, 100, 20)
	runSQL(t, srv, "MSCK REPAIR TABLE "+icebergTable+" SYNC METADATA")
	assert.Equal(t, wantRows(0, 120), scanIceberg(t, srv), "both commits, exactly as written")

	// Written but not converted yet: readers see the older snapshot.
	ingest(t, srv, icebergTable, 120, 30)
	assert.Equal(t, wantRows(0, 120), scanIceberg(t, srv), "a read before conversion sees the previous snapshot")

	runSQL(t, srv, "MSCK REPAIR TABLE "+icebergTable+" SYNC METADATA")
	assert.Equal(t, wantRows(0, 150), scanIceberg(t, srv), "after conversion the new rows are visible")

	// The metadata location is the one UC reports for the table.
	lt := loadTableRaw(t, srv, "default/tables/ice", true)
	u := getUCTable(t, srv, icebergTable)
	assert.Equal(t, u.convertedVersion(), lt.convertedVersion(t))
	assert.Len(t, lt.Metadata.Snapshots, 3, "one snapshot per converted data commit")
}

func TestIcebergReadAfterRestart(t *testing.T) {
	dir := t.TempDir()
	srv := startEmu(t, func(c *Config) { c.DataDir = dir; c.IcebergLag = -1 })
	runSQL(t, srv, createIcebergTable)
	ingest(t, srv, icebergTable, 0, 40)
	assert.Equal(t, wantRows(0, 40), scanIceberg(t, srv))
	require.NoError(t, srv.Close())

	srv2 := startEmu(t, func(c *Config) { c.DataDir = dir; c.IcebergLag = -1 })
	ingest(t, srv2, icebergTable, 40, 10)
	assert.Equal(t, wantRows(0, 50), scanIceberg(t, srv2), "replayed commits and new ones")
}

// loadTableResult is the part of LoadTableResult the tests look at.
type loadTableResult struct {
	MetadataLocation string            `json:"metadata-location"`
	Config           map[string]string `json:"config"`
	Metadata         struct {
		Properties map[string]string `json:"properties"`
		Snapshots  []json.RawMessage `json:"snapshots"`
	} `json:"metadata"`
}

func (l loadTableResult) convertedVersion(t *testing.T) int64 {
	var v int64
	_, err := fmt.Sscan(l.Metadata.Properties["converted-delta-version"], &v)
	require.NoError(t, err)
	return v
}

// icebergGet calls the Iceberg REST catalog with a workspace token and
// returns status and body.
func icebergGet(t *testing.T, srv *Server, path string, hdr map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.HTTPURL()+icebergRESTPrefix+"/v1/"+path, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

func loadTableRaw(t *testing.T, srv *Server, path string, vend bool) loadTableResult {
	t.Helper()
	hdr := map[string]string{"Authorization": "Bearer " + workspaceToken(t, srv)}
	if vend {
		hdr["X-Iceberg-Access-Delegation"] = "vended-credentials"
	}
	code, body := icebergGet(t, srv, "catalogs/main/namespaces/"+path, hdr)
	require.Equal(t, http.StatusOK, code, string(body))
	var out loadTableResult
	require.NoError(t, json.Unmarshal(body, &out))
	return out
}

func TestIcebergRESTCatalogRoutes(t *testing.T) {
	srv := startEmu(t, func(c *Config) { c.IcebergLag = -1 })
	runSQL(t, srv, createIcebergTable)
	auth := map[string]string{"Authorization": "Bearer " + workspaceToken(t, srv)}

	code, body := icebergGet(t, srv, "config?warehouse=main", auth)
	require.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"defaults":{},"overrides":{"prefix":"catalogs/main"},"endpoints":[
		"GET /v1/{prefix}/namespaces","GET /v1/{prefix}/namespaces/{namespace}",
		"GET /v1/{prefix}/namespaces/{namespace}/tables","GET /v1/{prefix}/namespaces/{namespace}/tables/{table}"]}`, string(body))
	code, _ = icebergGet(t, srv, "config", auth)
	assert.Equal(t, http.StatusBadRequest, code, "warehouse is required")
	code, _ = icebergGet(t, srv, "config?warehouse=nope", auth)
	assert.Equal(t, http.StatusNotFound, code)

	code, body = icebergGet(t, srv, "catalogs/main/namespaces", auth)
	require.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"namespaces":[["default"]]}`, string(body))
	code, body = icebergGet(t, srv, "catalogs/main/namespaces/default", auth)
	require.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"namespace":["default"],"properties":{}}`, string(body))
	code, _ = icebergGet(t, srv, "catalogs/main/namespaces/other", auth)
	assert.Equal(t, http.StatusNotFound, code)
	code, body = icebergGet(t, srv, "catalogs/main/namespaces/default/tables", auth)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(body), `{"name":"ice","namespace":["default"]}`)

	// No bearer, or an ingest token: refused.
	code, body = icebergGet(t, srv, "config?warehouse=main", nil)
	assert.Equal(t, http.StatusUnauthorized, code, string(body))
	code, _ = icebergGet(t, srv, "config?warehouse=main", map[string]string{"Authorization": "Bearer " + zerobusToken(t, srv, icebergTable)})
	assert.Equal(t, http.StatusUnauthorized, code)

	// A Delta table without Iceberg reads is refused; a missing one is 404.
	code, body = icebergGet(t, srv, "catalogs/main/namespaces/default/tables/events", auth)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, string(body), "delta.universalFormat.enabledFormats")
	code, _ = icebergGet(t, srv, "catalogs/main/namespaces/default/tables/missing", auth)
	assert.Equal(t, http.StatusNotFound, code)

	// Credentials only when delegation is asked for.
	assert.Empty(t, loadTableRaw(t, srv, "default/tables/ice", false).Config)
	cfg := loadTableRaw(t, srv, "default/tables/ice", true).Config
	for _, k := range []string{"s3.access-key-id", "s3.secret-access-key", "s3.session-token", "s3.session-token-expires-at-ms"} {
		assert.NotEmpty(t, cfg[k], k)
	}
	assert.Equal(t, srv.S3URL(), cfg["s3.endpoint"])
	assert.Equal(t, "true", cfg["s3.path-style-access"])
	assert.Equal(t, "us-east-1", cfg["client.region"])
}

// s3Do sends a SigV4-signed request (AWS SDK signer) for an object key.
func s3Do(t *testing.T, srv *Server, method, key string, creds aws.Credentials) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.S3URL()+"/"+s3Bucket+"/"+key, nil)
	require.NoError(t, err)
	empty := sha256.Sum256(nil)
	h := hex.EncodeToString(empty[:])
	req.Header.Set("X-Amz-Content-Sha256", h)
	require.NoError(t, v4.NewSigner().SignHTTP(context.Background(), creds, req, h, "s3", "us-east-1", time.Now()))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var e s3Error
	_ = decodeXML(resp, &e)
	return resp.StatusCode, e.Code
}

func TestIcebergStorageCredentials(t *testing.T) {
	srv := startEmu(t, func(c *Config) { c.IcebergLag = -1 })
	runSQL(t, srv, createIcebergTable)
	ingest(t, srv, icebergTable, 0, 10)
	lt := loadTableRaw(t, srv, "default/tables/ice", true)
	key := strings.TrimPrefix(lt.MetadataLocation, "s3://"+s3Bucket+"/")
	good := aws.Credentials{AccessKeyID: lt.Config["s3.access-key-id"], SecretAccessKey: lt.Config["s3.secret-access-key"], SessionToken: lt.Config["s3.session-token"]}

	code, _ := s3Do(t, srv, http.MethodGet, key, good)
	assert.Equal(t, http.StatusOK, code, "the vended credentials read the table's metadata")

	tests := []struct {
		name   string
		method string
		key    string
		mutate func(*aws.Credentials)
		status int
		code   string
	}{
		{"wrong secret", http.MethodGet, key, func(c *aws.Credentials) { c.SecretAccessKey = "x" + c.SecretAccessKey }, http.StatusForbidden, "SignatureDoesNotMatch"},
		{"unknown key", http.MethodGet, key, func(c *aws.Credentials) { c.AccessKeyID = "ASIAUNKNOWN" }, http.StatusForbidden, "InvalidAccessKeyId"},
		{"wrong session token", http.MethodGet, key, func(c *aws.Credentials) { c.SessionToken = "other" }, http.StatusBadRequest, "InvalidToken"},
		{"no session token", http.MethodGet, key, func(c *aws.Credentials) { c.SessionToken = "" }, http.StatusBadRequest, "AuthorizationHeaderMalformed"},
		{"write", http.MethodPut, key + ".new", nil, http.StatusForbidden, "AccessDenied"},
		{"delete", http.MethodDelete, key, nil, http.StatusForbidden, "AccessDenied"},
		{"another table's location", http.MethodGet, s3TablesPrefix + "00000000-0000-0000-0000-000000000000/x", nil, http.StatusForbidden, "AccessDenied"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			if tc.mutate != nil {
				tc.mutate(&c)
			}
			code, s3code := s3Do(t, srv, tc.method, tc.key, c)
			assert.Equal(t, tc.status, code)
			assert.Equal(t, tc.code, s3code)
		})
	}

	t.Run("unsigned", func(t *testing.T) {
		resp, err := http.Get(srv.S3URL() + "/" + s3Bucket + "/" + key)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	})

	t.Run("expired", func(t *testing.T) {
		srv.s3creds.now = func() time.Time { return time.Now().Add(DefaultCredentialTTL + time.Minute) }
		t.Cleanup(func() { srv.s3creds.now = time.Now })
		code, s3code := s3Do(t, srv, http.MethodGet, key, good)
		assert.Equal(t, http.StatusBadRequest, code)
		assert.Equal(t, "ExpiredToken", s3code)
	})
}

func decodeXML(resp *http.Response, out any) error {
	return xml.NewDecoder(resp.Body).Decode(out)
}

// newestLogVersion is the highest version in table's _delta_log under dir.
func newestLogVersion(t *testing.T, dir, table string) int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(append([]string{dir}, append(strings.Split(table, "."), "_delta_log", "*.json")...)...))
	require.NoError(t, err)
	v := int64(-1)
	for _, f := range files {
		n, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(f), ".json"), 10, 64)
		require.NoError(t, err)
		v = max(v, n)
	}
	return v
}

// A metadata change between data commits is a Delta commit of its own, so
// the log's version numbers are the ones converted_delta_version counts in:
// a reader comparing the newest log version with the converted one sees the
// lag exactly (it used to see "current" while a data commit was pending).
func TestDeltaLogNumbersMatchTheConversionAfterDDL(t *testing.T) {
	dir := t.TempDir()
	srv := startEmu(t, func(c *Config) { c.DataDir = dir; c.IcebergLag = time.Hour })
	runSQL(t, srv, createIcebergTable)
	ingest(t, srv, icebergTable, 0, 10)
	runSQL(t, srv, "ALTER TABLE "+icebergTable+" SET TBLPROPERTIES ('team' = 'a')")
	runSQL(t, srv, "ALTER TABLE "+icebergTable+" SET TBLPROPERTIES ('team' = 'b')")
	ingest(t, srv, icebergTable, 10, 10)
	runSQL(t, srv, "MSCK REPAIR TABLE "+icebergTable+" SYNC METADATA")
	converted := getUCTable(t, srv, icebergTable).convertedVersion()
	assert.Equal(t, newestLogVersion(t, dir, icebergTable), converted, "converted_delta_version is the newest log version")

	runSQL(t, srv, "ALTER TABLE "+icebergTable+" SET TBLPROPERTIES ('team' = 'c')")
	ingest(t, srv, icebergTable, 20, 10)
	assert.Equal(t, converted, getUCTable(t, srv, icebergTable).convertedVersion(), "not converted yet")
	assert.Equal(t, converted+2, newestLogVersion(t, dir, icebergTable), "the property change and the data commit")
	assert.Equal(t, wantRows(0, 20), scanIceberg(t, srv))
}
