package typemap

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
)

// VariantMetadataField and VariantValueField name the two members of the
// struct a VARIANT travels as.
const (
	VariantMetadataField = "metadata"
	VariantValueField    = "value"
)

// VariantExtensionName is the canonical Arrow extension name of a Parquet
// variant, which FromArrow reads as VARIANT. The wire schema does not carry it
// (see VariantArrowType).
const VariantExtensionName = "arrow.parquet.variant"

// VariantArrowType is the Arrow type of a VARIANT column on the wire:
// Struct<metadata: LargeBinary NOT NULL, value: LargeBinary NOT NULL> holding
// the Parquet variant binary encoding, without the optional
// "arrow.parquet.variant" extension marker. Source: the official Rust SDK,
// databricks/zerobus-sdk rust/CHANGELOG.md v2.3.2 ("project VARIANT as
// Struct<metadata: LargeBinary not null, value: LargeBinary not null> instead
// of LargeUtf8, matching the server's expected binary variant
// representation") and v2.6.0 (the extension marker is opt-in and off by
// default "because the Arrow Flight server's target schema is unmarked, so a
// marked schema forces a per-batch server-side cast").
func VariantArrowType() *arrow.StructType {
	return arrow.StructOf(
		arrow.Field{Name: VariantMetadataField, Type: arrow.BinaryTypes.LargeBinary},
		arrow.Field{Name: VariantValueField, Type: arrow.BinaryTypes.LargeBinary},
	)
}

// ArrowType returns the Arrow type the Zerobus Flight server expects for a
// column of type t. STRING and DECIMAL travel as LargeUtf8 (decimals as their
// canonical string: the service takes no Decimal128 yet); VARIANT as
// VariantArrowType.
func ArrowType(t Type) (arrow.DataType, error) {
	switch t.Kind {
	case Boolean:
		return arrow.FixedWidthTypes.Boolean, nil
	case Byte:
		return arrow.PrimitiveTypes.Int8, nil
	case Short:
		return arrow.PrimitiveTypes.Int16, nil
	case Int:
		return arrow.PrimitiveTypes.Int32, nil
	case Long:
		return arrow.PrimitiveTypes.Int64, nil
	case Float:
		return arrow.PrimitiveTypes.Float32, nil
	case Double:
		return arrow.PrimitiveTypes.Float64, nil
	case String, Decimal:
		return arrow.BinaryTypes.LargeString, nil
	case Variant:
		return VariantArrowType(), nil
	case Binary:
		return arrow.BinaryTypes.LargeBinary, nil
	case Date:
		return arrow.FixedWidthTypes.Date32, nil
	case Timestamp:
		return &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, nil
	case TimestampNTZ:
		return &arrow.TimestampType{Unit: arrow.Microsecond}, nil
	case Array:
		if t.Elem.Kind == Array || t.Elem.Kind == Map {
			return nil, fmt.Errorf("%s: Zerobus rejects arrays of arrays or maps", t.Text())
		}
		elem, err := ArrowType(*t.Elem)
		if err != nil {
			return nil, err
		}
		return arrow.ListOfField(arrow.Field{Name: "item", Type: elem, Nullable: true}), nil
	case Map:
		switch t.Key.Kind {
		case Byte, Short, Int, Long, Boolean, String:
		default:
			return nil, fmt.Errorf("%s: Zerobus map keys must be integral, boolean or string", t.Text())
		}
		if t.Value.IsNested() {
			return nil, fmt.Errorf("%s: Zerobus rejects maps with complex values", t.Text())
		}
		k, err := ArrowType(*t.Key)
		if err != nil {
			return nil, err
		}
		v, err := ArrowType(*t.Value)
		if err != nil {
			return nil, err
		}
		return arrow.MapOf(k, v), nil
	case Struct:
		fields := make([]arrow.Field, len(t.Fields))
		for i, f := range t.Fields {
			ft, err := ArrowType(f.Type)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
			fields[i] = arrow.Field{Name: f.Name, Type: ft, Nullable: f.Nullable}
		}
		return arrow.StructOf(fields...), nil
	}
	return nil, fmt.Errorf("no Arrow mapping for type %q", t.Kind)
}

// ArrowField returns the Arrow field for a table column.
func ArrowField(c Column) (arrow.Field, error) {
	dt, err := ArrowType(c.Type)
	if err != nil {
		return arrow.Field{}, fmt.Errorf("column %q: %w", c.Name, err)
	}
	return arrow.Field{Name: c.Name, Type: dt, Nullable: c.Nullable}, nil
}

// ArrowSchema returns the Arrow schema a Zerobus stream for a table with
// these columns (in UC position order) must carry.
func ArrowSchema(cols []Column) (*arrow.Schema, error) {
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		f, err := ArrowField(c)
		if err != nil {
			return nil, err
		}
		fields[i] = f
	}
	return arrow.NewSchema(fields, nil), nil
}

// FromArrow returns the Delta type a table column is created with for an
// incoming Arrow type. Project choices: unsigned integers take the next signed
// size up (uint64 becomes DECIMAL(20,0)); dictionaries take their value type;
// the "arrow.parquet.variant" extension is VARIANT, other extensions take
// their storage type; null, time, duration and interval types are refused.
func FromArrow(dt arrow.DataType) (Type, error) {
	switch dt := dt.(type) {
	case *arrow.BooleanType:
		return Primitive(Boolean), nil
	case *arrow.Int8Type:
		return Primitive(Byte), nil
	case *arrow.Int16Type, *arrow.Uint8Type:
		return Primitive(Short), nil
	case *arrow.Int32Type, *arrow.Uint16Type:
		return Primitive(Int), nil
	case *arrow.Int64Type, *arrow.Uint32Type:
		return Primitive(Long), nil
	case *arrow.Uint64Type:
		return DecimalOf(20, 0), nil
	case *arrow.Float16Type, *arrow.Float32Type:
		return Primitive(Float), nil
	case *arrow.Float64Type:
		return Primitive(Double), nil
	case *arrow.Decimal128Type:
		if dt.Precision > 38 {
			return Type{}, fmt.Errorf("arrow %s: precision above 38", dt)
		}
		return DecimalOf(int(dt.Precision), int(dt.Scale)), nil
	case *arrow.StringType, *arrow.LargeStringType, *arrow.StringViewType:
		return Primitive(String), nil
	case *arrow.BinaryType, *arrow.LargeBinaryType, *arrow.BinaryViewType, *arrow.FixedSizeBinaryType:
		return Primitive(Binary), nil
	case *arrow.Date32Type, *arrow.Date64Type:
		return Primitive(Date), nil
	case *arrow.TimestampType:
		if dt.TimeZone != "" {
			return Primitive(Timestamp), nil
		}
		return Primitive(TimestampNTZ), nil
	case *arrow.MapType:
		k, err := FromArrow(dt.KeyType())
		if err != nil {
			return Type{}, fmt.Errorf("map key: %w", err)
		}
		v, err := FromArrow(dt.ItemType())
		if err != nil {
			return Type{}, fmt.Errorf("map value: %w", err)
		}
		return MapOf(k, v), nil
	case arrow.ListLikeType:
		elem, err := FromArrow(dt.Elem())
		if err != nil {
			return Type{}, fmt.Errorf("list element: %w", err)
		}
		return ArrayOf(elem), nil
	case *arrow.StructType:
		fields := make([]Field, dt.NumFields())
		for i, f := range dt.Fields() {
			ft, err := FromArrow(f.Type)
			if err != nil {
				return Type{}, fmt.Errorf("struct field %q: %w", f.Name, err)
			}
			fields[i] = Field{Name: f.Name, Type: ft, Nullable: f.Nullable}
		}
		return StructOf(fields...), nil
	case *arrow.DictionaryType:
		return FromArrow(dt.ValueType)
	case arrow.ExtensionType:
		// The canonical Parquet variant extension marks a VARIANT; any other
		// extension is its storage type.
		if dt.ExtensionName() == VariantExtensionName {
			return Primitive(Variant), nil
		}
		return FromArrow(dt.StorageType())
	}
	return Type{}, fmt.Errorf("arrow type %s has no Delta column type", dt)
}
