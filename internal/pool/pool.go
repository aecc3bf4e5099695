// Package pool keeps a small, fixed set of long-lived Zerobus streams for one
// table, each with its own ack lane, and is the only place streams are opened.
//
// Write picks a member (round-robin, or a fixed member per ordering key),
// submits the record fire-and-forget and enqueues a confirmation on that
// member's lane; the returned Ticket's Wait returns nil only once the lane
// confirmed the rows durable. The confirmation kind is chosen when the pool
// is made and every lane of the pool is typed with it: New makes a pool of
// raw-anchor lanes (acklane.Lane[acklane.RawAnchor], the raw table's),
// NewOf[acklane.DerivedCoverage] one whose lanes can only carry
// derived-coverage confirmations (a companion table's, e.g. coverage). Writers never open streams: a member that
// is opening or rebuilding makes writers wait, bounded by PickTimeout.
//
// Each member has a supervisor goroutine that opens its stream, watches it,
// and rebuilds it after a failure with exponential back-off, within
// RebuildBudget, while the other members keep serving. A concurrency reject
// backs off for at least the service's RetryAfter and never triggers another
// open; a FatalConfig error stops the pool's writes until Reopen.
//
// The pool starts with Size(cfg) members, its base. With SelfSizing a sizer
// (sizer.go) adds one extra member at a time while the streams are
// saturated, up to MaxStreams, and retires extras gracefully once traffic
// has fallen for long. Extras take only round-robin writes (keys map onto the
// base members, so a key's stream never changes), are never rebuilt (an extra
// whose stream fails or whose open is refused leaves the pool and holds
// growth), and are retired by draining: no write is in flight on them and
// every row they took is durable, or failed to its writer, before they close.
package pool

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowipc"
	"github.com/benthos-zerobus/benthos-zerobus/internal/backoff"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
)

// ErrClosed is returned by Write, Connect and Reopen after Close.
var ErrClosed = errors.New("pool: closed")

// ErrNoStream is returned by Write when no suitable member became healthy
// within PickTimeout.
var ErrNoStream = errors.New("pool: no healthy stream")

// ErrUntracked is wrapped by a Write error once its rows were submitted to
// a stream but could not be put on the stream's lane (ctx ended while the
// lane was full, or the lane closed): the rows may still become durable, no
// ticket will say so. The caller fails the batch (it is redelivered); it
// must not treat it as a write that sent nothing.
var ErrUntracked = errors.New("pool: rows submitted but not tracked")

// ErrSchemaMismatch is returned by Write for a record whose schema is not the
// pool's current schema.
var ErrSchemaMismatch = errors.New("pool: record schema differs from the pool's schema")

// Observer receives the pool's metrics, scoped {table, stream}. Any method
// may be called concurrently. A nil Observer discards everything.
type Observer interface {
	// StreamObserver returns the lane observer of member index; it is asked
	// once per member and reused across that member's rebuilds.
	StreamObserver(table string, index int) acklane.Observer
	// IncRebuild counts a rebuild of member index after its stream failed.
	IncRebuild(table string, index int)
	// IncConcurrencyReject counts an open of member index refused by the
	// service for
	// concurrency (too many streams or pipelines).
	IncConcurrencyReject(table string, index int)
}

// StreamEventer is the optional part of an Observer that receives the
// client events of one member's streams (the reconnects a logical stream
// makes inside itself), through ingest.WithObserver at open.
type StreamEventer interface {
	StreamEvents(table string, index int) ingest.Observer
}

// Ticket is one Write's claim on durability.
type Ticket struct {
	// Stream is the index of the member the rows went to.
	Stream int
	// Generation numbers the member's streams from 1; a rebuild increments it.
	Generation uint64
	// Span is the rows' logical span on that stream.
	Span ingest.Span

	kind    acklane.Kind
	receipt *acklane.Receipt
	stream  ingest.Stream // for tests: the stream the rows went to
}

// Wait blocks until the rows are durable (nil), or their stream failed or
// the pool closed before that (an error: the caller nacks and the rows are
// redelivered), or ctx is done (an error, never nil). A nil or zero Ticket
// stands for no submitted rows: waiting on it is an error wrapping
// acklane.ErrNoReceipt, never "durable".
func (t *Ticket) Wait(ctx context.Context) error {
	if t == nil {
		return fmt.Errorf("pool: wait on a nil ticket: %w", acklane.ErrNoReceipt)
	}
	if err := t.receipt.Wait(ctx); err != nil {
		return fmt.Errorf("pool: stream %d (generation %d) rows [%d,%d): %w",
			t.Stream, t.Generation, t.Span.From, t.Span.To, err)
	}
	return nil
}

// Done returns a channel closed once the ticket is settled either way.
func (t *Ticket) Done() <-chan struct{} { return t.receipt.Done() }

// Kind is the kind of the confirmation the rows' lane settles: the kind of
// the lane they were enqueued on.
func (t *Ticket) Kind() acklane.Kind { return t.kind }

// Stats is a snapshot of the pool for tests, logs and metrics.
type Stats struct {
	Table string
	Size  int
	// OpenAttempts counts Opener.Open calls; Opens the successful ones.
	OpenAttempts, Opens int64
	// Rebuilds counts member streams torn down and scheduled for re-open
	// after a failure.
	Rebuilds int64
	// ConcurrencyRejects counts opens the service refused for concurrency.
	ConcurrencyRejects int64
	// Fatal is the FatalConfig error that stopped writes, if any.
	Fatal error
	// NackedAtClose is the number of rows Close found submitted but not
	// durable when its drain ended: their writes failed (redelivered).
	NackedAtClose uint64
	Members       []MemberStats
}

// MemberStats describes one member.
type MemberStats struct {
	Index int
	// Healthy reports a stream ready for writes.
	Healthy bool
	// Generation is the number of streams this member has opened.
	Generation uint64
	Rebuilds   int
	// Delivered and Pending are those of the current stream's lane.
	Delivered uint64
	Pending   int64
	// Down is set when the member gave up (budget exhausted or fatal) until
	// Reopen; Err is that error, or the last open error while retrying.
	Down bool
	Err  error
}

// Pool is the stream pool of one table.
type Pool struct {
	opener ingest.Opener
	table  string
	cfg    Config
	obs    Observer
	// newLane makes a member stream's ack lane, of the pool's one kind.
	newLane func(w acklane.Waiter, cfg acklane.Config, obs acklane.Observer) lane
	kind    acklane.Kind

	ctx       context.Context // cancelled by Close: stops the supervisors
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	startOnce sync.Once
	reopenMu  sync.Mutex
	// probed is closed, by the first base member's supervisor, once its
	// first open attempt has finished: the other members open only then
	// (awaitProbe).
	probed chan struct{}

	rr, nackedAtClose                         atomic.Uint64
	openAttempts, opens, rebuilds, rejections atomic.Int64
	// openFailures counts failed opens and extraFailures extras that left
	// after a failure: with rebuilds, what the sizer calls errors.
	openFailures, extraFailures atomic.Int64
	// keyedWrites counts Writes with an ordering key (the sizer does not
	// grow for them: their rows stay on their base member).
	keyedWrites atomic.Int64
	// growHeldUntil (unix nanoseconds) is when growth may resume after an
	// extra's open was refused or its stream failed.
	growHeldUntil atomic.Int64
	// pickWaiters counts Writes waiting for a healthy member (Health).
	pickWaiters atomic.Int64

	// base is the static size, Size(cfg): the members New makes, which are
	// never retired, and the members ordering keys map onto.
	base int

	// members are the base members then the extras (guarded by mu, as are
	// the fields of each member). An extra being retired is no longer in
	// members; leaving counts those until their supervisor exits, and
	// draining holds their connections so that Close drains them too.
	members  []*member
	leaving  int
	draining map[*conn]struct{}
	sizes    sizeLog

	mu      sync.RWMutex
	schema  *arrow.Schema
	epoch   uint64 // incremented by every Reopen
	started bool
	closed  bool
	fatal   error
	changed chan struct{} // closed and replaced on every state change
}

type member struct {
	index  int
	obs    acklane.Observer
	events ingest.Observer // nil: the client's observer only
	reopen chan reopenReq

	// extra is a member the sizer added; retired is closed to retire it and
	// exited when its supervisor has returned.
	extra      bool
	retired    chan struct{}
	retireOnce sync.Once
	exited     chan struct{}

	// What the sizer samples: writers' time in Submit and Enqueue, rows and
	// (Arrow) bytes submitted.
	waitNanos, rowsIn, bytesIn atomic.Int64

	// Guarded by Pool.mu.
	conn      *conn
	gen       uint64
	attempted bool // an open attempt has finished
	down      error
	lastErr   error
	rebuilds  int
	since     time.Time // when the member last changed state (Health)
}

// conn is one stream of a member with its lane.
type conn struct {
	stream ingest.Stream
	// users counts Writes that picked this connection and have not yet
	// enqueued (or given up): a retiring member waits for none before it
	// drains, so that no row is submitted to a stream being closed.
	users     atomic.Int64
	lane      lane
	schema    *arrow.Schema
	epoch     uint64 // the pool's epoch when it was opened
	gen       uint64
	broken    chan struct{}
	breakOnce sync.Once
	breakErr  error
}

func (c *conn) fail(err error) {
	c.breakOnce.Do(func() {
		c.breakErr = err
		close(c.broken)
	})
}

type reopenReq struct {
	ctx  context.Context
	done chan error
}

// New returns a pool for table that opens its streams with opener and
// schema once Connect or the first Write asks for them, each with a
// raw-anchor lane. obs may be nil.
func New(opener ingest.Opener, table string, schema *arrow.Schema, cfg Config, obs Observer) *Pool {
	return NewOf[acklane.RawAnchor](opener, table, schema, cfg, obs)
}

// NewOf is New for lanes of confirmation kind C: every stream of the pool
// gets an acklane.Lane[C], and Write enqueues only confirmations of kind C
// (made by acklane.NewConfirmation[C]), so a pool of derived-coverage lanes
// cannot confirm raw rows, nor the other way round.
func NewOf[C acklane.Confirmation](opener ingest.Opener, table string, schema *arrow.Schema, cfg Config, obs Observer) *Pool {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{
		opener:   opener,
		table:    table,
		cfg:      cfg,
		obs:      obs,
		newLane:  newKindLane[C],
		kind:     acklane.KindOf[C](),
		ctx:      ctx,
		cancel:   cancel,
		schema:   schema,
		changed:  make(chan struct{}),
		base:     Size(cfg),
		draining: map[*conn]struct{}{},
		probed:   make(chan struct{}),
	}
	for i := range p.base {
		p.members = append(p.members, p.newMember(i, false))
	}
	return p
}

// newMember makes member index (an extra when extra is set), with its
// observers.
func (p *Pool) newMember(index int, extra bool) *member {
	now := time.Now()
	m := &member{index: index, reopen: make(chan reopenReq), since: now,
		extra: extra, retired: make(chan struct{}), exited: make(chan struct{})}
	if p.obs != nil {
		m.obs = p.obs.StreamObserver(p.table, index)
	}
	if se, ok := p.obs.(StreamEventer); ok {
		m.events = se.StreamEvents(p.table, index)
	}
	return m
}

// Kind returns the confirmation kind of the pool's lanes.
func (p *Pool) Kind() acklane.Kind { return p.kind }

// Stopped reports why the pool no longer writes on its own: the FatalConfig
// error that stopped it, or, when every base member gave up (rebuild budget
// exhausted), the last one's error. Nil while it writes or may recover by
// itself. A stopped pool writes again only after Reopen; the layer above
// uses this to tell its engine to reconnect. Extras do not count: they
// never give up (a failed one leaves), and one still up would otherwise
// keep the given-up base members, and the keys that map onto them, down
// with no Reopen to revive them.
func (p *Pool) Stopped() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.fatal != nil {
		return p.fatal
	}
	var last error
	for _, m := range p.members[:p.base] {
		if m.down == nil {
			return nil
		}
		last = m.down
	}
	if last == nil {
		return nil
	}
	return fmt.Errorf("pool: every %s stream gave up: %w", p.table, last)
}

// Size returns the number of members now: the base, plus the extras a
// self-sizing pool added. Keys map onto the base only (Pick), so a key's
// member is always below Size.
func (p *Pool) Size() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.members)
}

// BaseSize returns the static size, Size(cfg): the members that are never
// retired.
func (p *Pool) BaseSize() int { return p.base }

// Config returns the effective configuration, defaults applied.
func (p *Pool) Config() Config { return p.cfg }

// Connect starts the members if needed and waits until every member has made
// its first open attempt and at least one is healthy. Members that failed
// (for example on a concurrency reject) keep retrying in the background. It
// returns a FatalConfig error at once, and an error if ctx ends with no
// healthy member; with an OpenGate, also as soon as an open failed and no
// member is healthy.
func (p *Pool) Connect(ctx context.Context) error {
	p.start()
	for {
		p.mu.RLock()
		healthy, attempted, down := 0, 0, 0
		var lastErr error
		for _, m := range p.members {
			if m.conn != nil {
				healthy++
			}
			if m.attempted {
				attempted++
			}
			if m.down != nil {
				down++
			}
			if m.lastErr != nil {
				lastErr = m.lastErr
			}
		}
		closed, fatal, changed := p.closed, p.fatal, p.changed
		p.mu.RUnlock()
		switch {
		case closed:
			return ErrClosed
		case fatal != nil:
			return fatal
		case healthy > 0 && attempted == len(p.members):
			return nil
		case down == len(p.members):
			return fmt.Errorf("pool: connect %s: every stream is down: %w", p.table, lastErr)
		case p.cfg.OpenGate != nil && healthy == 0 && attempted > 0 && lastErr != nil &&
			ingest.Classify(lastErr).Class != ingest.FatalConfig:
			// Gated, the next open (of any member) may be up to the
			// gate's longest wait away: the caller hears of the failure
			// now, and the members keep trying through the gate. (A
			// refusal no retry can fix is about to stop the pool, or
			// came before a Reopen: its own case, above, or a retry.)
			return fmt.Errorf("pool: connect %s: no stream is up: %w", p.table, lastErr)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			if healthy > 0 {
				return nil
			}
			if lastErr != nil { // wrapped: the caller honours a reject's RetryAfter
				return fmt.Errorf("pool: connect %s: no stream up (last error: %w): %w", p.table, lastErr, ctx.Err())
			}
			return fmt.Errorf("pool: connect %s: no stream up: %w", p.table, ctx.Err())
		}
	}
}

// Write submits rec to a member and returns its ticket. key "" spreads
// writes round-robin over healthy members; any other key always maps to the
// same member (FNV-1a of the key), so rows of one key stay in order, and
// waits for that member if it is rebuilding. Write never opens a stream: it
// waits up to PickTimeout for a healthy member. A member whose stream turns
// out dead at submit (nothing was accepted) is handed to its supervisor and
// the pick is retried. rec's schema must be the pool's schema.
func (p *Pool) Write(ctx context.Context, key string, rec arrow.RecordBatch) (*Ticket, error) {
	p.start()
	if key != "" {
		p.keyedWrites.Add(1)
	}
	var (
		m           *member
		c           *conn
		span        ingest.Span
		submittedAt time.Time
	)
	for attempt := 1; ; attempt++ {
		var err error
		if m, c, err = p.acquire(ctx, key, rec.Schema()); err != nil {
			return nil, err
		}
		submittedAt = time.Now()
		if span, err = c.stream.Submit(ctx, rec); err == nil {
			break
		}
		c.users.Add(-1)
		class, _ := ingest.ClassOf(err)
		if class != ingest.Poison && class != ingest.FatalConfig {
			return nil, fmt.Errorf("pool: submit to %s stream %d: %w", p.table, m.index, err)
		}
		// The stream died, possibly while idle, so nobody noticed yet.
		// Submit accepted nothing, so sending the rows elsewhere cannot
		// duplicate them: mark it broken (its member rebuilds) and pick
		// again rather than failing a write the pool can still take.
		c.fail(err)
		if attempt > p.Size() { // the sizer changes members: read under the lock
			return nil, fmt.Errorf("pool: submit to %s stream %d: %w", p.table, m.index, err)
		}
	}
	receipt, err := c.lane.confirm(ctx, span.To, submittedAt)
	c.users.Add(-1)
	m.waitNanos.Add(int64(time.Since(submittedAt)))
	m.rowsIn.Add(int64(span.To - span.From))
	m.bytesIn.Add(arrowipc.RecordBytes(rec))
	if err != nil {
		return nil, fmt.Errorf("%w: %s stream %d rows [%d,%d): %w",
			ErrUntracked, p.table, m.index, span.From, span.To, err)
	}
	return &Ticket{Stream: m.index, Generation: c.gen, Span: span, kind: c.lane.kind(), receipt: receipt, stream: c.stream}, nil
}

// Pick returns the index of the member key maps to ("" for round-robin
// picks returns -1): the stable key-to-stream mapping, for tests and logs.
func (p *Pool) Pick(key string) int {
	if key == "" {
		return -1
	}
	return keyIndex(key, p.base)
}

func keyIndex(key string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// acquire waits, bounded by PickTimeout and ctx, for a member that can take
// a record of schema.
func (p *Pool) acquire(ctx context.Context, key string, schema *arrow.Schema) (*member, *conn, error) {
	var timeout <-chan time.Time
	for {
		p.mu.RLock()
		m, c, err := p.pickLocked(key, schema)
		if c != nil {
			c.users.Add(1) // before the lock goes: a retire waits for it
		}
		changed := p.changed
		p.mu.RUnlock()
		if err != nil || c != nil {
			return m, c, err
		}
		if timeout == nil {
			t := time.NewTimer(p.cfg.PickTimeout)
			defer t.Stop()
			timeout = t.C
			p.pickWaiters.Add(1)
			defer p.pickWaiters.Add(-1)
		}
		select {
		case <-changed:
		case <-timeout:
			p.mu.RLock()
			last := m.lastErr
			p.mu.RUnlock()
			return nil, nil, fmt.Errorf("%w for %s (stream %d) after %s; last open error: %v",
				ErrNoStream, p.table, m.index, p.cfg.PickTimeout, last)
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("pool: waiting for a %s stream: %w", p.table, ctx.Err())
		}
	}
}

// pickLocked returns a usable member, or the member to wait for (c nil), or
// an error that waiting cannot fix.
func (p *Pool) pickLocked(key string, schema *arrow.Schema) (*member, *conn, error) {
	switch {
	case p.closed:
		return nil, nil, ErrClosed
	case p.fatal != nil:
		return nil, nil, p.fatal
	case !sameSchema(schema, p.schema):
		return nil, nil, fmt.Errorf("%w: got %s, want %s", ErrSchemaMismatch, schema, p.schema)
	}
	if key != "" {
		m := p.members[keyIndex(key, p.base)]
		if m.usable(schema) {
			return m, m.conn, nil
		}
		if m.down != nil {
			return nil, nil, fmt.Errorf("pool: %s stream %d for key %q is down: %w", p.table, m.index, key, m.down)
		}
		return m, nil, nil
	}
	n := uint64(len(p.members))
	start := p.rr.Add(1) - 1
	var wait *member
	for i := range n {
		m := p.members[(start+i)%n]
		if m.usable(schema) {
			return m, m.conn, nil
		}
		if m.down == nil && wait == nil {
			wait = m
		}
	}
	if wait == nil {
		return nil, nil, fmt.Errorf("pool: every %s stream is down: %w", p.table, p.members[0].down)
	}
	return wait, nil, nil
}

func (m *member) usable(schema *arrow.Schema) bool {
	if m.conn == nil || !sameSchema(m.conn.schema, schema) {
		return false
	}
	select {
	case <-m.conn.broken:
		return false
	default:
		return true
	}
}

func sameSchema(a, b *arrow.Schema) bool { return a == b || (a != nil && b != nil && a.Equal(b)) }

// Reopen switches the pool to schema (after the table changed, even if the
// Arrow schema did not) and replaces every member one at a time: each drains its lane within ctx, closes its
// stream and opens a new one before the next member starts, so the pool
// never holds more than Size streams nor opens them in a burst. It also
// clears a FatalConfig error and revives members that were given up.
func (p *Pool) Reopen(ctx context.Context, schema *arrow.Schema) error {
	p.reopenMu.Lock()
	defer p.reopenMu.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.schema = schema
	p.epoch++
	p.fatal = nil
	started := p.started
	p.notifyLocked()
	members := slices.Clone(p.members)
	p.mu.Unlock()
	if !started {
		return nil // the members will open with schema
	}
	// The sizer neither adds nor retires members while reopenMu is held,
	// but an extra may leave on a failure: it is then skipped.
	for _, m := range members {
		req := reopenReq{ctx: ctx, done: make(chan error, 1)}
		select {
		case m.reopen <- req:
		case <-m.exited:
			continue
		case <-ctx.Done():
			return fmt.Errorf("pool: reopen %s stream %d: %w", p.table, m.index, ctx.Err())
		case <-p.ctx.Done():
			return ErrClosed
		}
		select {
		case err := <-req.done:
			if err != nil {
				return fmt.Errorf("pool: reopen %s stream %d: %w", p.table, m.index, err)
			}
		case <-ctx.Done():
			return fmt.Errorf("pool: reopen %s stream %d: %w", p.table, m.index, ctx.Err())
		}
	}
	return nil
}

// Close stops accepting writes, drains every lane (all enqueued rows durable
// and confirmed) within ctx, then closes the lanes, which fails whatever is
// still unconfirmed: when Close returns every ticket is settled, and none
// that was not durable is confirmed. The streams are closed by the member
// supervisors, which Close waits for within ctx. It returns an error if
// something was left unconfirmed or ctx ended first.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var conns []*conn
	for _, m := range p.members {
		if m.conn != nil {
			conns = append(conns, m.conn)
		}
	}
	for c := range p.draining { // extras being retired
		conns = append(conns, c)
	}
	p.notifyLocked()
	p.mu.Unlock()

	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			if err := c.lane.Drain(ctx); err != nil {
				errs[i] = fmt.Errorf("pool: drain %s stream generation %d: %w", p.table, c.gen, err)
			}
		})
	}
	wg.Wait()
	// Whatever is still unconfirmed fails now, so no ticket outlives Close
	// unsettled; the supervisors then close the streams and exit.
	var nacked uint64
	for _, c := range conns {
		nacked += c.lane.PendingRows()
		c.lane.Close()
	}
	p.nackedAtClose.Store(nacked)
	p.cancel()
	stopped := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("pool: close %s: streams still closing: %w", p.table, ctx.Err()))
	}
	return errors.Join(errs...)
}

// Stats returns a snapshot of the pool.
func (p *Pool) Stats() Stats {
	p.mu.RLock()
	defer p.mu.RUnlock()
	s := Stats{
		Table:              p.table,
		Size:               len(p.members),
		OpenAttempts:       p.openAttempts.Load(),
		Opens:              p.opens.Load(),
		Rebuilds:           p.rebuilds.Load(),
		ConcurrencyRejects: p.rejections.Load(),
		Fatal:              p.fatal,
		NackedAtClose:      p.nackedAtClose.Load(),
	}
	for _, m := range p.members {
		ms := MemberStats{
			Index:      m.index,
			Healthy:    m.conn != nil,
			Generation: m.gen,
			Rebuilds:   m.rebuilds,
			Down:       m.down != nil,
			Err:        m.lastErr,
		}
		if m.down != nil {
			ms.Err = m.down
		}
		if m.conn != nil {
			ms.Delivered = m.conn.lane.Delivered()
			ms.Pending = m.conn.lane.Pending()
		}
		s.Members = append(s.Members, ms)
	}
	return s
}

func (p *Pool) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// start launches the member supervisors once, unless the pool is closed.
func (p *Pool) start() {
	p.startOnce.Do(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.closed {
			return
		}
		p.started = true
		for _, m := range p.members {
			p.wg.Add(1)
			go p.supervise(m)
		}
		// The sizer reports the streams open even when it may not resize.
		p.wg.Add(1)
		go p.runSizer()
	})
}

// supervise owns member m's streams for the pool's life: open, serve, tear
// down, back off, re-open.
func (p *Pool) supervise(m *member) {
	defer p.wg.Done()
	// Equal jitter: each delay is uniform in [d/2, d], d doubling from
	// OpenBackoffInitial up to OpenBackoffMax (Config normalises both > 0).
	b := backoff.Backoff{Initial: p.cfg.OpenBackoffInitial, Max: p.cfg.OpenBackoffMax, Jitter: 0.5}
	failures := 0           // consecutive attempts that made no progress
	var waiting []reopenReq // Reopen calls to answer once a stream is up
	defer func() {
		if m.extra {
			// An extra that leaves has nothing left to reopen.
			p.leave(m)
			if p.ctx.Err() == nil {
				answer(waiting, nil)
				return
			}
		}
		answer(waiting, ErrClosed)
	}()

	// The first member opens alone: a refusal no retry can fix (a grant
	// missing, credentials refused) then costs one stream open per attempt
	// instead of one per member, and the others follow once it is known.
	probe := !m.extra && m.index == 0
	probeDone := func() { // after the probe's first attempt, once
		if probe {
			probe = false
			close(p.probed)
		}
	}
	if !m.extra && m.index > 0 {
		if !p.awaitProbe(m, &waiting) {
			return
		}
		if err := p.fatalErr(); err != nil {
			p.setDown(m, err)
			answer(waiting, err)
			waiting = nil
			if !p.awaitRevival(m, &waiting) {
				return
			}
		}
	}

	gate := p.cfg.OpenGate
	if m.extra {
		gate = nil // never retried: its one open is not the writer's to space
	}
	for {
		if p.ctx.Err() != nil || m.isRetired() {
			return
		}
		if gate != nil && !p.passGate(m, gate, &waiting) {
			return
		}
		p.mu.RLock()
		schema, epoch := p.schema, p.epoch
		p.mu.RUnlock()
		p.openAttempts.Add(1)
		openCtx := p.ctx
		if m.events != nil {
			openCtx = ingest.WithObserver(p.ctx, m.events)
		}
		if gate != nil {
			openCtx = ingest.WithSingleAttempt(openCtx)
		}
		s, err := p.opener.Open(openCtx, p.table, schema)
		if gate != nil && err == nil {
			gate.Succeeded()
		}
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			if m.extra {
				// An extra is never retried: the pool did well enough
				// without it, and the service said no (or failed). Its
				// refusal, even one no retry can fix, only holds
				// growth: the base streams are open on the same table
				// with the same credentials and keep writing, so it
				// never stops the pool (a refusal that concerns them
				// too reaches them on their own streams).
				p.extraOpenFailed(m, err)
				return
			}
			delay, down := p.openFailed(m, epoch, err, &failures, &b)
			probeDone()
			if down {
				answer(waiting, err)
				waiting = nil
				if !p.awaitRevival(m, &waiting) {
					return
				}
				failures = 0
				b.Reset()
				continue
			}
			if gate != nil {
				// The gate spaces the next open, of this member or
				// another: at least delay (a reject's RetryAfter).
				gate.Failed(ingest.Classify(err).RetryAfter)
				continue
			}
			if !p.sleep(m, delay, &waiting) {
				return
			}
			continue
		}
		p.opens.Add(1)
		if m.isRetired() { // retired while opening: nothing was sent
			_ = s.Close()
			return
		}
		c := p.install(m, s, schema, epoch)
		probeDone()
		answer(waiting, nil)
		waiting = nil

		cause, stop := p.serve(m, c, &waiting)
		if stop {
			return
		}
		if cause == nil { // replaced on Reopen: open the next one at once
			failures = 0
			b.Reset()
			continue
		}
		if m.extra {
			p.extraFailed(m, "stream failed", cause)
			return
		}
		if c.lane.Delivered() > 0 { // it made progress: a fresh failure
			failures = 0
			b.Reset()
		}
		failures++
		fatal := false
		if class, _ := ingest.ClassOf(cause); class == ingest.FatalConfig {
			// A stream opened before a Reopen failing (typically its
			// schema rejected) is being replaced anyway: rebuild it on
			// the current schema rather than stopping the pool.
			fatal = p.setFatal(c.epoch, cause)
		}
		if fatal || failures > p.cfg.RebuildBudget {
			p.setDown(m, cause)
			if !p.awaitRevival(m, &waiting) {
				return
			}
			failures = 0
			b.Reset()
			continue
		}
		p.rebuilds.Add(1)
		p.mu.Lock()
		m.rebuilds++
		m.lastErr = cause
		p.mu.Unlock()
		if p.obs != nil {
			p.obs.IncRebuild(p.table, m.index)
		}
		// A stream whose reconnect the service refused for concurrency
		// fails with RetryAfter set: reopening sooner is exactly the open
		// the service asked us not to make.
		delay := b.Next()
		var ze *ingest.Error
		if errors.As(cause, &ze) {
			delay = max(delay, ze.RetryAfter)
		}
		if !p.sleep(m, delay, &waiting) {
			return
		}
	}
}

// passGate waits until gate lets member m open (its wait has passed, or a
// success opened it), queueing the Reopen requests that reach m meanwhile;
// false when m is to stop.
func (p *Pool) passGate(m *member, gate *backoff.Gate, waiting *[]reopenReq) bool {
	for {
		ok, left, opened := gate.Pass()
		if ok {
			return true
		}
		t := time.NewTimer(left)
		woke := false
		for !woke {
			select {
			case <-t.C:
				woke = true
			case <-opened:
				t.Stop()
				woke = true
			case req := <-m.reopen:
				*waiting = append(*waiting, req)
			case <-m.retired:
				t.Stop()
				return false
			case <-p.ctx.Done():
				t.Stop()
				return false
			}
		}
	}
}

// serve watches a healthy stream until it fails (cause), Reopen replaces it
// (nil cause), or the pool closes (stop). It always leaves c torn down.
func (p *Pool) serve(m *member, c *conn, waiting *[]reopenReq) (cause error, stop bool) {
	// A stream that can say it died is watched too: idle, it has no wait
	// on its lane to report the death, and would pass for healthy until a
	// Write found it dead. A nil channel (a stream that cannot say) never
	// fires.
	var died <-chan struct{}
	fn, _ := c.stream.(ingest.FailureNotifier)
	if fn != nil {
		died = fn.Failed()
	}
	select {
	case <-died:
		err := fn.Err()
		c.lane.Fail(err) // as for c.broken below
		p.teardown(m, c)
		return err, false
	case <-c.lane.Failed():
		p.teardown(m, c)
		return c.lane.Err(), false
	case <-c.broken:
		// A writer found the stream dead before its lane did. Fail the
		// lane with the stream's error before closing it: its pending
		// items then say why they failed, and the death is counted as
		// poisoned once, as if the lane had seen it.
		c.lane.Fail(c.breakErr)
		p.teardown(m, c)
		return c.breakErr, false
	case <-m.retired:
		p.retire(m, c)
		return nil, true
	case req := <-m.reopen:
		p.uninstall(m, c)
		// What is enqueued gets confirmed, unless Reopen's ctx ends or
		// the pool closes first.
		drainCtx, cancel := context.WithCancel(req.ctx)
		stopOnClose := context.AfterFunc(p.ctx, cancel)
		drainErr := c.lane.Drain(drainCtx)
		stopOnClose()
		cancel()
		p.teardown(m, c)
		if drainErr != nil {
			p.mu.Lock()
			m.lastErr = drainErr
			p.mu.Unlock()
		}
		*waiting = append(*waiting, req)
		return nil, false
	case <-p.ctx.Done():
		p.teardown(m, c)
		return nil, true
	}
}

// openFailed classifies an open error and returns how long to back off, or
// down when the member must give up.
func (p *Pool) openFailed(m *member, epoch uint64, err error, failures *int, b *backoff.Backoff) (delay time.Duration, down bool) {
	zerr := p.recordOpenFailure(m, err)
	switch zerr.Class {
	case ingest.FatalConfig:
		if !p.setFatal(epoch, err) { // Reopen came meanwhile: retry on its schema
			return b.Next(), false
		}
		p.setDown(m, err)
		return 0, true
	case ingest.ConcurrencyReject:
		return max(b.Next(), zerr.RetryAfter), false
	case ingest.Poison:
		*failures++
		if *failures > p.cfg.RebuildBudget {
			p.setDown(m, err)
			return 0, true
		}
		return b.Next(), false
	default: // transient: the environment, not us
		return max(b.Next(), zerr.RetryAfter), false
	}
}

// recordOpenFailure notes member m's failed open (its attempt, its last
// error, the counts: a concurrency reject among them) and returns the
// error classified.
func (p *Pool) recordOpenFailure(m *member, err error) *ingest.Error {
	zerr := ingest.Classify(err)
	p.mu.Lock()
	m.attempted = true
	m.lastErr = err
	p.notifyLocked()
	p.mu.Unlock()
	p.openFailures.Add(1)
	if zerr.Class == ingest.ConcurrencyReject {
		p.rejections.Add(1)
		if p.obs != nil {
			p.obs.IncConcurrencyReject(p.table, m.index)
		}
	}
	return zerr
}

// install makes a freshly opened stream m's healthy connection.
func (p *Pool) install(m *member, s ingest.Stream, schema *arrow.Schema, epoch uint64) *conn {
	lane := p.newLane(s, acklane.Config{
		Capacity:   p.cfg.AckChannelCapacity,
		AckTimeout: p.cfg.AckTimeout,
	}, m.obs)
	p.mu.Lock()
	defer p.mu.Unlock()
	m.gen++
	c := &conn{stream: s, lane: lane, schema: schema, epoch: epoch, gen: m.gen, broken: make(chan struct{})}
	m.conn = c
	m.attempted = true
	m.down = nil
	m.lastErr = nil
	m.since = time.Now()
	p.notifyLocked()
	return c
}

// uninstall stops new writes from picking c.
func (p *Pool) uninstall(m *member, c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m.conn == c {
		m.conn = nil
		m.since = time.Now()
		p.notifyLocked()
	}
}

// teardown uninstalls c, fails its unconfirmed items and closes its stream.
// A retired extra's connection leaves the draining set here too: one that
// died as it was retired never reaches retire, and Close must not drain it.
func (p *Pool) teardown(m *member, c *conn) {
	p.uninstall(m, c)
	c.lane.Close()
	_ = c.stream.Close() // nothing left to save: the lane is closed
	p.mu.Lock()
	delete(p.draining, c)
	p.mu.Unlock()
}

// setFatal records err as the pool's fatal error if it came from a stream
// (or an open) of the current epoch, and reports whether it did: an error
// from before the latest Reopen is stale, its stream is being replaced.
func (p *Pool) setFatal(epoch uint64, err error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if epoch != p.epoch {
		return false
	}
	if p.fatal == nil {
		p.fatal = fmt.Errorf("pool: %s: %w", p.table, err)
	}
	p.notifyLocked()
	return true
}

func (p *Pool) setDown(m *member, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m.down = err
	m.attempted = true
	m.since = time.Now()
	p.notifyLocked()
}

// awaitRevival parks a member that gave up until Reopen asks for it.
func (p *Pool) awaitRevival(m *member, waiting *[]reopenReq) bool {
	select {
	case <-m.retired:
		return false
	case req := <-m.reopen:
		*waiting = append(*waiting, req)
		p.mu.Lock()
		m.down = nil
		m.since = time.Now()
		p.notifyLocked()
		p.mu.Unlock()
		return true
	case <-p.ctx.Done():
		return false
	}
}

// awaitProbe holds member m until the first member's first open attempt
// has finished; a Reopen arriving meanwhile is queued, answered once m's
// stream is up. It returns false when m is to stop.
func (p *Pool) awaitProbe(m *member, waiting *[]reopenReq) bool {
	return queueReopensUntil(p, m, p.probed, waiting)
}

// fatalErr returns the error that stopped the pool, nil while none did.
func (p *Pool) fatalErr() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.fatal
}

// sleep backs off for d. A Reopen arriving meanwhile is queued, never a
// reason to open early: that is what keeps rejects from becoming a storm.
func (p *Pool) sleep(m *member, d time.Duration, waiting *[]reopenReq) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	return queueReopensUntil(p, m, t.C, waiting)
}

// queueReopensUntil waits until done fires (true), queueing the Reopen
// requests that reach member m meanwhile, or until m is retired or the
// pool closes (false).
func queueReopensUntil[T any](p *Pool, m *member, done <-chan T, waiting *[]reopenReq) bool {
	for {
		select {
		case <-done:
			return true
		case req := <-m.reopen:
			*waiting = append(*waiting, req)
		case <-m.retired:
			return false
		case <-p.ctx.Done():
			return false
		}
	}
}

func answer(reqs []reopenReq, err error) {
	for _, r := range reqs {
		r.done <- err
	}
}
