package registry

import (
	"strconv"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

// jsonCommonSchema describes, as a common schema, the values a JSON Schema
// admits:
//   - object with properties → OBJECT, in the order the schema lists them; a
//     property not in required is optional;
//   - object with only an additionalProperties schema → MAP of it;
//   - array → ARRAY of its items (ANY without one schema for every item);
//   - integer → INT64; number → FLOAT64; boolean → BOOLEAN; null → NULL;
//   - string → STRING, or by format: date-time → TIMESTAMP (MICROS, UTC: the
//     text carries a zone), date → DATE, uuid → UUID;
//   - a type list or anyOf/oneOf with null and one other → that one,
//     optional; with more → UNION (optional when null is one) of branches
//     named by title, else type, else place;
//   - $ref → what it names, in this schema or a reference; a schema that
//     contains itself, or says nothing of its type → ANY.
func jsonCommonSchema(docs *jsDocs, main *jsDoc) (commonschema.Schema, error) {
	w := jsSchemaWalker{docs: docs, stack: map[string]bool{}}
	name := ""
	if o, ok := main.root.(*jsObject); ok {
		name = o.str("title")
	}
	s, err := w.node(main, main.root, name)
	if err != nil {
		return s, err
	}
	return s, s.Validate()
}

type jsSchemaWalker struct {
	docs  *jsDocs
	stack map[string]bool
}

func (w jsSchemaWalker) node(doc *jsDoc, n any, name string) (commonschema.Schema, error) {
	s := commonschema.Schema{Name: name, Type: commonschema.Any}
	o, ok := n.(*jsObject)
	if !ok {
		return s, nil // true, false: anything or nothing
	}
	if ref, ok := o.m["$ref"].(string); ok {
		tdoc, target, key, err := w.docs.resolve(doc, ref)
		if err != nil {
			return s, err
		}
		if w.stack[key] {
			return s, nil // contains itself
		}
		w.stack[key] = true
		defer delete(w.stack, key)
		return w.node(tdoc, target, name)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if branches, ok := o.m[k].([]any); ok {
			return w.union(doc, branches, name)
		}
	}
	if all, ok := o.m["allOf"].([]any); ok && len(all) == 1 {
		return w.node(doc, all[0], name)
	}
	switch t := o.m["type"].(type) {
	case string:
		return w.typed(doc, o, t, name)
	case []any:
		var types []string
		optional := false
		for _, e := range t {
			if ts, _ := e.(string); ts == "null" {
				optional = true
			} else if ts != "" {
				types = append(types, ts)
			}
		}
		switch len(types) {
		case 0:
			s.Type = commonschema.Null
			return s, nil
		case 1:
			c, err := w.typed(doc, o, types[0], name)
			c.Optional = c.Optional || optional
			return c, err
		}
		s.Type, s.Optional = commonschema.Union, optional
		for _, ts := range types {
			c, err := w.typed(doc, o, ts, ts)
			if err != nil {
				return s, err
			}
			s.Children = append(s.Children, c)
		}
		return s, nil
	}
	// No type: what the keywords imply.
	switch {
	case o.m["properties"] != nil || o.m["additionalProperties"] != nil:
		return w.typed(doc, o, "object", name)
	case o.m["items"] != nil:
		return w.typed(doc, o, "array", name)
	case allStrings(o.m["enum"]) || isString(o.m["const"]):
		s.Type = commonschema.String
	}
	return s, nil
}

// union converts anyOf/oneOf branches.
func (w jsSchemaWalker) union(doc *jsDoc, branches []any, name string) (commonschema.Schema, error) {
	var kept []commonschema.Schema
	optional := false
	for i, b := range branches {
		c, err := w.node(doc, b, strconv.Itoa(i))
		if err != nil {
			return c, err
		}
		if c.Type == commonschema.Null {
			optional = true
			continue
		}
		if bo, ok := b.(*jsObject); ok {
			if n := bo.str("title"); n != "" {
				c.Name = n
			} else if n := bo.str("type"); n != "" {
				c.Name = n
			}
		}
		kept = append(kept, c)
	}
	switch len(kept) {
	case 0:
		return commonschema.Schema{Name: name, Type: commonschema.Null}, nil
	case 1:
		c := kept[0]
		c.Name, c.Optional = name, c.Optional || optional
		return c, nil
	}
	return commonschema.Schema{Name: name, Type: commonschema.Union, Optional: optional, Children: kept}, nil
}

// typed converts o read as JSON type t.
func (w jsSchemaWalker) typed(doc *jsDoc, o *jsObject, t, name string) (commonschema.Schema, error) {
	s := commonschema.Schema{Name: name}
	switch t {
	case "null":
		s.Type = commonschema.Null
	case "boolean":
		s.Type = commonschema.Boolean
	case "integer":
		s.Type = commonschema.Int64
	case "number":
		s.Type = commonschema.Float64
	case "string":
		switch o.str("format") {
		case "date-time":
			s.Type, s.Unit, s.AdjustToUTC = commonschema.Timestamp, commonschema.Micros, true
		case "date":
			s.Type = commonschema.Date
		case "uuid":
			s.Type = commonschema.UUID
		default:
			s.Type = commonschema.String
		}
	case "array":
		s.Type = commonschema.Array
		item := commonschema.Schema{Type: commonschema.Any}
		if items, ok := o.m["items"]; ok {
			if _, tuple := items.([]any); !tuple {
				var err error
				if item, err = w.node(doc, items, ""); err != nil {
					return s, err
				}
				item.Name = ""
			}
		}
		s.Children = []commonschema.Schema{item}
	case "object":
		props := o.obj("properties")
		if props == nil || len(props.keys) == 0 {
			if ap, ok := o.m["additionalProperties"].(*jsObject); ok {
				v, err := w.node(doc, ap, "")
				if err != nil {
					return s, err
				}
				v.Name = ""
				s.Type, s.Children = commonschema.Map, []commonschema.Schema{v}
				return s, nil
			}
			if props == nil {
				s.Type = commonschema.Any
				return s, nil
			}
		}
		required := map[string]bool{}
		if req, ok := o.m["required"].([]any); ok {
			for _, r := range req {
				if rs, ok := r.(string); ok {
					required[rs] = true
				}
			}
		}
		s.Type = commonschema.Object
		s.Children = make([]commonschema.Schema, 0, len(props.keys))
		for _, k := range props.keys {
			c, err := w.node(doc, props.m[k], k)
			if err != nil {
				return s, err
			}
			c.Name = k
			c.Optional = c.Optional || !required[k]
			s.Children = append(s.Children, c)
		}
	default:
		s.Type = commonschema.Any
	}
	return s, nil
}

func allStrings(v any) bool {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return false
	}
	for _, e := range list {
		if !isString(e) {
			return false
		}
	}
	return true
}

func isString(v any) bool {
	_, ok := v.(string)
	return ok
}
