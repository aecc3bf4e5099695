package e2e

// The operations kit on a live run (issue 35): a real Prometheus (Debian's
// prometheus package) scrapes the built binary running redpanda → zerobus
// through a fault, with deploy/prometheus/alerts.yaml loaded on a clock 60
// times faster; the fault's alerts go pending or firing and clear, and
// every query of deploy/grafana/benthos-zerobus.json returns series.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/test/ops"
)

// promServer is a Prometheus process with its HTTP API.
type promServer struct {
	base string // http://host:port
	p    *proc
}

// startPrometheus runs Debian's prometheus scraping target every second
// with rules (a rule file's text) evaluated every second, on a free
// loopback port with its storage in a temporary directory, and waits until
// it is ready.
func startPrometheus(t *testing.T, target string, rules []byte) *promServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	require.NoError(t, err, "prometheus is not installed: `make prometheus-deps` installs Debian's prometheus package")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alerts.yaml"), rules, 0o600))
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [ %q ]
scrape_configs:
  - job_name: benthos
    static_configs:
      - targets: [ %q ]
`, filepath.Join(dir, "alerts.yaml"), target)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600))
	addr := freeAddr(t)
	p := startBinary(t, bin, nil, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	s := &promServer{base: "http://" + addr, p: p}
	eventually(t, 30*time.Second, 100*time.Millisecond, "prometheus is ready", func() (bool, string) {
		resp, err := http.Get(s.base + "/-/ready")
		if err != nil {
			return false, err.Error() + "\n" + tail(p.out.String(), 20)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, tail(p.out.String(), 20)
	})
	return s
}

// promSeries is one series of an instant query's answer.
type promSeries struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
	Values [][2]any          `json:"values"`
}

// query evaluates expr now through /api/v1/query.
func (s *promServer) query(expr string) ([]promSeries, error) {
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string       `json:"resultType"`
			Result     []promSeries `json:"result"`
		} `json:"data"`
	}
	if err := s.get("/api/v1/query?query="+url.QueryEscape(expr), &out); err != nil {
		return nil, err
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", expr, out.Error)
	}
	return out.Data.Result, nil
}

// alerts returns the state (pending or firing) of each active alert, by
// name (firing wins over pending).
func (s *promServer) alerts() (map[string]string, error) {
	var out struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := s.get("/api/v1/alerts", &out); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, a := range out.Data.Alerts {
		if n := a.Labels["alertname"]; m[n] != "firing" {
			m[n] = a.State
		}
	}
	return m, nil
}

// ruleHealth returns each alerting rule's health and last error, by name,
// for a failure's message.
func (s *promServer) ruleHealth() string {
	var out struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
					State     string `json:"state"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := s.get("/api/v1/rules", &out); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, g := range out.Data.Groups {
		for _, r := range g.Rules {
			fmt.Fprintf(&b, "%s: %s %s %s; ", r.Name, r.Health, r.State, r.LastError)
		}
	}
	return b.String()
}

func (s *promServer) get(path string, v any) error {
	resp, err := http.Get(s.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// alertLog polls Prometheus's alerts and keeps, per alert, when it was
// first pending and first firing, and which are active now.
type alertLog struct {
	mu      sync.Mutex
	pending map[string]time.Time
	firing  map[string]time.Time
	active  map[string]string
	err     error
}

func (l *alertLog) record(now time.Time, active map[string]string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.err = err
		return
	}
	l.active = active
	for n, st := range active {
		if _, ok := l.pending[n]; !ok {
			l.pending[n] = now // firing implies it was pending
		}
		if _, ok := l.firing[n]; !ok && st == "firing" {
			l.firing[n] = now
		}
	}
}

// restart forgets the alerts seen before now and returns what it forgot, so
// that a fault's alerts are counted from the fault.
func (l *alertLog) restart() (pending, firing map[string]time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pending, firing = l.pending, l.firing
	l.pending, l.firing = map[string]time.Time{}, map[string]time.Time{}
	return pending, firing
}

// seen reports whether every alert of names has been pending or firing.
func (l *alertLog) seen(names []string) (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var missing []string
	for _, n := range names {
		if _, ok := l.pending[n]; !ok {
			missing = append(missing, n)
		}
	}
	return len(missing) == 0, fmt.Sprintf("not yet pending or firing: %v (active now: %v, last error: %v)", missing, l.active, l.err)
}

// activeOf returns the alerts of names active now.
func (l *alertLog) activeOf(names []string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, n := range names {
		if _, ok := l.active[n]; ok {
			out = append(out, n+"="+l.active[n])
		}
	}
	return out
}

// TestPrometheusScrapesAFaultyRun: the product binary runs redpanda →
// zerobus (an interpolated table, a dead-letter table) against the
// emulator and a Kafka broker, with the prometheus exporter on its HTTP
// server; a real Prometheus scrapes it every second with
// deploy/prometheus/alerts.yaml loaded, its time constants divided by 60.
// Faults: a record that is not JSON (a dead letter), then Zerobus refusing
// every write (PERMISSION_DENIED) while records keep arriving (a lag, a
// commit that cannot move, no durable rows). The fault's alerts go pending
// or firing, and clear once writes are accepted and everything landed.
// Then every query of the Grafana dashboard, its variables substituted,
// returns series, and so does every metric the alerts read.
func TestPrometheusScrapesAFaultyRun(t *testing.T) {
	t.Parallel()
	const (
		parts = 4
		good  = 2000
		rate  = 250 // records/s during the refusal
	)
	began := time.Now()
	root := repoRoot(t)
	rules, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(ops.AlertsPath)))
	require.NoError(t, err)
	scaled, err := ops.ScaleTime(rules, 60)
	require.NoError(t, err)
	dash, err := ops.ReadDashboard(filepath.Join(root, filepath.FromSlash(ops.DashboardPath)))
	require.NoError(t, err)
	alertRules, err := ops.ReadAlerts(filepath.Join(root, filepath.FromSlash(ops.AlertsPath)))
	require.NoError(t, err)

	dlq := kafkaTable + "_dead_letter"
	srv := startEmulator(t, emulator.Faults{}, kafkaTable+":"+kafkaCols,
		dlq+":source_table STRING, message_index INT, column_name STRING, error STRING, payload STRING, _zb_emit_ts TIMESTAMP")
	b := startKafkaBroker(t, kafkaTopic, parts)
	metricsAddr := freeAddr(t)
	// The table is interpolated (a router: zerobus_table_evictions_total
	// exists) though it resolves to one table.
	table := strings.TrimSuffix(kafkaTable, "kafka_rows") + `${! "kafka_rows" }`
	cfg := kafkaPipeline(srv, b.addr, kafkaTopic, table, metricsAddr, "topic_lag_refresh_period: 500ms", "dead_letter:\n  table: "+dlq)
	p := startKafkaProduct(t, cfg, "one")
	prom := startPrometheus(t, metricsAddr, scaled)
	t.Logf("binary, emulator, broker and prometheus up: %s", time.Since(began).Round(time.Millisecond))

	seen := &alertLog{pending: map[string]time.Time{}, firing: map[string]time.Time{}}
	stopPoll := make(chan struct{})
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		for {
			a, err := prom.alerts()
			seen.record(time.Now(), a, err)
			select {
			case <-stopPoll:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stopPoll); <-pollDone }()

	// Healthy: records land, and Prometheus scrapes them.
	require.NoError(t, b.produce(kafkaTopic, parts, 0, good, func(i int) []byte { return kafkaValue(i, 100) }))
	waitRows(t, srv, kafkaTable, good, 60*time.Second, p.out.String)
	// The dead-letter counter exists at 0 from start-up: Prometheus has a
	// sample before the first dead letter, so increase() sees it move.
	eventually(t, 30*time.Second, 250*time.Millisecond, "prometheus scraped the dead-letter counter at 0", func() (bool, string) {
		res, err := prom.query(`zerobus_dead_letter_rows_total == 0`)
		return err == nil && len(res) == 1, fmt.Sprintf("%v %v; target: %s", res, err, tail(p.out.String(), 10))
	})
	// A dead letter: a record that is not JSON.
	deadAt := time.Now()
	require.NoError(t, b.produce(kafkaTopic, parts, good, 1, func(int) []byte { return []byte("not json {") }))
	waitRows(t, srv, dlq, 1, 30*time.Second, p.out.String)
	eventually(t, 30*time.Second, 250*time.Millisecond, "prometheus scraped the dead letter and the commit age", func() (bool, string) {
		dl, err1 := prom.query(`sum(zerobus_dead_letter_rows_total) >= 1`)
		age, err2 := prom.query(`redpanda_commit_age_seconds`)
		return err1 == nil && err2 == nil && len(dl) == 1 && len(age) > 0, fmt.Sprintf("%v %v %v %v", dl, age, err1, err2)
	})
	eventually(t, 30*time.Second, 250*time.Millisecond, "the dead letter's alert goes pending or firing", func() (bool, string) {
		ok, saw := seen.seen([]string{"BenthosZerobusDeadLetters"})
		res, _ := prom.query(`zerobus_dead_letter_rows_total[20s]`)
		return ok, fmt.Sprintf("%s; samples %v; rules: %s", saw, res, prom.ruleHealth())
	})
	t.Logf("healthy run scraped: %s", time.Since(began).Round(time.Millisecond))

	// The refusal's alerts are quiet before it (the lag of the first
	// records may have made one pending), and are counted from it.
	refusalAlerts := []string{"BenthosZerobusKafkaLagGrowing", "BenthosZerobusNoDurableRows", "BenthosZerobusKafkaCommitStuck", "BenthosZerobusOutputDown"}
	eventually(t, 30*time.Second, 250*time.Millisecond, "the refusal's alerts are quiet before it", func() (bool, string) {
		a := seen.activeOf(refusalAlerts)
		return len(a) == 0, fmt.Sprintf("active: %v", a)
	})
	dlPending, dlFiring := seen.restart()

	// Zerobus refuses every write while records keep arriving.
	require.NoError(t, srv.SetFaults(emulator.Faults{ErrorRate: map[string]float64{"PERMISSION_DENIED": 1}}))
	refusedAt := time.Now()
	produced := good + 1
	var prodErr error
	stopProd := make(chan struct{})
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		for {
			select {
			case <-stopProd:
				return
			case <-time.After(200 * time.Millisecond):
			}
			if err := b.produce(kafkaTopic, parts, produced, rate/5, func(i int) []byte { return kafkaValue(i, 100) }); err != nil {
				prodErr = err
				return
			}
			produced += rate / 5
		}
	}()
	var maxState float64
	eventually(t, 60*time.Second, 250*time.Millisecond, "the refusal's alerts go pending or firing", func() (bool, string) {
		if s, err := prom.query(`max(zerobus_table_state)`); err == nil && len(s) == 1 {
			var v float64
			fmt.Sscan(fmt.Sprint(s[0].Value[1]), &v)
			maxState = max(maxState, v)
		}
		ok, saw := seen.seen(refusalAlerts)
		return ok, saw + "; rules: " + prom.ruleHealth()
	})
	refusal := time.Since(refusedAt)
	require.NoError(t, srv.SetFaults(emulator.Faults{}))
	healedAt := time.Now()
	close(stopProd)
	<-prodDone
	require.NoError(t, prodErr)
	t.Logf("refusal: %s, every fault alert seen (worst table state %v)", refusal.Round(time.Millisecond), maxState)

	// Healed: everything lands, the group commits to the end, the alerts clear.
	_, end, err := b.offsets(kafkaTopic, kafkaGroup)
	require.NoError(t, err)
	waitRows(t, srv, kafkaTable, sumOffsets(end)-1, 90*time.Second, p.out.String) // all but the dead letter
	waitCommittedAtEnd(t, b, kafkaTopic, kafkaGroup, 60*time.Second)
	landed := time.Since(healedAt)
	faultAlerts := append([]string{"BenthosZerobusDeadLetters"}, refusalAlerts...)
	eventually(t, 60*time.Second, 250*time.Millisecond, "the fault's alerts clear", func() (bool, string) {
		a := seen.activeOf(faultAlerts)
		return len(a) == 0, fmt.Sprintf("still active: %v", a)
	})
	cleared := time.Since(healedAt)

	// Every dashboard query returns series, its variables as Grafana
	// substitutes them with "All" tables.
	vars := map[string]string{"table": ".*", "__rate_interval": "15s", "__range": "5m", "__interval": "1s"}
	queries := dash.Queries()
	require.NotEmpty(t, queries)
	for _, q := range queries {
		expr := ops.Substitute(q.Expr, vars)
		require.NotContains(t, expr, "$", "panel %q: a variable left unsubstituted in %s", q.Panel, expr)
		res, err := prom.query(expr)
		if assert.NoError(t, err, "panel %q", q.Panel) {
			assert.NotEmpty(t, res, "panel %q: %s returns no series", q.Panel, expr)
		}
	}
	// Every alert's expression is valid as shipped, and every metric it
	// reads has series.
	var metrics []string
	for _, r := range alertRules {
		_, err := prom.query(r.Expr)
		assert.NoError(t, err, "alert %s", r.Alert)
		for _, m := range ops.MetricNames(r.Expr) {
			res, err := prom.query(m)
			if assert.NoError(t, err, "alert %s: %s", r.Alert, m) {
				assert.NotEmpty(t, res, "alert %s reads %s, which has no series", r.Alert, m)
			}
			metrics = append(metrics, m)
		}
	}

	code, err := terminate(p, 60*time.Second)
	require.NoError(t, err)
	assert.Equal(t, 0, code, tail(p.out.String(), 30))

	seen.mu.Lock()
	var timeline []string
	for _, n := range faultAlerts {
		from, pending, firing := refusedAt, seen.pending, seen.firing
		if n == "BenthosZerobusDeadLetters" {
			from, pending, firing = deadAt, dlPending, dlFiring
		}
		line := fmt.Sprintf("%s pending +%s", n, pending[n].Sub(from).Round(100*time.Millisecond))
		if f, ok := firing[n]; ok {
			line += fmt.Sprintf(" firing +%s", f.Sub(from).Round(100*time.Millisecond))
		}
		timeline = append(timeline, line)
	}
	seen.mu.Unlock()
	sort.Strings(metrics)
	faultLine(t, "prometheus on a live run (rules at 60x): a dead letter, then writes refused for %s at %d records/s: %s; all landed and committed %s after the heal, alerts clear %s after it; %d dashboard queries and the %d alerts' metrics return series; whole test %s",
		refusal.Round(100*time.Millisecond), rate, strings.Join(timeline, ", "), landed.Round(100*time.Millisecond), cleared.Round(100*time.Millisecond),
		len(queries), len(alertRules), time.Since(began).Round(100*time.Millisecond))
}
