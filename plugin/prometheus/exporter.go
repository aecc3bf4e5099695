// Package prometheus registers a "prometheus" metrics exporter with Benthos.
//
// Benthos v4 core ships no Prometheus exporter (and `prometheus` is the
// engine's default metrics type), so a custom binary must bring its own. This
// one keeps every metric in a private prometheus/client_golang registry and
// serves it in the Prometheus text format on the Benthos HTTP server's
// /metrics and /stats endpoints (default 0.0.0.0:4195), and optionally on a
// dedicated listener of its own (`address`, `path`).
//
// Mapping of Benthos metric kinds:
//   - counters become Prometheus counters;
//   - gauges become Prometheus gauges;
//   - timers become histograms observed in seconds (Benthos reports timings in
//     nanoseconds); a name ending in "_ns" is exported with "_seconds" instead
//     so that the unit in the name stays true; a name ending in "_ratio" is a
//     distribution of plain numbers carried as a timer (the Benthos API has
//     no plain histogram) and is observed as is, with RatioBuckets.
//
// Metric names are sanitised to the Prometheus name grammar (any character
// outside [a-zA-Z0-9_:] becomes "_").
package prometheus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redpanda-data/benthos/v4/public/service"
)

// Config field names.
const (
	fieldAddress          = "address"
	fieldPath             = "path"
	fieldGoMetrics        = "add_go_metrics"
	fieldProcessMetrics   = "add_process_metrics"
	fieldHistogramBuckets = "histogram_buckets"
)

// DefaultBuckets are the timer histogram buckets in seconds: from 1 ms to
// 60 s, which covers ingest round trips (about 150 ms P50 on Zerobus) and
// slow acknowledgements alike.
var DefaultBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Spec returns the configuration spec of the exporter.
func Spec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Summary("Serves the pipeline's metrics in the Prometheus text format on a dedicated HTTP listener.").
		Description(`
Every metric emitted through the Benthos metrics API (engine metrics such as `+"`output_sent`"+` and plugin
metrics such as `+"`zerobus_pending_offsets`"+`) is kept in a private registry and served at
`+"`address` + `path`"+`. Counters and gauges map directly; timers are histograms in seconds (a name ending in
`+"`_ns`"+` is exported ending in `+"`_seconds`"+`).`).
		Fields(
			service.NewStringField(fieldAddress).
				Description("A host:port for a dedicated metrics listener, in addition to the `/metrics` endpoint of the Benthos HTTP server. Empty means no dedicated listener. Use `127.0.0.1:PORT` to keep it off the network.").
				Default("").
				Example("127.0.0.1:9464").
				Example("0.0.0.0:9464"),
			service.NewStringField(fieldPath).
				Description("The URL path of the dedicated listener.").
				Default("/metrics"),
			service.NewBoolField(fieldGoMetrics).
				Description("Also export the Go runtime collector (goroutines, GC, heap).").
				Advanced().Default(true),
			service.NewBoolField(fieldProcessMetrics).
				Description("Also export the process collector (RSS, CPU, open file descriptors).").
				Advanced().Default(true),
			service.NewFloatListField(fieldHistogramBuckets).
				Description("Histogram buckets, in seconds, for timer metrics. Empty means the built-in defaults (1 ms to 60 s).").
				Advanced().Default([]any{}),
		)
}

func init() {
	service.MustRegisterMetricsExporter("prometheus", Spec(), func(conf *service.ParsedConfig, log *service.Logger) (service.MetricsExporter, error) {
		c, err := parseConfig(conf)
		if err != nil {
			return nil, err
		}
		return New(c, log)
	})
}

// Config is the parsed exporter configuration.
type Config struct {
	Address        string
	Path           string
	GoMetrics      bool
	ProcessMetrics bool
	Buckets        []float64
}

func parseConfig(conf *service.ParsedConfig) (Config, error) {
	var c Config
	var err error
	if c.Address, err = conf.FieldString(fieldAddress); err != nil {
		return c, err
	}
	if c.Path, err = conf.FieldString(fieldPath); err != nil {
		return c, err
	}
	if c.GoMetrics, err = conf.FieldBool(fieldGoMetrics); err != nil {
		return c, err
	}
	if c.ProcessMetrics, err = conf.FieldBool(fieldProcessMetrics); err != nil {
		return c, err
	}
	if c.Buckets, err = conf.FieldFloatList(fieldHistogramBuckets); err != nil {
		return c, err
	}
	return c, nil
}

// Exporter is a service.MetricsExporter backed by a private Prometheus
// registry and served by its own HTTP server.
type Exporter struct {
	reg     *prometheus.Registry
	buckets []float64
	log     *service.Logger

	mu         sync.Mutex
	counters   map[string]*prometheus.CounterVec
	gauges     map[string]*prometheus.GaugeVec
	histograms map[string]*prometheus.HistogramVec
	labelKeys  map[string][]string

	handler  http.Handler
	srv      *http.Server
	listener net.Listener
	done     chan struct{}
}

// New creates the exporter and, when c.Address is set, starts serving
// c.Path on it. The listener is bound before New returns, so a bad address
// fails the config rather than surfacing later in a log line.
func New(c Config, log *service.Logger) (*Exporter, error) {
	if c.Path == "" || !strings.HasPrefix(c.Path, "/") {
		return nil, fmt.Errorf("field %s: must start with '/', got %q", fieldPath, c.Path)
	}
	buckets := c.Buckets
	if len(buckets) == 0 {
		buckets = DefaultBuckets
	}
	for i := 1; i < len(buckets); i++ {
		if buckets[i] <= buckets[i-1] {
			return nil, fmt.Errorf("field %s: buckets must be strictly increasing, index %d (%v) <= index %d (%v)", fieldHistogramBuckets, i, buckets[i], i-1, buckets[i-1])
		}
	}
	e := &Exporter{
		reg:        prometheus.NewRegistry(),
		buckets:    buckets,
		log:        log,
		counters:   map[string]*prometheus.CounterVec{},
		gauges:     map[string]*prometheus.GaugeVec{},
		histograms: map[string]*prometheus.HistogramVec{},
		labelKeys:  map[string][]string{},
	}
	if c.GoMetrics {
		e.reg.MustRegister(collectors.NewGoCollector())
	}
	if c.ProcessMetrics {
		e.reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	e.handler = promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{})
	if c.Address == "" {
		return e, nil
	}
	ln, err := net.Listen("tcp", c.Address)
	if err != nil {
		return nil, fmt.Errorf("field %s: listen on %q: %w", fieldAddress, c.Address, err)
	}
	mux := http.NewServeMux()
	mux.Handle(c.Path, e.handler)
	e.listener = ln
	e.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	e.done = make(chan struct{})
	go func() {
		defer close(e.done)
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && log != nil {
			log.Errorf("prometheus exporter: serve %s: %v", ln.Addr(), err)
		}
	}()
	if log != nil {
		log.Infof("prometheus exporter serving %s on %s", c.Path, ln.Addr())
	}
	return e, nil
}

// HandlerFunc serves the metrics; the Benthos HTTP server mounts it at
// /metrics and /stats.
func (e *Exporter) HandlerFunc() http.HandlerFunc { return e.handler.ServeHTTP }

// Addr returns the address the dedicated listener is bound to (useful with
// port 0), nil without one.
func (e *Exporter) Addr() net.Addr {
	if e.listener == nil {
		return nil
	}
	return e.listener.Addr()
}

// Registry returns the registry metrics are kept in.
func (e *Exporter) Registry() *prometheus.Registry { return e.reg }

// SanitizeName maps a Benthos metric name onto the Prometheus name grammar.
func SanitizeName(name string) string {
	var b strings.Builder
	for i, r := range name {
		ok := r == '_' || r == ':' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
		if ok {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

func sanitizeLabels(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = SanitizeName(k)
	}
	return out
}

// sameLabels reports whether keys match the label keys name was first
// registered with. Prometheus refuses one name with two label sets, so a
// mismatching registration is served by an unregistered vector (recorded but
// never scraped) and a warning names the metric.
func (e *Exporter) sameLabels(name string, keys []string) bool {
	prev := e.labelKeys[name]
	if strings.Join(prev, ",") == strings.Join(keys, ",") {
		return true
	}
	if e.log != nil {
		e.log.Warnf("prometheus exporter: metric %s registered with labels %v and again with %v; the second set is not exported", name, prev, keys)
	}
	return false
}

// vector returns the cached vector of name, or creates one with mk and
// registers it.
func vector[V prometheus.Collector](e *Exporter, cache map[string]V, name string, keys []string, mk func() V) V {
	e.mu.Lock()
	defer e.mu.Unlock()
	if vec, ok := cache[name]; ok {
		if e.sameLabels(name, keys) {
			return vec
		}
		return mk()
	}
	vec := mk()
	if e.register(name, vec) {
		cache[name] = vec
		e.labelKeys[name] = keys
	}
	return vec
}

// NewCounterCtor implements service.MetricsExporter.
func (e *Exporter) NewCounterCtor(name string, labelKeys ...string) service.MetricsExporterCounterCtor {
	name = SanitizeName(name)
	keys := sanitizeLabels(labelKeys)
	vec := vector(e, e.counters, name, keys, func() *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: "Benthos counter " + name}, keys)
	})
	return func(labelValues ...string) service.MetricsExporterCounter {
		return counter{vec.WithLabelValues(labelValues...)}
	}
}

// NewGaugeCtor implements service.MetricsExporter.
func (e *Exporter) NewGaugeCtor(name string, labelKeys ...string) service.MetricsExporterGaugeCtor {
	name = SanitizeName(name)
	keys := sanitizeLabels(labelKeys)
	vec := vector(e, e.gauges, name, keys, func() *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: "Benthos gauge " + name}, keys)
	})
	return func(labelValues ...string) service.MetricsExporterGauge {
		return gauge{vec.WithLabelValues(labelValues...)}
	}
}

// NewTimerCtor implements service.MetricsExporter.
func (e *Exporter) NewTimerCtor(name string, labelKeys ...string) service.MetricsExporterTimerCtor {
	name = SanitizeName(name)
	if strings.HasSuffix(name, "_ns") {
		name = strings.TrimSuffix(name, "_ns") + "_seconds"
	}
	keys := sanitizeLabels(labelKeys)
	if strings.HasSuffix(name, "_ratio") {
		// A ratio carried as a timer (the Benthos API has no plain
		// histogram): exported as the raw value, not as a duration.
		vec := vector(e, e.histograms, name, keys, func() *prometheus.HistogramVec {
			return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: "Benthos distribution " + name, Buckets: RatioBuckets}, keys)
		})
		return func(labelValues ...string) service.MetricsExporterTimer {
			return rawTimer{vec.WithLabelValues(labelValues...)}
		}
	}
	vec := vector(e, e.histograms, name, keys, func() *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: "Benthos timer " + name + " (seconds)", Buckets: e.buckets}, keys)
	})
	return func(labelValues ...string) service.MetricsExporterTimer {
		return timer{vec.WithLabelValues(labelValues...)}
	}
}

// RatioBuckets are the buckets of timers named *_ratio (such as
// zerobus_ack_coalesce_ratio): powers of two from 1 to 1024.
var RatioBuckets = prometheus.ExponentialBuckets(1, 2, 11)

// register adds c to the registry; a name clash across kinds (a counter and
// a gauge of one name) is logged and the collector left unexported.
func (e *Exporter) register(name string, c prometheus.Collector) bool {
	if err := e.reg.Register(c); err != nil {
		if e.log != nil {
			e.log.Warnf("prometheus exporter: metric %s not exported: %v", name, err)
		}
		return false
	}
	return true
}

// Close stops the dedicated listener, waiting at most until ctx is done.
func (e *Exporter) Close(ctx context.Context) error {
	if e.srv == nil {
		return nil
	}
	err := e.srv.Shutdown(ctx)
	select {
	case <-e.done:
	case <-ctx.Done():
	}
	return err
}

type counter struct{ c prometheus.Counter }

// Incr adds n; a negative n is ignored (a Prometheus counter panics on it).
func (c counter) Incr(n int64) {
	if n > 0 {
		c.c.Add(float64(n))
	}
}

// IncrFloat64 adds n; a negative n is ignored.
func (c counter) IncrFloat64(n float64) {
	if n > 0 {
		c.c.Add(n)
	}
}

type gauge struct{ g prometheus.Gauge }

func (g gauge) Set(v int64)          { g.g.Set(float64(v)) }
func (g gauge) SetFloat64(v float64) { g.g.Set(v) }

type timer struct{ h prometheus.Observer }

func (t timer) Timing(ns int64) { t.h.Observe(float64(ns) / float64(time.Second)) }

// rawTimer observes a timer's value as it is (a ratio, not nanoseconds).
type rawTimer struct{ h prometheus.Observer }

func (t rawTimer) Timing(v int64) { t.h.Observe(float64(v)) }
