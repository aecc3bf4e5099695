package arrowconv

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/benthos-zerobus/benthos-zerobus/internal/benchreport"
)

// benchPBSchema is the benchmark's event as a registry Protobuf schema,
// and benchPBDefs its table (benchDefs without the decimal and the map,
// which Protobuf has no field for on the fast path).
const benchPBSchema = `syntax = "proto3";
import "google/protobuf/timestamp.proto";
message Event {
  int64 id = 1;
  string uid = 2;
  string event = 3;
  optional double price = 4;
  optional int32 qty = 5;
  optional bool ok = 6;
  google.protobuf.Timestamp ts = 7;
  repeated string tags = 8;
}
`

const benchPBDefs = "id BIGINT NOT NULL, uid STRING, event STRING, price DOUBLE, qty INT, ok BOOLEAN, ts TIMESTAMP, tags ARRAY<STRING>"

var benchEvents = []string{"page_view", "add_to_cart", "checkout", "refund"}

var benchBase = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

// benchPBRows encodes n events as a Protobuf producer would (the payloads
// after the message index, as ConvertProtobuf takes them).
func benchPBRows(n int) [][]byte {
	rows := make([][]byte, n)
	for i := range rows {
		tag := protowire.AppendTag
		var b []byte
		b = protowire.AppendVarint(tag(b, 1, protowire.VarintType), uint64(9_000_000_000+i))
		b = protowire.AppendString(tag(b, 2, protowire.BytesType), fmt.Sprintf("user-%06d", i%50_000))
		b = protowire.AppendString(tag(b, 3, protowire.BytesType), benchEvents[i%len(benchEvents)])
		b = protowire.AppendFixed64(tag(b, 4, protowire.Fixed64Type), math.Float64bits(float64(i%1000)/7))
		b = protowire.AppendVarint(tag(b, 5, protowire.VarintType), uint64(i%17))
		b = protowire.AppendVarint(tag(b, 6, protowire.VarintType), protowire.EncodeBool(i%3 != 0))
		ts := benchBase.Add(time.Duration(i) * time.Millisecond)
		var t []byte
		t = protowire.AppendVarint(tag(t, 1, protowire.VarintType), uint64(ts.Unix()))
		t = protowire.AppendVarint(tag(t, 2, protowire.VarintType), uint64(ts.Nanosecond()))
		b = protowire.AppendBytes(tag(b, 7, protowire.BytesType), t)
		for _, s := range []string{"web", fmt.Sprintf("eu-west-%d", i%3), "abé"} {
			b = protowire.AppendString(tag(b, 8, protowire.BytesType), s)
		}
		rows[i] = b
	}
	return rows
}

// benchPBJSONRows are the same events as JSON text.
func benchPBJSONRows(n int) [][]byte {
	rows := make([][]byte, n)
	for i := range rows {
		rows[i] = fmt.Appendf(nil,
			`{"id":%d,"uid":"user-%06d","event":"%s","price":%g,"qty":%d,"ok":%t,"ts":"%s","tags":["web","eu-west-%d","ab\u00e9"]}`,
			9_000_000_000+i, i%50_000, benchEvents[i%len(benchEvents)], float64(i%1000)/7, i%17, i%3 != 0,
			benchBase.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), i%3)
	}
	return rows
}

// The Protobuf benchmark rows are the JSON benchmark rows: the fast path,
// the JSON path and the general path make the same record of them.
func TestBenchProtobufRowsMatchJSONRows(t *testing.T) {
	c := mustConverter(t, benchPBDefs, Options{})
	slow := newPBSlowPath(t, benchPBSchema)
	p := mustPBPlan(t, c, slow)
	rows := benchPBRows(256)
	fromJSON, err := c.ConvertJSON(benchPBJSONRows(256))
	require.NoError(t, err)
	defer fromJSON.Record.Release()
	fast, err := c.ConvertProtobuf(p, rows, slow.redo(rows))
	require.NoError(t, err)
	defer fast.Record.Release()
	general, err := slow.convert(c, rows)
	require.NoError(t, err)
	defer general.Record.Release()
	require.Empty(t, fromJSON.RowErrors)
	assertSamePBResult(t, fromJSON, fast)
	assertSamePBResult(t, fromJSON, general)
}

// BenchmarkConvertProtobuf times the fast path alone on the benchmark rows.
func BenchmarkConvertProtobuf(b *testing.B) {
	c := mustConverter(b, benchPBDefs, Options{})
	slow := newPBSlowPath(b, benchPBSchema)
	p := mustPBPlan(b, c, slow)
	rows := benchPBRows(benchN)
	b.SetBytes(int64(totalLen(rows)))
	benchBatches(b, func() (Result, error) { return c.ConvertProtobuf(p, rows, slow.redo(rows)) })
}

// BenchmarkProtobufFastPath converts the same rows, in one run, as (a)
// Protobuf through the fast path, (b) JSON text through ConvertJSON and (c)
// Protobuf through the general path (the registry codec's decode to Go
// values, then ConvertStructured), alternating batch by batch so that a
// busy machine slows all three alike, and reports the fast path's rows/s
// against each over several rounds.
func BenchmarkProtobufFastPath(b *testing.B) {
	c := mustConverter(b, benchPBDefs, Options{})
	slow := newPBSlowPath(b, benchPBSchema)
	p := mustPBPlan(b, c, slow)
	rows := benchPBRows(benchN)
	jsonRows := benchPBJSONRows(benchN)
	paths := []func() (Result, error){
		func() (Result, error) { return c.ConvertProtobuf(p, rows, slow.redo(rows)) },
		func() (Result, error) { return c.ConvertJSON(jsonRows) },
		func() (Result, error) { return slow.convert(c, rows) },
	}
	for _, convert := range paths { // warm the buffer pools
		res, err := convert()
		require.NoError(b, err)
		res.Record.Release()
	}
	const rounds, batches = 5, 4
	var vsJSON, vsGeneral, fastRate []float64
	for b.Loop() {
		vsJSON, vsGeneral, fastRate = vsJSON[:0], vsGeneral[:0], fastRate[:0]
		for range rounds {
			var spent [3]time.Duration
			for range batches {
				for k, convert := range paths {
					start := time.Now()
					res, err := convert()
					spent[k] += time.Since(start)
					if err != nil || len(res.RowErrors) != 0 {
						b.Fatal(err, res.RowErrors)
					}
					res.Record.Release()
				}
			}
			fastRate = append(fastRate, float64(batches*benchN)/spent[0].Seconds())
			vsJSON = append(vsJSON, float64(spent[1])/float64(spent[0]))
			vsGeneral = append(vsGeneral, float64(spent[2])/float64(spent[0]))
		}
	}
	b.ReportMetric(benchreport.Report("arrowconv/protobuf_fast_rows_per_s", fastRate, benchreport.Info, 0, ""), "fast_rows/s")
	b.ReportMetric(benchreport.Report("arrowconv/protobuf_fast_vs_json", vsJSON, benchreport.Info, 0, ""), "x_vs_json")
	b.ReportMetric(benchreport.Report("arrowconv/protobuf_fast_vs_general", vsGeneral, benchreport.Info, 0, ""), "x_vs_general")
}
