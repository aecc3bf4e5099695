package zerobusreplay

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/coverage"
	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

func parse(t *testing.T, y string) (Config, error) {
	t.Helper()
	pc, err := Spec().ParseYAML(y, nil)
	require.NoError(t, err)
	return ParseConfig(pc)
}

func TestReplayRefusesNonPrimaryRawTable(t *testing.T) {
	in, err := connectTo(t, "main.raw.plain:id BIGINT NOT NULL, msg STRING", "")
	ctx := context.Background()
	require.Error(t, err)
	for _, pre := range []string{catalog.PreIcebergReads, catalog.PreColumnMapping, catalog.PreDeletionVectors} {
		assert.Contains(t, err.Error(), pre, "names each unmet precondition")
	}
	assert.True(t, isRefusal(err), "a precondition cannot pass by retrying")
	before := refusals.Load()
	assert.ErrorIs(t, in.Connect(ctx), service.ErrEndOfInput, "the refusal ends the input")
	assert.Equal(t, before+1, refusals.Load())
	assert.True(t, Refused())
	_, _, err = in.ReadBatch(ctx)
	assert.ErrorIs(t, err, service.ErrNotConnected, "nothing is read from a refused table")
}

func TestConfigChecks(t *testing.T) {
	base := "workspace_url: http://127.0.0.1:1\ntable: a.b.c\nclient_id: id\nclient_secret: s\n"
	c, err := parse(t, base)
	require.NoError(t, err)
	assert.Equal(t, "a.b.c_zb_coverage", c.CoverageTable)
	assert.True(t, c.Where.Empty())
	assert.Equal(t, 1000, c.BatchSize)
	assert.Equal(t, ConsistencyTolerate, c.Consistency)
	assert.True(t, c.RequirePrimary)

	c, err = parse(t, base+"where:\n  source: t/1\n  offset_from: 5\n  offset_to: 9\n  emit_ts_from: 2026-01-02T03:04:05Z\n")
	require.NoError(t, err)
	assert.Equal(t, `_zb_emit_ts >= 2026-01-02T03:04:05Z AND _zb_source = "t/1" AND _zb_offset >= 5 AND _zb_offset < 9`, c.Where.String())

	// 0 is no bound: what `create` prints for both selects every row and
	// needs no _zb_offset column.
	c, err = parse(t, base+"where:\n  offset_from: 0\n  offset_to: 0\n")
	require.NoError(t, err)
	assert.True(t, c.Where.Empty(), c.Where.String())

	for _, tc := range []struct{ extra, want string }{
		{"where:\n  offset_from: 9\n  offset_to: 9\n", "offset_from (9) must be below offset_to (9)"},
		{"where:\n  offset_from: -1\n", "where.offset_from: must not be negative"},
		{"where:\n  emit_ts_from: 2026-01-02T00:00:00Z\n  emit_ts_to: 2026-01-01T00:00:00Z\n", "emit_ts_from"},
		{"where:\n  emit_ts_to: yesterday\n", "emit_ts_to"},
		{"consistency: force\n", "warehouse_id"},
		{"batch_size: 0\n", "batch_size"},
	} {
		t.Setenv(EnvWarehouseID, "")
		_, err := parse(t, base+tc.extra)
		require.Error(t, err, tc.extra)
		assert.Contains(t, err.Error(), tc.want)
	}
	t.Setenv(EnvClientID, "")
	t.Setenv(EnvClientSecret, "")
	_, err = parse(t, "workspace_url: http://127.0.0.1:1\ntable: a.b.c\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "client_id/client_secret")
	t.Setenv(EnvClientID, "envid")
	t.Setenv(EnvClientSecret, "envsecret")
	c, err = parse(t, "workspace_url: http://127.0.0.1:1\ntable: a.b.c\n")
	require.NoError(t, err)
	assert.Equal(t, "envid", c.ClientID)
	assert.Contains(t, c.credSource, EnvClientID)
}

func TestLintRules(t *testing.T) {
	env := service.NewEnvironment()
	for _, tc := range []struct{ y, want string }{
		{"zerobus_replay:\n  workspace_url: http://example.com\n  table: a.b.c\n", "plaintext http"},
		{"zerobus_replay:\n  workspace_url: https://x\n  table: a.b\n", "catalog.schema.table"},
		{"zerobus_replay:\n  workspace_url: https://x\n  table: a.b.c\n  batch_size: 0\n", "batch_size"},
		{"zerobus_replay:\n  workspace_url: https://x\n  table: a.b.c\n  where:\n    offset_from: 3\n    offset_to: 1\n", "offset_from"},
		{"zerobus_replay:\n  workspace_url: https://x\n  table: a.b.c\n  where:\n    emit_ts_from: nope\n", "RFC 3339"},
		{"zerobus_replay:\n  workspace_url: https://x\n  table: a.b.c\n  where:\n    offset_to: -2\n", "where.offset_to: must not be negative"},
	} {
		sb := env.NewStreamBuilder()
		err := sb.AddInputYAML(tc.y)
		require.Error(t, err, tc.y)
		assert.Contains(t, err.Error(), tc.want)
	}
	sb := env.NewStreamBuilder()
	require.NoError(t, sb.AddInputYAML("zerobus_replay:\n  workspace_url: https://x\n  table: a.b.c\n  where:\n    emit_ts_from: 2026-01-02T03:04:05.5Z\n    offset_to: 4\n"))
	sb = env.NewStreamBuilder()
	require.NoError(t, sb.AddInputYAML("zerobus_replay:\n  workspace_url: https://x\n  table: a.b.c\n  where:\n    offset_from: 0\n    offset_to: 0\n"), "the printed defaults lint")
}

func TestCoverageReport(t *testing.T) {
	r := func(start, end int64) coverage.Range { return coverage.Range{Start: start, End: end} }
	set := func(rs ...coverage.Range) *coverage.RangeSet {
		var s coverage.RangeSet
		for _, x := range rs {
			s.AddRange(x)
		}
		return &s
	}
	assert.Equal(t, []coverage.Range{r(0, 10), r(12, 20)}, set(r(5, 10), r(0, 5), r(12, 15), r(14, 20), r(3, 4), r(7, 7)).Ranges(), "union, adjacent join, empty dropped")
	assert.Equal(t, []coverage.Range{r(10, 12), r(20, 25)}, set(r(0, 10), r(12, 20)).Gaps(5, 25))
	assert.Empty(t, set(r(0, 10)).Gaps(2, 8))

	ranges := map[string]*coverage.RangeSet{
		"t/0": set(r(0, 50), r(50, 100)),            // two writers, adjacent
		"t/1": set(r(0, 40), r(60, 100), r(30, 45)), // overlapping, one gap
	}
	complete, missing := coverageReport(ranges, Where{})
	assert.Equal(t, map[string][]coverage.Range{"t/0": {r(0, 100)}, "t/1": {r(0, 45), r(60, 100)}}, complete)
	assert.Equal(t, []coverageGap{{"t/1", r(45, 60)}}, missing)

	from, to := int64(10), int64(120)
	_, missing = coverageReport(ranges, Where{Source: "t/0", OffsetFrom: &from, OffsetTo: &to})
	assert.Equal(t, []coverageGap{{"t/0", r(100, 120)}}, missing, "beyond the last durable offset is a gap")
	_, missing = coverageReport(ranges, Where{Source: "t/9", OffsetFrom: &from, OffsetTo: &to})
	assert.Equal(t, []coverageGap{{"t/9", r(10, 120)}}, missing, "a source never recorded is one gap")
}

// connectTo starts an emulator with the table spec (a plain table, with no
// primary-raw properties), connects a replay input of it, with extra config
// lines, and returns the input and the error of its connect step.
func connectTo(t *testing.T, table, extra string) (*input, error) {
	t.Helper()
	srv, err := emulator.Start(emulator.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(),
		Tables: []string{table}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	name, _, _ := strings.Cut(table, ":")
	cfg, err := parse(t, fmt.Sprintf("workspace_url: %s\ntable: %s\nclient_id: %s\nclient_secret: %s\n%s",
		srv.HTTPURL(), name, emulator.DefaultClientID, emulator.DefaultClientSecret, extra))
	require.NoError(t, err)
	in := newInput(cfg, service.MockResources())
	t.Cleanup(func() { _ = in.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return in, in.connect(ctx)
}
