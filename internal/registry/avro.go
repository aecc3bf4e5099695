package registry

import (
	"fmt"

	"github.com/twmb/avro"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

// avroCodec decodes the Avro values written with one registry schema.
//
// Values come out in Redpanda Connect's schema_registry_decode shapes
// (https://docs.redpanda.com/redpanda-connect/components/processors/schema_registry_decode/):
// records and maps as map[string]any, arrays as []any, int as int32, long as
// int64, float as float32, double as float64, bytes and fixed as []byte, enums
// as their symbol. A union's value is Avro JSON's {"branch": value} (the
// branch's full name for a named type, its type name otherwise), or the bare
// value with avro.raw_unions; null is nil either way.
//
// With avro.preserve_logical_types, logical types come out as what they mean
// (see avroLogicalTypes); without it, as their underlying Avro values.
type avroCodec struct {
	id     int
	schema *avro.Schema
	common *commonschema.Schema
	opts   []avro.Opt
}

// newAvroCodec is NewAvroCodec's codec.
func newAvroCodec(s Schema, o AvroOptions) (Codec, error) {
	c, _, err := NewAvroCodec(s, o)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// NewAvroCodec makes the codec of the Avro schema s, as NewCodec does, and
// returns with it the schema's tree (avro.Schema's Root, every named type
// its references define expanded in place): what
// arrowconv.Converter.CompileAvro matches to a table's columns for the Avro
// fast path. Both come from one parse of s: s's references, depth first,
// into one schema cache, and then s itself, so that the named types the
// references define resolve.
func NewAvroCodec(s Schema, o AvroOptions) (Codec, *avro.SchemaNode, error) {
	parsed, err := parseAvro(s, avroLogicalTypes(o))
	if err != nil {
		return nil, nil, err
	}
	root := parsed.Root()
	tree := root.ExpandReferences()
	common, err := avroCommonSchema(tree, root.Name, o)
	if err != nil {
		return nil, nil, fmt.Errorf("schema %d: %w", s.ID, err)
	}
	c := &avroCodec{id: s.ID, schema: parsed, common: &common}
	if !o.RawUnions {
		c.opts = []avro.Opt{avro.TaggedUnions()}
	}
	return c, tree, nil
}

// parseAvro parses s after its references, with the custom types given.
func parseAvro(s Schema, custom []avro.SchemaOpt) (*avro.Schema, error) {
	var cache avro.SchemaCache
	seen := map[string]bool{}
	if err := parseAvroReferences(&cache, s.References, custom, seen); err != nil {
		return nil, fmt.Errorf("schema %d: %w", s.ID, err)
	}
	parsed, err := cache.Parse(s.Text, custom...)
	if err != nil {
		return nil, fmt.Errorf("schema %d: parsing the Avro schema: %w", s.ID, err)
	}
	return parsed, nil
}

// parseAvroReferences parses each reference after its own references. A
// schema reached twice (a diamond) is parsed once: parsing it again would
// define its named types twice.
func parseAvroReferences(cache *avro.SchemaCache, refs []Reference, custom []avro.SchemaOpt, seen map[string]bool) error {
	for _, r := range refs {
		if seen[r.Schema.Text] {
			continue
		}
		seen[r.Schema.Text] = true
		if err := parseAvroReferences(cache, r.Schema.References, custom, seen); err != nil {
			return err
		}
		if _, err := cache.Parse(r.Schema.Text, custom...); err != nil {
			return fmt.Errorf("parsing referenced Avro schema %q (subject %q version %d): %w", r.Name, r.Schema.Subject, r.Schema.Version, err)
		}
	}
	return nil
}

// Decode decodes one Avro value. Bytes left after the value mean it was not
// written with this schema, and are an error.
func (c *avroCodec) Decode(body []byte) (any, *commonschema.Schema, error) {
	var v any
	rest, err := c.schema.Decode(body, &v, c.opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("schema %d: decoding the Avro value: %w", c.id, err)
	}
	if len(rest) != 0 {
		return nil, nil, fmt.Errorf("schema %d: %d bytes left after the Avro value: it was not written with this schema", c.id, len(rest))
	}
	return v, c.common, nil
}
