// The write path, one batch top to bottom (Write):
//
//	admit: the state, the budget, the table (created from the batch when
//	absent), the streams (stopped, unreachable)
//	→ positions (coverage)
//	→ convert on a snapshot: lay out by stream group, convert; drift → the
//	  schema authority → convert again on the snapshot it hands back;
//	  rescue; stamp the positions
//	→ send: split by stream, submit, wait durable, record coverage
//
// A batch converted just before another one evolved the table meets a pool
// already on the new schema (pool.ErrSchemaMismatch): it is converted again
// on the current snapshot, the one loop of the path.

package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowipc"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// Write converts rows, submits the good ones and returns only once every one
// of them is durable. Rows that do not fit the table come back as row errors
// (naming the row index and the column); the good rows are durable before
// Write returns. An error means nothing is acknowledged: the whole batch is
// to be retried. ErrNotOpen (wrapped) asks the caller to Open again; once a
// row of the batch was submitted it is returned only when no row of the
// batch is confirmed durable and either the streams stopped for good (a permanent
// stream error, or a pool that stopped) or the batch met streams dying for
// a cause a new stream heals maxResubmits times over (streamDied: before
// that, such a batch is written again on the streams still open, so a
// stream rotated while the service refuses new ones never fails a batch).
// When part of the batch is durable and the rest could not be submitted or
// confirmed, the rest come back as row errors wrapping a *TableError (to be
// retried, not dead-lettered), so the durable rows are never sent again.
// keyOf may be nil (no ordering).
func (w *Writer) Write(ctx context.Context, rows []Row, keyOf KeyFunc) ([]RowError, error) {
	if p := w.rawRefusal.Load(); p != nil {
		return nil, *p
	}
	st := w.st.Load()
	if st == nil || !w.life.writable() {
		return nil, w.life.notOpen()
	}
	if len(rows) == 0 {
		return nil, nil
	}
	// Reserve the batch's bytes before anything converts it, and hold them
	// until it is settled: the data in flight stays within the budget
	// whatever the row size.
	resv, err := w.budget.acquire(ctx, w.estimateBytes(rows))
	if err != nil {
		return nil, fmt.Errorf("write %d rows to %s: %w", len(rows), w.cfg.Table, err)
	}
	defer resv.release()
	if st, err = w.admit(ctx, st, rows); err != nil {
		var rb *refusedBatch
		if errors.As(err, &rb) {
			// Registry schemas no column can be made of: the rows fail
			// alone, naming why, rather than the batch being held.
			w.obs.RowErrors(len(rb.errs))
			return rb.errs, nil
		}
		return nil, err
	}
	// The registry's decode of each framed value (Config.Registry), made
	// once for the batch's schemas and its conversion.
	decodes := newBatchDecodes(w.cfg.Registry, rows)
	// Rows carrying a registry schema (Config.SchemaMetadata): the table
	// takes their schema's new fields first, and the rows of a schema it
	// cannot take fail alone, before conversion.
	st, schemaErrs, err := w.followSchemas(ctx, st, rows, decodes)
	if err != nil {
		return nil, err
	}
	// With coverage, a row whose source or offset cannot be had fails
	// alone, before conversion.
	pos, posErrs := w.positionsOf(rows)
	if pos != nil {
		w.recording.enter()
		defer w.recording.leave()
	}
	var rowErrs []RowError
	schemaRetries, resubmits := 0, 0
	for {
		b, err := w.convert(ctx, st, rows, decodes, keyOf, pos, schemaErrs, resv)
		decodes.drop()
		if err == nil {
			rowErrs, err = w.send(ctx, st.pool, b, pos)
			b.release()
		}
		if err == nil {
			break
		}
		// Converted just before another batch evolved the table, it met a
		// pool already switched to the new schema: convert it again.
		if cur := w.st.Load(); errors.Is(err, pool.ErrSchemaMismatch) && schemaRetries < maxSchemaRetries && cur != nil && cur.snap != b.snap {
			schemaRetries++
			st = cur
			continue
		}
		if serr := w.stopIfStopped(st.pool, err); serr != nil {
			return nil, fmt.Errorf("%w (%w)", serr, err)
		}
		if streamDied(ctx, err) && !w.life.isClosed() {
			// None of its rows was confirmed and a new stream heals the
			// cause: written again on the streams still open (the pool
			// waits for one, and an outage holds it), never failed
			// while the writer runs; past maxResubmits, held. (Once
			// Close began it fails, as before: nothing is reopened.)
			if cur := w.st.Load(); cur != nil && cur.pool != nil && w.life.writable() && resubmits < maxResubmits {
				resubmits++
				w.log.Debug(fmt.Sprintf("table %s: %d rows written again (%d of %d): the stream they went to died before confirming them: %v",
					w.cfg.Table, len(rows), resubmits, maxResubmits, err))
				st = cur
				continue
			}
			return nil, fmt.Errorf("%w: %w", ErrNotOpen, err)
		}
		return nil, err
	}
	if cur := w.st.Load(); len(rowErrs) < len(rows) && cur != nil && cur.pool == st.pool {
		// Rows are durable on the streams still open: the failure
		// history is over. (A batch confirmed by streams that stopped
		// meanwhile says nothing of the new ones.)
		w.life.progress()
	}
	rowErrs = append(rowErrs, posErrs...)
	for _, i := range slices.Sorted(maps.Keys(schemaErrs)) {
		rowErrs = append(rowErrs, schemaErrs[i])
	}
	explainFramed(rows, rowErrs)
	w.obs.RowErrors(len(rowErrs))
	return rowErrs, nil
}

// maxSchemaRetries bounds the conversions again of a batch that met a pool
// on a newer schema than its snapshot's.
const maxSchemaRetries = 3

// maxResubmits bounds how often Write sends a batch again after the stream
// it went to died (streamDied) before it returns it held (ErrNotOpen): the
// engine then keeps it, asks Open (which waits out an outage) and writes it
// again. Each resubmit follows a stream death, and a member whose stream
// died is rebuilt only after a back-off, so the bound is no rate limit; it
// only hands a batch that keeps meeting dying streams back to the engine.
const maxResubmits = 3

// streamDied reports whether err, a batch's failure with none of its rows
// confirmed durable, is the death of the stream it went to for a cause a
// new stream heals: the service refused the stream's reconnect for now
// (RESOURCE_EXHAUSTED after a rotation: retryable in the official SDK,
// rust/sdk/src/errors.rs in databricks/zerobus-sdk), a transient failure
// that used up the stream's reconnects, a poisoned stream. Not ctx's end
// (the shutdown bound; ack.timeout, past which the batch fails as
// documented), not a close, not rows submitted but untracked, not a refusal
// only a person can fix (stopIfStopped holds those), and not a batch held
// already (ErrNotOpen: no stream is connected, whatever their last error).
func streamDied(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, ErrNotOpen) || errors.Is(err, pool.ErrUntracked) || errors.Is(err, pool.ErrClosed) || errors.Is(err, ErrClosed) {
		return false
	}
	class, ok := ingest.ClassOf(err)
	return ok && (class == ingest.Transient || class == ingest.Poison || class == ingest.ConcurrencyReject)
}

// admit returns the state a batch is written on: for a table that does not
// exist yet, the one the schema authority opens after creating the table
// from the batch (Provision). Streams that stopped for good, or that reach
// no service (the engine reconnects; the batch is held rather than queued
// behind a dead connection), refuse it with ErrNotOpen.
func (w *Writer) admit(ctx context.Context, st *state, rows []Row) (*state, error) {
	if st.pool == nil {
		if err := w.schema.create(ctx, rows); err != nil {
			return nil, err
		}
		if st = w.st.Load(); st == nil || st.pool == nil {
			return nil, errDropped
		}
		return st, nil
	}
	if err := w.stopIfStopped(st.pool, nil); err != nil {
		return nil, err
	}
	if cause := w.outage(st); cause != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotOpen, cause)
	}
	return st, nil
}

// converted is a batch converted on one snapshot, laid out for its streams.
type converted struct {
	snap *snapshot // the snapshot it was (last) converted on
	res  arrowconv.Result
	size int64 // the record's Arrow size
	lay  layout
	// over are the record rows no request can carry, by record row.
	over map[int]arrowconv.RowError
}

func (b *converted) release() { b.res.Record.Release() }

// rowErrors are the batch's failed rows: a key, the conversion, a row too
// large, and notDurable (rows not confirmed, the rest of the batch durable).
func (b *converted) rowErrors(notDurable []RowError) []RowError {
	rowErrs := append(b.lay.keyErrs, b.res.RowErrors...)
	rowErrs = append(rowErrs, notDurable...)
	for _, o := range b.over {
		rowErrs = append(rowErrs, o)
	}
	return rowErrs
}

// convert lays the batch out by stream group (without the rows whose
// position failed), converts it on st's snapshot (convertOn: drift → the
// schema authority → again), moves the fields that still do not fit into a
// rescue column (rescue.go), stamps the rows' positions (coverage) and
// corrects the batch's reservation resv to the record's Arrow size. The
// snapshot in the result is the one the record was converted on; the write
// path never changes it. decodes are batch's registry decodes (nil without
// a registry).
func (w *Writer) convert(ctx context.Context, st *state, batch []Row, decodes *batchDecodes, keyOf KeyFunc, pos *positions, refused map[int]RowError, resv *reservation) (*converted, error) {
	lay := w.layout(st.pool, batch, keyOf)
	lay.order = pos.without(lay.order, len(batch))
	lay.order = withoutRows(lay.order, len(batch), refused)
	res, snap, err := w.convertOn(ctx, st.snap, batch, decodes, lay.order)
	if err == nil && w.cfg.Rescue != "" {
		res, err = w.rescue(batch, snap.columns(), res, func(edited []Row) (arrowconv.Result, error) {
			var r arrowconv.Result
			var cerr error
			// The edited rows are other rows: their framed values are
			// decoded afresh.
			r, snap, cerr = w.convertOn(ctx, snap, edited, newBatchDecodes(w.cfg.Registry, edited), lay.order)
			return r, cerr
		})
	}
	if err != nil {
		return &converted{snap: snap}, err
	}
	if pos != nil {
		stamped, err := pos.stamp(res.Record, res.SourceIndex)
		res.Record.Release()
		if err != nil {
			return &converted{snap: snap}, fmt.Errorf("stamp coverage columns for %s: %w", w.cfg.Table, err)
		}
		res.Record = stamped
	}
	b := &converted{snap: snap, res: res, lay: lay, size: arrowipc.RecordBytes(res.Record)}
	if n := res.Record.NumRows(); n > 0 {
		resv.resize(b.size)
		w.rowBytes.Store(max(b.size/n, 1))
	}
	w.obs.Reconciled(res.Reconciled)
	// A row no request can carry fails alone, before anything is sent: the
	// rest of its batch still lands.
	b.over = oversized(res, b.size)
	return b, nil
}

// convertOn converts the messages of batch listed in order (all, in batch
// order, when nil) on snap. Rows failing on drift go to the schema
// authority (authority.drift): when it changes the table (a column added,
// by the writer or meanwhile by someone else, a column widened) the batch
// is converted again on the snapshot it hands back, and looked at again
// (that change may not have covered all of this batch's drift). Indices in
// the result refer to batch. Its framed values are decoded once, through
// decodes, for every round.
func (w *Writer) convertOn(ctx context.Context, snap *snapshot, batch []Row, decodes *batchDecodes, order []int) (arrowconv.Result, *snapshot, error) {
	rows := batch
	if order != nil {
		rows = make([]Row, len(order))
		for k, i := range order {
			rows[k] = batch[i]
		}
	}
	decode := func(k int) (registry.Decoded, error) {
		if order != nil {
			k = order[k]
		}
		return decodes.decode(ctx, k)
	}
	for round := 0; ; round++ {
		res, err := w.convertRows(ctx, snap, rows, decode)
		if err != nil {
			return res, snap, fmt.Errorf("convert batch for %s: %w", w.cfg.Table, err)
		}
		if order != nil {
			for r, i := range res.SourceIndex {
				res.SourceIndex[r] = order[i]
			}
			for k := range res.RowErrors {
				res.RowErrors[k].Index = order[res.RowErrors[k].Index]
			}
		}
		if len(res.RowErrors) == 0 {
			return res, snap, nil // the usual batch: no drift
		}
		next, err := w.schema.drift(ctx, snap, batch, res.RowErrors, round)
		if err == nil && next == snap {
			return res, snap, nil
		}
		res.Record.Release()
		if err != nil {
			return arrowconv.Result{}, snap, err
		}
		snap = next
	}
}

// convertRows converts rows on snap: on the Avro fast path when it is on and
// takes them, the general path otherwise, where the framed values are first
// decoded by the registry (Config.Registry) when it is set: decode(k) is
// the decode of rows[k]. The fast path's error (the registry could not be
// read) fails the batch, which is held and written again; a schema id the
// registry does not know is left to the general path, which fails those
// rows alone.
func (w *Writer) convertRows(ctx context.Context, snap *snapshot, rows []Row, decode func(k int) (registry.Decoded, error)) (arrowconv.Result, error) {
	if w.cfg.Fast != nil {
		if values := framedValues(rows); values != nil {
			res, ok, err := w.cfg.Fast.Convert(ctx, snap.conv, values)
			if err != nil || ok {
				return res, err
			}
		}
	}
	if w.cfg.Registry != nil {
		var err error
		if rows, err = decodeFramed(ctx, rows, decode); err != nil {
			return arrowconv.Result{}, err
		}
	}
	return snap.conv.ConvertStructured(rows)
}

// decodeFramed returns rows with each registry-framed value replaced by its
// decoded value, decode(i) for rows[i] (or its error, which fails that row
// alone, naming it); rows itself when none is framed. Only ctx's end is an
// error: the registry decoder waits out the registry's faults.
func decodeFramed(ctx context.Context, rows []Row, decode func(i int) (registry.Decoded, error)) ([]Row, error) {
	var out []Row
	for i, r := range rows {
		if _, ok := rowFramed(r); !ok {
			if out != nil {
				out[i] = r
			}
			continue
		}
		if out == nil {
			out = make([]Row, len(rows))
			copy(out, rows[:i])
		}
		d, err := decode(i)
		if err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("the schema registry could not be read: %w", ctx.Err())
		}
		out[i] = registryDecoded{Row: r, v: d.Value, err: err}
	}
	if out == nil {
		return rows, nil
	}
	return out, nil
}

// registryDecoded is a framed row with its value decoded by the registry,
// or the error that fails it.
type registryDecoded struct {
	Row
	v   any
	err error
}

func (r registryDecoded) HasStructured() bool        { return true }
func (r registryDecoded) AsStructured() (any, error) { return r.v, r.err }

// framedValues returns the bytes of rows when every one is a
// registry-framed value not yet decoded; nil otherwise.
func framedValues(rows []Row) [][]byte {
	if len(rows) > 0 {
		if _, ok := rowFramed(rows[0]); !ok {
			return nil // a batch of JSON values: no slice made for it
		}
	}
	values := make([][]byte, len(rows))
	for i, r := range rows {
		if r.HasStructured() {
			return nil
		}
		b, err := r.AsBytes()
		if err != nil {
			return nil
		}
		if _, ok := registryFramed(b); !ok {
			return nil
		}
		values[i] = b
	}
	return values
}

// oversized returns, by record row, the row errors of the converted rows
// whose encoding alone passes the service's request cap. size is the
// record's Arrow size.
func oversized(res arrowconv.Result, size int64) map[int]arrowconv.RowError {
	rows := ingest.OversizedRowsSized(res.Record, size, ingest.MaxRequestBytes)
	if len(rows) == 0 {
		return nil
	}
	out := make(map[int]arrowconv.RowError, len(rows))
	for _, o := range rows {
		out[o.Row] = arrowconv.RowError{Index: res.SourceIndex[o.Row], Column: o.Column,
			Err: fmt.Errorf("%w: the row alone needs about %d bytes in a request, above the service's %d-byte cap (column %q holds %d bytes of it)",
				ingest.ErrRowTooLarge, o.Bytes, ingest.MaxRequestBytes, o.Column, o.ColumnBytes)}
	}
	return out
}

// layout says in which order a batch is converted and which stream group
// each message belongs to. Without an ordering key the batch is converted
// as is and sent as one record (round-robin over the pool). With one, the
// messages are ordered by group, the pool member their key maps to
// (pool.Pick), so the converted record splits into one contiguous slice per
// member without copying, and a batch costs at most one Write per stream.
// Rows keep their batch order within a group.
type layout struct {
	order   []int    // message indices in conversion order; nil = as is
	group   []int    // group of each message index; nil without ordering key
	keys    []string // a key of each group, written as the group's key
	keyErrs []arrowconv.RowError
}

func (w *Writer) layout(p *pool.Pool, batch []Row, keyOf KeyFunc) layout {
	if keyOf == nil {
		return layout{}
	}
	n := max(p.Size(), 1)
	// Group n holds empty keys: no ordering asked, written round-robin.
	lay := layout{group: make([]int, len(batch)), keys: make([]string, n+1)}
	buckets := make([][]int, n+1)
	for i := range batch {
		key, err := keyOf(i)
		if err != nil {
			lay.group[i] = -1
			lay.keyErrs = append(lay.keyErrs, arrowconv.RowError{Index: i, Column: OrderingKeyColumn, Err: err})
			continue
		}
		// The group is the pool member the key maps to, and the group is
		// written under one of its own keys: every row of a key lands on
		// the member Pick(key) names, whatever else shares its batch.
		g := p.Pick(key)
		if g < 0 {
			g = n
		}
		lay.group[i] = g
		if len(buckets[g]) == 0 {
			lay.keys[g] = key
		}
		buckets[g] = append(buckets[g], i)
	}
	lay.order = make([]int, 0, len(batch))
	for _, b := range buckets {
		lay.order = append(lay.order, b...)
	}
	return lay
}

// part is one slice of a converted record bound for one stream group.
type part struct {
	key    string
	rec    arrow.RecordBatch
	bytes  int64
	lo, hi int // the record rows of the slice
	ticket *pool.Ticket
}

// send splits the converted batch b by stream group, submits the parts on
// p, waits until each is durable (recording its coverage then) and returns
// the batch's row errors (converted.rowErrors).
//
// An error means no row is durable. Once a part is submitted the batch is
// never failed or held as a whole: when some parts are durable and the
// others were not submitted or not confirmed, only the rows of the others
// fail (as table failures: retried, never dead-lettered), since sending the
// whole batch again would write the durable parts twice; a stop is
// recorded for the next Write to see.
func (w *Writer) send(ctx context.Context, p *pool.Pool, b *converted, pos *positions) ([]RowError, error) {
	if int(b.res.Record.NumRows()) == len(b.over) {
		return b.rowErrors(nil), nil // nothing to send
	}
	parts := split(b.res, b.size, b.lay, b.over)
	defer func() {
		for _, pt := range parts {
			pt.rec.Release()
		}
	}()
	submitted, err := w.submit(ctx, p, b.snap, parts)
	if submitted == 0 {
		return nil, err
	}
	confirmed, failed, werr := w.waitDurable(ctx, b, parts[:submitted], pos)
	if werr != nil {
		err = werr
	}
	if err == nil {
		return b.rowErrors(nil), nil
	}
	if confirmed == 0 {
		return nil, err
	}
	for _, pt := range parts[submitted:] {
		failed = appendRange(failed, pt.lo, pt.hi)
	}
	_ = w.stopIfStopped(p, err)
	notDurable := make([]RowError, len(failed))
	for k, r := range failed {
		notDurable[k] = RowError{Index: b.res.SourceIndex[r], Err: &TableError{Table: w.cfg.Table, Err: err}}
	}
	return b.rowErrors(notDurable), nil
}

// submit writes the parts on p in order, stopping at the first that cannot
// be submitted; it returns how many were, and why the next was not. A
// submit still waiting (for a stream, for capacity, for a reconnect) when
// the table turns unreachable is released: nothing of the batch was
// accepted, so it is held (ErrNotOpen), not failed (liveness.go). One
// released after its rows were submitted (waiting for room on the lane) is
// failed instead: they may still land.
func (w *Writer) submit(ctx context.Context, p *pool.Pool, seen *snapshot, parts []part) (int, error) {
	sctx, scancel := context.WithCancelCause(ctx)
	defer scancel(nil)
	outage := w.outageCtx()
	stopWatch := context.AfterFunc(outage, func() { scancel(context.Cause(outage)) })
	defer stopWatch()
	for i := range parts {
		t, err := p.Write(sctx, parts[i].key, parts[i].rec)
		if err != nil {
			if cause := context.Cause(sctx); i == 0 && ctx.Err() == nil && errors.Is(cause, errOutage) && !errors.Is(err, pool.ErrUntracked) {
				return 0, fmt.Errorf("%w: %w", ErrNotOpen, cause)
			}
			w.onWriteErr(ctx, seen, err)
			return i, fmt.Errorf("submit %d rows to %s: %w", parts[i].rec.NumRows(), w.cfg.Table, err)
		}
		parts[i].ticket = t
	}
	return len(parts), nil
}

// waitDurable waits for the tickets of the submitted parts, bounded as a
// whole by ack.timeout (past it the batch is nacked and redelivered, never
// acked). Nothing here reads a submitted watermark: only the tickets,
// settled by the ack lanes after the durable ack, decide. The positions of
// a confirmed part's rows are handed to coverage then, never before. It
// returns how many parts were confirmed, the record rows of the others and
// why they were not.
func (w *Writer) waitDurable(ctx context.Context, b *converted, parts []part, pos *positions) (confirmed int, failed []int, err error) {
	wctx, cancel := context.WithTimeoutCause(ctx, w.cfg.AckTimeout,
		fmt.Errorf("no durable ack within ack.timeout (%s)", w.cfg.AckTimeout))
	defer cancel()
	var firstErr error
	for i := range parts {
		if err := parts[i].ticket.Wait(wctx); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			failed = appendRange(failed, parts[i].lo, parts[i].hi)
			continue
		}
		confirmed++
		w.obs.Sent(parts[i].ticket.Stream, parts[i].rec.NumRows(), parts[i].bytes)
		w.recordDurable(pos, b.res.SourceIndex, parts[i].lo, parts[i].hi)
	}
	if firstErr == nil {
		return confirmed, nil, nil
	}
	w.onWriteErr(ctx, b.snap, firstErr)
	if cause := context.Cause(wctx); cause != nil {
		return confirmed, failed, fmt.Errorf("rows for %s not confirmed durable: %w (%w)", w.cfg.Table, firstErr, cause)
	}
	return confirmed, failed, fmt.Errorf("rows for %s not confirmed durable: %w", w.cfg.Table, firstErr)
}

// appendRange appends lo, lo+1, …, hi-1 to s.
func appendRange(s []int, lo, hi int) []int {
	for r := lo; r < hi; r++ {
		s = append(s, r)
	}
	return s
}

// onWriteErr reacts to a stream error on a batch converted on seen: a
// schema rejection has the schema authority re-describe the table so the
// redelivered batch meets the new schema.
func (w *Writer) onWriteErr(ctx context.Context, seen *snapshot, err error) {
	var ze *ingest.Error
	if errors.As(err, &ze) && ze.IsSchemaMismatch() {
		w.warnf("table %s rejected the stream schema (%v): re-describing", w.cfg.Table, err)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.RedescribeTimeout)
		defer cancel()
		w.schema.redescribe(rctx, seen)
	}
}

// split cuts the converted record into one zero-copy slice per stream
// group (the whole record, key "", without an ordering key), leaving out
// the record rows in skip. Rows of one group are contiguous because layout
// ordered the conversion by group. total, the record's Arrow size, is
// shared pro rata among the slices.
func split(res arrowconv.Result, total int64, lay layout, skip map[int]arrowconv.RowError) []part {
	n := int(res.Record.NumRows())
	skipped := func(r int) bool { _, ok := skip[r]; return ok }
	var parts []part
	for lo := 0; lo < n; {
		if skipped(lo) {
			lo++
			continue
		}
		hi, g := lo, -1
		if lay.group != nil {
			g = lay.group[res.SourceIndex[lo]]
		}
		for hi < n && !skipped(hi) && (lay.group == nil || lay.group[res.SourceIndex[hi]] == g) {
			hi++
		}
		b := total * int64(hi-lo) / int64(n)
		key := ""
		if g >= 0 {
			key = lay.keys[g]
		}
		parts = append(parts, part{key: key, rec: res.Record.NewSlice(int64(lo), int64(hi)), bytes: b, lo: lo, hi: hi})
		lo = hi
	}
	return parts
}
