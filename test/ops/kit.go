// Package ops reads the operations kit the repository ships, the Grafana
// dashboard (deploy/grafana/) and the Prometheus alert rules
// (deploy/prometheus/), for the tests that prove them: this package's own
// (promtool, the runbook links, the metric names) and the e2e test that
// loads both into a real Prometheus scraping a running pipeline
// (test/e2e/prometheus_test.go).
package ops

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Paths of the kit, relative to the repository's root (slash-separated).
const (
	DashboardPath  = "deploy/grafana/benthos-zerobus.json"
	AlertsPath     = "deploy/prometheus/alerts.yaml"
	AlertTestsPath = "deploy/prometheus/alerts_test.yaml"
	RunbookPath    = "docs/runbook.md"
)

// RunbookURL is the prefix of every alert's runbook_url: the runbook on the
// repository's main branch, followed by a section's anchor.
const RunbookURL = "https://github.com/benthos-zerobus/benthos-zerobus/blob/main/docs/runbook.md#"

// PanelQuery is one query of a dashboard panel.
type PanelQuery struct {
	Panel string // the panel's title
	Expr  string // the PromQL, with the dashboard's variables in it
}

// Dashboard is the part of a Grafana dashboard the tests read.
type Dashboard struct {
	SchemaVersion int               `json:"schemaVersion"`
	UID           string            `json:"uid"`
	Title         string            `json:"title"`
	Inputs        []json.RawMessage `json:"__inputs"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Panels []Panel `json:"panels"`
}

// Variable is a dashboard template variable.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *Datasource     `json:"datasource"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
}

// Datasource is a panel's or a query's data source reference.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Panel is a dashboard panel; a row holds its panels when collapsed.
type Panel struct {
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *Datasource `json:"datasource"`
	Targets    []struct {
		Expr       string      `json:"expr"`
		Datasource *Datasource `json:"datasource"`
	} `json:"targets"`
	Panels []Panel `json:"panels"`
}

// ReadDashboard parses the dashboard at path.
func ReadDashboard(path string) (Dashboard, error) {
	var d Dashboard
	raw, err := os.ReadFile(path)
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return d, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// AllPanels returns every panel but rows, those inside collapsed rows too.
func (d Dashboard) AllPanels() []Panel {
	var out []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// Queries returns every panel's queries, in order.
func (d Dashboard) Queries() []PanelQuery {
	var out []PanelQuery
	for _, p := range d.AllPanels() {
		for _, t := range p.Targets {
			out = append(out, PanelQuery{Panel: p.Title, Expr: t.Expr})
		}
	}
	return out
}

// Substitute replaces the dashboard variables in expr ($name and ${name})
// with their values, as Grafana does before it sends a query.
func Substitute(expr string, vars map[string]string) string {
	names := make([]string, 0, len(vars))
	for n := range vars {
		names = append(names, n)
	}
	// Longest first: $__rate_interval before a shorter name it starts with.
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	for _, n := range names {
		expr = strings.ReplaceAll(expr, "${"+n+"}", vars[n])
		expr = strings.ReplaceAll(expr, "$"+n, vars[n])
	}
	return expr
}

// AlertRule is one alerting rule.
type AlertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// ReadAlerts parses the rule file at path and returns its alerting rules.
func ReadAlerts(path string) ([]AlertRule, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []AlertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []AlertRule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

var (
	forLine     = regexp.MustCompile(`(?m)^([ \t]+for:[ \t]*)(\d+)m[ \t]*$`)
	rangeWindow = regexp.MustCompile(`\[(\d+)m\]`)
	secondsOver = regexp.MustCompile(`(_seconds\)?\s*>\s*)(\d+)`)
)

// ScaleTime divides every time constant of a rule file by div, for a test
// that cannot wait minutes: the `for:` durations and range windows given in
// minutes become as many seconds when div is 60, and the thresholds on
// metrics in seconds (`… _seconds) > N`) N/div (at least 1). Everything else
// is left as it is, so the scaled rules are the shipped ones on a faster
// clock. It fails when the file has a `for:` or a window in another unit,
// which it would leave unscaled.
func ScaleTime(rules []byte, div int) ([]byte, error) {
	s := string(rules)
	if m := regexp.MustCompile(`(?m)^[ \t]+for:[ \t]*\d+[^m\d\s]+[ \t]*$|\[\d+[^m\d\]]+\]`).FindString(s); m != "" {
		return nil, fmt.Errorf("a time constant not in minutes: %q", strings.TrimSpace(m))
	}
	scale := func(n string) string {
		v, _ := strconv.Atoi(n)
		return strconv.Itoa(v * 60 / div)
	}
	s = forLine.ReplaceAllStringFunc(s, func(m string) string {
		g := forLine.FindStringSubmatch(m)
		return g[1] + scale(g[2]) + "s"
	})
	s = rangeWindow.ReplaceAllStringFunc(s, func(m string) string {
		return "[" + scale(rangeWindow.FindStringSubmatch(m)[1]) + "s]"
	})
	s = secondsOver.ReplaceAllStringFunc(s, func(m string) string {
		g := secondsOver.FindStringSubmatch(m)
		v, _ := strconv.Atoi(g[2])
		return g[1] + strconv.Itoa(max(v/div, 1))
	})
	return []byte(s), nil
}

// metricName finds the project's and the engine's metric names in PromQL.
var metricName = regexp.MustCompile(`\b(?:zerobus|redpanda|input|output)_[a-z_]+\b`)

// MetricNames returns the distinct metric names expr reads, sorted.
func MetricNames(expr string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range metricName.FindAllString(expr, -1) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
