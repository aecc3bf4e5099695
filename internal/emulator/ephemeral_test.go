package emulator

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/benthos-zerobus/benthos-zerobus/internal/zbpb"
)

func openEphemeral(t *testing.T, srv endpoints, token, table string, rt zbpb.RecordType) (zbpb.Zerobus_EphemeralStreamClient, *zbpb.EphemeralStreamResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	st, err := zbpb.NewZerobusClient(dial(t, srv)).EphemeralStream(streamCtx(ctx, token, table))
	require.NoError(t, err)
	_, err = st.Header() // the official SDK waits for headers first
	require.NoError(t, err)
	// A Send error means the server already ended the call: Recv has the status.
	_ = st.Send(&zbpb.EphemeralStreamRequest{Payload: &zbpb.EphemeralStreamRequest_CreateStream{
		CreateStream: &zbpb.CreateIngestStreamRequest{TableName: proto.String(table), RecordType: rt.Enum()}}})
	resp, err := st.Recv()
	return st, resp, err
}

func jsonBatch(off int64, recs ...string) *zbpb.EphemeralStreamRequest {
	return &zbpb.EphemeralStreamRequest{Payload: &zbpb.EphemeralStreamRequest_IngestRecordBatch{
		IngestRecordBatch: &zbpb.IngestRecordBatchRequest{OffsetId: proto.Int64(off),
			Batch: &zbpb.IngestRecordBatchRequest_JsonBatch{JsonBatch: &zbpb.JsonRecordBatch{Records: recs}}}}}
}

func jsonRecord(off int64, rec string) *zbpb.EphemeralStreamRequest {
	return &zbpb.EphemeralStreamRequest{Payload: &zbpb.EphemeralStreamRequest_IngestRecord{
		IngestRecord: &zbpb.IngestRecordRequest{OffsetId: proto.Int64(off),
			Record: &zbpb.IngestRecordRequest_JsonRecord{JsonRecord: rec}}}}
}

func TestEphemeralStreamJSON(t *testing.T) {
	const table = "main.default.json_t"
	srv := startEmu(t, func(c *Config) {
		c.Tables = []string{table + ":id BIGINT NOT NULL, price DECIMAL(8,3), at TIMESTAMP, day DATE, tags ARRAY<STRING>, attrs MAP<STRING,INT>, pt STRUCT<x: DOUBLE, y: DOUBLE>, raw BINARY, prices ARRAY<DECIMAL(6,2)>, dm MAP<STRING, DECIMAL(5,1)>, ds STRUCT<d: DECIMAL(4,2), n: STRING>"}
	})
	tok := zerobusToken(t, srv, table)
	st, resp, err := openEphemeral(t, srv, tok, table, zbpb.RecordType_JSON)
	require.NoError(t, err)
	require.NotEmpty(t, resp.GetCreateStreamResponse().GetStreamId())

	require.NoError(t, st.Send(jsonRecord(0, `{"id":1,"price":"12.5","at":"2026-03-04T05:06:07.123456Z","day":"2026-03-04","tags":["a","b"],"attrs":{"k":7},"pt":{"x":1.5,"y":-2},"raw":"aGk=","prices":["1.5",null,"-2"],"dm":{"a":"3.5"},"ds":{"d":"0.25","n":"q"}}`)))
	var recs []string
	for i := 2; i <= 1001; i++ {
		recs = append(recs, fmt.Sprintf(`{"id":%d,"price":%d.125,"at":%d}`, i, i, int64(i)*1_000_000))
	}
	require.NoError(t, st.Send(jsonBatch(1, recs...)))
	var last int64 = -1
	for last < 1 {
		r, err := st.Recv()
		require.NoError(t, err)
		off := r.GetIngestRecordResponse().GetDurabilityAckUpToOffset()
		assert.GreaterOrEqual(t, off, last, "acks are cumulative")
		last = off
	}
	require.NoError(t, st.CloseSend())
	_, err = st.Recv()
	require.ErrorIs(t, err, io.EOF, "the call ends OK")

	assert.EqualValues(t, 1001, rowCount(t, srv, table))
	row := readRows(t, srv, table, 1)[0]
	assert.EqualValues(t, 1, row["id"])
	assert.Equal(t, "12.500", row["price"])
	assert.Equal(t, "2026-03-04T05:06:07.123456Z", row["at"])
	assert.Equal(t, "2026-03-04", row["day"])
	assert.Equal(t, []any{"a", "b"}, row["tags"])
	assert.Equal(t, map[string]any{"k": float64(7)}, row["attrs"])
	assert.Equal(t, map[string]any{"x": 1.5, "y": float64(-2)}, row["pt"])
	assert.Equal(t, "aGk=", row["raw"])
	assert.Equal(t, []any{"1.50", nil, "-2.00"}, row["prices"], "nested decimals are stored as decimals")
	assert.Equal(t, map[string]any{"a": "3.5"}, row["dm"])
	assert.Equal(t, map[string]any{"d": "0.25", "n": "q"}, row["ds"])
	assert.EqualValues(t, 1, srv.Stats().Tables[table].StreamsOpened)
}

func TestEphemeralStreamErrors(t *testing.T) {
	srv := startEmu(t, nil)
	tok := zerobusToken(t, srv, testTable)

	t.Run("proto record type", func(t *testing.T) {
		_, _, err := openEphemeral(t, srv, tok, testTable, zbpb.RecordType_PROTO)
		assert.Equal(t, codes.InvalidArgument, status.Code(err))
	})
	t.Run("wrong table scope", func(t *testing.T) {
		_, _, err := openEphemeral(t, srv, zerobusToken(t, srv, "main.default.x"), testTable, zbpb.RecordType_JSON)
		assert.Equal(t, codes.PermissionDenied, status.Code(err))
	})
	tests := []struct {
		name string
		req  *zbpb.EphemeralStreamRequest
		want string
	}{
		{"bad offset", jsonRecord(1, `{"id":1}`), "Non-incremental offset: expected 0, actual 1"},
		{"unknown field", jsonRecord(0, `{"id":1,"nope":2}`), `"nope"`},
		{"missing NOT NULL", jsonRecord(0, `{"name":"x"}`), `"id"`},
		{"decimal too precise", jsonRecord(0, `{"id":1,"amount":"1.234"}`), "amount"},
		{"not an object", jsonRecord(0, `[1]`), "not a JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, _, err := openEphemeral(t, srv, tok, testTable, zbpb.RecordType_JSON)
			require.NoError(t, err)
			require.NoError(t, st.Send(tc.req))
			_, err = st.Recv()
			require.Error(t, err)
			assert.Equal(t, codes.InvalidArgument, status.Code(err))
			assert.Contains(t, status.Convert(err).Message(), tc.want)
		})
	}
	assert.EqualValues(t, 0, rowCount(t, srv, testTable))
}

func TestEphemeralStreamRotation(t *testing.T) {
	srv := startEmu(t, func(c *Config) {
		c.Faults = Faults{StreamLifetime: 200 * time.Millisecond, RotationGrace: time.Second}
	})
	st, _, err := openEphemeral(t, srv, zerobusToken(t, srv, testTable), testTable, zbpb.RecordType_JSON)
	require.NoError(t, err)
	require.NoError(t, st.Send(jsonRecord(0, `{"id":1}`)))
	// The ack and the close signal may arrive in either order.
	var sawAck, sawClose bool
	for !sawAck || !sawClose {
		r, err := st.Recv()
		require.NoError(t, err)
		if cs := r.GetCloseStreamSignal(); cs != nil {
			sawClose = true
			assert.Equal(t, time.Second, cs.GetDuration().AsDuration())
			continue
		}
		assert.EqualValues(t, 0, r.GetIngestRecordResponse().GetDurabilityAckUpToOffset())
		sawAck = true
	}
	_, err = st.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "Error Code: 6002")
	assert.EqualValues(t, 1, rowCount(t, srv, testTable))
}
