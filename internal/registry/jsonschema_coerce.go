package registry

import (
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
)

// jsonCoercer applies json.coerce_data: where a value's JSON type is not one
// the schema allows but converts to one without loss, it is converted:
//   - a string holding an integer → integer, a number → number, "true" or
//     "false" → boolean, where the schema wants that type;
//   - a number or boolean → its text, where the schema wants a string only.
//
// Objects, arrays, $refs, allOf, and an anyOf or oneOf of null and one other
// schema are followed; other anyOf and oneOf are not (the branch is
// ambiguous), nor is a value that already has an allowed type.
type jsonCoercer struct {
	docs *jsDocs
}

// maxCoerceRefs bounds $ref hops at one value: a $ref cycle that never
// reaches a type stops there.
const maxCoerceRefs = 32

func (c jsonCoercer) value(doc *jsDoc, schema any, v any, hops int) any {
	o, ok := schema.(*jsObject)
	if !ok {
		return v
	}
	if ref, ok := o.m["$ref"].(string); ok && hops < maxCoerceRefs {
		if tdoc, target, _, err := c.docs.resolve(doc, ref); err == nil {
			return c.value(tdoc, target, v, hops+1)
		}
		return v
	}
	if all, ok := o.m["allOf"].([]any); ok {
		for _, s := range all {
			v = c.value(doc, s, v, hops)
		}
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if branches, ok := o.m[k].([]any); ok && v != nil {
			if only := nonNullBranch(branches); only != nil {
				v = c.value(doc, only, v, hops)
			}
		}
	}
	types := jsonTypes(o)
	v = coerceScalar(v, types)
	switch x := v.(type) {
	case map[string]any:
		props := o.obj("properties")
		extra := o.m["additionalProperties"]
		for k, e := range x {
			if props != nil {
				if ps, ok := props.get(k); ok {
					x[k] = c.value(doc, ps, e, 0)
					continue
				}
			}
			x[k] = c.value(doc, extra, e, 0)
		}
	case []any:
		if items, ok := o.m["items"]; ok {
			if tuple, ok := items.([]any); ok {
				for i := range x {
					if i < len(tuple) {
						x[i] = c.value(doc, tuple[i], x[i], 0)
					}
				}
			} else {
				for i := range x {
					x[i] = c.value(doc, items, x[i], 0)
				}
			}
		}
	}
	return v
}

// jsonTypes is the set of types a schema's "type" allows (nil: any).
func jsonTypes(o *jsObject) map[string]bool {
	switch t := o.m["type"].(type) {
	case string:
		return map[string]bool{t: true}
	case []any:
		set := map[string]bool{}
		for _, e := range t {
			if s, ok := e.(string); ok {
				set[s] = true
			}
		}
		return set
	}
	return nil
}

// coerceScalar converts v to an allowed type when it has none of them.
func coerceScalar(v any, types map[string]bool) any {
	if types == nil {
		return v
	}
	switch x := v.(type) {
	case string:
		if types["string"] {
			return v
		}
		s := strings.TrimSpace(x)
		if types["integer"] {
			if _, ok := new(big.Int).SetString(s, 10); ok && json.Valid([]byte(s)) {
				return json.Number(s)
			}
		}
		if types["number"] {
			if _, err := strconv.ParseFloat(s, 64); err == nil && json.Valid([]byte(s)) {
				return json.Number(s)
			}
		}
		if types["boolean"] {
			if b, err := strconv.ParseBool(s); err == nil && (s == "true" || s == "false") {
				return b
			}
		}
	case json.Number:
		if types["number"] || types["integer"] && isInteger(x) {
			return v
		}
		if types["string"] {
			return string(x)
		}
	case bool:
		if !types["boolean"] && types["string"] {
			return strconv.FormatBool(x)
		}
	}
	return v
}

func isInteger(n json.Number) bool {
	_, ok := new(big.Int).SetString(string(n), 10)
	return ok
}

// nonNullBranch returns the one branch that is not {"type":"null"}, or nil
// when there are more.
func nonNullBranch(branches []any) any {
	var only any
	for _, b := range branches {
		if bo, ok := b.(*jsObject); ok && bo.str("type") == "null" {
			continue
		}
		if only != nil {
			return nil
		}
		only = b
	}
	return only
}
