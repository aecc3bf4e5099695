// The write path: convert, lay out by ordering key, submit, wait for durable.

package zerobus

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

// writeOnce converts batch against st, submits the good rows and waits
// for them. It returns the rows that failed conversion and the state used.
func (o *output) writeOnce(ctx context.Context, st *writeState, batch service.MessageBatch) ([]arrowconv.RowError, *writeState, error) {
	lay := o.layout(st, batch)
	res, st, err := o.convert(ctx, st, batch, lay.order)
	if err != nil {
		return nil, st, err
	}
	defer res.Record.Release()
	o.met.Reconciled(res.Reconciled)
	if res.Record.NumRows() > 0 {
		if err := o.submitAndWait(ctx, st, res, lay); err != nil {
			return nil, st, err
		}
	}
	return append(lay.keyErrs, res.RowErrors...), st, nil
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

func (o *output) layout(st *writeState, batch service.MessageBatch) layout {
	if o.cfg.OrderingKey == nil {
		return layout{}
	}
	n := max(st.pool.Size(), 1)
	// Group n holds empty keys: no ordering asked, written round-robin.
	lay := layout{group: make([]int, len(batch)), keys: make([]string, n+1)}
	buckets := make([][]int, n+1)
	for i, m := range batch {
		key, err := o.cfg.OrderingKey.TryString(m)
		if err != nil {
			lay.group[i] = -1
			lay.keyErrs = append(lay.keyErrs, arrowconv.RowError{Index: i, Column: fOrderingKey, Err: err})
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
// order, when nil) against st. Indices in the result refer to batch. With
// provisioning on, rows failing on a field the table lacks trigger one
// evolution (add the columns, reopen the pool) and a second conversion.
func (o *output) convert(ctx context.Context, st *writeState, batch service.MessageBatch, order []int) (arrowconv.Result, *writeState, error) {
	rows := make([]arrowconv.Row, 0, len(batch))
	if order == nil {
		for _, m := range batch {
			rows = append(rows, m)
		}
	} else {
		for _, i := range order {
			rows = append(rows, batch[i])
		}
	}
	conv := func(st *writeState) (arrowconv.Result, error) {
		res, err := st.conv.Convert(rows)
		if err != nil {
			return res, fmt.Errorf("convert batch for %s: %w", o.cfg.Table, err)
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
		var widen []widening
		if o.cfg.Provision && o.cfg.Widen {
			widen = widenings(st, batch, res.RowErrors, nil)
		} else {
			// Only for the hint: a column hinted already is not looked at.
			o.hintWidening(widenings(st, batch, res.RowErrors, o.hinted))
		}
		pending := o.pendingWidenings(widen)
		if round == maxEvolveRounds || !o.cfg.Provision || (!hasUnknownField(res.RowErrors) && len(pending) == 0) {
			o.annotateRefusedWidenings(res.RowErrors, widen)
			return res, st, nil
		}
		next, err := o.evolve(ctx, st, batch, res.RowErrors, pending)
		if err != nil {
			res.Record.Release()
			return arrowconv.Result{}, st, err
		}
		if next == st {
			// Nothing could be added or widened: the row errors stand,
			// with the catalog's refusal where it refused.
			o.annotateRefusedWidenings(res.RowErrors, widen)
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
	ticket *pool.Ticket
}

// submitAndWait submits the converted rows (one slice per ordering-key
// group) and waits for every ticket. Nothing here reads a submitted
// watermark: only the tickets, settled by the ack lanes after the durable
// ack, decide the outcome.
func (o *output) submitAndWait(ctx context.Context, st *writeState, res arrowconv.Result, lay layout) error {
	parts := split(res, lay)
	defer func() {
		for _, p := range parts {
			p.rec.Release()
		}
	}()
	for i := range parts {
		t, err := st.pool.Write(ctx, parts[i].key, parts[i].rec)
		if err != nil {
			o.onWriteErr(ctx, st, err)
			return fmt.Errorf("submit %d rows to %s: %w", parts[i].rec.NumRows(), o.cfg.Table, err)
		}
		parts[i].ticket = t
	}
	// ack.timeout bounds the wait for the whole batch: past it the batch is
	// nacked (and redelivered), never acked.
	wctx, cancel := context.WithTimeoutCause(ctx, o.cfg.AckTimeout,
		fmt.Errorf("no durable ack within ack.timeout (%s)", o.cfg.AckTimeout))
	defer cancel()
	var firstErr error
	for i := range parts {
		if err := parts[i].ticket.Wait(wctx); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		o.met.Sent(parts[i].ticket.Stream, parts[i].rec.NumRows(), parts[i].bytes)
	}
	if firstErr != nil {
		o.onWriteErr(ctx, st, firstErr)
		if cause := context.Cause(wctx); cause != nil {
			return fmt.Errorf("rows for %s not confirmed durable: %w (%w)", o.cfg.Table, firstErr, cause)
		}
		return fmt.Errorf("rows for %s not confirmed durable: %w", o.cfg.Table, firstErr)
	}
	return nil
}

// onWriteErr reacts to a stream error: a schema rejection re-describes the
// table so the redelivered batch meets the new schema.
func (o *output) onWriteErr(ctx context.Context, st *writeState, err error) {
	var ze *ingest.Error
	if errors.As(err, &ze) && ze.IsSchemaMismatch() {
		o.log.Warnf("table %s rejected the stream schema (%v): re-describing", o.cfg.Table, err)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.cfg.CloseTimeout)
		defer cancel()
		o.redescribe(rctx, st)
	}
}

// split cuts the converted record into one zero-copy slice per stream
// group (the whole record, key "", without an ordering key). Rows of one
// group are contiguous because layout ordered the conversion by group.
func split(res arrowconv.Result, lay layout) []part {
	n := int(res.Record.NumRows())
	// Bytes are the Arrow size of the record, shared pro rata among slices.
	total := ingest.RecordBytes(res.Record)
	var parts []part
	for lo := 0; lo < n; {
		hi, g := lo, -1
		if lay.group != nil {
			g = lay.group[res.SourceIndex[lo]]
		}
		for hi < n && (lay.group == nil || lay.group[res.SourceIndex[hi]] == g) {
			hi++
		}
		b := total * int64(hi-lo) / int64(n)
		key := ""
		if g >= 0 {
			key = lay.keys[g]
		}
		parts = append(parts, part{key: key, rec: res.Record.NewSlice(int64(lo), int64(hi)), bytes: b})
		lo = hi
	}
	return parts
}
