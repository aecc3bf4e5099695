package typemap

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
)

// SparkJSON returns the type as Spark's DataType JSON value, the form UC puts
// in type_json and Delta puts in a metaData schemaString: a string for
// primitives ("long", "decimal(10,2)") and an object for nested types.
func (t Type) SparkJSON() any {
	switch t.Kind {
	case Decimal:
		return fmt.Sprintf("decimal(%d,%d)", t.Precision, t.Scale)
	case Array:
		return map[string]any{"type": "array", "elementType": t.Elem.SparkJSON(), "containsNull": true}
	case Map:
		return map[string]any{"type": "map", "keyType": t.Key.SparkJSON(), "valueType": t.Value.SparkJSON(), "valueContainsNull": true}
	case Struct:
		fields := make([]any, len(t.Fields))
		for i, f := range t.Fields {
			fields[i] = sparkField(f.Name, f.Type, f.Nullable, f.Comment)
		}
		return map[string]any{"type": "struct", "fields": fields}
	}
	if name, ok := sparkNames[t.Kind]; ok {
		return name
	}
	return string(t.Kind)
}

// sparkNames are Spark's names of the primitive kinds; sparkKinds inverts it.
var sparkNames = map[Kind]string{
	Boolean:      "boolean",
	Byte:         "byte",
	Short:        "short",
	Int:          "integer",
	Long:         "long",
	Float:        "float",
	Double:       "double",
	String:       "string",
	Binary:       "binary",
	Date:         "date",
	Timestamp:    "timestamp",
	TimestampNTZ: "timestamp_ntz",
	Variant:      "variant",
}

var sparkKinds = func() map[string]Kind {
	m := make(map[string]Kind, len(sparkNames))
	for k, name := range sparkNames {
		m[name] = k
	}
	return m
}()

func sparkField(name string, t Type, nullable bool, comment string) map[string]any {
	meta := map[string]any{}
	if comment != "" {
		meta["comment"] = comment
	}
	return map[string]any{"name": name, "type": t.SparkJSON(), "nullable": nullable, "metadata": meta}
}

// ColumnTypeJSON renders a column as UC's type_json: a Spark StructField JSON
// object {"name","type","nullable","metadata"}.
func ColumnTypeJSON(c Column) string {
	b, _ := json.Marshal(sparkField(c.Name, c.Type, c.Nullable, c.Comment))
	return string(b)
}

// SchemaString renders columns as a Spark struct type JSON, the schemaString
// of a Delta metaData action.
func SchemaString(cols []Column) string {
	fields := make([]Field, len(cols))
	for i, c := range cols {
		fields[i] = Field(c)
	}
	b, _ := json.Marshal(StructOf(fields...).SparkJSON())
	return string(b)
}

// ParseColumnTypeJSON parses UC's type_json back into a Column. Unlike
// type_text it keeps the nullability of nested struct fields.
func ParseColumnTypeJSON(s string) (Column, error) {
	// A struct level of a type takes three JSON levels (the type object,
	// its fields array, a field object); refusing deeper JSON first, in one
	// pass, keeps the per-level decoding below from rescanning a huge input
	// MaxTypeDepth times.
	if jsonDepth(s) > 3*MaxTypeDepth+4 {
		return Column{}, fmt.Errorf("parse type_json: %w", depthError())
	}
	var raw sparkStructField
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return Column{}, fmt.Errorf("parse type_json: %w", err)
	}
	f, err := raw.field(0)
	if err != nil {
		return Column{}, fmt.Errorf("parse type_json of %q: %w", raw.Name, err)
	}
	return Column(f), nil
}

// sparkStructField is a Spark StructField as JSON: a type_json value or a
// member of a struct type.
type sparkStructField struct {
	Name     string          `json:"name"`
	Type     json.RawMessage `json:"type"`
	Nullable bool            `json:"nullable"`
	Metadata map[string]any  `json:"metadata"`
}

func (f sparkStructField) field(depth int) (Field, error) {
	t, err := parseSparkType(f.Type, depth)
	if err != nil {
		return Field{}, err
	}
	comment, _ := f.Metadata["comment"].(string)
	return Field{Name: f.Name, Type: t, Nullable: f.Nullable, Comment: comment}, nil
}

var sparkDecimalRE = regexp.MustCompile(`^decimal\((\d+),\s*(\d+)\)$`)

// parseSparkType parses a Spark type at nesting depth (see MaxTypeDepth).
func parseSparkType(raw json.RawMessage, depth int) (Type, error) {
	if depth > MaxTypeDepth {
		return Type{}, depthError()
	}
	depth++
	var name string
	if err := json.Unmarshal(raw, &name); err == nil {
		if k, ok := sparkKinds[name]; ok {
			return Primitive(k), nil
		}
		if name == "decimal" {
			return DecimalOf(10, 0), nil
		}
		if m := sparkDecimalRE.FindStringSubmatch(name); m != nil {
			p, _ := strconv.Atoi(m[1])
			s, _ := strconv.Atoi(m[2])
			return DecimalOf(p, s), nil
		}
		return Type{}, fmt.Errorf("unknown spark type %q", name)
	}
	var obj struct {
		Type        string             `json:"type"`
		ElementType json.RawMessage    `json:"elementType"`
		KeyType     json.RawMessage    `json:"keyType"`
		ValueType   json.RawMessage    `json:"valueType"`
		Fields      []sparkStructField `json:"fields"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return Type{}, fmt.Errorf("spark type %s: %w", raw, err)
	}
	switch obj.Type {
	case "array":
		elem, err := parseSparkType(obj.ElementType, depth)
		if err != nil {
			return Type{}, err
		}
		return ArrayOf(elem), nil
	case "map":
		k, err := parseSparkType(obj.KeyType, depth)
		if err != nil {
			return Type{}, err
		}
		v, err := parseSparkType(obj.ValueType, depth)
		if err != nil {
			return Type{}, err
		}
		return MapOf(k, v), nil
	case "struct":
		fields := make([]Field, len(obj.Fields))
		for i, f := range obj.Fields {
			var err error
			if fields[i], err = f.field(depth); err != nil {
				return Type{}, fmt.Errorf("field %q: %w", f.Name, err)
			}
		}
		return StructOf(fields...), nil
	}
	return Type{}, fmt.Errorf("unknown spark type object %q", obj.Type)
}

// jsonDepth is the deepest nesting of objects and arrays in the JSON text
// s (strings skipped; s need not be valid).
func jsonDepth(s string) int {
	depth, max, inString := 0, 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > max {
				max = depth
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return max
}
