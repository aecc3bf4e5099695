package tablewriter

import (
	"context"
	"errors"
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
	_, err := (&Engine{}).Write(context.Background(), rows(`{"id":1}`), nil, nil)
	require.ErrorIs(t, err, ErrNotOpen, "no writer: not connected")

	h := newHarness(t, ingestfake.Config{KeepRecords: true}, nil, nil)
	dlOpener := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true})
	dl := New(Config{Table: "main.default.dlq", Provision: true, CreateColumns: DeadLetterColumns(), Pool: testPoolConfig()}, dlOpener, catalogfake.New(), nil, nil)
	t.Cleanup(func() { _ = dl.Close(context.Background()) })
	e := &Engine{Writer: h.w, DeadLetters: NewDeadLetters(dl, true)}
	require.NoError(t, e.Open(context.Background()))

	rest, err := e.Write(context.Background(), rows(`{"id":1,"msg":"a"}`, `{"id":"x"}`), nil, nil)
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
		_, err := e.Write(context.Background(), rows(`{"id":2,"msg":"b"}`), nil, nil)
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
	rest, err := e.Write(context.Background(), rows(`{"id":1,"msg":"a"}`), nil, nil)
	require.NoError(t, err)
	assert.Empty(t, rest, "good rows still land")
}
