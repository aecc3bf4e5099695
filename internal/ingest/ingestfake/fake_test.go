package ingestfake_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, o *ingestfake.Opener) *ingestfake.Stream {
	t.Helper()
	s, err := o.Open(testCtx(t), "main.default.t", ingestfake.TestSchema)
	require.NoError(t, err)
	return s.(*ingestfake.Stream)
}

func submit(t *testing.T, s *ingestfake.Stream, rows int) ingest.Span {
	t.Helper()
	rec := ingestfake.NewRecord(ingestfake.TestSchema, rows)
	defer rec.Release()
	span, err := s.Submit(testCtx(t), rec)
	require.NoError(t, err)
	return span
}

func TestSpansAndAckModes(t *testing.T) {
	cases := []struct {
		name string
		cfg  ingestfake.Config
	}{
		{name: "durable at submit", cfg: ingestfake.Config{}},
		{name: "durable after latency", cfg: ingestfake.Config{AckLatency: time.Millisecond}},
		{name: "manual", cfg: ingestfake.Config{ManualAck: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			s := open(t, ingestfake.NewOpener(tc.cfg))
			assert.Equal(t, ingest.Span{From: 0, To: 3}, submit(t, s, 3))
			assert.Equal(t, ingest.Span{From: 3, To: 8}, submit(t, s, 5))
			assert.Equal(t, uint64(8), s.Submitted())
			assert.Equal(t, []ingest.Span{{From: 0, To: 3}, {From: 3, To: 8}}, s.Spans())
			if tc.cfg.ManualAck {
				assert.Zero(t, s.Durable(), "manual mode acks nothing by itself")
				s.AckUpTo(3)
				assert.Equal(t, uint64(3), s.Durable())
				s.AckUpTo(1)
				assert.Equal(t, uint64(3), s.Durable(), "durability never moves back")
				s.AckUpTo(100)
				assert.Equal(t, uint64(8), s.Durable(), "acks are clamped to what was sent")
			}
			require.NoError(t, s.WaitDurable(ctx, 8))
			assert.Equal(t, uint64(8), s.Durable())
			assert.Equal(t, []uint64{8}, s.WaitTargets())
			assert.Equal(t, 1, s.WaitDurableCalls())
		})
	}
}

func TestWaitDurableBlocksUntilAck(t *testing.T) {
	ctx := testCtx(t)
	s := open(t, ingestfake.NewOpener(ingestfake.Config{ManualAck: true}))
	submit(t, s, 4)

	done := make(chan error, 1)
	go func() { done <- s.WaitDurable(ctx, 4) }()
	require.NoError(t, s.WaitWaitCalls(ctx, 1))
	select {
	case err := <-done:
		t.Fatalf("WaitDurable returned %v before the ack", err)
	default:
	}
	s.AckUpTo(4)
	require.NoError(t, <-done)

	short, cancel := context.WithCancel(ctx)
	cancel()
	submit(t, s, 1)
	assert.ErrorIs(t, s.WaitDurable(short, 5), context.Canceled)
}

func TestPoisonAndClose(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{ManualAck: true})
	s := open(t, o)
	submit(t, s, 2)
	done := make(chan error, 1)
	go func() { done <- s.WaitDurable(ctx, 2) }()
	require.NoError(t, s.WaitWaitCalls(ctx, 1))
	s.Poison(nil)
	err := <-done
	class, ok := ingest.ClassOf(err)
	require.True(t, ok)
	assert.Equal(t, ingest.Poison, class)
	s.AckAll()
	assert.Zero(t, s.Durable(), "a poisoned stream acks nothing")
	rec := ingestfake.NewRecord(ingestfake.TestSchema, 1)
	defer rec.Release()
	_, err = s.Submit(ctx, rec)
	assert.Equal(t, ingest.Poison, ingest.Classify(err).Class)

	s2 := open(t, o)
	submit(t, s2, 1)
	assert.Equal(t, 2, o.Live())
	require.NoError(t, s2.Close())
	require.NoError(t, s2.Close())
	assert.ErrorIs(t, s2.WaitDurable(ctx, 1), ingestfake.ErrClosed)
	_, err = s2.Submit(ctx, rec)
	assert.ErrorIs(t, err, ingestfake.ErrClosed)
	assert.Equal(t, 2, s2.CloseCalls())
	assert.True(t, s2.Closed())
	assert.Equal(t, 1, o.Closes(), "a stream closes once")
	assert.Equal(t, 1, o.Live())
	assert.Equal(t, 2, o.MaxLive())
}

func TestDrain(t *testing.T) {
	ctx := testCtx(t)
	s := open(t, ingestfake.NewOpener(ingestfake.Config{ManualAck: true}))
	submit(t, s, 3)
	done := make(chan error, 1)
	go func() { done <- s.Drain(ctx) }()
	require.NoError(t, s.WaitWaitCalls(ctx, 1))
	rec := ingestfake.NewRecord(ingestfake.TestSchema, 1)
	defer rec.Release()
	_, err := s.Submit(ctx, rec)
	assert.ErrorIs(t, err, ingestfake.ErrDraining)
	s.AckAll()
	require.NoError(t, <-done)
}

func TestOpenerFailuresAndCounters(t *testing.T) {
	ctx := testCtx(t)
	o := ingestfake.NewOpener(ingestfake.Config{})
	o.FailNextOpens(ingestfake.ErrConcurrencyReject(time.Second), nil, ingestfake.ErrFatalConfig("no grants"))
	o.SetOpenHook(func(_ context.Context, attempt int, table string, _ *arrow.Schema) error {
		if attempt == 5 {
			return ingestfake.ErrTransient("unavailable")
		}
		return nil
	})

	want := []ingest.Class{ingest.ConcurrencyReject, 0, ingest.FatalConfig, 0, ingest.Transient, 0}
	for i, class := range want {
		s, err := o.Open(ctx, "main.default.t", ingestfake.TestSchema)
		if class == 0 {
			require.NoError(t, err, "attempt %d", i+1)
			require.NotNil(t, s)
			continue
		}
		require.Error(t, err, "attempt %d", i+1)
		ze := ingest.Classify(err)
		assert.Equal(t, class, ze.Class, "attempt %d", i+1)
		if class == ingest.ConcurrencyReject {
			assert.Equal(t, time.Second, ze.RetryAfter)
		}
	}
	assert.Equal(t, 6, o.OpenAttempts())
	assert.Len(t, o.AttemptTimes(), 6)
	assert.Equal(t, 3, o.Opens())
	streams, err := o.WaitOpens(ctx, 3)
	require.NoError(t, err)
	require.Len(t, streams, 3)
	for i, s := range streams {
		assert.Equal(t, i, s.Index())
		assert.Equal(t, "main.default.t", s.Table())
		assert.Same(t, ingestfake.TestSchema, s.Schema())
	}

	short, cancel := context.WithCancel(ctx)
	cancel()
	_, err = o.WaitOpens(short, 4)
	assert.ErrorIs(t, err, context.Canceled)
	_, err = o.Open(short, "main.default.t", ingestfake.TestSchema)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestSchemaMismatchAndKeepRecords(t *testing.T) {
	ctx := testCtx(t)
	s := open(t, ingestfake.NewOpener(ingestfake.Config{KeepRecords: true}))
	submit(t, s, 2)
	recs := s.Records()
	require.Len(t, recs, 1)
	assert.Equal(t, int64(2), recs[0].NumRows())
	s.ReleaseRecords()
	assert.Empty(t, s.Records())

	other := ingestfake.NewRecord(arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.BinaryTypes.String, Nullable: true}}, nil), 1)
	defer other.Release()
	_, err := s.Submit(ctx, other)
	ze := ingest.Classify(err)
	assert.Equal(t, ingest.FatalConfig, ze.Class)
	assert.True(t, ze.IsSchemaMismatch())
}
