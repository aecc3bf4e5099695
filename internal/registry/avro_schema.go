package registry

import (
	"strconv"

	"github.com/twmb/avro"
	"github.com/twmb/avro/atype"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

// avroCommonSchema describes, as a common schema, the values the codec
// decodes with root and options o:
//   - record → OBJECT; array → ARRAY; map → MAP; enum → STRING;
//     bytes and fixed → BYTE_ARRAY; int → INT32; long → INT64;
//     float → FLOAT32; double → FLOAT64;
//   - a union of null and one type → that type, optional; a union of one
//     type → that type; any other union → UNION of its non-null branches
//     (optional when null is one), each named as Avro JSON names it;
//   - with preserve_logical_types: decimal → DECIMAL(p,s) (BIG_DECIMAL past
//     precision 38); date → DATE; time-millis/micros → TIME_OF_DAY;
//     timestamp-* → TIMESTAMP in UTC; local-timestamp-* → TIMESTAMP not
//     adjusted to UTC; uuid → UUID; and with translate_kafka_connect_types
//     the connect.name types likewise. Without it a logical type is its
//     underlying type, as its values are.
//   - a recursive reference (a record that contains itself) → ANY.
//
// tree is the schema's Root with its references expanded
// (avro.SchemaNode.ExpandReferences); name is the root's name.
func avroCommonSchema(tree *avro.SchemaNode, name string, o AvroOptions) (commonschema.Schema, error) {
	w := avroSchemaWalker{opts: o}
	s, err := w.node(tree, nil, name)
	if err != nil {
		return s, err
	}
	return s, s.Validate()
}

type avroSchemaWalker struct {
	opts AvroOptions
}

// node converts n, named name. fieldProps are the properties of the record
// field n is the type of (nil elsewhere): a field-level logicalType (the
// JDBC idiom) applies to the field's type, as the parser applies it.
func (w avroSchemaWalker) node(n *avro.SchemaNode, fieldProps map[string]any, name string) (commonschema.Schema, error) {
	s := commonschema.Schema{Name: name}
	if w.opts.PreserveLogicalTypes {
		if ok, err := w.logical(&s, n, fieldProps); ok || err != nil {
			return s, err
		}
	}
	switch n.Type {
	case atype.Null:
		s.Type = commonschema.Null
	case atype.Boolean:
		s.Type = commonschema.Boolean
	case atype.Int:
		s.Type = commonschema.Int32
	case atype.Long:
		s.Type = commonschema.Int64
	case atype.Float:
		s.Type = commonschema.Float32
	case atype.Double:
		s.Type = commonschema.Float64
	case atype.String, atype.Enum:
		s.Type = commonschema.String
	case atype.Bytes, atype.Fixed:
		s.Type = commonschema.ByteArray
	case atype.Record, atype.Error:
		s.Type = commonschema.Object
		s.Children = make([]commonschema.Schema, len(n.Fields))
		for i := range n.Fields {
			f := &n.Fields[i]
			c, err := w.node(&f.Type, f.Props, f.Name)
			if err != nil {
				return s, err
			}
			s.Children[i] = c
		}
	case atype.Array:
		s.Type = commonschema.Array
		c, err := w.node(n.Items, nil, "")
		if err != nil {
			return s, err
		}
		s.Children = []commonschema.Schema{c}
	case atype.Map:
		s.Type = commonschema.Map
		c, err := w.node(n.Values, nil, "")
		if err != nil {
			return s, err
		}
		s.Children = []commonschema.Schema{c}
	case atype.Union:
		return w.union(n, name)
	default:
		// What ExpandReferences leaves as a name is a type that contains
		// itself: no column type can hold it.
		s.Type = commonschema.Any
	}
	return s, nil
}

// union converts a union: [null, T] and [T, null] are T, optional.
func (w avroSchemaWalker) union(n *avro.SchemaNode, name string) (commonschema.Schema, error) {
	var branches []*avro.SchemaNode
	optional := false
	for i := range n.Branches {
		if n.Branches[i].Type == atype.Null {
			optional = true
			continue
		}
		branches = append(branches, &n.Branches[i])
	}
	switch len(branches) {
	case 0:
		return commonschema.Schema{Name: name, Type: commonschema.Null}, nil
	case 1:
		s, err := w.node(branches[0], nil, name)
		s.Optional = s.Optional || optional
		return s, err
	}
	s := commonschema.Schema{Name: name, Type: commonschema.Union, Optional: optional}
	for _, b := range branches {
		c, err := w.node(b, nil, avroBranchName(b))
		if err != nil {
			return s, err
		}
		s.Children = append(s.Children, c)
	}
	return s, nil
}

// avroBranchName is the key Avro JSON gives a union branch: a named type's
// full name, otherwise its type name.
func avroBranchName(n *avro.SchemaNode) string {
	switch n.Type {
	case atype.Record, atype.Error, atype.Enum, atype.Fixed:
		if n.Namespace != "" {
			return n.Namespace + "." + n.Name
		}
		return n.Name
	}
	return n.Type
}

// logical sets s from n's logical type, or its field's, or its connect.name;
// it reports false when n has none that the codec decodes.
func (w avroSchemaWalker) logical(s *commonschema.Schema, n *avro.SchemaNode, fieldProps map[string]any) (bool, error) {
	logical, precision, scale := n.LogicalType, n.Precision, n.Scale
	if logical == "" && fieldProps != nil {
		if l, ok := fieldProps["logicalType"].(string); ok {
			logical = l
			precision, _ = propInt(fieldProps["precision"])
			scale, _ = propInt(fieldProps["scale"])
		}
	}
	switch logical {
	case atype.Decimal:
		if n.Type != atype.Bytes && n.Type != atype.Fixed {
			return false, nil
		}
		setDecimal(s, precision, scale)
	case atype.Date:
		s.Type = commonschema.Date
	case atype.TimeMillis:
		s.Type, s.Unit = commonschema.TimeOfDay, commonschema.Millis
	case atype.TimeMicros:
		s.Type, s.Unit = commonschema.TimeOfDay, commonschema.Micros
	case atype.TimestampMillis:
		s.Type, s.Unit, s.AdjustToUTC = commonschema.Timestamp, commonschema.Millis, true
	case atype.TimestampMicros:
		s.Type, s.Unit, s.AdjustToUTC = commonschema.Timestamp, commonschema.Micros, true
	case atype.TimestampNanos:
		s.Type, s.Unit, s.AdjustToUTC = commonschema.Timestamp, commonschema.Nanos, true
	case atype.LocalTimestampMillis:
		s.Type, s.Unit = commonschema.Timestamp, commonschema.Millis
	case atype.LocalTimestampMicros:
		s.Type, s.Unit = commonschema.Timestamp, commonschema.Micros
	case atype.LocalTimestampNanos:
		s.Type, s.Unit = commonschema.Timestamp, commonschema.Nanos
	case atype.UUID:
		if n.Type != atype.String && n.Type != atype.Fixed {
			return false, nil
		}
		s.Type = commonschema.UUID
	case "":
		if w.opts.TranslateKafkaConnectTypes {
			return w.kafkaConnect(s, n)
		}
		return false, nil
	default:
		return false, nil // big-decimal, duration, unknown: the raw value
	}
	return true, nil
}

// kafkaConnect sets s from n's connect.name type, as decodeKafkaConnectType
// decodes it.
func (w avroSchemaWalker) kafkaConnect(s *commonschema.Schema, n *avro.SchemaNode) (bool, error) {
	name := kafkaConnectType(n)
	want := ""
	switch name {
	case dbzDate, kcDate:
		s.Type, want = commonschema.Date, atype.Int
	case dbzYear:
		s.Type, want = commonschema.Date, atype.Int
	case dbzTime, kcTime:
		s.Type, s.Unit, want = commonschema.TimeOfDay, commonschema.Millis, atype.Int
	case dbzMicroTime:
		s.Type, s.Unit, want = commonschema.TimeOfDay, commonschema.Micros, atype.Long
	case dbzNanoTime:
		s.Type, s.Unit, want = commonschema.TimeOfDay, commonschema.Nanos, atype.Long
	case kcTimestamp:
		s.Type, s.Unit, s.AdjustToUTC, want = commonschema.Timestamp, commonschema.Millis, true, atype.Long
	case dbzTimestamp: // Debezium: a DATETIME without a zone
		s.Type, s.Unit, want = commonschema.Timestamp, commonschema.Millis, atype.Long
	case dbzMicroTimestamp:
		s.Type, s.Unit, want = commonschema.Timestamp, commonschema.Micros, atype.Long
	case dbzNanoTimestamp:
		s.Type, s.Unit, want = commonschema.Timestamp, commonschema.Nanos, atype.Long
	case dbzZonedTimestamp:
		s.Type, s.Unit, s.AdjustToUTC, want = commonschema.Timestamp, commonschema.Nanos, true, atype.String
	case kcDecimal:
		scale, err := kafkaConnectScale(n)
		if err != nil {
			return false, err
		}
		precision := 0
		if params, ok := n.Props["connect.parameters"].(map[string]any); ok {
			precision, _ = propInt(params["connect.decimal.precision"])
		}
		setDecimal(s, precision, scale)
		want = atype.Bytes
	default:
		return false, nil
	}
	if n.Type != want {
		// The decoder only converts the documented underlying type.
		*s = commonschema.Schema{Name: s.Name}
		return false, nil
	}
	return true, nil
}

// setDecimal makes s a DECIMAL(precision, scale), or a BIG_DECIMAL when the
// precision is unknown or past what DECIMAL holds (38).
func setDecimal(s *commonschema.Schema, precision, scale int) {
	if precision < 1 || precision > 38 || scale < 0 || scale > precision {
		s.Type = commonschema.BigDecimal
		return
	}
	s.Type, s.Precision, s.Scale = commonschema.Decimal, int32(precision), int32(scale)
}

// propInt reads an integer schema property, which JSON or Kafka Connect may
// write as a number or a string.
func propInt(v any) (int, bool) {
	switch x := v.(type) {
	case int64:
		return int(x), true
	case float64:
		return int(x), x == float64(int(x))
	case string:
		i, err := strconv.Atoi(x)
		return i, err == nil
	}
	return 0, false
}
