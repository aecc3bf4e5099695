package workspace

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// viewStore holds the workspace's views. With a directory (the registry's,
// dir/_registry/views/) it persists every view as one JSON file, written
// as the registry writes tables (temporary file, fsync, rename), so an
// emulator restarted on its data directory keeps its views, as Unity
// Catalog does.
type viewStore struct {
	dir string // "" = memory only

	mu    sync.Mutex
	views map[string]View // key: NormalizeName(FullName)
}

// openViewStore opens the views persisted under dir (created with the
// first view); an empty dir gives a memory-only store.
func openViewStore(dir string) (*viewStore, error) {
	s := &viewStore{dir: dir, views: map[string]View{}}
	if dir == "" {
		return s, nil
	}
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return s, nil // created with the first view
	}
	err := readJSONFiles(dir, func(b []byte) error {
		v, err := decodeView(b)
		if err != nil {
			return err
		}
		s.views[v.FullName] = v
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("open views: %w", err)
	}
	return s, nil
}

func (s *viewStore) get(name string) (View, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.views[NormalizeName(name)]
	v.Columns = cloneColumns(v.Columns)
	return v, ok
}

// has reports whether a view is named name.
func (s *viewStore) has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.views[NormalizeName(name)]
	return ok
}

// list returns every view, sorted by name.
func (s *viewStore) list() []View {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]View, 0, len(s.views))
	for _, v := range s.views {
		v.Columns = cloneColumns(v.Columns)
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FullName < out[j].FullName })
	return out
}

// change runs fn with the view named name (ok: whether there is one) under
// the store's lock, and applies its answer: next is stored, del removes
// the view, a *sqlError changes nothing and is returned.
func (s *viewStore) change(name string, fn func(old View, ok bool) (next *View, del bool, serr *sqlError)) *sqlError {
	name = NormalizeName(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.views[name]
	next, del, serr := fn(old, ok)
	switch {
	case serr != nil:
		return serr
	case del:
		if err := s.unpersist(name); err != nil {
			return &sqlError{Class: "INTERNAL_ERROR", SQLState: "XX000", Code: "INTERNAL_ERROR", Msg: err.Error()}
		}
		delete(s.views, name)
	case next != nil:
		if err := s.persist(*next); err != nil {
			return &sqlError{Class: "INTERNAL_ERROR", SQLState: "XX000", Code: "INTERNAL_ERROR", Msg: err.Error()}
		}
		s.views[name] = *next
	}
	return nil
}

// file is the name, within s.dir, of the view name's file.
func (s *viewStore) file(name string) string { return url.PathEscape(name) + ".json" }

// persist writes v atomically. Callers hold s.mu.
func (s *viewStore) persist(v View) error {
	if s.dir == "" {
		return nil
	}
	b, err := encodeView(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("persist view: %w", err)
	}
	return WriteFileAtomic(s.dir, s.file(v.FullName), b, "persist view")
}

// unpersist removes a view's file. Callers hold s.mu.
func (s *viewStore) unpersist(name string) error {
	if s.dir == "" {
		return nil
	}
	if err := os.Remove(filepath.Join(s.dir, s.file(name))); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("drop view: %w", err)
	}
	return syncDir(s.dir, "drop view")
}

// storedView is the on-disk form of a View: its query as written (parsed
// again when loaded) and the columns it was defined with, as UC type_json.
type storedView struct {
	FullName   string            `json:"full_name"`
	TableID    string            `json:"table_id"`
	Source     string            `json:"source"`
	Definition string            `json:"view_definition"`
	Columns    []json.RawMessage `json:"columns"`
	Owner      string            `json:"owner,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
	UpdatedAt  time.Time         `json:"updated_at"`
}

func encodeView(v View) ([]byte, error) {
	s := storedView{FullName: v.FullName, TableID: v.TableID, Source: v.Source, Definition: v.Definition,
		Owner: v.Owner, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt}
	for _, c := range v.Columns {
		s.Columns = append(s.Columns, json.RawMessage(typemap.ColumnTypeJSON(c)))
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode view %s: %w", v.FullName, err)
	}
	return b, nil
}

func decodeView(b []byte) (View, error) {
	var s storedView
	if err := json.Unmarshal(b, &s); err != nil {
		return View{}, fmt.Errorf("decode view: %w", err)
	}
	q, serr := parseViewQuery(s.Definition)
	if serr != nil {
		return View{}, fmt.Errorf("decode view %s: its query: %w", s.FullName, serr)
	}
	v := View{FullName: NormalizeName(s.FullName), TableID: s.TableID, Source: s.Source, Definition: s.Definition,
		Owner: s.Owner, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, query: *q}
	for _, raw := range s.Columns {
		c, err := typemap.ParseColumnTypeJSON(string(raw))
		if err != nil {
			return View{}, fmt.Errorf("decode view %s: %w", s.FullName, err)
		}
		v.Columns = append(v.Columns, c)
	}
	return v, nil
}
