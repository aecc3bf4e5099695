package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tables dropped (DROP TABLE) while the output writes to them, and created
// again, against the built binaries. Each test logs one "drop:" line with
// what it measured for docs/reliability.md ("Table dropped").

// dropLine logs and prints one measurement line.
func dropLine(t *testing.T, format string, args ...any) {
	t.Helper()
	line := "drop: " + fmt.Sprintf(format, args...)
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
func dropUnderTraffic(t *testing.T, httpURL, table string, atLeast int64, logs func() string) (before map[int64]int, at time.Time) {
	t.Helper()
	eventually(t, 30*time.Second, 20*time.Millisecond, "rows never started landing", func() (bool, string) {
		n := rowCount(httpURL, table)
		return n >= atLeast, fmt.Sprintf("row_count %d\n%s", n, logs())
	})
	putFaults(t, httpURL, `{"ack_stall":true}`)
	before = idSet(t, httpURL, table)
	at = time.Now()
	require.NoError(t, ucAt(t, httpURL, "wh-drop").Execute(t.Context(), "DROP TABLE "+table))
	putFaults(t, httpURL, `{}`)
	return before, at
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
	const rows = 3000
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--table", eventsTable+":"+eventsCols)
	pipe, _ := startPipeline(t, writeConfig(t, "INFO", fmt.Sprintf(`generate:
  count: %d
  interval: 2ms
  mapping: 'root = {"id": counter(), "msg": "m"}'`, rows),
		zerobusOutput(grpcURL, httpURL, eventsTable, "batching:\n  count: 50\n  period: 20ms\n")))
	logs := func() string { return tail(pipe.out.String(), 20) }
	logFrom := len(pipe.out.String())
	before, droppedAt := dropUnderTraffic(t, httpURL, eventsTable, 300, logs)

	time.Sleep(6 * time.Second) // the table stays gone a while
	gone := pipe.out.String()[logFrom:]
	created := time.Now()
	require.NoError(t, ucAt(t, httpURL, "wh-drop").Execute(t.Context(), "CREATE TABLE "+eventsTable+" ("+eventsCols+")"))
	var healed time.Duration
	eventually(t, 30*time.Second, 50*time.Millisecond, "the rows never all landed after the table was created again", func() (bool, string) {
		n := rowCount(httpURL, eventsTable)
		if healed == 0 && n > 0 {
			healed = time.Since(created)
		}
		if n+int64(len(before)) < rows {
			return false, fmt.Sprintf("row_count %d + %d before the drop of %d\n%s", n, len(before), rows, logs())
		}
		miss := missingIDs(1, rows, before, idSet(t, httpURL, eventsTable))
		return len(miss) == 0, fmt.Sprintf("%d ids in neither table (first %v)\n%s", len(miss), miss[:min(len(miss), 5)], logs())
	})
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
	dropLine(t, "provision off: rows=%d; in the dropped table at the drop=%d; in the new table=%d (dups %d; rows of the dropped table written again %d); lost=0; explanations=%d; nacked batches=%d; first row %s after CREATE TABLE (table gone %s)",
		rows, len(before), len(after), dups(after), again, explained, nacked, healed.Round(10*time.Millisecond), created.Sub(droppedAt).Round(100*time.Millisecond))

	assert.Equal(t, 1, explained, "one explanation naming the table and the fix:\n%s", tail(gone, 30))
	assert.Zero(t, nacked, "the batches are held, not nacked into the input:\n%s", tail(out, 20))
	assert.Equal(t, 1, healLines, "one line says it writes again:\n%s", tail(out, 20))
	assert.Less(t, healed, 10*time.Second, "healed within one back-off step of the CREATE")
	assert.Zero(t, dups(after), "no row twice in the new table")
}
