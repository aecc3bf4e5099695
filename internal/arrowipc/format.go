package arrowipc

// The constants below restate the parts of the Arrow columnar format's
// flatbuffer schemas (format/Message.fbs and format/Schema.fbs in
// apache/arrow) that a Schema message uses. A table's field "slot" is its
// position in the .fbs declaration, counting from 0 (deprecated fields keep
// their slot); its vtable entry is at byte 4+2*slot of the vtable.

// Message (Message.fbs): the root table of every IPC metadata message.
const (
	slotMessageVersion        = 0 // version: MetadataVersion (short), default V1
	slotMessageHeaderType     = 1 // header_type: MessageHeader union tag (ubyte)
	slotMessageHeader         = 2 // header: the union value (offset to a table)
	slotMessageBodyLength     = 3 // bodyLength: long, default 0
	slotMessageCustomMetadata = 4 // custom_metadata: [KeyValue]
	numMessageSlots           = 5
)

// MessageHeader union tags (Message.fbs).
const (
	messageHeaderSchema      = 1
	messageHeaderRecordBatch = 3 // after DictionaryBatch (2)
)

// RecordBatch (Message.fbs): only its row count is read (RecordBatchRows).
const (
	slotRecordBatchLength = 0 // length: long, the number of rows
)

// MetadataVersion values (Schema.fbs). V5 is the current version, the one
// arrow-go and the official Rust SDK write.
const (
	metadataV4 = 3
	metadataV5 = 4
)

// Schema (Schema.fbs).
const (
	slotSchemaEndianness     = 0 // endianness: Endianness (short), default Little
	slotSchemaFields         = 1 // fields: [Field]
	slotSchemaCustomMetadata = 2 // custom_metadata: [KeyValue]
	numSchemaSlots           = 4 // slot 3 is features: [Feature] (long), not written
)

// Endianness values (Schema.fbs).
const (
	endiannessLittle = 0
	endiannessBig    = 1
)

// Field (Schema.fbs).
const (
	slotFieldName           = 0 // name: string
	slotFieldNullable       = 1 // nullable: bool, default false
	slotFieldTypeType       = 2 // type_type: Type union tag (ubyte)
	slotFieldType           = 3 // type: the union value (offset to a table)
	slotFieldDictionary     = 4 // dictionary: DictionaryEncoding
	slotFieldChildren       = 5 // children: [Field]
	slotFieldCustomMetadata = 6 // custom_metadata: [KeyValue]
	numFieldSlots           = 7
)

// KeyValue (Schema.fbs).
const (
	slotKeyValueKey   = 0 // key: string
	slotKeyValueValue = 1 // value: string
	numKeyValueSlots  = 2
)

// Type union tags (Schema.fbs, union Type), in declaration order from 1.
const (
	tagNone            = 0
	tagNull            = 1
	tagInt             = 2
	tagFloatingPoint   = 3
	tagBinary          = 4
	tagUtf8            = 5
	tagBool            = 6
	tagDecimal         = 7
	tagDate            = 8
	tagTime            = 9
	tagTimestamp       = 10
	tagInterval        = 11
	tagList            = 12
	tagStruct          = 13 // Struct_ in Schema.fbs
	tagUnion           = 14
	tagFixedSizeBinary = 15
	tagFixedSizeList   = 16
	tagMap             = 17
	tagDuration        = 18
	tagLargeBinary     = 19
	tagLargeUtf8       = 20
	tagLargeList       = 21
	tagRunEndEncoded   = 22
	tagBinaryView      = 23
	tagUtf8View        = 24
	tagListView        = 25
	tagLargeListView   = 26
)

// Slots of the type tables that carry parameters (Schema.fbs). Tables without
// fields (Null, Bool, Binary, Utf8, LargeBinary, LargeUtf8, List, Struct_,
// LargeList, …) have none.
const (
	slotIntBitWidth = 0 // Int.bitWidth: int
	slotIntSigned   = 1 // Int.is_signed: bool
	numIntSlots     = 2

	slotFloatPrecision = 0 // FloatingPoint.precision: Precision (short)
	numFloatSlots      = 1

	slotDecimalPrecision = 0 // Decimal.precision: int
	slotDecimalScale     = 1 // Decimal.scale: int
	slotDecimalBitWidth  = 2 // Decimal.bitWidth: int, default 128

	slotDateUnit = 0 // Date.unit: DateUnit (short), default MILLISECOND
	numDateSlots = 1

	slotTimeUnit     = 0 // Time.unit: TimeUnit (short), default MILLISECOND
	slotTimeBitWidth = 1 // Time.bitWidth: int, default 32

	slotTimestampUnit     = 0 // Timestamp.unit: TimeUnit (short), default SECOND
	slotTimestampTimezone = 1 // Timestamp.timezone: string
	numTimestampSlots     = 2

	slotDurationUnit = 0 // Duration.unit: TimeUnit (short), default MILLISECOND

	slotFixedSizeBinaryByteWidth = 0 // FixedSizeBinary.byteWidth: int
	slotFixedSizeListListSize    = 0 // FixedSizeList.listSize: int

	slotMapKeysSorted = 0 // Map.keysSorted: bool
	numMapSlots       = 1
)

// Precision values of FloatingPoint (Schema.fbs).
const (
	precisionHalf   = 0
	precisionSingle = 1
	precisionDouble = 2
)

// DateUnit values (Schema.fbs).
const (
	dateUnitDay         = 0
	dateUnitMillisecond = 1
)

// TimeUnit values (Schema.fbs).
const (
	timeUnitSecond      = 0
	timeUnitMillisecond = 1
	timeUnitMicrosecond = 2
	timeUnitNanosecond  = 3
)
