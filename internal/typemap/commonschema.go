package typemap

import (
	"errors"
	"fmt"
	"strings"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

// ErrNullOnly is returned by FromCommonSchema for a field whose only type is
// NULL: like a field that is null in every message, it has no column type
// yet.
var ErrNullOnly = errors.New("the field is always null: no column type can be told")

// FromCommonSchema returns the column type of a field of a Schema Registry
// schema (as schema_registry_decode stores it, internal/commonschema) and
// whether it is nullable. It is the mapping catalog.schema_metadata
// provisions and evolves a table with, published in docs/schema-registry.md:
//
//	BOOLEAN → BOOLEAN        INT32 → INT            INT64 → BIGINT
//	FLOAT32 → FLOAT          FLOAT64 → DOUBLE       DECIMAL(p,s) → DECIMAL(p,s)
//	STRING, UUID → STRING    BYTE_ARRAY → BINARY    DATE → DATE
//	TIMESTAMP (adjust_to_utc) → TIMESTAMP, (local) → TIMESTAMP_NTZ
//	TIME_OF_DAY → BIGINT, microseconds since midnight (Databricks has no
//	time-of-day type; the converter stores a time.Duration as its
//	microseconds)
//	OBJECT → STRUCT          ARRAY → ARRAY          MAP → MAP<STRING, …>
//	ANY → VARIANT            UNION [NULL, T] → nullable T
//
// A field is nullable when it is optional or a union with NULL; struct
// members likewise; array elements and map values are always nullable
// (Type.Elem, Type.Value). A union of two non-null alternatives is refused
// unless both map to one type (a STRING and a UUID); so are BIG_DECIMAL (no
// Delta type holds an unbounded decimal), a record without fields, and any
// type the Zerobus service does not write (ArrowType: arrays of arrays or
// maps, maps with nested values). A field that is only NULL returns
// ErrNullOnly. Errors name the path of the member at fault.
func FromCommonSchema(s *commonschema.Schema) (Type, bool, error) {
	t, nullable, err := fromCommon(s, s.Name)
	if err != nil {
		return t, nullable, err
	}
	if _, err := ArrowType(t); err != nil {
		return Type{}, false, fmt.Errorf("%s: %s is not a type the Zerobus service writes (%w)", pathName(s.Name), t.Text(), err)
	}
	if d := t.depth(); d > MaxNestingDepth {
		return Type{}, false, fmt.Errorf("%s: nested %d levels deep, more than the %d the Zerobus service writes", pathName(s.Name), d, MaxNestingDepth)
	}
	return t, nullable, nil
}

// MaxNestingDepth is the deepest nesting below a column the Zerobus service
// writes: MAX_NESTING_DEPTH in the official Rust SDK (databricks/zerobus-sdk
// rust/sdk/src/schema.rs), which refuses deeper types when it builds a
// table's Arrow schema.
const MaxNestingDepth = 100

// depth is how many levels of ARRAY, MAP and STRUCT t nests below itself.
func (t Type) depth() int {
	switch t.Kind {
	case Array:
		return 1 + t.Elem.depth()
	case Map:
		return 1 + max(t.Key.depth(), t.Value.depth())
	case Struct:
		d := 0
		for _, f := range t.Fields {
			d = max(d, f.Type.depth())
		}
		return 1 + d
	}
	return 0
}

func pathName(p string) string {
	if p == "" {
		return "schema"
	}
	return p
}

func fromCommon(s *commonschema.Schema, path string) (Type, bool, error) {
	nullable := s.Optional
	switch s.Type {
	case commonschema.Boolean:
		return Primitive(Boolean), nullable, nil
	case commonschema.Int32:
		return Primitive(Int), nullable, nil
	case commonschema.Int64:
		return Primitive(Long), nullable, nil
	case commonschema.Float32:
		return Primitive(Float), nullable, nil
	case commonschema.Float64:
		return Primitive(Double), nullable, nil
	case commonschema.String, commonschema.UUID:
		return Primitive(String), nullable, nil
	case commonschema.ByteArray:
		return Primitive(Binary), nullable, nil
	case commonschema.Date:
		return Primitive(Date), nullable, nil
	case commonschema.Decimal:
		return DecimalOf(int(s.Precision), int(s.Scale)), nullable, nil
	case commonschema.Timestamp:
		if _, utc := s.EffectiveUnit(); utc {
			return Primitive(Timestamp), nullable, nil
		}
		return Primitive(TimestampNTZ), nullable, nil
	case commonschema.TimeOfDay:
		return Primitive(Long), nullable, nil
	case commonschema.Any:
		return Primitive(Variant), true, nil
	case commonschema.Null:
		return Type{}, true, fmt.Errorf("%s: %w", pathName(path), ErrNullOnly)
	case commonschema.BigDecimal:
		return Type{}, false, fmt.Errorf("%s: BIG_DECIMAL (an unbounded decimal) has no column type: a Delta DECIMAL holds at most 38 digits", pathName(path))
	case commonschema.Object:
		if len(s.Children) == 0 {
			return Type{}, false, fmt.Errorf("%s: a record without fields has no column type (a STRUCT needs at least one)", pathName(path))
		}
		fields := make([]Field, 0, len(s.Children))
		seen := map[string]string{}
		for i := range s.Children {
			c := &s.Children[i]
			cp := path + "." + c.Name
			ft, fn, err := fromCommon(c, cp)
			if errors.Is(err, ErrNullOnly) {
				continue // no member for a field that is always null
			}
			if err != nil {
				return Type{}, false, err
			}
			name := SafeIdentifier(c.Name)
			if prev, dup := seen[strings.ToLower(name)]; dup {
				return Type{}, false, fmt.Errorf("%s: fields %q and %q are one member %q under the column-name rule", pathName(path), prev, c.Name, name)
			}
			seen[strings.ToLower(name)] = c.Name
			fields = append(fields, Field{Name: name, Type: ft, Nullable: fn})
		}
		if len(fields) == 0 {
			return Type{}, false, fmt.Errorf("%s: a record whose fields are all NULL has no column type", pathName(path))
		}
		return StructOf(fields...), nullable, nil
	case commonschema.Array:
		if len(s.Children) != 1 {
			return Type{}, false, fmt.Errorf("%s: an ARRAY needs one element type, got %d", pathName(path), len(s.Children))
		}
		elem, _, err := fromCommon(&s.Children[0], path+"[]")
		if err != nil {
			return Type{}, false, err
		}
		return ArrayOf(elem), nullable, nil
	case commonschema.Map:
		if len(s.Children) != 1 {
			return Type{}, false, fmt.Errorf("%s: a MAP needs one value type, got %d", pathName(path), len(s.Children))
		}
		v, _, err := fromCommon(&s.Children[0], path+"{}")
		if err != nil {
			return Type{}, false, err
		}
		return MapOf(Primitive(String), v), nullable, nil
	case commonschema.Union:
		return fromUnion(s, path)
	}
	return Type{}, false, fmt.Errorf("%s: type %v has no column type", pathName(path), s.Type)
}

// fromUnion maps a UNION: its NULL alternatives make it nullable, and the
// rest must map to one type.
func fromUnion(s *commonschema.Schema, path string) (Type, bool, error) {
	nullable := s.Optional
	var t Type
	var first string
	found := false
	for i := range s.Children {
		c := &s.Children[i]
		if c.Type == commonschema.Null {
			nullable = true
			continue
		}
		ct, cn, err := fromCommon(c, path)
		if err != nil {
			return Type{}, false, err
		}
		nullable = nullable || cn
		if !found {
			t, first, found = ct, c.Type.String(), true
			continue
		}
		if !ct.Equal(t) {
			return Type{}, false, fmt.Errorf("%s: a union of %s and %s: no column type holds both (no rule maps a union of two non-null types)", pathName(path), first, c.Type)
		}
	}
	if !found {
		return Type{}, true, fmt.Errorf("%s: %w", pathName(path), ErrNullOnly)
	}
	return t, nullable, nil
}
