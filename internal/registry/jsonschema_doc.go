package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
)

// jsObject is a JSON object that keeps its keys' order: a JSON Schema's
// properties become a table's columns in the order the schema lists them.
type jsObject struct {
	keys []string
	m    map[string]any
	// types are the scalar types its "type" allows, read once as it is
	// parsed: json.coerce_data asks them of every value it meets.
	types jsTypes
}

func (o *jsObject) get(k string) (any, bool) {
	v, ok := o.m[k]
	return v, ok
}

func (o *jsObject) str(k string) string {
	s, _ := o.m[k].(string)
	return s
}

func (o *jsObject) obj(k string) *jsObject {
	v, _ := o.m[k].(*jsObject)
	return v
}

// parseOrderedJSON reads one JSON document: objects as *jsObject, arrays as
// []any, numbers as json.Number.
func parseOrderedJSON(text string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	v, err := readOrdered(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("text after the JSON document")
	}
	return v, nil
}

func readOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &jsObject{m: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := readOrdered(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := o.m[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.m[k] = v
			}
			_, err := dec.Token() // }
			o.types = readJSTypes(o.m["type"])
			return o, err
		case '[':
			list := []any{}
			for dec.More() {
				v, err := readOrdered(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token() // ]
			return list, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

// jsDoc is one schema document: the registry schema or one it references.
type jsDoc struct {
	name string // the reference name; "" for the registry schema itself
	base *url.URL
	root any
}

// jsDocs are the documents a schema's $refs may name, keyed by reference name
// and by $id.
type jsDocs struct {
	byKey map[string]*jsDoc
}

func newJSDocs() *jsDocs { return &jsDocs{byKey: map[string]*jsDoc{}} }

// add parses text as the document called name.
func (d *jsDocs) add(name, text string) (*jsDoc, error) {
	root, err := parseOrderedJSON(text)
	if err != nil {
		return nil, err
	}
	doc := &jsDoc{name: name, root: root}
	if o, ok := root.(*jsObject); ok {
		if id := o.str("$id"); id != "" {
			if u, err := url.Parse(id); err == nil {
				doc.base = u
				d.byKey[strings.TrimSuffix(id, "#")] = doc
			}
		}
	}
	if doc.base == nil && name != "" {
		doc.base, _ = url.Parse(name)
	}
	d.byKey[name] = doc
	return doc, nil
}

// resolve finds what ref names, seen from document from: the document part
// by reference name, by $id, or relative to from's $id; the fragment as a
// JSON pointer. key identifies the target, for cycle checks.
func (d *jsDocs) resolve(from *jsDoc, ref string) (doc *jsDoc, node any, key string, err error) {
	docPart, frag, _ := strings.Cut(ref, "#")
	doc = from
	if docPart != "" {
		doc = d.byKey[docPart]
		if doc == nil && from.base != nil {
			if u, perr := url.Parse(docPart); perr == nil {
				doc = d.byKey[from.base.ResolveReference(u).String()]
			}
		}
		if doc == nil {
			return nil, nil, "", fmt.Errorf("$ref %q: no reference of the schema is named %q", ref, docPart)
		}
	}
	node, err = jsonPointer(doc.root, frag)
	if err != nil {
		return nil, nil, "", fmt.Errorf("$ref %q: %w", ref, err)
	}
	return doc, node, doc.name + "#" + frag, nil
}

// jsonPointer follows an RFC 6901 pointer ("" or "/a/b") from root.
func jsonPointer(root any, ptr string) (any, error) {
	if ptr == "" {
		return root, nil
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, fmt.Errorf("only JSON pointer fragments (#/...) are supported, not %q", ptr)
	}
	cur := root
	for _, part := range strings.Split(ptr[1:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		if p, err := url.PathUnescape(part); err == nil {
			part = p
		}
		switch c := cur.(type) {
		case *jsObject:
			v, ok := c.get(part)
			if !ok {
				return nil, fmt.Errorf("%q is not in the schema", ptr)
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("%q is not in the schema", ptr)
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("%q is not in the schema", ptr)
		}
	}
	return cur, nil
}

// checkRefs walks every subschema of every document and resolves each $ref,
// so that a schema naming a document it was not given fails when the codec
// is made, and the validator never goes looking for one over the network.
func (d *jsDocs) checkRefs() error {
	for _, doc := range d.byKey {
		if err := d.checkNode(doc, doc.root); err != nil {
			return err
		}
	}
	return nil
}

func (d *jsDocs) checkNode(doc *jsDoc, n any) error {
	switch v := n.(type) {
	case *jsObject:
		if ref, ok := v.m["$ref"].(string); ok {
			if _, _, _, err := d.resolve(doc, ref); err != nil {
				return err
			}
		}
		for _, k := range v.keys {
			if k == "enum" || k == "const" || k == "default" || k == "examples" {
				continue // values, not schemas
			}
			if err := d.checkNode(doc, v.m[k]); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range v {
			if err := d.checkNode(doc, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// toPlain converts an ordered document back to plain maps, for the
// validator.
func toPlain(n any) any {
	switch v := n.(type) {
	case *jsObject:
		m := make(map[string]any, len(v.keys))
		for _, k := range v.keys {
			m[k] = toPlain(v.m[k])
		}
		return m
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = toPlain(e)
		}
		return out
	}
	return n
}

// decodeJSONValue reads one JSON value with json.Number numbers; text after
// it is an error.
func decodeJSONValue(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("text after the JSON value")
	}
	return v, nil
}
