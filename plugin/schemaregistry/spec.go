// Package schemaregistry is the schema_registry_decode processor: Redpanda
// Connect's processor of that name, with its fields and defaults, which
// decodes Kafka values in the Confluent Schema Registry wire format (Avro,
// Protobuf, JSON Schema) with the schema the registry holds for their id.
// The registry client, cache and codecs are internal/registry; this package
// is the config spec, the per-message work and the hold-and-retry of
// batches while the registry cannot be read.
package schemaregistry

import (
	"fmt"
	"sync"

	// The lint rules call Bloblang's parse_duration, which the pure bundle
	// registers: it must be initialised first, whatever binary embeds this.
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/lintrule"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// Name is the processor's registered name, Redpanda Connect's.
const Name = "schema_registry_decode"

// Config field names, as Redpanda Connect's schema_registry_decode spells
// them (https://docs.redpanda.com/redpanda-connect/components/processors/schema_registry_decode/),
// plus this binary's protobuf.store_schema_metadata and
// json.store_schema_metadata.
const (
	fURL           = "url"
	fCacheDuration = "cache_duration"
	fDefaultID     = "default_schema_id"
	fTLS           = "tls"
	fAvro          = "avro"
	fRawUnions     = "raw_unions"
	fPreserveLT    = "preserve_logical_types"
	fTranslateKC   = "translate_kafka_connect_types"
	fMapping       = "mapping"
	fStoreSchema   = "store_schema_metadata"
	fProtobuf      = "protobuf"
	fUseProtoNames = "use_proto_names"
	fUseEnumNums   = "use_enum_numbers"
	fEmitUnpop     = "emit_unpopulated"
	fEmitDefaults  = "emit_default_values"
	fSerializeJSON = "serialize_to_json"
	fJSON          = "json"
	fCoerceData    = "coerce_data"
)

// Metadata keys set on every decoded message: schema_id is Redpanda
// Connect's; schema_subject and schema_version are this binary's, set when
// the registry names them.
const (
	MetaSchemaID      = "schema_id"
	MetaSchemaSubject = "schema_subject"
	MetaSchemaVersion = "schema_version"
)

// specLint checks the rules across fields.
const specLint = `root = [
  if this.avro.translate_kafka_connect_types.or(false) && !this.avro.preserve_logical_types.or(false) { "field avro.translate_kafka_connect_types: only applies with avro.preserve_logical_types: true" },
].filter(e -> e != null)`

// storeLint refuses an empty metadata key (leave the field out instead).
func storeLint(field string) string {
	return `root = if this.type() == "string" && this.trim() == "" { [ "field ` + field + `: an empty metadata key stores nothing; remove the field or name a key such as schema" ] } else { [] }`
}

func init() {
	err := service.RegisterBatchProcessor(Name, Spec(), func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchProcessor, error) {
		cfg, err := ParseConfig(conf, mgr.FS())
		if err != nil {
			return nil, err
		}
		return newProcessor(cfg, mgr)
	})
	if err != nil {
		panic(err)
	}
}

// Spec is the processor's config spec.
func Spec() *service.ConfigSpec { return spec() }

var spec = sync.OnceValue(newSpec)

func newSpec() *service.ConfigSpec {
	fields := []*service.ConfigField{
		service.NewObjectField(fAvro,
			service.NewBoolField(fRawUnions).
				Description("Whether Avro unions are decoded as plain JSON values (`true`: a `[\"null\",\"string\"]` union holding `\"a\"` is `\"a\"`) rather than Avro JSON (`false`: `{\"string\": \"a\"}`). Unset is `false`.").
				Optional(),
			service.NewBoolField(fPreserveLT).
				Description("Whether logical types are kept: timestamps and dates as timestamps, decimals as exact numbers with their scale's digits, UUIDs as strings. With `false` they decode as their underlying type (a timestamp-millis as an integer, a decimal as bytes).").
				Default(false),
			service.NewBoolField(fTranslateKC).
				Description("With `preserve_logical_types`, also decode the Kafka Connect and Debezium temporal types (io.debezium.time.*) as timestamps.").
				Default(false),
			service.NewBloblangField(fMapping).
				Description("A Bloblang mapping applied to the JSON of each Avro schema (and each Avro schema it references) before it is parsed, to turn types written by other tools (such as Debezium) into standard Avro types.").
				Optional().Advanced(),
			service.NewStringField(fStoreSchema).
				Description("When set, the schema of each decoded Avro message is stored in the metadata key of this name, as Benthos' common schema (the form benthos v4.73 and later serialise: DECIMAL with precision and scale, DATE, TIME_OF_DAY, UUID, TIMESTAMP with unit), for the zerobus output's `catalog.schema_metadata`.").
				Optional().LintRule(storeLint(fAvro+"."+fStoreSchema)),
		).Description("How AVRO schemas are decoded."),
		service.NewObjectField(fProtobuf,
			service.NewBoolField(fUseProtoNames).Description("Use the .proto field names instead of lowerCamelCase names.").Default(false),
			service.NewBoolField(fUseEnumNums).Description("Emit enum values as numbers.").Default(false),
			service.NewBoolField(fEmitUnpop).Description("Emit unpopulated fields (not unpopulated oneof fields or extensions).").Default(false),
			service.NewBoolField(fEmitDefaults).Description("Emit default-valued primitive fields, empty lists and empty maps; `emit_unpopulated` takes precedence.").Default(false),
			service.NewBoolField(fSerializeJSON).Description("Whether messages become JSON bytes. With `false` they are kept decoded: 64-bit integers stay numbers, bytes stay bytes and google.protobuf.Timestamp stays a timestamp.").Default(true),
			service.NewStringField(fStoreSchema).
				Description("This binary's own (Redpanda Connect has it for Avro only): when set, the schema of each decoded Protobuf message is stored in the metadata key of this name, as `avro.store_schema_metadata` does.").
				Optional().LintRule(storeLint(fProtobuf+"."+fStoreSchema)),
		).Description("How PROTOBUF schemas are decoded."),
		service.NewObjectField(fJSON,
			service.NewBoolField(fCoerceData).
				Description("Whether values are coerced to the types the JSON Schema declares (integer fields become 64-bit integers, `date-time` strings timestamps, absent fields take their `default`); by default a JSON Schema message is validated and left as it is.").
				Default(false),
			service.NewStringField(fStoreSchema).
				Description("This binary's own (Redpanda Connect has it for Avro only): when set, the schema of each decoded JSON Schema message is stored in the metadata key of this name, as `avro.store_schema_metadata` does.").
				Optional().LintRule(storeLint(fJSON+"."+fStoreSchema)),
		).Description("How JSON schemas are decoded."),
	}
	// The client's fields, with default_schema_id after url (Connect's
	// order): cache_duration, url, then the auth and tls fields.
	client := ClientFields("")
	fields = append(fields, client[:2]...)
	fields = append(fields,
		service.NewIntField(fDefaultID).
			Description("The schema id of values that are not in the wire format (no magic byte, or shorter than the 5-byte header): the whole value is then decoded with it. Unset, such values fail. Not for Protobuf schemas, whose values need the wire format's message index.").
			Optional().LintRule(lintrule.AtLeast(fDefaultID, 1)))
	fields = append(fields, client[2:]...)
	return service.NewConfigSpec().
		Beta().
		Categories("Parsing", "Integration").
		Summary("Decodes messages in the Confluent Schema Registry wire format (Avro, Protobuf, JSON Schema) with their schema from the registry (Redpanda Connect's `schema_registry_decode`, same fields).").
		Description(`Each message's value starts with the wire format's header: a magic byte 0 and the 4-byte big-endian id of its schema (for Protobuf then the index of its message type). The schema is fetched from the registry by id, with the schemas it references (recursively), kept for `+"`cache_duration`"+`, and the value is decoded with it. A config written for Redpanda Connect's processor moves here unchanged.

== Metadata

Each decoded message gets `+"`schema_id`"+` (Redpanda Connect's), and `+"`schema_subject`"+` and `+"`schema_version`"+` when the registry names them. With `+"`avro.store_schema_metadata`"+` (and this binary's `+"`protobuf.store_schema_metadata`"+`, `+"`json.store_schema_metadata`"+`) the message's schema is stored under that key as Benthos' common schema, which the zerobus output's `+"`catalog.schema_metadata`"+` reads to type the table's columns.

== Faults

A value that is not in the wire format, or whose schema id the registry does not know (error 40403), fails alone with an error that says so (naming the id and the registry's message): route it with `+"`catch`"+`, `+"`fallback`"+` or the output's dead-letter table. A registry that cannot be reached, answers with a server error, refuses the credentials (naming the field to fix), or a url that answers 404 without a registry error (a wrong path or a proxy's page: check `+"`url`"+`) holds the batch instead: the fetch is retried with back-off (1s doubling to 30s) until it succeeds, the messages wait unacknowledged (nothing is failed, dead-lettered or lost), the fault is logged once, with reminders at 10 and 30 minutes and then twice as far apart each time (3 lines for an hour-long fault), and reported by the health endpoint (/zerobus/health), and it heals by itself once the registry answers. See docs/schema-registry.md.`).
		Fields(fields...).
		LintRule(specLint).
		Example("Avro topic into Delta", "Decode registry-framed Avro values, keep their schema, and let the zerobus output create the table with the registry's types.", `
input:
  redpanda:
    seed_brokers: [ "localhost:9092" ]
    topics: [ "orders" ]
    consumer_group: orders-to-delta
pipeline:
  processors:
    - schema_registry_decode:
        url: http://127.0.0.1:8081
        avro:
          preserve_logical_types: true
          store_schema_metadata: schema
output:
  zerobus:
    endpoint: http://127.0.0.1:50051
    workspace_url: http://127.0.0.1:8080
    table: main.raw.orders
    catalog:
      provision: true
      schema_metadata: schema
`)
}

// fieldsOf is "basic_auth.username/basic_auth.password" and the like: the
// fields that hold the credentials of the enabled auth mechanism.
func credentialsField(conf *service.ParsedConfig, prefix string) string {
	on := func(f string) bool { b, _ := conf.FieldBool(f, "enabled"); return b }
	p := prefix
	switch {
	case on("basic_auth"):
		return p + "basic_auth.username and " + p + "basic_auth.password"
	case on("oauth"):
		return p + "oauth.consumer_key, " + p + "oauth.consumer_secret, " + p + "oauth.access_token and " + p + "oauth.access_token_secret"
	case on("jwt"):
		return p + "jwt.private_key_file, " + p + "jwt.signing_method and " + p + "jwt.claims"
	}
	return p + "basic_auth (none of basic_auth, oauth or jwt is enabled)"
}

// mustFormat is the Format names of the store_schema_metadata fields.
var storeFields = map[registry.Format]string{
	registry.Avro:       fAvro,
	registry.Protobuf:   fProtobuf,
	registry.JSONSchema: fJSON,
}

func fieldErr(field string, err error) error { return fmt.Errorf("field %s: %w", field, err) }
