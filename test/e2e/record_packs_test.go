package e2e

import (
	be "encoding/binary"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/coverage"
)

// TestBinaryExampleAvroFast runs config/examples/avro-fast.yaml (redpanda
// with pack_records → zerobus with schema_registry, coverage, ordering_key
// ${! @kafka_partition } and a dead-letter table, no processors) against
// the emulator binary's broker and registry: Avro records from
// avro-produce, then two poison records, one not framed (and not JSON) and
// one framed with a schema id the registry does not have. Every good record
// lands once with the registry's types, its own coverage position (each
// record of a pack its own offset), the poison records are dead-lettered
// with their reasons, the committed offsets reach the end after SIGTERM,
// and each partition's coverage is [0, end) but for the dead-lettered
// offsets.
func TestBinaryExampleAvroFast(t *testing.T) {
	t.Parallel()
	const (
		parts = 3
		good  = 3000
		table = "main.default.avro_readings_fast"
		dlq   = "main.default.avro_readings_fast_dead_letter"
	)
	vars, _ := startEmulatorProcessVars(t, "--kafka", "127.0.0.1:0", "--schema-registry", "127.0.0.1:0", "--kafka-topic", fmt.Sprintf("readings:%d", parts))
	brokers, httpURL, regURL := vars["KAFKA_BROKERS"], vars["DATABRICKS_HOST"], vars["SCHEMA_REGISTRY_URL"]
	out, err := exec.Command(emulatorBinary(t), "avro-produce", "--brokers", brokers, "--registry", regURL, "--topic", "readings", "--count", fmt.Sprint(good)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	// The poison records: at the end of partitions 0 and 1.
	unknown := be.BigEndian.AppendUint32([]byte{0}, 4040)
	unknown = append(unknown, 0x02, 'h', 'i')
	poison := [][]byte{[]byte(`not json {`), unknown}
	b := &kafkaBroker{tb: t, addr: brokers}
	require.NoError(t, b.produce("readings", parts, 0, len(poison), func(i int) []byte { return poison[i] }))

	env := []string{"ZEROBUS_ENDPOINT=" + vars["ZEROBUS_ENDPOINT"], "DATABRICKS_HOST=" + httpURL, "HTTP_ADDRESS=" + freeAddr(t),
		"KAFKA_BROKERS=" + brokers, "SCHEMA_REGISTRY_URL=" + regURL}
	p := start(t, env, "run", filepath.Join(repoRoot(t), "config", "examples", "avro-fast.yaml"))
	waitRowCounts(t, httpURL, p, map[string]int64{table: good, dlq: int64(len(poison))})
	code, err := terminate(p, 60*time.Second)
	require.NoError(t, err)
	require.Equal(t, 0, code, "SIGTERM ends the pipeline cleanly:\n%s", tail(p.out.String(), 30))
	assert.Contains(t, p.out.String(), "pack_records=true", "the start-up line logs the knob")

	committed, end, err := b.offsets("readings", "zerobus-readings-fast")
	require.NoError(t, err)
	assert.Equal(t, end, committed, "the partitions moved past the poison records")

	// The registry's types, not inferred ones.
	ti, err := fetchTableInfo(httpURL, table)
	require.NoError(t, err)
	types := map[string]string{}
	for _, c := range ti.Columns {
		types[c.Name] = c.TypeText
	}
	for col, want := range map[string]string{"id": "bigint", "price": "decimal(10,2)", "reading_time": "timestamp", "day": "date", "tags": "array<string>"} {
		assert.Equal(t, want, types[col], "column %s", col)
	}

	// Each record its own row at its own position: avro-produce puts id
	// in partition (id-1) % parts at offset (id-1) / parts.
	rows := readRows(t, httpURL, table)
	assert.Len(t, rows, good, "every good record once")
	ids := map[int]bool{}
	for _, r := range rows {
		id := int(r["id"].(float64))
		ids[id] = true
		assert.Equal(t, fmt.Sprintf("readings/%d", (id-1)%parts), r["_zb_source"], "record %d's source", id)
		assert.EqualValues(t, (id-1)/parts, r["_zb_offset"], "record %d's offset", id)
	}
	assert.Len(t, ids, good)

	dead := readRows(t, httpURL, dlq)
	require.Len(t, dead, len(poison), "each poison record dead-lettered once")
	var errs []string
	for _, d := range dead {
		errs = append(errs, fmt.Sprint(d["error"]))
	}
	assert.Contains(t, fmt.Sprint(errs), "schema id 4040 is not in the schema registry")

	deadAt := map[int32][]coverage.Range{}
	for i := range poison {
		at := end[int32(i)] - 1
		deadAt[int32(i)] = []coverage.Range{{Start: at, End: at + 1}}
	}
	cov, _ := coverageBySource(t, httpURL, table+"_zb_coverage")
	for part, e := range end {
		src := fmt.Sprintf("readings/%d", part)
		rs, ok := cov[src]
		require.True(t, ok, "coverage of %s: %v", src, cov)
		assert.Equal(t, deadAt[part], rs.Gaps(0, e), "coverage of %s: [0, %d) but for the dead letters", src, e)
	}
}
