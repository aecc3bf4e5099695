// Package prometheus registers a "prometheus" metrics exporter with Benthos.
//
// Benthos v4 core ships no Prometheus exporter (and `prometheus` is the
// engine's default metrics type), so a custom binary must bring its own. This
// one keeps every metric in a private prometheus/client_golang registry and
// serves it in the Prometheus text format on the Benthos HTTP server's
// /metrics and /stats endpoints (default 0.0.0.0:4195), and optionally on a
// dedicated listener of its own (`address`, `path`).
//
// Configs and dashboards carry over from Redpanda Connect: the exporter
// accepts the field set of Redpanda Connect's `prometheus` metrics exporter
// (use_histogram_timing, histogram_buckets, summary_quantiles_objectives,
// add_process_metrics, add_go_metrics, push_url, push_interval, push_job_name,
// push_basic_auth, file_output_path) with the same defaults, and names and
// scales timers the same way. Redpanda Connect's module licence does not let
// us reuse its code, so this is written by hand from its documented config
// and naming (docs.redpanda.com/connect/components/metrics/prometheus and
// .../metrics/about, "Timings"):
//   - counters become Prometheus counters, gauges Prometheus gauges;
//   - a timer keeps its name (engine timers end in "_ns"); by default it is a
//     summary of nanoseconds with the quantile objectives of
//     summary_quantiles_objectives; with use_histogram_timing it is a
//     histogram whose observations are converted to seconds (the name is not
//     changed, so a "_ns" timer then carries seconds, as in Redpanda Connect);
//   - project rule, not Redpanda Connect's: a timer named "*_ratio" is a
//     distribution of plain numbers carried as a timer (the Benthos API has
//     no plain histogram), always exported as a histogram of the raw values
//     with RatioBuckets, whatever use_histogram_timing says.
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
	"github.com/prometheus/client_golang/prometheus/push"
	"github.com/redpanda-data/benthos/v4/public/service"
)

// Config field names. address and path are this exporter's own; the others
// are Redpanda Connect's.
const (
	fieldAddress            = "address"
	fieldPath               = "path"
	fieldUseHistogramTiming = "use_histogram_timing"
	fieldHistogramBuckets   = "histogram_buckets"
	fieldSummaryObjectives  = "summary_quantiles_objectives"
	fieldObjQuantile        = "quantile"
	fieldObjError           = "error"
	fieldProcessMetrics     = "add_process_metrics"
	fieldGoMetrics          = "add_go_metrics"
	fieldPushURL            = "push_url"
	fieldPushInterval       = "push_interval"
	fieldPushJobName        = "push_job_name"
	fieldPushBasicAuth      = "push_basic_auth"
	fieldPushUsername       = "username"
	fieldPushPassword       = "password"
	fieldFileOutputPath     = "file_output_path"
)

// DefaultBuckets are the timer histogram buckets in seconds when
// histogram_buckets is empty: from 1 ms to 60 s, which covers ingest round
// trips (about 150 ms P50 on Zerobus) and slow acknowledgements alike. This
// deliberately differs from Redpanda Connect's empty default
// (prometheus.DefBuckets, 5 ms to 10 s): a durable ack can take longer than
// 10 s under a slow service, and a histogram_quantile over buckets that stop
// at 10 s would hide exactly that.
var DefaultBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// DefaultObjectives are the summary quantile objectives (quantile → allowed
// error) when summary_quantiles_objectives is not set, as in Redpanda Connect.
var DefaultObjectives = map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001}

// DefaultPushJobName is the job name pushed to a Push Gateway, as in
// Redpanda Connect.
const DefaultPushJobName = "benthos_push"

// Spec returns the configuration spec of the exporter.
func Spec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Summary("Serves the pipeline's metrics in the Prometheus text format on the Benthos HTTP server's `/metrics` and `/stats` endpoints; accepts Redpanda Connect's `prometheus` config.").
		Description(`
Every metric emitted through the Benthos metrics API (engine metrics such as `+"`output_sent`"+` and plugin
metrics such as `+"`zerobus_pending_offsets`"+`) is kept in a private registry and served on the HTTP server
(default `+"`0.0.0.0:4195`"+`) at `+"`/metrics`"+` and `+"`/stats`"+`, and also at `+"`address` + `path`"+` when `+"`address`"+` is set.

### Carried over from Redpanda Connect

The fields of Redpanda Connect's `+"`prometheus`"+` metrics exporter are accepted with the same defaults and meaning,
so its configs and dashboards carry over. The Redpanda Connect module's licence does not allow reusing its
code: this exporter was written by hand to match its documented config and naming.

- Counters and gauges map directly.
- Timers keep their name (the engine's end in `+"`_ns`"+`, such as `+"`output_latency_ns`"+`). By default a timer is a
  **summary of nanoseconds** with the quantiles of `+"`summary_quantiles_objectives`"+`. With
  `+"`use_histogram_timing: true`"+` it is a **histogram in seconds** (buckets from `+"`histogram_buckets`"+`); the name is
  not changed, so `+"`output_latency_ns_bucket`"+` then counts seconds, exactly as in Redpanda Connect.
- Differences: `+"`histogram_buckets: []`"+` means 1 ms to 60 s here (Redpanda Connect: the client library's 5 ms to
  10 s), because a durable ack can take longer than 10 s; `+"`address`"+` and `+"`path`"+` are this exporter's own.

### Ratios

A timer whose name ends in `+"`_ratio`"+` (such as `+"`zerobus_ack_coalesce_ratio`"+`) is a distribution of plain numbers
carried as a timer, because the Benthos metrics API has no plain histogram. It is always a histogram of the
raw values with the buckets 1, 2, 4, … 1024, whatever `+"`use_histogram_timing`"+` says, so
`+"`histogram_quantile(0.5, sum by (le) (rate(zerobus_ack_coalesce_ratio_bucket[5m])))`"+` works.

### Push gateway and file output

With `+"`push_url`"+`, the metrics are pushed (HTTP PUT, the job `+"`push_job_name`"+`) to a Prometheus Push Gateway
once at shutdown and, with `+"`push_interval`"+`, periodically; do not include the `+"`/metrics/job/...`"+` path in the
URL. With `+"`file_output_path`"+`, all metrics are written to that file in the text format at shutdown. A failed
push or write is logged; it does not fail the pipeline.`).
		Fields(
			service.NewStringField(fieldAddress).
				Description("A host:port for a dedicated metrics listener, in addition to the `/metrics` endpoint of the Benthos HTTP server. Empty means no dedicated listener. Use `127.0.0.1:PORT` to keep it off the network. Not a Redpanda Connect field.").
				Default("").
				Example("127.0.0.1:9464").
				Example("0.0.0.0:9464"),
			service.NewStringField(fieldPath).
				Description("The URL path of the dedicated listener. Not a Redpanda Connect field.").
				Default("/metrics"),
			service.NewBoolField(fieldUseHistogramTiming).
				Description("Export timers as histograms in seconds instead of summaries in nanoseconds. Histograms aggregate across instances (`histogram_quantile` over `sum by (le)`); summaries do not. Timers named `*_ratio` are histograms either way.").
				Advanced().Default(false),
			service.NewFloatListField(fieldHistogramBuckets).
				Description("Histogram buckets, in seconds, for timers when `use_histogram_timing` is true. Empty means 1 ms to 60 s.").
				Advanced().Default([]any{}),
			service.NewObjectListField(fieldSummaryObjectives,
				service.NewFloatField(fieldObjQuantile).Description("The quantile, in [0, 1].").Default(0.0),
				service.NewFloatField(fieldObjError).Description("The allowed absolute error of the quantile's rank, in [0, 1].").Default(0.0),
			).
				Description("The quantiles of timer summaries when `use_histogram_timing` is false.").
				Advanced().
				Default([]any{
					map[string]any{"quantile": 0.5, "error": 0.05},
					map[string]any{"quantile": 0.9, "error": 0.01},
					map[string]any{"quantile": 0.99, "error": 0.001},
				}),
			service.NewBoolField(fieldProcessMetrics).
				Description("Also export the process collector (RSS, CPU, open file descriptors).").
				Advanced().Default(false),
			service.NewBoolField(fieldGoMetrics).
				Description("Also export the Go runtime collector (goroutines, GC, heap).").
				Advanced().Default(false),
			service.NewURLField(fieldPushURL).
				Description("A Prometheus Push Gateway to push the metrics to at shutdown (and every `push_interval`), without the `/metrics/job/...` path.").
				Advanced().Optional().
				Example("http://127.0.0.1:9091"),
			service.NewStringField(fieldPushInterval).
				Description("The period between pushes to `push_url`, a Go duration. Empty means one push at shutdown only.").
				Advanced().Optional().
				Example("15s"),
			service.NewStringField(fieldPushJobName).
				Description("The job name of the pushed metrics.").
				Advanced().Default(DefaultPushJobName),
			service.NewObjectField(fieldPushBasicAuth,
				service.NewStringField(fieldPushUsername).Description("The Basic Authentication username.").Default(""),
				service.NewStringField(fieldPushPassword).Description("The Basic Authentication password.").Secret().Default(""),
			).
				Description("HTTP Basic Authentication for the Push Gateway; used when the username is set.").
				Advanced(),
			service.NewStringField(fieldFileOutputPath).
				Description("A file to write all metrics to, in the Prometheus text format, at shutdown. Empty means none.").
				Advanced().Default(""),
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
	Address            string
	Path               string
	UseHistogramTiming bool
	Buckets            []float64
	// Objectives maps a summary quantile to its allowed error; nil means
	// DefaultObjectives.
	Objectives     map[float64]float64
	GoMetrics      bool
	ProcessMetrics bool
	PushURL        string
	PushInterval   time.Duration
	PushJobName    string
	PushUsername   string
	PushPassword   string
	FileOutputPath string
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
	if c.UseHistogramTiming, err = conf.FieldBool(fieldUseHistogramTiming); err != nil {
		return c, err
	}
	if c.Buckets, err = conf.FieldFloatList(fieldHistogramBuckets); err != nil {
		return c, err
	}
	objs, err := conf.FieldObjectList(fieldSummaryObjectives)
	if err != nil {
		return c, err
	}
	c.Objectives = make(map[float64]float64, len(objs))
	for i, o := range objs {
		q, err := o.FieldFloat(fieldObjQuantile)
		if err != nil {
			return c, fmt.Errorf("field %s[%d]: %w", fieldSummaryObjectives, i, err)
		}
		e, err := o.FieldFloat(fieldObjError)
		if err != nil {
			return c, fmt.Errorf("field %s[%d]: %w", fieldSummaryObjectives, i, err)
		}
		c.Objectives[q] = e
	}
	if c.GoMetrics, err = conf.FieldBool(fieldGoMetrics); err != nil {
		return c, err
	}
	if c.ProcessMetrics, err = conf.FieldBool(fieldProcessMetrics); err != nil {
		return c, err
	}
	if conf.Contains(fieldPushURL) {
		if c.PushURL, err = conf.FieldString(fieldPushURL); err != nil {
			return c, err
		}
	}
	if conf.Contains(fieldPushInterval) {
		s, err := conf.FieldString(fieldPushInterval)
		if err != nil {
			return c, err
		}
		if s != "" {
			if c.PushInterval, err = time.ParseDuration(s); err != nil {
				return c, fmt.Errorf("field %s: %w", fieldPushInterval, err)
			}
		}
	}
	if c.PushJobName, err = conf.FieldString(fieldPushJobName); err != nil {
		return c, err
	}
	if c.PushUsername, err = conf.FieldString(fieldPushBasicAuth, fieldPushUsername); err != nil {
		return c, err
	}
	if c.PushPassword, err = conf.FieldString(fieldPushBasicAuth, fieldPushPassword); err != nil {
		return c, err
	}
	if c.FileOutputPath, err = conf.FieldString(fieldFileOutputPath); err != nil {
		return c, err
	}
	return c, nil
}

// validate checks c and fills in the defaults New relies on.
func (c *Config) validate() error {
	if c.Path == "" || !strings.HasPrefix(c.Path, "/") {
		return fmt.Errorf("field %s: must start with '/', got %q", fieldPath, c.Path)
	}
	if len(c.Buckets) == 0 {
		c.Buckets = DefaultBuckets
	}
	for i := 1; i < len(c.Buckets); i++ {
		if c.Buckets[i] <= c.Buckets[i-1] {
			return fmt.Errorf("field %s: buckets must be strictly increasing, index %d (%v) <= index %d (%v)", fieldHistogramBuckets, i, c.Buckets[i], i-1, c.Buckets[i-1])
		}
	}
	if c.Objectives == nil {
		c.Objectives = DefaultObjectives
	}
	for q, e := range c.Objectives {
		if q < 0 || q > 1 || e < 0 || e > 1 {
			return fmt.Errorf("field %s: quantile %v with error %v: both must be in [0, 1]", fieldSummaryObjectives, q, e)
		}
	}
	if c.PushInterval < 0 {
		return fmt.Errorf("field %s: must not be negative, got %v", fieldPushInterval, c.PushInterval)
	}
	if c.PushJobName == "" {
		c.PushJobName = DefaultPushJobName
	}
	return nil
}

// Exporter is a service.MetricsExporter backed by a private Prometheus
// registry and served by its own HTTP server.
type Exporter struct {
	conf Config
	reg  *prometheus.Registry
	log  *service.Logger

	mu         sync.Mutex
	counters   map[string]*prometheus.CounterVec
	gauges     map[string]*prometheus.GaugeVec
	histograms map[string]*prometheus.HistogramVec
	summaries  map[string]*prometheus.SummaryVec
	labelKeys  map[string][]string

	handler  http.Handler
	srv      *http.Server
	listener net.Listener
	done     chan struct{}

	pusher    *push.Pusher
	stopPush  chan struct{}
	pushDone  chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// New creates the exporter and, when c.Address is set, starts serving
// c.Path on it. The listener is bound before New returns, so a bad address
// fails the config rather than surfacing later in a log line. With
// c.PushURL and c.PushInterval it starts the periodic push.
func New(c Config, log *service.Logger) (*Exporter, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	e := &Exporter{
		conf:       c,
		reg:        prometheus.NewRegistry(),
		log:        log,
		counters:   map[string]*prometheus.CounterVec{},
		gauges:     map[string]*prometheus.GaugeVec{},
		histograms: map[string]*prometheus.HistogramVec{},
		summaries:  map[string]*prometheus.SummaryVec{},
		labelKeys:  map[string][]string{},
	}
	if c.GoMetrics {
		e.reg.MustRegister(collectors.NewGoCollector())
	}
	if c.ProcessMetrics {
		e.reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	e.handler = promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{})
	if c.PushURL != "" {
		e.pusher = push.New(c.PushURL, c.PushJobName).Gatherer(e.reg)
		if c.PushUsername != "" {
			e.pusher = e.pusher.BasicAuth(c.PushUsername, c.PushPassword)
		}
	} else if c.PushInterval > 0 && log != nil {
		log.Warnf("prometheus exporter: %s is set without %s; nothing is pushed", fieldPushInterval, fieldPushURL)
	}
	if c.Address != "" {
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
	}
	if e.pusher != nil && c.PushInterval > 0 {
		e.stopPush = make(chan struct{})
		e.pushDone = make(chan struct{})
		go e.pushLoop(c.PushInterval)
	}
	return e, nil
}

// pushLoop pushes every interval until Close; a failed push is logged and
// retried at the next tick.
func (e *Exporter) pushLoop(interval time.Duration) {
	defer close(e.pushDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-e.stopPush:
			return
		case <-t.C:
			if err := e.pusher.Push(); err != nil && e.log != nil {
				e.log.Warnf("prometheus exporter: push to %s: %v", e.conf.PushURL, err)
			}
		}
	}
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

// NewTimerCtor implements service.MetricsExporter. The name is kept (see
// the package doc): a summary of nanoseconds by default, a histogram in
// seconds with use_histogram_timing, and always a histogram of raw values
// for a name ending in "_ratio".
func (e *Exporter) NewTimerCtor(name string, labelKeys ...string) service.MetricsExporterTimerCtor {
	name = SanitizeName(name)
	keys := sanitizeLabels(labelKeys)
	switch {
	case strings.HasSuffix(name, "_ratio"):
		// A ratio carried as a timer (the Benthos API has no plain
		// histogram): exported as the raw value, not as a duration.
		vec := vector(e, e.histograms, name, keys, func() *prometheus.HistogramVec {
			return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: "Benthos distribution " + name, Buckets: RatioBuckets}, keys)
		})
		return func(labelValues ...string) service.MetricsExporterTimer {
			return rawTimer{vec.WithLabelValues(labelValues...)}
		}
	case e.conf.UseHistogramTiming:
		vec := vector(e, e.histograms, name, keys, func() *prometheus.HistogramVec {
			return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: "Benthos timer " + name + " (seconds)", Buckets: e.conf.Buckets}, keys)
		})
		return func(labelValues ...string) service.MetricsExporterTimer {
			return secondsTimer{vec.WithLabelValues(labelValues...)}
		}
	default:
		vec := vector(e, e.summaries, name, keys, func() *prometheus.SummaryVec {
			return prometheus.NewSummaryVec(prometheus.SummaryOpts{Name: name, Help: "Benthos timer " + name + " (nanoseconds)", Objectives: e.conf.Objectives}, keys)
		})
		return func(labelValues ...string) service.MetricsExporterTimer {
			return rawTimer{vec.WithLabelValues(labelValues...)}
		}
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

// Close pushes the metrics a last time (push_url), writes them to
// file_output_path, and stops the dedicated listener, waiting at most until
// ctx is done. A failed push or write is logged, not returned: losing the
// last metrics must not turn a clean shutdown into a failed one. Close is
// idempotent.
func (e *Exporter) Close(ctx context.Context) error {
	e.closeOnce.Do(func() { e.closeErr = e.close(ctx) })
	return e.closeErr
}

func (e *Exporter) close(ctx context.Context) error {
	if e.stopPush != nil {
		close(e.stopPush)
		<-e.pushDone
	}
	if e.pusher != nil {
		if err := e.pusher.PushContext(ctx); err != nil && e.log != nil {
			e.log.Warnf("prometheus exporter: final push to %s: %v", e.conf.PushURL, err)
		}
	}
	if e.conf.FileOutputPath != "" {
		if err := prometheus.WriteToTextfile(e.conf.FileOutputPath, e.reg); err != nil && e.log != nil {
			e.log.Warnf("prometheus exporter: field %s: write %s: %v", fieldFileOutputPath, e.conf.FileOutputPath, err)
		}
	}
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

// secondsTimer observes a timing given in nanoseconds as seconds.
type secondsTimer struct{ h prometheus.Observer }

func (t secondsTimer) Timing(ns int64) { t.h.Observe(float64(ns) / float64(time.Second)) }

// rawTimer observes a timer's value as it is: nanoseconds for a summary, the
// plain number for a ratio.
type rawTimer struct{ h prometheus.Observer }

func (t rawTimer) Timing(v int64) { t.h.Observe(float64(v)) }
