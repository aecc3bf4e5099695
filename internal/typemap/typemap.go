// Package typemap is the single authority for Delta / Unity Catalog column
// types: parsing UC type text, rendering it back (type_text, type_json, DDL),
// mapping a UC type to the Arrow type the Zerobus Flight server expects, mapping
// an Arrow type to the Delta type a table is created with, and deciding which
// type changes are lossless widenings.
//
// The catalog, the converter and the emulator all describe tables with the
// Column and Type values of this package, so that they can never disagree on
// what "BIGINT" or "array<string>" means.
package typemap

import (
	"fmt"
	"regexp"
	"strings"
)

// Kind is a UC column type name, spelled as UC's type_name field spells it.
type Kind string

// The kinds this project understands. Their values are UC's type_name values.
const (
	Boolean      Kind = "BOOLEAN"
	Byte         Kind = "BYTE"  // TINYINT
	Short        Kind = "SHORT" // SMALLINT
	Int          Kind = "INT"
	Long         Kind = "LONG" // BIGINT
	Float        Kind = "FLOAT"
	Double       Kind = "DOUBLE"
	Decimal      Kind = "DECIMAL"
	String       Kind = "STRING"
	Binary       Kind = "BINARY"
	Date         Kind = "DATE"
	Timestamp    Kind = "TIMESTAMP"     // instant, stored UTC
	TimestampNTZ Kind = "TIMESTAMP_NTZ" // wall-clock, no zone
	Array        Kind = "ARRAY"
	Map          Kind = "MAP"
	Struct       Kind = "STRUCT"
	Variant      Kind = "VARIANT"
)

// Type is a parsed Delta column type. The zero value is invalid.
type Type struct {
	Kind Kind
	// Precision and Scale are set for DECIMAL.
	Precision, Scale int
	// Elem is the element type of an ARRAY (elements are always nullable).
	Elem *Type
	// Key and Value are the types of a MAP (values are always nullable).
	Key, Value *Type
	// Fields are the members of a STRUCT, in order.
	Fields []Field
}

// Field is one member of a STRUCT type.
type Field struct {
	Name     string
	Type     Type
	Nullable bool
	Comment  string
}

// Column is one top-level table column.
type Column struct {
	Name     string
	Type     Type
	Nullable bool
	Comment  string
}

// Primitive returns the Type of a kind that has no parameters.
func Primitive(k Kind) Type { return Type{Kind: k} }

// DecimalOf returns DECIMAL(precision, scale).
func DecimalOf(precision, scale int) Type {
	return Type{Kind: Decimal, Precision: precision, Scale: scale}
}

// ArrayOf returns ARRAY<elem>.
func ArrayOf(elem Type) Type { return Type{Kind: Array, Elem: &elem} }

// MapOf returns MAP<key, value>.
func MapOf(key, value Type) Type { return Type{Kind: Map, Key: &key, Value: &value} }

// StructOf returns STRUCT<fields...>.
func StructOf(fields ...Field) Type { return Type{Kind: Struct, Fields: fields} }

// IsNested reports whether t is an ARRAY, MAP or STRUCT.
func (t Type) IsNested() bool { return t.Kind == Array || t.Kind == Map || t.Kind == Struct }

// Contains reports whether t is, or nests anywhere inside it, a type of kind k.
func (t Type) Contains(k Kind) bool {
	if t.Kind == k {
		return true
	}
	switch t.Kind {
	case Array:
		return t.Elem.Contains(k)
	case Map:
		return t.Key.Contains(k) || t.Value.Contains(k)
	case Struct:
		for _, f := range t.Fields {
			if f.Type.Contains(k) {
				return true
			}
		}
	}
	return false
}

// IsIntegral reports whether t is one of the integer kinds.
func (t Type) IsIntegral() bool {
	switch t.Kind {
	case Byte, Short, Int, Long:
		return true
	}
	return false
}

// Equal reports whether two types are identical, nested nullability and
// field names included (comments are ignored).
func (t Type) Equal(o Type) bool { return t.equal(o, false) }

// SameShape reports whether two types hold the same values: like Equal, but
// nested nullability is ignored and struct field names compare
// case-insensitively, as Delta resolves them.
func (t Type) SameShape(o Type) bool { return t.equal(o, true) }

func (t Type) equal(o Type, shape bool) bool {
	if t.Kind != o.Kind {
		return false
	}
	switch t.Kind {
	case Decimal:
		return t.Precision == o.Precision && t.Scale == o.Scale
	case Array:
		return t.Elem.equal(*o.Elem, shape)
	case Map:
		return t.Key.equal(*o.Key, shape) && t.Value.equal(*o.Value, shape)
	case Struct:
		if len(t.Fields) != len(o.Fields) {
			return false
		}
		for i := range t.Fields {
			a, b := t.Fields[i], o.Fields[i]
			if shape {
				if !strings.EqualFold(a.Name, b.Name) {
					return false
				}
			} else if a.Name != b.Name || a.Nullable != b.Nullable {
				return false
			}
			if !a.Type.equal(b.Type, shape) {
				return false
			}
		}
	}
	return true
}

// SameColumns reports whether two column lists are the same table schema:
// the same names in the same order, with equal nullability and Equal types
// (comments are ignored).
func SameColumns(a, b []Column) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Nullable != b[i].Nullable || !a[i].Type.Equal(b[i].Type) {
			return false
		}
	}
	return true
}

// Text renders the type the way UC's type_text field does: lower case,
// "bigint", "decimal(10,2)", "array<string>", "struct<a:int,b:string>".
func (t Type) Text() string {
	var b strings.Builder
	t.render(&b, false)
	return b.String()
}

// DDL renders the type for a SQL statement: like Text, but struct field names
// are backtick-quoted and NOT NULL / COMMENT clauses are kept.
func (t Type) DDL() string {
	var b strings.Builder
	t.render(&b, true)
	return b.String()
}

func (t Type) render(b *strings.Builder, ddl bool) {
	switch t.Kind {
	case Boolean:
		b.WriteString("boolean")
	case Byte:
		b.WriteString("tinyint")
	case Short:
		b.WriteString("smallint")
	case Int:
		b.WriteString("int")
	case Long:
		b.WriteString("bigint")
	case Float:
		b.WriteString("float")
	case Double:
		b.WriteString("double")
	case Decimal:
		fmt.Fprintf(b, "decimal(%d,%d)", t.Precision, t.Scale)
	case String:
		b.WriteString("string")
	case Binary:
		b.WriteString("binary")
	case Date:
		b.WriteString("date")
	case Timestamp:
		b.WriteString("timestamp")
	case TimestampNTZ:
		b.WriteString("timestamp_ntz")
	case Variant:
		b.WriteString("variant")
	case Array:
		b.WriteString("array<")
		t.Elem.render(b, ddl)
		b.WriteString(">")
	case Map:
		b.WriteString("map<")
		t.Key.render(b, ddl)
		b.WriteString(",")
		t.Value.render(b, ddl)
		b.WriteString(">")
	case Struct:
		b.WriteString("struct<")
		for i, f := range t.Fields {
			if i > 0 {
				b.WriteString(",")
			}
			if ddl {
				b.WriteString(QuoteIdent(f.Name))
			} else {
				b.WriteString(f.Name)
			}
			b.WriteString(":")
			f.Type.render(b, ddl)
			if ddl && !f.Nullable {
				b.WriteString(" NOT NULL")
			}
			if ddl && f.Comment != "" {
				b.WriteString(" COMMENT ")
				b.WriteString(QuoteString(f.Comment))
			}
		}
		b.WriteString(">")
	default:
		fmt.Fprintf(b, "<invalid %q>", string(t.Kind))
	}
}

// QuoteIdent backtick-quotes a SQL identifier, doubling embedded backticks, so
// any name (even "a`b" or "x'); DROP TABLE y; --") is safe inside a statement.
func QuoteIdent(name string) string {
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}

// QuoteString single-quotes a SQL string literal. Embedded quotes are doubled
// and backslashes escaped (Databricks SQL treats backslash as an escape).
func QuoteString(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

var identifierRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidIdentifier reports whether name is acceptable to Zerobus as a table or
// column name: ASCII letters, digits and underscore, not starting with a digit.
func ValidIdentifier(name string) bool { return identifierRE.MatchString(name) }

// SafeIdentifier turns an arbitrary field name into a valid identifier by
// replacing every other character with '_' and prefixing '_' to a leading digit.
//
// It is the output's one column-name rule, used both ways: a message field
// is created as the column SafeIdentifier(field), and matched to a column
// by its name, ASCII case-insensitively (Delta column names are
// case-insensitive), or failing that by SafeIdentifier(field) (ColumnKey).
// So {"my-field": 2} creates my_field and lands in it. Delta itself accepts
// any name once the table has column mapping ('name' mode: "characters that
// are not allowed by Parquet, such as spaces", Delta Lake docs, "Delta column
// mapping", https://docs.delta.io/latest/delta-column-mapping.html; without
// it ' ,;{}()\n\t=' are refused), but the Zerobus service writes only
// columns named with ASCII letters, digits and underscores (Databricks
// docs, "Zerobus Ingest connector limitations",
// https://docs.databricks.com/aws/en/ingestion/zerobus-limits), so a column
// the output creates must have such a name.
func SafeIdentifier(name string) string {
	if ValidIdentifier(name) {
		return name
	}
	var b strings.Builder
	for i, r := range name {
		switch {
		case r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'):
			b.WriteRune(r)
		case r >= '0' && r <= '9':
			if i == 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

// ColumnKey is the key a field name matches a column by under the
// column-name rule: its SafeIdentifier, lower-cased. Two fields with one key
// in one message fail that message as duplicates.
func ColumnKey(name string) string { return strings.ToLower(SafeIdentifier(name)) }

// ParseTableName splits "catalog.schema.table" into its three parts. Each part
// must be non-empty; this is the form Zerobus's table header requires.
func ParseTableName(full string) (catalog, schema, table string, err error) {
	parts := strings.Split(full, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", fmt.Errorf("table name %q: want exactly three non-empty dot-separated parts (catalog.schema.table)", full)
	}
	return parts[0], parts[1], parts[2], nil
}
