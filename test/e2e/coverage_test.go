package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/coverage"
	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

// A generate input shaped like Kafka (one topic, three partitions, offsets
// per partition in kafka_offset) writes ~10k rows with coverage into a
// provisioned table through the emulator. Read back: every raw row carries
// its source and offset in _zb_source/_zb_offset, and the union of the
// coverage table's ranges per source is exactly the offsets written.
func TestCoverageTableMatchesTheRowsWritten(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{})
	const (
		n          = 9999
		partitions = 3
		table      = "main.default.orders"
	)
	b := service.NewStreamBuilder()
	require.NoError(t, b.SetLoggerYAML("level: warn"))
	require.NoError(t, b.AddInputYAML(fmt.Sprintf(`generate:
  count: %d
  interval: ""
  batch_size: 500
  mapping: |
    let n = counter() - 1
    root.id = $n
    root.msg = "order " + $n.string()
    meta kafka_topic = "orders"
    meta kafka_partition = ($n %% %d).string()
    meta kafka_offset = (($n - $n %% %d) / %d).string()
`, n, partitions, partitions, partitions)))
	require.NoError(t, b.AddOutputYAML(outputYAML(srv, table, `catalog:
  provision: true
  warehouse_id: wh-e2e
coverage:
  source: '${! meta("kafka_topic") }/${! meta("kafka_partition") }'
  offset: '${! meta("kafka_offset") }'
`)))
	s, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	require.NoError(t, s.Run(ctx), "the pipeline ends when generate is done")

	raw := rowsByID(t, srv, table)
	require.Len(t, raw, n)
	written := map[string]*coverage.RangeSet{}
	for id, r := range raw {
		src := fmt.Sprintf("orders/%d", id%partitions)
		off, ok := asInt64(r["_zb_offset"])
		require.True(t, ok, "row %d has an integer _zb_offset: %v", id, r["_zb_offset"])
		assert.Equal(t, src, r["_zb_source"], "row %d", id)
		assert.Equal(t, id/partitions, off, "row %d", id)
		if written[src] == nil {
			written[src] = &coverage.RangeSet{}
		}
		written[src].Add(off, off+1)
	}

	covRows, err := srv.TableRows(table+"_zb_coverage", 0)
	require.NoError(t, err)
	require.NotEmpty(t, covRows)
	covered := map[string]*coverage.RangeSet{}
	for _, r := range covRows {
		assert.Equal(t, "zerobus", r["writer_id"], "the writer id is the output's label")
		start, ok1 := asInt64(r["start"])
		end, ok2 := asInt64(r["end"])
		require.True(t, ok1 && ok2, "integer start/end: %v", r)
		src := fmt.Sprint(r["source"])
		if covered[src] == nil {
			covered[src] = &coverage.RangeSet{}
		}
		covered[src].Add(start, end)
	}
	require.Len(t, covered, partitions)
	for src, set := range written {
		require.Contains(t, covered, src)
		assert.Equal(t, set.Ranges(), covered[src].Ranges(), "coverage of %s is exactly the offsets written", src)
		assert.Equal(t, []coverage.Range{{Start: 0, End: n / partitions}}, covered[src].Ranges())
	}
	t.Logf("%d raw rows, %d coverage rows", len(raw), len(covRows))
}

// The coverage table's grant is revoked mid-run (MODIFY removed; the
// emulator rotates every stream, so the coverage stream's reconnect is
// refused): its writer stops and backs off through its own lifecycle, the
// cause explained once naming the coverage table and the grant, while the
// rows keep landing in the raw table. Once the grant is back, the coverage
// table catches up by itself, no restart: its ranges are exactly the rows
// stored.
func TestCoverageTableRefusedRowsKeepFlowing(t *testing.T) {
	t.Parallel()
	const (
		table    = "main.default.cov_refused"
		covTable = table + "_zb_coverage"
	)
	p := emulator.DefaultClientID
	tableGrant := func(name string) emulator.Grant {
		return emulator.Grant{Principal: p, SecurableType: "TABLE", FullName: name, Privileges: []string{"SELECT", "MODIFY"}}
	}
	srv, err := emulator.Start(emulator.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(),
		Tables: []string{
			table + ":id BIGINT NOT NULL, msg STRING, _zb_source STRING, _zb_offset BIGINT",
			covTable + ":writer_id STRING, source STRING, start BIGINT, end BIGINT, _zb_emit_ts TIMESTAMP",
		},
		Grants: emulator.GrantsConfig{Strict: true, Grants: []emulator.Grant{
			{Principal: p, SecurableType: "CATALOG", FullName: "main", Privileges: []string{"USE CATALOG"}},
			{Principal: p, SecurableType: "SCHEMA", FullName: "main.default", Privileges: []string{"USE SCHEMA"}},
			tableGrant(table), tableGrant(covTable),
		}},
		Faults: emulator.Faults{StreamLifetime: 500 * time.Millisecond, RotationGrace: 100 * time.Millisecond},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })

	b := service.NewStreamBuilder()
	logs := &syncBuffer{}
	b.SetLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	require.NoError(t, b.AddOutputYAML(outputYAML(srv, table, `coverage:
  source: '${! meta("src") }'
  offset: '${! meta("off") }'
`)))
	produce, ctx, stop := startProducer(t, b)
	defer func() { _ = stop() }()

	next := 0
	write := func(n int) {
		t.Helper()
		var batch service.MessageBatch
		for range n {
			m := service.NewMessage(fmt.Appendf(nil, `{"id":%d,"msg":"m"}`, next))
			m.MetaSetMut("src", "t/0")
			m.MetaSetMut("off", fmt.Sprint(next))
			batch = append(batch, m)
			next++
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		require.NoError(t, produce(wctx, batch), "rows land whatever the coverage table does")
	}
	covered := func() *coverage.RangeSet {
		set, _ := coverageBySource(t, srv.HTTPURL(), covTable)
		if set["t/0"] == nil {
			return &coverage.RangeSet{}
		}
		return set["t/0"]
	}
	write(50)
	eventually(t, 20*time.Second, 50*time.Millisecond, "no coverage row", func() (bool, string) {
		c := covered()
		return c.Covers(0, 50), fmt.Sprint(c.Ranges())
	})

	require.NoError(t, srv.UpdateGrants(emulator.GrantChange{Principal: p, SecurableType: "TABLE", FullName: covTable, Remove: []string{"MODIFY"}}))
	explanation := func() []string {
		var out []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "What to do") && strings.Contains(l, covTable) {
				out = append(out, l)
			}
		}
		return out
	}
	refusedAt := next
	eventually(t, 30*time.Second, 100*time.Millisecond, "the coverage table's refusal was never explained", func() (bool, string) {
		write(20) // rows keep landing meanwhile
		return len(explanation()) > 0, logs.String()
	})
	for range 10 {
		write(20)
	}
	assert.Greater(t, next-refusedAt, 200, "rows written while the coverage table refused")
	lines := explanation()
	require.Len(t, lines, 1, "explained once:\n%s", strings.Join(lines, "\n"))
	assert.Contains(t, lines[0], "coverage table "+covTable+":")
	assert.Contains(t, lines[0], "MODIFY ON TABLE "+covTable)
	assert.Contains(t, lines[0], "keep flowing")
	assert.False(t, covered().Covers(0, int64(next)), "the coverage table lags while refused")

	require.NoError(t, srv.UpdateGrants(emulator.GrantChange{Principal: p, SecurableType: "TABLE", FullName: covTable, Add: []string{"MODIFY"}}))
	write(30)
	eventually(t, 60*time.Second, 100*time.Millisecond, "the coverage table never caught up after the grant", func() (bool, string) {
		c := covered()
		return c.Covers(0, int64(next)), fmt.Sprint(c.Ranges())
	})
	require.NoError(t, stop())
	raw, n := rawOffsets(t, srv.HTTPURL(), table)
	require.Equal(t, []coverage.Range{{Start: 0, End: int64(next)}}, raw["t/0"].Ranges(), "every row landed")
	// Streams rotate every 500 ms here with a 100 ms close period: on a
	// loaded machine a batch stored after it ran out loses its ack with
	// the stream and is resent (a CI run once stored one 20-row batch
	// twice). Duplicates are counted, and only those are allowed.
	dups := n - next
	left := assertAtLeastOnce(t, srv.Stats().Tables[table], dups)
	assert.Equal(t, raw["t/0"].Ranges(), covered().Ranges(), "coverage is exactly the rows stored: no gap")
	assert.Contains(t, logs.String(), "coverage table "+covTable+": written again")
	t.Logf("%d rows, %d written while the coverage table refused; %d duplicates, %d rows left unacked by streams the emulator ended (at-least-once)",
		next, next-refusedAt, dups, left)
}
