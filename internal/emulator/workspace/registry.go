// Package workspace is the emulator's Unity Catalog side: the registry of
// tables (columns, properties, tags, comments), the UC REST endpoints that
// describe them, the SQL Statement Execution endpoint that changes them, and
// temporary table credentials.
//
// The Zerobus side of the emulator (internal/emulator) reads table schemas
// from the Registry; it never changes them.
package workspace

import (
	"errors"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// ErrAlreadyExists is returned by Registry.Create for a name already taken.
var ErrAlreadyExists = errors.New("table already exists")

// ErrNotFound is returned for a table the registry does not hold.
var ErrNotFound = errors.New("table does not exist")

// Table is one UC table as the registry holds it.
type Table struct {
	FullName   string // catalog.schema.table
	TableID    string // uuid
	TableType  string // MANAGED
	Columns    []typemap.Column
	Properties map[string]string
	Tags       map[string]string
	Comment    string
	Owner      string
	// Version increases by one on every change of columns or properties; the
	// storage layer writes a Delta metaData action when it sees a new one.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}
