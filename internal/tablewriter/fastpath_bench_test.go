package tablewriter

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/benchdata"
	"github.com/benthos-zerobus/benthos-zerobus/internal/benchreport"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/fastpath"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// The writer benchmark's table and its rows, as JSON and as framed Avro.
const (
	writeBenchDefs   = benchdata.EventColumns
	writeBenchSchema = benchdata.EventAvroSchema
	writeBenchID     = 21
	writeBenchN      = 8192
)

type avroBuf []byte

func (e avroBuf) long(v int64) avroBuf { return binary.AppendUvarint(e, uint64(v<<1)^uint64(v>>63)) }
func (e avroBuf) str(s string) avroBuf { return append(e.long(int64(len(s))), s...) }

// writeBenchRows returns the same n events as JSON rows and as framed Avro
// rows.
func writeBenchRows(n int) (jsonRows, avroRows []Row) {
	events := []string{"page_view", "add_to_cart", "checkout", "refund"}
	base := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	for i := range n {
		ts := base.Add(time.Duration(i) * time.Millisecond)
		cents := int64((i%100_000)*100 + i%100)
		price := float64(i%1000) / 7
		jsonRows = append(jsonRows, testRow{b: fmt.Appendf(nil,
			`{"id":%d,"user_id":"user-%06d","event":"%s","amount":%d.%02d,"price":%g,"qty":%d,"ok":%t,`+
				`"ts":"%s","tags":["web","eu-west-%d","ab\u00e9"],"attrs":{"campaign":"c-%d","ua":"Mozilla/5.0 (X11; Linux x86_64)"}}`,
			9_000_000_000+i, i%50_000, events[i%len(events)], cents/100, cents%100, price, i%17, i%3 != 0,
			ts.Format(time.RFC3339Nano), i%3, i%11)})
		e := avroBuf(binary.BigEndian.AppendUint32([]byte{0}, writeBenchID))
		e = e.long(9_000_000_000 + int64(i))
		e = e.long(1).str(fmt.Sprintf("user-%06d", i%50_000))
		e = e.long(1).str(events[i%len(events)])
		amount := []byte{byte(cents >> 16), byte(cents >> 8), byte(cents)}
		e = append(e.long(1).long(3), amount...)
		e = binary.LittleEndian.AppendUint64(e.long(1), math.Float64bits(price))
		e = e.long(1).long(int64(i % 17))
		ok := byte(0)
		if i%3 != 0 {
			ok = 1
		}
		e = append(e.long(1), ok)
		e = e.long(1).long(ts.UnixMicro())
		e = e.long(1).long(3).str("web").str(fmt.Sprintf("eu-west-%d", i%3)).str("abé").long(0)
		e = e.long(1).long(2).str("campaign").str(fmt.Sprintf("c-%d", i%11)).str("ua").str("Mozilla/5.0 (X11; Linux x86_64)").long(0)
		avroRows = append(avroRows, testRow{b: e})
	}
	return jsonRows, avroRows
}

func openBenchWriter(b *testing.B, fast *fastpath.Path) *Writer {
	cat := catalogfake.New()
	cat.Put(testTable, writeBenchDefs, nil)
	c := Config{Table: testTable, WriterID: "bench", Pool: testPoolConfig(), Fast: fast}
	w := New(c, ingestfake.NewOpener(ingestfake.Config{}), cat, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Open(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.Close(context.Background()) })
	return w
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWriteAvroFastPath writes the same events through the table
// writer (conversion, layout, sizing and the fake stream's submit) as (a)
// framed Avro on the fast path, (b) JSON, (c) framed Avro decoded first by
// the registry codec as the processor would leave them, round by round,
// and reports the fast path's rows per CPU second (the process's, garbage
// collection included) against each.
func BenchmarkWriteAvroFastPath(b *testing.B) {
	jsonRows, avroRows := writeBenchRows(writeBenchN)
	src := oneSchema{id: writeBenchID, text: writeBenchSchema}
	fastW := openBenchWriter(b, fastpath.New(src))
	plainW := openBenchWriter(b, nil)
	codec, err := registry.NewCodec(registry.Schema{ID: writeBenchID, Format: registry.Avro, Text: writeBenchSchema}, fastpath.Options)
	if err != nil {
		b.Fatal(err)
	}
	processor := func() []Row {
		out := make([]Row, len(avroRows))
		for i, r := range avroRows {
			v, _, err := codec.Decode(r.(testRow).b[5:])
			if err != nil {
				b.Fatal(err)
			}
			out[i] = structuredRow(v)
		}
		return out
	}
	ctx := context.Background()
	write := func(w *Writer, rows []Row) {
		rowErrs, err := w.Write(ctx, rows, nil)
		if err != nil || len(rowErrs) != 0 {
			b.Fatal(err, rowErrs)
		}
	}
	paths := []func(){
		func() { write(fastW, avroRows) },
		func() { write(plainW, jsonRows) },
		func() { write(plainW, processor()) },
	}
	const rounds, batches = 5, 6
	var vsJSON, vsProc, cpuRate []float64
	for b.Loop() {
		vsJSON, vsProc, cpuRate = vsJSON[:0], vsProc[:0], cpuRate[:0]
		for range rounds {
			var cpu [3]time.Duration
			for k, run := range paths {
				// Each path's batches run together after a collection,
				// so that the garbage one path leaves is not collected
				// on another's time.
				runtime.GC()
				start := cpuTime()
				for range batches {
					run()
				}
				cpu[k] = cpuTime() - start
			}
			cpuRate = append(cpuRate, float64(batches*writeBenchN)/cpu[0].Seconds())
			vsJSON = append(vsJSON, float64(cpu[1])/float64(cpu[0]))
			vsProc = append(vsProc, float64(cpu[2])/float64(cpu[0]))
		}
	}
	benchreport.Report("tablewriter/avro_fast_rows_per_cpu_s", cpuRate, benchreport.Info, 0, "")
	b.ReportMetric(benchreport.Report("tablewriter/avro_fast_vs_json_cpu", vsJSON, benchreport.AtLeast, 1.5, ""), "x_vs_json")
	b.ReportMetric(benchreport.Report("tablewriter/avro_fast_vs_processor_cpu", vsProc, benchreport.AtLeast, 2, ""), "x_vs_processor")
}
