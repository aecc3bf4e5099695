package arrowconv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/benchdata"
)

const benchDefs = benchdata.EventColumns

// benchRows returns n realistic event rows for benchDefs, all valid.
func benchRows(n int) [][]byte {
	rows := make([][]byte, n)
	events := []string{"page_view", "add_to_cart", "checkout", "refund"}
	base := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	for i := range rows {
		rows[i] = fmt.Appendf(nil,
			`{"id":%d,"user_id":"user-%06d","event":"%s","amount":%d.%02d,"price":%g,"qty":%d,"ok":%t,`+
				`"ts":"%s","tags":["web","eu-west-%d","ab\u00e9"],"attrs":{"campaign":"c-%d","ua":"Mozilla/5.0 (X11; Linux x86_64)"}}`,
			9_000_000_000+i, i%50_000, events[i%len(events)], i%100_000, i%100, float64(i%1000)/7, i%17, i%3 != 0,
			base.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), i%3, i%11)
	}
	return rows
}

const benchN = 8192

func BenchmarkConvert(b *testing.B) { benchConvert(b, benchDefs) }

// benchConvert times ConvertJSON of the benchmark rows into a table of defs,
// reporting bytes, allocations and rows per second.
func benchConvert(b *testing.B, defs string) {
	c := mustConverter(b, defs, Options{})
	rows := benchRows(benchN)
	b.SetBytes(int64(totalLen(rows)))
	benchBatches(b, func() (Result, error) { return c.ConvertJSON(rows) })
}

// benchBatches times convert, which converts a batch of benchN valid rows,
// reporting allocations and rows per second.
func benchBatches(b *testing.B, convert func() (Result, error)) {
	b.ReportAllocs()
	for b.Loop() {
		res, err := convert()
		if err != nil || len(res.RowErrors) != 0 {
			b.Fatal(err, res.RowErrors)
		}
		res.Record.Release()
	}
	b.ReportMetric(float64(benchN)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkConvertStructured converts the benchmark rows held as structured
// values (maps with json.Number numbers, as a Bloblang mapping leaves them)
// through ConvertStructured.
func BenchmarkConvertStructured(b *testing.B) {
	c := mustConverter(b, benchDefs, Options{})
	rows := structuredRows(b, benchRows(benchN))
	benchBatches(b, func() (Result, error) { return c.ConvertStructured(rows) })
}

// structuredRows decodes JSON rows into structured messages, numbers as
// json.Number.
func structuredRows(tb testing.TB, raw [][]byte) []StructuredRow {
	tb.Helper()
	rows := make([]StructuredRow, len(raw))
	for i, r := range raw {
		d := json.NewDecoder(bytes.NewReader(r))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			tb.Fatal(err)
		}
		rows[i] = msg{structured: v, hasStruct: true}
	}
	return rows
}

func BenchmarkJSONUnmarshalMap(b *testing.B) {
	rows := benchRows(benchN)
	b.SetBytes(int64(totalLen(rows)))
	b.ReportAllocs()
	for b.Loop() {
		unmarshalAll(b, rows)
	}
	b.ReportMetric(float64(benchN)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkConvertVsUnmarshal times Convert and encoding/json unmarshalling
// into map[string]any on the same rows, interleaved in one run, and reports
// how many times faster Convert is (target: at least 3).
func BenchmarkConvertVsUnmarshal(b *testing.B) {
	c := mustConverter(b, benchDefs, Options{})
	rows := benchRows(benchN)
	var tConv, tJSON time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := c.ConvertJSON(rows)
		tConv += time.Since(start)
		if err != nil || len(res.RowErrors) != 0 {
			b.Fatal(err, res.RowErrors)
		}
		res.Record.Release()

		start = time.Now()
		unmarshalAll(b, rows)
		tJSON += time.Since(start)
	}
	b.ReportMetric(float64(tJSON)/float64(tConv), "x_vs_json_map")
	b.ReportMetric(float64(benchN)*float64(b.N)/tConv.Seconds(), "convert_rows/s")
	b.ReportMetric(float64(benchN)*float64(b.N)/tJSON.Seconds(), "json_map_rows/s")
}

func unmarshalAll(b *testing.B, rows [][]byte) {
	for _, r := range rows {
		var m map[string]any
		if err := json.Unmarshal(r, &m); err != nil {
			b.Fatal(err)
		}
	}
}

func totalLen(rows [][]byte) int {
	n := 0
	for _, r := range rows {
		n += len(r)
	}
	return n
}

func TestBenchRowsConvert(t *testing.T) {
	// The benchmark rows must all be valid, or the benchmark measures errors.
	c := mustConverter(t, benchDefs, Options{})
	rows := benchRows(64)
	res, err := c.ConvertJSON(rows)
	require.NoError(t, err)
	defer res.Record.Release()
	require.Empty(t, res.RowErrors)
	validateRecord(t, res.Record)
	var m map[string]any
	require.NoError(t, json.Unmarshal(rows[5], &m))
	assert.Equal(t, m["user_id"], cell(t, res.Record, "user_id", 5))
	assert.Equal(t, `["web","eu-west-2","abé"]`, cell(t, res.Record, "tags", 5))
}

// BenchmarkConvertVariant converts the benchmark rows with their attrs and
// tags held in VARIANT columns instead of a MAP and an ARRAY.
func BenchmarkConvertVariant(b *testing.B) {
	benchConvert(b, "id BIGINT NOT NULL, user_id STRING, event STRING, amount DECIMAL(12,2), price DOUBLE, "+
		"qty INT, ok BOOLEAN, ts TIMESTAMP, tags VARIANT, attrs VARIANT")
}
