// The output's delivery tally: what became of the rows it was given, per
// table, for the line Close writes once the process is stopping.

package zerobus

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// deliveryTally counts, per table, the rows the output acknowledged to the
// engine (delivered: durable in the table, or in the dead-letter table when
// they did not fit) and the rows it handed back (nacked, so the input
// redelivers them) once the process was stopping: held ones, never sent
// because the table was not connected, and sent ones not confirmed durable
// within close_timeout. Safe for concurrent use.
type deliveryTally struct {
	mu     sync.Mutex
	tables map[string]*tableTally
}

// tableTally is one table's counts.
type tableTally struct {
	delivered         int64
	held, unconfirmed int64 // rows handed back while stopping
	batches           int64 // batches handed back while stopping
	// refused counts rows failed alone through a batch error, at any time:
	// they did not fit the table, or a processor had failed them, with no
	// dead-letter table to take them. The engine nacks them.
	refused int64
}

func (t *deliveryTally) table(name string) *tableTally {
	if t.tables == nil {
		t.tables = map[string]*tableTally{}
	}
	tt := t.tables[name]
	if tt == nil {
		tt = &tableTally{}
		t.tables[name] = tt
	}
	return tt
}

// seen records a table the output writes to, so that the close line names
// it even when no row of it was delivered or handed back.
func (t *deliveryTally) seen(table string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.table(table)
}

// delivered counts rows acknowledged to the engine, per table.
func (t *deliveryTally) delivered(rows map[string]int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for table, n := range rows {
		t.table(table).delivered += int64(n)
	}
}

// handedBack counts the rows of one batch handed back, per table: held
// (never sent: the table was not connected) or sent and not confirmed
// durable.
func (t *deliveryTally) handedBack(rows map[string]int, held bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for table, n := range rows {
		tt := t.table(table)
		if held {
			tt.held += int64(n)
		} else {
			tt.unconfirmed += int64(n)
		}
		tt.batches++
	}
}

// refused counts rows failed alone (see tableTally.refused), per table.
func (t *deliveryTally) refused(rows map[string]int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for table, n := range rows {
		t.table(table).refused += int64(n)
	}
}

// notDelivered returns the rows handed back over every table.
func (t *deliveryTally) notDelivered() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var n int64
	for _, tt := range t.tables {
		n += tt.held + tt.unconfirmed + tt.refused
	}
	return n
}

// line is the close line: for each table (by name), how many rows were
// delivered and how many were handed back, held or unconfirmed. handedBack
// reports whether any row was.
func (t *deliveryTally) line() (text string, handedBack bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.tables) == 0 {
		return "zerobus: closed; no row reached any table's writer: none delivered, none handed back", false
	}
	names := make([]string, 0, len(t.tables))
	for name := range t.tables {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]string, 0, len(names))
	for _, name := range names {
		tt := t.tables[name]
		s := fmt.Sprintf("%s: %s delivered", name, rowsText(tt.delivered))
		back := tt.held + tt.unconfirmed + tt.refused
		if back == 0 {
			parts = append(parts, s+", none handed back")
			continue
		}
		handedBack = true
		var why []string
		if tt.held > 0 {
			why = append(why, fmt.Sprintf("%d held and never sent, the table not connected", tt.held))
		}
		if tt.unconfirmed > 0 {
			why = append(why, fmt.Sprintf("%d sent but not confirmed durable within close_timeout", tt.unconfirmed))
		}
		var whys []string
		if len(why) > 0 {
			whys = append(whys, strings.Join(why, ", ")+"; "+batchesText(tt.batches))
		}
		if tt.refused > 0 {
			whys = append(whys, fmt.Sprintf("%d refused alone, not fitting the table or failed by a processor, with no dead-letter table", tt.refused))
		}
		parts = append(parts, fmt.Sprintf("%s, %s not delivered (%s) handed back to the input, nacked: it redelivers them",
			s, rowsText(back), strings.Join(whys, "; ")))
	}
	return "zerobus: closed; " + strings.Join(parts, "; "), handedBack
}

func rowsText(n int64) string {
	if n == 1 {
		return "1 row"
	}
	return fmt.Sprintf("%d rows", n)
}

func batchesText(n int64) string {
	if n == 1 {
		return "1 batch"
	}
	return fmt.Sprintf("%d batches", n)
}
