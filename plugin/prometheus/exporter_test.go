package prometheus

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
		{"timer in seconds renamed from _ns", `output_latency_seconds_sum 0.25`},
		{"timer bucket", `output_latency_seconds_bucket{le="0.25"} 1`},
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
logger:
  level: none
`))
	s, err := b.Build()
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	for _, url := range []string{"http://" + addr + "/metrics", "http://" + httpAddr + "/metrics"} {
		require.Eventually(t, func() bool {
			resp, err := http.Get(url)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return strings.Contains(string(body), "output_sent") && strings.Contains(string(body), "go_goroutines")
		}, 5*time.Second, 50*time.Millisecond, url)
	}
	require.NoError(t, s.StopWithin(5*time.Second))
	<-done
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
	assert.Contains(t, rec.Body.String(), "go_goroutines", "go collector on by default")
	require.NoError(t, e.Close(context.Background()))
}
