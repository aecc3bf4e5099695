package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

func newRouter(t *testing.T, max int, tables ...string) (*Router, *ingestfake.Opener, *catalogfake.Catalog) {
	t.Helper()
	cat := catalogfake.New()
	for _, tb := range tables {
		cat.Put(tb, "id BIGINT NOT NULL, msg STRING", nil)
	}
	opener := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true})
	r := NewRouter(func(table string) *Writer {
		return New(Config{Table: table, Pool: testPoolConfig()}, opener, cat, nil, nil)
	}, max, time.Second, nil)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r, opener, cat
}

// Rows go to the table their message names; a batch spanning tables is one
// write per table; a bad table name fails its row alone; beyond
// max_open_tables the least recently used writer is drained and closed.
func TestRouterSplitsByTableAndEvictsLeastRecentlyUsed(t *testing.T) {
	r, opener, _ := newRouter(t, 2, "c.s.a", "c.s.b", "c.s.c")
	batch := rows(`{"id":1}`, `{"id":2}`, `{"id":3}`, `{"id":4}`)
	tableOf := func(i int) (string, error) {
		return []string{"c.s.a", "c.s.b", "c.s.a", "c.s.bad name"}[i], nil
	}
	errs := r.WriteRouted(context.Background(), batch, tableOf, nil)
	require.Len(t, errs, 1)
	assert.Equal(t, 3, errs[0].Index)
	assert.Equal(t, TableColumn, errs[0].Column)
	perTable := map[string]int64{}
	for _, s := range opener.Streams() {
		for _, rec := range s.Records() {
			perTable[s.Table()] += rec.NumRows()
		}
	}
	assert.Equal(t, map[string]int64{"c.s.a": 2, "c.s.b": 1}, perTable)

	// Write a again so b is the least recently used; a third table then
	// evicts b.
	require.Empty(t, r.WriteRouted(context.Background(), rows(`{"id":5}`), func(int) (string, error) { return "c.s.a", nil }, nil))
	require.Empty(t, r.WriteRouted(context.Background(), rows(`{"id":6}`), func(int) (string, error) { return "c.s.c", nil }, nil))
	opened, evicted, open := r.Stats()
	assert.Equal(t, int64(3), opened)
	assert.Equal(t, int64(1), evicted)
	assert.Equal(t, 2, open)
	// Evicted writers close in the background.
	require.Eventually(t, func() bool {
		for _, s := range opener.Streams() {
			if s.Table() == "c.s.b" && !s.Closed() {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "b's streams are closed")
	for _, s := range opener.Streams() {
		if s.Table() != "c.s.b" {
			assert.False(t, s.Closed(), "only b's streams are closed (%s)", s.Table())
		}
	}
}

// A table whose writer cannot open fails its own rows with a TableError
// (retried, never dead-lettered); the other tables' rows land.
func TestRouterTableFailureFailsOnlyItsRows(t *testing.T) {
	r, opener, _ := newRouter(t, 4, "c.s.a") // c.s.missing does not exist
	errs := r.WriteRouted(context.Background(), rows(`{"id":1}`, `{"id":2}`), func(i int) (string, error) {
		return []string{"c.s.a", "c.s.missing"}[i], nil
	}, nil)
	require.Len(t, errs, 1)
	assert.Equal(t, 1, errs[0].Index)
	var te *TableError
	require.True(t, errors.As(errs[0].Err, &te))
	assert.Equal(t, "c.s.missing", te.Table)
	assert.Contains(t, errs[0].Err.Error(), "does not exist")
	var n int64
	for _, s := range opener.Streams() {
		for _, rec := range s.Records() {
			n += rec.NumRows()
		}
	}
	assert.Equal(t, int64(1), n)
}

// Many tables written concurrently through a small bound: every row lands
// exactly once, and writers in use are never evicted under a Write.
func TestRouterConcurrentManyTables(t *testing.T) {
	var tables []string
	for i := range 12 {
		tables = append(tables, fmt.Sprintf("c.s.t%d", i))
	}
	r, opener, _ := newRouter(t, 3, tables...)
	errs := make(chan []RowError, 60)
	for k := range 60 {
		go func() {
			errs <- r.WriteRouted(context.Background(), rows(fmt.Sprintf(`{"id":%d}`, k)), func(int) (string, error) { return tables[k%len(tables)], nil }, nil)
		}()
	}
	for range 60 {
		assert.Empty(t, <-errs)
	}
	var n int64
	for _, s := range opener.Streams() {
		for _, rec := range s.Records() {
			n += rec.NumRows()
		}
	}
	assert.Equal(t, int64(60), n)
	_, _, open := r.Stats()
	assert.LessOrEqual(t, open, 3)
}
