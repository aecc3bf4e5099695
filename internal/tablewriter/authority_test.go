package tablewriter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// gateRow is a decoded row whose first decode waits until the test lets it
// go: its batch is held mid-conversion, on the snapshot it loaded.
type gateRow struct {
	v       map[string]any
	entered chan struct{} // closed when the first decode starts
	release chan struct{} // closed by the test
	once    sync.Once
	decodes atomic.Int32
}

func newGateRow(v map[string]any) *gateRow {
	return &gateRow{v: v, entered: make(chan struct{}), release: make(chan struct{})}
}

func (r *gateRow) AsBytes() ([]byte, error) { return nil, errors.New("gateRow: decoded only") }
func (r *gateRow) HasStructured() bool      { return true }
func (r *gateRow) AsStructured() (any, error) {
	r.decodes.Add(1)
	r.once.Do(func() {
		close(r.entered)
		<-r.release
	})
	return r.v, nil
}

// A batch converting on a snapshot while another batch evolves the table
// keeps that snapshot untouched (its columns and converter are what they
// were), meets the pool on the new schema, and is converted once more, on
// the new snapshot: its row lands, on the evolved table's schema.
func TestBatchOnOldSnapshotConvertsAgainOnTheNew(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, provisionCfg, nil)
	require.Empty(t, h.write(t, rows(`{"id":0,"msg":"warm"}`)), "sets the bytes-per-row estimate")
	v1 := h.w.snapshot()
	require.NotNil(t, v1)
	cols1, fields1 := len(v1.columns()), v1.schema().NumFields()

	a := newGateRow(map[string]any{"id": int64(1), "msg": "a"})
	done := make(chan error, 1)
	go func() {
		rowErrs, err := h.w.Write(context.Background(), []Row{a}, nil)
		if err == nil && len(rowErrs) > 0 {
			err = rowErrs[0]
		}
		done <- err
	}()
	select {
	case <-a.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("batch A never started converting")
	}

	// Batch B evolves the table while A is converting on v1.
	require.Empty(t, h.write(t, rows(`{"id":2,"msg":"b","region":"eu"}`)))
	v2 := h.w.snapshot()
	require.NotSame(t, v1, v2)
	assert.Equal(t, v1.version+1, v2.version)
	assert.Equal(t, cols1+1, len(v2.columns()))

	close(a.release)
	require.NoError(t, <-done)
	assert.EqualValues(t, 2, a.decodes.Load(), "converted on v1, then once more on v2")
	assert.Len(t, v1.columns(), cols1, "a snapshot handed out is never changed")
	assert.Equal(t, fields1, v1.schema().NumFields())
	assert.False(t, v1.has("region"))
	assert.Same(t, v2, h.w.snapshot(), "the retry changed nothing")
	ids, _ := submittedColumn(t, h.opener, "id")
	assert.ElementsMatch(t, []string{"0", "1", "2"}, ids)
	regions, _ := submittedColumn(t, h.opener, "region")
	assert.ElementsMatch(t, []string{"<null>", "eu"}, regions, "A was sent on the evolved schema")
}

// One drift seen by many batches at once causes one reconcile, one new
// snapshot and one reopen of the pool (each of its streams replaced once).
func TestOneDriftOneReconcileOneReopen(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, provisionCfg, nil)
	v1 := h.w.snapshot()
	reconciles, opens := h.cat.ReconcileCount(), h.opener.Opens()
	size := h.w.st.Load().pool.Size()

	errs := h.writeConcurrently(8, func(i int) string {
		return `{"id":` + itoa(int64(i)) + `,"msg":"m","region":"eu"}`
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, reconciles+1, h.cat.ReconcileCount(), "one drift, one reconcile")
	assert.Equal(t, opens+size, h.opener.Opens(), "one reopen: each stream replaced once")
	assert.Equal(t, v1.version+1, h.w.snapshot().version, "one new snapshot")
	regions, _ := submittedColumn(t, h.opener, "region")
	assert.Len(t, regions, 8)
}

// A re-describe after a schema rejection installs a new snapshot (and
// reopens the streams) only when the table's columns differ; one asked for
// by a batch that converted on a snapshot replaced since describes nothing.
func TestRedescribeSwapsSnapshotOnlyWhenColumnsDiffer(t *testing.T) {
	h := newHarness(t, ingestfake.Config{}, nil, nil)
	ctx := context.Background()
	v1 := h.w.snapshot()
	opens, describes := h.opener.Opens(), h.cat.Describes()

	h.w.schema.redescribe(ctx, v1)
	assert.Equal(t, describes+1, h.cat.Describes())
	assert.Same(t, v1, h.w.snapshot(), "same columns: the snapshot stays")
	assert.Equal(t, opens, h.opener.Opens(), "same columns: no reopen")

	h.cat.Put(testTable, "id BIGINT NOT NULL, msg STRING, region STRING", nil)
	h.w.schema.redescribe(ctx, v1)
	v2 := h.w.snapshot()
	require.NotSame(t, v1, v2, "new columns: a new snapshot")
	assert.True(t, v2.has("region"))
	assert.Greater(t, h.opener.Opens(), opens, "the streams reopened on it")

	describes, opens = h.cat.Describes(), h.opener.Opens()
	h.w.schema.redescribe(ctx, v1)
	assert.Equal(t, describes, h.cat.Describes(), "a stale snapshot's re-describe is someone else's, done")
	assert.Same(t, v2, h.w.snapshot())
	assert.Equal(t, opens, h.opener.Opens())
}

// The same through Write: a stream rejecting the schema of a submitted
// batch (the table changed under the pipeline) fails the batch and
// re-describes the table; the batch, written again, lands on the new
// columns.
func TestSchemaRejectionRedescribesThroughWrite(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true, KeepRecords: true}, nil, nil)
	v1 := h.w.snapshot()
	h.cat.Put(testTable, "id BIGINT NOT NULL, msg STRING, region STRING", nil)
	done := make(chan error, 1)
	go func() {
		_, err := h.w.Write(context.Background(), rows(`{"id":1,"msg":"a"}`), nil)
		done <- err
	}()
	require.Eventually(t, func() bool {
		for _, s := range h.opener.Streams() {
			if s.Submitted() > 0 {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)
	rejected := &ingest.Error{Class: ingest.FatalConfig, Code: codes.InvalidArgument,
		ServiceCode: ingest.ServiceCodeSchemaMismatch, Err: errors.New("schema validation failed")}
	h.opener.SetConfig(ingestfake.Config{KeepRecords: true}) // the new streams ack at once
	for _, s := range h.opener.Streams() {
		s.Poison(rejected)
	}
	require.Error(t, <-done, "nothing was durable: the whole batch is retried")
	v2 := h.w.snapshot()
	require.NotNil(t, v2, "the streams reopened on the re-described table")
	require.NotSame(t, v1, v2)
	assert.True(t, v2.has("region"))

	require.Eventually(t, func() bool {
		rowErrs, err := h.w.Write(context.Background(), rows(`{"id":1,"msg":"a","region":"eu"}`), nil)
		return err == nil && len(rowErrs) == 0
	}, 10*time.Second, 20*time.Millisecond)
	regions, _ := submittedColumn(t, h.opener, "region")
	assert.Contains(t, regions, "eu")
}
