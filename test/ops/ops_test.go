package ops

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tool is the path of a Prometheus tool; the test fails (it does not skip)
// when it is missing: make test installs it first (make prometheus-deps).
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	require.NoError(t, err, "%s is not installed: `make prometheus-deps` installs Debian's prometheus package, which has it", name)
	return p
}

// path is rel (slash-separated, from the repository's root) on this
// machine: go test runs a package in its directory, two levels below the
// root.
func path(rel string) string { return filepath.Join("..", "..", filepath.FromSlash(rel)) }

// promtool check rules: the rule file parses, every expression is valid
// PromQL and every template renders.
func TestPromtoolCheckRules(t *testing.T) {
	out, err := exec.Command(tool(t, "promtool"), "check", "rules", path(AlertsPath)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "SUCCESS")
}

// promtool test rules: every alert fires on the series that should page,
// and not on the others, before its for:, or after the fault.
func TestPromtoolTestRules(t *testing.T) {
	cmd := exec.Command(tool(t, "promtool"), "test", "rules", filepath.Base(AlertTestsPath))
	cmd.Dir = filepath.Dir(path(AlertTestsPath))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "SUCCESS")
}

// Every alert is unit-tested both ways: a case that expects it firing and
// one that expects it not to (exp_alerts: []).
func TestEveryAlertIsUnitTestedFiringAndNot(t *testing.T) {
	rules, err := ReadAlerts(path(AlertsPath))
	require.NoError(t, err)
	raw, err := os.ReadFile(path(AlertTestsPath))
	require.NoError(t, err)
	firing, quiet := map[string]bool{}, map[string]bool{}
	var current string
	for _, line := range strings.Split(string(raw), "\n") {
		l := strings.TrimSpace(line)
		if name, ok := strings.CutPrefix(l, "alertname: "); ok {
			current = name
		}
		switch {
		case l == "exp_alerts: []":
			quiet[current] = true
		case l == "exp_alerts:":
			firing[current] = true
		}
	}
	require.NotEmpty(t, rules)
	for _, r := range rules {
		assert.True(t, firing[r.Alert], "%s: no unit test expects it firing", r.Alert)
		assert.True(t, quiet[r.Alert], "%s: no unit test expects it quiet", r.Alert)
	}
}

// Every alert says what happened and links the runbook section that says
// what to do, which exists; it has a severity and a for: (explicit, so
// that the e2e test's scaling covers it).
func TestAlertsLinkTheirRunbookSection(t *testing.T) {
	rules, err := ReadAlerts(path(AlertsPath))
	require.NoError(t, err)
	anchors := headingAnchors(t, path(RunbookPath))
	for _, r := range rules {
		assert.NotEmpty(t, r.Annotations["summary"], "%s: summary", r.Alert)
		assert.NotEmpty(t, r.Annotations["description"], "%s: description", r.Alert)
		url := r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(url, RunbookURL)
		if assert.True(t, ok, "%s: runbook_url %q is not under %s", r.Alert, url, RunbookURL) {
			assert.True(t, anchors[anchor], "%s: runbook_url names #%s, which %s has no section for", r.Alert, anchor, RunbookPath)
		}
		assert.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], "%s: severity", r.Alert)
		assert.NotEmpty(t, r.For, "%s: for", r.Alert)
	}
}

// The dashboard imports: a schema version of Grafana 10/11, an input for
// the data source, a Prometheus data-source variable every panel and
// query uses, a table variable, and a query in every panel.
func TestDashboardIsImportReady(t *testing.T) {
	d, err := ReadDashboard(path(DashboardPath))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, d.SchemaVersion, 36)
	assert.NotEmpty(t, d.UID)
	assert.Len(t, d.Inputs, 1, "one __inputs entry: the Prometheus data source chosen at import")
	vars := map[string]Variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	ds, ok := vars["datasource"]
	require.True(t, ok, "a datasource variable")
	assert.Equal(t, "datasource", ds.Type)
	assert.JSONEq(t, `"prometheus"`, string(ds.Query))
	table, ok := vars["table"]
	require.True(t, ok, "a table variable")
	assert.Equal(t, "query", table.Type)
	assert.True(t, table.IncludeAll)
	assert.Equal(t, ".*", table.AllValue)
	require.NotNil(t, table.Datasource)
	assert.Equal(t, "${datasource}", table.Datasource.UID)
	panels := d.AllPanels()
	require.NotEmpty(t, panels)
	for _, p := range panels {
		require.NotNil(t, p.Datasource, "panel %q: datasource", p.Title)
		assert.Equal(t, "${datasource}", p.Datasource.UID, "panel %q", p.Title)
		require.NotEmpty(t, p.Targets, "panel %q: no query", p.Title)
		for _, q := range p.Targets {
			assert.NotEmpty(t, q.Expr, "panel %q", p.Title)
			require.NotNil(t, q.Datasource, "panel %q: query datasource", p.Title)
			assert.Equal(t, "${datasource}", q.Datasource.UID, "panel %q", p.Title)
		}
	}
}

// The dashboard and the alerts read only metrics the code exports: every
// zerobus_* and redpanda_* name they use is a string constant of the Go
// source (less the suffixes the exporter adds). The e2e test
// (TestPrometheusScrapesAFaultyRun) proves them live.
func TestKitReadsOnlyExportedMetrics(t *testing.T) {
	declared := declaredMetrics(t)
	d, err := ReadDashboard(path(DashboardPath))
	require.NoError(t, err)
	rules, err := ReadAlerts(path(AlertsPath))
	require.NoError(t, err)
	var exprs []string
	for _, q := range d.Queries() {
		exprs = append(exprs, q.Expr)
	}
	for _, r := range rules {
		exprs = append(exprs, r.Expr)
	}
	for _, e := range exprs {
		for _, name := range MetricNames(e) {
			if !strings.HasPrefix(name, "zerobus_") && !strings.HasPrefix(name, "redpanda_") {
				continue // the engine's (input_*, output_*): proven live by the e2e test
			}
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
			assert.True(t, declared[name] || declared[base], "%s (in %q) is not a metric the code declares", name, e)
		}
	}
}

// declaredMetrics are the zerobus_* and redpanda_* string constants of the
// non-test Go source under internal/ and plugin/.
func declaredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	lit := regexp.MustCompile(`"((?:zerobus|redpanda)_[a-z_]+)"`)
	out := map[string]bool{}
	for _, dir := range []string{"internal", "plugin"} {
		err := filepath.WalkDir(path(dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			raw, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range lit.FindAllStringSubmatch(string(raw), -1) {
				out[m[1]] = true
			}
			return nil
		})
		require.NoError(t, err)
	}
	require.True(t, out["zerobus_rows_sent_total"], "the scan finds the output's metrics")
	return out
}

// ScaleTime turns minutes into seconds for for:, range windows and
// thresholds on seconds, and refuses a unit it would leave unscaled.
func TestScaleTime(t *testing.T) {
	in := "      - alert: A\n        expr: rate(x[5m]) > 0 and max(redpanda_commit_age_seconds) > 300 and y[10m] and max by (t) (z_unreachable_seconds) > 30\n        for: 15m\n"
	out, err := ScaleTime([]byte(in), 60)
	require.NoError(t, err)
	assert.Equal(t, "      - alert: A\n        expr: rate(x[5s]) > 0 and max(redpanda_commit_age_seconds) > 5 and y[10s] and max by (t) (z_unreachable_seconds) > 1\n        for: 15s\n", string(out))
	_, err = ScaleTime([]byte("        for: 1h\n"), 60)
	assert.Error(t, err, "hours are not scaled")
	_, err = ScaleTime([]byte("expr: rate(x[30s])\n"), 60)
	assert.Error(t, err, "seconds are not scaled")
}

// Substitute fills $name and ${name}, the longest name first.
func TestSubstitute(t *testing.T) {
	got := Substitute(`rate(x{table=~"$table"}[$__rate_interval]) / ${table}`, map[string]string{"table": ".*", "__rate_interval": "15s"})
	assert.Equal(t, `rate(x{table=~".*"}[15s]) / .*`, got)
}

// headingAnchors are the GitHub anchors of a markdown file's headings.
func headingAnchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	inCode := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		h = strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")
		out[h] = true
	}
	require.NoError(t, sc.Err())
	return out
}
