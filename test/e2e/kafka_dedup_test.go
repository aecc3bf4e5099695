package e2e

// Exactly once for readers (issue 34): the deduplicating view beside a raw
// table written at least once. kill -9 under load leaves duplicates in the
// raw table; the view returns each source position once, before and after
// the table gains a column, and its rows are those DuckDB computes from the
// same raw rows with the statement the output emitted.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// dedupValue is record id's value; from the second half on it carries a
// field the table does not have yet, "tag", which the output adds as a
// column mid-run.
func dedupValue(tagged bool) func(i int) []byte {
	return func(i int) []byte {
		if tagged {
			return []byte(fmt.Sprintf(`{"id":%d,"msg":"%s","tag":"t%d"}`, i, strings.Repeat("x", 200), i))
		}
		return kafkaValue(i, 200)
	}
}

// TestKafkaDedupViewKillNine: redpanda → zerobus with coverage, provisioning
// and catalog.dedup_view, killed with SIGKILL three times under load; the
// second half of the records carries a new field, so the table gains a
// column between the first and the second kill. After every kill and at the
// end: the view has exactly one row per distinct (source, offset) of the raw
// table; at the end the raw table has every record (0 missing, with its
// duplicates), the view exactly N rows, N distinct, the new column shows in
// the view, and the view's rows equal DuckDB's for the statement the output
// emitted over the same raw rows.
func TestKafkaDedupViewKillNine(t *testing.T) {
	t.Parallel()
	const parts = 6
	n, rate := 20_000, 2000
	if chaosLong() {
		n, rate = 300_000, 10_000
	}
	// Catalog "zb", not "main": DuckDB reserves the name main, and the
	// statement is run there unchanged but for its quoting.
	const table = "zb.default.kafka_dedup"
	view := catalog.DefaultDedupView(table)
	seed := time.Now().UnixNano()
	r := rand.New(rand.NewPCG(uint64(seed), 34))
	t.Logf("seed %d", seed)
	srv := startEmulator(t, emulator.Faults{})
	b := startKafkaBroker(t, kafkaTopic, parts)
	half := n / 2
	extra := `catalog:
  provision: true
  warehouse_id: wh-e2e
  dedup_view: true
coverage:
  source: '${! meta("kafka_topic") }/${! meta("kafka_partition") }'
  offset: '${! meta("kafka_offset") }'`
	config := kafkaPipeline(srv, b.addr, kafkaTopic, table, "", "instance_id: dedup-view\nsession_timeout: 6s\nheartbeat_interval: 1s", extra)

	hasTag := func() bool {
		tb, ok := srv.Registry().Get(table)
		if !ok {
			return false
		}
		_, i := tb.Column("tag")
		return i >= 0
	}
	// A steady producer (load): rate records/s in steps of a tenth of a
	// second, the second half with the new field.
	var produced atomic.Int64
	produceErr := make(chan error, 1)
	startLoad := func() {
		go func() {
			began := time.Now()
			step := rate / 10
			for i := 0; i < n; i += step {
				c := min(step, n-i)
				if err := b.produce(kafkaTopic, parts, i, c, dedupValue(i >= half)); err != nil {
					produceErr <- err
					return
				}
				produced.Store(int64(i + c))
				time.Sleep(time.Until(began.Add(time.Duration(i+c) * time.Second / time.Duration(rate))))
			}
			produceErr <- nil
		}()
	}
	// Kill k lands at a random point of the k-th quarter of the production
	// (kills 2 and 3 once the table has the tag column of the second half),
	// once this run has landed rows of its own and committed beyond the
	// last kill's offsets, with records durable beyond its commit: the
	// next run both reads records again and lands new ones.
	// minUncommitted records durable but not committed at each kill make
	// the duplicates certain.
	const minUncommitted = 200
	var prevCommitted, dupsBefore, reread int64
	for k := 0; k < 3; k++ {
		before := tableRowCount(srv, table)
		p := startKafkaProduct(t, config, fmt.Sprintf("run%d", k))
		if k == 0 {
			// The load starts with the first run (its start may include
			// building the binary).
			startLoad()
		}
		at := int64(float64(n) * randomBetween(r, float64(k+1)/4, float64(k+1)/4+0.1))
		eventually(t, 120*time.Second, 50*time.Millisecond, fmt.Sprintf("%d records produced, rows landed and a commit by run %d", at, k), func() (bool, string) {
			got := tableRowCount(srv, table)
			if produced.Load() < at || got <= before || (k > 0 && !hasTag()) {
				return false, fmt.Sprintf("%d produced, %d rows (%d before the run), tag column %v\n%s", produced.Load(), got, before, hasTag(), tail(p.out.String(), 20))
			}
			// At least minUncommitted records durable beyond the commit,
			// which the next run reads again: distinct rows are at least
			// the rows less the duplicates so far and the re-read of this
			// run.
			committed, _, err := b.offsets(kafkaTopic, kafkaGroup)
			distinct := got - dupsBefore - reread
			return err == nil && sumOffsets(committed) > prevCommitted && distinct-sumOffsets(committed) >= minUncommitted,
				fmt.Sprintf("%d rows, at least %d distinct; committed %d, at the last kill %d (%v)", got, distinct, sumOffsets(committed), prevCommitted, err)
		})
		kill9(p)
		settle(srv, table)
		l := readLanded(t, srv, table)
		vr := viewRowsOnce(t, srv, view)
		require.Equal(t, l.distinct(), vr, "kill %d: the view holds one row per distinct (source, offset) of the raw table", k+1)
		committed, _, err := b.offsets(kafkaTopic, kafkaGroup)
		require.NoError(t, err)
		prevCommitted = sumOffsets(committed)
		dupsBefore, reread = int64(l.rows-l.distinct()), int64(l.distinct())-prevCommitted
		t.Logf("kill %d at %d produced, %d raw rows: %d distinct, view %d rows, tag column %v; committed %d", k+1, produced.Load(), l.rows, l.distinct(), vr, hasTag(), prevCommitted)
	}
	require.NoError(t, <-produceErr)

	p := startKafkaProduct(t, config, "final")
	_, end, err := b.offsets(kafkaTopic, kafkaGroup)
	require.NoError(t, err)
	waitAllLanded(t, srv, table, end, 180*time.Second, p.out.String)
	waitCommittedAtEnd(t, b, kafkaTopic, kafkaGroup, 60*time.Second)
	// Everything may have landed before this run was up: SIGTERM only once
	// its output is active (its signal handler installed).
	eventually(t, 60*time.Second, 50*time.Millisecond, "the final run is active", func() (bool, string) {
		return strings.Contains(p.out.String(), "Output type zerobus is now active"), tail(p.out.String(), 10)
	})
	code, err := terminate(p, 60*time.Second)
	require.NoError(t, err)
	assert.Equal(t, 0, code, tail(p.out.String(), 30))

	l := readLanded(t, srv, table)
	missing, saw := countMissing(l.missingBelow(end))
	require.Zero(t, missing, saw)
	total := 0
	for _, d := range l.duplicates() {
		total += d
	}
	assert.Positive(t, total, "kill -9 left duplicates in the raw table")
	assert.Equal(t, n, viewRowsOnce(t, srv, view), "the view: exactly N rows, N distinct")

	// The new column shows in the view: the view was redefined (ALTER VIEW)
	// when the table gained it.
	v, ok := srv.Workspace().View(view)
	require.True(t, ok)
	_, tagAt := (workspace.Table{Columns: v.Columns}).Column("tag")
	require.GreaterOrEqual(t, tagAt, 0, "the view's columns include the added one")
	assert.Positive(t, srv.Workspace().Stats().ByKind[workspace.KindAlterViewAs], "the view was redefined after the table evolved")
	rows, err := srv.TableRows(view, 0)
	require.NoError(t, err)
	tagged := 0
	for _, row := range rows {
		id, _ := asInt64(row["id"])
		if id >= int64(half) {
			assert.Equal(t, fmt.Sprintf("t%d", id), row["tag"], "record %d's tag in the view", id)
			tagged++
		}
	}
	assert.Equal(t, n-half, tagged)

	duck := duckDBViewRows(t, srv, table, view)
	assert.Equal(t, len(rows), len(duck), "DuckDB's view has as many rows as the emulator's")
	mine := viewRowKeys(t, rows)
	missingInDuck, extraInDuck := 0, 0
	for k := range mine {
		if !duck[k] {
			missingInDuck++
		}
	}
	for k := range duck {
		if !mine[k] {
			extraInDuck++
		}
	}
	assert.Zero(t, missingInDuck+extraInDuck, "the emulator's view rows equal DuckDB's: %d only in the emulator's, %d only in DuckDB's", missingInDuck, extraInDuck)
	faultLine(t, "dedup view, kafka kill -9 ×3 under load (%d records, %d partitions, a column added after kill 1): raw 0 missing, %d duplicates (%d rows); view %d rows, %d distinct; DuckDB's rows equal the emulator's (%d)",
		n, parts, total, l.rows, len(rows), len(mine), len(duck))
}

// viewRowsOnce reads the view's rows and checks that no (source, offset)
// appears twice, by the coverage columns and by the record's own partition
// and offset; it returns the number of rows.
func viewRowsOnce(t *testing.T, srv *emulator.Server, view string) int {
	t.Helper()
	rows, err := srv.TableRows(view, 0)
	require.NoError(t, err)
	seen := map[string]bool{}
	seenKafka := map[[2]int64]bool{}
	for _, row := range rows {
		src, _ := row["_zb_source"].(string)
		off, ok := asInt64(row["_zb_offset"])
		require.True(t, ok && src != "", "a view row without a source position: %v", row)
		key := src + "@" + strconv.FormatInt(off, 10)
		require.False(t, seen[key], "the view holds %s twice", key)
		seen[key] = true
		p, _ := asInt64(row["kafka_partition"])
		o, _ := asInt64(row["kafka_offset"])
		require.False(t, seenKafka[[2]int64{p, o}], "the view holds partition %d offset %d twice", p, o)
		seenKafka[[2]int64{p, o}] = true
	}
	return len(rows)
}

// viewRowKeys renders each view row as one comparable string: its source
// position, emit time (microseconds), id and tag.
func viewRowKeys(t *testing.T, rows []map[string]any) map[string]bool {
	t.Helper()
	out := make(map[string]bool, len(rows))
	for _, row := range rows {
		ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(row["_zb_emit_ts"]))
		require.NoError(t, err)
		off, _ := asInt64(row["_zb_offset"])
		id, _ := asInt64(row["id"])
		out[rowKey(fmt.Sprint(row["_zb_source"]), off, ts.UnixMicro(), id, row["tag"])] = true
	}
	return out
}

func rowKey(src string, off, emitUS, id int64, tag any) string {
	if tag == nil {
		tag = "<null>"
	}
	return fmt.Sprintf("%s|%d|%d|%d|%v", src, off, emitUS, id, tag)
}

// duckDBTypes maps the table's column types onto DuckDB's, for the raw rows'
// import; a type this test does not write fails it.
func duckDBTypes(t *testing.T, cols []typemap.Column) []map[string]string {
	t.Helper()
	out := make([]map[string]string, len(cols))
	for i, c := range cols {
		var dt string
		switch c.Type.Kind {
		case typemap.Long, typemap.Int, typemap.Short, typemap.Byte:
			dt = "BIGINT"
		case typemap.String:
			dt = "VARCHAR"
		case typemap.Timestamp:
			dt = "TIMESTAMPTZ"
		case typemap.Double:
			dt = "DOUBLE"
		case typemap.Boolean:
			dt = "BOOLEAN"
		default:
			t.Fatalf("column %s: type %s has no DuckDB mapping here", c.Name, c.Type.Text())
		}
		out[i] = map[string]string{"name": c.Name, "type": dt}
	}
	return out
}

// duckDBViewRows runs, in DuckDB (conformance/duckdb_view.mjs), the last
// statement that defined view (as the output emitted it, read from the
// emulator's statement log) over the raw rows of table, and returns the
// view's rows as rowKey strings.
func duckDBViewRows(t *testing.T, srv *emulator.Server, table, view string) map[string]bool {
	t.Helper()
	var stmt string
	for _, e := range srv.Workspace().Executed() {
		if e.State == "SUCCEEDED" && (e.Kind == workspace.KindCreateView || e.Kind == workspace.KindAlterViewAs) &&
			strings.Contains(e.Text, typemap.QuoteIdent(strings.Split(view, ".")[2])) {
			stmt = e.Text
		}
	}
	require.NotEmpty(t, stmt, "the output defined the view")
	want, err := catalog.DedupViewSQL(view, table, strings.HasPrefix(stmt, "CREATE"))
	require.NoError(t, err)
	require.Equal(t, want, stmt)

	tb, ok := srv.Registry().Get(table)
	require.True(t, ok)
	raw, err := srv.TableRows(table, 0)
	require.NoError(t, err)
	dir := t.TempDir()
	rowsFile := filepath.Join(dir, "rows.json")
	body, err := json.Marshal(raw)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(rowsFile, body, 0o600))
	in, err := json.Marshal(map[string]any{"table": table, "view": view, "columns": duckDBTypes(t, tb.Columns),
		"rows_file": rowsFile, "statement": stmt, "micros": []string{"_zb_emit_ts"}})
	require.NoError(t, err)
	inFile := filepath.Join(dir, "in.json")
	require.NoError(t, os.WriteFile(inFile, in, 0o600))

	script, err := filepath.Abs(filepath.Join("..", "..", "conformance", "duckdb_view.mjs"))
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(filepath.Dir(script), "node_modules", "@duckdb", "node-api", "package.json")); err != nil {
		t.Fatalf("DuckDB for node is not installed (%v): run `npm ci --prefix conformance` from the repository root (`make test` does)", err)
	}
	node := os.Getenv("NODE_BINARY")
	if node == "" {
		node = "node"
	}
	out, err := exec.Command(node, script, inFile).Output()
	require.NoError(t, err, "%s", out)
	var res struct {
		OK        bool             `json:"ok"`
		Error     string           `json:"error"`
		Statement string           `json:"statement"`
		Rows      []map[string]any `json:"rows"`
	}
	require.NoError(t, json.Unmarshal(out, &res), "%s", out)
	require.True(t, res.OK, res.Error)
	t.Logf("DuckDB ran: %s", res.Statement)
	keys := make(map[string]bool, len(res.Rows))
	num := func(v any) int64 {
		n, err := strconv.ParseInt(fmt.Sprint(v), 10, 64)
		require.NoError(t, err, "%v", v)
		return n
	}
	for _, row := range res.Rows {
		keys[rowKey(fmt.Sprint(row["_zb_source"]), num(row["_zb_offset"]), num(row["_zb_emit_ts__us"]), num(row["id"]), row["tag"])] = true
	}
	require.Len(t, keys, len(res.Rows), "DuckDB's view rows are distinct")
	return keys
}
