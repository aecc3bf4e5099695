package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

const testTable = "main.default.events"

// testTableSpec is the table most tests write to.
var testTableSpec = testTable + ":id BIGINT NOT NULL, name STRING, amount DECIMAL(10,2), ts TIMESTAMP"

// testSchema is the Arrow schema Zerobus expects for testTableSpec.
var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "amount", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
}, nil)

func startEmu(t testing.TB, mutate func(*Config)) *Server {
	t.Helper()
	cfg := Config{
		HTTPAddr: "127.0.0.1:0",
		GRPCAddr: "127.0.0.1:0",
		DataDir:  t.TempDir(),
		Tables:   []string{testTableSpec},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

func authDetails(table string) string {
	parts := strings.Split(table, ".")
	d := []map[string]any{
		{"type": "unity_catalog_privileges", "object_type": "CATALOG", "object_full_path": parts[0], "privileges": []string{"USE CATALOG"}},
		{"type": "unity_catalog_privileges", "object_type": "SCHEMA", "object_full_path": parts[0] + "." + parts[1], "privileges": []string{"USE SCHEMA"}},
		{"type": "unity_catalog_privileges", "object_type": "TABLE", "object_full_path": table, "privileges": []string{"SELECT", "MODIFY"}, "operations": []string{"zerobuswrite"}},
	}
	b, _ := json.Marshal(d)
	return string(b)
}

// postToken calls the token endpoint and returns the status and decoded body.
func postToken(t testing.TB, srv endpoints, id, secret string, form url.Values) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.HTTPURL()+"/oidc/v1/token", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(id, secret)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp.StatusCode, body
}

func zerobusForm(srv endpoints, table string) url.Values {
	return url.Values{
		"grant_type":            {"client_credentials"},
		"scope":                 {"all-apis"},
		"resource":              {"api://databricks/workspaces/" + srv.WorkspaceID() + "/zerobusDirectWriteApi"},
		"authorization_details": {authDetails(table)},
	}
}

// zerobusToken returns a token scoped to table.
func zerobusToken(t testing.TB, srv endpoints, table string) string {
	t.Helper()
	code, body := postToken(t, srv, DefaultClientID, DefaultClientSecret, zerobusForm(srv, table))
	require.Equal(t, http.StatusOK, code, body)
	return body["access_token"].(string)
}

func workspaceToken(t testing.TB, srv endpoints) string {
	t.Helper()
	code, body := postToken(t, srv, DefaultClientID, DefaultClientSecret, url.Values{"grant_type": {"client_credentials"}, "scope": {"all-apis"}})
	require.Equal(t, http.StatusOK, code, body)
	return body["access_token"].(string)
}

func dial(t testing.TB, srv endpoints) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(srv.GRPCURL(), "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func streamCtx(parent context.Context, token, table string) context.Context {
	md := metadata.Pairs("x-databricks-zerobus-table-name", table, "user-agent", "emulator-test/1")
	if token != "" {
		md.Append("authorization", "Bearer "+token)
	}
	return metadata.NewOutgoingContext(parent, md)
}

// ack is a decoded PutResult app_metadata.
type ack struct {
	Offset  int64  `json:"ack_up_to_offset"`
	Records uint64 `json:"ack_up_to_records"`
	CloseMS *int64 `json:"close_stream_duration_ms"`
}

// putStream is a hand-rolled Zerobus Flight client: raw FlightData frames.
type putStream struct {
	t      testing.TB
	stream flight.FlightService_DoPutClient
	cancel context.CancelFunc
}

// openPut opens DoPut, sends the schema frame and waits for the first
// PutResult (the ready signal), returning its decoded form or the error.
func openPut(t testing.TB, conn *grpc.ClientConn, token, table string, schema *arrow.Schema) (*putStream, ack, error) {
	t.Helper()
	sp := ipc.GetSchemaPayload(schema, memory.DefaultAllocator)
	defer sp.Release()
	return openPutMeta(t, conn, token, table, sp.Meta().Bytes())
}

// openPutMeta opens a DoPut stream whose schema frame carries meta, an IPC
// schema message, and waits for the ready signal.
func openPutMeta(t testing.TB, conn *grpc.ClientConn, token, table string, meta []byte) (*putStream, ack, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	stream, err := flight.NewFlightServiceClient(conn).DoPut(streamCtx(ctx, token, table))
	require.NoError(t, err)
	p := &putStream{t: t, stream: stream, cancel: cancel}
	if err := stream.Send(&flight.FlightData{DataHeader: meta}); err != nil {
		_, rerr := stream.Recv()
		return p, ack{}, rerr
	}
	a, err := p.recv()
	return p, a, err
}

func (p *putStream) send(rec arrow.RecordBatch, offset int64, opts ...ipc.Option) error {
	pl, err := ipc.GetRecordBatchPayload(rec, opts...)
	require.NoError(p.t, err)
	defer pl.Release()
	var body bytes.Buffer
	require.NoError(p.t, pl.SerializeBody(&body))
	return p.stream.Send(&flight.FlightData{
		DataHeader:  pl.Meta().Bytes(),
		DataBody:    body.Bytes(),
		AppMetadata: fmt.Appendf(nil, `{"offset_id":%d}`, offset),
	})
}

func (p *putStream) recv() (ack, error) {
	res, err := p.stream.Recv()
	if err != nil {
		return ack{}, err
	}
	// Returned, not required: assertStalledThenAcked and awaitRecords
	// receive off the test goroutine.
	var a ack
	if err := json.Unmarshal(res.AppMetadata, &a); err != nil {
		return ack{}, fmt.Errorf("ack metadata %q: %w", res.AppMetadata, err)
	}
	return a, nil
}

// waitRecords reads acks until ack_up_to_records reaches n, failing the
// test if the stream ends first: call it on the test goroutine only.
func (p *putStream) waitRecords(n uint64) []ack {
	p.t.Helper()
	acks, err := p.awaitRecords(n)
	require.NoError(p.t, err)
	return acks
}

// awaitRecords reads acks until ack_up_to_records reaches n, or returns
// the error the stream ended with and the last ack seen. It never fails
// the test, so other goroutines can call it.
func (p *putStream) awaitRecords(n uint64) ([]ack, error) {
	var acks []ack
	for {
		a, err := p.recv()
		if err != nil {
			return acks, fmt.Errorf("waiting for %d records acked (acks so far %+v): %w", n, acks, err)
		}
		acks = append(acks, a)
		if a.Records >= n {
			return acks, nil
		}
	}
}

// finish half-closes and returns the status the call ends with (nil = OK).
func (p *putStream) finish() error {
	// Returned, not required: goroutines other than the test's call this.
	if err := p.stream.CloseSend(); err != nil {
		return err
	}
	for {
		if _, err := p.stream.Recv(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// makeBatch builds n rows of testSchema starting at id from.
func makeBatch(from, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, testSchema)
	defer b.Release()
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := from; i < from+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		if i%5 == 4 {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.LargeStringBuilder).Append(fmt.Sprintf("row-%d", i))
		}
		b.Field(2).(*array.LargeStringBuilder).Append(fmt.Sprintf("%d.%02d", i, i%100))
		b.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(base.Add(time.Duration(i) * time.Second).UnixMicro()))
	}
	return b.NewRecordBatch()
}

func getJSON(t testing.TB, u string, out any) int {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	if out != nil {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode
}

func readRows(t testing.TB, srv endpoints, table string, limit int) []map[string]any {
	t.Helper()
	var rows []map[string]any
	code := getJSON(t, fmt.Sprintf("%s/emulator/v1/tables/%s/rows?limit=%d", srv.HTTPURL(), table, limit), &rows)
	require.Equal(t, http.StatusOK, code)
	return rows
}

func rowCount(t testing.TB, srv endpoints, table string) int64 {
	t.Helper()
	var info tableInfo
	code := getJSON(t, srv.HTTPURL()+"/emulator/v1/tables/"+table, &info)
	require.Equal(t, http.StatusOK, code)
	return info.RowCount
}

type workspaceTable = workspace.Table

func parseOneColumn(def string) (typemap.Column, error) {
	cols, err := typemap.ParseColumns(def)
	if err != nil {
		return typemap.Column{}, err
	}
	return cols[0], nil
}

// endpoints is what the helpers need from an emulator, in-process or child.
type endpoints interface {
	HTTPURL() string
	GRPCURL() string
	WorkspaceID() string
}

// remoteEmu is an emulator running in another process.
type remoteEmu struct{ httpURL, grpcURL string }

func (r remoteEmu) HTTPURL() string     { return r.httpURL }
func (r remoteEmu) GRPCURL() string     { return r.grpcURL }
func (r remoteEmu) WorkspaceID() string { return DefaultWorkspaceID }

// configFromArgs is the Config the command builds from args (its flags).
func configFromArgs(args ...string) (Config, error) {
	var cfg Config
	app := App("test")
	app.Action = func(c *cli.Context) error {
		var err error
		cfg, err = configFromFlags(c)
		return err
	}
	err := app.Run(append([]string{"zerobus-emulator"}, args...))
	return cfg, err
}

// configArgsError is configFromArgs's error.
func configArgsError(args ...string) error {
	_, err := configFromArgs(args...)
	return err
}
