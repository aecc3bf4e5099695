package emulator

import (
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Iceberg field ids of a table's columns.
//
// Iceberg readers match Parquet columns to table columns by field id (Iceberg
// spec, "Column Projection": "Columns in Iceberg data files are selected by
// field id"), and UniForm writes its Parquet files with the ids of Delta
// column mapping (delta.columnMapping.id). The emulator derives them from UC
// column positions, which only ever grow (ALTER TABLE ADD COLUMNS appends; no
// DROP or RENAME is served), so an id never changes meaning:
//
//   - top-level column at position p: id p+1;
//   - fields nested in that column (struct members, list element, map key
//     and value): (p+1)*nestedIDStride + 1, +2, … handed out level by level
//     (all members of a struct, or a map's key and value, before what is
//     nested in them), as Iceberg's own id assignment does.
//
// This holds tables of fewer than nestedIDStride columns with fewer than
// nestedIDStride nested fields per column.
const nestedIDStride = 10000

// arrowFieldIDKey is the Arrow field metadata key pqarrow turns into the
// Parquet field_id of the column (arrow-go parquet/pqarrow schema.go).
const arrowFieldIDKey = "PARQUET:field_id"

// idNode is the field id of one field and of the fields nested in it, keyed
// by struct member name, or "element", "key", "value".
type idNode struct {
	id       int
	children map[string]*idNode
}

// columnFieldIDs returns the id tree of each column by name.
func columnFieldIDs(cols []typemap.Column) map[string]*idNode {
	out := make(map[string]*idNode, len(cols))
	for p, c := range cols {
		next := (p+1)*nestedIDStride + 1
		out[c.Name] = &idNode{id: p + 1, children: nestedIDs(c.Type, &next)}
	}
	return out
}

func nestedIDs(t typemap.Type, next *int) map[string]*idNode {
	child := func(name string, ct typemap.Type, m map[string]*idNode) {
		n := &idNode{id: *next}
		*next++
		m[name] = n
		n.children = nestedIDs(ct, next)
	}
	switch t.Kind {
	case typemap.Struct:
		m := map[string]*idNode{}
		// Ids are handed out to all members of a level before their
		// children, as Iceberg's own id assignment does.
		nodes := make([]*idNode, len(t.Fields))
		for i, f := range t.Fields {
			nodes[i] = &idNode{id: *next}
			*next++
			m[f.Name] = nodes[i]
		}
		for i, f := range t.Fields {
			nodes[i].children = nestedIDs(f.Type, next)
		}
		return m
	case typemap.Array:
		m := map[string]*idNode{}
		child("element", *t.Elem, m)
		return m
	case typemap.Map:
		m := map[string]*idNode{}
		k, v := &idNode{id: *next}, &idNode{id: *next + 1}
		*next += 2
		m["key"], m["value"] = k, v
		k.children = nestedIDs(*t.Key, next)
		v.children = nestedIDs(*t.Value, next)
		return m
	}
	return nil
}

// withFieldIDs returns the schema with each field (nested ones included)
// carrying its Iceberg field id in its Arrow metadata, so that pqarrow
// writes it as the Parquet field_id. Fields the table does not know keep no
// id.
func withFieldIDs(schema *arrow.Schema, cols []typemap.Column) *arrow.Schema {
	ids := columnFieldIDs(cols)
	fields := make([]arrow.Field, schema.NumFields())
	for i, f := range schema.Fields() {
		fields[i] = annotateField(f, ids[f.Name])
	}
	md := schema.Metadata()
	return arrow.NewSchema(fields, &md)
}

func annotateField(f arrow.Field, n *idNode) arrow.Field {
	if n == nil {
		return f
	}
	keys, vals := []string{arrowFieldIDKey}, []string{strconv.Itoa(n.id)}
	for i, k := range f.Metadata.Keys() {
		if k != arrowFieldIDKey {
			keys, vals = append(keys, k), append(vals, f.Metadata.Values()[i])
		}
	}
	f.Metadata = arrow.NewMetadata(keys, vals)
	if n.children == nil {
		return f
	}
	switch dt := f.Type.(type) {
	case *arrow.StructType:
		members := make([]arrow.Field, dt.NumFields())
		for i, m := range dt.Fields() {
			members[i] = annotateField(m, n.children[m.Name])
		}
		f.Type = arrow.StructOf(members...)
	case *arrow.MapType:
		f.Type = arrow.MapOfFields(annotateField(dt.KeyField(), n.children["key"]), annotateField(dt.ItemField(), n.children["value"]))
	case *arrow.ListType:
		f.Type = arrow.ListOfField(annotateField(dt.ElemField(), n.children["element"]))
	case *arrow.LargeListType:
		f.Type = arrow.LargeListOfField(annotateField(dt.ElemField(), n.children["element"]))
	}
	return f
}

// withSchema returns rec under schema, which must describe the same columns
// (here: the same schema plus field-id metadata). The caller owns the result.
func withSchema(rec arrow.RecordBatch, schema *arrow.Schema) arrow.RecordBatch {
	return array.NewRecordBatch(schema, rec.Columns(), rec.NumRows())
}
