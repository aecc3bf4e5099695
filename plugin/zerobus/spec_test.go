package zerobus

import (
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"

	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/testnet"
)

const minimalYAML = `
endpoint: http://127.0.0.1:50051
workspace_url: http://127.0.0.1:8080
table: main.default.events
client_id: id
client_secret: secret
`

func parseYAML(t *testing.T, y string) (*outputConfig, error) {
	t.Helper()
	pc, err := Spec().ParseYAML(y, nil)
	if err != nil {
		return nil, err
	}
	return parseConfig(pc)
}

func TestConfigDefaults(t *testing.T) {
	c, err := parseYAML(t, minimalYAML)
	require.NoError(t, err)

	assert.Equal(t, 16, c.MaxInFlight, "fewer batches of messages held than Benthos's 64: memory bounded at any row size")
	assert.Equal(t, 64<<20, c.MaxInFlightBytes, "a conservative byte budget by default")
	assert.Equal(t, 4000, c.Batching.Count)
	assert.Equal(t, "1s", c.Batching.Period)
	assert.Equal(t, 2, c.StreamsMin)
	assert.Equal(t, 16, c.StreamsMax)
	assert.Equal(t, 100.0, c.PerStreamMBps)
	assert.Equal(t, 0.0, c.PeakMBps)
	assert.Nil(t, c.OrderingKey)
	assert.Equal(t, 2048, c.AckCapacity)
	assert.Equal(t, 5*time.Minute, c.AckTimeout)
	assert.Equal(t, "none", c.Compression)
	assert.False(t, c.NestedToString)
	assert.Equal(t, "us", c.EpochUnit)
	assert.Equal(t, 10*time.Second, c.CloseTimeout)
	assert.False(t, c.Provision)
	assert.False(t, c.Widen)
	assert.Equal(t, "respect", c.CommentsPolicy)
	assert.Equal(t, RoleDerived, c.Role)
	assert.Equal(t, 5*time.Minute, c.RecheckInterval)
	assert.False(t, c.DedupView, "the deduplicating view is opt-in")
	assert.Equal(t, "off", c.dedupViewLog())
	assert.False(t, c.EndpointTLS, "http loopback endpoint is plaintext")
	assert.Equal(t, "", c.WorkspaceID, "an IP endpoint derives no workspace id")
}

func TestConfigBatching(t *testing.T) {
	tests := []struct {
		name       string
		batching   string
		wantCount  int
		wantPeriod string
		wantHow    string
	}{
		{"absent gets default", "", 4000, "1s", "as configured"},
		{"count without period gets a period", "batching:\n  count: 50\n", 50, "1s", "period added"},
		{"byte_size without period gets a period", "batching:\n  byte_size: 1000\n", 0, "1s", "period added"},
		{"explicit period kept", "batching:\n  count: 10\n  period: 50ms\n", 10, "50ms", "as configured"},
		{"count 1 needs no period", "batching:\n  count: 1\n", 1, "", "as configured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseYAML(t, minimalYAML+tt.batching)
			require.NoError(t, err)
			assert.Equal(t, tt.wantCount, c.Batching.Count)
			if tt.batching == "" {
				assert.Equal(t, 1<<20, c.Batching.ByteSize, "absent batching bounds bytes too")
			}
			assert.Equal(t, tt.wantPeriod, c.Batching.Period)
			assert.Equal(t, tt.wantHow, c.batchingDefaulted)
		})
	}
}

func TestConfigCredentialsFromEnv(t *testing.T) {
	t.Setenv(EnvClientID, "env-id")
	t.Setenv(EnvClientSecret, "env-secret")
	y := `
endpoint: https://1234567890.zerobus.us-west-2.cloud.databricks.com
workspace_url: https://dbc-1.cloud.databricks.com
table: main.default.events
`
	c, err := parseYAML(t, y)
	require.NoError(t, err)
	assert.Equal(t, "env-id", c.ClientID)
	assert.Equal(t, "env-secret", c.ClientSecret)
	assert.True(t, c.EndpointTLS)
	assert.Equal(t, "1234567890", c.WorkspaceID)

	// Explicit values win over the environment.
	c, err = parseYAML(t, y+"client_id: cfg-id\nclient_secret: cfg-secret\n")
	require.NoError(t, err)
	assert.Equal(t, "cfg-id", c.ClientID)
	assert.Equal(t, "cfg-secret", c.ClientSecret)
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Setenv(EnvClientID, "")
	t.Setenv(EnvClientSecret, "")
	base := "workspace_url: http://127.0.0.1:8080\nclient_id: a\nclient_secret: b\n"
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{"plaintext to a remote host", "endpoint: http://zerobus.example.com\ntable: a.b.c\n" + base, "field endpoint: plaintext http:// is only allowed for a loopback host"},
		{"unknown scheme", "endpoint: grpc://127.0.0.1:1\ntable: a.b.c\n" + base, "field endpoint: scheme must be https"},
		{"no host", "endpoint: 127.0.0.1\ntable: a.b.c\n" + base, "field endpoint"},
		{"two-part table", "endpoint: http://127.0.0.1:1\ntable: a.b\n" + base, "field table: table name \"a.b\": has 2 dot-separated part(s); want exactly three, catalog.schema.table"},
		{"empty table part", "endpoint: http://127.0.0.1:1\ntable: a..c\n" + base, "field table: table name \"a..c\": the schema part is empty"},
		{"remote plaintext workspace", "endpoint: http://127.0.0.1:1\ntable: a.b.c\nworkspace_url: http://dbc.example.com\nclient_id: a\nclient_secret: b\n", "field workspace_url: plaintext"},
		{"missing credentials", "endpoint: http://127.0.0.1:1\ntable: a.b.c\nworkspace_url: http://127.0.0.1:8080\n", "field client_id: empty and DATABRICKS_CLIENT_ID is not set"},
		{"missing secret", "endpoint: http://127.0.0.1:1\ntable: a.b.c\nworkspace_url: http://127.0.0.1:8080\nclient_id: x\n", "field client_secret: empty and DATABRICKS_CLIENT_SECRET is not set"},
		{"streams max below min", "endpoint: http://127.0.0.1:1\ntable: a.b.c\n" + base + "streams:\n  min: 4\n  max: 2\n", "field streams.max: must be at least streams.min (4), got 2"},
		{"zero per-stream bandwidth", "endpoint: http://127.0.0.1:1\ntable: a.b.c\n" + base + "streams:\n  per_stream_mb_per_sec: 0\n", "field streams.per_stream_mb_per_sec: must be positive"},
		{"zero per-stream rows", "endpoint: http://127.0.0.1:1\ntable: a.b.c\n" + base + "streams:\n  per_stream_rows_per_sec: 0\n", "field streams.per_stream_rows_per_sec: must be positive"},
		{"negative peak rows", "endpoint: http://127.0.0.1:1\ntable: a.b.c\n" + base + "streams:\n  peak_rows_per_sec: -1\n", "field streams.peak_rows_per_sec: must not be negative"},
		{"zero shrink_after", "endpoint: http://127.0.0.1:1\ntable: a.b.c\n" + base + "streams:\n  shrink_after: 0s\n", "field streams.shrink_after: must be positive"},
		{"zero ack capacity", "endpoint: http://127.0.0.1:1\ntable: a.b.c\n" + base + "ack:\n  channel_capacity: 0\n", "field ack.channel_capacity"},
		{"provision without warehouse", "endpoint: http://127.0.0.1:1\ntable: a.b.c\n" + base + "catalog:\n  provision: true\n", "field catalog.warehouse_id: required"},
		{"dedup view without coverage", "endpoint: http://127.0.0.1:1\ntable: a.b.c\n" + base + "catalog:\n  provision: true\n  warehouse_id: w\n  dedup_view: true\n", "field catalog.dedup_view: needs coverage.source and coverage.offset"},
		{"dedup view without provisioning", "endpoint: http://127.0.0.1:1\ntable: a.b.c\n" + base + "coverage:\n  source: s\n  offset: '1'\ncatalog:\n  dedup_view: true\n", "field catalog.dedup_view: needs catalog.provision: true"},
		{"dedup view name alone", "endpoint: http://127.0.0.1:1\ntable: a.b.c\n" + base + "catalog:\n  dedup_view_name: a.b.v\n", "field catalog.dedup_view_name: set without catalog.dedup_view: true"},
		{"dedup view named as the table", "endpoint: http://127.0.0.1:1\ntable: a.b.c\n" + base + "coverage:\n  source: s\n  offset: '1'\ncatalog:\n  provision: true\n  warehouse_id: w\n  dedup_view: true\n  dedup_view_name: A.b.c\n", "field catalog.dedup_view_name: names the table itself"},
		{"missing contract file", "endpoint: http://127.0.0.1:1\ntable: a.b.c\n" + base + "catalog:\n  contract: /does/not/exist.yaml\n", "field catalog.contract"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("DATABRICKS_WAREHOUSE_ID", "")
			_, err := parseYAML(t, tt.yaml)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestConfigOrderingKey(t *testing.T) {
	c, err := parseYAML(t, minimalYAML+"ordering_key: ${! this.k }\n")
	require.NoError(t, err)
	require.NotNil(t, c.OrderingKey)
	msg := service.NewMessage([]byte(`{"k":"dev-7"}`))
	key, err := c.OrderingKey.TryString(msg)
	require.NoError(t, err)
	assert.Equal(t, "dev-7", key)

	c, err = parseYAML(t, minimalYAML+"ordering_key: \"\"\n")
	require.NoError(t, err)
	assert.Nil(t, c.OrderingKey, "an empty ordering key means round-robin")
}

// The byte budget reaches the writer, and a non-positive one is refused
// naming the field.
func TestMaxInFlightBytes(t *testing.T) {
	c, err := parseYAML(t, minimalYAML+"max_in_flight_bytes: 1048576\n")
	require.NoError(t, err)
	wc, err := c.writerConfig("w")
	require.NoError(t, err)
	assert.Equal(t, int64(1<<20), wc.MaxInFlightBytes)

	_, err = parseYAML(t, minimalYAML+"max_in_flight_bytes: 0\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "field max_in_flight_bytes: must be positive, got 0")
}

func TestKnobsNeverContainSecret(t *testing.T) {
	c, err := parseYAML(t, minimalYAML)
	require.NoError(t, err)
	line := knobsLine(c.knobs(3))
	assert.NotContains(t, line, "secret=secret")
	assert.Contains(t, line, "client_secret=set")
	assert.Contains(t, line, "pool_size=3")
	assert.Contains(t, line, "max_in_flight=16")
	assert.Contains(t, line, "max_in_flight_bytes=67108864")
	assert.Contains(t, line, "ack.timeout=5m0s")
	assert.Contains(t, line, "streams.per_stream_rows_per_sec=100000 streams.peak_rows_per_sec=0 streams.self_sizing=true streams.grow_interval=2s streams.shrink_after=1m0s")
}

// The row-rate and self-sizing knobs reach the pool, and size it.
func TestStreamsSizingKnobs(t *testing.T) {
	c, err := parseYAML(t, minimalYAML+"streams:\n  min: 1\n  per_stream_rows_per_sec: 20000\n  peak_rows_per_sec: 70000\n  self_sizing: false\n  grow_interval: 5s\n  shrink_after: 10m\n")
	require.NoError(t, err)
	pc := c.poolConfig()
	assert.InDelta(t, 20000, pc.PerStreamRowsPerSec, 0)
	assert.InDelta(t, 70000, pc.PeakRowsPerSec, 0)
	assert.False(t, pc.SelfSizing)
	assert.Equal(t, 5*time.Second, pc.GrowInterval)
	assert.Equal(t, 10*time.Minute, pc.ShrinkAfter)
	assert.Equal(t, 4, pool.Size(pc), "70,000 rows/s at 20,000 per stream")

	c, err = parseYAML(t, minimalYAML)
	require.NoError(t, err)
	assert.True(t, c.poolConfig().SelfSizing, "self-sizing is on by default")
}

func TestConfigTLSAndProxy(t *testing.T) {
	// Absent: TLS on the system roots (nil config), proxies from the
	// environment.
	c, err := parseYAML(t, minimalYAML)
	require.NoError(t, err)
	assert.Nil(t, c.TLS)
	assert.Nil(t, c.ProxyURL)
	line := knobsLine(c.knobs(1))
	assert.Contains(t, line, "tls.enabled=false tls.skip_cert_verify=false proxy_url=(environment)")

	ca := testnet.NewCA(t)
	// TLS settings and a proxy go with https:// URLs (plaintext ones take
	// neither).
	tlsYAML := strings.NewReplacer("http://127.0.0.1:50051", "https://127.0.0.1:50051", "http://127.0.0.1:8080", "https://127.0.0.1:8443").Replace(minimalYAML)
	y := tlsYAML + "tls:\n  enabled: true\n  root_cas: |\n" + indent(string(ca.CAPEM), "    ") +
		"proxy_url: http://zb:proxy-pass@127.0.0.1:3128\n"
	c, err = parseYAML(t, y)
	require.NoError(t, err)
	require.NotNil(t, c.TLS)
	require.NotNil(t, c.TLS.RootCAs)
	assert.True(t, c.TLS.RootCAs.Equal(ca.Pool()), "root_cas is the only root")
	assert.False(t, c.TLS.InsecureSkipVerify)
	assert.Equal(t, "127.0.0.1:3128", c.ProxyURL.Host)
	line = knobsLine(c.knobs(1))
	assert.Contains(t, line, "tls.enabled=true tls.skip_cert_verify=false proxy_url=http://zb:xxxxx@127.0.0.1:3128")
	assert.NotContains(t, line, "proxy-pass", "the proxy password is never logged")
	assert.NotContains(t, line, "BEGIN CERTIFICATE")

	c, err = parseYAML(t, tlsYAML+"tls:\n  enabled: true\n  skip_cert_verify: true\n")
	require.NoError(t, err)
	assert.True(t, c.TLS.InsecureSkipVerify)
	assert.Contains(t, knobsLine(c.knobs(1)), "tls.skip_cert_verify=true")

	// Disabled settings are ignored: the block never turns TLS off.
	c, err = parseYAML(t, minimalYAML+"tls:\n  enabled: false\n  skip_cert_verify: true\n")
	require.NoError(t, err)
	assert.Nil(t, c.TLS)

	for y, want := range map[string]string{
		"proxy_url: socks5://127.0.0.1:1080\n":                          "field proxy_url: proxy socks5://127.0.0.1:1080: socks5:// proxies are not supported",
		"proxy_url: https://127.0.0.1:3128\n":                           "field proxy_url: proxy https://127.0.0.1:3128: https:// proxies are not supported",
		"tls:\n  enabled: true\n  root_cas_file: /does/not/exist.pem\n": "field tls: ",
	} {
		_, err := parseYAML(t, tlsYAML+y)
		require.Error(t, err, y)
		assert.Contains(t, err.Error(), want)
	}

	// run refuses what lint refuses (plaintextLint): TLS settings or a
	// proxy with plaintext URLs, every bad field named at once.
	_, err = parseYAML(t, minimalYAML+"tls:\n  enabled: true\nproxy_url: http://10.1.2.3:3128\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "field tls.enabled: endpoint and workspace_url are plaintext http://, which TLS settings do not apply to")
	assert.Contains(t, err.Error(), "field proxy_url: endpoint and workspace_url are plaintext http:// (loopback only), which is never sent through a proxy")
	_, err = parseYAML(t, strings.Replace(minimalYAML, "http://127.0.0.1:50051", "http://127.1:50051", 1))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "field endpoint: plaintext http:// is only allowed for a loopback host")
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix) + "\n"
}

func TestLintRuleTable(t *testing.T) {
	linter := service.GlobalEnvironment().FullConfigSchema("", "").NewStreamConfigLinter()
	tests := []struct {
		name     string
		table    string
		wantLint string
	}{
		{"three parts", "main.default.events", ""},
		{"two parts", "main.events", "field table: must be catalog.schema.table"},
		{"empty part", "main..events", "field table: must be catalog.schema.table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := "input:\n  stdin: {}\noutput:\n  zerobus:\n    endpoint: http://127.0.0.1:1\n    workspace_url: http://127.0.0.1:2\n    table: " + tt.table + "\n"
			lints, err := linter.LintYAML([]byte(y))
			require.NoError(t, err)
			if tt.wantLint == "" {
				assert.Empty(t, lints)
				return
			}
			require.NotEmpty(t, lints)
			assert.Contains(t, lints[0].What, tt.wantLint)
		})
	}
}

// coverage: source and offset reach the writer as a position function over
// the message; one without the other is refused by the linter and the
// parser alike, naming the field.
func TestConfigCoverage(t *testing.T) {
	c, err := parseYAML(t, minimalYAML+"coverage:\n  source: '${! meta(\"t\") }/${! meta(\"p\") }'\n  offset: '${! meta(\"o\") }'\n")
	require.NoError(t, err)
	wc, err := c.writerConfig("out")
	require.NoError(t, err)
	require.NotNil(t, wc.Coverage)
	assert.Equal(t, "main.default.events_zb_coverage", wc.Coverage.CoverageTable(wc.Table))
	m := service.NewMessage([]byte(`{}`))
	m.MetaSetMut("t", "orders")
	m.MetaSetMut("p", "2")
	m.MetaSetMut("o", "41")
	src, off, err := wc.Coverage.Position(m)
	require.NoError(t, err)
	assert.Equal(t, "orders/2", src)
	assert.Equal(t, "41", off)

	c, err = parseYAML(t, minimalYAML+"coverage:\n  source: x\n  offset: '1'\n  table: main.default.cov\n")
	require.NoError(t, err)
	wc, err = c.writerConfig("out")
	require.NoError(t, err)
	assert.Equal(t, "main.default.cov", wc.Coverage.CoverageTable(wc.Table))

	c, err = parseYAML(t, minimalYAML)
	require.NoError(t, err)
	wc, err = c.writerConfig("out")
	require.NoError(t, err)
	assert.Nil(t, wc.Coverage, "no coverage block: coverage off")

	_, err = parseYAML(t, minimalYAML+"coverage:\n  source: x\n")
	require.ErrorContains(t, err, "field coverage: source and offset must be set together")

	linter := service.GlobalEnvironment().FullConfigSchema("", "").NewStreamConfigLinter()
	y := "input:\n  stdin: {}\noutput:\n  zerobus:\n    endpoint: http://127.0.0.1:1\n    workspace_url: http://127.0.0.1:2\n    table: main.default.events\n    coverage:\n      offset: '${! meta(\"o\") }'\n"
	lints, err := linter.LintYAML([]byte(y))
	require.NoError(t, err)
	require.NotEmpty(t, lints)
	assert.Contains(t, lints[0].What, "source and offset must be set together")
}

// With an interpolated table, each table gets one stream unless streams.min
// says otherwise.
func TestInterpolatedTableStreamsMin(t *testing.T) {
	y := strings.Replace(minimalYAML, "table: main.default.events", `table: main.default.${! meta("t") }`, 1)
	c, err := parseYAML(t, y)
	require.NoError(t, err)
	assert.NotNil(t, c.TableInterp)
	assert.Equal(t, 1, c.StreamsMin)
	c, err = parseYAML(t, y+"streams:\n  min: 3\n")
	require.NoError(t, err)
	assert.Equal(t, 3, c.StreamsMin)
}

// catalog.schema_metadata reaches the writer, turns the UTC wall time of
// times in TIMESTAMP_NTZ columns on (the Avro decoder's local timestamps),
// and is logged at start-up.
func TestConfigSchemaMetadata(t *testing.T) {
	c, err := parseYAML(t, minimalYAML+"catalog:\n  provision: true\n  warehouse_id: w1\n  schema_metadata: registry_schema\n")
	require.NoError(t, err)
	wc, err := c.writerConfig("w")
	require.NoError(t, err)
	assert.Equal(t, "registry_schema", wc.SchemaMetadata)
	assert.True(t, wc.Convert.NTZFromZoned)
	line := knobsLine(c.knobs(1))
	assert.Contains(t, line, "catalog.schema_metadata=registry_schema")
	assert.Contains(t, line, "reconcile.timestamp_ntz_from_zoned=true")
}

// TestConfigDedupView: catalog.dedup_view reaches the writer's config and
// the start-up line, with its default name or the one given.
func TestConfigDedupView(t *testing.T) {
	on := minimalYAML + "coverage:\n  source: s\n  offset: '1'\ncatalog:\n  provision: true\n  warehouse_id: w\n  dedup_view: true\n"
	c, err := parseYAML(t, on)
	require.NoError(t, err)
	assert.Contains(t, knobsLine(c.knobs(2)), "catalog.dedup_view=<table>_dedup")
	wc, err := c.writerConfig("w")
	require.NoError(t, err)
	assert.True(t, wc.DedupView)
	assert.Empty(t, wc.DedupViewName)

	c, err = parseYAML(t, on+"  dedup_view_name: main.default.readers\n")
	require.NoError(t, err)
	assert.Contains(t, knobsLine(c.knobs(2)), "catalog.dedup_view=main.default.readers")
	wc, err = c.writerConfig("w")
	require.NoError(t, err)
	assert.Equal(t, "main.default.readers", wc.DedupViewName)
}
