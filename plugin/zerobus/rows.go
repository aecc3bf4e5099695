package zerobus

import (
	"fmt"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/kafkamsg"
	"github.com/benthos-zerobus/benthos-zerobus/internal/tablewriter"
)

// rowBatch is a message batch as the table writers see it: a row per
// message, except that a record pack (the redpanda input's pack_records)
// gives a row per record in place of its message. Row indices are what the
// writers, the tally and the interpolations use; a row error goes back to
// the engine on its row's message.
type rowBatch struct {
	msgs service.MessageBatch
	rows []tablewriter.Row
	// owner is each row's message index; nil when row i is message i (a
	// batch without packs).
	owner []int
	// failed are the rows a processor failed (see the spec's "Errored
	// messages").
	failed []tablewriter.RowError
}

// newRowBatch returns batch's rows. A pack whose message a processor
// changed is an error for the whole batch: its records are not what the
// pipeline means to write, and they are not to be dead-lettered as
// placeholder bytes either, so the batch is nacked (kept by the input) and
// the error says what to change.
func newRowBatch(batch service.MessageBatch) (*rowBatch, error) {
	b := &rowBatch{msgs: batch, rows: make([]tablewriter.Row, 0, len(batch))}
	for i, m := range batch {
		p, err := kafkamsg.PackOf(m)
		if err != nil {
			return nil, fmt.Errorf("zerobus: message %d: %w", i, err)
		}
		if p != nil && b.owner == nil {
			// The first pack: from here rows and messages part.
			b.owner = make([]int, len(b.rows), len(b.rows)+len(p.Records)+len(batch)-i)
			for k := range b.owner {
				b.owner[k] = k
			}
		}
		if p == nil {
			if perr := m.GetError(); perr != nil {
				b.failed = append(b.failed, tablewriter.ProcessorFailed(len(b.rows), perr))
			}
			b.rows = append(b.rows, m)
			if b.owner != nil {
				b.owner = append(b.owner, i)
			}
			continue
		}
		if perr := m.GetError(); perr != nil {
			// A processor failed the pack: each of its records fails
			// with that error (their bytes are intact).
			for k := range p.Records {
				b.failed = append(b.failed, tablewriter.ProcessorFailed(len(b.rows)+k, perr))
			}
		}
		rows := p.Rows()
		for k := range rows {
			b.rows = append(b.rows, &rows[k])
			b.owner = append(b.owner, i)
		}
	}
	return b, nil
}

// len is the number of rows.
func (b *rowBatch) len() int { return len(b.rows) }

// msgIndex returns the index of row i's message in the engine's batch.
func (b *rowBatch) msgIndex(i int) int {
	if b.owner == nil {
		return i
	}
	return b.owner[i]
}

// rowMessage returns r's message, for an interpolation: r itself, or, for
// a record of a pack, the record's message (built with the pack's other
// records' on first use).
func rowMessage(r tablewriter.Row) *service.Message {
	switch r := r.(type) {
	case *service.Message:
		return r
	case *kafkamsg.Row:
		return r.Message()
	}
	return nil
}
