package tablewriter

import (
	"context"
	"errors"
	"testing"

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
	w := New(Config{Table: "c.s.dlq", Provision: true, CreateColumns: DeadLetterColumns(), Pool: testPoolConfig()}, opener, cat, nil, nil)
	defer w.Close(context.Background())
	require.NoError(t, w.Open(context.Background()))
	d := NewDeadLetters(w, true)

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
