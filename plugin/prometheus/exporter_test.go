package prometheus

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
)

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestExporterServesMetricKinds(t *testing.T) {
	e, err := New(Config{Address: "127.0.0.1:0", Path: "/metrics"}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close(context.Background()) })

	e.NewCounterCtor("zerobus_rows_sent_total", "table", "stream")("main.default.events", "0").Incr(7)
	e.NewCounterCtor("zerobus_rows_sent_total", "table", "stream")("main.default.events", "0").Incr(-3) // ignored
	e.NewGaugeCtor("zerobus_pending_offsets", "table", "stream")("main.default.events", "1").Set(42)
	e.NewTimerCtor("output_latency_ns")().Timing(int64(250 * time.Millisecond))
	e.NewCounterCtor("weird.name-with chars")().Incr(1)
	ratio := e.NewTimerCtor("zerobus_ack_coalesce_ratio", "table", "stream")("t", "0")
	ratio.Timing(1)
	ratio.Timing(3)
	ratio.Timing(40)

	body := scrape(t, "http://"+e.Addr().String()+"/metrics")
	tests := []struct{ name, want string }{
		{"counter with labels", `zerobus_rows_sent_total{stream="0",table="main.default.events"} 7`},
		{"gauge with labels", `zerobus_pending_offsets{stream="1",table="main.default.events"} 42`},
		{"timer keeps its _ns name, a summary of nanoseconds", `output_latency_ns_sum 2.5e+08`},
		{"summary quantile by default objectives", `output_latency_ns{quantile="0.99"} 2.5e+08`},
		{"sanitised name", `weird_name_with_chars 1`},
		{"a ratio is a distribution of raw values", `zerobus_ack_coalesce_ratio_sum{stream="0",table="t"} 44`},
		{"ratio buckets are powers of two", `zerobus_ack_coalesce_ratio_bucket{stream="0",table="t",le="4"} 2`},
		{"go collector on by default? (off in this Config)", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == "" {
				assert.NotContains(t, body, "go_goroutines")
				return
			}
			assert.Contains(t, body, tt.want)
		})
	}
}

func TestExporterLabelConflictDoesNotPanic(t *testing.T) {
	e, err := New(Config{Address: "127.0.0.1:0", Path: "/m"}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close(context.Background()) })

	e.NewCounterCtor("dup", "a")("x").Incr(1)
	// Same name, different label keys: recorded but not exported.
	e.NewCounterCtor("dup", "b", "c")("y", "z").Incr(5)
	// Same name, different kind.
	e.NewGaugeCtor("dup")().Set(9)

	body := scrape(t, "http://"+e.Addr().String()+"/m")
	assert.Contains(t, body, `dup{a="x"} 1`)
	assert.NotContains(t, body, `b="y"`)
	assert.NotContains(t, body, "dup 9")
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name    string
		conf    Config
		wantErr string
	}{
		{"relative path", Config{Address: "127.0.0.1:0", Path: "metrics"}, "field path"},
		{"unsorted buckets", Config{Address: "127.0.0.1:0", Path: "/metrics", Buckets: []float64{1, 0.5}}, "field histogram_buckets"},
		{"bad address", Config{Address: "not-an-address", Path: "/metrics"}, "field address"},
		{"quantile above 1", Config{Path: "/metrics", Objectives: map[float64]float64{1.5: 0.01}}, "field summary_quantiles_objectives"},
		{"negative error", Config{Path: "/metrics", Objectives: map[float64]float64{0.5: -0.1}}, "field summary_quantiles_objectives"},
		{"negative push interval", Config{Path: "/metrics", PushURL: "http://127.0.0.1:1", PushInterval: -time.Second}, "field push_interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.conf, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestRegisteredInPipeline(t *testing.T) {
	// Served both on the Benthos HTTP server and on a dedicated listener.
	probe, err := New(Config{Address: "127.0.0.1:0", Path: "/metrics"}, nil)
	require.NoError(t, err)
	addr := probe.Addr().String()
	require.NoError(t, probe.Close(context.Background()))
	probe2, err := New(Config{Address: "127.0.0.1:0", Path: "/metrics"}, nil)
	require.NoError(t, err)
	httpAddr := probe2.Addr().String()
	require.NoError(t, probe2.Close(context.Background()))

	b := service.NewStreamBuilder()
	require.NoError(t, b.SetYAML(`
http:
  enabled: true
  address: `+httpAddr+`
input:
  generate:
    interval: 10ms
    mapping: 'root = "x"'
output:
  drop: {}
metrics:
  prometheus:
    address: `+addr+`
    add_go_metrics: true
logger:
  level: none
`))
	s, err := b.Build()
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// stop stops the stream once: at the end of the test, or, after a
	// failed assertion, in the cleanup, so that the stream does not keep
	// serving on its ports (and generating) while the other tests run.
	stop := sync.OnceValue(func() error {
		err := s.StopWithin(10 * time.Second)
		cancel()
		<-done
		return err
	})
	t.Cleanup(func() { _ = stop() })

	for _, url := range []string{"http://" + addr + "/metrics", "http://" + httpAddr + "/metrics"} {
		var last atomic.Value // what the last poll saw (the poller may still run when Eventually gives up)
		if !assert.Eventually(t, func() bool {
			resp, err := http.Get(url)
			if err != nil {
				last.Store(err.Error())
				return false
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			last.Store(fmt.Sprintf("HTTP %d, %d bytes, output_sent %v, go_goroutines %v", resp.StatusCode, len(body),
				strings.Contains(string(body), "output_sent"), strings.Contains(string(body), "go_goroutines")))
			return strings.Contains(string(body), "output_sent") && strings.Contains(string(body), "go_goroutines")
		}, 15*time.Second, 50*time.Millisecond) {
			t.Fatalf("%s never served output_sent and go_goroutines (last: %v)", url, last.Load())
		}
	}
	require.NoError(t, stop())
}

func TestNoDedicatedListenerByDefault(t *testing.T) {
	pc, err := Spec().ParseYAML("{}", nil)
	require.NoError(t, err)
	c, err := parseConfig(pc)
	require.NoError(t, err)
	e, err := New(c, nil)
	require.NoError(t, err)
	assert.Nil(t, e.Addr())
	e.NewCounterCtor("c")().Incr(2)
	rec := httptest.NewRecorder()
	e.HandlerFunc()(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Contains(t, rec.Body.String(), "c 2")
	assert.NotContains(t, rec.Body.String(), "go_goroutines", "go collector off by default, as in Redpanda Connect")
	assert.NotContains(t, rec.Body.String(), "process_resident_memory_bytes", "process collector off by default, as in Redpanda Connect")
	require.NoError(t, e.Close(context.Background()))
}

func TestHistogramTimingInSeconds(t *testing.T) {
	e, err := New(Config{Path: "/metrics", UseHistogramTiming: true, Buckets: []float64{0.1, 0.5, 1}}, nil)
	require.NoError(t, err)
	e.NewTimerCtor("output_latency_ns", "label")("out").Timing(int64(250 * time.Millisecond))
	e.NewTimerCtor("zerobus_delivery_latency")().Timing(int64(2 * time.Second))
	ratio := e.NewTimerCtor("zerobus_ack_coalesce_ratio")()
	ratio.Timing(3)
	ratio.Timing(40)

	rec := httptest.NewRecorder()
	e.HandlerFunc()(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`output_latency_ns_sum{label="out"} 0.25`,          // seconds, name kept
		`output_latency_ns_bucket{label="out",le="0.1"} 0`, // the configured buckets
		`output_latency_ns_bucket{label="out",le="0.5"} 1`, //
		`zerobus_delivery_latency_bucket{le="+Inf"} 1`,     // a timer without _ns
		`zerobus_delivery_latency_sum 2`,                   //
		`zerobus_ack_coalesce_ratio_bucket{le="4"} 1`,      // ratio: raw values, ratio buckets
		`zerobus_ack_coalesce_ratio_sum 43`,                //
	} {
		assert.Contains(t, body, want)
	}
	assert.NotContains(t, body, "_seconds", "no renaming: names stay as Redpanda Connect exports them")
}

func TestRatioIsAHistogramWithSummaryTiming(t *testing.T) {
	e, err := New(Config{Path: "/metrics"}, nil)
	require.NoError(t, err)
	e.NewTimerCtor("zerobus_ack_coalesce_ratio", "table", "stream")("t", "0").Timing(5)
	rec := httptest.NewRecorder()
	e.HandlerFunc()(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Contains(t, rec.Body.String(), `zerobus_ack_coalesce_ratio_bucket{stream="0",table="t",le="8"} 1`)
	assert.NotContains(t, rec.Body.String(), `zerobus_ack_coalesce_ratio{`, "no summary quantile series for a ratio")
}

// redpandaConnectConfig is the advanced prometheus config of Redpanda
// Connect's documentation, every field set to a non-default value.
const redpandaConnectConfig = `
use_histogram_timing: true
histogram_buckets: [0.01, 0.1, 1]
summary_quantiles_objectives:
  - quantile: 0.5
    error: 0.05
  - quantile: 0.75
    error: 0.02
add_process_metrics: true
add_go_metrics: true
push_url: http://127.0.0.1:9091
push_interval: 15s
push_job_name: my_job
push_basic_auth:
  username: u
  password: p
file_output_path: /tmp/metrics.prom
`

func TestRedpandaConnectFieldsParse(t *testing.T) {
	pc, err := Spec().ParseYAML(redpandaConnectConfig, nil)
	require.NoError(t, err)
	c, err := parseConfig(pc)
	require.NoError(t, err)
	assert.Equal(t, Config{
		Address:            "",
		Path:               "/metrics",
		UseHistogramTiming: true,
		Buckets:            []float64{0.01, 0.1, 1},
		Objectives:         map[float64]float64{0.5: 0.05, 0.75: 0.02},
		GoMetrics:          true,
		ProcessMetrics:     true,
		PushURL:            "http://127.0.0.1:9091",
		PushInterval:       15 * time.Second,
		PushJobName:        "my_job",
		PushUsername:       "u",
		PushPassword:       "p",
		FileOutputPath:     "/tmp/metrics.prom",
	}, c)

	// The defaults are Redpanda Connect's.
	pc, err = Spec().ParseYAML("{}", nil)
	require.NoError(t, err)
	c, err = parseConfig(pc)
	require.NoError(t, err)
	assert.False(t, c.UseHistogramTiming)
	assert.Equal(t, DefaultObjectives, c.Objectives)
	assert.False(t, c.GoMetrics)
	assert.False(t, c.ProcessMetrics)
	assert.Equal(t, DefaultPushJobName, c.PushJobName)
	assert.Empty(t, c.PushURL)
	assert.Zero(t, c.PushInterval)
	assert.Empty(t, c.FileOutputPath)

	// And the whole block lints clean inside a Benthos config, as does an
	// unknown field fail to (the linter sees this exporter's spec).
	linter := service.GlobalEnvironment().FullConfigSchema("", "").NewStreamConfigLinter()
	lints, err := linter.LintYAML([]byte("metrics:\n  prometheus:\n" + indent(redpandaConnectConfig, "    ")))
	require.NoError(t, err)
	assert.Empty(t, lints)
	lints, err = linter.LintYAML([]byte("metrics:\n  prometheus:\n    no_such_field: true\n"))
	require.NoError(t, err)
	require.Len(t, lints, 1)
	assert.Contains(t, lints[0].What, "no_such_field")
}

func indent(s, pre string) string {
	lines := strings.Split(strings.TrimPrefix(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = pre + l
		}
	}
	return strings.Join(lines, "\n")
}

func TestPushGatewayAndFileOutput(t *testing.T) {
	type pushed struct {
		method, path, user, pass, body string
	}
	got := make(chan pushed, 16)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u, p, _ := r.BasicAuth()
		got <- pushed{r.Method, r.URL.Path, u, p, string(b)}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(gw.Close)
	file := t.TempDir() + "/metrics.prom"

	e, err := New(Config{
		Path: "/metrics", PushURL: gw.URL, PushInterval: 20 * time.Millisecond, PushJobName: "zb",
		PushUsername: "user", PushPassword: "pw", FileOutputPath: file,
	}, nil)
	require.NoError(t, err)
	e.NewCounterCtor("zerobus_rows_sent_total", "table")("t").Incr(3)

	select {
	case p := <-got:
		assert.Equal(t, http.MethodPut, p.method)
		assert.Equal(t, "/metrics/job/zb", p.path)
		assert.Equal(t, "user", p.user)
		assert.Equal(t, "pw", p.pass)
	case <-time.After(5 * time.Second):
		t.Fatal("no periodic push within 5s")
	}

	e.NewCounterCtor("zerobus_rows_sent_total", "table")("t").Incr(4)
	require.NoError(t, e.Close(context.Background()))
	// The last push, at Close, carries the final value. (Periodic pushes
	// may have queued before it: drain to the last one.)
	var last pushed
	for done := false; !done; {
		select {
		case last = <-got:
		default:
			done = true
		}
	}
	assert.NotEmpty(t, last.body, "a push at shutdown")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Contains(t, string(b), `zerobus_rows_sent_total{table="t"} 7`)
	require.NoError(t, e.Close(context.Background()), "Close is idempotent")
}

func TestPushFailureDoesNotFailClose(t *testing.T) {
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(gw.Close)
	e, err := New(Config{Path: "/metrics", PushURL: gw.URL}, nil)
	require.NoError(t, err)
	assert.NoError(t, e.Close(context.Background()))
}
