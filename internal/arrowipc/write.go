package arrowipc

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/endian"
	flatbuffers "github.com/google/flatbuffers/go"
)

// Names of a map column's children in the schema Zerobus expects:
// Map<entries: Struct<keys NOT NULL, values>>, "the canonical Arrow schema
// the Databricks Arrow Flight server builds from Delta" (databricks/zerobus-sdk
// rust/sdk/src/schema.rs, arrow_schema_from_uc_columns; Rust SDK changelog
// v2.0.0). arrow-go always names them entries/key/value.
const (
	MapEntriesName = "entries"
	MapKeysName    = "keys"
	MapValuesName  = "values"
)

// Custom metadata keys arrow-go (and the Arrow format) use to mark an
// extension type on its storage field.
const (
	extensionNameKey     = "ARROW:extension:name"
	extensionMetadataKey = "ARROW:extension:metadata"
)

// SchemaMessage returns the Arrow IPC Schema message for schema: the
// flatbuffer bytes of a Message (MetadataVersion V5, body length 0) whose
// header is the Schema, ready for FlightData.data_header of a stream's first
// frame. It is what arrow-go's ipc writer produces except that a map's
// children are named entries/keys/values (see MapEntriesName), which arrow-go
// cannot express. Record batches that follow are unaffected: their messages
// carry no names.
//
// The builder calls follow arrow-go v18.8.0's writer order, so the bytes equal
// its output for schemas without maps or structs; for a struct, arrow-go
// also stores its children's offsets inside the (field-less) Struct_ table,
// which this writer does not (readers ignore them).
//
// Supported types, every one internal/typemap produces: Bool, Int8/16/32/64,
// Float32/64, Utf8, LargeUtf8, Binary, LargeBinary, Date32, Timestamp (any
// unit, with or without zone), List, Struct and Map, nested to MaxDepth, and
// an extension type whose storage is one of them (written as its storage
// type with the ARROW:extension:name/metadata keys, as arrow-go does). Any
// other type, a big-endian schema or deeper nesting is an error naming the
// field by its dotted path.
func SchemaMessage(schema *arrow.Schema) ([]byte, error) {
	if schema == nil {
		return nil, fmt.Errorf("arrow schema is nil")
	}
	if schema.Endianness() != endian.LittleEndian {
		return nil, fmt.Errorf("arrow schema is %s endian; Zerobus takes little endian", schema.Endianness())
	}
	b := flatbuffers.NewBuilder(1024)
	fields := make([]flatbuffers.UOffsetT, schema.NumFields())
	for i, f := range schema.Fields() {
		var err error
		if fields[i], err = writeField(b, f, 1, f.Name); err != nil {
			return nil, err
		}
	}
	fieldsVec := offsetVector(b, fields)
	md := schema.Metadata()
	metaVec := metadataVector(b, md.Keys(), md.Values())

	b.StartObject(numSchemaSlots)
	b.PrependInt16Slot(slotSchemaEndianness, endiannessLittle, endiannessLittle)
	b.PrependUOffsetTSlot(slotSchemaFields, fieldsVec, 0)
	b.PrependUOffsetTSlot(slotSchemaCustomMetadata, metaVec, 0)
	sch := b.EndObject()

	b.StartObject(numMessageSlots)
	b.PrependInt16Slot(slotMessageVersion, metadataV5, 0)
	b.PrependByteSlot(slotMessageHeaderType, messageHeaderSchema, 0)
	b.PrependUOffsetTSlot(slotMessageHeader, sch, 0)
	b.PrependInt64Slot(slotMessageBodyLength, 0, 0)
	msg := b.EndObject()
	b.Finish(msg)
	return b.FinishedBytes(), nil
}

// writeField writes f (at nesting depth depth; path is its dotted name) and
// everything it refers to, and returns the Field table's offset.
func writeField(b *flatbuffers.Builder, f arrow.Field, depth int, path string) (flatbuffers.UOffsetT, error) {
	if depth > MaxDepth {
		return 0, fmt.Errorf("field %q nests deeper than %d levels", path, MaxDepth)
	}
	name := b.CreateString(f.Name)

	keys, values := f.Metadata.Keys(), f.Metadata.Values()
	dt := f.Type
	if ext, ok := dt.(arrow.ExtensionType); ok {
		// arrow-go appends these two after the field's own metadata, sorted
		// by key.
		keys = append(keys[:len(keys):len(keys)], extensionMetadataKey, extensionNameKey)
		values = append(values[:len(values):len(values)], ext.Serialize(), ext.ExtensionName())
		dt = ext.StorageType()
	}
	tag, typ, kids, err := writeType(b, dt, depth, path)
	if err != nil {
		return 0, err
	}
	kidsVec := offsetVector(b, kids)
	metaVec := metadataVector(b, keys, values)

	b.StartObject(numFieldSlots)
	b.PrependUOffsetTSlot(slotFieldName, name, 0)
	b.PrependBoolSlot(slotFieldNullable, f.Nullable, false)
	b.PrependByteSlot(slotFieldTypeType, tag, tagNone)
	b.PrependUOffsetTSlot(slotFieldType, typ, 0)
	b.PrependUOffsetTSlot(slotFieldChildren, kidsVec, 0)
	b.PrependUOffsetTSlot(slotFieldCustomMetadata, metaVec, 0)
	return b.EndObject(), nil
}

// writeType writes dt's children fields and its type table; it returns the
// Type union tag, the table and the children.
func writeType(b *flatbuffers.Builder, dt arrow.DataType, depth int, path string) (tag byte, typ flatbuffers.UOffsetT, kids []flatbuffers.UOffsetT, err error) {
	empty := func(t byte) (byte, flatbuffers.UOffsetT, []flatbuffers.UOffsetT, error) {
		b.StartObject(0)
		return t, b.EndObject(), kids, nil
	}
	switch dt := dt.(type) {
	case *arrow.BooleanType:
		return empty(tagBool)
	case *arrow.Int8Type, *arrow.Int16Type, *arrow.Int32Type, *arrow.Int64Type:
		b.StartObject(numIntSlots)
		b.PrependInt32Slot(slotIntBitWidth, int32(dt.(arrow.FixedWidthDataType).BitWidth()), 0)
		b.PrependBoolSlot(slotIntSigned, true, false)
		return tagInt, b.EndObject(), nil, nil
	case *arrow.Float32Type:
		b.StartObject(numFloatSlots)
		b.PrependInt16Slot(slotFloatPrecision, precisionSingle, precisionHalf)
		return tagFloatingPoint, b.EndObject(), nil, nil
	case *arrow.Float64Type:
		b.StartObject(numFloatSlots)
		b.PrependInt16Slot(slotFloatPrecision, precisionDouble, precisionHalf)
		return tagFloatingPoint, b.EndObject(), nil, nil
	case *arrow.StringType:
		return empty(tagUtf8)
	case *arrow.LargeStringType:
		return empty(tagLargeUtf8)
	case *arrow.BinaryType:
		return empty(tagBinary)
	case *arrow.LargeBinaryType:
		return empty(tagLargeBinary)
	case *arrow.Date32Type:
		b.StartObject(numDateSlots)
		b.PrependInt16Slot(slotDateUnit, dateUnitDay, dateUnitMillisecond)
		return tagDate, b.EndObject(), nil, nil
	case *arrow.TimestampType:
		var unit int16
		switch dt.Unit {
		case arrow.Second:
			unit = timeUnitSecond
		case arrow.Millisecond:
			unit = timeUnitMillisecond
		case arrow.Microsecond:
			unit = timeUnitMicrosecond
		case arrow.Nanosecond:
			unit = timeUnitNanosecond
		default:
			return 0, 0, nil, fmt.Errorf("field %q: timestamp unit %v not in the Arrow format", path, dt.Unit)
		}
		var tz flatbuffers.UOffsetT
		if dt.TimeZone != "" {
			tz = b.CreateString(dt.TimeZone)
		}
		b.StartObject(numTimestampSlots)
		b.PrependInt16Slot(slotTimestampUnit, unit, timeUnitSecond)
		b.PrependUOffsetTSlot(slotTimestampTimezone, tz, 0)
		return tagTimestamp, b.EndObject(), nil, nil
	case *arrow.ListType:
		elem := dt.ElemField()
		kid, err := writeField(b, elem, depth+1, path+"."+elem.Name)
		if err != nil {
			return 0, 0, nil, err
		}
		kids = []flatbuffers.UOffsetT{kid}
		return empty(tagList)
	case *arrow.StructType:
		kids = make([]flatbuffers.UOffsetT, dt.NumFields())
		for i, c := range dt.Fields() {
			if kids[i], err = writeField(b, c, depth+1, path+"."+c.Name); err != nil {
				return 0, 0, nil, err
			}
		}
		return empty(tagStruct)
	case *arrow.MapType:
		key, item := dt.KeyField(), dt.ItemField()
		key.Name, key.Nullable = MapKeysName, false
		item.Name = MapValuesName
		entries := dt.ElemField()
		entries.Name, entries.Nullable = MapEntriesName, false
		entries.Type = arrow.StructOf(key, item)
		kid, err := writeField(b, entries, depth+1, path+"."+entries.Name)
		if err != nil {
			return 0, 0, nil, err
		}
		b.StartObject(numMapSlots)
		b.PrependBoolSlot(slotMapKeysSorted, dt.KeysSorted, false)
		return tagMap, b.EndObject(), []flatbuffers.UOffsetT{kid}, nil
	}
	return 0, 0, nil, fmt.Errorf("field %q: Arrow type %s is not one Zerobus takes", path, dt)
}

// offsetVector writes a vector of table offsets, always (an empty vector
// too, as arrow-go does for children).
func offsetVector(b *flatbuffers.Builder, offs []flatbuffers.UOffsetT) flatbuffers.UOffsetT {
	b.StartVector(4, len(offs), 4)
	for i := len(offs) - 1; i >= 0; i-- {
		b.PrependUOffsetT(offs[i])
	}
	return b.EndVector(len(offs))
}

// metadataVector writes a [KeyValue] vector, or nothing (offset 0) for no
// entries. Extension keys appended by writeField are already sorted.
func metadataVector(b *flatbuffers.Builder, keys, values []string) flatbuffers.UOffsetT {
	if len(keys) == 0 {
		return 0
	}
	kvs := make([]flatbuffers.UOffsetT, len(keys))
	for i := range keys {
		k := b.CreateString(keys[i])
		v := b.CreateString(values[i])
		b.StartObject(numKeyValueSlots)
		b.PrependUOffsetTSlot(slotKeyValueKey, k, 0)
		b.PrependUOffsetTSlot(slotKeyValueValue, v, 0)
		kvs[i] = b.EndObject()
	}
	return offsetVector(b, kvs)
}
