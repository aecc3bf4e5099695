package emulator

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestDiscoveryEndpoints(t *testing.T) {
	srv := startEmu(t, nil)
	var cfg map[string]any
	require.Equal(t, http.StatusOK, getJSON(t, srv.HTTPURL()+"/.well-known/databricks-config", &cfg))
	assert.Equal(t, srv.HTTPURL()+"/oidc", cfg["oidc_endpoint"])
	assert.Equal(t, "123", cfg["workspace_id"])

	var meta map[string]any
	require.Equal(t, http.StatusOK, getJSON(t, srv.HTTPURL()+"/oidc/.well-known/oauth-authorization-server", &meta))
	assert.Equal(t, srv.HTTPURL()+"/oidc/v1/token", meta["token_endpoint"])
	assert.Equal(t, srv.HTTPURL()+"/oidc/v1/authorize", meta["authorization_endpoint"])
}

func TestTokenEndpoint(t *testing.T) {
	srv := startEmu(t, nil)
	plain := url.Values{"grant_type": {"client_credentials"}, "scope": {"all-apis"}}
	withDetails := func(mut func([]map[string]any) []map[string]any) url.Values {
		f := zerobusForm(srv, testTable)
		var d []map[string]any
		require.NoError(t, json.Unmarshal([]byte(f.Get("authorization_details")), &d))
		b, _ := json.Marshal(mut(d))
		f.Set("authorization_details", string(b))
		return f
	}
	tests := []struct {
		name      string
		id, sec   string
		form      url.Values
		wantCode  int
		wantError string
	}{
		{"workspace token", DefaultClientID, DefaultClientSecret, plain, 200, ""},
		{"zerobus token", DefaultClientID, DefaultClientSecret, zerobusForm(srv, testTable), 200, ""},
		{"zerobus token, id from the loopback endpoint's first label", DefaultClientID, DefaultClientSecret, func() url.Values {
			f := zerobusForm(srv, testTable)
			f.Set("resource", "api://databricks/workspaces/127/zerobusDirectWriteApi")
			return f
		}(), 200, ""},
		{"wrong secret", DefaultClientID, "nope", plain, 401, "invalid_client"},
		{"wrong client id", "someone", DefaultClientSecret, plain, 401, "invalid_client"},
		{"wrong grant", DefaultClientID, DefaultClientSecret, url.Values{"grant_type": {"password"}}, 400, "unsupported_grant_type"},
		{"wrong workspace in resource", DefaultClientID, DefaultClientSecret, func() url.Values {
			f := zerobusForm(srv, testTable)
			f.Set("resource", "api://databricks/workspaces/999/zerobusDirectWriteApi")
			return f
		}(), 400, "invalid_target"},
		{"resource without details", DefaultClientID, DefaultClientSecret, func() url.Values {
			f := zerobusForm(srv, testTable)
			f.Del("authorization_details")
			return f
		}(), 400, "invalid_request"},
		{"details without table", DefaultClientID, DefaultClientSecret, withDetails(func(d []map[string]any) []map[string]any { return d[:2] }), 400, "invalid_authorization_details"},
		{"schema entry for another schema", DefaultClientID, DefaultClientSecret, withDetails(func(d []map[string]any) []map[string]any {
			d[1]["object_full_path"] = "main.other"
			return d
		}), 400, "invalid_authorization_details"},
		{"table lacks MODIFY", DefaultClientID, DefaultClientSecret, withDetails(func(d []map[string]any) []map[string]any {
			d[2]["privileges"] = []string{"SELECT"}
			return d
		}), 400, "invalid_authorization_details"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := postToken(t, srv, tc.id, tc.sec, tc.form)
			require.Equal(t, tc.wantCode, code, body)
			if tc.wantError != "" {
				assert.Equal(t, tc.wantError, body["error"])
				assert.Nil(t, body["access_token"])
				return
			}
			assert.NotEmpty(t, body["access_token"])
			assert.Equal(t, "Bearer", body["token_type"])
			assert.EqualValues(t, 3600, body["expires_in"])
			assert.Equal(t, "all-apis", body["scope"])
		})
	}
	st := srv.Stats()
	assert.EqualValues(t, 3, st.TokensIssued)
	assert.EqualValues(t, len(tests)-3, st.TokenFailures)
}

func TestWorkspaceAPIAuth(t *testing.T) {
	srv := startEmu(t, nil)
	get := func(token string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.HTTPURL()+"/api/2.1/unity-catalog/tables/"+testTable, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusOK, get(workspaceToken(t, srv)))
	assert.Equal(t, http.StatusUnauthorized, get(""))
	assert.Equal(t, http.StatusUnauthorized, get("made-up"))
	assert.Equal(t, http.StatusUnauthorized, get(zerobusToken(t, srv, testTable)), "ingest tokens are refused by UC REST")
}

func TestDoPutHappyPath(t *testing.T) {
	srv := startEmu(t, nil)
	conn := dial(t, srv)
	tok := zerobusToken(t, srv, testTable)

	p, ready, err := openPut(t, conn, tok, testTable, testSchema)
	require.NoError(t, err)
	assert.Equal(t, ack{Offset: -1, Records: 0}, ready)

	sizes := []int{10, 20, 30}
	from := 0
	for i, n := range sizes {
		rec := makeBatch(from, n)
		require.NoError(t, p.send(rec, int64(i)))
		rec.Release()
		from += n
	}
	acks := p.waitRecords(60)
	var prev ack
	for _, a := range acks {
		assert.GreaterOrEqual(t, a.Records, prev.Records, "acks are cumulative")
		assert.GreaterOrEqual(t, a.Offset, prev.Offset)
		assert.Contains(t, []uint64{10, 30, 60}, a.Records, "acks land on batch boundaries")
		prev = a
	}
	assert.Equal(t, int64(2), prev.Offset)
	require.NoError(t, p.finish())

	assert.EqualValues(t, 60, rowCount(t, srv, testTable))
	rows := readRows(t, srv, testTable, 0)
	require.Len(t, rows, 60)
	byID := map[float64]map[string]any{}
	for _, r := range rows {
		byID[r["id"].(float64)] = r
	}
	r7 := byID[7]
	require.NotNil(t, r7)
	assert.Equal(t, "row-7", r7["name"])
	assert.Equal(t, "7.07", r7["amount"])
	assert.Equal(t, "2026-01-02T03:04:12Z", r7["ts"])
	assert.Nil(t, byID[4]["name"])
	assert.Len(t, readRows(t, srv, testTable, 5), 5)
	var list struct{ Tables []tableInfo }
	require.Equal(t, http.StatusOK, getJSON(t, srv.HTTPURL()+"/emulator/v1/tables", &list))
	require.Len(t, list.Tables, 1)
	assert.Equal(t, testTable, list.Tables[0].FullName)
	assert.EqualValues(t, 60, list.Tables[0].RowCount)
	assert.Equal(t, http.StatusNotFound, getJSON(t, srv.HTTPURL()+"/emulator/v1/tables/main.default.nope", nil))

	st := srv.Stats().Tables[testTable]
	assert.EqualValues(t, 1, st.StreamsOpened)
	assert.EqualValues(t, 0, st.StreamsActive)
	assert.EqualValues(t, 60, st.RowsReceived)
	assert.EqualValues(t, 60, st.RowsAcked)
	assert.EqualValues(t, 60, st.RowCount)
}

func TestDoPutCompressedBodiesAndOmittedNullableColumn(t *testing.T) {
	srv := startEmu(t, nil)
	conn := dial(t, srv)
	tok := zerobusToken(t, srv, testTable)
	// "name" and "amount" are nullable: a stream may leave them out.
	schema := arrow.NewSchema([]arrow.Field{testSchema.Field(0), testSchema.Field(3)}, nil)
	p, _, err := openPut(t, conn, tok, testTable, schema)
	require.NoError(t, err)
	full := makeBatch(0, 100)
	rec := array.NewRecordBatch(schema, []arrow.Array{full.Column(0), full.Column(3)}, 100)
	require.NoError(t, p.send(rec, 0, ipc.WithZstd()))
	require.NoError(t, p.send(rec, 1, ipc.WithLZ4()))
	p.waitRecords(200)
	require.NoError(t, p.finish())
	rows := readRows(t, srv, testTable, 1)
	require.Len(t, rows, 1)
	assert.Contains(t, rows[0], "name")
	assert.Nil(t, rows[0]["name"])
	assert.EqualValues(t, 200, rowCount(t, srv, testTable))
}

func TestSchemaValidation(t *testing.T) {
	const mapTable = "main.default.maps"
	srv := startEmu(t, func(c *Config) {
		c.Tables = append(c.Tables, mapTable+":id BIGINT NOT NULL, attrs MAP<STRING, BIGINT>, tags ARRAY<STRING>")
	})
	conn := dial(t, srv)
	f := func(i int) arrow.Field { return testSchema.Field(i) }
	withNull := func(fl arrow.Field, n bool) arrow.Field { fl.Nullable = n; return fl }
	tests := []struct {
		name       string
		table      string
		fields     []arrow.Field
		wantCauses string // "" = accepted
		wantField  string
		mapNames   [3]string // map child names written in the schema message; zero: arrow-go's
	}{
		{"exact", testTable, []arrow.Field{f(0), f(1), f(2), f(3)}, "", "", [3]string{}},
		{"nullable columns omitted", testTable, []arrow.Field{f(0)}, "", "", [3]string{}},
		{"extra field", testTable, []arrow.Field{f(0), f(1), {Name: "bogus", Type: arrow.PrimitiveTypes.Int32, Nullable: true}}, CauseFieldNotInTable, "bogus", [3]string{}},
		{"required column missing", testTable, []arrow.Field{f(1), f(2)}, CauseMissingRequiredColumn, "id", [3]string{}},
		{"out of order", testTable, []arrow.Field{f(0), f(2), f(1)}, CauseFieldOutOfOrder, "name", [3]string{}},
		{"utf8 instead of large_utf8", testTable, []arrow.Field{f(0), {Name: "name", Type: arrow.BinaryTypes.String, Nullable: true}}, CauseTypeIncompatible, "name", [3]string{}},
		{"timestamp without zone", testTable, []arrow.Field{f(0), {Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond}, Nullable: true}}, CauseTypeIncompatible, "ts", [3]string{}},
		{"NOT NULL column sent nullable", testTable, []arrow.Field{withNull(f(0), true)}, CauseTypeIncompatible, "id", [3]string{}},
		{"nullable column sent non-null", testTable, []arrow.Field{f(0), withNull(f(1), false)}, CauseTypeIncompatible, "name", [3]string{}},
		{"too many fields", testTable, []arrow.Field{f(0), f(1), f(2), f(3), {Name: "x", Type: arrow.PrimitiveTypes.Int8, Nullable: true}}, CauseFieldCountMismatch + "," + CauseFieldNotInTable, "x", [3]string{}},
		{"two causes", testTable, []arrow.Field{f(1), {Name: "zzz", Type: arrow.PrimitiveTypes.Int8, Nullable: true}}, CauseFieldNotInTable + "," + CauseMissingRequiredColumn, "zzz", [3]string{}},
		{"map with service entry names", mapTable, []arrow.Field{
			{Name: "id", Type: arrow.PrimitiveTypes.Int64},
			{Name: "attrs", Type: arrow.MapOf(arrow.BinaryTypes.LargeString, arrow.PrimitiveTypes.Int64), Nullable: true},
			{Name: "tags", Type: arrow.ListOfField(arrow.Field{Name: "item", Type: arrow.BinaryTypes.LargeString, Nullable: true}), Nullable: true},
		}, "", "", [3]string{"entries", "keys", "values"}},
		// The list item must be "item" (see listItemName).
		{"list item named element", mapTable, []arrow.Field{
			{Name: "id", Type: arrow.PrimitiveTypes.Int64},
			{Name: "tags", Type: arrow.ListOfField(arrow.Field{Name: "element", Type: arrow.BinaryTypes.LargeString, Nullable: true}), Nullable: true},
		}, CauseTypeIncompatible, "tags", [3]string{}},
		{"map with Arrow/Parquet default names", mapTable, []arrow.Field{
			{Name: "id", Type: arrow.PrimitiveTypes.Int64},
			{Name: "attrs", Type: arrow.MapOf(arrow.BinaryTypes.LargeString, arrow.PrimitiveTypes.Int64), Nullable: true},
		}, "", "", [3]string{"key_value", "key", "value"}},
		// arrow-go writes entries{key, value}, a form the service does not
		// document (see acceptedMapNames).
		{"map with arrow-go entry names", mapTable, []arrow.Field{
			{Name: "id", Type: arrow.PrimitiveTypes.Int64},
			{Name: "attrs", Type: arrow.MapOf(arrow.BinaryTypes.LargeString, arrow.PrimitiveTypes.Int64), Nullable: true},
		}, CauseTypeIncompatible, "attrs", [3]string{}},
		{"map with wrong value type", mapTable, []arrow.Field{
			{Name: "id", Type: arrow.PrimitiveTypes.Int64},
			{Name: "attrs", Type: arrow.MapOf(arrow.BinaryTypes.LargeString, arrow.PrimitiveTypes.Int32), Nullable: true},
		}, CauseTypeIncompatible, "attrs", [3]string{}},
		{"list with non-null elements", mapTable, []arrow.Field{
			{Name: "id", Type: arrow.PrimitiveTypes.Int64},
			{Name: "tags", Type: arrow.ListOfNonNullable(arrow.BinaryTypes.LargeString), Nullable: true},
		}, CauseTypeIncompatible, "tags", [3]string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok := zerobusToken(t, srv, tc.table)
			meta := schemaMeta(arrow.NewSchema(tc.fields, nil))
			if tc.mapNames != ([3]string{}) {
				meta = renameMapChildren(t, meta, tc.mapNames)
			}
			p, ready, err := openPutMeta(t, conn, tok, tc.table, meta)
			if tc.wantCauses == "" {
				require.NoError(t, err)
				assert.Equal(t, int64(-1), ready.Offset)
				require.NoError(t, p.finish())
				return
			}
			require.Error(t, err)
			st := status.Convert(err)
			assert.Equal(t, codes.InvalidArgument, st.Code())
			assert.Contains(t, st.Message(), tc.wantField)
			assert.Contains(t, st.Message(), "Error Code: 8001")
			var info *errdetails.ErrorInfo
			for _, d := range st.Details() {
				if ei, ok := d.(*errdetails.ErrorInfo); ok {
					info = ei
				}
			}
			require.NotNil(t, info, "ErrorInfo detail")
			assert.Equal(t, SchemaValidationReason, info.Reason)
			assert.Equal(t, ErrorDomain, info.Domain)
			assert.Equal(t, tc.wantCauses, info.Metadata["causes"])
			assert.Equal(t, "8001", info.Metadata["error_code"])
		})
	}
}

func TestStreamSetupErrors(t *testing.T) {
	srv := startEmu(t, func(c *Config) {
		c.Tables = append(c.Tables, "main.default.other:id BIGINT")
	})
	conn := dial(t, srv)
	good := zerobusToken(t, srv, testTable)
	tests := []struct {
		name  string
		token string
		table string
		want  codes.Code
	}{
		{"no token", "", testTable, codes.Unauthenticated},
		{"unknown token", "forged", testTable, codes.Unauthenticated},
		{"token for another table", zerobusToken(t, srv, "main.default.other"), testTable, codes.PermissionDenied},
		{"workspace token", workspaceToken(t, srv), testTable, codes.PermissionDenied},
		{"two-part name", good, "default.events", codes.InvalidArgument},
		{"missing table", zerobusToken(t, srv, "main.default.nope"), "main.default.nope", codes.NotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := openPut(t, conn, tc.token, tc.table, testSchema)
			require.Error(t, err)
			assert.Equal(t, tc.want, status.Code(err), err.Error())
		})
	}
	assert.EqualValues(t, 0, srv.Stats().Tables[testTable].StreamsOpened)
}

func TestTokenExpiry(t *testing.T) {
	// The TTL leaves the first open, on a loaded machine, time to happen
	// before the token expires; the wait is measured from the minting,
	// not from the open.
	const ttl = 2 * time.Second
	srv := startEmu(t, func(c *Config) { c.TokenTTL = ttl })
	conn := dial(t, srv)
	minted := time.Now()
	tok := zerobusToken(t, srv, testTable)
	p, _, err := openPut(t, conn, tok, testTable, testSchema)
	require.NoError(t, err, "opened %s after the token was minted", time.Since(minted))
	require.NoError(t, p.finish())
	time.Sleep(time.Until(minted.Add(ttl + 100*time.Millisecond)))
	_, _, err = openPut(t, conn, tok, testTable, testSchema)
	require.Error(t, err)
	assert.Equal(t, codes.Unauthenticated, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "expired")
}

func TestNonIncrementalOffset(t *testing.T) {
	srv := startEmu(t, nil)
	conn := dial(t, srv)
	p, _, err := openPut(t, conn, zerobusToken(t, srv, testTable), testTable, testSchema)
	require.NoError(t, err)
	rec := makeBatch(0, 3)
	defer rec.Release()
	require.NoError(t, p.send(rec, 0))
	p.waitRecords(3)
	require.NoError(t, p.send(rec, 2))
	_, err = p.recv()
	require.Error(t, err)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Equal(t, "Non-incremental offset: expected 1, actual 2", status.Convert(err).Message())

	p2, _, err := openPut(t, conn, zerobusToken(t, srv, testTable), testTable, testSchema)
	require.NoError(t, err)
	require.NoError(t, p2.send(rec, 1), "offsets restart at 0 on every connection")
	_, err = p2.recv()
	assert.Equal(t, "Non-incremental offset: expected 0, actual 1", status.Convert(err).Message())
}

func TestRequestCap(t *testing.T) {
	srv := startEmu(t, nil)
	conn := dial(t, srv)
	p, _, err := openPut(t, conn, zerobusToken(t, srv, testTable), testTable, testSchema)
	require.NoError(t, err)
	b := array.NewRecordBuilder(memory.DefaultAllocator, testSchema)
	big := strings.Repeat("x", 1<<20)
	for i := 0; i < 11; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.LargeStringBuilder).Append(big)
		b.Field(2).AppendNull()
		b.Field(3).AppendNull()
	}
	rec := b.NewRecordBatch()
	b.Release()
	defer rec.Release()
	_ = p.send(rec, 0)
	_, err = p.recv()
	require.Error(t, err)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.EqualValues(t, 0, rowCount(t, srv, testTable))
}

func TestRotation(t *testing.T) {
	srv := startEmu(t, func(c *Config) {
		c.Faults = Faults{StreamLifetime: 300 * time.Millisecond, RotationGrace: 1500 * time.Millisecond}
	})
	conn := dial(t, srv)
	tok := zerobusToken(t, srv, testTable)

	t.Run("ends UNAVAILABLE 6002 after the grace period", func(t *testing.T) {
		p, _, err := openPut(t, conn, tok, testTable, testSchema)
		require.NoError(t, err)
		rec := makeBatch(0, 5)
		defer rec.Release()
		start := time.Now()
		require.NoError(t, p.send(rec, 0))
		// The ack and the close signal may come in either order on a slow
		// machine; both must come.
		var closeSig *ack
		var acked uint64
		for closeSig == nil || acked < 5 {
			a, err := p.recv()
			require.NoError(t, err)
			if a.CloseMS != nil {
				closeSig = &a
				continue
			}
			acked = a.Records
		}
		assert.EqualValues(t, 1500, *closeSig.CloseMS)
		assert.Contains(t, []uint64{0, 5}, closeSig.Records, "close signal carries the current watermark")
		require.NoError(t, p.send(rec, 1), "batches sent during the grace period are still taken")
		acks := p.waitRecords(10)
		assert.EqualValues(t, 1, acks[len(acks)-1].Offset)
		_, err = p.recv()
		require.Error(t, err)
		assert.Equal(t, codes.Unavailable, status.Code(err))
		assert.Contains(t, status.Convert(err).Message(), "Error Code: 6002")
		assert.GreaterOrEqual(t, time.Since(start), 1500*time.Millisecond, "the call ends when the grace period is over")
	})
	t.Run("half-close after the signal ends OK", func(t *testing.T) {
		p, _, err := openPut(t, conn, tok, testTable, testSchema)
		require.NoError(t, err)
		a, err := p.recv()
		require.NoError(t, err)
		require.NotNil(t, a.CloseMS)
		require.NoError(t, p.finish())
	})
	assert.EqualValues(t, 10, rowCount(t, srv, testTable))
}

// TestRotationDeadlineLeavesStoredBatchesUnacked pins what the emulator
// claims when a rotation's close period runs out before a batch is acked:
// the batch stays stored, the call ends UNAVAILABLE 6002 without its ack,
// and the client resends it on its next stream, a duplicate that
// at-least-once delivery allows. The official SDK waits for in-flight acks
// only up to the close duration the server announced, then recovers and
// resends what is unacked (stream_paused_max_wait_time_ms in
// rust/sdk/src/stream_configuration.rs; the CloseStreamSignal branch in
// rust/sdk/src/lib.rs); that the service keeps such a batch is an
// assumption consistent with its at-least-once guarantee. The ack latency
// stands in for a durability slower than the grace (a loaded machine).
func TestRotationDeadlineLeavesStoredBatchesUnacked(t *testing.T) {
	srv := startEmu(t, func(c *Config) {
		c.Faults = Faults{StreamLifetime: 100 * time.Millisecond, RotationGrace: 200 * time.Millisecond, AckLatency: 5 * time.Second}
	})
	conn := dial(t, srv)
	p, _, err := openPut(t, conn, zerobusToken(t, srv, testTable), testTable, testSchema)
	require.NoError(t, err)
	rec := makeBatch(0, 5)
	defer rec.Release()
	require.NoError(t, p.send(rec, 0))
	a, err := p.recv()
	require.NoError(t, err)
	require.NotNil(t, a.CloseMS, "the close signal comes first: nothing is acked before the ack latency")
	assert.Zero(t, a.Records)
	_, err = p.recv()
	require.Error(t, err, "the call ends at the deadline with the batch unacked")
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "Error Code: 6002")
	require.Eventually(t, func() bool { return rowCount(t, srv, testTable) == 5 }, 10*time.Second, 20*time.Millisecond,
		"the batch is stored all the same")
	st := srv.Stats().Tables[testTable]
	assert.EqualValues(t, 5, st.RowsReceived)
	assert.Zero(t, st.RowsAcked, "and never acked: a client must resend it")
	assert.EqualValues(t, 5, st.RowsLeftUnacked, "counted as left unacked by a stream the server ended")
}

func TestConcurrencyCap(t *testing.T) {
	srv := startEmu(t, func(c *Config) { c.Faults.MaxStreamsPerTable = 2 })
	conn := dial(t, srv)
	tok := zerobusToken(t, srv, testTable)
	p1, _, err := openPut(t, conn, tok, testTable, testSchema)
	require.NoError(t, err)
	_, _, err = openPut(t, conn, tok, testTable, testSchema)
	require.NoError(t, err)
	_, _, err = openPut(t, conn, tok, testTable, testSchema)
	require.Error(t, err)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))

	require.NoError(t, p1.finish())
	require.Eventually(t, func() bool { return srv.Stats().Tables[testTable].StreamsActive == 1 }, 10*time.Second, 10*time.Millisecond)
	_, _, err = openPut(t, conn, tok, testTable, testSchema)
	require.NoError(t, err, "a slot frees when a stream ends")

	st := srv.Stats().Tables[testTable]
	assert.EqualValues(t, 3, st.StreamsOpened)
	assert.EqualValues(t, 1, st.StreamsRejected)
	assert.EqualValues(t, 2, st.MaxConcurrentStreams)
}

func TestFaults(t *testing.T) {
	srv := startEmu(t, nil)
	conn := dial(t, srv)
	tok := zerobusToken(t, srv, testTable)
	rec := makeBatch(0, 4)
	defer rec.Release()

	t.Run("error rate", func(t *testing.T) {
		require.NoError(t, srv.SetFaults(Faults{ErrorRate: map[string]float64{"UNAVAILABLE": 1}}))
		defer srv.SetFaults(Faults{})
		p, _, err := openPut(t, conn, tok, testTable, testSchema)
		require.NoError(t, err)
		require.NoError(t, p.send(rec, 0))
		_, err = p.recv()
		assert.Equal(t, codes.Unavailable, status.Code(err))
	})
	t.Run("ack latency", func(t *testing.T) {
		require.NoError(t, srv.SetFaults(Faults{AckLatency: 250 * time.Millisecond}))
		defer srv.SetFaults(Faults{})
		p, _, err := openPut(t, conn, tok, testTable, testSchema)
		require.NoError(t, err)
		start := time.Now()
		require.NoError(t, p.send(rec, 0))
		p.waitRecords(4)
		assert.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond)
		require.NoError(t, p.finish())
	})
	t.Run("ack stall then resume", func(t *testing.T) {
		require.NoError(t, srv.SetFaults(Faults{AckStall: true}))
		p, _, err := openPut(t, conn, tok, testTable, testSchema)
		require.NoError(t, err)
		require.NoError(t, p.send(rec, 0))
		assertStalledThenAcked(t, srv, p, 4, "the stall")
		require.NoError(t, p.finish())
	})
	t.Run("per-table ack stall stalls that table alone", func(t *testing.T) {
		// A stall on another table and a global stall overridden for this
		// one: this table is acked.
		require.NoError(t, srv.SetFaults(Faults{AckStall: true, Tables: map[string]TableFaults{
			"main.other.t": {AckStall: true}, strings.ToUpper(testTable): {}}}))
		p, _, err := openPut(t, conn, tok, testTable, testSchema)
		require.NoError(t, err)
		require.NoError(t, p.send(rec, 0))
		p.waitRecords(4)
		require.NoError(t, p.finish())

		require.NoError(t, srv.SetFaults(Faults{Tables: map[string]TableFaults{testTable: {AckStall: true}}}))
		p, _, err = openPut(t, conn, tok, testTable, testSchema)
		require.NoError(t, err)
		require.NoError(t, p.send(rec, 0))
		assertStalledThenAcked(t, srv, p, 4, "the table's stall")
		require.NoError(t, p.finish())
	})
	t.Run("ack only skips storage", func(t *testing.T) {
		before := rowCount(t, srv, testTable)
		require.NoError(t, srv.SetFaults(Faults{AckOnly: true}))
		defer srv.SetFaults(Faults{})
		p, _, err := openPut(t, conn, tok, testTable, testSchema)
		require.NoError(t, err)
		require.NoError(t, p.send(rec, 0))
		p.waitRecords(4)
		require.NoError(t, p.finish())
		assert.Equal(t, before, rowCount(t, srv, testTable))
	})
	t.Run("admin endpoint", func(t *testing.T) {
		body := `{"ack_latency":"15ms","stream_lifetime":"1m","error_rate":{"internal":0.5},"max_streams_per_table":3,"ack_stall":false,"ack_only":true}`
		req, _ := http.NewRequest(http.MethodPut, srv.HTTPURL()+"/emulator/v1/faults", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		f := srv.Faults()
		assert.Equal(t, 15*time.Millisecond, f.AckLatency)
		assert.Equal(t, time.Minute, f.StreamLifetime)
		assert.Equal(t, 0.5, f.ErrorRate["internal"])
		assert.Equal(t, 3, f.MaxStreamsPerTable)
		assert.True(t, f.AckOnly)
		var got map[string]any
		require.Equal(t, http.StatusOK, getJSON(t, srv.HTTPURL()+"/emulator/v1/faults", &got))
		assert.Equal(t, "15ms", got["ack_latency"])

		req, _ = http.NewRequest(http.MethodPut, srv.HTTPURL()+"/emulator/v1/faults", strings.NewReader(`{"error_rate":{"NOT_A_CODE":1}}`))
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		assert.Equal(t, 3, srv.Faults().MaxStreamsPerTable, "a bad PUT changes nothing")
		require.NoError(t, srv.SetFaults(Faults{}))
	})
}

func TestConcurrentStreamsGroupCommit(t *testing.T) {
	srv := startEmu(t, nil)
	conn := dial(t, srv)
	tok := zerobusToken(t, srv, testTable)
	const streams, batches, rows = 8, 20, 50
	var wg sync.WaitGroup
	for s := 0; s < streams; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			p, _, err := openPut(t, conn, tok, testTable, testSchema)
			if !assert.NoError(t, err) {
				return
			}
			for b := 0; b < batches; b++ {
				rec := makeBatch((s*batches+b)*rows, rows)
				assert.NoError(t, p.send(rec, int64(b)))
				rec.Release()
			}
			// Not waitRecords: its require would FailNow off the test goroutine.
			if _, err := p.awaitRecords(batches * rows); !assert.NoError(t, err, "stream %d", s) {
				return
			}
			assert.NoError(t, p.finish())
		}(s)
	}
	wg.Wait()
	st := srv.Stats().Tables[testTable]
	assert.EqualValues(t, streams*batches*rows, st.RowCount)
	assert.EqualValues(t, streams, st.StreamsOpened)
	assert.Less(t, st.Commits, int64(streams*batches), "batches of concurrent streams share commits")
	ids := map[float64]bool{}
	for _, r := range readRows(t, srv, testTable, 0) {
		ids[r["id"].(float64)] = true
	}
	assert.Len(t, ids, streams*batches*rows)
}

func TestDurableAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := func(c *Config) { c.DataDir = dir }
	srv := startEmu(t, cfg)
	conn := dial(t, srv)
	p, _, err := openPut(t, conn, zerobusToken(t, srv, testTable), testTable, testSchema)
	require.NoError(t, err)
	rec := makeBatch(0, 100)
	require.NoError(t, p.send(rec, 0))
	rec.Release()
	p.waitRecords(100)
	require.NoError(t, p.finish())
	require.NoError(t, srv.Close())

	tableDir := filepath.Join(dir, "main", "default", "events")
	kindsOf := func(version int) ([]string, string) {
		b, err := os.ReadFile(filepath.Join(tableDir, "_delta_log", fmt.Sprintf("%020d.json", version)))
		require.NoError(t, err)
		var kinds []string
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var a map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(line), &a))
			for k := range a {
				kinds = append(kinds, k)
			}
		}
		return kinds, string(b)
	}
	kinds, commit0 := kindsOf(0)
	assert.Equal(t, []string{"commitInfo", "protocol", "metaData"}, kinds, "version 0 is CREATE TABLE")
	assert.Contains(t, commit0, `"partitionColumns":[]`)
	assert.Contains(t, commit0, `"operation":"CREATE TABLE"`)
	kinds, commit1 := kindsOf(1)
	assert.Equal(t, []string{"commitInfo", "add"}, kinds, "unchanged schema: no new metaData")
	assert.Contains(t, commit1, `\"numRecords\":100`)
	// A data file no commit references (a crash between Parquet and log).
	orphan := filepath.Join(tableDir, "part-99999-orphan.parquet")
	require.NoError(t, os.WriteFile(orphan, []byte("junk"), 0o644))

	srv2 := startEmu(t, cfg)
	assert.EqualValues(t, 100, rowCount(t, srv2, testTable))
	assert.NoFileExists(t, orphan)
	rows := readRows(t, srv2, testTable, 0)
	require.Len(t, rows, 100)
	assert.Equal(t, "42.42", rows[42]["amount"])

	conn2 := dial(t, srv2)
	p2, _, err := openPut(t, conn2, zerobusToken(t, srv2, testTable), testTable, testSchema)
	require.NoError(t, err)
	rec = makeBatch(100, 10)
	require.NoError(t, p2.send(rec, 0))
	rec.Release()
	p2.waitRecords(10)
	require.NoError(t, p2.finish())
	assert.EqualValues(t, 110, rowCount(t, srv2, testTable))
	assert.FileExists(t, filepath.Join(tableDir, "_delta_log", "00000000000000000002.json"))
	assert.EqualValues(t, 2, srv2.Stats().Tables[testTable].DeltaVersion)
}

func TestSchemaChangeWritesMetaDataAndKeepsOldStreams(t *testing.T) {
	srv := startEmu(t, nil)
	conn := dial(t, srv)
	tok := zerobusToken(t, srv, testTable)
	old, _, err := openPut(t, conn, tok, testTable, testSchema)
	require.NoError(t, err)

	_, err = srv.Registry().Update(testTable, func(tb *workspaceTable) error {
		c, err := parseOneColumn("extra INT")
		if err != nil {
			return err
		}
		tb.Columns = append(tb.Columns, c)
		return nil
	})
	require.NoError(t, err)

	rec := makeBatch(0, 3)
	defer rec.Release()
	require.NoError(t, old.send(rec, 0), "a stream opened before the change keeps its schema")
	old.waitRecords(3)
	require.NoError(t, old.finish())

	rows := readRows(t, srv, testTable, 0)
	require.Len(t, rows, 3)
	assert.Contains(t, rows[0], "extra")
	assert.Nil(t, rows[0]["extra"])

	dir := filepath.Join(srv.DataDir(), "main", "default", "events", "_delta_log")
	b, err := os.ReadFile(filepath.Join(dir, "00000000000000000000.json"))
	require.NoError(t, err)
	assert.NotContains(t, string(b), `\"name\":\"extra\"`)
	b, err = os.ReadFile(filepath.Join(dir, "00000000000000000001.json"))
	require.NoError(t, err)
	assert.Contains(t, string(b), `"metaData"`, "a schema change writes a new metaData")
	assert.Contains(t, string(b), `\"name\":\"extra\"`, "metaData carries the table's current schema")
}

func TestNullInNotNullColumn(t *testing.T) {
	srv := startEmu(t, nil)
	conn := dial(t, srv)
	p, _, err := openPut(t, conn, zerobusToken(t, srv, testTable), testTable, testSchema)
	require.NoError(t, err)
	b := array.NewRecordBuilder(memory.DefaultAllocator, testSchema)
	b.Field(0).AppendNull()
	for i := 1; i < 4; i++ {
		b.Field(i).AppendNull()
	}
	rec := b.NewRecordBatch()
	b.Release()
	defer rec.Release()
	require.NoError(t, p.send(rec, 0))
	_, err = p.recv()
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), `"id"`)
}

func TestTokensSurviveRestartAndResistTampering(t *testing.T) {
	dir := t.TempDir()
	srv := startEmu(t, func(c *Config) { c.DataDir = dir })
	tok := zerobusToken(t, srv, testTable)
	require.NoError(t, srv.Close())

	srv2 := startEmu(t, func(c *Config) { c.DataDir = dir })
	conn := dial(t, srv2)
	p, _, err := openPut(t, conn, tok, testTable, testSchema)
	require.NoError(t, err, "a token issued before a restart is still valid")
	require.NoError(t, p.finish())

	// Re-scope the token to another table by editing its payload.
	payload, sig, _ := strings.Cut(tok, ".")
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(payload, "emu-zb-"))
	require.NoError(t, err)
	forged := "emu-zb-" + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(raw), "events", "other", 1))) + "." + sig
	_, _, err = openPut(t, conn, forged, "main.default.other", testSchema)
	assert.Equal(t, codes.Unauthenticated, status.Code(err))

	other := startEmu(t, nil) // another data dir: another signing key
	_, _, err = openPut(t, dial(t, other), tok, testTable, testSchema)
	assert.Equal(t, codes.Unauthenticated, status.Code(err))
}

// assertStalledThenAcked asserts that no ack arrives on p for 200ms while
// stall is in force, then clears the faults and asserts that an ack for
// records rows arrives within 10s.
func assertStalledThenAcked(t *testing.T, srv *Server, p *putStream, records uint64, stall string) {
	t.Helper()
	type result struct {
		a   ack
		err error
	}
	got := make(chan result, 1)
	go func() {
		a, err := p.recv()
		got <- result{a, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("ack %v (error %v) arrived during %s", r.a, r.err, stall)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, srv.SetFaults(Faults{}))
	select {
	case r := <-got:
		require.NoError(t, r.err, "the ack after %s was cleared", stall)
		assert.EqualValues(t, records, r.a.Records)
	case <-time.After(10 * time.Second):
		t.Fatalf("no ack within 10s after %s was cleared", stall)
	}
}
