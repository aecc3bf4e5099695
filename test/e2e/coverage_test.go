package e2e

import (
	"context"
	"fmt"
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
