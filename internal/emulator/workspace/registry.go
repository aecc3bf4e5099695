// Package workspace is the emulator's Unity Catalog side: the registry of
// tables (columns, properties, tags, comments), the UC REST endpoints that
// describe them, the SQL Statement Execution endpoint that changes them, and
// temporary table credentials.
//
// The Zerobus side of the emulator (internal/emulator) reads table schemas
// from the Registry; it never changes them.
package workspace

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
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

// CatalogName returns the catalog part of FullName.
func (t Table) CatalogName() string { return namePart(t.FullName, 0) }

// SchemaName returns the schema part of FullName.
func (t Table) SchemaName() string { return namePart(t.FullName, 1) }

// Name returns the table part of FullName.
func (t Table) Name() string { return namePart(t.FullName, 2) }

func namePart(full string, i int) string {
	parts := strings.SplitN(full, ".", 3)
	if i < len(parts) {
		return parts[i]
	}
	return ""
}

// Column returns the column named name (case-insensitively, as Delta resolves
// column names) and its index, or -1.
func (t Table) Column(name string) (typemap.Column, int) {
	for i, c := range t.Columns {
		if strings.EqualFold(c.Name, name) {
			return c, i
		}
	}
	return typemap.Column{}, -1
}

// Clone returns a deep copy of t: no slice, map or nested type is shared.
func (t Table) Clone() Table {
	c := t
	c.Columns = cloneColumns(t.Columns)
	c.Properties = cloneMap(t.Properties)
	c.Tags = cloneMap(t.Tags)
	return c
}

func cloneMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cloneColumns(cols []typemap.Column) []typemap.Column {
	if cols == nil {
		return nil
	}
	out := make([]typemap.Column, len(cols))
	for i, c := range cols {
		c.Type = cloneType(c.Type)
		out[i] = c
	}
	return out
}

func cloneType(t typemap.Type) typemap.Type {
	if t.Elem != nil {
		e := cloneType(*t.Elem)
		t.Elem = &e
	}
	if t.Key != nil {
		k := cloneType(*t.Key)
		t.Key = &k
	}
	if t.Value != nil {
		v := cloneType(*t.Value)
		t.Value = &v
	}
	if t.Fields != nil {
		fields := make([]typemap.Field, len(t.Fields))
		for i, f := range t.Fields {
			f.Type = cloneType(f.Type)
			fields[i] = f
		}
		t.Fields = fields
	}
	return t
}

// NormalizeName lower-cases a catalog.schema.table name the way Unity Catalog
// stores it (UC object names are case-insensitive and kept in lower case).
func NormalizeName(fullName string) string { return strings.ToLower(fullName) }

// Registry holds the emulator's tables. It is safe for concurrent use. With a
// directory it persists every table as one JSON file under dir/_registry/
// (written to a temporary file, fsync'd and renamed, so a crash leaves either
// the old or the new version), so an emulator restarted on the same data
// directory keeps its tables.
type Registry struct {
	dir string // "" = memory only
	now func() time.Time

	mu     sync.RWMutex
	tables map[string]*Table // key: NormalizeName(FullName)

	// views are the views (views.go), persisted beside the tables under
	// dir/_registry/views/. Tables and views share one name space, so a
	// name is claimed under both locks, always mu first, then the views'
	// (Create, changeView): never the other way round.
	views *viewStore
}

// OpenRegistry opens (creating it if needed) the registry persisted under
// dir/_registry/. An empty dir gives a memory-only registry.
func OpenRegistry(dir string) (*Registry, error) {
	r := &Registry{now: time.Now, tables: map[string]*Table{}}
	if dir == "" {
		r.views, _ = openViewStore("")
		return r, nil
	}
	r.dir = filepath.Join(dir, "_registry")
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, fmt.Errorf("open registry: %w", err)
	}
	var err error
	if r.views, err = openViewStore(filepath.Join(r.dir, "views")); err != nil {
		return nil, fmt.Errorf("open registry: %w", err)
	}
	err = readJSONFiles(r.dir, func(b []byte) error {
		t, err := decodeTable(b)
		if err != nil {
			return err
		}
		r.tables[NormalizeName(t.FullName)] = &t
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("open registry: %w", err)
	}
	return r, nil
}

// readJSONFiles calls fn with the contents of every *.json file in dir,
// leaving out subdirectories and the temporary files of WriteFileAtomic:
// the loading of the registry's tables and views. An error names the file.
func readJSONFiles(dir string, fn func(b []byte) error) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".tmp-") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := fn(b); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// SetClock makes the registry stamp CreatedAt/UpdatedAt with now instead of
// time.Now (tests and the emulator's injectable clock use it).
func (r *Registry) SetClock(now func() time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = now
}

// Get returns a deep copy of the table named fullName (case-insensitive).
func (r *Registry) Get(fullName string) (Table, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.tables[NormalizeName(fullName)]
	if !ok {
		return Table{}, false
	}
	return t.Clone(), true
}

// GetByID returns a deep copy of the table whose TableID is id.
func (r *Registry) GetByID(id string) (Table, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, t := range r.tables {
		if t.TableID == id {
			return t.Clone(), true
		}
	}
	return Table{}, false
}

// List returns deep copies of all tables, sorted by full name.
func (r *Registry) List() []Table {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Table, 0, len(r.tables))
	for _, t := range r.tables {
		out = append(out, t.Clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FullName < out[j].FullName })
	return out
}

// Create adds a table. FullName must have three non-empty parts; it is stored
// lower-cased as UC does. Create assigns a TableID (unless set), TableType
// MANAGED (unless set), Version 1 and CreatedAt/UpdatedAt. It returns
// ErrAlreadyExists (wrapped) when the name is taken, by a table or a view:
// one name space (Databricks error class TABLE_OR_VIEW_ALREADY_EXISTS,
// "Cannot create table or view … because it already exists",
// https://docs.databricks.com/en/error-messages/error-classes.html).
func (r *Registry) Create(t Table) (Table, error) {
	if _, _, _, err := typemap.ParseTableName(t.FullName); err != nil {
		return Table{}, fmt.Errorf("create table: %w", err)
	}
	if len(t.Columns) == 0 {
		return Table{}, fmt.Errorf("create table %s: no columns", t.FullName)
	}
	t = t.Clone()
	t.FullName = NormalizeName(t.FullName)
	if t.TableID == "" {
		t.TableID = NewUUID()
	}
	if t.TableType == "" {
		t.TableType = "MANAGED"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now().UTC()
	t.Version = 1
	t.CreatedAt, t.UpdatedAt = now, now
	if _, ok := r.tables[t.FullName]; ok {
		return Table{}, fmt.Errorf("create table %s: %w", t.FullName, ErrAlreadyExists)
	}
	if r.views.has(t.FullName) { // under mu: no view can claim it meanwhile
		return Table{}, fmt.Errorf("create table %s: a view of that name: %w", t.FullName, ErrAlreadyExists)
	}
	if err := r.persist(t); err != nil {
		return Table{}, fmt.Errorf("create table %s: %w", t.FullName, err)
	}
	r.tables[t.FullName] = &t
	return t.Clone(), nil
}

// changeView is viewStore.change with the tables held still: fn is told
// whether a table has the name, and no table can take it before fn's
// answer is stored. A view's creation goes through it, so that a CREATE
// TABLE and a CREATE VIEW of one name cannot both succeed (see Create).
func (r *Registry) changeView(name string, fn func(table bool, old View, ok bool) (next *View, del bool, serr *sqlError)) *sqlError {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, table := r.tables[NormalizeName(name)]
	return r.views.change(name, func(old View, ok bool) (*View, bool, *sqlError) { return fn(table, old, ok) })
}

// Update applies fn to a copy of the table and stores the result if fn
// returns nil. Version increases by one when the columns or the properties
// changed; UpdatedAt moves when anything changed. FullName, TableID and
// CreatedAt cannot be changed by fn. A missing table gives ErrNotFound
// (wrapped); an error from fn is returned unchanged and nothing is stored.
func (r *Registry) Update(fullName string, fn func(*Table) error) (Table, error) {
	key := NormalizeName(fullName)
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.tables[key]
	if !ok {
		return Table{}, fmt.Errorf("update table %s: %w", fullName, ErrNotFound)
	}
	next := cur.Clone()
	if err := fn(&next); err != nil {
		return Table{}, err
	}
	next.FullName, next.TableID, next.CreatedAt = cur.FullName, cur.TableID, cur.CreatedAt
	next.Version, next.UpdatedAt = cur.Version, cur.UpdatedAt
	schemaChanged := !reflect.DeepEqual(next.Columns, cur.Columns) || !maps.Equal(next.Properties, cur.Properties)
	if !schemaChanged && maps.Equal(next.Tags, cur.Tags) && next.Comment == cur.Comment &&
		next.Owner == cur.Owner && next.TableType == cur.TableType {
		return next, nil
	}
	if schemaChanged {
		next.Version++
	}
	next.UpdatedAt = r.now().UTC()
	if err := r.persist(next); err != nil {
		return Table{}, fmt.Errorf("update table %s: %w", fullName, err)
	}
	r.tables[key] = &next
	return next.Clone(), nil
}

// Drop removes the table named fullName (case-insensitive) and returns it as
// it was. A table created later under the same name is a new table: a new
// TableID, Version 1 again, nothing of the dropped one (as Unity Catalog
// does: a dropped table keeps its id, under which UNDROP TABLE WITH ID can
// still recover it, and several dropped tables of one name are told apart by
// it; Databricks SQL reference, UNDROP TABLE). A missing table gives
// ErrNotFound (wrapped). With a directory the table's file is removed
// (and the directory fsync'd) before the table leaves the registry.
func (r *Registry) Drop(fullName string) (Table, error) {
	key := NormalizeName(fullName)
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.tables[key]
	if !ok {
		return Table{}, fmt.Errorf("drop table %s: %w", fullName, ErrNotFound)
	}
	if err := r.unpersist(cur.FullName); err != nil {
		return Table{}, fmt.Errorf("drop table %s: %w", fullName, err)
	}
	delete(r.tables, key)
	return cur.Clone(), nil
}

// unpersist removes the stored file of the table fullName. Callers hold r.mu.
func (r *Registry) unpersist(fullName string) error {
	if r.dir == "" {
		return nil
	}
	if err := os.Remove(filepath.Join(r.dir, url.PathEscape(fullName)+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unpersist: %w", err)
	}
	return syncDir(r.dir, "unpersist")
}

// syncDir fsyncs the directory dir, so that a file created, renamed or
// removed in it stays so after a crash; what prefixes the error.
func syncDir(dir, what string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("%s: open dir: %w", what, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("%s: fsync dir: %w", what, err)
	}
	return nil
}

// persist writes t atomically: temp file, fsync, rename, fsync of the
// directory. Callers hold r.mu.
func (r *Registry) persist(t Table) error {
	if r.dir == "" {
		return nil
	}
	b, err := encodeTable(t)
	if err != nil {
		return err
	}
	return WriteFileAtomic(r.dir, url.PathEscape(t.FullName)+".json", b, "persist")
}

// WriteFileAtomic writes b as dir/name so that a crash leaves either the old
// or the new file: a temporary file in dir, fsync, rename, fsync of dir.
// what prefixes the errors. The registry's tables and views and the
// emulator's schema registry use it.
func WriteFileAtomic(dir, name string, b []byte, what string) error {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("%s: write %s: %w", what, tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("%s: fsync %s: %w", what, tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: close %s: %w", what, tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("%s: rename: %w", what, err)
	}
	return syncDir(dir, what)
}

// storedTable is the on-disk form of a Table. Columns are kept as UC
// type_json (Spark StructField JSON), a stable public format that keeps
// nested nullability and comments.
type storedTable struct {
	FullName   string            `json:"full_name"`
	TableID    string            `json:"table_id"`
	TableType  string            `json:"table_type"`
	Columns    []json.RawMessage `json:"columns"`
	Properties map[string]string `json:"properties,omitempty"`
	Tags       map[string]string `json:"tags,omitempty"`
	Comment    string            `json:"comment,omitempty"`
	Owner      string            `json:"owner,omitempty"`
	Version    int64             `json:"version"`
	CreatedAt  time.Time         `json:"created_at"`
	UpdatedAt  time.Time         `json:"updated_at"`
}

func encodeTable(t Table) ([]byte, error) {
	s := storedTable{
		FullName: t.FullName, TableID: t.TableID, TableType: t.TableType,
		Properties: t.Properties, Tags: t.Tags, Comment: t.Comment, Owner: t.Owner,
		Version: t.Version, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
	}
	for _, c := range t.Columns {
		s.Columns = append(s.Columns, json.RawMessage(typemap.ColumnTypeJSON(c)))
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode table %s: %w", t.FullName, err)
	}
	return b, nil
}

func decodeTable(b []byte) (Table, error) {
	var s storedTable
	if err := json.Unmarshal(b, &s); err != nil {
		return Table{}, fmt.Errorf("decode table: %w", err)
	}
	t := Table{
		FullName: s.FullName, TableID: s.TableID, TableType: s.TableType,
		Properties: s.Properties, Tags: s.Tags, Comment: s.Comment, Owner: s.Owner,
		Version: s.Version, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
	}
	if t.Properties == nil {
		t.Properties = map[string]string{}
	}
	if t.Tags == nil {
		t.Tags = map[string]string{}
	}
	for _, raw := range s.Columns {
		c, err := typemap.ParseColumnTypeJSON(string(raw))
		if err != nil {
			return Table{}, fmt.Errorf("decode table %s: %w", s.FullName, err)
		}
		t.Columns = append(t.Columns, c)
	}
	return t, nil
}

// NewUUID returns a random (version 4) UUID.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
