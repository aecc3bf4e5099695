package arrowipc

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/extensions"
)

// schemaGen builds an Arrow schema from fuzz bytes: a small deterministic
// grammar over every type SchemaMessage supports, nested. Reading past the
// end yields zeros, so every input is a schema.
type schemaGen struct {
	b      []byte
	i      int
	fields int // fields generated, against maxGenFields
}

// maxGenFields keeps generated schemas small enough for thousands of
// executions a second; past it only primitive types are generated.
const maxGenFields = 64

func (g *schemaGen) next() byte {
	if g.i >= len(g.b) {
		return 0
	}
	g.i++
	return g.b[g.i-1]
}

func (g *schemaGen) name() string {
	n := int(g.next() % 6)
	out := make([]byte, n)
	for i := range out {
		out[i] = g.next()
	}
	return string(out)
}

func (g *schemaGen) metadata() arrow.Metadata {
	n := int(g.next() % 3)
	if n == 0 {
		return arrow.Metadata{}
	}
	keys, values := make([]string, n), make([]string, n)
	for i := range keys {
		keys[i], values[i] = g.name(), g.name()
	}
	return arrow.NewMetadata(keys, values)
}

var zones = []string{"", "UTC", "Europe/Paris", "+07:00"}

func (g *schemaGen) primitive() arrow.DataType {
	switch g.next() % 12 {
	case 0:
		return arrow.FixedWidthTypes.Boolean
	case 1:
		return arrow.PrimitiveTypes.Int8
	case 2:
		return arrow.PrimitiveTypes.Int16
	case 3:
		return arrow.PrimitiveTypes.Int32
	case 4:
		return arrow.PrimitiveTypes.Int64
	case 5:
		return arrow.PrimitiveTypes.Float32
	case 6:
		return arrow.PrimitiveTypes.Float64
	case 7:
		return arrow.BinaryTypes.String
	case 8:
		return arrow.BinaryTypes.LargeString
	case 9:
		return arrow.BinaryTypes.Binary
	case 10:
		return arrow.BinaryTypes.LargeBinary
	default:
		c := g.next()
		if c%5 == 4 {
			return arrow.FixedWidthTypes.Date32
		}
		return &arrow.TimestampType{Unit: arrow.TimeUnit(c % 4), TimeZone: zones[int(c/4)%len(zones)]}
	}
}

func (g *schemaGen) dataType(depth int) arrow.DataType {
	c := g.next()
	if depth >= 6 || g.fields >= maxGenFields || c%3 != 0 {
		return g.primitive()
	}
	switch (c / 3) % 5 {
	case 0:
		return arrow.ListOfField(g.field(depth + 1))
	case 1:
		fields := make([]arrow.Field, int(g.next()%4))
		for i := range fields {
			fields[i] = g.field(depth + 1)
		}
		return arrow.StructOf(fields...)
	case 2:
		m := arrow.MapOf(g.primitive(), g.dataType(depth+1))
		if g.next()%2 == 1 {
			m.SetItemNullable(false)
		}
		return m
	case 3:
		vt, err := extensions.NewVariantType(arrow.StructOf(
			arrow.Field{Name: "metadata", Type: arrow.BinaryTypes.LargeBinary},
			arrow.Field{Name: "value", Type: arrow.BinaryTypes.LargeBinary}))
		if err != nil {
			panic(err)
		}
		return vt
	default:
		return arrow.StructOf(
			arrow.Field{Name: "metadata", Type: arrow.BinaryTypes.LargeBinary},
			arrow.Field{Name: "value", Type: arrow.BinaryTypes.LargeBinary})
	}
}

func (g *schemaGen) field(depth int) arrow.Field {
	g.fields++
	return arrow.Field{Name: g.name(), Nullable: g.next()%2 == 1, Metadata: g.metadata(), Type: g.dataType(depth)}
}

func (g *schemaGen) schema() *arrow.Schema {
	fields := make([]arrow.Field, int(g.next()%6))
	for i := range fields {
		fields[i] = g.field(1)
	}
	md := g.metadata()
	return arrow.NewSchema(fields, &md)
}

// hasMapOrStruct reports whether dt nests a map or struct, where arrow-go's
// bytes differ from ours.
func hasMapOrStruct(dt arrow.DataType) bool {
	switch dt := dt.(type) {
	case *arrow.MapType, *arrow.StructType, arrow.ExtensionType:
		return true
	case *arrow.ListType:
		return hasMapOrStruct(dt.Elem())
	}
	return false
}

// FuzzSchemaMessage writes a generated schema and reads it back with
// ReadSchema (exact tree, canonical map names) and with arrow-go's reader
// (equal schema); without maps or structs the bytes must equal arrow-go's.
func FuzzSchemaMessage(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{5, 1, 'a', 1, 0, 0, 1, 'b', 0, 1, 3, 0, 2, 0, 2, 'c', 'd', 1, 1, 'k', 0, 0, 6})
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &schemaGen{b: data}
		s := g.schema()
		msg, err := SchemaMessage(s)
		if err != nil {
			t.Fatalf("SchemaMessage(%s): %v", s, err)
		}
		requireReadsAs(t, msg, s)
		dec, err := decodeWithArrowGo(t, msg)
		if err != nil {
			t.Fatalf("arrow-go refuses %s: %v", s, err)
		}
		if !dec.Equal(s) || !dec.Metadata().Equal(s.Metadata()) {
			t.Fatalf("arrow-go decodes\n %s\nwant\n %s", dec, s)
		}
		for _, fl := range s.Fields() {
			if hasMapOrStruct(fl.Type) {
				return
			}
		}
		if want := arrowGoSchemaMessage(t, s); !bytes.Equal(msg, want) {
			t.Fatalf("bytes differ from arrow-go for %s:\n ours     %x\n arrow-go %x", s, msg, want)
		}
	})
}

// FuzzReadSchema feeds arbitrary bytes: ReadSchema must return, never panic,
// and what it returns must respect MaxDepth.
func FuzzReadSchema(f *testing.F) {
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ReadSchema(data)
		if err != nil {
			return
		}
		var walk func(fs []Field, depth int)
		walk = func(fs []Field, depth int) {
			for _, fl := range fs {
				if depth > MaxDepth {
					t.Fatalf("field %q at depth %d", fl.Name, depth)
				}
				_ = fl.String()
				walk(fl.Children, depth+1)
			}
		}
		walk(s.Fields, 1)
	})
}
