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
	case Boolean:
		return "boolean"
	case Byte:
		return "byte"
	case Short:
		return "short"
	case Int:
		return "integer"
	case Long:
		return "long"
	case Float:
		return "float"
	case Double:
		return "double"
	case Decimal:
		return fmt.Sprintf("decimal(%d,%d)", t.Precision, t.Scale)
	case String:
		return "string"
	case Binary:
		return "binary"
	case Date:
		return "date"
	case Timestamp:
		return "timestamp"
	case TimestampNTZ:
		return "timestamp_ntz"
	case Variant:
		return "variant"
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
	return string(t.Kind)
}

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
	var raw struct {
		Name     string          `json:"name"`
		Type     json.RawMessage `json:"type"`
		Nullable bool            `json:"nullable"`
		Metadata map[string]any  `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return Column{}, fmt.Errorf("parse type_json: %w", err)
	}
	t, err := parseSparkType(raw.Type)
	if err != nil {
		return Column{}, fmt.Errorf("parse type_json of %q: %w", raw.Name, err)
	}
	comment, _ := raw.Metadata["comment"].(string)
	return Column{Name: raw.Name, Type: t, Nullable: raw.Nullable, Comment: comment}, nil
}

var sparkDecimalRE = regexp.MustCompile(`^decimal\((\d+),\s*(\d+)\)$`)

func parseSparkType(raw json.RawMessage) (Type, error) {
	var name string
	if err := json.Unmarshal(raw, &name); err == nil {
		switch name {
		case "boolean":
			return Primitive(Boolean), nil
		case "byte":
			return Primitive(Byte), nil
		case "short":
			return Primitive(Short), nil
		case "integer":
			return Primitive(Int), nil
		case "long":
			return Primitive(Long), nil
		case "float":
			return Primitive(Float), nil
		case "double":
			return Primitive(Double), nil
		case "string":
			return Primitive(String), nil
		case "binary":
			return Primitive(Binary), nil
		case "date":
			return Primitive(Date), nil
		case "timestamp":
			return Primitive(Timestamp), nil
		case "timestamp_ntz":
			return Primitive(TimestampNTZ), nil
		case "variant":
			return Primitive(Variant), nil
		case "decimal":
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
		Type        string          `json:"type"`
		ElementType json.RawMessage `json:"elementType"`
		KeyType     json.RawMessage `json:"keyType"`
		ValueType   json.RawMessage `json:"valueType"`
		Fields      []struct {
			Name     string          `json:"name"`
			Type     json.RawMessage `json:"type"`
			Nullable bool            `json:"nullable"`
			Metadata map[string]any  `json:"metadata"`
		} `json:"fields"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return Type{}, fmt.Errorf("spark type %s: %w", raw, err)
	}
	switch obj.Type {
	case "array":
		elem, err := parseSparkType(obj.ElementType)
		if err != nil {
			return Type{}, err
		}
		return ArrayOf(elem), nil
	case "map":
		k, err := parseSparkType(obj.KeyType)
		if err != nil {
			return Type{}, err
		}
		v, err := parseSparkType(obj.ValueType)
		if err != nil {
			return Type{}, err
		}
		return MapOf(k, v), nil
	case "struct":
		fields := make([]Field, len(obj.Fields))
		for i, f := range obj.Fields {
			ft, err := parseSparkType(f.Type)
			if err != nil {
				return Type{}, fmt.Errorf("field %q: %w", f.Name, err)
			}
			comment, _ := f.Metadata["comment"].(string)
			fields[i] = Field{Name: f.Name, Type: ft, Nullable: f.Nullable, Comment: comment}
		}
		return StructOf(fields...), nil
	}
	return Type{}, fmt.Errorf("unknown spark type object %q", obj.Type)
}
