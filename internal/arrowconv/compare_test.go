package arrowconv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/bytedance/sonic"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/benchreport"
)

// compareCase is one row shape of the comparison benchmark: a table schema
// and a batch of valid JSON rows of about the named size.
type compareCase struct {
	name string
	defs string
	rows [][]byte
}

// Row shapes, each a realistic event for its size:
//   - 100B: a few ints, strings, a timestamp and a boolean;
//   - 1KB: a web event with two timestamps, URLs and a user agent, a nested
//     struct (device, with a struct inside) and an array of structs;
//   - 15KB: a document with long strings (one with escapes and non-ASCII
//     text) and a list of lines, the seeds' worked example size.
const (
	defs100B = "id BIGINT NOT NULL, ts TIMESTAMP, user_id STRING, event STRING, qty INT, ok BOOLEAN"
	defs1KB  = "id BIGINT NOT NULL, ts TIMESTAMP, received TIMESTAMP, session STRING, user_id STRING, event STRING, " +
		"url STRING, referrer STRING, ua STRING, qty INT, price DOUBLE, ok BOOLEAN, " +
		"device STRUCT<os: STRING, version: STRING, model: STRING, lang: STRING, screen: STRUCT<w: INT, h: INT>>, " +
		"items ARRAY<STRUCT<sku: STRING, name: STRING, qty: INT, price: DOUBLE>>, tags ARRAY<STRING>"
	defs15KB = "id BIGINT NOT NULL, ts TIMESTAMP, updated TIMESTAMP, author STRING, title STRING, summary STRING, " +
		"body STRING, lines ARRAY<STRING>, views BIGINT, score DOUBLE"
)

var loremWords = strings.Fields("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor " +
	"incididunt ut labore et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris " +
	"nisi aliquip ex ea commodo consequat duis aute irure in reprehenderit voluptate velit esse cillum fugiat " +
	"nulla pariatur excepteur sint occaecat cupidatat non proident sunt culpa qui officia deserunt mollit anim " +
	"id est laborum café naïve")

// lorem returns about n bytes of words starting at word seed, with a JSON
// escape ("\n") every few sentences when escapes is set.
func lorem(seed, n int, escapes bool) string {
	var b strings.Builder
	for i := seed; b.Len() < n; i++ {
		if b.Len() > 0 {
			switch {
			case escapes && i%53 == 0:
				b.WriteString(`.\n`)
			case i%13 == 0:
				b.WriteString(". ")
			default:
				b.WriteByte(' ')
			}
		}
		b.WriteString(loremWords[(i*7)%len(loremWords)])
	}
	return b.String()
}

func compareCases() []compareCase {
	base := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	ts := func(i int) string {
		return base.Add(time.Duration(i) * 1237 * time.Microsecond).Format(time.RFC3339Nano)
	}
	events := []string{"page_view", "add_to_cart", "checkout", "refund"}

	small := make([][]byte, 8192)
	for i := range small {
		small[i] = fmt.Appendf(nil, `{"id":%d,"ts":"%s","user_id":"user-%06d","event":"%s","qty":%d,"ok":%t}`,
			9_000_000_000+i, ts(i), i%50_000, events[i%len(events)], i%17, i%3 != 0)
	}

	medium := make([][]byte, 1024)
	for i := range medium {
		items := make([]string, 1+i%3)
		for j := range items {
			items[j] = fmt.Sprintf(`{"sku":"SKU-%05d-%d","name":"%s","qty":%d,"price":%g}`,
				i%9973, j, lorem(i+j, 24, false), 1+j, float64(i%5000)/100)
		}
		medium[i] = fmt.Appendf(nil, `{"id":%d,"ts":"%s","received":"%s","session":"%08x-%04x-4%03x-a%03x-%012x",`+
			`"user_id":"user-%06d","event":"%s","url":"https://shop.example.com/catalog/%s/item/%d?utm_source=newsletter&utm_medium=email&utm_campaign=winter-%d",`+
			`"referrer":"https://www.search.example.org/search?q=%s&hl=en&source=hp",`+
			`"ua":"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 build/%d",`+
			`"qty":%d,"price":%g,"ok":%t,`+
			`"device":{"os":"Linux","version":"6.%d","model":"ThinkPad X1 Carbon Gen %d","lang":"fr-FR","screen":{"w":%d,"h":%d}},`+
			`"items":[%s],"tags":["web","eu-west-%d","campaign-%d","ab-test-%c"]}`,
			9_000_000_000+i, ts(i), ts(i+400), i*2654435761, i%65536, i%4096, (i*7)%4096, i*40503,
			i%50_000, events[i%len(events)], loremWords[i%len(loremWords)], i, i%12,
			strings.ReplaceAll(lorem(i, 30, false), " ", "+"), 1000+i%900,
			i%17, float64(i%100_000)/7, i%3 != 0,
			i%12, 9+i%4, 1280+i%3*640, 720+i%3*360,
			strings.Join(items, ","), i%3, i%11, 'A'+rune(i%4))
	}

	large := make([][]byte, 128)
	for i := range large {
		lines := make([]string, 40)
		for j := range lines {
			lines[j] = `"` + lorem(i*40+j, 110, false) + `"`
		}
		large[i] = fmt.Appendf(nil, `{"id":%d,"ts":"%s","updated":"%s","author":"author-%04d","title":"%s",`+
			`"summary":"%s","body":"%s","lines":[%s],"views":%d,"score":%g}`,
			9_000_000_000+i, ts(i), ts(i+9), i%977, lorem(i, 80, false), lorem(i+3, 900, false),
			lorem(i+5, 9200, true), strings.Join(lines, ","), i*31, float64(i%1000)/3)
	}
	return []compareCase{{"100B", defs100B, small}, {"1KB", defs1KB, medium}, {"15KB", defs15KB, large}}
}

// contender decodes a whole batch of JSON rows once; the benchmark calls it
// per iteration.
type contender struct {
	name string
	run  func(tb testing.TB)
}

func contenders(tb testing.TB, cc compareCase) []contender {
	c := mustConverter(tb, cc.defs, Options{})
	msgs := make([]Row, len(cc.rows))
	for i, r := range cc.rows {
		msgs[i] = msg{raw: r}
	}
	ndjson := bytes.Join(cc.rows, []byte{'\n'})
	schema := c.Schema()
	return []contender{
		{"arrowconv", func(tb testing.TB) {
			res, err := c.Convert(msgs)
			if err != nil || len(res.RowErrors) != 0 {
				tb.Fatal(err, res.RowErrors)
			}
			res.Record.Release()
		}},
		{"encoding_json", func(tb testing.TB) {
			for _, r := range cc.rows {
				var m map[string]any
				if err := json.Unmarshal(r, &m); err != nil {
					tb.Fatal(err)
				}
			}
		}},
		{"sonic", func(tb testing.TB) {
			for _, r := range cc.rows {
				var m map[string]any
				if err := sonic.Unmarshal(r, &m); err != nil {
					tb.Fatal(err)
				}
			}
		}},
		{"arrow_json", func(tb testing.TB) {
			rec := readArrowJSON(tb, schema, ndjson, len(cc.rows))
			rec.Release()
		}},
	}
}

// readArrowJSON reads ndjson into one record of schema with arrow-go's own
// JSON reader.
func readArrowJSON(tb testing.TB, schema *arrow.Schema, ndjson []byte, rows int) arrow.RecordBatch {
	r := array.NewJSONReader(bytes.NewReader(ndjson), schema, array.WithChunk(-1))
	defer r.Release()
	if !r.Next() {
		tb.Fatal("arrow JSON reader: no record", r.Err())
	}
	if r.Err() != nil {
		tb.Fatal(r.Err())
	}
	rec := r.RecordBatch()
	if rec.NumRows() != int64(rows) {
		tb.Fatalf("arrow JSON reader: %d rows, want %d", rec.NumRows(), rows)
	}
	rec.Retain()
	return rec
}

// BenchmarkVsAlternatives compares Convert with the alternatives on the same
// rows and target schema, at three row sizes: encoding/json and sonic (its
// default, fastest configuration) unmarshalling each row into a
// map[string]any, and arrow-go's JSON reader building a record of the
// converter's own schema from the rows as NDJSON.
//
// Each contender runs as its own sub-benchmark (MB/s, allocs/op), and the
// "ratios" sub-benchmark times all four over ratioReps reps in every
// iteration (make bench runs -benchtime 1x), each rep long and interleaved
// (timeRep), and reports how many times faster Convert is, as the median of
// the per-rep ratios (targets: x_vs_json ≥ 8, x_vs_sonic ≥ 2,
// x_vs_arrow ≥ 2), and Convert's median MB/s and cost per input byte (which
// must not rise with row size). Each ratio and the MB/s are also printed as
// a benchreport TARGET line (median, range over the reps, target).
func BenchmarkVsAlternatives(b *testing.B) {
	for _, cc := range compareCases() {
		size := int64(totalLen(cc.rows))
		cs := contenders(b, cc)
		b.Run(cc.name, func(b *testing.B) {
			for _, ct := range cs {
				b.Run(ct.name, func(b *testing.B) {
					b.SetBytes(size)
					b.ReportAllocs()
					for b.Loop() {
						ct.run(b)
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(size), "ns/B")
				})
			}
			b.Run("ratios", func(b *testing.B) {
				spent := make([][]time.Duration, len(cs))
				for b.Loop() {
					for rep := range ratioReps {
						for i, d := range timeRep(b, cs, rep) {
							spent[i] = append(spent[i], d)
						}
					}
				}
				b.ReportMetric(pairedRatio(spent[1], spent[0]), "x_vs_json")
				b.ReportMetric(pairedRatio(spent[2], spent[0]), "x_vs_sonic")
				b.ReportMetric(pairedRatio(spent[3], spent[0]), "x_vs_arrow")
				conv := median(spent[0])
				b.ReportMetric(float64(size)/conv.Seconds()/1e6, "convert_MB/s")
				b.ReportMetric(float64(conv.Nanoseconds())/float64(size), "convert_ns/B")
				for i, ct := range cs { // each contender's median time per batch
					b.ReportMetric(float64(median(spent[i]).Nanoseconds()), ct.name+"_ns/batch")
				}
				// The same figures as TARGET lines, median and range over
				// the reps.
				p := "arrowconv/" + cc.name + "/"
				benchreport.Report(p+"x_vs_json", ratios(spent[1], spent[0]), benchreport.AtLeast, 8, "")
				benchreport.Report(p+"x_vs_sonic", ratios(spent[2], spent[0]), benchreport.AtLeast, 2, "")
				benchreport.Report(p+"x_vs_arrow", ratios(spent[3], spent[0]), benchreport.AtLeast, 2, "")
				var mbps []float64
				for _, d := range spent[0] {
					mbps = append(mbps, float64(size)/d.Seconds()/1e6)
				}
				benchreport.Report(p+"convert_MB_per_s", mbps, benchreport.Info, 0, "")
			})
		})
	}
}

// The ratios benchmark runs ratioReps reps; in each, every contender
// converts the batch over and over for at least repMin in all, in slices of
// about sliceMin taken in turn with the others'. A rep of a few runs of a
// few milliseconds each moved 20 % with one scheduling delay on the shared
// machine; over 150 ms, and with the contenders' slices interleaved, a slow
// moment costs each a little and all of them alike.
const (
	ratioReps = 5
	repMin    = 150 * time.Millisecond
	sliceMin  = 40 * time.Millisecond
)

// timeRep times one rep of every contender and returns each one's mean time
// per batch. Slices go round the contenders, in an order that turns with
// rep and slice, until each has been timed for repMin. Each slice starts
// from a collected heap (none pays for the collection of another's garbage)
// and with one untimed run that warms up what the others' slices cooled (its
// pools, its caches); it then converts the batch until it has run for
// sliceMin, or what its repMin still lacks, and at least once.
func timeRep(b *testing.B, cs []contender, rep int) []time.Duration {
	spent := make([]time.Duration, len(cs))
	runs := make([]int, len(cs))
	for slice := 0; ; slice++ {
		done := true
		for k := range cs {
			i := (k + rep + slice) % len(cs)
			if spent[i] >= repMin {
				continue
			}
			done = false
			b.StopTimer()
			runtime.GC()
			b.StartTimer()
			cs[i].run(b)
			want := min(sliceMin, repMin-spent[i])
			start, n := time.Now(), 0
			for n < 1 || time.Since(start) < want {
				cs[i].run(b)
				n++
			}
			spent[i] += time.Since(start)
			runs[i] += n
		}
		if done {
			break
		}
	}
	per := make([]time.Duration, len(cs))
	for i := range cs {
		per[i] = spent[i] / time.Duration(runs[i])
	}
	return per
}

// pairedRatio is the median over reps of other[i]/conv[i]: each pair
// ran interleaved, under the same load, so a burst of load from other
// processes on the shared machine skews one pair, not the result.
func pairedRatio(other, conv []time.Duration) float64 {
	r := ratios(other, conv)
	slices.Sort(r)
	return r[(len(r)-1)/2] // of two middle values, the lower
}

// ratios is other[i]/conv[i] for every rep i.
func ratios(other, conv []time.Duration) []float64 {
	r := make([]float64, len(conv))
	for i := range conv {
		r[i] = float64(other[i]) / float64(conv[i])
	}
	return r
}

func median(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2] // of two middle values, the slower
}

// TestCompareCasesAgree checks that the comparison does the same work for
// every contender: every row is valid for the converter, the rows have about
// their nominal size, and arrow-go's reader builds the same record.
func TestCompareCasesAgree(t *testing.T) {
	sizes := map[string][2]int{"100B": {90, 130}, "1KB": {900, 1300}, "15KB": {14_000, 17_000}}
	for _, cc := range compareCases() {
		t.Run(cc.name, func(t *testing.T) {
			avg := totalLen(cc.rows) / len(cc.rows)
			require.GreaterOrEqual(t, avg, sizes[cc.name][0])
			require.LessOrEqual(t, avg, sizes[cc.name][1])
			c := mustConverter(t, cc.defs, Options{})
			res, err := c.ConvertJSON(cc.rows)
			require.NoError(t, err)
			defer res.Record.Release()
			require.Empty(t, res.RowErrors)
			validateRecord(t, res.Record)
			want := readArrowJSON(t, c.Schema(), bytes.Join(cc.rows, []byte{'\n'}), len(cc.rows))
			defer want.Release()
			require.True(t, array.RecordEqual(want, res.Record), "arrow-go's reader and Convert disagree")
			for _, ct := range contenders(t, cc) {
				ct.run(t)
			}
		})
	}
}
