package emulator

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

func TestParseDecimal(t *testing.T) {
	tests := []struct {
		in        string
		p, s      int32
		want      string
		wantError bool
	}{
		{"12.34", 10, 2, "12.34", false},
		{"-0.5", 10, 2, "-0.50", false},
		{"7", 5, 0, "7", false},
		{"+3.10", 4, 2, "3.10", false},
		{"1.230", 5, 2, "1.23", false}, // trailing zeros are not precision
		{"1.234", 10, 2, "", true},     // would need rounding
		{"123456", 5, 0, "", true},     // too many integer digits
		{"1e3", 10, 2, "", true},
		{"", 10, 2, "", true},
		{".", 10, 2, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			n, err := parseDecimal(tc.in, tc.p, tc.s)
			if tc.wantError {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, n.ToString(tc.s))
		})
	}
}

func TestFaultsJSONAndCodes(t *testing.T) {
	f := Faults{AckLatency: 5 * time.Millisecond, ErrorRate: map[string]float64{"UNAVAILABLE": 0.25}, AckOnly: true}
	b, err := f.MarshalJSON()
	require.NoError(t, err)
	var back Faults
	require.NoError(t, back.UnmarshalJSON(b))
	assert.Equal(t, f, back)

	for name, want := range map[string]codes.Code{"UNAVAILABLE": codes.Unavailable, "resource_exhausted": codes.ResourceExhausted, "Internal": codes.Internal} {
		c, err := parseCode(name)
		require.NoError(t, err, name)
		assert.Equal(t, want, c)
	}
	_, err = parseCode("OK")
	assert.Error(t, err, "OK is not an error to inject")
	assert.Error(t, Faults{ErrorRate: map[string]float64{"UNAVAILABLE": 2}}.Validate())
	assert.Error(t, back.UnmarshalJSON([]byte(`{"unknown_knob":1}`)))

	f = Faults{Tables: map[string]TableFaults{"main.raw.t_zb_coverage": {AckLatency: time.Second, AckStall: true}}}
	b, err = f.MarshalJSON()
	require.NoError(t, err)
	assert.JSONEq(t, `{"ack_stall":false,"ack_only":false,"tables":{"main.raw.t_zb_coverage":{"ack_latency":"1s","ack_stall":true}}}`, string(b))
	require.NoError(t, back.UnmarshalJSON(b))
	assert.Equal(t, f, back)
	assert.Error(t, Faults{Tables: map[string]TableFaults{"no_dots": {AckStall: true}}}.Validate())
	assert.Error(t, Faults{Tables: map[string]TableFaults{"a.b.c": {AckLatency: -time.Second}}}.Validate())
}

func TestCommandFlags(t *testing.T) {
	got, err := configFromArgs("--http", "127.0.0.1:0", "--table", "a.b.c:id BIGINT NOT NULL, v STRING", "--table", "a.b.d:x STRING",
		"--ack-latency", "20ms", "--error-rate", "unavailable=0.1", "--max-streams-per-table", "4", "--ack-only", "--iceberg-lag", "-1s",
		"--stream-max-rows-per-sec", "15000", "--stream-max-mb-per-sec", "2.5", "--stream-quota-mode", "RESOURCE_EXHAUSTED")
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:0", got.HTTPAddr)
	assert.Equal(t, DefaultGRPCAddr, got.GRPCAddr)
	assert.Equal(t, DefaultDataDir(), got.DataDir)
	assert.Equal(t, []string{"a.b.c:id BIGINT NOT NULL, v STRING", "a.b.d:x STRING"}, got.Tables)
	assert.Equal(t, DefaultClientID, got.ClientID)
	assert.Equal(t, DefaultClientSecret, got.ClientSecret)
	assert.Equal(t, 20*time.Millisecond, got.Faults.AckLatency)
	assert.Equal(t, map[string]float64{"UNAVAILABLE": 0.1}, got.Faults.ErrorRate)
	assert.Equal(t, 4, got.Faults.MaxStreamsPerTable)
	assert.True(t, got.Faults.AckOnly)
	assert.EqualValues(t, 15000, got.Faults.StreamMaxRowsPerSec)
	assert.InDelta(t, 2.5, got.Faults.StreamMaxMBPerSec, 0)
	assert.Equal(t, QuotaReject, got.Faults.StreamQuotaMode)
	assert.Equal(t, -time.Second, got.IcebergLag)

	err = configArgsError("--error-rate", "BOGUS=1")
	assert.Error(t, err)
	assert.Error(t, configArgsError("--stream-quota-mode", "drop"))
	assert.Error(t, configArgsError("--stream-max-rows-per-sec", "-5"))
}

func TestStartRejectsBadTables(t *testing.T) {
	for _, spec := range []string{"no_colon", "a.b:id BIGINT", "a.b.c:id NOTATYPE", "a.b.c:m MAP<DOUBLE,INT>"} {
		_, err := Start(Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(), Tables: []string{spec}})
		assert.Error(t, err, spec)
	}
}

// benchSchema: 10 columns, about 200 bytes per row.
var benchSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "c1", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "c2", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "c3", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "c4", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "c5", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "c6", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "c7", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "c8", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	{Name: "c9", Type: arrow.BinaryTypes.LargeString, Nullable: true},
}, nil)

const benchTableSpec = "main.default.bench:id BIGINT NOT NULL, c1 STRING, c2 STRING, c3 STRING, c4 BIGINT, c5 DOUBLE, c6 INT, c7 BOOLEAN, c8 TIMESTAMP, c9 STRING"

func benchBatch(n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, benchSchema)
	defer b.Release()
	pad := strings.Repeat("z", 40)
	for i := 0; i < n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		for _, j := range []int{1, 2, 3, 9} {
			b.Field(j).(*array.LargeStringBuilder).Append(fmt.Sprintf("%s-%08d", pad, rand.IntN(1e8)))
		}
		b.Field(4).(*array.Int64Builder).Append(rand.Int64())
		b.Field(5).(*array.Float64Builder).Append(rand.Float64())
		b.Field(6).(*array.Int32Builder).Append(rand.Int32())
		b.Field(7).(*array.BooleanBuilder).Append(i%2 == 0)
		b.Field(8).(*array.TimestampBuilder).Append(arrow.Timestamp(time.Now().UnixMicro()))
	}
	return b.NewRecordBatch()
}

func benchmarkDoPut(b *testing.B, ackOnly bool) {
	srv := startEmu(b, func(c *Config) {
		c.Tables = []string{benchTableSpec}
		c.Faults.AckOnly = ackOnly
	})
	const table = "main.default.bench"
	p, _, err := openPut(b, dial(b, srv), zerobusToken(b, srv, table), table, benchSchema)
	require.NoError(b, err)
	const rows = 8192
	rec := benchBatch(rows)
	defer rec.Release()
	// Not waitRecords: its require would FailNow off the benchmark's
	// goroutine; the error is required once the sends are done.
	done := make(chan error, 1)
	go func() {
		_, err := p.awaitRecords(uint64(b.N) * rows)
		done <- err
	}()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		require.NoError(b, p.send(rec, int64(i)))
	}
	require.NoError(b, <-done)
	el := time.Since(start)
	b.ReportMetric(float64(b.N*rows)/el.Seconds(), "rows/s")
	b.ReportMetric(float64(b.N*rows*200)/el.Seconds()/1e6, "MB/s(~200B/row)")
}

// BenchmarkDoPutAckOnly measures the emulator's transport: 8k-row batches of
// 10 columns, acked without storage.
func BenchmarkDoPutAckOnly(b *testing.B) { benchmarkDoPut(b, true) }

// BenchmarkDoPutDurable adds Parquet + Delta commits with fsync to the path.
func BenchmarkDoPutDurable(b *testing.B) { benchmarkDoPut(b, false) }

func TestProtocolFor(t *testing.T) {
	cols := func(defs string) []typemap.Column {
		c, err := typemap.ParseColumns(defs)
		require.NoError(t, err)
		return c
	}
	tests := []struct {
		name     string
		table    workspace.Table
		reader   int
		features []string
	}{
		{"plain", workspace.Table{Columns: cols("id BIGINT, s STRING")}, 1, nil},
		{"ntz nested", workspace.Table{Columns: cols("id BIGINT, s STRUCT<t: TIMESTAMP_NTZ>")}, 3, []string{"timestampNtz"}},
		{"type widening", workspace.Table{Columns: cols("id INT"), Properties: map[string]string{"delta.enableTypeWidening": "true"}}, 3, []string{"typeWidening"}},
		{"deletion vectors off", workspace.Table{Columns: cols("id INT"), Properties: map[string]string{"delta.enableDeletionVectors": "false"}}, 1, nil},
		{"deletion vectors on, key case ignored", workspace.Table{Columns: cols("id INT"), Properties: map[string]string{"Delta.EnableDeletionVectors": "TRUE"}}, 3, []string{"deletionVectors"}},
		{"every feature in a fixed order", workspace.Table{Columns: cols("t TIMESTAMP_NTZ"), Properties: map[string]string{
			"delta.enableTypeWidening": "true", "delta.enableDeletionVectors": "true"}}, 3, []string{"timestampNtz", "deletionVectors", "typeWidening"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := protocolFor(tc.table)
			assert.Equal(t, tc.reader, p.MinReaderVersion)
			assert.Equal(t, tc.features, p.ReaderFeatures)
			assert.Equal(t, tc.features, p.WriterFeatures)
		})
	}
}

func TestMetaDataDropsLayoutProperties(t *testing.T) {
	md := metaDataFor(workspace.Table{TableID: "id-1", Columns: []typemap.Column{{Name: "a", Type: typemap.Primitive(typemap.Long), Nullable: true}},
		Properties: map[string]string{"delta.columnMapping.mode": "name", "delta.enableDeletionVectors": "false", "owner.team": "x", "delta.minReaderVersion": "2"}})
	assert.Equal(t, map[string]string{"delta.enableDeletionVectors": "false", "owner.team": "x"}, md.Configuration)
	assert.Equal(t, "id-1", md.ID)
	assert.Equal(t, []string{}, md.PartitionColumns)
	assert.Contains(t, md.SchemaString, `"name":"a"`)
}

func TestStartFailsCleanlyOnBusyPort(t *testing.T) {
	srv := startEmu(t, nil)
	_, err := Start(Config{HTTPAddr: strings.TrimPrefix(srv.HTTPURL(), "http://"), GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "workspace HTTP port "+strings.TrimPrefix(srv.HTTPURL(), "http://")+" (--http) is already in use")
}

func TestUnwritableTableIsRefusedAtOpen(t *testing.T) {
	const table = "main.default.nested"
	srv := startEmu(t, nil)
	// Tables Zerobus cannot write can exist in UC (created by SQL); streams
	// to them are refused INVALID_ARGUMENT, not retried.
	cols, err := typemap.ParseColumns("id BIGINT, aa ARRAY<ARRAY<INT>>")
	require.NoError(t, err)
	_, err = srv.Registry().Create(workspace.Table{FullName: table, TableType: "MANAGED", Columns: cols})
	require.NoError(t, err)
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, nil)
	_, _, err = openPut(t, dial(t, srv), zerobusToken(t, srv, table), table, schema)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
}
