package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/coverage"
)

// Tables dropped (DROP TABLE) while the output writes to them, and created
// again, against the built binaries. Each test logs one "drop:" line with
// what it measured for docs/reliability.md ("Table dropped").

// dropLine logs and prints one measurement line.
func dropLine(t *testing.T, start time.Time, format string, args ...any) {
	t.Helper()
	line := "drop: " + fmt.Sprintf(format, args...) + fmt.Sprintf("; the test ran %s", time.Since(start).Round(100*time.Millisecond))
	t.Log(line)
	fmt.Println(line)
}

// idSet reads the integer ids of table's rows (none when it cannot be read:
// the table is gone).
func idSet(t *testing.T, httpURL, table string) map[int64]int {
	t.Helper()
	ids := map[int64]int{}
	if _, err := fetchTableInfo(httpURL, table); err != nil {
		return ids
	}
	for _, r := range readRows(t, httpURL, table) {
		if id, ok := asInt64(r["id"]); ok {
			ids[id]++
		}
	}
	return ids
}

// dropUnderTraffic waits until rows land in table, then drops it with the
// acks stalled, so that every row the output was told is durable is among
// the rows read back just before the drop (the acks of rows stored after
// the stall began never come: those rows are sent again). It returns those
// ids and when the drop ran.
// read reads the ids (nil: idSet, the id column).
func dropUnderTraffic(t *testing.T, httpURL, table string, atLeast int64, read func() map[int64]int, logs func() string) (before map[int64]int, at time.Time) {
	t.Helper()
	if read == nil {
		read = func() map[int64]int { return idSet(t, httpURL, table) }
	}
	eventually(t, 30*time.Second, 20*time.Millisecond, "rows never started landing", func() (bool, string) {
		n := rowCount(httpURL, table)
		return n >= atLeast, fmt.Sprintf("row_count %d\n%s", n, logs())
	})
	putFaults(t, httpURL, `{"ack_stall":true}`)
	before = read()
	at = time.Now()
	require.NoError(t, ucAt(t, httpURL, "wh-drop").Execute(t.Context(), "DROP TABLE "+table))
	putFaults(t, httpURL, `{}`)
	return before, at
}

// waitNothingLost waits until every id 1..rows is in table (the new one) or
// in before (the dropped one's ids at the drop), and returns how long after
// since the first row landed in the new table.
func waitNothingLost(t *testing.T, httpURL, table string, rows int64, before map[int64]int, since time.Time, logs func() string) (healed time.Duration) {
	t.Helper()
	eventually(t, 30*time.Second, 50*time.Millisecond, "the rows never all landed in the table or the dropped one", func() (bool, string) {
		n := rowCount(httpURL, table)
		if healed == 0 && n > 0 {
			healed = time.Since(since)
		}
		if n+int64(len(before)) < rows {
			return false, fmt.Sprintf("row_count %d + %d before the drop of %d\n%s", n, len(before), rows, logs())
		}
		miss := missingIDs(1, rows, before, idSet(t, httpURL, table))
		return len(miss) == 0, fmt.Sprintf("%d ids in neither table (first %v)\n%s", len(miss), miss[:min(len(miss), 5)], logs())
	})
	return healed
}

// missingIDs lists the ids in [lo, hi] found in none of sets.
func missingIDs(lo, hi int64, sets ...map[int64]int) []int64 {
	var out []int64
	for id := lo; id <= hi; id++ {
		found := false
		for _, s := range sets {
			if s[id] > 0 {
				found = true
				break
			}
		}
		if !found {
			out = append(out, id)
		}
	}
	return out
}

// dups counts the rows of ids beyond the first of each id.
func dups(ids map[int64]int) int {
	n := 0
	for _, c := range ids {
		n += c - 1
	}
	return n
}

// Without provisioning: the batches are held while the table is gone (none
// nacked into the input), one explanation names the table and the fix, and
// once the table is created again the output writes into it without a
// restart. Every row is either in the new table or was acknowledged before
// the drop (and went with the dropped table).
func TestDropTableProvisionOff(t *testing.T) {
	t.Parallel()
	const rows = 3000
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--table", eventsTable+":"+eventsCols)
	start := time.Now() // after the binaries are built
	pipe, _ := startPipeline(t, writeConfig(t, "INFO", fmt.Sprintf(`generate:
  count: %d
  interval: 2ms
  mapping: 'root = {"id": counter(), "msg": "m"}'`, rows),
		zerobusOutput(grpcURL, httpURL, eventsTable, "batching:\n  count: 50\n  period: 20ms\n")))
	logs := func() string { return tail(pipe.out.String(), 20) }
	logFrom := len(pipe.out.String())
	before, droppedAt := dropUnderTraffic(t, httpURL, eventsTable, 300, nil, logs)

	time.Sleep(6 * time.Second) // the table stays gone a while
	gone := pipe.out.String()[logFrom:]
	created := time.Now()
	require.NoError(t, ucAt(t, httpURL, "wh-drop").Execute(t.Context(), "CREATE TABLE "+eventsTable+" ("+eventsCols+")"))
	healed := waitNothingLost(t, httpURL, eventsTable, rows, before, created, logs)
	after := idSet(t, httpURL, eventsTable)
	out := pipe.out.String()[logFrom:]
	explained := countLines(gone, "What to do", eventsTable, "create table")
	nacked := countLines(out, "Failed to send message")
	healLines := countLines(out, "writing again after")
	again := 0
	for id := range before {
		if after[id] > 0 {
			again++
		}
	}
	dropLine(t, start, "provision off: rows=%d; in the dropped table at the drop=%d; in the new table=%d (dups %d; rows of the dropped table written again %d); lost=0; explanations=%d; nacked batches=%d; first row %s after CREATE TABLE (table gone %s)",
		rows, len(before), len(after), dups(after), again, explained, nacked, healed.Round(10*time.Millisecond), created.Sub(droppedAt).Round(100*time.Millisecond))

	assert.Equal(t, 1, explained, "one explanation naming the table and the fix:\n%s", tail(gone, 30))
	assert.Zero(t, nacked, "the batches are held, not nacked into the input:\n%s", tail(out, 20))
	assert.Equal(t, 1, healLines, "one line says it writes again:\n%s", tail(out, 20))
	assert.Less(t, healed, 10*time.Second, "healed within one back-off step of the CREATE")
	assert.Zero(t, dups(after), "no row twice in the new table")
}

// With provisioning: the output creates the table again at once from the
// schema it wrote (one line says so) and the rows land in it.
func TestDropTableProvisionOn(t *testing.T) {
	t.Parallel()
	const rows, table = 3000, "main.default.dropped_prov"
	httpURL, grpcURL, _ := startEmulatorProcess(t)
	start := time.Now() // after the binaries are built
	pipe, _ := startPipeline(t, writeConfig(t, "INFO", fmt.Sprintf(`generate:
  count: %d
  interval: 2ms
  mapping: 'root = {"id": counter(), "msg": "m"}'`, rows),
		zerobusOutput(grpcURL, httpURL, table, "catalog:\n  provision: true\n  warehouse_id: wh-drop\n", "batching:\n  count: 50\n  period: 20ms\n")))
	logs := func() string { return tail(pipe.out.String(), 20) }
	logFrom := len(pipe.out.String())
	before, droppedAt := dropUnderTraffic(t, httpURL, table, 300, nil, logs)
	healed := waitNothingLost(t, httpURL, table, rows, before, droppedAt, logs)
	after := idSet(t, httpURL, table)
	out := pipe.out.String()[logFrom:]
	recreated := countLines(out, table, "created it again")
	nacked := countLines(out, "Failed to send message")
	ti, err := fetchTableInfo(httpURL, table)
	require.NoError(t, err)
	cols := make([]string, 0, len(ti.Columns))
	for _, c := range ti.Columns {
		cols = append(cols, c.Name)
	}
	dropLine(t, start, "provision on: rows=%d; in the dropped table at the drop=%d; in the new table=%d (dups %d); lost=0; 'created it again' lines=%d; nacked batches=%d; first row in the new table %s after DROP TABLE; columns %v",
		rows, len(before), len(after), dups(after), recreated, nacked, healed.Round(10*time.Millisecond), cols)
	assert.Equal(t, 1, recreated, "one line says the table was created again:\n%s", tail(out, 30))
	assert.Zero(t, nacked, "held, not nacked:\n%s", tail(out, 20))
	assert.Less(t, healed, 10*time.Second)
	assert.Zero(t, dups(after))
	assert.Contains(t, cols, "msg", "created again with the columns it was written with")
	assert.Contains(t, cols, "_zb_emit_ts")
}

// Re-created with another schema (provisioning off; a dead-letter table):
// msg dropped, qty STRING → DECIMAL(10,2), tag added NOT NULL. The writer
// re-describes the new table and writes on it: the rows that still fit
// land, each row that no longer fits goes to the dead-letter table alone,
// naming its column (msg, qty or tag), and nothing else is lost.
func TestDropTableRecreatedWithAnotherSchema(t *testing.T) {
	t.Parallel()
	const rows, table, dlq = 1500, "main.default.shapes", "main.default.shapes_dlq"
	httpURL, grpcURL, _ := startEmulatorProcess(t,
		"--table", table+":id BIGINT NOT NULL, msg STRING, qty STRING, tag STRING",
		"--table", dlq+":source_table STRING, message_index INT, column_name STRING, error STRING, payload STRING")
	start := time.Now() // after the binaries are built
	pipe, _ := startPipeline(t, writeConfig(t, "INFO", fmt.Sprintf(`generate:
  count: %d
  interval: 4ms
  mapping: |
    let n = counter()
    root.id = $n
    root.msg = if $n %% 5 == 0 { "m" } else { deleted() }
    root.qty = if $n %% 2 == 0 { "7.5" } else { "many" }
    root.tag = if $n %% 7 == 0 { deleted() } else { "t" }`, rows),
		zerobusOutput(grpcURL, httpURL, table, "dead_letter:\n  table: "+dlq+"\n  include_payload: true\n", "batching:\n  count: 50\n  period: 20ms\n")))
	logs := func() string { return tail(pipe.out.String(), 20) }
	logFrom := len(pipe.out.String())
	before, droppedAt := dropUnderTraffic(t, httpURL, table, 200, nil, logs)
	require.NoError(t, ucAt(t, httpURL, "wh-drop").Execute(t.Context(), "CREATE TABLE "+table+" (id BIGINT NOT NULL, qty DECIMAL(10,2), tag STRING NOT NULL)"))
	fits := func(n int64) bool { return n%5 != 0 && n%2 == 0 && n%7 != 0 }

	// dead is each dead-lettered id and the column its dead letter names.
	dead := func() map[int64]string {
		out := map[int64]string{}
		for _, d := range readDeadLetterRows(t, httpURL, dlq) {
			out[d.id] = d.column
		}
		return out
	}
	eventually(t, 35*time.Second, 100*time.Millisecond, "the rows never all landed or dead-lettered", func() (bool, string) {
		landed := idSet(t, httpURL, table)
		dl := dead()
		dlSet := map[int64]int{}
		for id := range dl {
			dlSet[id] = 1
		}
		miss := missingIDs(1, rows, before, landed, dlSet)
		return len(miss) == 0, fmt.Sprintf("%d ids nowhere (first %v); %d landed, %d dead letters\n%s", len(miss), miss[:min(len(miss), 5)], len(landed), len(dl), logs())
	})
	landed, dl := idSet(t, httpURL, table), dead()
	out := pipe.out.String()[logFrom:]
	byCol := map[string]int{}
	resent := 0
	for id, col := range dl {
		// Every row fit the old table, so a dead letter was refused by the
		// new one. A row already durable in the dropped table is one whose
		// batch was not yet acknowledged when the table went: sent again
		// (at least once), it meets the new schema like any other.
		if before[id] > 0 {
			resent++
		}
		byCol[col]++
		var want []string
		if id%5 == 0 {
			want = append(want, "msg")
		}
		if id%2 != 0 {
			want = append(want, "qty")
		}
		if id%7 == 0 {
			want = append(want, "tag")
		}
		assert.Contains(t, want, col, "id %d dead-lettered naming %q", id, col)
	}
	for id := range landed {
		assert.True(t, fits(id), "id %d landed in the new table but does not fit it", id)
	}
	dropLine(t, start, "re-created with another schema (msg dropped, qty STRING->DECIMAL, tag added NOT NULL): rows=%d; in the dropped table=%d; landed in the new one=%d (dups %d); dead letters=%d by column %v (%d of them also in the dropped table: unacknowledged when it went, sent again); lost=0; converged %s after the drop",
		rows, len(before), len(landed), dups(landed), len(dl), byCol, resent, time.Since(droppedAt).Round(100*time.Millisecond))
	assert.Positive(t, byCol["msg"], "a dropped column's rows fail naming it")
	assert.Positive(t, byCol["qty"], "a changed type's rows fail naming it")
	assert.Positive(t, byCol["tag"], "a NOT NULL column added: the rows lacking it fail naming it")
	assert.Zero(t, dups(landed))
	assert.Equal(t, 1, countLines(out, "What to do", table), "one explanation of the missing table while it was gone:\n%s", tail(out, 30))
}

// The dead-letter table and the coverage table dropped under traffic, with
// provisioning: each is created again by its own writer (one line each),
// the dead letters keep arriving (none lost: every bad row is a dead letter
// in the dropped table or the new one), the raw rows never stop for the
// coverage table, and the new coverage table is written again whole, so it
// covers every offset whose row is durable in the raw table.
func TestDropDeadLetterAndCoverageTables(t *testing.T) {
	t.Parallel()
	const (
		rows       = 3000
		partitions = 3
		table      = "main.default.dropped_side"
		dlq        = table + "_dlq"
		cov        = table + "_zb_coverage"
	)
	httpURL, grpcURL, _ := startEmulatorProcess(t)
	start := time.Now() // after the binaries are built
	pipe, _ := startPipeline(t, writeConfig(t, "INFO", fmt.Sprintf(`generate:
  count: %d
  interval: 3ms
  mapping: |
    let n = counter() - 1
    root.id = $n
    root.qty = if $n %% 10 == 9 { "abc" } else { $n }
    meta src = "s/" + ($n %% %d).string()
    meta off = (($n - $n %% %d) / %d).string()`, rows, partitions, partitions, partitions),
		zerobusOutput(grpcURL, httpURL, table, "catalog:\n  provision: true\n  warehouse_id: wh-drop\n",
			"dead_letter:\n  table: "+dlq+"\n  include_payload: true\n",
			"coverage:\n  source: '${! meta(\"src\") }'\n  offset: '${! meta(\"off\") }'\n",
			"batching:\n  count: 50\n  period: 20ms\n")))
	logs := func() string { return tail(pipe.out.String(), 20) }
	logFrom := len(pipe.out.String())
	deadIDs := func() map[int64]int {
		out := map[int64]int{}
		for _, d := range readDeadLetterRows(t, httpURL, dlq) {
			out[d.id]++
		}
		return out
	}
	eventually(t, 30*time.Second, 50*time.Millisecond, "no dead letter before the drop", func() (bool, string) {
		return len(deadIDs()) >= 5, logs()
	})
	dlBefore, dlDropAt := dropUnderTraffic(t, httpURL, dlq, 0, deadIDs, logs)
	covLanded := rowCount(httpURL, table)
	_, covDropAt := dropUnderTraffic(t, httpURL, cov, 0, func() map[int64]int { return nil }, logs)
	time.Sleep(2 * time.Second)
	rawDuring := rowCount(httpURL, table) - covLanded

	eventually(t, 35*time.Second, 100*time.Millisecond, "the raw rows never all landed", func() (bool, string) {
		n := rowCount(httpURL, table)
		return n >= rows-rows/10, fmt.Sprintf("row_count %d\n%s", n, logs())
	})
	// Every offset written is covered by the new coverage table.
	var covRows []map[string]any
	eventually(t, 20*time.Second, 200*time.Millisecond, "the new coverage table never covered every offset", func() (bool, string) {
		if _, err := fetchTableInfo(httpURL, cov); err != nil {
			return false, "no coverage table\n" + logs()
		}
		covRows = readRows(t, httpURL, cov)
		covered := map[string]*coverage.RangeSet{}
		for _, r := range covRows {
			start, _ := asInt64(r["start"])
			end, _ := asInt64(r["end"])
			src := fmt.Sprint(r["source"])
			if covered[src] == nil {
				covered[src] = &coverage.RangeSet{}
			}
			covered[src].Add(start, end)
		}
		// Every offset whose row is durable in the raw table: a dead-lettered
		// row (id%10 == 9) is in no coverage range.
		want := map[string]*coverage.RangeSet{}
		for n := int64(0); n < rows; n++ {
			src := fmt.Sprintf("s/%d", n%partitions)
			if want[src] == nil {
				want[src] = &coverage.RangeSet{}
			}
			if n%10 != 9 {
				want[src].Add(n/partitions, n/partitions+1)
			}
		}
		for p := 0; p < partitions; p++ {
			src := fmt.Sprintf("s/%d", p)
			if covered[src] == nil || !assert.ObjectsAreEqual(want[src].Ranges(), covered[src].Ranges()) {
				return false, fmt.Sprintf("%s covered %v\n%s", src, covered[src], logs())
			}
		}
		return true, ""
	})
	bad := map[int64]int{}
	eventually(t, 20*time.Second, 100*time.Millisecond, "a bad row is no dead letter in either dead-letter table", func() (bool, string) {
		dl := deadIDs()
		var miss []int64
		for id := int64(9); id < rows; id += 10 {
			if dlBefore[id] == 0 && dl[id] == 0 {
				miss = append(miss, id)
			}
		}
		bad = dl
		return len(miss) == 0, fmt.Sprintf("%d bad rows in neither (first %v)\n%s", len(miss), miss[:min(len(miss), 5)], logs())
	})
	out := pipe.out.String()[logFrom:]
	dl := bad
	dlRecreated := countLines(out, dlq, "created it again")
	covRecreated := countLines(out, cov, "created it again")
	dropLine(t, start, "dead-letter and coverage tables dropped (provision on): raw rows=%d landed=%d; raw rows landed in the 2s after the coverage drop=%d; dead letters in the dropped dead-letter table at its drop=%d, in the new one=%d, of %d bad rows (none lost); 'created it again' lines: dead-letter=%d coverage=%d; coverage rows in the new coverage table=%d (covering every offset); dead-letter drop at %s, coverage drop at %s",
		rows, rowCount(httpURL, table), rawDuring, len(dlBefore), len(dl), rows/10, dlRecreated, covRecreated, len(covRows), dlDropAt.Format("15:04:05.000"), covDropAt.Format("15:04:05.000"))
	assert.Equal(t, 1, dlRecreated, "one line: the dead-letter table created again:\n%s", tail(out, 30))
	assert.Equal(t, 1, covRecreated, "one line: the coverage table created again:\n%s", tail(out, 30))
	assert.Positive(t, rawDuring, "raw rows never stop for the coverage table")
	assert.Positive(t, len(dl), "dead letters arrive in the new dead-letter table")
	for id := range dl {
		assert.Equal(t, int64(9), id%10, "id %d dead-lettered, but it fits", id)
	}
}

// deadLetterRow is one row of a dead-letter table: the id of the message in
// its payload and the column its error names.
type deadLetterRow struct {
	id     int64
	column string
}

// readDeadLetterRows reads the dead-letter table dlq (none while it does not
// exist), decoding each payload's id.
func readDeadLetterRows(t *testing.T, httpURL, dlq string) []deadLetterRow {
	t.Helper()
	if _, err := fetchTableInfo(httpURL, dlq); err != nil {
		return nil
	}
	var out []deadLetterRow
	for _, r := range readRows(t, httpURL, dlq) {
		var m struct {
			ID int64 `json:"id"`
		}
		p, _ := r["payload"].(string)
		require.NoError(t, json.Unmarshal([]byte(p), &m), "payload %v", r)
		out = append(out, deadLetterRow{id: m.ID, column: fmt.Sprint(r["column_name"])})
	}
	return out
}
