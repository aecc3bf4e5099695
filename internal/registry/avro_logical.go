package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/avro"
	"github.com/twmb/avro/atype"

	"github.com/benthos-zerobus/benthos-zerobus/internal/avrodecimal"
)

// avroLogicalTypes returns the conversions the codec registers with the Avro
// parser for options o.
//
// With preserve_logical_types (Connect's docs: "Preserve logical types";
// otherwise "decimals become raw bytes and timestamps become plain
// integers"):
//   - timestamp-millis/micros/nanos and local-timestamp-* → time.Time in UTC
//     (a local timestamp's wall clock, read as UTC: Go has no zone-less time);
//   - date → time.Time at midnight UTC;
//   - time-millis/micros → time.Time on 1970-01-01 UTC at that time of day, as
//     Connect documents for Debezium's time types ("timestamp at the unix
//     epoch");
//   - decimal → json.Number with exactly scale digits after the point
//     ("12.30"), which keeps every digit and which the zerobus output parses
//     exactly into a DECIMAL column;
//   - uuid → its string (a fixed(16) uuid is formatted 8-4-4-4-12);
//   - big-decimal and duration stay raw bytes.
//
// Without it every logical type decodes as its underlying Avro value.
//
// translate_kafka_connect_types (only with preserve_logical_types, as in
// Connect) also reads the connect.name types of Debezium and of Kafka Connect
// itself that carry no Avro logicalType; see kafkaConnectType.
func avroLogicalTypes(o AvroOptions) []avro.SchemaOpt {
	if !o.PreserveLogicalTypes {
		raw := []string{
			atype.Decimal, atype.BigDecimal, atype.UUID, atype.Date, atype.TimeMillis, atype.TimeMicros,
			atype.TimestampMillis, atype.TimestampMicros, atype.TimestampNanos,
			atype.LocalTimestampMillis, atype.LocalTimestampMicros, atype.LocalTimestampNanos, atype.Duration,
		}
		opts := make([]avro.SchemaOpt, len(raw))
		for i, l := range raw {
			// A nil Decode makes the parser skip its own logical decoder.
			opts[i] = avro.CustomType{LogicalType: l}
		}
		return opts
	}
	var opts []avro.SchemaOpt
	if o.TranslateKafkaConnectTypes {
		// First: the first matching custom type wins, and these only act on
		// nodes with no logicalType.
		for _, t := range []string{atype.Int, atype.Long, atype.String, atype.Bytes} {
			opts = append(opts, avro.CustomType{AvroType: t, Decode: decodeKafkaConnectType})
		}
	}
	return append(opts,
		avro.CustomType{LogicalType: atype.Decimal, Decode: decodeAvroDecimal},
		avro.CustomType{LogicalType: atype.TimeMillis, Decode: decodeTimeOfDay},
		avro.CustomType{LogicalType: atype.TimeMicros, Decode: decodeTimeOfDay},
		avro.CustomType{LogicalType: atype.UUID, AvroType: atype.Fixed, Decode: decodeFixedUUID},
		avro.CustomType{LogicalType: atype.BigDecimal},
		avro.CustomType{LogicalType: atype.Duration},
	)
}

// decodeAvroDecimal turns a decimal's two's-complement big-endian unscaled
// bytes into its exact text with the schema's scale.
func decodeAvroDecimal(v any, n *avro.SchemaNode) (any, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("decimal: expected bytes, got %T", v)
	}
	return decimalText(b, n.Scale), nil
}

// decimalText is the exact text of the decimal whose unscaled value is the
// two's-complement big-endian integer b, with exactly scale digits after the
// point: avrodecimal's, the Avro fast path's spelling too.
func decimalText(b []byte, scale int) json.Number {
	return json.Number(avrodecimal.Append(nil, b, scale))
}

// decodeTimeOfDay places time-millis (int32) or time-micros (int64) on the
// Unix epoch day.
func decodeTimeOfDay(v any, n *avro.SchemaNode) (any, error) {
	switch t := v.(type) {
	case int32: // time-millis
		return time.UnixMilli(int64(t)).UTC(), nil
	case int64: // time-micros
		return time.UnixMicro(t).UTC(), nil
	}
	return nil, fmt.Errorf("%s: unexpected %T", n.LogicalType, v)
}

// decodeFixedUUID formats a fixed(16) uuid as text, as a string uuid reads.
func decodeFixedUUID(v any, _ *avro.SchemaNode) (any, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("uuid: expected 16 bytes, got %T", v)
	}
	u, err := uuid.FromBytes(b)
	if err != nil {
		return nil, fmt.Errorf("uuid: %w", err)
	}
	return u.String(), nil
}

// Kafka Connect and Debezium name their types in a connect.name property, often
// without an Avro logicalType. Sources: Connect's translate_kafka_connect_types
// list (the Debezium temporal types,
// https://docs.redpanda.com/redpanda-connect/components/processors/schema_registry_decode/#avro-translate_kafka_connect_types),
// Debezium's temporal types
// (https://debezium.io/documentation/reference/stable/connectors/mysql.html#mysql-temporal-types),
// and Kafka Connect's own logical types in org.apache.kafka.connect.data
// (Date: int days; Time: int millis; Timestamp: long millis; Decimal: bytes
// with the scale in connect.parameters).
const (
	dbzDate           = "io.debezium.time.Date"
	dbzTimestamp      = "io.debezium.time.Timestamp"
	dbzMicroTimestamp = "io.debezium.time.MicroTimestamp"
	dbzNanoTimestamp  = "io.debezium.time.NanoTimestamp"
	dbzZonedTimestamp = "io.debezium.time.ZonedTimestamp"
	dbzYear           = "io.debezium.time.Year"
	dbzTime           = "io.debezium.time.Time"
	dbzMicroTime      = "io.debezium.time.MicroTime"
	dbzNanoTime       = "io.debezium.time.NanoTime"
	kcDate            = "org.apache.kafka.connect.data.Date"
	kcTime            = "org.apache.kafka.connect.data.Time"
	kcTimestamp       = "org.apache.kafka.connect.data.Timestamp"
	kcDecimal         = "org.apache.kafka.connect.data.Decimal"
)

// kafkaConnectType returns the connect.name a node without a logicalType
// carries, or "".
func kafkaConnectType(n *avro.SchemaNode) string {
	if n.LogicalType != "" {
		return ""
	}
	name, _ := n.Props["connect.name"].(string)
	return name
}

// decodeKafkaConnectType converts the value of a connect.name type; it skips
// every other node.
func decodeKafkaConnectType(v any, n *avro.SchemaNode) (any, error) {
	name := kafkaConnectType(n)
	switch x := v.(type) {
	case int32:
		switch name {
		case dbzDate, kcDate:
			return time.Unix(int64(x)*86400, 0).UTC(), nil
		case dbzYear:
			return time.Date(int(x), time.January, 1, 0, 0, 0, 0, time.UTC), nil
		case dbzTime, kcTime:
			return time.UnixMilli(int64(x)).UTC(), nil
		}
	case int64:
		switch name {
		case dbzTimestamp, kcTimestamp:
			return time.UnixMilli(x).UTC(), nil
		case dbzMicroTimestamp, dbzMicroTime:
			return time.UnixMicro(x).UTC(), nil
		case dbzNanoTimestamp, dbzNanoTime:
			return time.Unix(0, x).UTC(), nil
		}
	case string:
		if name == dbzZonedTimestamp {
			t, err := time.Parse(time.RFC3339Nano, x)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			return t.UTC(), nil
		}
	case []byte:
		if name == kcDecimal {
			scale, err := kafkaConnectScale(n)
			if err != nil {
				return nil, err
			}
			return decimalText(x, scale), nil
		}
	}
	return nil, avro.ErrSkipCustomType
}

// kafkaConnectScale reads a Kafka Connect Decimal's scale from
// connect.parameters.scale, which Connect writes as a string.
func kafkaConnectScale(n *avro.SchemaNode) (int, error) {
	params, _ := n.Props["connect.parameters"].(map[string]any)
	switch s := params["scale"].(type) {
	case string:
		v, err := strconv.Atoi(s)
		if err == nil && v >= 0 {
			return v, nil
		}
	case int64:
		if s >= 0 {
			return int(s), nil
		}
	}
	return 0, errors.New(kcDecimal + ": connect.parameters.scale is missing or not a non-negative integer")
}
