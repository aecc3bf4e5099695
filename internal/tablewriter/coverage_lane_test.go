package tablewriter

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/coverage"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// syncBuffer is a bytes.Buffer safe for the writers' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The coverage table is written by a writer of its own whose streams'
// lanes are all of kind DerivedCoverage, while the raw table's are all
// RawAnchor: checked on every lane of both pools, and every stream opened
// for the coverage table belongs to the coverage writer's pool.
func TestCoverageWriterLanesAreDerivedCoverageOnly(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, coverageOn, nil)
	require.Empty(t, h.write(t, covRows("t/0", 0, 10)))
	require.Empty(t, h.write(t, covRows("t/0", 10, 20)))
	flush(t, h.w)

	raw := h.w.st.Load().pool
	assert.Equal(t, acklane.KindRawAnchor, raw.Kind())
	for _, m := range raw.Health().Members {
		assert.Equal(t, acklane.KindRawAnchor, m.Lane.Kind, "raw stream %d", m.Index)
	}
	cw := h.w.CoverageWriter()
	require.NotNil(t, cw)
	assert.Equal(t, testCoverageTable, cw.cfg.Table)
	cov := cw.st.Load().pool
	require.NotSame(t, raw, cov)
	assert.Equal(t, acklane.KindDerivedCoverage, cov.Kind())
	members := cov.Health().Members
	require.NotEmpty(t, members)
	for _, m := range members {
		assert.Equal(t, acklane.KindDerivedCoverage, m.Lane.Kind, "coverage stream %d", m.Index)
	}
	var covStreams, rawStreams int64
	for _, s := range h.opener.Streams() {
		switch s.Table() {
		case testCoverageTable:
			covStreams++
		case testTable:
			rawStreams++
		}
	}
	assert.Equal(t, cov.Stats().Opens, covStreams, "every coverage stream is the coverage pool's")
	assert.Equal(t, raw.Stats().Opens, rawStreams, "every raw stream is the raw pool's")
	assert.Equal(t, []coverage.Range{{Start: 0, End: 20}}, coverageSets(t, h.opener, "test")["t/0"].Ranges())
}

// A grant revoked on the coverage table alone: its writer stops and backs
// off through its lifecycle, explained once and naming the coverage table,
// while the raw rows keep flowing; once the grant is back, the next flush
// reopens it and the coverage table holds every durable range, no gap, with
// no restart.
func TestCoverageRecoversThroughTheWriterLifecycle(t *testing.T) {
	cat := catalogfake.New()
	cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	opener := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true})
	var denied atomic.Bool
	opener.SetOpenHook(func(_ context.Context, _ int, table string, _ *arrow.Schema) error {
		if denied.Load() && table == testCoverageTable {
			return errDenied
		}
		return nil
	})
	var logs syncBuffer
	c := Config{Table: testTable, WriterID: "test", Pool: testPoolConfig(), ConnectTimeout: 2 * time.Second}
	coverageOn(&c)
	w := New(c, opener, cat, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})), nil)
	defer func() { _ = w.Close(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, w.Open(ctx))
	h := &harness{w: w, opener: opener, cat: cat}
	e := &Engine{Writer: w}
	assert.Empty(t, e.CoverageHealth(), "not reported before it first opens")

	require.Empty(t, h.write(t, covRows("t/0", 0, 10)))
	flush(t, w)
	require.Equal(t, []coverage.Range{{Start: 0, End: 10}}, coverageSets(t, opener, "")["t/0"].Ranges())
	ch := e.CoverageHealth()
	require.Len(t, ch, 1)
	assert.Equal(t, testCoverageTable, ch[0].Table)
	assert.Equal(t, StateUp, ch[0].State)
	require.Len(t, ch[0].Streams, 1, "one coverage stream")

	// The grant is revoked: the coverage stream fails for good and no new
	// one may open.
	denied.Store(true)
	for _, s := range opener.Streams() {
		if s.Table() == testCoverageTable {
			s.Poison(errDenied)
		}
	}
	cw := w.CoverageWriter()
	require.Eventually(t, func() bool { return cw.st.Load().pool.Stopped() != nil }, 10*time.Second, time.Millisecond)

	start := time.Now()
	for from := int64(10); from < 40; from += 10 {
		require.Empty(t, h.write(t, covRows("t/0", from, from+10)), "raw writes flow while the coverage table refuses")
		fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
		err := w.Coverage().Flush(fctx)
		fcancel()
		require.Error(t, err, "the coverage write fails (or is held) while the grant is missing")
		assert.Contains(t, err.Error(), "PERMISSION_DENIED")
	}
	assert.Less(t, time.Since(start), 5*time.Second, "neither raw writes nor flushes wait out a back-off")
	assert.Equal(t, PhaseBackingOff, cw.Phase())
	assert.Equal(t, PhaseOpen, w.Phase(), "the raw writer is untouched")
	ch = e.CoverageHealth()
	require.Len(t, ch, 1)
	assert.Equal(t, StateStopped, ch[0].State)
	assert.Contains(t, ch[0].Reason, "PERMISSION_DENIED")
	assert.Equal(t, StateUp, w.Health().State)
	explained := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "What to do") {
			explained++
			assert.Contains(t, line, "coverage table "+testCoverageTable+":", "the explanation names the coverage table")
			assert.Contains(t, line, "GRANT", "and the grant to give")
			assert.Contains(t, line, "keep flowing")
		}
	}
	assert.Equal(t, 1, explained, "explained once:\n%s", logs.String())
	assert.Equal(t, []coverage.Range{{Start: 0, End: 40}}, w.Coverage().Covered("t/0"), "the ranges are kept")

	// The grant is back: the next flush after the back-off reopens the
	// coverage writer and writes what was kept.
	denied.Store(false)
	skipWait(cw)
	require.Eventually(t, func() bool {
		fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
		defer fcancel()
		return w.Coverage().Flush(fctx) == nil
	}, 15*time.Second, 10*time.Millisecond)
	assert.Equal(t, PhaseOpen, cw.Phase())
	assert.Equal(t, StateUp, e.CoverageHealth()[0].State)
	require.Empty(t, h.write(t, covRows("t/0", 40, 50)))
	flush(t, w)
	cov, rawSet := coverageSets(t, opener, ""), rawSets(t, opener)
	assert.Equal(t, []coverage.Range{{Start: 0, End: 50}}, rawSet["t/0"].Ranges())
	assert.Equal(t, rawSet["t/0"].Ranges(), cov["t/0"].Ranges(), "the coverage table holds every durable range, no gap")
	assert.Empty(t, cov["t/0"].Gaps(0, 50))
	requireBehind(t, cov, rawSet)
	assert.Contains(t, logs.String(), "written again")
}

// desiredSpy records the desired tables handed to Reconcile.
type desiredSpy struct {
	*catalogfake.Catalog
	mu  sync.Mutex
	got []catalog.DesiredTable
}

func (s *desiredSpy) Reconcile(ctx context.Context, d catalog.DesiredTable) (catalog.ReconcileOutcome, error) {
	s.mu.Lock()
	s.got = append(s.got, d)
	s.mu.Unlock()
	return s.Catalog.Reconcile(ctx, d)
}

// The coverage table's writer asks for its comment on every desired table
// and for the Iceberg-read properties only when it creates the table: an
// existing table's properties are never changed for it.
func TestCoverageWriterCommentAndCreateProperties(t *testing.T) {
	spy := &desiredSpy{Catalog: catalogfake.New()}
	spy.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	c := Config{Table: testTable, WriterID: "test", Pool: testPoolConfig()}
	coverageOn(&c)
	w := New(c, ingestfake.NewOpener(ingestfake.Config{}), spy, nil, nil)
	defer func() { _ = w.Close(context.Background()) }()
	require.NoError(t, w.Open(context.Background()))

	var created *catalog.DesiredTable
	for i, d := range spy.got {
		if d.FullName == testCoverageTable {
			created = &spy.got[i]
		}
	}
	require.NotNil(t, created, "the coverage table was created")
	assert.Equal(t, catalog.RoleDerived, created.Role)
	assert.Contains(t, created.Comment, "Coverage of "+testTable)
	assert.True(t, catalog.IcebergReadsOn(created.Properties), "created with Iceberg reads on: %v", created.Properties)
	var names []string
	for _, col := range created.Columns {
		names = append(names, col.Name)
	}
	assert.Equal(t, []string{"writer_id", "source", "start", "end", "_zb_emit_ts"}, names)

	cw := w.CoverageWriter()
	d := cw.schema.desiredFromColumns(coverage.Columns())
	assert.Contains(t, d.Comment, "Coverage of "+testTable, "the comment is asked for an existing table too")
	assert.Empty(t, d.Properties, "an existing table's properties are left alone")
	raw := w.schema.desiredFromColumns(nil)
	assert.Empty(t, raw.Comment, "the raw table's writer asks for no comment of its own")
}

// The coverage table dropped under a running pipeline (provisioning on):
// its writer's stream fails, the next flush's open re-describes, finds the
// table gone and creates it again at once, and the whole durable
// coverage is written into the new table, not only what changed since.
func TestCoverageTableDroppedIsRecreatedWhole(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, coverageOn, nil)
	require.Empty(t, h.write(t, covRows("t/0", 0, 10)))
	require.Empty(t, h.write(t, covRows("t/1", 0, 5)))
	flush(t, h.w)

	h.cat.Drop(testCoverageTable)
	before := len(h.opener.Streams())
	for _, s := range h.opener.Streams() {
		if s.Table() == testCoverageTable {
			s.Poison(&ingest.Error{Class: ingest.FatalConfig, Code: codes.NotFound, Err: errors.New("NOT_FOUND: table does not exist")})
		}
	}
	cw := h.w.CoverageWriter()
	require.Eventually(t, func() bool { return cw.st.Load().pool.Stopped() != nil }, 10*time.Second, time.Millisecond)
	require.Empty(t, h.write(t, covRows("t/0", 10, 20)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The stream's NOT_FOUND with provisioning is retried at once, not
	// backed off: the flush's Open finds the table gone and creates it
	// again with the columns it had.
	require.NoError(t, h.w.Coverage().Flush(ctx), "re-described, created again by the flush's open")
	ts, err := h.cat.Describe(ctx, testCoverageTable)
	require.NoError(t, err)
	require.NotNil(t, ts, "the coverage table exists again")
	assert.True(t, catalog.IcebergReadsOn(ts.Properties), "with Iceberg reads: %v", ts.Properties)
	flush(t, h.w) // the rewrite the re-creation asked for

	// Only what the new table holds: the streams opened after the drop.
	got := map[string]*coverage.RangeSet{}
	for _, s := range h.opener.Streams()[before:] {
		if s.Table() != testCoverageTable {
			continue
		}
		at, durable := uint64(0), s.Durable()
		for _, rec := range s.Records() {
			src := rec.Column(rec.Schema().FieldIndices(coverage.ColSource)[0]).(*array.LargeString)
			st := rec.Column(rec.Schema().FieldIndices(coverage.ColStart)[0]).(*array.Int64)
			en := rec.Column(rec.Schema().FieldIndices(coverage.ColEnd)[0]).(*array.Int64)
			for i := 0; i < int(rec.NumRows()) && at < durable; i, at = i+1, at+1 {
				if got[src.Value(i)] == nil {
					got[src.Value(i)] = &coverage.RangeSet{}
				}
				got[src.Value(i)].Add(st.Value(i), en.Value(i))
			}
		}
	}
	require.Contains(t, got, "t/0")
	require.Contains(t, got, "t/1")
	assert.Equal(t, []coverage.Range{{Start: 0, End: 20}}, got["t/0"].Ranges(), "the new table holds the whole coverage")
	assert.Equal(t, []coverage.Range{{Start: 0, End: 5}}, got["t/1"].Ranges(), "a source unchanged since the drop too")
}
