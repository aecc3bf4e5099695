package typemap

import (
	"regexp"
	"strings"
	"testing"

	"github.com/benthos-zerobus/benthos-zerobus/internal/lintrule"
)

// FuzzParseType checks that every type Parse accepts renders back to text
// that parses to the same type: DDL keeps everything (names, nullability,
// comments), Text keeps the shape (UC's type_text drops nested nullability
// and comments, and does not quote field names, so it is checked only when
// every field name is a plain identifier), and type_json keeps everything but
// comments' absence. The seed corpus is in testdata/fuzz/FuzzParseType.
func FuzzParseType(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		typ, err := Parse(s)
		if err != nil {
			return
		}
		ddl := typ.DDL()
		back, err := Parse(ddl)
		if err != nil {
			t.Fatalf("Parse(%q) ok, but its DDL %q does not parse: %v", s, ddl, err)
		}
		if !back.Equal(typ) || back.DDL() != ddl {
			t.Fatalf("Parse(%q): DDL %q parses to %q", s, ddl, back.DDL())
		}
		if plainNames(typ) {
			text := typ.Text()
			again, err := Parse(text)
			if err != nil {
				t.Fatalf("Parse(%q) ok, but its Text %q does not parse: %v", s, text, err)
			}
			if !again.SameShape(typ) || again.Text() != text {
				t.Fatalf("Parse(%q): Text %q parses to %q", s, text, again.Text())
			}
		}
		col := Column{Name: "c", Type: typ, Nullable: true}
		js := ColumnTypeJSON(col)
		fromJSON, err := ParseColumnTypeJSON(js)
		if err != nil {
			t.Fatalf("Parse(%q) ok, but its type_json %s does not parse: %v", s, js, err)
		}
		if !SameColumns([]Column{fromJSON}, []Column{col}) || fromJSON.Type.DDL() != ddl {
			t.Fatalf("Parse(%q): type_json %s parses to %q", s, js, fromJSON.Type.DDL())
		}
	})
}

// plainNames reports whether every struct field name nested in t is a plain
// identifier, which Text writes unquoted and Parse reads back.
func plainNames(t Type) bool {
	switch t.Kind {
	case Array:
		return plainNames(*t.Elem)
	case Map:
		return plainNames(*t.Key) && plainNames(*t.Value)
	case Struct:
		for _, f := range t.Fields {
			if !ValidIdentifier(f.Name) || !plainNames(f.Type) {
				return false
			}
		}
	}
	return true
}

// FuzzParseColumns feeds any text to ParseColumns (the emulator's
// --table flag and CREATE TABLE column lists) and any JSON to
// ParseColumnTypeJSON (UC's type_json, read by the output): parsed or
// refused, never a panic or a stack overflow, however deep; what parses
// round-trips. Seeds: testdata/fuzz/FuzzParseColumns.
func FuzzParseColumns(f *testing.F) {
	f.Add("id BIGINT NOT NULL, name STRING COMMENT 'who', tags ARRAY<STRING>", `{"name":"c","type":"long","nullable":false,"metadata":{}}`)
	f.Add("`a b` STRUCT<x: MAP<STRING, ARRAY<DECIMAL(38,2)>> NOT NULL>", `{"name":"c","type":{"type":"array","elementType":{"type":"map","keyType":"string","valueType":"decimal(10,2)","valueContainsNull":true},"containsNull":true},"nullable":true,"metadata":{"comment":"x"}}`)
	f.Add("v VARIANT, t TIMESTAMP_NTZ, d DATE", `{"name":"c","type":{"type":"struct","fields":[{"name":"a","type":"integer","nullable":false,"metadata":{}}]},"nullable":true,"metadata":{}}`)
	f.Fuzz(func(t *testing.T, defs, typeJSON string) {
		if cols, err := ParseColumns(defs); err == nil {
			again, err := ParseColumns(columnsDDL(cols))
			if err != nil || !SameColumns(again, cols) {
				t.Fatalf("ParseColumns(%q) ok, but its DDL %q parses to %v, %v", defs, columnsDDL(cols), again, err)
			}
		}
		if col, err := ParseColumnTypeJSON(typeJSON); err == nil {
			back, err := ParseColumnTypeJSON(ColumnTypeJSON(col))
			if err != nil || !SameColumns([]Column{back}, []Column{col}) {
				t.Fatalf("ParseColumnTypeJSON(%q) ok, but its JSON %s parses to %v, %v", typeJSON, ColumnTypeJSON(col), back, err)
			}
		}
	})
}

// FuzzCheckTableName: the run-time table-name rule and the lint rule's
// pattern (lintrule.TableNamePattern, matched in Bloblang with Go's RE2)
// agree on every string. Seeds: testdata/fuzz/FuzzCheckTableName.
func FuzzCheckTableName(f *testing.F) {
	pattern := regexp.MustCompile(strings.ReplaceAll(lintrule.TableNamePattern, `\\`, `\`))
	for _, s := range []string{"main.default.events", "a.b", "a.b.c.d", "main.default.é", "a..c", "A_1.b2.C_3", "a.b.c\n", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := CheckTableName(name)
		if (err == nil) != pattern.MatchString(name) {
			t.Fatalf("CheckTableName(%q) = %v, but the lint pattern matches: %v", name, err, pattern.MatchString(name))
		}
	})
}

// columnsDDL renders cols as a CREATE TABLE column list.
func columnsDDL(cols []Column) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = QuoteIdent(c.Name) + " " + c.Type.DDL()
		if !c.Nullable {
			parts[i] += " NOT NULL"
		}
		if c.Comment != "" {
			parts[i] += " COMMENT " + QuoteString(c.Comment)
		}
	}
	return strings.Join(parts, ", ")
}
