package arrowconv

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/benchdata"
	"github.com/benthos-zerobus/benthos-zerobus/internal/benchreport"
)

// benchAvroSchema is benchDefs' table as a registry Avro schema: the
// benchmark rows of benchRows, encoded as a Confluent serializer would.
const benchAvroSchema = benchdata.EventAvroSchema

// benchAvroRows encodes the values of benchRows(n) with benchAvroSchema
// (the registry's 5-byte header left off, as ConvertAvro takes them).
func benchAvroRows(n int) [][]byte {
	rows := make([][]byte, n)
	events := []string{"page_view", "add_to_cart", "checkout", "refund"}
	base := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	for i := range rows {
		var e avroEnc
		e = e.long(int64(9_000_000_000 + i))
		e = e.long(1).str(fmt.Sprintf("user-%06d", i%50_000))
		e = e.long(1).str(events[i%len(events)])
		cents := big.NewInt(int64((i%100_000)*100 + i%100))
		e = e.long(1).bytes(twosComplement(cents))
		e = e.long(1)
		e = appendDouble(e, float64(i%1000)/7)
		e = e.long(1).long(int64(i % 17))
		ok := byte(0)
		if i%3 != 0 {
			ok = 1
		}
		e = append(e.long(1), ok)
		e = e.long(1).long(base.Add(time.Duration(i) * time.Millisecond).UnixMicro())
		e = e.long(1).long(3).str("web").str(fmt.Sprintf("eu-west-%d", i%3)).str("abé").long(0)
		e = e.long(1).long(2).str("campaign").str(fmt.Sprintf("c-%d", i%11)).str("ua").str("Mozilla/5.0 (X11; Linux x86_64)").long(0)
		rows[i] = e
	}
	return rows
}

// twosComplement is n as the shortest big-endian two's-complement bytes (a
// non-negative n here).
func twosComplement(n *big.Int) []byte {
	b := n.Bytes()
	if len(b) == 0 || b[0]&0x80 != 0 {
		b = append([]byte{0}, b...)
	}
	return b
}

func appendDouble(e avroEnc, f float64) avroEnc {
	return binary.LittleEndian.AppendUint64(e, math.Float64bits(f))
}

// The Avro benchmark rows are the JSON benchmark rows: the fast path, the
// JSON path and the processor path make the same record of them.
func TestBenchAvroRowsMatchJSONRows(t *testing.T) {
	c := mustConverter(t, benchDefs, Options{})
	p := mustAvroPlan(t, c, benchAvroSchema)
	slow := newAvroSlowPath(t, benchAvroSchema)
	avroRows := benchAvroRows(256)
	fromJSON, err := c.ConvertJSON(benchRows(256))
	require.NoError(t, err)
	defer fromJSON.Record.Release()
	fast, err := c.ConvertAvro(p, avroRows, nil)
	require.NoError(t, err)
	defer fast.Record.Release()
	proc, err := slow.convert(c, avroRows)
	require.NoError(t, err)
	defer proc.Record.Release()
	require.Empty(t, fromJSON.RowErrors)
	assertSameResult(t, fromJSON, fast)
	assertSameResult(t, fromJSON, proc)
	require.True(t, array.RecordEqual(fromJSON.Record, fast.Record))
}

// BenchmarkConvertAvro times the fast path alone on the benchmark rows.
func BenchmarkConvertAvro(b *testing.B) {
	c := mustConverter(b, benchDefs, Options{})
	p := mustAvroPlan(b, c, benchAvroSchema)
	rows := benchAvroRows(benchN)
	b.SetBytes(int64(totalLen(rows)))
	benchBatches(b, func() (Result, error) { return c.ConvertAvro(p, rows, nil) })
}

// BenchmarkAvroFastPath converts the same rows, in one run, as (a) Avro
// through the fast path, (b) JSON text through ConvertJSON (a JSON topic
// into zerobus today) and (c) Avro through the processor path (the registry
// codec's decode to Go values, then ConvertStructured), alternating batch
// by batch so that a busy machine slows all three alike, and reports the
// fast path's rows/s against each over several rounds (targets: 1.5x JSON,
// 2x the processor path).
func BenchmarkAvroFastPath(b *testing.B) {
	c := mustConverter(b, benchDefs, Options{})
	p := mustAvroPlan(b, c, benchAvroSchema)
	slow := newAvroSlowPath(b, benchAvroSchema)
	avroRows := benchAvroRows(benchN)
	jsonRows := benchRows(benchN)
	paths := []func() (Result, error){
		func() (Result, error) { return c.ConvertAvro(p, avroRows, nil) },
		func() (Result, error) { return c.ConvertJSON(jsonRows) },
		func() (Result, error) { return slow.convert(c, avroRows) },
	}
	const rounds, batches = 7, 8
	var vsJSON, vsProc, fastRate []float64
	for b.Loop() {
		vsJSON, vsProc, fastRate = vsJSON[:0], vsProc[:0], fastRate[:0]
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
			vsProc = append(vsProc, float64(spent[2])/float64(spent[0]))
		}
	}
	benchreport.Report("arrowconv/avro_fast_rows_per_s", fastRate, benchreport.Info, 0, "")
	b.ReportMetric(benchreport.Report("arrowconv/avro_fast_vs_json", vsJSON, benchreport.AtLeast, 1.5, ""), "x_vs_json")
	b.ReportMetric(benchreport.Report("arrowconv/avro_fast_vs_processor", vsProc, benchreport.AtLeast, 2, ""), "x_vs_processor")
}

// BenchmarkAvroProcessorPath times the processor path alone on the same
// rows: the registry codec's decode to Go values, then ConvertStructured.
func BenchmarkAvroProcessorPath(b *testing.B) {
	c := mustConverter(b, benchDefs, Options{})
	slow := newAvroSlowPath(b, benchAvroSchema)
	rows := benchAvroRows(benchN)
	b.SetBytes(int64(totalLen(rows)))
	benchBatches(b, func() (Result, error) { return slow.convert(c, rows) })
}
