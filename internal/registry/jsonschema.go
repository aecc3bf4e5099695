package registry

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/xeipuuv/gojsonschema"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

// jsonCodec decodes the JSON values written with one registry JSON Schema.
//
// The value is the JSON text read as encoding/json reads it with UseNumber:
// map[string]any, []any, string, json.Number, bool, nil. It is validated
// against the schema, as Redpanda Connect's processor "decodes and
// validates"; a value the schema refuses is an error naming the field. With
// json.coerce_data, values are first converted to the type the schema gives
// them where that is lossless (see jsonCoercer).
type jsonCodec struct {
	id        int
	docs      *jsDocs
	main      *jsDoc
	validator *gojsonschema.Schema
	common    *commonschema.Schema
	coerce    bool
}

// newJSONCodec reads s and its references (by reference name and $id) and
// compiles the validator over them.
func newJSONCodec(s Schema, o JSONOptions) (Codec, error) {
	docs := newJSDocs()
	var refs []*jsDoc
	if err := addJSONReferences(docs, s.References, &refs); err != nil {
		return nil, fmt.Errorf("schema %d: %w", s.ID, err)
	}
	main, err := docs.add("", s.Text)
	if err != nil {
		return nil, fmt.Errorf("schema %d: reading the JSON Schema: %w", s.ID, err)
	}
	if err := docs.checkRefs(); err != nil {
		return nil, fmt.Errorf("schema %d: %w", s.ID, err)
	}
	validator, err := compileJSONValidator(main, refs)
	if err != nil {
		return nil, fmt.Errorf("schema %d: compiling the JSON Schema: %w", s.ID, err)
	}
	common, err := jsonCommonSchema(docs, main)
	if err != nil {
		return nil, fmt.Errorf("schema %d: %w", s.ID, err)
	}
	return &jsonCodec{id: s.ID, docs: docs, main: main, validator: validator, common: &common, coerce: o.CoerceData}, nil
}

// addJSONReferences reads each reference, and theirs, into docs and refs.
func addJSONReferences(docs *jsDocs, list []Reference, refs *[]*jsDoc) error {
	for _, r := range list {
		if _, done := docs.byKey[r.Name]; done {
			continue
		}
		doc, err := docs.add(r.Name, r.Schema.Text)
		if err != nil {
			return fmt.Errorf("reading referenced JSON Schema %q (subject %q version %d): %w", r.Name, r.Schema.Subject, r.Schema.Version, err)
		}
		*refs = append(*refs, doc)
		if err := addJSONReferences(docs, r.Schema.References, refs); err != nil {
			return err
		}
	}
	return nil
}

// jsonSchemaBase is the base URL a schema without an absolute $id is given
// for the validator, which resolves every $ref to an absolute URL. The
// .invalid domain (RFC 2606) never resolves; checkRefs has made sure every
// $ref names a document the codec holds, so nothing is fetched.
const jsonSchemaBase = "https://schema-registry.invalid/schema.json"

// compileJSONValidator compiles main with refs pooled under the URLs main's
// $refs resolve to: a reference's own absolute $id, else its name resolved
// against main's $id (or jsonSchemaBase).
func compileJSONValidator(main *jsDoc, refs []*jsDoc) (*gojsonschema.Schema, error) {
	base, _ := url.Parse(jsonSchemaBase)
	plainMain := toPlain(main.root)
	if m, ok := plainMain.(map[string]any); ok {
		if id, _ := m["$id"].(string); absoluteURL(id) {
			base, _ = url.Parse(id)
		} else {
			m["$id"] = jsonSchemaBase
		}
	}
	loader := gojsonschema.NewSchemaLoader()
	for _, doc := range refs {
		plain := toPlain(doc.root)
		key := ""
		if m, ok := plain.(map[string]any); ok {
			if id, _ := m["$id"].(string); absoluteURL(id) {
				key = id
			}
		}
		if key == "" {
			u, err := url.Parse(doc.name)
			if err != nil {
				return nil, fmt.Errorf("reference name %q: %w", doc.name, err)
			}
			key = base.ResolveReference(u).String()
		}
		if err := loader.AddSchema(key, gojsonschema.NewGoLoader(plain)); err != nil {
			return nil, fmt.Errorf("referenced JSON Schema %q: %w", doc.name, err)
		}
	}
	return loader.Compile(gojsonschema.NewGoLoader(plainMain))
}

func absoluteURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.IsAbs() && u.Host != ""
}

// Decode reads the JSON value, coerces it with json.coerce_data, and
// validates it.
func (c *jsonCodec) Decode(body []byte) (any, *commonschema.Schema, error) {
	v, err := decodeJSONValue(body)
	if err != nil {
		return nil, nil, fmt.Errorf("schema %d: reading the JSON value: %w", c.id, err)
	}
	if c.coerce {
		v = jsonCoercer{docs: c.docs}.value(c.main, c.main.root, v, 0)
	}
	// v is already what gojsonschema validates (decodeJSONValue's maps,
	// slices, json.Numbers, strings, bools and nils; coercion keeps to
	// them), so the raw loader, not NewGoLoader, which writes v out as JSON
	// and parses it again per value.
	res, err := c.validator.Validate(gojsonschema.NewRawLoader(v))
	if err != nil {
		return nil, nil, fmt.Errorf("schema %d: validating the JSON value: %w", c.id, err)
	}
	if !res.Valid() {
		var msgs []string
		for i, e := range res.Errors() {
			if i == 3 {
				msgs = append(msgs, fmt.Sprintf("and %d more", len(res.Errors())-3))
				break
			}
			msgs = append(msgs, e.String())
		}
		return nil, nil, fmt.Errorf("schema %d: the value does not match the JSON Schema: %s", c.id, strings.Join(msgs, "; "))
	}
	return v, c.common, nil
}
