package emulator

import (
	"encoding/json"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet/variant"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// VARIANT storage. A VARIANT column travels as Struct<metadata, value> of
// Parquet variant binaries (typemap.VariantArrowType) and is stored the same
// way: the Delta protocol's variant type (PROTOCOL.md, "Variant Data Type",
// table feature variantType) stores a variant in Parquet as a struct of the
// two binary fields value and metadata, so a Delta reader that opens the
// table, whose schemaString says "variant", finds exactly the layout it
// expects. JSON text in a string column would not be: readers take the
// Parquet physical type from the Delta type and refuse a string where a
// variant group belongs. The struct is written as a plain group, without
// the newer Parquet VARIANT logical-type annotation, which older Parquet
// readers do not know. Read-back decodes it to JSON with arrow-go's
// parquet/variant package.

// stripExtensions returns dt with every extension type replaced by its
// storage type, recursively, and whether anything changed.
func stripExtensions(dt arrow.DataType) (arrow.DataType, bool) {
	switch t := dt.(type) {
	case arrow.ExtensionType:
		st, _ := stripExtensions(t.StorageType())
		return st, true
	case *arrow.ListType:
		ef := t.ElemField()
		et, ch := stripExtensions(ef.Type)
		if !ch {
			return dt, false
		}
		ef.Type = et
		return arrow.ListOfField(ef), true
	case *arrow.MapType:
		kf, vf := t.KeyField(), t.ItemField()
		kt, kch := stripExtensions(kf.Type)
		vt, vch := stripExtensions(vf.Type)
		if !kch && !vch {
			return dt, false
		}
		kf.Type, vf.Type = kt, vt
		return arrow.MapOfFields(kf, vf), true
	case *arrow.StructType:
		fields := append([]arrow.Field(nil), t.Fields()...)
		changed := false
		for i := range fields {
			ft, ch := stripExtensions(fields[i].Type)
			fields[i].Type = ft
			changed = changed || ch
		}
		if !changed {
			return dt, false
		}
		return arrow.StructOf(fields...), true
	}
	return dt, false
}

// retypeData returns d (a new reference) relabelled as target, which has the
// same physical layout (d's type with extensions stripped).
func retypeData(d arrow.ArrayData, target arrow.DataType) arrow.ArrayData {
	var childTypes []arrow.DataType
	switch t := target.(type) {
	case *arrow.ListType:
		childTypes = []arrow.DataType{t.Elem()}
	case *arrow.MapType:
		childTypes = []arrow.DataType{t.Elem()}
	case *arrow.StructType:
		for _, f := range t.Fields() {
			childTypes = append(childTypes, f.Type)
		}
	}
	children := make([]arrow.ArrayData, len(d.Children()))
	for i, c := range d.Children() {
		if i < len(childTypes) {
			children[i] = retypeData(c, childTypes[i])
		} else {
			c.Retain()
			children[i] = c
		}
	}
	out := array.NewData(target, d.Len(), d.Buffers(), children, d.NullN(), d.Offset())
	for _, c := range children {
		c.Release()
	}
	return out
}

// binaryValue reads row i of a Binary or LargeBinary array.
func binaryValue(a arrow.Array, i int) ([]byte, bool) {
	switch b := a.(type) {
	case *array.LargeBinary:
		return b.Value(i), true
	case *array.Binary:
		return b.Value(i), true
	}
	return nil, false
}

// variantJSON decodes row i of a variant struct array (metadata, value) to
// its JSON text. arrow-go's variant package validates the encoding's
// structure (variant.New) but not every value: a decimal whose scale is out
// of range passes and then panics in MarshalJSON (found by
// FuzzVariantJSON). A panic while decoding them is turned into the
// refusal of the value; that the service refuses such bytes too, rather
// than storing them, is an assumption (its Variant validation is not
// documented).
func variantJSON(st *array.Struct, i int) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("malformed variant value: %v", r)
		}
	}()
	typ := st.DataType().(*arrow.StructType)
	var meta, val []byte
	var okM, okV bool
	for f := 0; f < st.NumField(); f++ {
		switch typ.Field(f).Name {
		case typemap.VariantMetadataField:
			meta, okM = binaryValue(st.Field(f), i)
			okM = okM && !st.Field(f).IsNull(i)
		case typemap.VariantValueField:
			val, okV = binaryValue(st.Field(f), i)
			okV = okV && !st.Field(f).IsNull(i)
		}
	}
	if !okM || !okV {
		return nil, fmt.Errorf("variant has no metadata or no value")
	}
	v, err := variant.New(meta, val)
	if err != nil {
		return nil, err
	}
	return variantValueJSON(v)
}

// variantValueJSON renders a variant value as JSON. Arrays and objects are
// walked here: arrow-go's ArrayValue.MarshalJSON collects the elements with
// slices.Collect, which gives nil for an empty array, so it renders [] as
// null (arrow-go v18 parquet/variant); the stored bytes are right.
func variantValueJSON(v variant.Value) ([]byte, error) {
	switch x := v.Value().(type) {
	case variant.ArrayValue:
		parts := make([]json.RawMessage, 0, x.Len())
		for e := range x.Values() {
			b, err := variantValueJSON(e)
			if err != nil {
				return nil, err
			}
			parts = append(parts, b)
		}
		return json.Marshal(parts)
	case variant.ObjectValue:
		fields := make(map[string]json.RawMessage, x.NumElements())
		for k, e := range x.Values() {
			b, err := variantValueJSON(e)
			if err != nil {
				return nil, err
			}
			fields[k] = b
		}
		return json.Marshal(fields)
	}
	return v.MarshalJSON()
}

// decodeVariant decodes row i of a variant struct array (metadata, value) to
// its JSON-ready value.
func decodeVariant(st *array.Struct, i int) (any, error) {
	raw, err := variantJSON(st, i)
	if err != nil {
		return nil, err
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// typedJSON renders row i of arr, stored for UC type t, as a JSON-ready value:
// variants decoded to their JSON value, everything else as jsonValue does.
func typedJSON(arr arrow.Array, i int, t typemap.Type) any {
	if arr.IsNull(i) {
		return nil
	}
	if ext, ok := arr.(array.ExtensionArray); ok {
		arr = ext.Storage()
	}
	if !t.Contains(typemap.Variant) {
		return jsonValue(arr, i)
	}
	switch t.Kind {
	case typemap.Variant:
		st, ok := arr.(*array.Struct)
		if !ok {
			return jsonValue(arr, i)
		}
		v, err := decodeVariant(st, i)
		if err != nil {
			return fmt.Sprintf("<undecodable variant: %v>", err)
		}
		return v
	case typemap.Array:
		l, ok := arr.(array.ListLike)
		if !ok {
			return jsonValue(arr, i)
		}
		start, end := l.ValueOffsets(i)
		out := make([]any, 0, end-start)
		for j := int(start); j < int(end); j++ {
			out = append(out, typedJSON(l.ListValues(), j, *t.Elem))
		}
		return out
	case typemap.Map:
		m, ok := arr.(*array.Map)
		if !ok {
			return jsonValue(arr, i)
		}
		start, end := m.ValueOffsets(i)
		out := make(map[string]any, end-start)
		for j := int(start); j < int(end); j++ {
			out[fmt.Sprint(jsonValue(m.Keys(), j))] = typedJSON(m.Items(), j, *t.Value)
		}
		return out
	case typemap.Struct:
		st, ok := arr.(*array.Struct)
		if !ok {
			return jsonValue(arr, i)
		}
		typ := st.DataType().(*arrow.StructType)
		out := make(map[string]any, st.NumField())
		for f := 0; f < st.NumField(); f++ {
			name := typ.Field(f).Name
			ft := typemap.Type{Kind: typemap.String}
			for _, uf := range t.Fields {
				if uf.Name == name {
					ft = uf.Type
				}
			}
			out[name] = typedJSON(st.Field(f), i, ft)
		}
		return out
	}
	return jsonValue(arr, i)
}

// appendVariantJSON appends a JSON value (as decoded with UseNumber) to a
// variant struct builder, encoded as a Parquet variant.
func appendVariantJSON(b *array.StructBuilder, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	val, err := variant.ParseJSONBytes(raw, false)
	if err != nil {
		return fmt.Errorf("VARIANT: %w", err)
	}
	b.Append(true)
	b.FieldBuilder(0).(*array.BinaryBuilder).Append(val.Metadata().Bytes())
	b.FieldBuilder(1).(*array.BinaryBuilder).Append(val.Bytes())
	return nil
}
