// Where the registry schemas of a batch come from: the message metadata
// (catalog.schema_metadata: metadataSchemas, registryschema.go) or the
// schema registry itself, by the id of each framed value (the output's
// schema_registry: registrySchemas). Either way the table is created and
// evolved from them by the same code (registryfit.go).

package tablewriter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// schemaSource gives the registry schema each row of a batch carries.
type schemaSource interface {
	// schemasOf reads the schemas of batch. An error holds the batch: the
	// registry could not be read (only ctx ends the wait). decodes, when
	// not nil, are batch's decodes, kept for its conversion.
	schemasOf(ctx context.Context, batch []Row, decodes *batchDecodes) (batchSchemas, error)
	// carries reports whether row i of batch carries a schema: its columns
	// then come from it, never from its values.
	carries(batch []Row, i int) bool
	// origin names the schema of row i: subject, version, schema id.
	origin(batch []Row, i int) string
	// where says where the schemas come from, for refusals.
	where() string
}

// RegistryDecoder decodes Schema Registry framed values for the output's
// schema_registry block (schemaregistry.Holder). It waits out the
// registry's faults itself (unreachable, 5xx, refused credentials: back-off,
// one explanation, a health reason): its errors are a value's own (not
// framed, an unknown schema id, a value that does not match its schema) or
// ctx's.
type RegistryDecoder interface {
	Decode(ctx context.Context, value []byte) (registry.Decoded, error)
}

// newSchemaSource is the schema source of cfg: the registry when
// Config.Registry is set, the metadata key when SchemaMetadata is, none
// otherwise.
func newSchemaSource(cfg Config) schemaSource {
	switch {
	case cfg.Registry != nil:
		return &registrySchemas{dec: cfg.Registry}
	case cfg.SchemaMetadata != "":
		return &metadataSchemas{key: cfg.SchemaMetadata}
	}
	return nil
}

func (a *authority) schemasOf(ctx context.Context, batch []Row, decodes *batchDecodes) (batchSchemas, error) {
	if a.src == nil {
		return batchSchemas{}, nil
	}
	return a.src.schemasOf(ctx, batch, decodes)
}

func (a *authority) carriesSchema(batch []Row, i int) bool {
	return a.src != nil && a.src.carries(batch, i)
}

func (a *authority) schemaOrigin(batch []Row, i int) string {
	if a.src == nil {
		return "the registry schema"
	}
	return a.src.origin(batch, i)
}

func (a *authority) schemaWhere() string {
	if a.src == nil {
		return ""
	}
	return a.src.where()
}

// registrySchemas is the schema source of the output's schema_registry: a
// framed value's schema is fetched from the registry by its id (through
// the decoder's cache) and mapped onto columns once per schema. The first
// value of each id in a batch is decoded to learn the schema's common form
// (a Protobuf schema's differs by message: the first value of each id and
// message-index array); the others are only read for their id (and index).
type registrySchemas struct {
	dec RegistryDecoder

	mu       sync.Mutex
	compiled map[*commonschema.Schema]*registrySchema
	// origins names each schema id met: subject, version.
	origins map[int]string
}

func (r *registrySchemas) carries(batch []Row, i int) bool {
	if i < 0 || i >= len(batch) {
		return false
	}
	_, ok := rowFramed(batch[i])
	return ok
}

func (r *registrySchemas) where() string { return "from the schema registry" }

func (r *registrySchemas) origin(batch []Row, i int) string {
	id, ok := rowFramed(batch[i])
	if !ok {
		return "the registry schema"
	}
	r.mu.Lock()
	o := r.origins[int(id)]
	r.mu.Unlock()
	if o != "" {
		return fmt.Sprintf("the registry schema of %s (schema id %d)", o, id)
	}
	return fmt.Sprintf("the registry schema (schema id %d)", id)
}

// schemasOf decodes the first value of each schema id of batch. A value
// that does not decode with its schema leaves its id for the next value of
// it (that row fails in conversion, with the codec's error); an id the
// registry does not know, or whose schema cannot be read, becomes a schema
// error, so that its rows fail alone with the registry's message. The
// values are decoded through decodes (batch's own when nil).
func (r *registrySchemas) schemasOf(ctx context.Context, batch []Row, decodes *batchDecodes) (batchSchemas, error) {
	if decodes == nil {
		decodes = newBatchDecodes(r.dec, batch)
	}
	var bs batchSchemas
	byID := map[uint32]int{}
	lastID, lastK := uint32(0), -1 // a batch is mostly runs of one id
	// byIndex holds the schema of each Protobuf id's message-index arrays
	// met (by their bytes): a message's values have its one schema, so
	// only the first is decoded (the Protobuf fast path reads the others
	// from their bytes, never decoding them).
	var byIndex map[uint32]map[string]int
	var scratch [8]int
	for i, row := range batch {
		id, ok := rowFramed(row)
		if !ok {
			bs.noSchema(i)
			continue
		}
		bs.withSchema(i, len(batch))
		if lastK >= 0 && id == lastID {
			bs.of[i] = lastK
			continue
		}
		if k, seen := byID[id]; seen {
			bs.of[i] = k
			lastID, lastK = id, k
			continue
		}
		var index []byte
		if known := byIndex[id]; known != nil {
			if index = messageIndexBytes(row, scratch[:0]); index != nil {
				if k, ok := known[string(index)]; ok {
					bs.of[i] = k
					continue
				}
			}
		}
		d, err := decodes.decode(ctx, i)
		var s *registrySchema
		switch {
		case err == nil:
			s = r.compile(d)
		case ctx.Err() != nil:
			return batchSchemas{}, fmt.Errorf("the schema registry could not be read: %w", ctx.Err())
		case schemaLevel(err):
			s = &registrySchema{err: err}
		default:
			bs.of[i] = -1 // the value's own fault: it fails in conversion
			continue
		}
		// Protobuf values of one id decode each, mostly to one schema
		// (compile's): it is one schema of the batch, fitted once.
		k := slices.Index(bs.schemas, s)
		if k < 0 {
			k = len(bs.schemas)
			bs.schemas = append(bs.schemas, s)
		}
		bs.of[i] = k
		if err != nil || d.Format != registry.Protobuf {
			byID[id] = k
			lastID, lastK = id, k
			continue
		}
		if index == nil {
			index = messageIndexBytes(row, scratch[:0])
		}
		if index != nil {
			if byIndex == nil {
				byIndex = map[uint32]map[string]int{}
			}
			if byIndex[id] == nil {
				byIndex[id] = map[string]int{}
			}
			byIndex[id][string(index)] = k
		}
	}
	return bs, nil
}

// messageIndexBytes is the message-index array of a framed Protobuf value
// (the bytes after the header), or nil when it does not read.
func messageIndexBytes(row Row, scratch []int) []byte {
	b, err := row.AsBytes()
	if err != nil || len(b) < registry.HeaderSize {
		return nil
	}
	body := b[registry.HeaderSize:]
	_, n, ok := registry.MessageIndex(body, scratch)
	if !ok {
		return nil
	}
	return body[:n]
}

// schemaLevel reports whether err concerns every value of its schema id
// (the registry does not know it, or its schema cannot be read), not one
// value.
func schemaLevel(err error) bool {
	var nf *registry.NotFoundError
	var se *registry.SchemaError
	var nfr *registry.NotFramedError
	return errors.As(err, &nf) || errors.As(err, &se) || errors.As(err, &nfr)
}

// maxCompiled bounds the schemas compiled; a bound met is cleared.
const maxCompiled = 256

// compile maps d's common schema onto columns, once per schema.
func (r *registrySchemas) compile(d registry.Decoded) *registrySchema {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.compiled[d.Common]; s != nil {
		return s
	}
	if r.compiled == nil || len(r.compiled) >= maxCompiled {
		r.compiled = map[*commonschema.Schema]*registrySchema{}
		r.origins = map[int]string{}
	}
	var s *registrySchema
	if d.Common == nil {
		s = &registrySchema{err: fmt.Errorf("schema id %d: the decoder gave no schema", d.ID)}
	} else {
		s = compileSchema(d.Common, nil)
	}
	r.compiled[d.Common] = s
	if d.Subject != "" {
		r.origins[d.ID] = strings.TrimSpace(fmt.Sprintf("subject %q version %d", d.Subject, d.Version))
	}
	return s
}
