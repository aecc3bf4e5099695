// The write path: convert, lay out by ordering key, submit, wait for durable.

package tablewriter

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowipc"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

// writeOnce converts batch against st, submits the good rows and waits
// for them. It returns the rows that failed conversion and the state used.
// resv, the batch's share of the in-flight budget, is corrected to the
// converted record's Arrow size.
func (w *Writer) writeOnce(ctx context.Context, st *state, batch []Row, keyOf KeyFunc, resv *reservation, pos *positions) ([]arrowconv.RowError, *state, error) {
	lay := w.layout(st, batch, keyOf)
	lay.order = pos.without(lay.order, len(batch))
	res, st, err := w.convert(ctx, st, batch, lay.order)
	if err != nil {
		return nil, st, err
	}
	if pos != nil {
		stamped, err := pos.stamp(res.Record, res.SourceIndex)
		res.Record.Release()
		if err != nil {
			return nil, st, fmt.Errorf("stamp coverage columns for %s: %w", w.cfg.Table, err)
		}
		res.Record = stamped
	}
	defer res.Record.Release()
	size := arrowipc.RecordBytes(res.Record)
	if n := res.Record.NumRows(); n > 0 {
		resv.resize(size)
		w.rowBytes.Store(max(size/n, 1))
	}
	w.obs.Reconciled(res.Reconciled)
	// A row no request can carry fails alone, before anything is sent: the
	// rest of its batch still lands.
	over := oversized(res, size)
	var notDurable []arrowconv.RowError
	if int(res.Record.NumRows()) > len(over) {
		if err := w.submitAndWait(ctx, st, res, size, lay, over, pos); err != nil {
			var pe *partialError
			if !errors.As(err, &pe) {
				return nil, st, err
			}
			// Part of the batch is durable: only the rest fails (to be
			// retried, not dead-lettered), so no durable row is sent
			// again. A stop is recorded for the next Write to see.
			_ = w.stopIfStopped(st, pe.err)
			for _, r := range pe.rows {
				notDurable = append(notDurable, arrowconv.RowError{Index: res.SourceIndex[r], Err: &TableError{Table: w.cfg.Table, Err: pe.err}})
			}
		}
	}
	rowErrs := append(lay.keyErrs, res.RowErrors...)
	rowErrs = append(rowErrs, notDurable...)
	for _, o := range over {
		rowErrs = append(rowErrs, o)
	}
	return rowErrs, st, nil
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

func (w *Writer) layout(st *state, batch []Row, keyOf KeyFunc) layout {
	if keyOf == nil {
		return layout{}
	}
	n := max(st.pool.Size(), 1)
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
		g := st.pool.Pick(key)
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

// convert converts the messages of batch listed in order (all, in batch
// order, when nil) against st, evolving the table as needed
// (convertEvolving), then, with a rescue column, moves the fields of the
// rows that still fail into it and converts them again (rescue.go).
// Indices in the result refer to batch.
func (w *Writer) convert(ctx context.Context, st *state, batch []Row, order []int) (arrowconv.Result, *state, error) {
	res, st, err := w.convertEvolving(ctx, st, batch, order)
	if err != nil || w.cfg.Rescue == "" {
		return res, st, err
	}
	res, err = w.rescue(batch, st.columns, res, func(edited []Row) (arrowconv.Result, error) {
		var r arrowconv.Result
		var cerr error
		r, st, cerr = w.convertEvolving(ctx, st, edited, order)
		return r, cerr
	})
	return res, st, err
}

// convertEvolving converts the messages of batch listed in order against
// st. With provisioning on, rows failing on a field the table lacks trigger
// one evolution (add the columns, reopen the pool) and a second conversion.
func (w *Writer) convertEvolving(ctx context.Context, st *state, batch []Row, order []int) (arrowconv.Result, *state, error) {
	rows := batch
	if order != nil {
		rows = make([]Row, len(order))
		for k, i := range order {
			rows[k] = batch[i]
		}
	}
	conv := func(st *state) (arrowconv.Result, error) {
		res, err := st.conv.ConvertStructured(rows)
		if err != nil {
			return res, fmt.Errorf("convert batch for %s: %w", w.cfg.Table, err)
		}
		if order != nil {
			for r, i := range res.SourceIndex {
				res.SourceIndex[r] = order[i]
			}
			for k := range res.RowErrors {
				res.RowErrors[k].Index = order[res.RowErrors[k].Index]
			}
		}
		return res, nil
	}
	res, err := conv(st)
	if err != nil {
		return res, st, err
	}
	// A batch that meets a state another batch's evolution replaced is
	// reconverted and looked at again: that evolution may not have covered
	// this batch's drift. Each round either evolves or moves to a newer
	// state, so a few rounds settle it.
	for round := 0; ; round++ {
		// Without provisioning, an unknown field may be a column someone
		// added to the table meanwhile: look, at most once per interval.
		if !w.cfg.Provision && round == 0 && hasUnknownField(res.RowErrors) {
			if next := w.refresh(ctx, st); next != st {
				res.Record.Release()
				st = next
				if res, err = conv(st); err != nil {
					return res, st, err
				}
			}
		}
		var widen []widening
		if w.cfg.Provision && w.cfg.Widen {
			widen = widenings(st, batch, res.RowErrors, nil)
		} else {
			// Only for the hint: a column hinted already is not looked at.
			w.hintWidening(widenings(st, batch, res.RowErrors, w.hinted))
		}
		pending := w.pendingWidenings(widen)
		if round == maxEvolveRounds || !w.cfg.Provision || (!hasUnknownField(res.RowErrors) && len(pending) == 0) {
			w.annotateRefusedWidenings(res.RowErrors, widen)
			w.annotateRefusedFields(res.RowErrors)
			return res, st, nil
		}
		next, err := w.evolve(ctx, st, batch, res.RowErrors, pending)
		if err != nil {
			res.Record.Release()
			return arrowconv.Result{}, st, err
		}
		if next == st {
			// Nothing could be added or widened: the row errors stand,
			// with the catalog's refusal where it refused.
			w.annotateRefusedWidenings(res.RowErrors, widen)
			w.annotateRefusedFields(res.RowErrors)
			return res, st, nil
		}
		res.Record.Release()
		st = next
		if res, err = conv(st); err != nil {
			return res, st, err
		}
	}
}

// maxEvolveRounds bounds the evolutions one batch conversion drives.
const maxEvolveRounds = 3

func hasUnknownField(errs []arrowconv.RowError) bool {
	for _, e := range errs {
		if errors.Is(e.Err, arrowconv.ErrUnknownField) {
			return true
		}
	}
	return false
}

// part is one slice of a converted record bound for one stream group.
type part struct {
	key    string
	rec    arrow.RecordBatch
	bytes  int64
	lo, hi int // the record rows of the slice
	ticket *pool.Ticket
}

// submitAndWait submits the converted rows (one slice per ordering-key
// group) and waits for every ticket. Nothing here reads a submitted
// watermark: only the tickets, settled by the ack lanes after the durable
// ack, decide the outcome. size is the record's Arrow size.
func (w *Writer) submitAndWait(ctx context.Context, st *state, res arrowconv.Result, size int64, lay layout, skip map[int]arrowconv.RowError, pos *positions) error {
	parts := split(res, size, lay, skip)
	defer func() {
		for _, p := range parts {
			p.rec.Release()
		}
	}()
	// A submit still waiting (for a stream, for capacity, for a
	// reconnect) when the table turns unreachable is released: nothing of
	// it was accepted, so the batch is held, not failed (liveness.go). One
	// released after its rows were submitted (waiting for room on the
	// lane) is failed instead: they may still land.
	sctx, scancel := context.WithCancelCause(ctx)
	defer scancel(nil)
	outage := w.outageCtx()
	stopWatch := context.AfterFunc(outage, func() { scancel(context.Cause(outage)) })
	defer stopWatch()
	// Once a part is submitted, the batch is never failed or held as a
	// whole: a later part that cannot be submitted fails its rows alone
	// after the submitted parts are waited for (partialError), since
	// sending the whole batch again would write the durable parts twice.
	submitted := len(parts)
	var submitErr error
	for i := range parts {
		t, err := st.pool.Write(sctx, parts[i].key, parts[i].rec)
		if err != nil {
			if cause := context.Cause(sctx); i == 0 && ctx.Err() == nil && errors.Is(cause, errOutage) && !errors.Is(err, pool.ErrUntracked) {
				return fmt.Errorf("%w: %w", ErrNotOpen, cause)
			}
			w.onWriteErr(ctx, st, err)
			submitErr = fmt.Errorf("submit %d rows to %s: %w", parts[i].rec.NumRows(), w.cfg.Table, err)
			if i == 0 {
				return submitErr
			}
			submitted = i
			break
		}
		parts[i].ticket = t
	}
	stopWatch()
	// ack.timeout bounds the wait for the whole batch: past it the batch is
	// nacked (and redelivered), never acked.
	wctx, cancel := context.WithTimeoutCause(ctx, w.cfg.AckTimeout,
		fmt.Errorf("no durable ack within ack.timeout (%s)", w.cfg.AckTimeout))
	defer cancel()
	var firstErr error
	var failed []int // record rows not confirmed durable
	confirmed := 0
	for i := range parts[:submitted] {
		if err := parts[i].ticket.Wait(wctx); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			failed = appendRange(failed, parts[i].lo, parts[i].hi)
			continue
		}
		confirmed++
		w.obs.Sent(parts[i].ticket.Stream, parts[i].rec.NumRows(), parts[i].bytes)
		// The ticket is confirmed: these rows are durable, and only now
		// may coverage name them.
		w.recordDurable(pos, res.SourceIndex, parts[i].lo, parts[i].hi)
	}
	var err error
	if firstErr != nil {
		w.onWriteErr(ctx, st, firstErr)
		if cause := context.Cause(wctx); cause != nil {
			err = fmt.Errorf("rows for %s not confirmed durable: %w (%w)", w.cfg.Table, firstErr, cause)
		} else {
			err = fmt.Errorf("rows for %s not confirmed durable: %w", w.cfg.Table, firstErr)
		}
	} else {
		err = submitErr
	}
	if err == nil || confirmed == 0 {
		return err
	}
	for _, p := range parts[submitted:] {
		failed = appendRange(failed, p.lo, p.hi)
	}
	return &partialError{rows: failed, err: err}
}

// partialError is a batch some of whose parts are confirmed durable and the
// others not (not submitted, or not confirmed): only the rows of the others
// fail, alone.
type partialError struct {
	rows []int // the record rows not confirmed durable
	err  error
}

func (e *partialError) Error() string {
	return fmt.Sprintf("%d rows not confirmed durable: %v", len(e.rows), e.err)
}
func (e *partialError) Unwrap() error { return e.err }

// appendRange appends lo, lo+1, …, hi-1 to s.
func appendRange(s []int, lo, hi int) []int {
	for r := lo; r < hi; r++ {
		s = append(s, r)
	}
	return s
}

// onWriteErr reacts to a stream error: a schema rejection re-describes the
// table so the redelivered batch meets the new schema.
func (w *Writer) onWriteErr(ctx context.Context, st *state, err error) {
	var ze *ingest.Error
	if errors.As(err, &ze) && ze.IsSchemaMismatch() {
		w.warnf("table %s rejected the stream schema (%v): re-describing", w.cfg.Table, err)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.RedescribeTimeout)
		defer cancel()
		w.redescribe(rctx, st)
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
