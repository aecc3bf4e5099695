package schemaregistry

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net/url"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/bloblang"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// Config is the parsed processor configuration.
type Config struct {
	Client
	DefaultID    int
	HasDefaultID bool
	Options      registry.Options
	// Mapping is avro.mapping, nil when unset; MappingText its text.
	Mapping     *bloblang.Executor
	MappingText string
	// StoreKeys are the store_schema_metadata keys by format ("" is off).
	StoreKeys map[registry.Format]string
}

// ParseConfig reads and checks the configuration; every error names its
// field. files is where jwt.private_key_file is read.
func ParseConfig(conf *service.ParsedConfig, files fs.FS) (Config, error) {
	var c Config
	var err error
	if c.Client, err = ParseClient(conf, files, ""); err != nil {
		return c, err
	}
	if conf.Contains(fDefaultID) {
		if c.DefaultID, err = conf.FieldInt(fDefaultID); err != nil {
			return c, fieldErr(fDefaultID, err)
		}
		if c.DefaultID < 1 {
			return c, fieldErr(fDefaultID, fmt.Errorf("must be at least 1, got %d", c.DefaultID))
		}
		c.HasDefaultID = true
	}

	a, p, j := &c.Options.Avro, &c.Options.Protobuf, &c.Options.JSON
	bools := []struct {
		path []string
		dst  *bool
	}{
		{[]string{fAvro, fPreserveLT}, &a.PreserveLogicalTypes},
		{[]string{fAvro, fTranslateKC}, &a.TranslateKafkaConnectTypes},
		{[]string{fProtobuf, fUseProtoNames}, &p.UseProtoNames},
		{[]string{fProtobuf, fUseEnumNums}, &p.UseEnumNumbers},
		{[]string{fProtobuf, fEmitUnpop}, &p.EmitUnpopulated},
		{[]string{fProtobuf, fEmitDefaults}, &p.EmitDefaultValues},
		{[]string{fProtobuf, fSerializeJSON}, &p.SerializeToJSON},
		{[]string{fJSON, fCoerceData}, &j.CoerceData},
	}
	if conf.Contains(fAvro, fRawUnions) {
		bools = append(bools, struct {
			path []string
			dst  *bool
		}{[]string{fAvro, fRawUnions}, &a.RawUnions})
	}
	for _, b := range bools {
		if *b.dst, err = conf.FieldBool(b.path...); err != nil {
			return c, fieldErr(strings.Join(b.path, "."), err)
		}
	}
	if a.TranslateKafkaConnectTypes && !a.PreserveLogicalTypes {
		return c, fieldErr(fAvro+"."+fTranslateKC, fmt.Errorf("only applies with %s.%s: true", fAvro, fPreserveLT))
	}
	if conf.Contains(fAvro, fMapping) {
		if c.Mapping, err = conf.FieldBloblang(fAvro, fMapping); err != nil {
			return c, fieldErr(fAvro+"."+fMapping, err)
		}
		c.MappingText, _ = conf.FieldString(fAvro, fMapping)
	}
	c.StoreKeys = map[registry.Format]string{}
	for f, obj := range storeFields {
		if !conf.Contains(obj, fStoreSchema) {
			continue
		}
		k, err := conf.FieldString(obj, fStoreSchema)
		if err != nil {
			return c, fieldErr(obj+"."+fStoreSchema, err)
		}
		if strings.TrimSpace(k) == "" {
			return c, fieldErr(obj+"."+fStoreSchema, fmt.Errorf("an empty metadata key stores nothing; remove the field or name a key such as schema"))
		}
		c.StoreKeys[f] = k
	}
	return c, nil
}

// checkURL accepts https, and http for a loopback host only (the lint rule
// lintrule.URL says the same), so credentials never cross a network in the
// clear.
func checkURL(s string) error {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Host == "" {
		return fmt.Errorf("want https://host[:port], got %q", s)
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && ingest.IsLoopback(u.Hostname()):
		return nil
	case u.Scheme == "http":
		return fmt.Errorf("plaintext http:// is only allowed for a loopback host (localhost, 127.x.y.z or ::1: the emulator), got %s; use https://", u.Host)
	}
	return fmt.Errorf("scheme must be https (or http for a loopback host), got %q", u.Scheme)
}

// prepare is the Decoder's Prepare: avro.mapping applied to the JSON of an
// Avro schema and of every Avro schema it references.
func (c Config) prepare() func(registry.Schema) (registry.Schema, error) {
	if c.Mapping == nil {
		return nil
	}
	var apply func(s registry.Schema) (registry.Schema, error)
	apply = func(s registry.Schema) (registry.Schema, error) {
		if s.Format == registry.Avro || s.Format == "" {
			var v any
			if err := json.Unmarshal([]byte(s.Text), &v); err != nil {
				return s, fmt.Errorf("%s.%s: the Avro schema is not JSON: %w", fAvro, fMapping, err)
			}
			out, err := c.Mapping.Query(v)
			if err != nil {
				return s, fmt.Errorf("%s.%s: %w", fAvro, fMapping, err)
			}
			b, err := json.Marshal(out)
			if err != nil {
				return s, fmt.Errorf("%s.%s: the mapped schema is not JSON: %w", fAvro, fMapping, err)
			}
			s.Text = string(b)
		}
		refs := make([]registry.Reference, len(s.References))
		for i, r := range s.References {
			rs, err := apply(r.Schema)
			if err != nil {
				return s, fmt.Errorf("reference %s: %w", r.Name, err)
			}
			refs[i] = registry.Reference{Name: r.Name, Schema: rs}
		}
		s.References = refs
		return s, nil
	}
	return apply
}

// knobs is the start-up log line.
func (c Config) knobs() string {
	def := "unset"
	if c.HasDefaultID {
		def = fmt.Sprint(c.DefaultID)
	}
	a, p := c.Options.Avro, c.Options.Protobuf
	return fmt.Sprintf("%s default_schema_id=%s "+
		"avro.raw_unions=%t avro.preserve_logical_types=%t avro.translate_kafka_connect_types=%t avro.mapping=%t avro.store_schema_metadata=%q "+
		"protobuf.use_proto_names=%t protobuf.use_enum_numbers=%t protobuf.emit_unpopulated=%t protobuf.emit_default_values=%t protobuf.serialize_to_json=%t protobuf.store_schema_metadata=%q "+
		"json.coerce_data=%t json.store_schema_metadata=%q retry_backoff=%s..%s",
		c.Client.Knobs(), def,
		a.RawUnions, a.PreserveLogicalTypes, a.TranslateKafkaConnectTypes, c.Mapping != nil, c.StoreKeys[registry.Avro],
		p.UseProtoNames, p.UseEnumNumbers, p.EmitUnpopulated, p.EmitDefaultValues, p.SerializeToJSON, c.StoreKeys[registry.Protobuf],
		c.Options.JSON.CoerceData, c.StoreKeys[registry.JSONSchema], retryInitial, retryMax)
}

// redactURL hides the password of a user:password@ in the url, for the log.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}
