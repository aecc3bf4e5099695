package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/benchreport"
	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Durability latency: how long a batch waits for its durable ack at half
// the output's maximum throughput when the service takes 50 ms to ack.
//
//	go test ./test/e2e/ -run '^$' -bench DurabilityLatency -benchtime 1x
//
// The emulator runs as its own process with --ack-only --ack-latency 50ms
// (every ack is sent 50 ms after its batch arrived). The output batches by
// period alone, `batching: {count: 0, byte_size: 0, period: 20ms}`, so at
// any rate the period is the flush trigger: the engine's batcher flushes
// 20 ms after its previous flush, and a batch holds the rows that arrived
// in those 20 ms. That is the batching period in effect; the benchmark
// checks it (batch_interval_ms, the run's time over its batches). Every
// other knob is at its default (a pool of 2 streams, batches round-robin).
//
// First the maximum: generate → zerobus as fast as it goes (steady rows/s
// between 10% and 90% of the rows acked). Then durabilityReps steady runs
// offer half of it: a producer sends the rows due every 2 ms as one input
// batch, each batch in its own goroutine, for durabilityWarm +
// durabilityRun; samples of the warm-up are dropped.
//
// The figures with the target are writebatch: the output's own WriteBatch,
// start to return (the engine's output_latency_ns timer around WriteBatch,
// captured raw by a recording metrics exporter): convert, submit, and the
// ack lane's wait. Target (issue 12 item 5): p50 and p99 <= 1.10 × (50 ms +
// 20 ms) = 77 ms. The batching period is in the bound as the issue states
// it; the lane itself does not spend it: it waits for the smallest
// unsettled offset and confirms every batch the durable watermark covers,
// so a batch is confirmed on its own ack, never held for the ack of a batch
// queued after it (which is what cost a period before, see
// docs/performance.md). lane_delivery is the lane's own submit → confirmed.
//
// For reference, each run is followed by bare_client: the same rows at the
// same rate, one batch per period, through our ingest client alone
// (convert, Submit, WaitDurable on the batch's last row; no engine, pool or
// lane) to the same emulator. What it shows above 50 ms is the machine's
// and the emulator's, not the output's. On a machine whose own scheduling
// tail is tens of ms (2 cores shared at load ~10), the absolute p99 says
// more about the machine than the output: stalls hold up the acks of
// both streams at once, for 100-500 ms. So the lane's own share
// has its line and target: ack_lane_lag, the engine's
// zerobus_ack_lane_lag timer, per batch the time from our client receiving
// the durable ack that covers it to its confirmation; target p99 <= 10% of
// (50 ms + 20 ms) = 7 ms. writebatch_p50/p99_over_bare (per run, the
// pipeline's quantile minus the bare client's measured right after it) are
// printed for the record: at p99 they swing with whichever run met a
// stall. row_to_durable (a producer call to its return: the wait in the
// batcher plus WriteBatch, about 50 ms + 20 ms) and the machine's load
// average are printed for the record too.
const (
	durabilityAckLatency = 50 * time.Millisecond
	durabilityPeriod     = 20 * time.Millisecond
	durabilityWarm       = 1 * time.Second
	durabilityRun        = 6 * time.Second
	durabilityReps       = 3
	durabilityMaxRows    = 400_000
)

// BenchmarkDurabilityLatency measures the maximum rate at 50 ms acks, then
// WriteBatch's latency at half of it, with the bare client's beside it.
func BenchmarkDurabilityLatency(b *testing.B) {
	httpURL, grpcURL, _ := startEmulatorProcess(b, "--ack-only", "--ack-latency", durabilityAckLatency.String(), "--table", eventsTable+":"+eventsCols)
	// Batching by period alone; ZEROBUS_BENCH_OUTPUT adds knobs, for
	// exploring them.
	out := zerobusOutput(grpcURL, httpURL, eventsTable, fmt.Sprintf(`batching:
  count: 0
  byte_size: 0
  period: %s
`, durabilityPeriod), benchOutputExtra())

	var maxRate float64
	var wb, lane, lag, e2e, bare [][]float64
	var load []float64
	var intervals []float64
	for range b.N {
		// The maximum, best of two.
		for range 2 {
			base := rowsAckedIn(b, httpURL, eventsTable)
			acked := func() float64 { return float64(rowsAckedIn(b, httpURL, eventsTable) - base) }
			maxRate = max(maxRate, runPipelineWith(b, durabilityMaxRows, benchInput(durabilityMaxRows), out, acked))
		}
		for rep := range durabilityReps {
			r := runSteady(b, fmt.Sprintf("durability-%d", rep), out, maxRate/2)
			wb, lane, e2e = append(wb, r.writeBatch), append(lane, r.delivery), append(e2e, r.rowToDurable)
			lag = append(lag, r.ackLag)
			load = append(load, loadAverage())
			intervals = append(intervals, r.batchInterval)
			bare = append(bare, runBareClient(b, httpURL, grpcURL, maxRate/2))
		}
	}

	ack := float64(durabilityAckLatency) / 1e6
	period := float64(durabilityPeriod) / 1e6
	benchreport.Report("durability/max_rows_per_s_at_50ms", []float64{maxRate}, benchreport.Info, 0, "")
	benchreport.Report("durability/offered_rows_per_s", []float64{maxRate / 2}, benchreport.Info, 0, "")
	benchreport.Report("durability/batch_interval_ms", intervals, benchreport.Info, 0, "ms")
	pct := func(runs [][]float64, q float64) []float64 {
		var v []float64
		for _, r := range runs {
			v = append(v, percentile(r, q))
		}
		return v
	}
	benchreport.Report("durability/machine_loadavg_1m", load, benchreport.Info, 0, "")
	bound := 1.10 * (ack + period)
	// over is, per run, the pipeline's q-quantile minus the bare client's
	// measured right after it.
	over := func(q float64) []float64 {
		a, b := pct(wb, q), pct(bare, q)
		v := make([]float64, len(a))
		for i := range a {
			v[i] = a[i] - b[i]
		}
		return v
	}
	wb50 := benchreport.Report("durability/writebatch_p50_ms", pct(wb, 0.50), benchreport.AtMost, bound, "ms")
	benchreport.Report("durability/writebatch_p90_ms", pct(wb, 0.90), benchreport.Info, 0, "ms")
	benchreport.Report("durability/lane_delivery_p99_ms", pct(lane, 0.99), benchreport.Info, 0, "ms")
	wb99 := benchreport.Report("durability/writebatch_p99_ms", pct(wb, 0.99), benchreport.AtMost, bound, "ms")
	benchreport.Report("durability/bare_client_p50_ms", pct(bare, 0.50), benchreport.Info, 0, "ms")
	benchreport.Report("durability/bare_client_p99_ms", pct(bare, 0.99), benchreport.Info, 0, "ms")
	benchreport.Report("durability/writebatch_p50_over_bare_ms", over(0.50), benchreport.Info, 0, "ms")
	benchreport.Report("durability/writebatch_p99_over_bare_ms", over(0.99), benchreport.Info, 0, "ms")
	added := benchreport.Report("durability/ack_lane_lag_p99_ms", pct(lag, 0.99), benchreport.AtMost, 0.10*(ack+period), "ms")
	benchreport.Report("durability/row_to_durable_p50_ms", pct(e2e, 0.50), benchreport.Info, 0, "ms")
	e99 := benchreport.Report("durability/row_to_durable_p99_ms", pct(e2e, 0.99), benchreport.Info, 0, "ms")
	b.ReportMetric(maxRate, "max_rows/s")
	b.ReportMetric(wb50, "writebatch_p50_ms")
	b.ReportMetric(wb99, "writebatch_p99_ms")
	b.ReportMetric(added, "ack_lane_lag_p99_ms")
	b.ReportMetric(e99, "row_to_durable_p99_ms")
}

// runBareClient is the reference of a steady run: the same rows at the
// same rate, one batch per batching period, through our ingest client alone
// (convert, Submit, WaitDurable on the batch's last row: no engine, no
// pool, no ack lane) on one stream to the same emulator, and returns each
// batch's latency in ms after the warm-up. What it shows above the
// injected 50 ms is the machine's and the emulator's, not the output's.
func runBareClient(b *testing.B, httpURL, grpcURL string, rate float64) []float64 {
	b.Helper()
	cols, err := typemap.ParseColumns(eventsCols)
	require.NoError(b, err)
	conv, err := arrowconv.New(cols, arrowconv.Options{})
	require.NoError(b, err)
	client, err := ingest.NewClient(ingest.Config{
		Endpoint: grpcURL, WorkspaceURL: httpURL, ClientID: emulator.DefaultClientID, ClientSecret: emulator.DefaultClientSecret,
	})
	require.NoError(b, err)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := client.OpenArrowStream(ctx, eventsTable, conv.Schema())
	require.NoError(b, err)
	defer s.Close()

	perBatch := max(int(rate*durabilityPeriod.Seconds()), 1)
	rows := make([][]byte, perBatch)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		lat      []float64
		failures atomic.Int64
		id       int64
	)
	began := time.Now()
	measureFrom := began.Add(durabilityWarm)
	tick := time.NewTicker(durabilityPeriod)
	for now := range tick.C {
		if now.Sub(began) >= durabilityWarm+durabilityRun {
			break
		}
		t0 := time.Now()
		for i := range rows {
			id++
			rows[i] = benchRowJSON(id)
		}
		res, err := conv.ConvertJSON(rows)
		require.NoError(b, err)
		require.Empty(b, res.RowErrors)
		span, err := s.Submit(ctx, res.Record)
		res.Record.Release()
		require.NoError(b, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.WaitDurable(ctx, span.To); err != nil {
				failures.Add(1)
				return
			}
			if t0.After(measureFrom) {
				mu.Lock()
				lat = append(lat, float64(time.Since(t0))/1e6)
				mu.Unlock()
			}
		}()
	}
	tick.Stop()
	wg.Wait()
	require.Zero(b, failures.Load(), "bare client: batches not durable")
	require.NotEmpty(b, lat)
	return lat
}

// benchRowJSON is row id of the events table as the steady runs send it:
// JSON bytes, the same row benchInput and benchInputRaw generate.
func benchRowJSON(id int64) []byte {
	return fmt.Appendf(nil, benchRowFormat, id, id)
}

// steadyRun is what one steady run measured, latencies in ms.
type steadyRun struct {
	writeBatch    []float64
	delivery      []float64 // the ack lane's submit → confirmed, per batch
	ackLag        []float64 // the ack lane's durable ack received → confirmed, per batch
	rowToDurable  []float64
	batchInterval float64 // ms of the run per output batch
}

// runSteady offers rate rows/s of events rows to a pipeline into output
// for durabilityWarm + durabilityRun and returns the latencies after the
// warm-up. id names its recording metrics exporter.
func runSteady(b *testing.B, id, output string, rate float64) steadyRun {
	b.Helper()
	sb := service.NewStreamBuilder()
	require.NoError(b, sb.SetLoggerYAML("level: warn"))
	require.NoError(b, sb.SetMetricsYAML("bench_recorder:\n  id: "+id+"\n"))
	produce, err := sb.AddBatchProducerFunc()
	require.NoError(b, err)
	require.NoError(b, sb.AddOutputYAML(output))
	s, err := sb.Build()
	require.NoError(b, err)
	rec := recorderFor(b, id)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		e2e      []float64
		failures atomic.Int64
		id64     int64
		sent     int64
	)
	began := time.Now()
	measureFrom := began.Add(durabilityWarm)
	tick := time.NewTicker(2 * time.Millisecond)
	for now := range tick.C {
		if now.Sub(began) >= durabilityWarm+durabilityRun {
			break
		}
		due := int64(rate*now.Sub(began).Seconds()) - sent
		if due <= 0 {
			continue
		}
		batch := make(service.MessageBatch, due)
		for i := range batch {
			id64++
			batch[i] = service.NewMessage(benchRowJSON(id64))
		}
		sent += due
		wg.Add(1)
		go func(t0 time.Time) {
			defer wg.Done()
			if err := produce(ctx, batch); err != nil {
				failures.Add(1)
				return
			}
			if t0.After(measureFrom) {
				mu.Lock()
				e2e = append(e2e, float64(time.Since(t0))/1e6)
				mu.Unlock()
			}
		}(time.Now())
	}
	tick.Stop()
	wg.Wait()
	took := time.Since(began)
	require.NoError(b, s.StopWithin(15*time.Second))
	cancel()
	<-done
	require.Zero(b, failures.Load(), "batches failed")

	r := steadyRun{
		rowToDurable: e2e,
		writeBatch:   rec.timingsMS("output_latency_ns", measureFrom),
		delivery:     rec.timingsMS("zerobus_delivery_latency", measureFrom),
		ackLag:       rec.timingsMS("zerobus_ack_lane_lag", measureFrom),
	}
	require.NotEmpty(b, r.writeBatch, "no WriteBatch timings recorded")
	require.NotEmpty(b, r.ackLag, "no ack lane lag recorded")
	batches := rec.count("output_batch_sent")
	require.Positive(b, batches, "no batches sent")
	r.batchInterval = float64(took) / 1e6 / float64(batches)
	return r
}

// loadAverage is the machine's 1-minute load average (0 when unknown): the
// tail of a latency is the machine's as much as the output's.
func loadAverage() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var v float64
	_, _ = fmt.Sscan(string(raw), &v)
	return v
}

// percentile is the q-quantile of v by the nearest rank.
func percentile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// benchRecorder is a metrics exporter that keeps every timing raw, with
// when it was recorded, and sums counters, whatever their labels: the
// benchmarks read the output's own metrics from it without the quantile
// approximations of a summary and can drop a warm-up.
type benchRecorder struct {
	mu       sync.Mutex
	timed    map[string][]timedSample
	counters map[string]*atomic.Int64
}

type timedSample struct {
	at time.Time
	ns int64
}

var benchRecorders sync.Map // id → *benchRecorder

func init() {
	spec := service.NewConfigSpec().Summary("Test only: records metrics in memory for benchmarks.").
		Field(service.NewStringField("id"))
	service.MustRegisterMetricsExporter("bench_recorder", spec, func(conf *service.ParsedConfig, _ *service.Logger) (service.MetricsExporter, error) {
		id, err := conf.FieldString("id")
		if err != nil {
			return nil, err
		}
		r := &benchRecorder{timed: map[string][]timedSample{}, counters: map[string]*atomic.Int64{}}
		benchRecorders.Store(id, r)
		return r, nil
	})
}

func recorderFor(b *testing.B, id string) *benchRecorder {
	b.Helper()
	r, ok := benchRecorders.Load(id)
	require.True(b, ok, "no bench_recorder %q built", id)
	return r.(*benchRecorder)
}

// timingsMS is the timer name's samples taken after from, in ms.
func (r *benchRecorder) timingsMS(name string, from time.Time) []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ms []float64
	for _, t := range r.timed[name] {
		if t.at.After(from) {
			ms = append(ms, float64(t.ns)/1e6)
		}
	}
	return ms
}

func (r *benchRecorder) count(name string) int64 {
	r.mu.Lock()
	c := r.counters[name]
	r.mu.Unlock()
	if c == nil {
		return 0
	}
	return c.Load()
}

type (
	recCounter func(int64)
	recTimer   func(int64)
	recGauge   struct{}
)

func (c recCounter) Incr(n int64)  { c(n) }
func (t recTimer) Timing(ns int64) { t(ns) }
func (recGauge) Set(int64)         {}

func (r *benchRecorder) NewCounterCtor(name string, _ ...string) service.MetricsExporterCounterCtor {
	r.mu.Lock()
	c := r.counters[name]
	if c == nil {
		c = &atomic.Int64{}
		r.counters[name] = c
	}
	r.mu.Unlock()
	return func(...string) service.MetricsExporterCounter { return recCounter(func(n int64) { c.Add(n) }) }
}

func (r *benchRecorder) NewTimerCtor(name string, _ ...string) service.MetricsExporterTimerCtor {
	return func(...string) service.MetricsExporterTimer {
		return recTimer(func(ns int64) {
			r.mu.Lock()
			r.timed[name] = append(r.timed[name], timedSample{at: time.Now(), ns: ns})
			r.mu.Unlock()
		})
	}
}

func (r *benchRecorder) NewGaugeCtor(string, ...string) service.MetricsExporterGaugeCtor {
	return func(...string) service.MetricsExporterGauge { return recGauge{} }
}

func (r *benchRecorder) Close(context.Context) error { return nil }
