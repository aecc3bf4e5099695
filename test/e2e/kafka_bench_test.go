package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/benchreport"
)

// Benchmarks of the redpanda input (issue 25), whole process: the built
// binary consumes a backlog of records of about 200 bytes from a kfake
// broker in this process, as one consumer group per run, and the emulator
// binary acks without storing (--ack-only, its own process). Each run lasts
// until every record has been sent by the output (output_sent), and its
// rate is the records over the whole run's wall time, start-up and group
// join included; its CPU is the binary's user+sys (rusage at exit).
//
//	go test ./test/e2e/ -run '^$' -bench Kafka -benchtime 1x -timeout 40m
//
// KAFKA_BENCH_RECORDS changes the backlog (default 8.5M, so that the
// shortest side, drop, runs about 20 s), KAFKA_BENCH_REPS the reps
// (default 3). KAFKA_BENCH_HEAP=DIR turns the binary's
// http.debug_endpoints on and saves, in DIR, its heap profile (GROUP.pb.gz,
// for go tool pprof) and the runtime's figures (GROUP.txt) each time its
// peak RSS grows by 4 MiB, so the last ones are taken at the peak.
// KAFKA_BENCH_BINARY_ENV adds variables to the binary's environment in
// every run (e.g. "GOGC=200"), and to no other process.
// KAFKA_BENCH_INPUT adds fields to the redpanda input of every run, as YAML
// with \n for new lines (e.g. "max_unacked_bytes: 32MiB").
// KAFKA_BENCH_PROFILE=DIR saves, in DIR, a CPU profile of each run of the
// binary (GROUP.cpu.pb.gz: 6 s from its third second). The machine may be
// shared, so the sides of each ratio run back to back, alternating which
// goes first, and benchreport prints the median over the reps and the range.
//
//   - kafka/zerobus_vs_batched_drop: redpanda → zerobus (defaults) ÷
//     redpanda → drop behind the zerobus output's default batching. Target
//     >= 0.90.
//     kafka/zerobus_vs_batched_drop_steady is the same ratio over the
//     records/s between 10% and 90% of the backlog sent. Two CPU ratios
//     explain it: kafka/zerobus_vs_batched_drop_binary_cpu
//     is batched drop's CPU over zerobus's, the binary's own (what the
//     rate ratio would be on a machine where the binary is CPU-bound and
//     the service runs elsewhere), and kafka/zerobus_vs_batched_drop_all_cpu
//     adds to each side the CPU of what shares this machine with it: the
//     broker (this process) and, for zerobus, the emulator. With every
//     process sharing two cores, the rate ratio follows the second.
//   - kafka/input_vs_bare_poll: redpanda → drop ÷ a bare franz-go poll loop
//     that discards the records (zerobus-emulator kafka-consume, its own
//     process, the same group settings). One pass over the backlog takes
//     the bare loop a few seconds, so it reads the backlog again, each pass
//     as a fresh group, until it has run 20 s (see runBarePoll); its rate is
//     over every record it read. Aim >= 0.70.
//   - kafka/peak_rss: the binary's peak RSS (VmHWM) in the zerobus runs, at
//     the defaults. Target <= 160 MiB.
//
// The kfake broker serves every side from one goroutine of this process: it
// shares the two cores with the binary and the emulator, and its rate is a
// ceiling for all of them (the bare poll loop's rate shows it).

const (
	kafkaBenchRecords     = 8_500_000
	kafkaBenchRepsDefault = 3
	kafkaBenchParts       = 6
)

func kafkaBenchReps() int {
	if n, err := strconv.Atoi(os.Getenv("KAFKA_BENCH_REPS")); err == nil && n > 0 {
		return n
	}
	return kafkaBenchRepsDefault
}

func kafkaBenchCount() int {
	if n, err := strconv.Atoi(os.Getenv("KAFKA_BENCH_RECORDS")); err == nil && n > 0 {
		return n
	}
	return kafkaBenchRecords
}

// kafkaBenchValue is record i: about 200 bytes of JSON with the events
// table's columns.
func kafkaBenchValue(i int) []byte {
	return []byte(fmt.Sprintf(`{"id":%d,"msg":"%s","level":"info","ts":"2026-01-02T03:04:05Z"}`, i, strings.Repeat("m", 128)))
}

// kafkaRun is one whole-process run.
type kafkaRun struct {
	wall time.Duration
	// first is when the output had sent its first record: start-up,
	// group join and (zerobus) the table's stream open.
	first time.Duration
	// steady is the records/s between the output having sent 10% and 90%
	// of them: no start-up, and no last batch waiting for the batching
	// period's tick (which rounds every run's end up to one).
	steady float64
	cpu    time.Duration
	peak   int64 // VmHWM, bytes
	// records is what the run consumed when it read the backlog more
	// than once (the bare poll loop); 0: the backlog once.
	records int
}

// count is the records the run consumed, the backlog being n.
func (r kafkaRun) count(n int) int {
	if r.records > 0 {
		return r.records
	}
	return n
}

func (r kafkaRun) rate(n int) float64 { return float64(r.count(n)) / r.wall.Seconds() }

// cpuPerMillion is the run's CPU seconds per million records consumed.
func (r kafkaRun) cpuPerMillion(n int) float64 { return r.cpu.Seconds() * 1e6 / float64(r.count(n)) }

func BenchmarkKafka(b *testing.B) {
	n := kafkaBenchCount()
	emu := startBenchEmulator(b)
	broker := startKafkaBroker(b, kafkaTopic, kafkaBenchParts)
	began := time.Now()
	require.NoError(b, broker.produce(kafkaTopic, kafkaBenchParts, 0, n, kafkaBenchValue))
	b.Logf("produced %d records of %d bytes in %s", n, len(kafkaBenchValue(n)), time.Since(began).Round(time.Millisecond))
	bin, emuBin := binary(b), emulatorBinary(b)

	group := 0
	run := func(output string) kafkaRun {
		group++
		return runKafkaBinary(b, bin, broker.addr, fmt.Sprintf("bench-%d", group), n, output)
	}
	bare := func() kafkaRun {
		group++
		return runBarePoll(b, emuBin, broker.addr, fmt.Sprintf("bench-%d", group), n)
	}
	zbOut := emu.outputYAML(benchOutputExtra())
	var x, xSteady, xCPU, xAll, input, peaks, zbRates, dropRates, bareRates, zbCPU, dropCPU, bareCPU, emuCPU, brokerZB, brokerBatched, walls []float64
	for rep := range b.N * kafkaBenchReps() {
		var zb, batched, drop, poll kafkaRun
		var zbEmu, zbBroker, batchedBroker time.Duration
		runs := []func(){
			func() {
				acked, emuBefore, brokerBefore := emu.rowsAcked(b), emu.cpu(b), selfCPU()
				zb = run(zbOut)
				zbEmu, zbBroker = emu.cpu(b)-emuBefore, selfCPU()-brokerBefore
				require.GreaterOrEqual(b, emu.rowsAcked(b)-acked, int64(n), "every record acked")
			},
			func() {
				brokerBefore := selfCPU()
				batched = run(batchedDropOutput)
				batchedBroker = selfCPU() - brokerBefore
			},
			func() { drop = run("drop: {}") },
			func() { poll = bare() },
		}
		if rep%2 == 1 { // alternate which side goes first
			runs[0], runs[1], runs[2], runs[3] = runs[1], runs[0], runs[3], runs[2]
		}
		for _, f := range runs {
			f()
		}
		x = append(x, zb.rate(n)/batched.rate(n))
		xSteady = append(xSteady, zb.steady/batched.steady)
		xCPU = append(xCPU, batched.cpu.Seconds()/zb.cpu.Seconds())
		xAll = append(xAll, (batched.cpu+batchedBroker).Seconds()/(zb.cpu+zbEmu+zbBroker).Seconds())
		input = append(input, drop.rate(n)/poll.rate(n))
		peaks = append(peaks, float64(zb.peak)/(1<<20))
		zbRates, dropRates, bareRates = append(zbRates, zb.rate(n)), append(dropRates, drop.rate(n)), append(bareRates, poll.rate(n))
		zbCPU, dropCPU, bareCPU = append(zbCPU, zb.cpuPerMillion(n)), append(dropCPU, drop.cpuPerMillion(n)), append(bareCPU, poll.cpuPerMillion(n))
		emuCPU = append(emuCPU, zbEmu.Seconds())
		brokerZB, brokerBatched = append(brokerZB, zbBroker.Seconds()), append(brokerBatched, batchedBroker.Seconds())
		walls = append(walls, zb.wall.Seconds(), batched.wall.Seconds(), drop.wall.Seconds(), poll.wall.Seconds())
		b.Logf("rep %d: zerobus %s (first sent at %s, cpu %s, peak %.0f MiB; emulator cpu %s, broker+test cpu %s), batched drop %s (first sent at %s, cpu %s; broker+test cpu %s), drop %s (cpu %s), bare poll %d records in %s (cpu %s)", rep+1,
			zb.wall.Round(time.Millisecond), zb.first.Round(time.Millisecond), zb.cpu.Round(time.Millisecond), float64(zb.peak)/(1<<20), zbEmu.Round(time.Millisecond), zbBroker.Round(time.Millisecond),
			batched.wall.Round(time.Millisecond), batched.first.Round(time.Millisecond), batched.cpu.Round(time.Millisecond), batchedBroker.Round(time.Millisecond),
			drop.wall.Round(time.Millisecond), drop.cpu.Round(time.Millisecond),
			poll.count(n), poll.wall.Round(time.Millisecond), poll.cpu.Round(time.Millisecond))
	}
	benchreport.Report("kafka/zerobus_records_per_s", zbRates, benchreport.Info, 0, "rows/s")
	benchreport.Report("kafka/drop_records_per_s", dropRates, benchreport.Info, 0, "rows/s")
	benchreport.Report("kafka/bare_poll_records_per_s", bareRates, benchreport.Info, 0, "rows/s")
	benchreport.Report("kafka/zerobus_cpu_per_million", zbCPU, benchreport.Info, 0, "s")
	benchreport.Report("kafka/drop_cpu_per_million", dropCPU, benchreport.Info, 0, "s")
	benchreport.Report("kafka/bare_poll_cpu_per_million", bareCPU, benchreport.Info, 0, "s")
	benchreport.Report("kafka/run_wall", walls, benchreport.Info, 0, "s")
	benchreport.Report("kafka/zerobus_emulator_cpu", emuCPU, benchreport.Info, 0, "s")
	benchreport.Report("kafka/zerobus_broker_cpu", brokerZB, benchreport.Info, 0, "s")
	benchreport.Report("kafka/batched_drop_broker_cpu", brokerBatched, benchreport.Info, 0, "s")
	benchreport.Report("kafka/zerobus_vs_batched_drop_steady", xSteady, benchreport.Info, 0, "")
	benchreport.Report("kafka/zerobus_vs_batched_drop_binary_cpu", xCPU, benchreport.Info, 0, "")
	benchreport.Report("kafka/zerobus_vs_batched_drop_all_cpu", xAll, benchreport.Info, 0, "")
	b.ReportMetric(benchreport.Report("kafka/zerobus_vs_batched_drop", x, benchreport.AtLeast, 0.90, ""), "x_vs_batched_drop")
	b.ReportMetric(benchreport.Report("kafka/input_vs_bare_poll", input, benchreport.AtLeast, 0.70, ""), "x_vs_bare_poll")
	b.ReportMetric(benchreport.Report("kafka/peak_rss", peaks, benchreport.AtMost, 160, "MiB"), "peak_rss_MiB")
}

// runKafkaBinary runs the product binary on redpanda (brokers, the topic,
// group, from the start) → output until the output has sent n records,
// then stops it (SIGTERM) and returns the wall time to the last record,
// its CPU and its peak RSS.
func runKafkaBinary(b *testing.B, bin, brokers, group string, n int, output string) kafkaRun {
	b.Helper()
	return runKafkaPipeline(b, bin, brokers, kafkaTopic, group, n, "", "", output)
}

// runKafkaPipeline is runKafkaBinary reading topic, with input (YAML lines
// added to the redpanda input's, before KAFKA_BENCH_INPUT's) and pipeline
// (YAML under the pipeline key; empty: none) between the input and the
// output.
func runKafkaPipeline(b *testing.B, bin, brokers, topic, group string, n int, input, pipeline, output string) kafkaRun {
	b.Helper()
	addr := freeAddr(b)
	if pipeline != "" {
		pipeline = "pipeline:\n" + indentBy(pipeline, 2)
	}
	heapDir, profDir := os.Getenv("KAFKA_BENCH_HEAP"), os.Getenv("KAFKA_BENCH_PROFILE")
	cfg := filepath.Join(b.TempDir(), "pipeline.yaml")
	require.NoError(b, os.WriteFile(cfg, []byte(fmt.Sprintf(`
http:
  address: %s
  debug_endpoints: %t
logger:
  level: warn
metrics:
  prometheus:
    add_go_metrics: false
    add_process_metrics: false
input:
  redpanda:
    seed_brokers: [ %q ]
    topics: [ %q ]
    consumer_group: %s
    start_offset: earliest
%s
%s
output:
%s
`, addr, heapDir != "" || profDir != "", brokers, topic, group,
		indentBy(input+strings.ReplaceAll(os.Getenv("KAFKA_BENCH_INPUT"), `\n`, "\n"), 4), pipeline, indentBy(output, 2))), 0o600))
	began := time.Now()
	p := startBinary(b, bin, strings.Fields(os.Getenv("KAFKA_BENCH_BINARY_ENV")), "run", cfg)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	profiled := make(chan struct{})
	if profDir != "" {
		go func() {
			defer close(profiled)
			time.Sleep(kafkaBenchProfileAfter)
			if err := saveCPUProfile(addr, filepath.Join(profDir, group+".cpu.pb.gz")); err != nil {
				b.Logf("no CPU profile of %s: %v", group, err)
			}
		}()
	} else {
		close(profiled)
	}
	var peak, heapAt int64
	var wall, first, at10, at90 time.Duration
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for wall == 0 {
		select {
		case err := <-done:
			b.Fatalf("the pipeline ended before sending %d records: %v\n%s", n, err, tail(p.out.String(), 30))
		case <-tick.C:
		}
		if v, err := vmHWM(p.cmd.Process.Pid); err == nil {
			peak = max(peak, v)
		}
		if heapDir != "" && peak >= heapAt+4<<20 && saveHeap(addr, filepath.Join(heapDir, group)) == nil {
			heapAt = peak // else not serving yet: the next tick tries again
		}
		if sent, ok := outputSent(addr); ok && sent > 0 {
			if first == 0 {
				first = time.Since(began)
			}
			if at10 == 0 && sent >= 0.1*float64(n) {
				at10 = time.Since(began)
			}
			if at90 == 0 && sent >= 0.9*float64(n) {
				at90 = time.Since(began)
			}
			if sent >= float64(n) {
				wall = time.Since(began)
			}
		}
	}
	<-profiled
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		require.NoError(b, err, "the pipeline's stop:\n%s", tail(p.out.String(), 30))
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		b.Fatalf("the pipeline did not stop within 60 s of SIGTERM:\n%s", tail(p.out.String(), 30))
	}
	ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	require.True(b, ok, "no rusage for the pipeline process")
	var steady float64
	if at90 > at10 {
		steady = 0.8 * float64(n) / (at90 - at10).Seconds()
	}
	return kafkaRun{wall: wall, first: first, steady: steady, cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), peak: peak}
}

// kafkaBenchProfileAfter and kafkaBenchProfileFor place the CPU profile
// KAFKA_BENCH_PROFILE takes of a run: after start-up and group join, and
// short enough to end before the shortest side has read the backlog.
const (
	kafkaBenchProfileAfter = 3 * time.Second
	kafkaBenchProfileFor   = 6 * time.Second
)

// saveCPUProfile saves a CPU profile of kafkaBenchProfileFor from the
// binary serving debug endpoints at addr as path.
func saveCPUProfile(addr, path string) error {
	return saveURL(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(kafkaBenchProfileFor.Seconds())), path)
}

// saveHeap saves the heap profile of the binary serving debug endpoints at
// addr as path.pb.gz, and its text form with the runtime's figures as
// path.txt.
func saveHeap(addr, path string) error {
	for q, ext := range map[string]string{"": ".pb.gz", "?debug=1": ".txt"} {
		if err := saveURL("http://"+addr+"/debug/pprof/heap"+q, path+ext); err != nil {
			return err
		}
	}
	return nil
}

// saveURL saves the body GET url answers as path.
func saveURL(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o600)
}

// selfCPU is this process's user+sys CPU so far: over a run, mostly the
// kfake broker serving the binary's fetches.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// outputSent reads the rows the zerobus output had confirmed durable
// (zerobus_rows_sent_total) from the binary's /metrics, or for another
// output the engine's output_sent: that counts messages, and a record pack
// (pack_records) is one message of many rows.
func outputSent(addr string) (float64, bool) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
	if n, series := promSum(string(body), "zerobus_rows_sent_total"); series > 0 {
		return n, true
	}
	n, series := promSum(string(body), "output_sent")
	return n, series > 0
}

var consumedLine = regexp.MustCompile(`consumed (\d+) records`)

// kafkaBareMinWall is how long the bare poll loop runs at least: a
// whole-process run lasts 20 s or more, and one pass over the backlog
// takes the bare loop only a few seconds.
const kafkaBareMinWall = 20 * time.Second

// runBarePoll runs the emulator binary's kafka-consume (a bare franz-go
// poll loop that discards the records) over the backlog of n records, again
// and again, each pass from the start as a fresh consumer group of its own
// (group, group-2, …), until kafkaBareMinWall has passed (--min-duration):
// one process, so one start-up, like the input's runs, and each pass joins
// its group as the input's run does once. Its rate and CPU per record are
// counted over every record of every pass.
func runBarePoll(b *testing.B, emuBin, brokers, group string, n int) kafkaRun {
	b.Helper()
	began := time.Now()
	cmd := exec.Command(emuBin, "kafka-consume", "--brokers", brokers, "--topic", kafkaTopic, "--group", group, "--count", strconv.Itoa(n),
		"--min-duration", kafkaBareMinWall.String())
	out, err := cmd.CombinedOutput()
	wall := time.Since(began)
	require.NoError(b, err, "kafka-consume:\n%s", out)
	m := consumedLine.FindSubmatch(out)
	require.NotNil(b, m, "kafka-consume said:\n%s", out)
	got, _ := strconv.Atoi(string(m[1]))
	require.GreaterOrEqual(b, got, n)
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return kafkaRun{wall: wall, cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), records: got}
}
