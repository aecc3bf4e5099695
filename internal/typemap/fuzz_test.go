package typemap

import (
	"testing"
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
