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
	v = coerceScalar(v, o.types)
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

// jsTypes is the set of scalar types a schema's "type" allows, as far as
// coercion asks: string, integer, number, boolean. The empty set (no
// "type", or none of these) converts nothing.
type jsTypes uint8

const (
	jsString jsTypes = 1 << iota
	jsInteger
	jsNumber
	jsBoolean
)

// readJSTypes reads a "type" keyword's value (a name or a list of names).
func readJSTypes(t any) jsTypes {
	var set jsTypes
	switch t := t.(type) {
	case string:
		set = jsTypeNamed(t)
	case []any:
		for _, e := range t {
			if s, ok := e.(string); ok {
				set |= jsTypeNamed(s)
			}
		}
	}
	return set
}

func jsTypeNamed(name string) jsTypes {
	switch name {
	case "string":
		return jsString
	case "integer":
		return jsInteger
	case "number":
		return jsNumber
	case "boolean":
		return jsBoolean
	}
	return 0
}

func (s jsTypes) has(t jsTypes) bool { return s&t != 0 }

// coerceScalar converts v to an allowed type when it has none of them.
func coerceScalar(v any, types jsTypes) any {
	if types == 0 {
		return v
	}
	switch x := v.(type) {
	case string:
		if types.has(jsString) {
			return v
		}
		s := strings.TrimSpace(x)
		if types.has(jsInteger) {
			if _, ok := new(big.Int).SetString(s, 10); ok && json.Valid([]byte(s)) {
				return json.Number(s)
			}
		}
		if types.has(jsNumber) {
			if _, err := strconv.ParseFloat(s, 64); err == nil && json.Valid([]byte(s)) {
				return json.Number(s)
			}
		}
		if types.has(jsBoolean) {
			if b, err := strconv.ParseBool(s); err == nil && (s == "true" || s == "false") {
				return b
			}
		}
	case json.Number:
		if types.has(jsNumber) || types.has(jsInteger) && isInteger(x) {
			return v
		}
		if types.has(jsString) {
			return string(x)
		}
	case bool:
		if !types.has(jsBoolean) && types.has(jsString) {
			return strconv.FormatBool(x)
		}
	}
	return v
}

// isInteger reports whether n is an integer as big.Int reads one in base 10
// (a sign, then digits). A sign and ASCII digits, the usual integer, is
// answered without a big.Int (two allocations per field per value).
func isInteger(n json.Number) bool {
	s := string(n)
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	digits := s != ""
	for i := 0; i < len(s) && digits; i++ {
		digits = s[i] >= '0' && s[i] <= '9'
	}
	if digits {
		return true
	}
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
