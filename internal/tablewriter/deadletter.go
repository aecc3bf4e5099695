package tablewriter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// DeadLetterColumns are the columns of a dead-letter table: where a row was
// bound, which message of its batch it was, the column at fault and why,
// and (optionally) the message itself. The table writer adds its reserved
// columns (_zb_emit_ts) when it creates the table.
//
// Every column is nullable, so the table admits every dead letter the
// output can produce: payload is NULL with include_payload off (or for a
// message too large to store), and no other value is ever missing, but a
// NOT NULL column would make a dead letter refusable for nothing.
func DeadLetterColumns() []typemap.Column {
	str := typemap.Primitive(typemap.String)
	return []typemap.Column{
		{Name: "source_table", Type: str, Nullable: true, Comment: "The table the row was written to."},
		{Name: "message_index", Type: typemap.Primitive(typemap.Int), Nullable: true, Comment: "The row's index in its batch."},
		{Name: "column_name", Type: str, Nullable: true, Comment: "The column at fault; empty when the message as a whole is."},
		{Name: "error", Type: str, Nullable: true, Comment: "Why the row does not fit the table."},
		{Name: "payload", Type: str, Nullable: true, Comment: "The message as received (invalid UTF-8 replaced), when include_payload is on; NULL otherwise or when larger than the dead-letter payload cap."},
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
//
// A dead-letter write never fails the batch as a whole: the rows that fit
// their table are durable already, and failing the batch would send them
// again. A failed dead-letter write is retried alone, a bounded number of
// times; dead letters still not durable after that (the dead-letter table is
// missing, refuses them, or is down) come back as the row errors they were,
// so the caller fails those rows only (a *service.BatchError) and Benthos'
// own retry or fallback output handles them. A dead-letter table that
// refuses dead letters is reported once, naming the fix, until it takes
// them again.
type DeadLetters struct {
	w              *Writer
	includePayload bool
	// attempts bounds the writes of one batch's dead letters while the
	// dead-letter table is healthy; backoff is the pause after the first
	// failed one (doubling).
	attempts int
	backoff  time.Duration
	// broken is set while the dead-letter table refuses dead letters (it
	// was reported): a batch then tries once instead of attempts times.
	broken atomic.Bool
	// obs counts the dead letters made durable; nil when the writer's
	// observer does not.
	obs DeadLetterObserver
}

// Dead-letter retry bounds and the payload cap.
const (
	// DeadLetterAttempts is how many times one batch's dead letters are
	// written before their rows are failed back to the pipeline.
	DeadLetterAttempts = 3
	// DeadLetterBackoff is the pause after the first failed dead-letter
	// write (then doubled).
	DeadLetterBackoff = 500 * time.Millisecond
	// MaxDeadLetterPayload is the largest payload a dead letter stores: a
	// larger message is stored without it (and its error says so), so the
	// dead letter itself always fits a request (ingest.MaxRequestBytes).
	MaxDeadLetterPayload = 4 << 20
	// maxDeadLetterError bounds the stored error text.
	maxDeadLetterError = 16 << 10
)

// DeadLetterObserver is the optional part of a dead-letter writer's
// Observer that counts the dead letters made durable (Metrics: the
// zerobus_dead_letter_rows_total counter).
type DeadLetterObserver interface {
	DeadLettered(n int)
}

// NewDeadLetters writes dead letters through w (a writer of a table with
// DeadLetterColumns); includePayload stores each message's bytes. The
// writer's DeadLetterObserver, if any, gets its series at 0 here.
func NewDeadLetters(w *Writer, includePayload bool) *DeadLetters {
	w.cfg.Rescue = "" // a dead letter always fits: no rescue column
	d := &DeadLetters{w: w, includePayload: includePayload, attempts: DeadLetterAttempts, backoff: DeadLetterBackoff}
	if o, ok := w.obs.(DeadLetterObserver); ok {
		d.obs = o
		o.DeadLettered(0)
	}
	return d
}

// Writer is the dead-letter table's writer (to Open and Close it).
func (d *DeadLetters) Writer() *Writer { return d.w }

// Write dead-letters the rows of errs (indices into rows; sourceOf names
// the table row i was bound for) and returns once they are durable. Row
// errors of table failures (TableError) are not dead letters: they come
// back in rest, to be retried. So do the rows whose dead letters could not
// be made durable within the retry bound, their errors saying why: the
// caller fails exactly the rows in rest. err is always nil (kept so that a
// caller treating one as a nack stays correct): even when ctx ends, the
// rows that fit are durable and only the rows in rest are to fail.
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
				if len(b) > MaxDeadLetterPayload {
					l.Error += fmt.Sprintf(" (payload of %d bytes not stored: above the dead-letter payload cap of %d bytes)", len(b), MaxDeadLetterPayload)
				} else {
					p := strings.ToValidUTF8(string(b), "\uFFFD")
					l.Payload = &p
				}
			}
		}
		l.ColumnName = truncate(l.ColumnName, arrowconv.MaxQuoted)
		l.Error = truncate(l.Error, maxDeadLetterError)
		b, merr := json.Marshal(l)
		if merr != nil { // cannot happen: strings and an int
			re.Err = fmt.Errorf("%w (and its dead letter could not be encoded: %v)", re.Err, merr)
			rest = append(rest, re)
			continue
		}
		letters = append(letters, arrowconv.JSONRow(b))
		from = append(from, k)
	}
	if len(letters) == 0 {
		return rest, nil
	}
	dlErrs, werr := d.writeBounded(ctx, letters)
	if werr != nil {
		// Not durable: the rows fail back to the pipeline, alone.
		d.reportBroken(fmt.Sprintf("writing %d dead letters failed (%d attempts): %v", len(letters), d.attemptsNow(), werr))
		for _, k := range from {
			re := errs[k]
			re.Err = fmt.Errorf("%w (not dead-lettered: dead-letter table %s: %v)", re.Err, d.w.cfg.Table, werr)
			rest = append(rest, re)
		}
		return rest, nil
	}
	// A dead letter the dead-letter table refuses leaves its row failing as
	// it was. All of them refused is the table's fault, not the letters'.
	if len(dlErrs) > 0 && len(dlErrs) == len(letters) {
		de := dlErrs[0]
		d.reportBroken(fmt.Sprintf("it refuses every dead letter (column %q: %v); its columns must admit %s", de.Column, de.Err, describeColumns(DeadLetterColumns())))
	} else if d.broken.CompareAndSwap(true, false) {
		d.w.infof("dead-letter table %s takes dead letters again", d.w.cfg.Table)
	}
	if d.obs != nil {
		d.obs.DeadLettered(len(letters) - len(dlErrs))
	}
	for _, de := range dlErrs {
		re := errs[from[de.Index]]
		re.Err = fmt.Errorf("%w (and the dead-letter table refused it: %v)", re.Err, de.Err)
		rest = append(rest, re)
	}
	return rest, nil
}

// truncate cuts s to its first n bytes (dropping a rune cut in two),
// followed by its length, when it is longer.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + fmt.Sprintf("… (%d bytes)", len(s))
}

// attemptsNow is how many writes one batch's dead letters get: one while
// the table is known broken, so a broken table does not slow every batch.
func (d *DeadLetters) attemptsNow() int {
	if d.broken.Load() {
		return 1
	}
	return max(d.attempts, 1)
}

// writeBounded writes the letters, retrying a failed write (reopening a
// writer that is not open) up to attemptsNow times with a doubling pause.
func (d *DeadLetters) writeBounded(ctx context.Context, letters []Row) ([]RowError, error) {
	wait := d.backoff
	var err error
	for a, n := 0, d.attemptsNow(); a < n; a++ {
		if a > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("%w (after: %v)", ctx.Err(), err)
			case <-t.C:
			}
			wait *= 2
		}
		var dlErrs []RowError
		dlErrs, err = d.w.Write(ctx, letters, nil)
		if errors.Is(err, ErrNotOpen) {
			// Not open (its Open failed, or its streams stopped): open it
			// here, so a table fixed meanwhile takes the letters at once.
			if oerr := d.w.Open(ctx); oerr != nil {
				err = fmt.Errorf("%w: %w", ErrNotOpen, oerr)
				continue
			}
			dlErrs, err = d.w.Write(ctx, letters, nil)
		}
		if err == nil {
			return dlErrs, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
	}
	return nil, err
}

// reportBroken logs, once until the table takes dead letters again, that
// the dead-letter table cannot take them and what happens to their rows.
func (d *DeadLetters) reportBroken(why string) {
	if d.broken.Swap(true) {
		return
	}
	d.w.errorf("dead-letter table %s cannot take dead letters: %s. Until it does, the rows that do not fit their table fail back to the pipeline "+
		"(its retry or a fallback output handles them); the rows that fit are durable and are not sent again by this output. "+
		"Fix the dead-letter table (or let catalog.provision create it: drop it, or ALTER TABLE … ALTER COLUMN … DROP NOT NULL for a NOT NULL column)", d.w.cfg.Table, why)
}

// describeColumns is "name TYPE, …" (NOT NULL where not nullable).
func describeColumns(cols []typemap.Column) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = c.Name + " " + strings.ToUpper(c.Type.Text())
		if !c.Nullable {
			parts[i] += " NOT NULL"
		}
	}
	return strings.Join(parts, ", ")
}

// deadLetter is one row of the dead-letter table.
type deadLetter struct {
	SourceTable  string  `json:"source_table"`
	MessageIndex int     `json:"message_index"`
	ColumnName   string  `json:"column_name"`
	Error        string  `json:"error"`
	Payload      *string `json:"payload"`
}
