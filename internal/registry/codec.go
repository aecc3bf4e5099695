// Package registry reads Kafka values in the Confluent Schema Registry wire
// format: a magic byte 0, a 4-byte big-endian schema id, then (Protobuf only)
// a message-index array, then the encoded value. It fetches each schema by id
// (with its references, recursively), caches it within a bound, and decodes
// values with a Codec made for that schema.
package registry

import (
	"fmt"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

// Format is a registry schema's type, as the registry names it.
type Format string

// The registry's schema types. An empty schemaType in a registry answer means
// AVRO.
const (
	Avro       Format = "AVRO"
	Protobuf   Format = "PROTOBUF"
	JSONSchema Format = "JSON"
)

// Schema is one registry schema with its references resolved.
type Schema struct {
	ID      int
	Format  Format
	Text    string
	Subject string // the subject it was found under, when known
	Version int    // its version under Subject, when known
	// References are the schemas this one names (Avro named types, Protobuf
	// imports, JSON Schema $refs), each resolved with its own references.
	References []Reference
}

// Reference is one resolved reference: Name is how the referring schema names
// it (a Protobuf import path, an Avro full name, a JSON Schema $ref).
type Reference struct {
	Name   string
	Schema Schema
}

// Codec decodes the values written with one registry schema. A Codec is safe
// for concurrent use.
type Codec interface {
	// Decode decodes one value. body is what follows the 5-byte header; for
	// Protobuf it starts with the message-index array, which the codec reads
	// to pick the message. It returns the value in Redpanda Connect's shapes
	// (maps, slices, strings, json.Number or Go numbers, bools, nil, and with
	// preserve_logical_types time.Time and exact decimals), and the common
	// schema of the value, which is shared and must not be modified.
	Decode(body []byte) (any, *commonschema.Schema, error)
}

// Options are the decoding options, with Redpanda Connect's
// schema_registry_decode names and defaults (the zero value is not the
// default for Protobuf: SerializeToJSON defaults to true there).
type Options struct {
	Avro     AvroOptions
	Protobuf ProtobufOptions
	JSON     JSONOptions
}

// AvroOptions are the avro.* fields. avro.mapping is applied to the schema
// text by the caller before the codec is made; avro.store_schema_metadata is
// the caller's too.
type AvroOptions struct {
	RawUnions                  bool
	PreserveLogicalTypes       bool
	TranslateKafkaConnectTypes bool
}

// ProtobufOptions are the protobuf.* fields.
type ProtobufOptions struct {
	UseProtoNames     bool
	UseEnumNumbers    bool
	EmitUnpopulated   bool
	EmitDefaultValues bool
	SerializeToJSON   bool
}

// JSONOptions are the json.* fields.
type JSONOptions struct {
	CoerceData bool
}

// NewCodec makes the codec for s.
func NewCodec(s Schema, o Options) (Codec, error) {
	switch s.Format {
	case Avro, "":
		return newAvroCodec(s, o.Avro)
	case Protobuf:
		return newProtobufCodec(s, o.Protobuf)
	case JSONSchema:
		return newJSONCodec(s, o.JSON)
	default:
		return nil, fmt.Errorf("schema %d: unknown schema type %q", s.ID, s.Format)
	}
}
