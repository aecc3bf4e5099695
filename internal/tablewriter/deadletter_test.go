package tablewriter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// Rows that do not fit go to the dead-letter table (created with its
// columns when absent) with their table, index, column, error and payload;
// table failures are not dead letters and come back to be retried.
func TestDeadLettersAreWrittenDurably(t *testing.T) {
	cat := catalogfake.New()
	opener := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true})
	sink := &recordingSink{}
	w := New(Config{Table: "c.s.dlq", Provision: true, CreateColumns: DeadLetterColumns(), Pool: testPoolConfig()}, opener, cat, nil, NewMetrics(sink, "c.s.dlq"))
	defer w.Close(context.Background())
	require.NoError(t, w.Open(context.Background()))
	d := NewDeadLetters(w, true)
	dead, ok := sink.get(mDeadLetters + "{c.s.dlq}")
	require.True(t, ok, "the dead-letter counter exists from start-up")
	assert.Zero(t, dead)

	batch := rows(`{"id":1}`, `{"id":"x"}`, `{"id":3}`, "not json \xff")
	errs := []RowError{
		{Index: 1, Column: "id", Err: errors.New("expected a JSON number for BIGINT")},
		{Index: 2, Err: &TableError{Table: "c.s.gone", Err: errors.New("streams down")}},
		{Index: 3, Err: errors.New("not JSON")},
	}
	rest, err := d.Write(context.Background(), func(int) string { return "c.s.events" }, batch, errs)
	require.NoError(t, err)
	require.Len(t, rest, 1, "the table failure is retried, not dead-lettered")
	assert.Equal(t, 2, rest[0].Index)
	dead, _ = sink.get(mDeadLetters + "{c.s.dlq}")
	assert.Equal(t, int64(2), dead, "two dead letters durable; the table failure is not one")

	st, _ := cat.Describe(context.Background(), "c.s.dlq")
	require.NotNil(t, st, "the dead-letter table was created")
	var got []string
	for _, s := range opener.Streams() {
		for _, rec := range s.Records() {
			idx := rec.Schema().FieldIndices("error")[0]
			pay := rec.Column(rec.Schema().FieldIndices("payload")[0]).(*array.LargeString)
			for r := 0; r < int(rec.NumRows()); r++ {
				got = append(got, rec.Column(idx).ValueStr(r)+" | "+pay.Value(r))
			}
		}
	}
	assert.ElementsMatch(t, []string{
		`expected a JSON number for BIGINT | {"id":"x"}`,
		"not JSON | not json \uFFFD",
	}, got)
}

// A dead-letter table that cannot take dead letters (here: absent, without
// provisioning) costs a bounded number of attempts, never an error for the
// batch: the rows come back to be failed alone, saying why. Once the table
// exists the same writer takes dead letters again, without a restart.
func TestDeadLetterWriteFailureFailsOnlyItsRows(t *testing.T) {
	cat := catalogfake.New()
	opener := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true})
	w := New(Config{Table: "c.s.dlq", CreateColumns: DeadLetterColumns(), Pool: testPoolConfig()}, opener, cat, nil, nil)
	defer w.Close(context.Background())
	require.Error(t, w.Open(context.Background()), "the dead-letter table does not exist")
	d := NewDeadLetters(w, false)
	d.backoff = time.Millisecond

	batch := rows(`{"id":"x"}`, `{"id":"y"}`)
	errs := []RowError{{Index: 0, Column: "id", Err: errors.New("bad 0")}, {Index: 1, Column: "id", Err: errors.New("bad 1")}}
	rest, err := d.Write(context.Background(), func(int) string { return "c.s.events" }, batch, errs)
	require.NoError(t, err, "a dead-letter failure never fails the whole batch")
	require.Len(t, rest, 2)
	for _, re := range rest {
		assert.Contains(t, re.Err.Error(), "not dead-lettered: dead-letter table c.s.dlq")
	}
	assert.True(t, d.broken.Load(), "reported")
	assert.Equal(t, 1, d.attemptsNow(), "a known-broken table is tried once per batch")

	cat.Put("c.s.dlq", "source_table STRING, message_index INT, column_name STRING, error STRING, payload STRING, _zb_emit_ts TIMESTAMP", nil)
	skipWait(w) // the wait the writer's lifecycle chose after the failed open has passed
	rest, err = d.Write(context.Background(), func(int) string { return "c.s.events" }, batch, errs)
	require.NoError(t, err)
	assert.Empty(t, rest, "the table exists now: the dead letters are written")
	assert.False(t, d.broken.Load())
}

// Every dead letter fits the table the output creates for them, payload or
// not.
func TestDeadLetterColumnsAdmitEveryDeadLetter(t *testing.T) {
	for _, payload := range []bool{false, true} {
		cat := catalogfake.New()
		opener := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true})
		w := New(Config{Table: "c.s.dlq", Provision: true, CreateColumns: DeadLetterColumns(), Pool: testPoolConfig()}, opener, cat, nil, nil)
		require.NoError(t, w.Open(context.Background()))
		d := NewDeadLetters(w, payload)
		batch := rows(`{"id":"x"}`, strings.Repeat("x", MaxDeadLetterPayload+1), "")
		errs := []RowError{{Index: 0, Column: "id", Err: errors.New("bad")}, {Index: 1, Err: errors.New("huge")}, {Index: 2, Err: errors.New("empty")}}
		rest, err := d.Write(context.Background(), func(int) string { return "" }, batch, errs)
		require.NoError(t, err)
		assert.Empty(t, rest, "include_payload %v", payload)
		require.NoError(t, w.Close(context.Background()))
	}
}
