// Package ingestfake is an in-memory ingest.Opener and ingest.Stream for
// tests of the layers above the wire: the ack lanes, the pool and the plugin.
//
// A Stream assigns logical row spans like the real one and makes rows durable
// either automatically (after Config.AckLatency) or only when the test calls
// AckUpTo/AckAll (Config.ManualAck). Tests inject failures with
// Opener.FailNextOpens (e.g. ErrConcurrencyReject) and Stream.Poison, and
// assert on counters: open attempts and their times, opens, closes, live
// streams, WaitDurable calls and targets, and the spans submitted.
//
// Everything is safe for concurrent use. Waiting helpers (WaitOpens,
// WaitSubmitted, WaitWaitCalls) let tests synchronise on events instead of
// sleeping.
package ingestfake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
)

// ErrClosed is returned by a closed Stream and to its abandoned waiters.
var ErrClosed = errors.New("ingestfake: stream closed")

// ErrDraining is returned by Submit after Drain.
var ErrDraining = errors.New("ingestfake: stream draining")

// ErrConcurrencyReject returns the error the service gives when it refuses
// another stream for now; the caller must back off for retryAfter.
func ErrConcurrencyReject(retryAfter time.Duration) *ingest.Error {
	return &ingest.Error{
		Class:       ingest.ConcurrencyReject,
		Code:        codes.ResourceExhausted,
		ServiceCode: ingest.ServiceCodePipelineBlocked,
		RetryAfter:  retryAfter,
		Err:         errors.New("ingestfake: pipeline creation temporarily blocked"),
	}
}

// ErrPoison returns an unrecoverable stream error: rebuild the stream.
func ErrPoison(msg string) *ingest.Error {
	return &ingest.Error{Class: ingest.Poison, Code: codes.Internal, Err: errors.New("ingestfake: " + msg)}
}

// ErrFatalConfig returns an error no retry can fix (grants, missing table).
func ErrFatalConfig(msg string) *ingest.Error {
	return &ingest.Error{Class: ingest.FatalConfig, Code: codes.PermissionDenied, Err: errors.New("ingestfake: " + msg)}
}

// ErrTransient returns an environmental error worth retrying after a pause.
func ErrTransient(msg string) *ingest.Error {
	return &ingest.Error{Class: ingest.Transient, Code: codes.Unavailable, Err: errors.New("ingestfake: " + msg)}
}

// Config sets how the streams an Opener opens acknowledge rows.
type Config struct {
	// ManualAck makes rows durable only through AckUpTo and AckAll.
	ManualAck bool
	// AckLatency is, without ManualAck, how long after Submit a batch
	// becomes durable; zero makes it durable before Submit returns.
	AckLatency time.Duration
	// KeepRecords retains every submitted RecordBatch for Records; call
	// ReleaseRecords when done.
	KeepRecords bool
}

// Opener is a fake ingest.Opener. The zero value is not usable: use
// NewOpener.
type Opener struct {
	mu       sync.Mutex
	cfg      Config
	openErrs []error
	hook     func(ctx context.Context, attempt int, table string, schema *arrow.Schema) error
	attempts []time.Time
	streams  []*Stream
	closes   int
	live     int
	maxLive  int
	changed  chan struct{}
}

var _ ingest.Opener = (*Opener)(nil)

// NewOpener returns an Opener whose streams follow cfg.
func NewOpener(cfg Config) *Opener {
	return &Opener{cfg: cfg, changed: make(chan struct{})}
}

// SetConfig changes the Config of streams opened from now on.
func (o *Opener) SetConfig(cfg Config) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cfg = cfg
}

// FailNextOpens queues errors: each following Open attempt fails with the
// next one (nil entries let an attempt succeed) until the queue is empty.
func (o *Opener) FailNextOpens(errs ...error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.openErrs = append(o.openErrs, errs...)
}

// SetOpenHook installs fn, called on every Open attempt (numbered from 1)
// once the queued errors are used up; a non-nil return fails the attempt. fn
// may block (to hold a stream in "opening") and should honour ctx.
func (o *Opener) SetOpenHook(fn func(ctx context.Context, attempt int, table string, schema *arrow.Schema) error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.hook = fn
}

// Open implements ingest.Opener.
func (o *Opener) Open(ctx context.Context, table string, schema *arrow.Schema) (ingest.Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ingestfake: open: %w", err)
	}
	if schema == nil {
		return nil, ErrFatalConfig("open: nil schema")
	}
	o.mu.Lock()
	o.attempts = append(o.attempts, time.Now())
	attempt, hook := len(o.attempts), o.hook
	var err error
	queued := len(o.openErrs) > 0
	if queued {
		err, o.openErrs = o.openErrs[0], o.openErrs[1:]
	}
	o.notifyLocked()
	o.mu.Unlock()
	if !queued && hook != nil {
		err = hook(ctx, attempt, table, schema)
	}
	if err != nil {
		return nil, err
	}

	o.mu.Lock()
	defer o.mu.Unlock()
	defer o.notifyLocked()
	s := &Stream{
		opener:  o,
		index:   len(o.streams),
		table:   table,
		schema:  schema,
		cfg:     o.cfg,
		dead:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	o.streams = append(o.streams, s)
	o.live++
	o.maxLive = max(o.maxLive, o.live)
	return s, nil
}

// OpenAttempts returns the number of Open calls, failed or not.
func (o *Opener) OpenAttempts() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.attempts)
}

// AttemptTimes returns when each Open attempt happened, in order.
func (o *Opener) AttemptTimes() []time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]time.Time(nil), o.attempts...)
}

// Opens returns the number of streams opened successfully.
func (o *Opener) Opens() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.streams)
}

// Closes returns the number of streams closed (each counted once).
func (o *Opener) Closes() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closes
}

// Live returns the number of streams open and not closed.
func (o *Opener) Live() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.live
}

// MaxLive returns the largest number of streams ever open at once.
func (o *Opener) MaxLive() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.maxLive
}

// Streams returns every stream opened so far, in opening order.
func (o *Opener) Streams() []*Stream {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*Stream(nil), o.streams...)
}

// WaitOpens blocks until at least n streams were opened or ctx is done, and
// returns the streams opened so far.
func (o *Opener) WaitOpens(ctx context.Context, n int) ([]*Stream, error) {
	return o.waitFor(ctx, func() bool { return len(o.streams) >= n }, "opens")
}

// WaitOpenAttempts blocks until at least n Open attempts happened or ctx is
// done.
func (o *Opener) WaitOpenAttempts(ctx context.Context, n int) error {
	_, err := o.waitFor(ctx, func() bool { return len(o.attempts) >= n }, "open attempts")
	return err
}

func (o *Opener) waitFor(ctx context.Context, cond func() bool, what string) ([]*Stream, error) {
	for {
		o.mu.Lock()
		ok, ch := cond(), o.changed
		streams := append([]*Stream(nil), o.streams...)
		o.mu.Unlock()
		if ok {
			return streams, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return streams, fmt.Errorf("ingestfake: waiting for %s: %w", what, ctx.Err())
		}
	}
}

func (o *Opener) notifyLocked() {
	close(o.changed)
	o.changed = make(chan struct{})
}

func (o *Opener) streamClosed() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closes++
	o.live--
	o.notifyLocked()
}

// Stream is a fake ingest.Stream.
type Stream struct {
	opener *Opener
	index  int
	table  string
	schema *arrow.Schema
	cfg    Config

	mu          sync.Mutex
	submitted   uint64
	durable     uint64
	spans       []ingest.Span
	records     []arrow.RecordBatch
	waitTargets []uint64
	err         error
	dead        chan struct{} // closed by the first Poison
	draining    bool
	closed      bool
	closeCalls  int
	changed     chan struct{}
}

var (
	_ ingest.Stream          = (*Stream)(nil)
	_ ingest.FailureNotifier = (*Stream)(nil)
)

// Submit implements ingest.Stream: it assigns the next row span and, in
// auto-ack mode, schedules its durability.
func (s *Stream) Submit(ctx context.Context, rec arrow.RecordBatch) (ingest.Span, error) {
	if err := ctx.Err(); err != nil {
		return ingest.Span{}, fmt.Errorf("ingestfake: submit: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return ingest.Span{}, s.err
	case s.closed:
		return ingest.Span{}, ErrClosed
	case s.draining:
		return ingest.Span{}, ErrDraining
	}
	if got := rec.Schema(); got != s.schema && !got.Equal(s.schema) {
		return ingest.Span{}, &ingest.Error{
			Class: ingest.FatalConfig, Code: codes.InvalidArgument,
			ServiceCode: ingest.ServiceCodeSchemaMismatch,
			Err:         fmt.Errorf("ingestfake: record schema %s does not match stream schema %s", got, s.schema),
		}
	}
	span := ingest.Span{From: s.submitted, To: s.submitted + uint64(rec.NumRows())}
	s.submitted = span.To
	s.spans = append(s.spans, span)
	if s.cfg.KeepRecords {
		rec.Retain()
		s.records = append(s.records, rec)
	}
	switch {
	case s.cfg.ManualAck:
	case s.cfg.AckLatency <= 0:
		s.ackLocked(span.To)
	default:
		time.AfterFunc(s.cfg.AckLatency, func() { s.AckUpTo(span.To) })
	}
	s.notifyLocked()
	return span, nil
}

// WaitDurable implements ingest.Stream. Every call is counted and its
// target recorded.
func (s *Stream) WaitDurable(ctx context.Context, row uint64) error {
	s.mu.Lock()
	s.waitTargets = append(s.waitTargets, row)
	s.notifyLocked()
	s.mu.Unlock()
	for {
		s.mu.Lock()
		durable, err, closed, ch := s.durable, s.err, s.closed, s.changed
		s.mu.Unlock()
		switch {
		case durable >= row:
			return nil
		case err != nil:
			return err
		case closed:
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("ingestfake: wait for row %d: %w", row, ctx.Err())
		}
	}
}

// Durable implements ingest.Stream.
func (s *Stream) Durable() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.durable
}

// Drain implements ingest.Stream: it refuses further submits and waits until
// everything submitted is durable, the stream fails, or ctx is done.
func (s *Stream) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	target := s.submitted
	s.notifyLocked()
	s.mu.Unlock()
	return s.WaitDurable(ctx, target)
}

// Close implements ingest.Stream. Waiters on rows not yet durable get
// ErrClosed. Only the first call counts as a close on the Opener.
func (s *Stream) Close() error {
	s.mu.Lock()
	s.closeCalls++
	first := !s.closed
	s.closed = true
	s.notifyLocked()
	s.mu.Unlock()
	if first {
		s.opener.streamClosed()
	}
	return nil
}

// AckUpTo makes every row below row durable, like a cumulative server ack.
// It is clamped to the rows submitted and never moves durability back. It
// is a no-op once the stream is poisoned or closed.
func (s *Stream) AckUpTo(row uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || s.closed {
		return
	}
	s.ackLocked(row)
	s.notifyLocked()
}

// AckAll makes every submitted row durable.
func (s *Stream) AckAll() {
	s.mu.Lock()
	row := s.submitted
	s.mu.Unlock()
	s.AckUpTo(row)
}

func (s *Stream) ackLocked(row uint64) {
	s.durable = max(s.durable, min(row, s.submitted))
}

// Poison fails the stream: pending and future WaitDurable and Submit calls
// return err (ErrPoison("poisoned") when err is nil) and no row becomes
// durable any more.
func (s *Stream) Poison(err error) {
	if err == nil {
		err = ErrPoison("poisoned")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
		close(s.dead)
	}
	s.notifyLocked()
}

// Failed implements ingest.FailureNotifier: the channel is closed by the
// first Poison, never by Close.
func (s *Stream) Failed() <-chan struct{} { return s.dead }

// Index returns the stream's position in the Opener's opening order.
func (s *Stream) Index() int { return s.index }

// Table returns the table the stream was opened for.
func (s *Stream) Table() string { return s.table }

// Schema returns the schema the stream was opened with.
func (s *Stream) Schema() *arrow.Schema { return s.schema }

// Submitted returns the number of rows submitted.
func (s *Stream) Submitted() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.submitted
}

// Spans returns the span of every Submit, in order.
func (s *Stream) Spans() []ingest.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ingest.Span(nil), s.spans...)
}

// Records returns the submitted records (only with Config.KeepRecords).
func (s *Stream) Records() []arrow.RecordBatch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]arrow.RecordBatch(nil), s.records...)
}

// ReleaseRecords releases and forgets the records kept by KeepRecords.
func (s *Stream) ReleaseRecords() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.records {
		r.Release()
	}
	s.records = nil
}

// WaitDurableCalls returns how many times WaitDurable was called.
func (s *Stream) WaitDurableCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waitTargets)
}

// WaitTargets returns the row argument of every WaitDurable call, in order.
func (s *Stream) WaitTargets() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint64(nil), s.waitTargets...)
}

// CloseCalls returns how many times Close was called.
func (s *Stream) CloseCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeCalls
}

// Closed reports whether Close was called.
func (s *Stream) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Err returns the error the stream was poisoned with, or nil. It implements
// ingest.FailureNotifier.
func (s *Stream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// WaitSubmitted blocks until at least rows rows were submitted or ctx is done.
func (s *Stream) WaitSubmitted(ctx context.Context, rows uint64) error {
	return s.waitFor(ctx, func() bool { return s.submitted >= rows }, "submitted rows")
}

// WaitWaitCalls blocks until WaitDurable was called at least n times or ctx
// is done.
func (s *Stream) WaitWaitCalls(ctx context.Context, n int) error {
	return s.waitFor(ctx, func() bool { return len(s.waitTargets) >= n }, "WaitDurable calls")
}

// WaitClosed blocks until the stream is closed or ctx is done.
func (s *Stream) WaitClosed(ctx context.Context) error {
	return s.waitFor(ctx, func() bool { return s.closed }, "close")
}

func (s *Stream) waitFor(ctx context.Context, cond func() bool, what string) error {
	for {
		s.mu.Lock()
		ok, ch := cond(), s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("ingestfake: stream %d waiting for %s: %w", s.index, what, ctx.Err())
		}
	}
}

func (s *Stream) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// TestSchema is a one-column schema for tests that only care about row
// counts.
var TestSchema = arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, nil)

// NewRecord returns a record of schema with rows rows, every value null. The
// fake only looks at a record's schema and row count.
func NewRecord(schema *arrow.Schema, rows int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, f := range b.Fields() {
		f.AppendNulls(rows)
	}
	return b.NewRecordBatch()
}
