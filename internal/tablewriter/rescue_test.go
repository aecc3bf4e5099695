package tablewriter

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// rescueCounter records Rescued calls.
type rescueCounter struct {
	nopObserver
	mu sync.Mutex
	n  map[string]int
}

func (r *rescueCounter) Rescued(column string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[column] += n
}

// Rescued fields are counted by the column they did not fit, only for rows
// that then landed; a row still failing keeps its error.
func TestRescueCountsFieldsByColumn(t *testing.T) {
	cat := catalogfake.New()
	cat.Put(testTable, "id BIGINT NOT NULL, n INT, rescued VARIANT", nil)
	obs := &rescueCounter{n: map[string]int{}}
	w := New(Config{Table: testTable, WriterID: "test", Pool: testPoolConfig(), Rescue: "rescued"},
		ingestfake.NewOpener(ingestfake.Config{KeepRecords: true}), cat, nil, obs)
	defer w.Close(context.Background())
	require.NoError(t, w.Open(context.Background()))

	errs, err := w.Write(context.Background(), rows(
		`{"id":1,"n":"x","a":1,"b":2}`,
		`{"id":2,"n":5000000000}`,
		`{"id":3,"n":1}`,
		`{"id":"bad","n":"x"}`,
		`not json`,
	), nil)
	require.NoError(t, err)
	require.Len(t, errs, 2)
	assert.Equal(t, 3, errs[0].Index)
	assert.Contains(t, errs[0].Error(), "BIGINT")
	assert.Equal(t, 4, errs[1].Index)
	assert.Equal(t, map[string]int{"n": 2, RescueUnknownField: 2}, obs.n)
}

// A message field named like the rescue column is not overwritten by the
// rescue object: it is rescued too, under its own name.
func TestRescueKeepsFieldNamedLikeRescueColumn(t *testing.T) {
	r := newRescueRow(rows(`{"id":1,"Rescued":5,"extra":"x"}`)[0])
	require.NotNil(t, r)
	require.True(t, r.take(RowError{Index: 0, Field: "extra", Column: "extra", Err: arrowconv.ErrUnknownField}, "rescued"))
	assert.Equal(t, map[string]any{"Rescued": json.Number("5"), "extra": "x"}, r.m["rescued"])
	_, kept := r.m["Rescued"]
	assert.False(t, kept, "the field is moved into the rescue object, not left to collide with it")
	assert.Len(t, r.columns, 2)
}
