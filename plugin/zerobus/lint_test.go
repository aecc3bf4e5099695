package zerobus

import (
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lintBase is a valid config; each corpus entry replaces one line of it (by
// its key) or adds lines, and names the line the lint must point at.
const lintBase = `input:
  stdin: {}
output:
  zerobus:
    endpoint: http://127.0.0.1:50051
    workspace_url: http://127.0.0.1:8080
    table: main.default.events
    max_in_flight: 64
    streams:
      min: 2
      max: 16
      per_stream_mb_per_sec: 100
    ack:
      channel_capacity: 4096
      timeout: 5m
    close_timeout: 10s
    catalog:
      provision: false
      recheck_interval: 5m
`

// TestLintCorpus lints broken configs and asserts each message and the line
// of the field at fault: what `benthos-zerobus lint` prints in CI.
func TestLintCorpus(t *testing.T) {
	linter := lintEnv(t, "")
	tests := []struct {
		name     string
		replace  map[string]string // "    key:" prefix → new line
		wantLine int
		want     string
	}{
		{"ftp endpoint", map[string]string{"    endpoint:": "    endpoint: ftp://127.0.0.1:21"}, 5, `field endpoint: scheme must be https (or http for a loopback host), got "ftp"`},
		{"plain http to a remote host", map[string]string{"    endpoint:": "    endpoint: http://zerobus.example.com"}, 5, "field endpoint: plaintext http:// is only allowed for a loopback host (localhost, 127.x.y.z or ::1: the emulator), got zerobus.example.com; use https://"},
		{"workspace without host", map[string]string{"    workspace_url:": "    workspace_url: https://"}, 6, "field workspace_url: has no host"},
		{"table with a space", map[string]string{"    table:": "    table: a.b.c d"}, 7, `field table: must be catalog.schema.table, three non-empty dot-separated parts of ASCII letters, digits and underscores, got "a.b.c d"`},
		{"table with two parts", map[string]string{"    table:": "    table: main.events"}, 7, "field table: must be catalog.schema.table"},
		{"table with a non-ASCII letter", map[string]string{"    table:": "    table: main.default.é"}, 7, "field table: must be catalog.schema.table"},
		{"negative max_in_flight", map[string]string{"    max_in_flight:": "    max_in_flight: -4"}, 8, "field max_in_flight: must be at least 1, got -4"},
		{"zero max_in_flight_bytes", map[string]string{"    max_in_flight:": "    max_in_flight: 64\n    max_in_flight_bytes: 0"}, 9, "field max_in_flight_bytes: must be positive, got 0"},
		{"negative streams", map[string]string{"      min:": "      min: -1"}, 10, "field streams.min: must be at least 0, got -1"},
		{"max below min", map[string]string{"      min:": "      min: 8", "      max:": "      max: 4"}, 10, "field streams: max (4) must be at least min (8)"},
		{"no bandwidth", map[string]string{"      per_stream_mb_per_sec:": "      per_stream_mb_per_sec: 0"}, 12, "field streams.per_stream_mb_per_sec: must be positive, got 0"},
		{"no row rate", map[string]string{"      per_stream_mb_per_sec:": "      per_stream_mb_per_sec: 100\n      per_stream_rows_per_sec: 0"}, 13, "field streams.per_stream_rows_per_sec: must be positive, got 0"},
		{"negative peak rows", map[string]string{"      per_stream_mb_per_sec:": "      per_stream_mb_per_sec: 100\n      peak_rows_per_sec: -5"}, 13, "field streams.peak_rows_per_sec: must be at least 0, got -5"},
		{"grow interval in words", map[string]string{"      per_stream_mb_per_sec:": "      per_stream_mb_per_sec: 100\n      grow_interval: two seconds"}, 13, `field streams.grow_interval: must be a positive duration such as 30s or 5m, got "two seconds"`},
		{"negative shrink_after", map[string]string{"      per_stream_mb_per_sec:": "      per_stream_mb_per_sec: 100\n      shrink_after: -1m"}, 13, "field streams.shrink_after: must be a positive duration"},
		{"no ack capacity", map[string]string{"      channel_capacity:": "      channel_capacity: 0"}, 14, "field ack.channel_capacity: must be at least 1, got 0"},
		{"ack timeout in words", map[string]string{"      timeout:": "      timeout: 5 minutes"}, 15, `field ack.timeout: must be a positive duration such as 30s or 5m, got "5 minutes"`},
		{"close timeout in words", map[string]string{"    close_timeout:": "    close_timeout: 30 seconds"}, 16, `field close_timeout: must be a positive duration such as 30s or 5m, got "30 seconds"`},
		{"schema_metadata without provision", map[string]string{"      recheck_interval:": "      recheck_interval: 5m\n      schema_metadata: registry_schema"}, 18, "field catalog.schema_metadata: takes effect only with catalog.provision: true"},
		{"schema_metadata with surrounding space", map[string]string{"      provision:": "      provision: true\n      warehouse_id: w1\n      schema_metadata: ' registry_schema'"}, 20, `field catalog.schema_metadata: metadata key " registry_schema" has surrounding white space`},
		{"schema_registry beside schema_metadata", map[string]string{"      provision:": "      provision: true\n      warehouse_id: w1\n      schema_metadata: registry_schema", "    close_timeout:": "    close_timeout: 10s\n    schema_registry:\n      url: http://127.0.0.1:8081"}, 5, "fields schema_registry.url and catalog.schema_metadata: both set, two sources of the table's types"},
		{"schema_registry plaintext to a remote host", map[string]string{"    close_timeout:": "    close_timeout: 10s\n    schema_registry:\n      url: http://registry.example.com:8081"}, 18, "field schema_registry.url: plaintext http:// is only allowed for a loopback host"},
		{"schema_registry cache_duration in words", map[string]string{"    close_timeout:": "    close_timeout: 10s\n    schema_registry:\n      url: https://registry.example.com\n      cache_duration: ten minutes"}, 19, "field schema_registry.cache_duration: must be a positive duration"},
		{"negative recheck", map[string]string{"      recheck_interval:": "      recheck_interval: -1m"}, 19, "field catalog.recheck_interval: must be a positive duration"},
		{"plain http to 127.1 (shorthand, refused by run)", map[string]string{"    endpoint:": "    endpoint: http://127.1:50051"}, 5, "field endpoint: plaintext http:// is only allowed for a loopback host (localhost, 127.x.y.z or ::1: the emulator), got 127.1:50051"},
		{"plain http to a loopback-looking name", map[string]string{"    workspace_url:": "    workspace_url: http://127.0.0.1.example.com:8080"}, 6, "field workspace_url: plaintext http:// is only allowed for a loopback host"},
		{"plain http to a zero-padded loopback", map[string]string{"    endpoint:": "    endpoint: http://127.000.0.1:50051"}, 5, "field endpoint: plaintext http:// is only allowed for a loopback host"},
		{"socks5 proxy", map[string]string{"    endpoint:": "    endpoint: https://zerobus.example.com", "    workspace_url:": "    workspace_url: https://ws.example.com", "    table:": "    table: main.default.events\n    proxy_url: socks5://127.0.0.1:1080"}, 8, "field proxy_url: socks5:// proxies are not supported; use an HTTP CONNECT proxy"},
		{"https proxy", map[string]string{"    endpoint:": "    endpoint: https://zerobus.example.com", "    workspace_url:": "    workspace_url: https://ws.example.com", "    table:": "    table: main.default.events\n    proxy_url: https://proxy.example.com:3128"}, 8, "field proxy_url: https:// proxies are not supported"},
		{"proxy with plaintext endpoints", map[string]string{"    table:": "    table: main.default.events\n    proxy_url: http://10.1.2.3:3128"}, 5, "field proxy_url: endpoint and workspace_url are plaintext http:// (loopback only), which is never sent through a proxy; use https:// or remove proxy_url"},
		{"proxy with a plaintext workspace", map[string]string{"    endpoint:": "    endpoint: https://127.0.0.1:50051", "    table:": "    table: main.default.events\n    proxy_url: http://127.0.0.1:3128"}, 5, "field proxy_url: workspace_url is plaintext http://"},
		{"tls settings with plaintext endpoints", map[string]string{"    table:": "    table: main.default.events\n    tls:\n      enabled: true"}, 5, "field tls.enabled: endpoint and workspace_url are plaintext http://, which TLS settings do not apply to; use https://"},
		{"tls settings with a plaintext endpoint", map[string]string{"    workspace_url:": "    workspace_url: https://127.0.0.1:8443", "    table:": "    table: main.default.events\n    tls:\n      enabled: true\n      skip_cert_verify: true"}, 5, "field tls.enabled: endpoint is plaintext http://"},
		{"provisioning without a warehouse", map[string]string{"      provision:": "      provision: true"}, 18, "field catalog.warehouse_id: required when catalog.provision is true (or set DATABRICKS_WAREHOUSE_ID)"},
		{"dedup view without coverage", map[string]string{"      provision:": "      provision: true\n      warehouse_id: wh\n      dedup_view: true"}, 5, "field catalog.dedup_view: needs coverage.source and coverage.offset, whose columns _zb_source and _zb_offset it deduplicates on"},
		{"dedup view without provisioning", map[string]string{"      provision:": "      provision: false\n      dedup_view: true", "    close_timeout:": "    close_timeout: 10s\n    coverage:\n      source: a\n      offset: '1'"}, 5, "field catalog.dedup_view: needs catalog.provision: true, which runs the DDL that defines it"},
		{"dedup view name alone", map[string]string{"      provision:": "      provision: false\n      dedup_view_name: main.default.v"}, 5, "field catalog.dedup_view_name: set without catalog.dedup_view: true"},
		{"dedup view name with two parts", map[string]string{"      provision:": "      provision: true\n      warehouse_id: wh\n      dedup_view: true\n      dedup_view_name: default.v", "    close_timeout:": "    close_timeout: 10s\n    coverage:\n      source: a\n      offset: '1'"}, 24, "field catalog.dedup_view_name: must be catalog.schema.table"},
		{"dedup view name for an interpolated table", map[string]string{"    table:": "    table: main.default.${! meta(\"t\") }", "      provision:": "      provision: true\n      warehouse_id: wh\n      dedup_view: true\n      dedup_view_name: main.default.v", "    close_timeout:": "    close_timeout: 10s\n    coverage:\n      source: a\n      offset: '1'"}, 5, "field catalog.dedup_view_name: one name cannot serve an interpolated table"},
		{"rescue column needing quotes", map[string]string{"    close_timeout:": "    close_timeout: 10s\n    rescue_column: my-rescue"}, 17, `field rescue_column: must be a column name of ASCII letters, digits and underscores, not starting with a digit, got "my-rescue"`},
	}
	lints, err := linter.LintYAML([]byte(lintBase))
	require.NoError(t, err)
	require.Empty(t, lints, "the base config is clean")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines := strings.Split(lintBase, "\n")
			for i, l := range lines {
				for prefix, repl := range tt.replace {
					if strings.HasPrefix(l, prefix) {
						lines[i] = repl
					}
				}
			}
			lints, err := linter.LintYAML([]byte(strings.Join(lines, "\n")))
			require.NoError(t, err)
			require.Len(t, lints, 1, "%v", lints)
			assert.Equal(t, tt.wantLine, lints[0].Line, "line of %q", lints[0].What)
			assert.Contains(t, lints[0].What, tt.want)
		})
	}
}

// With the warehouse in the environment, provisioning lints clean.
func TestLintProvisioningWarehouseFromEnv(t *testing.T) {
	linter := lintEnv(t, "abc123")
	lints, err := linter.LintYAML([]byte(strings.Replace(lintBase, "provision: false", "provision: true", 1)))
	require.NoError(t, err)
	assert.Empty(t, lints)
}

// lintEnv is a linter whose zerobus spec was built with
// DATABRICKS_WAREHOUSE_ID set to warehouse, as a lint run would see it.
func lintEnv(t *testing.T, warehouse string) *service.StreamConfigLinter {
	t.Helper()
	t.Setenv(EnvWarehouseID, warehouse)
	env := service.GlobalEnvironment().Clone()
	require.NoError(t, env.RegisterBatchOutput("zerobus", Spec(), newOutputFromConfig))
	return env.FullConfigSchema("", "").NewStreamConfigLinter()
}
