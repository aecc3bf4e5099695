package zerobus

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/redpanda-data/benthos/v4/public/bloblang"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

const testTable = "main.default.events"

type harness struct {
	out    *output
	opener *ingestfake.Opener
	cat    *catalogfake.Catalog
}

// newHarness builds a connected output over a fake opener and catalog.
// extraYAML is appended to a minimal config.
func newHarness(t *testing.T, fc ingestfake.Config, extraYAML string, setup func(*catalogfake.Catalog)) *harness {
	t.Helper()
	cfg, err := parseYAML(t, minimalYAML+extraYAML)
	require.NoError(t, err)
	cat := catalogfake.New()
	if setup != nil {
		setup(cat)
	} else {
		cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	}
	opener := ingestfake.NewOpener(fc)
	o, err := newOutput(cfg, service.MockResources(), deps{opener: opener, catalog: cat})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = o.Close(ctx)
	})
	return &harness{out: o, opener: opener, cat: cat}
}

// connect calls Connect as the engine does: again after the wait an
// ErrBackOff asks for, until it succeeds (within 15 s).
func (h *harness) connect(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := h.out.Connect(ctx)
		cancel()
		var bo *service.ErrBackOff
		if err == nil || !errors.As(err, &bo) || time.Now().Add(bo.Wait).After(deadline) {
			require.NoError(t, err)
			return
		}
		time.Sleep(bo.Wait)
	}
}

// writeConcurrently writes n one-message batches at once, body(i) the
// message of the i-th, and returns their WriteBatch results.
func (h *harness) writeConcurrently(n int, body func(i int) string) []error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.out.WriteBatch(context.Background(), msgs(body(i)))
		}()
	}
	wg.Wait()
	return errs
}

func msgs(bodies ...string) service.MessageBatch {
	b := make(service.MessageBatch, len(bodies))
	for i, s := range bodies {
		b[i] = service.NewMessage([]byte(s))
	}
	return b
}

// waitSubmitted waits until the fake's streams hold n submitted batches:
// a fixed sleep may end before a loaded machine has submitted anything.
func waitSubmitted(t *testing.T, op *ingestfake.Opener, n uint64) {
	t.Helper()
	var got atomic.Uint64 // the poller may still run when Eventually gives up
	if !assert.Eventually(t, func() bool {
		var sum uint64
		for _, s := range op.Streams() {
			sum += s.Submitted()
		}
		got.Store(sum)
		return sum >= n
	}, 10*time.Second, 2*time.Millisecond) {
		t.Fatalf("%d batches submitted, want %d", got.Load(), n)
	}
}

// writeAsync runs WriteBatch in a goroutine and returns its result channel.
func writeAsync(ctx context.Context, o *output, b service.MessageBatch) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- o.WriteBatch(ctx, b) }()
	return ch
}

// submittedRows returns, over every stream the fake opened, the rows of the
// given int64 and string columns that were submitted.
func submittedRows(t *testing.T, op *ingestfake.Opener) []string {
	t.Helper()
	var out []string
	for _, s := range op.Streams() {
		for _, rec := range s.Records() {
			ids := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.Int64)
			msgCol := rec.Column(rec.Schema().FieldIndices("msg")[0])
			for r := 0; r < int(rec.NumRows()); r++ {
				m := "<null>"
				if msgCol.IsValid(r) {
					m = msgCol.ValueStr(r)
				}
				out = append(out, strings.Join([]string{itoa(ids.Value(r)), m}, ":"))
			}
		}
	}
	return out
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func TestWriteBatchAcksOnlyAfterDurable(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true, KeepRecords: true}, "", nil)
	h.connect(t)

	done := writeAsync(context.Background(), h.out, msgs(`{"id":1,"msg":"a"}`, `{"id":2,"msg":"b"}`))
	require.Eventually(t, func() bool { return len(submittedRows(t, h.opener)) == 2 }, 15*time.Second, 5*time.Millisecond,
		"rows are submitted before they are durable")
	select {
	case err := <-done:
		t.Fatalf("WriteBatch returned %v before the fake acknowledged the rows", err)
	case <-time.After(200 * time.Millisecond):
	}
	for _, s := range h.opener.Streams() {
		s.AckAll()
	}
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("WriteBatch did not return after the ack")
	}
	assert.ElementsMatch(t, []string{"1:a", "2:b"}, submittedRows(t, h.opener))
}

func TestWriteBatchBadRowsFailAlone(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true, KeepRecords: true}, "", nil)
	h.connect(t)

	batch := msgs(
		`{"id":1,"msg":"good"}`,
		`{"id":2,"msg":"bad","nope":true}`, // unknown field
		`{"msg":"no id"}`,                  // missing NOT NULL
		`{"id":4}`,                         // msg is nullable
	)
	done := writeAsync(context.Background(), h.out, batch)
	require.Eventually(t, func() bool { return len(submittedRows(t, h.opener)) == 2 }, 15*time.Second, 5*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("WriteBatch returned %v before the good rows were durable", err)
	case <-time.After(100 * time.Millisecond):
	}
	for _, s := range h.opener.Streams() {
		s.AckAll()
	}
	err := <-done
	require.Error(t, err)
	failed := failedRows(t, err) // requires a *service.BatchError
	require.Len(t, failed, 2)
	assert.Contains(t, failed[1], "message 1")
	assert.Contains(t, failed[1], "nope")
	assert.Contains(t, failed[2], "message 2")
	assert.Contains(t, failed[2], `"id"`)
	assert.ElementsMatch(t, []string{"1:good", "4:<null>"}, submittedRows(t, h.opener))
}

func TestWriteBatchAllRowsBad(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, "", nil)
	h.connect(t)
	err := h.out.WriteBatch(context.Background(), msgs(`{"x":1}`, `not json`))
	var berr *service.BatchError
	require.ErrorAs(t, err, &berr)
	assert.Equal(t, 2, berr.IndexedErrors())
	assert.Empty(t, submittedRows(t, h.opener), "nothing is submitted when no row fits")
}

func TestWriteBatchCancelledIsNack(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true}, "", nil)
	h.connect(t)

	ctx, cancel := context.WithCancel(context.Background())
	done := writeAsync(ctx, h.out, msgs(`{"id":1,"msg":"a"}`))
	waitSubmitted(t, h.opener, 1) // cancelled while it waits for its ack
	cancel()
	select {
	case err := <-done:
		require.Error(t, err, "a cancelled write must nack, never ack")
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("WriteBatch ignored ctx cancellation")
	}
	for _, s := range h.opener.Streams() {
		s.AckAll() // let Close drain quickly
	}
}

func TestWriteBatchPipelinesConcurrentBatches(t *testing.T) {
	// With acks held back, many batches must be submitted at once: nothing
	// on the write path waits for one batch before accepting the next.
	h := newHarness(t, ingestfake.Config{ManualAck: true, KeepRecords: true}, "", nil)
	h.connect(t)

	const n = 16
	results := make([]<-chan error, n)
	for i := range n {
		results[i] = writeAsync(context.Background(), h.out, msgs(`{"id":`+itoa(int64(i))+`,"msg":"x"}`))
	}
	require.Eventually(t, func() bool { return len(submittedRows(t, h.opener)) == n }, 15*time.Second, 5*time.Millisecond,
		"all %d batches are in flight before any ack", n)
	for _, s := range h.opener.Streams() {
		s.AckAll()
	}
	for i := range n {
		require.NoError(t, <-results[i])
	}
}

func TestOrderingKeyPinsKeysToStreams(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, "ordering_key: ${! this.msg }\nstreams:\n  min: 4\n", nil)
	h.connect(t)

	for round := 0; round < 3; round++ {
		var bodies []string
		for i := 0; i < 40; i++ {
			bodies = append(bodies, `{"id":`+itoa(int64(round*100+i))+`,"msg":"k`+itoa(int64(i%7))+`"}`)
		}
		require.NoError(t, h.out.WriteBatch(context.Background(), msgs(bodies...)))
	}
	streamOf := map[string]int{}
	used := map[int]bool{}
	total := 0
	for _, s := range h.opener.Streams() {
		for _, rec := range s.Records() {
			col := rec.Column(rec.Schema().FieldIndices("msg")[0])
			for r := 0; r < int(rec.NumRows()); r++ {
				k := col.ValueStr(r)
				total++
				if prev, ok := streamOf[k]; ok {
					assert.Equal(t, prev, s.Index(), "key %s went to two streams", k)
				}
				streamOf[k] = s.Index()
				used[s.Index()] = true
			}
		}
	}
	assert.Equal(t, 120, total)
	assert.Len(t, streamOf, 7)
	assert.Greater(t, len(used), 1, "keys are spread over more than one stream")
}

func TestConnectMissingTableWithoutProvisioning(t *testing.T) {
	h := newHarness(t, ingestfake.Config{}, "", func(*catalogfake.Catalog) {})
	err := h.out.Connect(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "main.default.events: the table does not exist and catalog.provision is false")
	assert.Equal(t, 0, h.opener.Opens(), "no stream is opened for an absent table")
}

func TestProvisionCreatesTableFromFirstBatch(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, "catalog:\n  provision: true\n  warehouse_id: wh\n", func(*catalogfake.Catalog) {})
	h.connect(t)
	assert.Equal(t, 0, h.opener.Opens(), "streams wait for the table to exist")

	require.NoError(t, h.out.WriteBatch(context.Background(), msgs(`{"id":1,"msg":"first"}`, `{"id":2,"msg":"second","score":1.5}`)))
	st, _ := h.cat.Describe(context.Background(), testTable)
	require.NotNil(t, st)
	id, ok := st.Column("id")
	require.True(t, ok)
	assert.Equal(t, typemap.Long, id.Type.Kind)
	score, ok := st.Column("score")
	require.True(t, ok)
	assert.Equal(t, typemap.Double, score.Type.Kind)
	assert.ElementsMatch(t, []string{"1:first", "2:second"}, submittedRows(t, h.opener))
}

func TestProvisionAddsColumnOnDrift(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, "catalog:\n  provision: true\n  warehouse_id: wh\n", nil)
	h.connect(t)
	require.NoError(t, h.out.WriteBatch(context.Background(), msgs(`{"id":1,"msg":"old"}`)))
	opensBefore := h.opener.Opens()
	reconcilesBefore := h.cat.ReconcileCount()

	// Concurrent batches all carrying the new field: one evolution.
	errs := h.writeConcurrently(8, func(i int) string {
		return `{"id":` + itoa(int64(10+i)) + `,"msg":"new","region":"eu"}`
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, reconcilesBefore+1, h.cat.ReconcileCount(), "one drift, one reconcile")
	st, _ := h.cat.Describe(context.Background(), testTable)
	region, ok := st.Column("region")
	require.True(t, ok)
	assert.Equal(t, typemap.String, region.Type.Kind)

	// The new rows went to streams opened on the new schema.
	var newSchemaRows int
	for _, s := range h.opener.Streams() {
		for _, rec := range s.Records() {
			if rec.Schema().HasField("region") {
				newSchemaRows += int(rec.NumRows())
			}
		}
	}
	assert.Equal(t, 8, newSchemaRows)
	assert.LessOrEqual(t, h.opener.Opens()-opensBefore, pool.Size(h.out.wcfg.Pool), "reopen opens at most one stream per pool member")
}

func TestDriftWithoutProvisioningIsRowError(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, "", nil)
	h.connect(t)
	err := h.out.WriteBatch(context.Background(), msgs(`{"id":1,"msg":"a","region":"eu"}`))
	var berr *service.BatchError
	require.ErrorAs(t, err, &berr)
	assert.Contains(t, err.Error(), "region")
	assert.Contains(t, err.Error(), "message 0")
	assert.Equal(t, 0, h.cat.ReconcileCount())
}

func primaryRawOK() map[string]string { return catalog.PrimaryRawProperties() }

func TestPrimaryRawRefusesLoudly(t *testing.T) {
	h := newHarness(t, ingestfake.Config{}, "catalog:\n  role: primary_raw\n  recheck_interval: 20ms\n", func(c *catalogfake.Catalog) {
		props := primaryRawOK()
		props["delta.enableDeletionVectors"] = "true"
		c.Put(testTable, "id BIGINT NOT NULL, msg STRING", props)
	})
	err := h.out.Connect(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), catalog.PreDeletionVectors)
	err = h.out.WriteBatch(context.Background(), msgs(`{"id":1}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), catalog.PreDeletionVectors)

	// Fixed: Connect succeeds, writes flow.
	h.cat.SetProps(testTable, primaryRawOK())
	h.connect(t)
	require.NoError(t, h.out.WriteBatch(context.Background(), msgs(`{"id":1}`)))

	// Flipped under the running pipeline: the re-check catches it.
	props := primaryRawOK()
	props["delta.enableDeletionVectors"] = "true"
	h.cat.SetProps(testTable, props)
	require.Eventually(t, func() bool {
		err := h.out.WriteBatch(context.Background(), msgs(`{"id":2}`))
		return err != nil && strings.Contains(err.Error(), catalog.PreDeletionVectors)
	}, 15*time.Second, 10*time.Millisecond)

	// And fixed again.
	h.cat.SetProps(testTable, primaryRawOK())
	require.Eventually(t, func() bool {
		return h.out.WriteBatch(context.Background(), msgs(`{"id":3}`)) == nil
	}, 15*time.Second, 10*time.Millisecond)
}

func TestCloseIsBoundedAndNacksPending(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true}, "close_timeout: 200ms\n", nil)
	h.connect(t)
	done := writeAsync(context.Background(), h.out, msgs(`{"id":1,"msg":"never acked"}`))
	waitSubmitted(t, h.opener, 1) // pending when Close starts

	start := time.Now()
	_ = h.out.Close(context.Background())
	assert.Less(t, time.Since(start), 3*time.Second, "Close bounds itself by close_timeout")
	select {
	case err := <-done:
		require.Error(t, err, "rows not durable at close are nacked, never acked")
	case <-time.After(5 * time.Second):
		t.Fatal("pending WriteBatch still blocked after Close")
	}
}

func TestConnectConcurrencyRejectBacksOffWithoutStorm(t *testing.T) {
	h := newHarness(t, ingestfake.Config{}, "", nil)
	// Every member is refused at first.
	h.opener.FailNextOpens(ingestfake.ErrConcurrencyReject(100*time.Millisecond), ingestfake.ErrConcurrencyReject(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := h.out.Connect(ctx)
	cancel()
	require.Error(t, err)
	var bo *service.ErrBackOff
	require.ErrorAs(t, err, &bo, "a refused connect asks the engine to back off")
	assert.Greater(t, bo.Wait, time.Duration(0))
	attempts := h.opener.OpenAttempts()
	assert.LessOrEqual(t, attempts, 2, "one open per member, no retry storm within the backoff")

	// The next Connect reuses the same pool: it succeeds once the members'
	// own back-off lets them retry, with no burst of extra opens.
	h.connect(t)
	assert.LessOrEqual(t, h.opener.OpenAttempts(), 4)
	require.NoError(t, h.out.WriteBatch(context.Background(), msgs(`{"id":1}`)))
}

func TestSchemaRejectionRedescribesTable(t *testing.T) {
	h := newHarness(t, ingestfake.Config{ManualAck: true, KeepRecords: true}, "", nil)
	h.connect(t)
	done := writeAsync(context.Background(), h.out, msgs(`{"id":1,"msg":"a"}`))
	require.Eventually(t, func() bool { return len(submittedRows(t, h.opener)) == 1 }, 15*time.Second, 5*time.Millisecond)

	// Streams opened from now on acknowledge by themselves.
	h.opener.SetConfig(ingestfake.Config{KeepRecords: true})
	// Someone adds a column; the service then rejects the stream's schema.
	h.cat.Put(testTable, "id BIGINT NOT NULL, msg STRING, region STRING", nil)
	for _, s := range h.opener.Streams() {
		s.Poison(&ingest.Error{Class: ingest.FatalConfig, ServiceCode: ingest.ServiceCodeSchemaMismatch,
			Causes: []string{"FIELD_NOT_IN_STREAM"}, Err: errors.New("schema validation failed")})
	}
	err := <-done
	require.Error(t, err, "a batch whose stream was rejected is nacked")

	// The output re-described the table and reopened its streams on it: the
	// redelivered batch and rows with the new column go through without
	// provisioning.
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(h.out.eng.Load().Writer.Columns(), func(c typemap.Column) bool { return c.Name == "region" })
	}, 15*time.Second, 10*time.Millisecond)
	require.NoError(t, h.out.WriteBatch(context.Background(), msgs(`{"id":1,"msg":"a"}`, `{"id":2,"msg":"b","region":"eu"}`)))
}

func TestZerobusToJSONBloblang(t *testing.T) {
	exe, err := bloblang.Parse(`root.s = this.obj.zerobus_to_json()`)
	require.NoError(t, err)
	out, err := exe.Query(map[string]any{"obj": map[string]any{"b": int64(1), "a": "x<y", "c": []any{true, nil}}})
	require.NoError(t, err)
	assert.Equal(t, `{"a":"x<y","b":1,"c":[true,null]}`, out.(map[string]any)["s"])
}

// failedRows maps the failed message indices of a WriteBatch error to
// their error text.
func failedRows(t *testing.T, err error) map[int]string {
	t.Helper()
	failed := map[int]string{}
	if err == nil {
		return failed
	}
	var berr *service.BatchError
	require.ErrorAs(t, err, &berr)
	// The indices are the test's own batch's: WalkMessages' caveat (an
	// index may not match an origin batch) does not apply.
	//lint:ignore SA1019 the batch is the one the test built, so indices match.
	berr.WalkMessages(func(i int, _ *service.Message, err error) bool {
		if err != nil {
			failed[i] = err.Error()
		}
		return true
	})
	return failed
}

// A stream refused for good (grants revoked) makes WriteBatch report
// ErrNotConnected, the engine's cue to call Connect again, which reopens the
// streams: writes resume without a restart.
func TestStoppedStreamsReportNotConnectedAndHealOnConnect(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, "", nil)
	h.connect(t)
	require.NoError(t, h.out.WriteBatch(context.Background(), msgs(`{"id":1,"msg":"a"}`)))
	for _, s := range h.opener.Streams() {
		s.Poison(&ingest.Error{Class: ingest.FatalConfig, Err: errors.New("PERMISSION_DENIED")})
	}
	require.Eventually(t, func() bool {
		return errors.Is(h.out.WriteBatch(context.Background(), msgs(`{"id":2,"msg":"b"}`)), service.ErrNotConnected)
	}, 15*time.Second, 10*time.Millisecond)
	h.connect(t)
	require.NoError(t, h.out.WriteBatch(context.Background(), msgs(`{"id":2,"msg":"b"}`)))
	assert.Contains(t, submittedRows(t, h.opener), "2:b")
}

// A Bloblang timestamp into TIMESTAMP_NTZ fails its row, naming the column,
// unless reconcile.timestamp_ntz_from_zoned stores its UTC wall time.
func TestZonedTimestampIntoNTZ(t *testing.T) {
	ts := time.Date(2026, 11, 30, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		name, yaml string
		wantErr    bool
	}{
		{"refused by default", "", true},
		{"converted when opted in", "reconcile:\n  timestamp_ntz_from_zoned: true\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, ingestfake.Config{KeepRecords: true}, tc.yaml, func(c *catalogfake.Catalog) {
				c.Put(testTable, "id BIGINT NOT NULL, local TIMESTAMP_NTZ", nil)
			})
			h.connect(t)
			m := service.NewMessage(nil)
			m.SetStructured(map[string]any{"id": int64(1), "local": ts})
			err := h.out.WriteBatch(context.Background(), service.MessageBatch{m})
			if !tc.wantErr {
				require.NoError(t, err)
				return
			}
			failed := failedRows(t, err)
			require.Len(t, failed, 1)
			assert.Contains(t, failed[0], `column "local"`)
		})
	}
}

// A fault only the user can fix (here PERMISSION_DENIED at every stream
// open) makes Connect ask the engine to back off (the writer's lifecycle
// decides how long: 1 s, doubling across failed cycles, see lifecycle_test),
// and a Connect before that wait has passed opens nothing; once the grant
// is there, the next Connect after the wait succeeds.
func TestPermanentConnectErrorBacksOff(t *testing.T) {
	h := newHarness(t, ingestfake.Config{}, "", nil)
	var granted atomic.Bool
	var opens atomic.Int64
	h.opener.SetOpenHook(func(context.Context, int, string, *arrow.Schema) error {
		opens.Add(1)
		if granted.Load() {
			return nil
		}
		return &ingest.Error{Class: ingest.FatalConfig, Code: codes.PermissionDenied, Err: errors.New("User does not have MODIFY on Table 'main.default.events'")}
	})
	err := h.out.Connect(context.Background())
	var bo *service.ErrBackOff
	require.ErrorAs(t, err, &bo)
	assert.Contains(t, err.Error(), "MODIFY")
	assert.InDelta(t, float64(time.Second), float64(bo.Wait), float64(time.Second)/4, "the first wait after a permanent failure")
	tried := opens.Load()
	require.Positive(t, tried)

	// The same cause again: Connect does not return it a second time (the
	// engine would log it at each step) but waits the back-off itself,
	// until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err = h.out.Connect(ctx)
	cancel()
	var again *service.ErrBackOff
	require.ErrorAs(t, err, &again, "ctx ended while Connect waited")
	assert.Equal(t, tried, opens.Load(), "no open is tried before the wait has passed")

	granted.Store(true)
	connected := make(chan error, 1)
	go func() { connected <- h.out.Connect(context.Background()) }()
	select {
	case err := <-connected:
		require.NoError(t, err, "healed within the back-off step, from inside Connect")
	case <-time.After(5 * time.Second):
		t.Fatal("Connect did not return once the grant was given")
	}
	require.NoError(t, h.out.WriteBatch(context.Background(), msgs(`{"id":1}`)))
}
