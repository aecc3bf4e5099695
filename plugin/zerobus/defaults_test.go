package zerobus

import (
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/tablewriter"
)

// TestSpecDefaultsAreTheEngines parses a config with only the required
// fields and checks every default the spec shares with an engine package
// against that package's own: one source per default.
func TestSpecDefaultsAreTheEngines(t *testing.T) {
	c, err := parseYAML(t, minimalYAML)
	require.NoError(t, err)

	// The pool config the output builds at its defaults is the pool's own
	// default config, field for field.
	assert.Equal(t, pool.DefaultConfig(), c.poolConfig())

	assert.Equal(t, pool.DefaultConfig().MinStreams, c.StreamsMin, "streams.min 0 (auto) for a fixed table")
	assert.Equal(t, pool.DefaultConfig().MaxStreams, c.StreamsMax, "streams.max")
	assert.Equal(t, pool.DefaultConfig().PerStreamMBps, c.PerStreamMBps, "streams.per_stream_mb_per_sec")
	assert.Equal(t, pool.DefaultConfig().PeakMBps, c.PeakMBps, "streams.peak_mb_per_sec")
	assert.Equal(t, acklane.DefaultCapacity, c.AckCapacity, "ack.channel_capacity")
	assert.Equal(t, tablewriter.DefaultAckTimeout, c.AckTimeout, "ack.timeout")
	assert.Equal(t, tablewriter.DefaultMaxOpenTables, c.MaxOpenTables, "max_open_tables")
	assert.Equal(t, tablewriter.DefaultMaxInFlightBytes, c.MaxInFlightBytes, "max_in_flight_bytes")
	assert.Equal(t, tablewriter.DefaultRecheckInterval, c.RecheckInterval, "catalog.recheck_interval")
	assert.Equal(t, catalog.DefaultCallTimeout, c.WSTimeout, "workspace_timeout")
	assert.Equal(t, arrowconv.DefaultEpochUnit, c.EpochUnit, "reconcile.timestamp_epoch_unit")
	assert.Equal(t, string(catalog.PolicyRespect), c.CommentsPolicy, "catalog.comments_policy")
	assert.Equal(t, string(catalog.RoleDerived), c.Role, "catalog.role")
	assert.Equal(t, DefaultCloseTimeout, c.CloseTimeout, "close_timeout")
	assert.Equal(t, DefaultMaxInFlight, c.MaxInFlight, "max_in_flight")
	assert.Equal(t, DefaultBatchCount, c.Batching.Count, "batching.count")
	assert.Equal(t, DefaultBatchBytes, c.Batching.ByteSize, "batching.byte_size")
	assert.Equal(t, DefaultBatchPeriod, c.Batching.Period, "batching.period")

	// The optional fields whose examples are not defaults: empty, off.
	assert.Nil(t, c.ProxyURL, "proxy_url: the environment's")
	assert.Nil(t, c.OrderingKey, "ordering_key: round-robin")
	assert.Empty(t, c.ContractPath, "catalog.contract")
	assert.Empty(t, c.ColumnDescriptions, "catalog.column_descriptions")
	assert.Empty(t, c.DLTable, "dead_letter.table")
	assert.Nil(t, c.CovSource, "coverage")
	assert.Empty(t, c.SchemaMetadata, "catalog.schema_metadata: off")
	assert.False(t, c.ntzFromZoned(), "reconcile.timestamp_ntz_from_zoned: off")
}

// TestPrintedEmptyDefaultsAreAccepted: the values `create` prints for the
// optional fields (empty strings) parse as "off", not as errors.
func TestPrintedEmptyDefaultsAreAccepted(t *testing.T) {
	c, err := parseYAML(t, minimalYAML+`proxy_url: ""
ordering_key: ""
dead_letter:
  table: ""
  include_payload: true
coverage:
  source: ""
  offset: ""
  table: ""
catalog:
  contract: ""
  column_descriptions: {}
`)
	require.NoError(t, err)
	assert.Nil(t, c.ProxyURL)
	assert.Nil(t, c.OrderingKey)
	assert.Empty(t, c.DLTable)
	assert.Nil(t, c.CovSource)

	// And the lint rules take them.
	env := lintEnv(t, "")
	for _, y := range []string{"dead_letter:\n  table: \"\"\n", "coverage:\n  table: \"\"\n"} {
		assert.Empty(t, lintOutput(t, env, y), y)
	}
	assert.Contains(t, lintOutput(t, env, "dead_letter:\n  table: a.b\n"), "field dead_letter.table: must be catalog.schema.table")
	assert.Contains(t, lintOutput(t, env, "coverage:\n  source: s\n  offset: o\n  table: x\n"), "field coverage.table: must be catalog.schema.table")
}

// TestSettingsLineNamesIncludePayloadOnlyWithADeadLetterTable: the start-up
// line does not log a dead-letter option when there is no dead-letter table.
func TestSettingsLineNamesIncludePayloadOnlyWithADeadLetterTable(t *testing.T) {
	c, err := parseYAML(t, minimalYAML)
	require.NoError(t, err)
	line := knobsLine(c.knobs(2))
	assert.NotContains(t, line, "include_payload")
	assert.Contains(t, line, "dead_letter.table= ")

	c, err = parseYAML(t, minimalYAML+"dead_letter:\n  table: main.default.dlq\n  include_payload: false\n")
	require.NoError(t, err)
	assert.Contains(t, knobsLine(c.knobs(2)), "dead_letter.table=main.default.dlq dead_letter.include_payload=false ")
}

func TestDurationDefault(t *testing.T) {
	for d, want := range map[time.Duration]string{
		5 * time.Minute: "5m", 30 * time.Second: "30s", 2 * time.Hour: "2h", 90 * time.Second: "90s", 1500 * time.Millisecond: "1.5s",
	} {
		assert.Equal(t, want, durationDefault(d))
		got, err := time.ParseDuration(want)
		require.NoError(t, err)
		assert.Equal(t, d, got)
	}
}

// lintOutput lints lintBase with extra (zerobus fields, unindented) added
// under the output, and returns every lint message, one a line.
func lintOutput(t *testing.T, linter *service.StreamConfigLinter, extra string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(lintBase)
	for _, l := range strings.Split(strings.TrimRight(extra, "\n"), "\n") {
		b.WriteString("    " + l + "\n")
	}
	lints, err := linter.LintYAML([]byte(b.String()))
	require.NoError(t, err)
	var out []string
	for _, l := range lints {
		out = append(out, l.What)
	}
	return strings.Join(out, "\n")
}
