// The registry schemas a batch carries (Config.SchemaMetadata, the
// output's catalog.schema_metadata): read from each message's metadata, as
// schema_registry_decode stores them, parsed once per fingerprint, and
// mapped onto columns (typemap.FromCommonSchema). What the table does with
// them is registryfit.go.

package tablewriter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// ErrRegistrySchema is the class of a row refused because its table cannot
// take a field of the registry schema it carries.
var ErrRegistrySchema = errors.New("the table cannot take the registry schema")

// The metadata schema_registry_decode sets beside the schema, named in
// refusals.
const (
	MetaSchemaID      = "schema_id"
	MetaSchemaSubject = "schema_subject"
	MetaSchemaVersion = "schema_version"
)

// metaRow is a row with metadata: *service.Message.
type metaRow interface {
	MetaGetMut(key string) (any, bool)
}

// registryField is a top-level field of a registry schema as a column.
type registryField struct {
	name     string // as the schema names it
	column   string // its column name (typemap.SafeIdentifier)
	t        typemap.Type
	nullable bool
	err      error // why the field has no column type; t is unset then
}

// registrySchema is a parsed registry schema: its fields as columns, or why
// it cannot be a row at all. Shared by every batch that carries it; never
// changed once made.
type registrySchema struct {
	fields []registryField
	err    error
}

// compileSchema maps a parsed schema (err: why it could not be parsed) onto
// its columns.
func compileSchema(s *commonschema.Schema, err error) *registrySchema {
	if err != nil {
		return &registrySchema{err: err}
	}
	if s.Type != commonschema.Object {
		return &registrySchema{err: fmt.Errorf("the schema is a %v, not a record: a table row needs named fields", s.Type)}
	}
	rs := &registrySchema{}
	seen := map[string]string{}
	for i := range s.Children {
		c := &s.Children[i]
		f := registryField{name: c.Name, column: typemap.SafeIdentifier(c.Name)}
		key := strings.ToLower(f.column)
		if prev, dup := seen[key]; dup {
			return &registrySchema{err: fmt.Errorf("fields %q and %q are one column %q under the column-name rule", prev, c.Name, f.column)}
		}
		seen[key] = c.Name
		f.t, f.nullable, f.err = typemap.FromCommonSchema(c)
		if errors.Is(f.err, typemap.ErrNullOnly) {
			continue // always null: no column, as for an inferred field
		}
		rs.fields = append(rs.fields, f)
	}
	return rs
}

// maxCachedSchemas bounds the parsed schemas a writer keeps: a topic has a
// handful of schema versions; a bound met is cleared and parsed again.
const maxCachedSchemas = 256

// schemaCache holds parsed registry schemas by fingerprint, so that a batch
// parses each of its schemas once, not once per message.
//
// The fingerprint is the one the stored schema carries (schema_registry_decode
// computes it as benthos does). A schema a mapping rewrote but whose
// fingerprint it kept (config/examples/debezium.yaml rewrites Debezium's
// envelope schema into the row's) must not be taken for the original. So a
// schema is cached under its fingerprint only when that is its content's,
// checked when it is parsed, and a hit is taken only when the value's
// top-level fields (names and types) are the cached schema's, a check that
// costs no allocation. A schema that fails either is parsed for each message,
// and said once (stale).
type schemaCache struct {
	mu sync.Mutex
	m  map[string]cachedSchema
	// stale, when set, is told once per fingerprint of a schema whose
	// content is not what its fingerprint says.
	stale  func(claimed, actual string)
	warned map[string]bool
}

// cachedSchema is a parsed schema and its top-level fields as stored.
type cachedSchema struct {
	s   *registrySchema
	top []fieldSig
}

// fieldSig is a top-level field's name and type as the stored schema
// spells them.
type fieldSig struct{ name, typ string }

// topFields reads the top-level fields of a stored schema (nil if it has
// none or is not a map).
func topFields(v any) []fieldSig {
	m, _ := v.(map[string]any)
	children, _ := m["children"].([]any)
	out := make([]fieldSig, 0, len(children))
	for _, c := range children {
		cm, _ := c.(map[string]any)
		name, _ := cm["name"].(string)
		typ, _ := cm["type"].(string)
		out = append(out, fieldSig{name, typ})
	}
	return out
}

// sameTop reports whether the stored schema v has exactly the top-level
// fields top.
func sameTop(v map[string]any, top []fieldSig) bool {
	children, _ := v["children"].([]any)
	if len(children) != len(top) {
		return false
	}
	for i, c := range children {
		cm, _ := c.(map[string]any)
		if name, _ := cm["name"].(string); name != top[i].name {
			return false
		}
		if typ, _ := cm["type"].(string); typ != top[i].typ {
			return false
		}
	}
	return true
}

// get returns the parsed schema of metadata value v: the serialised common
// schema (a map, as schema_registry_decode stores it) or its JSON text (a
// string or bytes, as a metadata value read back from a Kafka header is).
func (c *schemaCache) get(v any) *registrySchema {
	var key string
	m, claimed := v.(map[string]any) // claimed: key is a fingerprint the value claims, not the value itself
	switch x := v.(type) {
	case map[string]any:
		key, _ = x["fingerprint"].(string)
	case string:
		key = x
	case []byte:
		key = string(x)
	}
	if key != "" {
		c.mu.Lock()
		e, ok := c.m[key]
		c.mu.Unlock()
		if ok && (!claimed || sameTop(m, e.top)) {
			return e.s
		}
	}
	s, actual := parseSchemaValue(v, claimed && key != "")
	if key == "" {
		return s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if claimed && actual != key {
		if c.stale != nil && actual != "" && !c.warned[key] {
			if c.warned == nil || len(c.warned) >= maxCachedSchemas {
				c.warned = map[string]bool{}
			}
			c.warned[key] = true
			c.stale(key, actual)
		}
		return s
	}
	if c.m == nil || len(c.m) >= maxCachedSchemas {
		c.m = map[string]cachedSchema{}
	}
	e := cachedSchema{s: s}
	if claimed {
		e.top = topFields(m)
	}
	c.m[key] = e
	return s
}

// shortFingerprint is a fingerprint's first 12 hex digits, for a log line.
func shortFingerprint(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

// parseSchemaValue parses a stored schema and, with fingerprint, returns its
// content's fingerprint too ("" when it could not be parsed).
func parseSchemaValue(v any, fingerprint bool) (*registrySchema, string) {
	var text []byte
	switch x := v.(type) {
	case string:
		text = []byte(x)
	case []byte:
		text = x
	}
	if text != nil {
		d := json.NewDecoder(bytes.NewReader(text))
		d.UseNumber()
		var decoded any
		if err := d.Decode(&decoded); err != nil {
			return &registrySchema{err: fmt.Errorf("not a serialised common schema: %w", err)}, ""
		}
		v = decoded
	}
	s, err := commonschema.Parse(v)
	fp := ""
	if err == nil && fingerprint {
		fp = s.Fingerprint()
	}
	return compileSchema(&s, err), fp
}

// batchSchemas are the registry schemas of a batch: the distinct ones, and
// each row's (an index into schemas, -1 for a row without one).
type batchSchemas struct {
	schemas []*registrySchema
	of      []int
}

// noSchema marks row i as carrying no registry schema (of stays nil while no
// row of the batch has one).
func (b *batchSchemas) noSchema(i int) {
	if b.of != nil {
		b.of[i] = -1
	}
}

// withSchema readies of for row i of n, the first row with a schema marking
// every row before it as without one.
func (b *batchSchemas) withSchema(i, n int) {
	if b.of == nil {
		b.of = make([]int, n)
		for k := range i {
			b.of[k] = -1
		}
	}
}

// firstOf is the first row of schema k.
func (b batchSchemas) firstOf(k int) int {
	return slices.Index(b.of, k)
}

func (b batchSchemas) rowsOf(k int) []int {
	var out []int
	for i, s := range b.of {
		if s == k {
			out = append(out, i)
		}
	}
	return out
}

// metadataSchemas is the schema source of catalog.schema_metadata: each
// message carries its schema in its metadata under key, as
// schema_registry_decode stores it.
type metadataSchemas struct {
	key     string
	schemas schemaCache
}

// schemaValue is the registry schema row i of batch carries in its metadata.
func (a *metadataSchemas) schemaValue(batch []Row, i int) (any, bool) {
	if a.key == "" || i < 0 || i >= len(batch) {
		return nil, false
	}
	m, ok := batch[i].(metaRow)
	if !ok {
		return nil, false
	}
	return m.MetaGetMut(a.key)
}

func (a *metadataSchemas) carries(batch []Row, i int) bool {
	_, ok := a.schemaValue(batch, i)
	return ok
}

func (a *metadataSchemas) where() string { return fmt.Sprintf("in metadata %q", a.key) }

// schemasOf reads the registry schemas of batch from its metadata: never
// an error (the metadata is there or not).
func (a *metadataSchemas) schemasOf(_ context.Context, batch []Row, _ *batchDecodes) (batchSchemas, error) {
	var bs batchSchemas
	// The rows of a batch mostly carry one schema: a row whose schema has
	// the previous row's fingerprint and top-level fields (the check
	// schemaCache makes of a hit: a rewritten schema may keep the
	// fingerprint) takes its index without the cache. The fields are the
	// same without a look when the row's schema is the previous row's
	// stored value itself, as schema_registry_decode shares one per schema
	// (plugin/schemaregistry's serialised).
	lastFP, last := "", -1
	var lastTop []fieldSig
	var lastChildren []any
	for i := range batch {
		v, ok := a.schemaValue(batch, i)
		if !ok {
			bs.noSchema(i)
			continue
		}
		bs.withSchema(i, len(batch))
		fp := ""
		var children []any
		m, _ := v.(map[string]any)
		if m != nil {
			fp, _ = m["fingerprint"].(string)
			children, _ = m["children"].([]any)
		}
		if fp != "" && fp == lastFP && (sameSlice(children, lastChildren) || sameTop(m, lastTop)) {
			bs.of[i] = last
			continue
		}
		s := a.schemas.get(v)
		k := slices.Index(bs.schemas, s)
		if k < 0 {
			k = len(bs.schemas)
			bs.schemas = append(bs.schemas, s)
		}
		bs.of[i] = k
		lastFP, last, lastTop, lastChildren = fp, k, nil, children
		if fp != "" {
			lastTop = topFields(m)
		}
	}
	return bs, nil
}

// sameSlice reports whether a and b are one non-empty slice: the same
// backing array and length.
func sameSlice(a, b []any) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}

// schemaOrigin names the registry schema row i carries, from the metadata
// schema_registry_decode sets beside it: `subject "orders-value" version 2
// (schema id 7)`, with what of it is there.
func (a *metadataSchemas) origin(batch []Row, i int) string {
	m, ok := batch[i].(metaRow)
	if !ok {
		return fmt.Sprintf("the registry schema in metadata %q", a.key)
	}
	get := func(k string) string {
		v, ok := m.MetaGetMut(k)
		if !ok || v == nil {
			return ""
		}
		return fmt.Sprint(v)
	}
	subject, version, id := get(MetaSchemaSubject), get(MetaSchemaVersion), get(MetaSchemaID)
	var parts []string
	if subject != "" {
		parts = append(parts, fmt.Sprintf("subject %q", subject))
	}
	if version != "" {
		parts = append(parts, "version "+version)
	}
	s := "the registry schema"
	if len(parts) > 0 {
		s += " of " + strings.Join(parts, " ")
	}
	if id != "" {
		s += " (schema id " + id + ")"
	}
	return s
}
