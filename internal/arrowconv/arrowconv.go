// Package arrowconv converts Benthos messages into Arrow record batches shaped
// exactly as the Zerobus Flight server expects for a Unity Catalog table (the
// mapping is typemap.ArrowSchema's).
//
// The common case, one JSON object per message, is decoded by a hand-written
// scanner straight into per-column buffers: no map[string]any is built per
// row. A row that fails conversion (bad JSON, unknown field, wrong type, value
// out of range, missing NOT NULL value, a reconciliation the options do not
// allow) is reported as a RowError naming the message index and the column,
// its partial values are truncated away, and the other rows still convert, so
// that the output can fail only the bad messages of a batch.
//
// Conversion rules, per column type:
//
//   - BIGINT, INT, SMALLINT, TINYINT: a JSON number with an exact integer
//     value (1e3 and 1.50e1 are integers; 1.5 is not), range checked. Parsed
//     exactly, never through float64.
//   - DOUBLE, FLOAT: a JSON number, or the strings "NaN", "Infinity",
//     "-Infinity". A FLOAT overflow is an error. The bare literals NaN and
//     Infinity are not JSON and fail the row (as anywhere else) with a
//     message saying so.
//   - DECIMAL(p,s): a JSON number or a numeric string, written as its canonical
//     string with exactly s fraction digits ("12.30"). Values that would need
//     rounding or more than p-s integer digits are errors.
//   - STRING: a JSON string. A JSON object or array is serialised with ToJSON
//     only when Options.NestedToString is set (counted as "nested_to_string"
//     in Result.Reconciled); otherwise it is an error wrapping
//     ErrNestedIntoString. Numbers and booleans are errors.
//   - VARIANT: any JSON value, in the Parquet variant binary encoding as the
//     struct typemap.VariantArrowType (see variantNode for the mapping, which
//     follows Spark's parse_json: exact integers, decimals for plain
//     fractions up to 38 digits, else doubles). A JSON null is the variant
//     null, as in Spark's from_json; only a missing field is SQL NULL.
//     Duplicate object keys are an error.
//   - BINARY: a standard (padded) base64 string.
//   - BOOLEAN: true or false.
//   - DATE: "2006-01-02", or an integer number of days since 1970-01-01.
//   - TIMESTAMP: an RFC 3339 string with a zone or offset (converted to UTC);
//     a string without one is an error (it names no instant). A JSON number
//     is time since the Unix epoch in Options.EpochUnit.
//   - TIMESTAMP_NTZ: a zone-less "2006-01-02T15:04:05[.999999]" string. A
//     string with a zone or offset ("Z" included), an epoch number or a
//     structured time.Time (each an instant) is the tz-into-NTZ mismatch: an
//     error wrapping ErrTZIntoNTZ, except that Options.NTZFromZoned stores a
//     time.Time as its UTC wall time.
//   - ARRAY, MAP, STRUCT: a JSON array, object, object, converted recursively;
//     map keys are converted from the object keys to the key type.
//
// A message is exactly one JSON object: anything after it but whitespace, a
// NUL byte included, is trailing data and fails the row.
//
// Fractions of timestamps below a microsecond are truncated (floored). Dates
// and timestamps must lie in 0001-01-01..9999-12-31. A missing field or JSON
// null is NULL for a nullable column or struct field and an error
// (ErrMissingRequired) otherwise. A field the table does not have is an error
// (ErrUnknownField), as the service would reject it, unless its value is
// null: that is the field absent, and skipped. Field names match
// columns exactly or, failing that, ASCII case-insensitively, as Delta column
// names are case-insensitive, or, failing that, by the column-name rule
// (typemap.SafeIdentifier: "my-field" matches the column my_field), the
// rule the output creates columns by.
//
// Messages that already hold a structured value (see StructuredRow) are
// converted from it directly by the same rules, with the Go types Bloblang
// produces: int64 and other integers, float64, json.Number, string, bool,
// time.Time (into TIMESTAMP and DATE; into TIMESTAMP_NTZ only with
// Options.NTZFromZoned), []byte
// (into BINARY), map[string]any and []any.
package arrowconv

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// EmitTimestampColumn is the reserved metadata column stamped with the
// conversion time of the batch when a row does not carry its own value.
const EmitTimestampColumn = "_zb_emit_ts"

// DefaultEpochUnit is the unit of numeric timestamps when Options.EpochUnit is
// empty: microseconds, the unit the table stores, so that no scaling happens
// unless configured.
const DefaultEpochUnit = "us"

// ReconcileNestedToString is the Result.Reconciled kind counted each time a
// JSON object or array is serialised into a STRING column.
const ReconcileNestedToString = "nested_to_string"

// ReconcileFieldNameCase is the Result.Reconciled kind counted each time a
// field name matched a column only case-insensitively or by the column-name
// rule (typemap.SafeIdentifier).
const ReconcileFieldNameCase = "field_name_case"

// ReconcileNTZFromZoned is the Result.Reconciled kind counted each time a
// time.Time was stored into a TIMESTAMP_NTZ column as its UTC wall time
// (Options.NTZFromZoned).
const ReconcileNTZFromZoned = "ntz_from_zoned"

// Error classes. Row errors wrap one of these so callers can count them by
// kind (errors.Is) without parsing messages.
var (
	ErrInvalidJSON      = errors.New("invalid JSON")
	ErrNotObject        = errors.New("message is not a JSON object")
	ErrUnknownField     = errors.New("unknown field")
	ErrDuplicateField   = errors.New("duplicate field")
	ErrMissingRequired  = errors.New("missing value for NOT NULL")
	ErrTypeMismatch     = errors.New("type mismatch")
	ErrOutOfRange       = errors.New("value out of range")
	ErrInvalidValue     = errors.New("invalid value")
	ErrNestedIntoString = errors.New("nested value into STRING column")
	ErrTZIntoNTZ        = errors.New("tz-aware value into TIMESTAMP_NTZ column")
)

// kindError is an error with a readable message that unwraps to its class.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

func kerr(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// Row is one message to convert. *service.Message satisfies it.
type Row interface {
	AsBytes() ([]byte, error)
}

// StructuredRow is a Row that may already hold a decoded value.
// *service.Message satisfies it. When HasStructured reports true the value
// from AsStructured is converted directly instead of re-parsing bytes.
type StructuredRow interface {
	Row
	HasStructured() bool
	AsStructured() (any, error)
}

// JSONRow is a Row of JSON bytes, for rows the project makes itself (dead
// letters, coverage ranges).
type JSONRow []byte

// AsBytes returns the JSON.
func (r JSONRow) AsBytes() ([]byte, error) { return r, nil }

// HasStructured reports false: the bytes are the row.
func (r JSONRow) HasStructured() bool { return false }

// AsStructured decodes the JSON.
func (r JSONRow) AsStructured() (any, error) {
	var v any
	err := json.Unmarshal(r, &v)
	return v, err
}

// Options tune a Converter.
type Options struct {
	// NestedToString serialises a JSON object or array landing in a STRING
	// column with ToJSON instead of failing the row (config
	// reconcile.nested_to_string, default off).
	NestedToString bool
	// EpochUnit is the unit of numeric timestamps: "s", "ms", "us" or "ns".
	// Empty means DefaultEpochUnit ("us").
	EpochUnit string
	// Now gives the time stamped into reserved columns; nil means time.Now.
	Now func() time.Time
	// NTZFromZoned converts a time.Time (a Bloblang timestamp, which always
	// names an instant, in UTC or in another zone) landing in a TIMESTAMP_NTZ
	// column to UTC wall time instead of failing the row with ErrTZIntoNTZ
	// (config reconcile.timestamp_ntz_from_zoned, default off; counted as
	// ReconcileNTZFromZoned in Result.Reconciled). Zoned strings and epoch
	// numbers are refused either way: their text says what the sender meant.
	NTZFromZoned bool
}

// ReservedColumn describes a metadata column the converter fills itself when
// the table has it.
type ReservedColumn struct {
	Name        string
	Type        typemap.Type
	Description string
}

// Column returns the nullable table column for r, its description as the
// column comment, as the catalog creates it.
func (r ReservedColumn) Column() typemap.Column {
	return typemap.Column{Name: r.Name, Type: r.Type, Nullable: true, Comment: r.Description}
}

// ReservedColumns lists the metadata columns the converter stamps.
func ReservedColumns() []ReservedColumn {
	return []ReservedColumn{{
		Name:        EmitTimestampColumn,
		Type:        typemap.Primitive(typemap.Timestamp),
		Description: "Time the benthos-zerobus output converted the row's batch for sending (UTC), unless the row carried its own value.",
	}}
}

// Reserved coverage columns: the source (e.g. "topic/partition") and the
// offset in it of each row, stamped by the table writer when the output's
// coverage is configured (the converter itself leaves them to the row).
const (
	SourceColumn = "_zb_source"
	OffsetColumn = "_zb_offset"
)

// CoverageColumns lists the reserved coverage columns, added to a table
// (at create, or to an existing one) only when coverage is configured.
func CoverageColumns() []ReservedColumn {
	return []ReservedColumn{{
		Name:        SourceColumn,
		Type:        typemap.Primitive(typemap.String),
		Description: "The source the row was read from (e.g. topic/partition), stamped by the benthos-zerobus output's coverage.",
	}, {
		Name:        OffsetColumn,
		Type:        typemap.Primitive(typemap.Long),
		Description: "The row's offset in its source, stamped by the benthos-zerobus output's coverage; the coverage table records which offsets are durable.",
	}}
}

// Result is the outcome of converting one batch.
type Result struct {
	// Record holds the rows that converted, in input order. It always has
	// the converter's schema and may have zero rows. The caller releases it
	// (and every slice of it) once done: its column storage then goes back
	// to a pool for later batches, so it must not be read after its last
	// release. A record never released is left to the GC.
	Record arrow.RecordBatch
	// SourceIndex maps record row i to its input index SourceIndex[i].
	SourceIndex []int
	// RowErrors lists the rows that failed, in input order.
	RowErrors []RowError
	// Reconciled counts type reconciliations applied to converted rows, by
	// kind (ReconcileNestedToString, ReconcileFieldNameCase), for the
	// zerobus_type_reconcile_total{kind} metric. Nil when there were none.
	Reconciled map[string]int
}

// RowError is a message that could not be converted.
type RowError struct {
	// Index is the message's index in the input batch.
	Index int
	// Column is the column, with a path into nested values ("addr.zip",
	// "tags[2]", `attrs["k"]`), or the unknown field's name; empty when the
	// message as a whole is at fault (not JSON, not an object).
	Column string
	// Field is the top-level message field at fault: as the message spells
	// it for an unknown or duplicate field, else the column's name; empty
	// when the message as a whole is at fault.
	Field string
	Err   error
}

func (e RowError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("message %d: %v", e.Index, e.Err)
	}
	return fmt.Sprintf("message %d: column %s: %v", e.Index, Quote(e.Column), e.Err)
}

func (e RowError) Unwrap() error { return e.Err }

// Converter converts batches for one table schema. It is safe for concurrent
// use: each Convert call borrows its own buffers.
type Converter struct {
	cols      []typemap.Column
	schema    *arrow.Schema
	opts      Options
	epochExp  int
	emitIndex int

	// idle holds the conversion states not in use, at most maxIdleStates.
	// Not a sync.Pool, which drops its items over two collections: a
	// state carries between batches the sizes of its columns' data
	// (dataHint), and a fresh one grows every string column from nothing
	// by appends, allocating about twice its data afresh; with a collection
	// every few batches that had been most of the converter's garbage.
	mu   sync.Mutex
	idle []*state

	kept kept // what callers made for this converter (Keep)
}

// maxIdleStates bounds the states a Converter keeps between batches: as
// many as batches converted at once (max_in_flight, 16 by default), with
// room. A state holds no column storage between batches, only its nodes and
// the scratch space its largest value needed; since no more states exist
// than batches were ever converted at once, keeping them holds no more than
// those conversions did at their peak.
const maxIdleStates = 64

// New returns a Converter for a table with the given columns (in UC position
// order). It fails for types Zerobus cannot take, an unknown EpochUnit, or a
// reserved column declared with the wrong type.
func New(cols []typemap.Column, opts Options) (*Converter, error) {
	if len(cols) == 0 {
		return nil, errors.New("arrowconv: table has no columns")
	}
	schema, err := typemap.ArrowSchema(cols)
	if err != nil {
		return nil, fmt.Errorf("arrowconv: %w", err)
	}
	c := &Converter{cols: cols, schema: schema, opts: opts, emitIndex: -1}
	switch opts.EpochUnit {
	case "s":
		c.epochExp = 6
	case "ms":
		c.epochExp = 3
	case "us", "":
		c.epochExp = 0
	case "ns":
		c.epochExp = -3
	default:
		return nil, fmt.Errorf("arrowconv: epoch unit %q: want s, ms, us or ns", opts.EpochUnit)
	}
	if c.opts.Now == nil {
		c.opts.Now = time.Now
	}
	seen := map[string]bool{}
	for i, col := range cols {
		if seen[col.Name] {
			return nil, fmt.Errorf("arrowconv: duplicate column %q", col.Name)
		}
		seen[col.Name] = true
		if col.Name == EmitTimestampColumn {
			if col.Type.Kind != typemap.Timestamp {
				return nil, fmt.Errorf("arrowconv: reserved column %q must be TIMESTAMP, table has %s", col.Name, col.Type.Text())
			}
			c.emitIndex = i
		}
	}
	// Build one state eagerly so schema problems surface here, not in Convert.
	st, err := c.newState()
	if err != nil {
		return nil, err
	}
	c.putState(st)
	return c, nil
}

// Schema returns the Arrow schema of every record the converter produces.
func (c *Converter) Schema() *arrow.Schema { return c.schema }

// Convert converts a batch. Bad rows become RowErrors and are left out of the
// record; the error return is reserved for failures of the whole batch.
func (c *Converter) Convert(rows []Row) (Result, error) {
	return c.convert(len(rows), func(st *state, i int) error {
		if sr, ok := rows[i].(StructuredRow); ok {
			return st.putMessage(sr)
		}
		return st.putBytes(rows[i])
	})
}

// ConvertStructured is Convert for rows that are all StructuredRows (the
// output's messages): no []Row copy of the batch and no type assertion per
// row.
func (c *Converter) ConvertStructured(rows []StructuredRow) (Result, error) {
	return c.convert(len(rows), func(st *state, i int) error {
		return st.putMessage(rows[i])
	})
}

// putMessage converts a row from its decoded value when it holds one, from
// its JSON bytes otherwise.
func (st *state) putMessage(r StructuredRow) error {
	if !r.HasStructured() {
		return st.putBytes(r)
	}
	v, err := r.AsStructured()
	if err != nil {
		return kerr(ErrInvalidValue, "reading structured message: %v", err)
	}
	return st.putRow(v)
}

// putBytes converts a row's JSON bytes.
func (st *state) putBytes(r Row) error {
	b, err := r.AsBytes()
	if err != nil {
		return kerr(ErrInvalidValue, "reading message bytes: %v", err)
	}
	return st.decodeRow(b)
}

// ConvertJSON converts a batch of JSON documents, one row each.
func (c *Converter) ConvertJSON(rows [][]byte) (Result, error) {
	return c.convert(len(rows), func(st *state, i int) error {
		return st.decodeRow(rows[i])
	})
}

// getState returns an idle state, or a new one.
func (c *Converter) getState() (*state, error) {
	c.mu.Lock()
	if k := len(c.idle); k > 0 {
		st := c.idle[k-1]
		c.idle[k-1] = nil
		c.idle = c.idle[:k-1]
		c.mu.Unlock()
		return st, nil
	}
	c.mu.Unlock()
	return c.newState()
}

// putState keeps st for the next batch, unless maxIdleStates are kept. It
// lets go of the last message the scanner read (which may pin a whole fetch
// of the input's).
func (c *Converter) putState(st *state) {
	st.scanner.reset(nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.idle) < maxIdleStates {
		c.idle = append(c.idle, st)
	}
}

func (c *Converter) convert(n int, row func(st *state, i int) error) (Result, error) {
	st, err := c.getState()
	if err != nil {
		return Result{}, err
	}
	defer c.putState(st)
	st.begin(n, c.opts.Now())

	res := Result{SourceIndex: make([]int, 0, n)}
	good := 0
	for i := range n {
		st.rowNested, st.rowFolded, st.rowNTZ = 0, 0, 0
		if err := row(st, i); err != nil {
			st.root.truncate(good)
			res.RowErrors = append(res.RowErrors, rowError(i, err))
			continue
		}
		good++
		res.SourceIndex = append(res.SourceIndex, i)
		st.nested += st.rowNested
		st.folded += st.rowFolded
		st.ntzConverted += st.rowNTZ
	}
	rec, err := st.build(c.schema, good)
	if err != nil {
		return Result{}, err
	}
	res.Record = rec
	for _, r := range [...]struct {
		kind string
		n    int
	}{{ReconcileNestedToString, st.nested}, {ReconcileFieldNameCase, st.folded}, {ReconcileNTZFromZoned, st.ntzConverted}} {
		if r.n > 0 {
			if res.Reconciled == nil {
				res.Reconciled = map[string]int{}
			}
			res.Reconciled[r.kind] = r.n
		}
	}
	return res, nil
}

// pathError locates an error inside a row; segs is leaf first.
type pathError struct {
	segs []string
	err  error
}

func (e *pathError) Error() string { return fmt.Sprintf("%s: %v", e.path(), e.err) }
func (e *pathError) Unwrap() error { return e.err }

func (e *pathError) path() string {
	var b []byte
	for i := len(e.segs) - 1; i >= 0; i-- {
		s := e.segs[i]
		if len(b) > 0 && (s == "" || s[0] != '[') {
			b = append(b, '.')
		}
		b = append(b, s...)
	}
	return string(b)
}

// at prefixes a path segment (a field name or "[i]") to err's location.
func at(seg string, err error) error {
	if pe, ok := err.(*pathError); ok {
		pe.segs = append(pe.segs, seg)
		return pe
	}
	return &pathError{segs: []string{seg}, err: err}
}

func rowError(i int, err error) RowError {
	if pe, ok := err.(*pathError); ok {
		return RowError{Index: i, Column: pe.path(), Field: pe.segs[len(pe.segs)-1], Err: pe.err}
	}
	return RowError{Index: i, Err: err}
}

func (st *state) build(schema *arrow.Schema, rows int) (arrow.RecordBatch, error) {
	cols := make([]arrow.Array, len(st.root.fields))
	for i, f := range st.root.fields {
		d, err := f.build()
		if err != nil {
			return nil, fmt.Errorf("arrowconv: column %q: %w", st.root.names[i], err)
		}
		cols[i] = array.MakeFromData(d)
		d.Release()
	}
	rec := array.NewRecordBatch(schema, cols, int64(rows))
	for _, a := range cols {
		a.Release()
	}
	return rec, nil
}
