package e2e

import (
	"fmt"
	"math/big"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/benthos-zerobus/benthos-zerobus/internal/benchdata"
	"github.com/benthos-zerobus/benthos-zerobus/internal/benchreport"
)

// BenchmarkKafkaAvro is the Schema Registry fast path, whole process (issue
// 33: "Avro topic → fast path → zerobus must reach ≥ 1.5× the rows/s of
// the same rows as JSON → zerobus, and ≥ 2× the processor path"). The same
// records, ten columns of the kinds an Avro topic carries (BIGINT, two
// STRING, DECIMAL(12,2), DOUBLE, INT, BOOLEAN, TIMESTAMP, ARRAY<STRING>,
// MAP<STRING,STRING>; 236 bytes as JSON, 132 as framed Avro), sit in two
// topics of one kfake broker in this process: as registry-framed Avro
// (their schema in franz-go's srfake registry, in this process) and as
// JSON text. The built binary reads a topic from the start as a fresh
// consumer group, into the emulator binary acking without storing
// (--ack-only, its own process), five ways:
//
//   - fast_packed: Avro topic, the input's pack_records → zerobus with
//     schema_registry.url: no message per record, the output decodes the
//     values straight into Arrow (internal/fastpath): the fast path;
//   - json: JSON topic → zerobus, both at their defaults;
//   - processor: Avro topic → schema_registry_decode
//     (preserve_logical_types, raw_unions) → zerobus;
//   - fast: as fast_packed without pack_records (a message per record);
//   - json_packed: as json with pack_records.
//
// The targets are fast_packed ÷ json and fast_packed ÷ processor; the
// other ratios say where the gain comes from (packs, which JSON topics
// take too, or the decoding).
//
// A run lasts until the output has confirmed every record durable
// (runKafkaPipeline); its rate is the records over the whole run's wall
// time, start-up included, and its CPU the binary's (rusage at exit),
// printed beside it with the emulator's and this process's (the broker's).
// The sides of each rep run back to back, their order rotated each rep, and
// benchreport prints the median ratio over the reps and the range.
//
//	go test ./test/e2e/ -run '^$' -bench KafkaAvro -benchtime 1x -timeout 60m
//
// AVRO_BENCH_RECORDS changes the records (default 20M: fast_packed, the
// shortest, measured at up to 975k records/s on a quiet 2-core box, then
// runs 20 s or more), AVRO_BENCH_REPS the reps (default 2),
// AVRO_BENCH_SIDES the sides run (a comma-separated list of the names
// above; ratios of sides not run are left out).
func BenchmarkKafkaAvro(b *testing.B) {
	n := envInt("AVRO_BENCH_RECORDS", 20_000_000)
	reps := envInt("AVRO_BENCH_REPS", 2)
	const (
		table     = "main.default.avro_events"
		avroTopic = "events-avro"
		jsonTopic = "events-json"
	)
	httpURL, grpcURL, p := startEmulatorProcess(b, "--ack-only", "--table", table+":"+avroBenchCols)
	emu := benchEmulator{httpURL: httpURL, grpcURL: grpcURL, pid: p.cmd.Process.Pid}

	reg := srfake.New()
	b.Cleanup(reg.Close)
	id, _, err := reg.RegisterSchema(avroTopic+"-value", sr.Schema{Schema: avroBenchSchema, Type: sr.TypeAvro})
	require.NoError(b, err)
	schema, err := avro.Parse(avroBenchSchema)
	require.NoError(b, err)

	broker := startKafkaBroker(b, avroTopic, kafkaBenchParts)
	require.NoError(b, broker.cluster.CreateTopic(jsonTopic, kafkaBenchParts, nil))
	began := time.Now()
	var hdr sr.ConfluentHeader
	require.NoError(b, broker.produce(avroTopic, kafkaBenchParts, 0, n, func(i int) []byte {
		v, err := hdr.AppendEncode(nil, id, nil)
		if err == nil {
			v, err = schema.AppendEncode(v, avroBenchRecord(i))
		}
		if err != nil {
			panic(fmt.Sprintf("record %d: %v", i, err))
		}
		return v
	}))
	require.NoError(b, broker.produce(jsonTopic, kafkaBenchParts, 0, n, avroBenchJSON))
	b.Logf("produced %d records twice (Avro %d bytes, JSON %d bytes) in %s", n, 5+len(mustEncode(b, schema, avroBenchRecord(n))), len(avroBenchJSON(n)),
		time.Since(began).Round(time.Millisecond))
	bin := binary(b)

	const packed = "pack_records: true\n"
	sides := []struct {
		name, topic, input, pipeline, output string
	}{
		{"fast", avroTopic, "", "", zerobusOutput(grpcURL, httpURL, table, benchOutputExtra(), "schema_registry:\n  url: "+reg.URL())},
		{"json", jsonTopic, "", "", zerobusOutput(grpcURL, httpURL, table, benchOutputExtra())},
		{"processor", avroTopic, "", "processors:\n  - schema_registry_decode:\n      url: " + reg.URL() + "\n      avro:\n        preserve_logical_types: true\n        raw_unions: true\n",
			zerobusOutput(grpcURL, httpURL, table, benchOutputExtra())},
		{"fast_packed", avroTopic, packed, "", zerobusOutput(grpcURL, httpURL, table, benchOutputExtra(), "schema_registry:\n  url: "+reg.URL())},
		{"json_packed", jsonTopic, packed, "", zerobusOutput(grpcURL, httpURL, table, benchOutputExtra())},
	}
	if only := os.Getenv("AVRO_BENCH_SIDES"); only != "" {
		keep := strings.Split(only, ",")
		sides = slices.DeleteFunc(sides, func(s struct{ name, topic, input, pipeline, output string }) bool {
			return !slices.Contains(keep, s.name)
		})
	}
	rates := map[string][]float64{}
	cpus := map[string][]float64{}
	emuCPUs := map[string][]float64{}
	// The ratios, each a side's records/s over another's (and the other's
	// CPU over the side's), with its target (0: none).
	ratios := []struct {
		name, num, den string
		target         float64
	}{
		{"fast_packed_vs_json", "fast_packed", "json", 1.5},
		{"fast_packed_vs_processor", "fast_packed", "processor", 2},
		{"fast_packed_vs_json_packed", "fast_packed", "json_packed", 0},
		{"fast_vs_json", "fast", "json", 0},
		{"fast_vs_processor", "fast", "processor", 0},
		{"json_packed_vs_json", "json_packed", "json", 0},
	}
	rateRatios, cpuRatios := map[string][]float64{}, map[string][]float64{}
	group := 0
	for rep := range b.N * reps {
		got := map[string]kafkaRun{}
		for k := range sides {
			side := sides[(k+rep)%len(sides)] // rotate which side goes first
			group++
			acked, emuBefore, brokerBefore := rowsAckedIn(b, httpURL, table), emu.cpu(b), selfCPU()
			r := runKafkaPipeline(b, bin, broker.addr, side.topic, fmt.Sprintf("avro-bench-%d", group), n, side.input, side.pipeline, side.output)
			emuCPU, brokerCPU := emu.cpu(b)-emuBefore, selfCPU()-brokerBefore
			require.GreaterOrEqual(b, rowsAckedIn(b, httpURL, table)-acked, int64(n), "%s: every record acked", side.name)
			got[side.name] = r
			rates[side.name] = append(rates[side.name], r.rate(n))
			cpus[side.name] = append(cpus[side.name], r.cpuPerMillion(n))
			emuCPUs[side.name] = append(emuCPUs[side.name], emuCPU.Seconds())
			b.Logf("rep %d %s: %s wall (first sent at %s), %.0f records/s, cpu %s (%.2f s per million), peak %.0f MiB; emulator cpu %s; broker (this process) cpu %s",
				rep+1, side.name, r.wall.Round(time.Millisecond), r.first.Round(time.Millisecond), r.rate(n), r.cpu.Round(time.Millisecond),
				r.cpuPerMillion(n), float64(r.peak)/(1<<20), emuCPU.Round(time.Millisecond), brokerCPU.Round(time.Millisecond))
		}
		for _, r := range ratios {
			num, nok := got[r.num]
			den, dok := got[r.den]
			if nok && dok {
				rateRatios[r.name] = append(rateRatios[r.name], num.rate(n)/den.rate(n))
				cpuRatios[r.name] = append(cpuRatios[r.name], den.cpu.Seconds()/num.cpu.Seconds())
			}
		}
	}
	for _, s := range sides {
		benchreport.Report("kafka_avro/"+s.name+"_records_per_s", rates[s.name], benchreport.Info, 0, "rows/s")
		benchreport.Report("kafka_avro/"+s.name+"_cpu_per_million", cpus[s.name], benchreport.Info, 0, "s")
		benchreport.Report("kafka_avro/"+s.name+"_emulator_cpu", emuCPUs[s.name], benchreport.Info, 0, "s")
	}
	for _, r := range ratios {
		if len(rateRatios[r.name]) == 0 {
			continue
		}
		benchreport.Report("kafka_avro/"+r.name+"_binary_cpu", cpuRatios[r.name], benchreport.Info, 0, "")
		kind := benchreport.Info
		if r.target > 0 {
			kind = benchreport.AtLeast
		}
		b.ReportMetric(benchreport.Report("kafka_avro/"+r.name, rateRatios[r.name], kind, r.target, ""), "x_"+r.name)
	}
}

// The table, schema and records of BenchmarkKafkaAvro (the columns of
// internal/tablewriter's BenchmarkWriteAvroFastPath).
const (
	avroBenchCols   = benchdata.EventColumns
	avroBenchSchema = benchdata.EventAvroSchema
)

var avroBenchEvents = []string{"page_view", "add_to_cart", "checkout", "refund"}

var avroBenchBase = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

// avroBenchFields are record i's values.
func avroBenchFields(i int) (cents int64, price float64, ts time.Time) {
	return int64((i%100_000)*100 + i%100), float64(i%1000) / 7, avroBenchBase.Add(time.Duration(i) * time.Millisecond)
}

// avroBenchRecord is record i for the Avro encoder.
func avroBenchRecord(i int) map[string]any {
	cents, price, ts := avroBenchFields(i)
	return map[string]any{
		"id": int64(9_000_000_000 + i), "user_id": fmt.Sprintf("user-%06d", i%50_000), "event": avroBenchEvents[i%len(avroBenchEvents)],
		"amount": big.NewRat(cents, 100), "price": price, "qty": int32(i % 17), "ok": i%3 != 0, "ts": ts,
		"tags":  []any{"web", fmt.Sprintf("eu-west-%d", i%3), "ab\u00e9"},
		"attrs": map[string]any{"campaign": fmt.Sprintf("c-%d", i%11), "ua": "Mozilla/5.0 (X11; Linux x86_64)"},
	}
}

// avroBenchJSON is record i as JSON text.
func avroBenchJSON(i int) []byte {
	cents, price, ts := avroBenchFields(i)
	return fmt.Appendf(nil, `{"id":%d,"user_id":"user-%06d","event":"%s","amount":%d.%02d,"price":%s,"qty":%d,"ok":%t,`+
		`"ts":"%s","tags":["web","eu-west-%d","ab\u00e9"],"attrs":{"campaign":"c-%d","ua":"Mozilla/5.0 (X11; Linux x86_64)"}}`,
		9_000_000_000+i, i%50_000, avroBenchEvents[i%len(avroBenchEvents)], cents/100, cents%100, strconv.FormatFloat(price, 'g', -1, 64), i%17, i%3 != 0,
		ts.Format(time.RFC3339Nano), i%3, i%11)
}

func mustEncode(b *testing.B, s *avro.Schema, v any) []byte {
	out, err := s.AppendEncode(nil, v)
	require.NoError(b, err)
	return out
}

// envInt is the positive integer in environment variable name, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
