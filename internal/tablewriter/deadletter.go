package tablewriter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// DeadLetterColumns are the columns of a dead-letter table: where a row was
// bound, which message of its batch it was, the column at fault and why,
// and (optionally) the message itself. The table writer adds its reserved
// columns (_zb_emit_ts) when it creates the table.
func DeadLetterColumns() []typemap.Column {
	str := typemap.Primitive(typemap.String)
	return []typemap.Column{
		{Name: "source_table", Type: str, Comment: "The table the row was written to."},
		{Name: "message_index", Type: typemap.Primitive(typemap.Int), Comment: "The row's index in its batch."},
		{Name: "column_name", Type: str, Comment: "The column at fault; empty when the message as a whole is."},
		{Name: "error", Type: str, Comment: "Why the row does not fit the table."},
		{Name: "payload", Type: str, Comment: "The message as received (invalid UTF-8 replaced), when include_payload is on."},
	}
}

// TableError is a row error caused by its table's writer failing as a whole
// (not opening, streams down): the row itself is fine, so it is retried,
// never dead-lettered.
type TableError struct {
	Table string
	Err   error
}

func (e *TableError) Error() string { return fmt.Sprintf("table %s: %v", e.Table, e.Err) }
func (e *TableError) Unwrap() error { return e.Err }

// DeadLetters writes the rows that do not fit their table into a dead-letter
// table, durably, through its own Writer.
type DeadLetters struct {
	w              *Writer
	includePayload bool
}

// NewDeadLetters writes dead letters through w (a writer of a table with
// DeadLetterColumns); includePayload stores each message's bytes.
func NewDeadLetters(w *Writer, includePayload bool) *DeadLetters {
	return &DeadLetters{w: w, includePayload: includePayload}
}

// Writer is the dead-letter table's writer (to Open and Close it).
func (d *DeadLetters) Writer() *Writer { return d.w }

// Write dead-letters the rows of errs (indices into rows; sourceOf names
// the table row i was bound for) and returns once they are durable. Row errors of table failures
// (TableError) are not dead letters: they come back in rest, to be retried.
// An error means the dead letters are not durable: the batch must not be
// acknowledged.
func (d *DeadLetters) Write(ctx context.Context, sourceOf func(i int) string, rows []Row, errs []RowError) (rest []RowError, err error) {
	var letters []Row
	var from []int // index into errs of each letter
	for k, re := range errs {
		var te *TableError
		if errors.As(re.Err, &te) {
			rest = append(rest, re)
			continue
		}
		l := deadLetter{SourceTable: sourceOf(re.Index), MessageIndex: re.Index, ColumnName: re.Column, Error: re.Err.Error()}
		if d.includePayload && re.Index >= 0 && re.Index < len(rows) {
			if b, berr := rows[re.Index].AsBytes(); berr == nil {
				p := strings.ToValidUTF8(string(b), "\uFFFD")
				l.Payload = &p
			}
		}
		b, merr := json.Marshal(l)
		if merr != nil {
			return nil, fmt.Errorf("dead letter for message %d: %w", re.Index, merr)
		}
		letters = append(letters, arrowconv.JSONRow(b))
		from = append(from, k)
	}
	if len(letters) == 0 {
		return rest, nil
	}
	dlErrs, err := d.w.Write(ctx, letters, nil)
	if err != nil {
		return nil, fmt.Errorf("dead-letter table %s: %w", d.w.cfg.Table, err)
	}
	// A dead letter the dead-letter table refuses (far too large, say)
	// leaves its row failing as it was.
	for _, de := range dlErrs {
		re := errs[from[de.Index]]
		re.Err = fmt.Errorf("%w (and the dead-letter table refused it: %v)", re.Err, de.Err)
		rest = append(rest, re)
	}
	return rest, nil
}

// deadLetter is one row of the dead-letter table.
type deadLetter struct {
	SourceTable  string  `json:"source_table"`
	MessageIndex int     `json:"message_index"`
	ColumnName   string  `json:"column_name"`
	Error        string  `json:"error"`
	Payload      *string `json:"payload"`
}
