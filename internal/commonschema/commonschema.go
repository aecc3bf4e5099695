// Package commonschema is the schema a message carries in its metadata: the
// serialised form of Benthos' common schema (public/schema), as benthos v4.73
// and later write it.
//
// benthos v4.60, which this binary is built on, has no DECIMAL, DATE,
// TIME_OF_DAY or UUID type and no timestamp unit, so its own schema.Common
// cannot carry what a Schema Registry schema says. This package writes and
// reads the newer form, so that schema_registry_decode can store a registry
// schema in a message (avro.store_schema_metadata) and the zerobus output can
// provision a table from it (catalog.schema_metadata), and so that newer
// Redpanda Connect consumers can read what this binary stored.
//
// The form is a tree of map[string]any: "type" (a name such as "INT64" or
// "DECIMAL"), "name", "optional" (true when set), "children" ([]any), and for
// the parameterised types "precision"/"scale" (DECIMAL) or
// "unit"/"adjust_to_utc" (TIMESTAMP, TIME_OF_DAY). Every node also carries a
// "fingerprint" computed as benthos does, so a benthos schema cache keyed by
// it treats equal schemas as one. Source: public/schema/common.go in
// github.com/redpanda-data/benthos, v4.73.0 (May 2026) and later.
package commonschema

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"math"
)

// Type is a common schema type. Its numbers are benthos' CommonType values:
// the fingerprint hashes them.
type Type int

// The common schema types.
const (
	Boolean    Type = 1
	Int32      Type = 2
	Int64      Type = 3
	Float32    Type = 4
	Float64    Type = 5
	String     Type = 6
	ByteArray  Type = 7
	Object     Type = 8
	Map        Type = 9
	Array      Type = 10
	Null       Type = 11
	Union      Type = 12
	Timestamp  Type = 13
	Any        Type = 14
	Decimal    Type = 15
	BigDecimal Type = 16
	Date       Type = 17
	TimeOfDay  Type = 18
	UUID       Type = 19
)

var typeNames = map[Type]string{
	Boolean: "BOOLEAN", Int32: "INT32", Int64: "INT64", Float32: "FLOAT32", Float64: "FLOAT64",
	String: "STRING", ByteArray: "BYTE_ARRAY", Object: "OBJECT", Map: "MAP", Array: "ARRAY",
	Null: "NULL", Union: "UNION", Timestamp: "TIMESTAMP", Any: "ANY", Decimal: "DECIMAL",
	BigDecimal: "BIG_DECIMAL", Date: "DATE", TimeOfDay: "TIME_OF_DAY", UUID: "UUID",
}

// String returns the type's serialised name, or "UNKNOWN".
func (t Type) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return "UNKNOWN"
}

func parseType(s string) (Type, error) {
	for t, n := range typeNames {
		if n == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown type %q", s)
}

// Unit is the resolution of a TIMESTAMP or TIME_OF_DAY value. The zero value
// is not a unit.
type Unit int

// The time units.
const (
	Seconds Unit = 1
	Millis  Unit = 2
	Micros  Unit = 3
	Nanos   Unit = 4
)

var unitNames = map[Unit]string{Seconds: "SECONDS", Millis: "MILLIS", Micros: "MICROS", Nanos: "NANOS"}

// String returns the unit's serialised name, or "UNKNOWN".
func (u Unit) String() string {
	if n, ok := unitNames[u]; ok {
		return n
	}
	return "UNKNOWN"
}

// Schema is one node of a common schema: a field, or the whole message.
//
// Children are an OBJECT's fields in order, an ARRAY's one element, a MAP's one
// value (keys are strings), or a UNION's alternatives.
type Schema struct {
	Name     string
	Type     Type
	Optional bool
	Children []Schema

	// Precision and Scale are a DECIMAL's; 1 ≤ Precision ≤ 38, 0 ≤ Scale ≤ Precision.
	Precision, Scale int32
	// Unit and AdjustToUTC are a TIMESTAMP's or TIME_OF_DAY's. A TIMESTAMP with
	// Unit 0 is benthos' legacy form, read as milliseconds in UTC; a
	// TIME_OF_DAY must have a unit. AdjustToUTC is false for a local
	// (zone-less) date-time.
	Unit        Unit
	AdjustToUTC bool
}

// EffectiveUnit returns a TIMESTAMP's unit and zone, with the legacy default
// (milliseconds, UTC) when none is set.
func (s *Schema) EffectiveUnit() (Unit, bool) {
	if s.Type == Timestamp && s.Unit == 0 {
		return Millis, true
	}
	return s.Unit, s.AdjustToUTC
}

const maxDecimalPrecision = 38

// Validate checks what the serialised form requires: decimal bounds, a
// TIME_OF_DAY's unit, and children only on container types. Errors name the
// path of the node at fault.
func (s *Schema) Validate() error { return s.validate(s.Name) }

func (s *Schema) validate(path string) error {
	switch s.Type {
	case Decimal:
		if s.Precision < 1 || s.Precision > maxDecimalPrecision {
			return fmt.Errorf("%s: decimal precision %d out of range [1, %d]", path, s.Precision, maxDecimalPrecision)
		}
		if s.Scale < 0 || s.Scale > s.Precision {
			return fmt.Errorf("%s: decimal scale %d out of range [0, %d]", path, s.Scale, s.Precision)
		}
	case TimeOfDay:
		if unitNames[s.Unit] == "" {
			return fmt.Errorf("%s: TIME_OF_DAY needs a unit", path)
		}
	case Timestamp:
		if s.Unit != 0 && unitNames[s.Unit] == "" {
			return fmt.Errorf("%s: invalid timestamp unit %d", path, s.Unit)
		}
	}
	if s.Type != Decimal && (s.Precision != 0 || s.Scale != 0) {
		return fmt.Errorf("%s: precision and scale are only valid for DECIMAL, not %v", path, s.Type)
	}
	if s.Type != Timestamp && s.Type != TimeOfDay && (s.Unit != 0 || s.AdjustToUTC) {
		return fmt.Errorf("%s: unit and adjust_to_utc are only valid for TIMESTAMP or TIME_OF_DAY, not %v", path, s.Type)
	}
	switch s.Type {
	case Object, Map, Array, Union:
	default:
		if len(s.Children) > 0 {
			return fmt.Errorf("%s: %v is a leaf and has no children", path, s.Type)
		}
	}
	if typeNames[s.Type] == "" {
		return fmt.Errorf("%s: unknown type %d", path, s.Type)
	}
	for i := range s.Children {
		c := &s.Children[i]
		if err := c.validate(childPath(path, c.Name, i)); err != nil {
			return err
		}
	}
	return nil
}

// The serialised form's keys.
const (
	keyType        = "type"
	keyName        = "name"
	keyOptional    = "optional"
	keyChildren    = "children"
	keyFingerprint = "fingerprint"
	keyPrecision   = "precision"
	keyScale       = "scale"
	keyUnit        = "unit"
	keyAdjustToUTC = "adjust_to_utc"
)

// ToAny serialises the schema as benthos v4.73 and later do: map[string]any
// nodes, []any children, int64 precision and scale.
func (s *Schema) ToAny() any {
	m := map[string]any{
		keyType:        s.Type.String(),
		keyFingerprint: s.Fingerprint(),
	}
	if s.Name != "" {
		m[keyName] = s.Name
	}
	if s.Optional {
		m[keyOptional] = true
	}
	if len(s.Children) > 0 {
		children := make([]any, len(s.Children))
		for i := range s.Children {
			children[i] = s.Children[i].ToAny()
		}
		m[keyChildren] = children
	}
	if s.Type == Decimal {
		m[keyPrecision] = int64(s.Precision)
		m[keyScale] = int64(s.Scale)
	}
	if (s.Type == Timestamp || s.Type == TimeOfDay) && s.Unit != 0 {
		m[keyUnit] = s.Unit.String()
		m[keyAdjustToUTC] = s.AdjustToUTC
	}
	return m
}

// Fingerprint is the hex SHA-256 that benthos computes over the schema's
// structure: equal schemas have equal fingerprints.
func (s *Schema) Fingerprint() string {
	h := sha256.New()
	s.writeFingerprint(h)
	return hex.EncodeToString(h.Sum(nil))
}

func (s *Schema) writeFingerprint(h hash.Hash) {
	optional := 0
	if s.Optional {
		optional = 1
	}
	fmt.Fprintf(h, "T:%d|N:%s|O:%d|", s.Type, s.Name, optional)
	switch {
	case s.Type == Decimal:
		fmt.Fprintf(h, "D:%d:%d|", s.Precision, s.Scale)
	case s.Type == Timestamp && s.Unit != 0:
		fmt.Fprintf(h, "TS:%d:%t|", s.Unit, s.AdjustToUTC)
	case s.Type == TimeOfDay && s.Unit != 0:
		fmt.Fprintf(h, "TOD:%d:%t|", s.Unit, s.AdjustToUTC)
	}
	fmt.Fprintf(h, "C:%d|", len(s.Children))
	for i := range s.Children {
		fmt.Fprintf(h, "[%d:", i)
		s.Children[i].writeFingerprint(h)
		fmt.Fprint(h, "]")
	}
}

// Parse reads the serialised form (as ToAny writes it, or as JSON decodes it:
// numbers may be float64 or json.Number) and validates it. The fingerprint is
// not trusted: it is recomputed when needed.
func Parse(v any) (Schema, error) {
	s, err := parse(v, "", -1)
	if err != nil {
		return s, err
	}
	return s, s.Validate()
}

// parse reads one node; parent is its parent's path and index its place among
// the parent's children (-1 for the root), for errors.
func parse(v any, parent string, index int) (Schema, error) {
	var s Schema
	path := childPath(parent, "", index)
	m, ok := v.(map[string]any)
	if !ok {
		return s, fmt.Errorf("%s: expected an object, got %T", pathOr(path), v)
	}
	if n, ok := m[keyName]; ok {
		if s.Name, ok = n.(string); !ok {
			return s, fmt.Errorf("%s: field name: expected a string, got %T", pathOr(path), n)
		}
	}
	path = childPath(parent, s.Name, index)
	ts, ok := m[keyType].(string)
	if !ok {
		return s, fmt.Errorf("%s: field type: expected a string, got %T", pathOr(path), m[keyType])
	}
	var err error
	if s.Type, err = parseType(ts); err != nil {
		return s, fmt.Errorf("%s: %w", pathOr(path), err)
	}
	if o, ok := m[keyOptional]; ok {
		if s.Optional, ok = o.(bool); !ok {
			return s, fmt.Errorf("%s: field optional: expected a bool, got %T", pathOr(path), o)
		}
	}
	if c, ok := m[keyChildren]; ok {
		list, ok := c.([]any)
		if !ok {
			return s, fmt.Errorf("%s: field children: expected an array, got %T", pathOr(path), c)
		}
		s.Children = make([]Schema, len(list))
		for i, e := range list {
			if s.Children[i], err = parse(e, path, i); err != nil {
				return s, err
			}
		}
	}
	_, hasP := m[keyPrecision]
	_, hasS := m[keyScale]
	if hasP || hasS || s.Type == Decimal {
		if s.Type != Decimal {
			return s, fmt.Errorf("%s: precision and scale are only valid for DECIMAL, not %v", pathOr(path), s.Type)
		}
		if s.Precision, err = intField(m, keyPrecision); err != nil {
			return s, fmt.Errorf("%s: %w", pathOr(path), err)
		}
		if s.Scale, err = intField(m, keyScale); err != nil {
			return s, fmt.Errorf("%s: %w", pathOr(path), err)
		}
	}
	u, hasU := m[keyUnit]
	a, hasA := m[keyAdjustToUTC]
	if hasU || hasA {
		if s.Type != Timestamp && s.Type != TimeOfDay {
			return s, fmt.Errorf("%s: unit and adjust_to_utc are only valid for TIMESTAMP or TIME_OF_DAY, not %v", pathOr(path), s.Type)
		}
		us, ok := u.(string)
		if !ok {
			return s, fmt.Errorf("%s: field unit: expected a string, got %T", pathOr(path), u)
		}
		found := false
		for k, n := range unitNames {
			if n == us {
				s.Unit, found = k, true
			}
		}
		if !found {
			return s, fmt.Errorf("%s: unknown time unit %q", pathOr(path), us)
		}
		if s.AdjustToUTC, ok = a.(bool); !ok {
			return s, fmt.Errorf("%s: field adjust_to_utc: expected a bool, got %T", pathOr(path), a)
		}
	}
	return s, nil
}

// childPath names a node in errors: its parent's path, then ".name", or
// "[index]" for an unnamed child (an array's element, a map's value).
func childPath(parent, name string, index int) string {
	switch {
	case index < 0:
		return name
	case name != "":
		return parent + "." + name
	default:
		return fmt.Sprintf("%s[%d]", parent, index)
	}
}

func pathOr(p string) string {
	if p == "" {
		return "schema"
	}
	return p
}

// intField reads an integer that JSON or Go code may have written as any
// numeric type; a fraction or a value past int32 is an error.
func intField(m map[string]any, key string) (int32, error) {
	v, ok := m[key]
	if !ok {
		return 0, fmt.Errorf("field %s is missing", key)
	}
	var f float64
	switch n := v.(type) {
	case int:
		f = float64(n)
	case int32:
		return n, nil
	case int64:
		f = float64(n)
	case float64:
		f = n
	case float32:
		f = float64(n)
	case json.Number:
		i, err := n.Int64()
		if err != nil {
			return 0, fmt.Errorf("field %s: %w", key, err)
		}
		f = float64(i)
	default:
		return 0, fmt.Errorf("field %s: expected an integer, got %T", key, v)
	}
	if f != math.Trunc(f) || f < math.MinInt32 || f > math.MaxInt32 {
		return 0, fmt.Errorf("field %s: %v is not an int32", key, v)
	}
	return int32(f), nil
}
