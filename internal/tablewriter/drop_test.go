package tablewriter

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// errDroppedTable is a stream ended by the drop of its table (the
// emulator's NOT_FOUND).
var errDroppedTable = &ingest.Error{Class: ingest.FatalConfig, Code: codes.NotFound, Err: errors.New("NOT_FOUND: table main.default.events does not exist: it was dropped")}

// dropUnder drops the harness table in the catalog and fails its streams as
// the service does, until a Write says ErrNotOpen.
func dropUnder(t *testing.T, h *harness) {
	t.Helper()
	h.cat.Drop(testTable)
	for _, s := range h.opener.Streams() {
		s.Poison(errDroppedTable)
	}
	require.Eventually(t, func() bool {
		_, err := h.w.Write(context.Background(), rows(`{"id":9,"msg":"x"}`), nil)
		return errors.Is(err, ErrNotOpen)
	}, 10*time.Second, 10*time.Millisecond, "a dropped table's stopped pool reports ErrNotOpen")
}

// loggedHarness is an open writer of testTable (columns cols, provisioning
// as given) whose log lines (info and up) are kept in the buffer returned.
func loggedHarness(t *testing.T, cols string, provision bool) (*harness, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	cat := catalogfake.New()
	cat.Put(testTable, cols, nil)
	opener := ingestfake.NewOpener(ingestfake.Config{})
	w := New(Config{Table: testTable, WriterID: "test", Provision: provision, Pool: testPoolConfig()}, opener, cat,
		slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})), nil)
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, w.Open(ctx))
	return &harness{w: w, cat: cat, opener: opener}, &logs
}

// With provisioning, a table dropped under the writer is created again at
// the next Open with the columns of the snapshot it wrote on (not inferred
// again from a batch), said in one line, and written at once.
func TestDroppedTableIsCreatedAgainFromTheSnapshot(t *testing.T) {
	h, logs := loggedHarness(t, "id BIGINT NOT NULL, msg STRING, extra DOUBLE", true)
	w, cat := h.w, h.cat
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.Empty(t, h.write(t, rows(`{"id":1,"msg":"a"}`)))

	dropUnder(t, h)
	v := w.life.Phase()
	assert.Equal(t, PhaseBackingOff, v)
	require.NoError(t, w.Open(ctx), "the first open after the drop is not held: provisioning fixes it")
	ts, err := cat.Describe(ctx, testTable)
	require.NoError(t, err)
	require.NotNil(t, ts, "created again")
	var names []string
	for _, c := range ts.Columns {
		names = append(names, c.Name)
	}
	assert.Equal(t, []string{"id", "msg", "extra"}, names, "with the columns it was written with, not inferred from a batch")
	require.Empty(t, h.write(t, rows(`{"id":2,"msg":"b"}`)))
	assert.Equal(t, 1, strings.Count(logs.String(), "created it again"), logs.String())
	assert.Equal(t, 0, strings.Count(logs.String(), "will be created from the first batch"), logs.String())
}

// Without provisioning, the stream's NOT_FOUND and the describe that finds
// no table are one cause, explained once; the writer writes again once the
// table exists, on the new table's columns.
func TestDroppedTableWithoutProvisioningIsOneCause(t *testing.T) {
	h, logs := loggedHarness(t, "id BIGINT NOT NULL, msg STRING", false)
	w, cat := h.w, h.cat
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.Empty(t, h.write(t, rows(`{"id":1,"msg":"a"}`)))

	dropUnder(t, h)
	for range 3 {
		skipWait(w)
		err := w.Open(ctx)
		require.Error(t, err)
		assert.ErrorIs(t, err, errTableMissing)
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "What to do"), logs.String())
	assert.Contains(t, logs.String(), "create table "+testTable)

	cat.Put(testTable, "id BIGINT NOT NULL, note STRING NOT NULL", nil)
	skipWait(w)
	require.NoError(t, w.Open(ctx))
	failed := h.write(t, rows(`{"id":2,"note":"n"}`, `{"id":3}`))
	require.Len(t, failed, 1, "the row lacking the new NOT NULL column fails alone")
	assert.Contains(t, failed[1], "note")
	assert.Contains(t, logs.String(), "writing again after")
}

// A table dropped and created again with the same columns between two
// describes is another table (a new table_id): the re-describe after a
// schema rejection or unknown fields replaces the snapshot, and its line
// says the table was created again.
func TestRecreatedTableWithSameColumnsIsAnotherTable(t *testing.T) {
	cols, err := typemap.ParseColumns("id BIGINT NOT NULL, msg STRING")
	require.NoError(t, err)
	seen := &snapshot{table: &catalog.TableState{FullName: testTable, TableID: "11111111-1111-4111-8111-111111111111", Columns: cols}}
	ts := &catalog.TableState{FullName: testTable, TableID: "22222222-2222-4222-8222-222222222222", Columns: slices.Clone(cols)}
	assert.False(t, sameTable(ts, seen), "a new table_id is another table")
	assert.Contains(t, recreatedNote(ts, seen), "created again: table_id 22222222")
	ts.TableID = seen.table.TableID
	assert.True(t, sameTable(ts, seen))
	assert.Empty(t, recreatedNote(ts, seen))
	ts.TableID = ""
	assert.True(t, sameTable(ts, seen), "an unknown id compares the columns only")
	ts.Columns = ts.Columns[:1]
	assert.False(t, sameTable(ts, seen), "other columns")
}
