package tablewriter

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// The zero Engine holds nothing: opening and closing it are no-ops, so an
// output can close an engine whose writers were never built.
func TestEngineZeroValue(t *testing.T) {
	var e Engine
	require.NoError(t, e.Open(context.Background()))
	require.NoError(t, e.Close(context.Background()))
	require.Nil(t, e.DeadLetterWriter())
}

// Engine.Write is the whole write path: the table writer, then the dead
// letters of the rows that failed; "not connected" is ErrNotOpen, for the
// caller to hold the batch.
func TestEngineWrite(t *testing.T) {
	_, err := (&Engine{}).Write(context.Background(), rows(`{"id":1}`), nil, nil, nil)
	require.ErrorIs(t, err, ErrNotOpen, "no writer: not connected")

	h := newHarness(t, ingestfake.Config{KeepRecords: true}, nil, nil)
	dlOpener := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true})
	dl := New(Config{Table: "main.default.dlq", Provision: true, CreateColumns: DeadLetterColumns(), Pool: testPoolConfig()}, dlOpener, catalogfake.New(), nil, nil)
	t.Cleanup(func() { _ = dl.Close(context.Background()) })
	e := &Engine{Writer: h.w, DeadLetters: NewDeadLetters(dl, true)}
	require.NoError(t, e.Open(context.Background()))

	rest, err := e.Write(context.Background(), rows(`{"id":1,"msg":"a"}`, `{"id":"x"}`), nil, nil, nil)
	require.NoError(t, err)
	assert.Empty(t, rest, "the bad row is a durable dead letter")
	var letters int64
	for _, s := range dlOpener.Streams() {
		for _, r := range s.Records() {
			letters += r.NumRows()
		}
	}
	assert.Equal(t, int64(1), letters)

	// The table's streams are refused for good: the batch is not
	// connected (held), not failed.
	for _, s := range h.opener.Streams() {
		s.Poison(errDenied)
	}
	require.Eventually(t, func() bool {
		_, err := e.Write(context.Background(), rows(`{"id":2,"msg":"b"}`), nil, nil, nil)
		return errors.Is(err, ErrNotOpen)
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, PhaseBackingOff, h.w.Phase())
}

// The dead-letter table gates the first Open only (a misconfigured one is
// reported before any row is written); once the output has been open, a
// dead-letter writer that fails no longer keeps the table's good rows
// from flowing.
func TestEngineDeadLetterTableGatesOnlyTheFirstOpen(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, nil, nil)
	missing := New(Config{Table: "main.default.dlq", CreateColumns: DeadLetterColumns(), Pool: testPoolConfig()}, ingestfake.NewOpener(ingestfake.Config{}), catalogfake.New(), nil, nil)
	t.Cleanup(func() { _ = missing.Close(context.Background()) })
	require.Error(t, (&Engine{Writer: h.w, DeadLetters: NewDeadLetters(missing, true)}).Open(context.Background()),
		"a dead-letter table that does not exist is reported at the first Open")

	dl := New(Config{Table: "main.default.dlq", Provision: true, CreateColumns: DeadLetterColumns(), Pool: testPoolConfig()}, ingestfake.NewOpener(ingestfake.Config{}), catalogfake.New(), nil, nil)
	e := &Engine{Writer: h.w, DeadLetters: NewDeadLetters(dl, true)}
	require.NoError(t, e.Open(context.Background()))
	require.NoError(t, dl.Close(context.Background()))
	require.Error(t, dl.Open(context.Background()), "the dead-letter writer fails from now on")
	require.NoError(t, e.Open(context.Background()), "a failing dead-letter table no longer holds the output")
	rest, err := e.Write(context.Background(), rows(`{"id":1,"msg":"a"}`), nil, nil, nil)
	require.NoError(t, err)
	assert.Empty(t, rest, "good rows still land")
}

// A message a processor failed (ProcessorFailed) is never written to the
// table, even when its bytes would fit it: it is a dead letter carrying the
// processor's error, beside the rows that do not fit, and the rows around
// it land; the keys and the indices stay the batch's.
func TestEngineProcessorFailedRowsAreDeadLettered(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, nil, nil)
	dlOpener := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true})
	dl := New(Config{Table: "main.default.dlq", Provision: true, CreateColumns: DeadLetterColumns(), Pool: testPoolConfig()}, dlOpener, catalogfake.New(), nil, nil)
	t.Cleanup(func() { _ = dl.Close(context.Background()) })
	e := &Engine{Writer: h.w, DeadLetters: NewDeadLetters(dl, true)}
	require.NoError(t, e.Open(context.Background()))

	procErr := errors.New("schema_registry_decode: message 1: schema id 99: Schema 99 not found (40403)")
	failed := []RowError{ProcessorFailed(1, procErr)}
	var mu sync.Mutex
	var keyed []int
	keyOf := func(i int) (string, error) { mu.Lock(); defer mu.Unlock(); keyed = append(keyed, i); return "", nil }
	rest, err := e.Write(context.Background(), rows(`{"id":1,"msg":"a"}`, `{"id":9,"msg":"would fit"}`, `{"id":"x"}`, `{"id":4,"msg":"d"}`), failed, nil, keyOf)
	require.NoError(t, err)
	assert.Empty(t, rest, "both bad rows are durable dead letters")
	assert.ElementsMatch(t, []int{0, 2, 3}, keyed, "the key of each row written, by its index in the batch")

	ids, _ := submittedColumn(t, h.opener, "id")
	assert.ElementsMatch(t, []string{"1", "4"}, ids, "the failed message never lands, though it would fit")
	idx, _ := submittedColumn(t, dlOpener, "message_index")
	errs, _ := submittedColumn(t, dlOpener, "error")
	require.Len(t, errs, 2)
	byIndex := map[string]string{idx[0]: errs[0], idx[1]: errs[1]}
	assert.Equal(t, "failed in a processor: "+procErr.Error(), byIndex["1"])
	assert.NotContains(t, byIndex["2"], "processor")
	assert.Contains(t, byIndex["2"], "expected a JSON number")
	payloads, _ := submittedColumn(t, dlOpener, "payload")
	assert.Contains(t, payloads, `{"id":9,"msg":"would fit"}`, "the message as received")

	// Every message failed: the table is not written at all.
	before := len(ids)
	rest, err = e.Write(context.Background(), rows(`{"id":5}`, `{"id":6}`), []RowError{ProcessorFailed(0, procErr), ProcessorFailed(1, procErr)}, nil, nil)
	require.NoError(t, err)
	assert.Empty(t, rest)
	ids, _ = submittedColumn(t, h.opener, "id")
	assert.Len(t, ids, before)
	errs, _ = submittedColumn(t, dlOpener, "error")
	assert.Len(t, errs, 4)

	// Without a dead-letter table the failed rows come back, with the
	// processor's error and their index in the batch.
	bare := &Engine{Writer: h.w}
	rest, err = bare.Write(context.Background(), rows(`{"id":7}`, `{"id":8}`, `{"id":"y"}`), []RowError{ProcessorFailed(1, procErr)}, nil, nil)
	require.NoError(t, err)
	require.Len(t, rest, 2)
	assert.Equal(t, 1, rest[0].Index)
	assert.ErrorIs(t, rest[0], ErrProcessorFailed)
	assert.Equal(t, "message 1: failed in a processor: "+procErr.Error(), rest[0].Error())
	assert.Equal(t, 2, rest[1].Index, "the converter's error, at the row's index in the batch")
	ids, _ = submittedColumn(t, h.opener, "id")
	assert.Contains(t, ids, "7")
	assert.NotContains(t, ids, "8")
}

// With a router, a failed message's dead letter names the table its
// message would have gone to.
func TestEngineProcessorFailedRowsRouted(t *testing.T) {
	r, opener, _ := newRouter(t, 4, "c.s.a", "c.s.b")
	dlOpener := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true})
	dl := New(Config{Table: "main.default.dlq", Provision: true, CreateColumns: DeadLetterColumns(), Pool: testPoolConfig()}, dlOpener, catalogfake.New(), nil, nil)
	t.Cleanup(func() { _ = dl.Close(context.Background()) })
	e := &Engine{Router: r, DeadLetters: NewDeadLetters(dl, false)}
	require.NoError(t, e.Open(context.Background()))
	tableOf := func(i int) (string, error) { return []string{"c.s.a", "c.s.b", "c.s.b"}[i], nil }
	rest, err := e.Write(context.Background(), rows(`{"id":1}`, `{"id":2}`, `{"id":3}`), []RowError{ProcessorFailed(1, errors.New("boom"))}, tableOf, nil)
	require.NoError(t, err)
	assert.Empty(t, rest)
	perTable := map[string]int64{}
	for _, s := range opener.Streams() {
		for _, rec := range s.Records() {
			perTable[s.Table()] += rec.NumRows()
		}
	}
	assert.Equal(t, map[string]int64{"c.s.a": 1, "c.s.b": 1}, perTable)
	src, _ := submittedColumn(t, dlOpener, "source_table")
	assert.Equal(t, []string{"c.s.b"}, src)
	idx, _ := submittedColumn(t, dlOpener, "message_index")
	assert.Equal(t, []string{"1"}, idx)
}
