package schemaregistry

import (
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// connectAdvanced is Redpanda Connect's advanced config of the processor,
// every field at its documented default, as its docs print it
// (https://docs.redpanda.com/redpanda-connect/components/processors/schema_registry_decode/),
// with the url and the optional fields set: it must lint clean here.
const connectAdvanced = `pipeline:
  processors:
    - label: ""
      schema_registry_decode:
        avro:
          raw_unions: false
          preserve_logical_types: false
          translate_kafka_connect_types: false
          mapping: 'root = this'
          store_schema_metadata: schema
        protobuf:
          use_proto_names: false
          use_enum_numbers: false
          emit_unpopulated: false
          emit_default_values: false
          serialize_to_json: true
        json:
          coerce_data: false
        cache_duration: 10m
        url: https://registry.example.com:8081
        default_schema_id: 3
        oauth:
          enabled: false
          consumer_key: ""
          consumer_secret: ""
          access_token: ""
          access_token_secret: ""
        basic_auth:
          enabled: false
          username: ""
          password: ""
        jwt:
          enabled: false
          private_key_file: ""
          signing_method: ""
          claims: {}
          headers: {}
        tls:
          skip_cert_verify: false
          enable_renegotiation: false
          root_cas: ""
          root_cas_file: ""
          client_certs: []
`

func lint(t *testing.T, yaml string) []service.Lint {
	t.Helper()
	lints, err := service.GlobalEnvironment().FullConfigSchema("", "").NewStreamConfigLinter().LintYAML([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return lints
}

func TestLintConnectConfigMovesUnchanged(t *testing.T) {
	if lints := lint(t, connectAdvanced); len(lints) != 0 {
		t.Fatalf("Connect's own config: %v", lints)
	}
}

func TestLintRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, from, to string
		line           int
		want           string
	}{
		{"plaintext to a remote registry", "url: https://registry.example.com:8081", "url: http://registry.example.com:8081", 20,
			"field url: plaintext http:// is only allowed for a loopback host"},
		{"translate without preserve", "translate_kafka_connect_types: false", "translate_kafka_connect_types: true", 5,
			"field avro.translate_kafka_connect_types: only applies with avro.preserve_logical_types: true"},
		{"zero cache duration", "cache_duration: 10m", "cache_duration: 0s", 19, "field cache_duration: must be a positive duration"},
		{"schema id 0", "default_schema_id: 3", "default_schema_id: 0", 21, "field default_schema_id: must be at least 1, got 0"},
		{"empty metadata key", "store_schema_metadata: schema", "store_schema_metadata: ' '", 10, "field avro.store_schema_metadata: an empty metadata key stores nothing"},
		{"a field this binary lacks", "coerce_data: false", "coerce_data: false\n          strict: true", 19, "field strict not recognised"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(connectAdvanced, tc.from) {
				t.Fatalf("%q not in the base config", tc.from)
			}
			lints := lint(t, strings.Replace(connectAdvanced, tc.from, tc.to, 1))
			if len(lints) != 1 || !strings.Contains(lints[0].What, tc.want) || lints[0].Line != tc.line {
				t.Fatalf("lints = %+v, want one at line %d with %q", lints, tc.line, tc.want)
			}
		})
	}
}
