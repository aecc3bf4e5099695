package registry

import (
	"testing"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

// FuzzCodecs decodes arbitrary bytes with each codec (Avro with logical
// types, Protobuf both ways, JSON Schema with coercion): a value from
// outside either decodes or fails with an error, never a panic, so a bad
// value fails only its own message.
func FuzzCodecs(f *testing.F) {
	codecs := map[string]Codec{}
	for name, c := range map[string]struct {
		s Schema
		o Options
	}{
		"avro":       {Schema{ID: 1, Format: Avro, Text: avroLogicalSchema}, Options{Avro: AvroOptions{PreserveLogicalTypes: true}}},
		"avro raw":   {Schema{ID: 1, Format: Avro, Text: avroLogicalSchema}, Options{Avro: AvroOptions{RawUnions: true}}},
		"proto json": {Schema{ID: 2, Format: Protobuf, Text: protoOrder, References: protoRefs}, Options{Protobuf: ProtobufOptions{SerializeToJSON: true}}},
		"proto":      {Schema{ID: 2, Format: Protobuf, Text: protoOrder, References: protoRefs}, Options{Protobuf: ProtobufOptions{EmitUnpopulated: true}}},
		"json":       {Schema{ID: 3, Format: JSONSchema, Text: jsonOrder, References: jsonRefs}, Options{JSON: JSONOptions{CoerceData: true}}},
	} {
		codec, err := NewCodec(c.s, c.o)
		if err != nil {
			f.Fatalf("%s: %v", name, err)
		}
		codecs[name] = codec
	}
	f.Add(avroEncode(f, avroLogicalSchema, avroLogicalWire()))
	f.Add(protoEncode(f, "shop.v1.Order", protoOrderJSON, 0))
	f.Add([]byte(`{"id":" 12 ","amount":"1.50","tags":[1,true],"attrs":{"x":"3"},"bill":{"n":"2"}}`))
	f.Add([]byte{0x02, 0x02, 0x00})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		for name, c := range codecs {
			v, common, err := c.Decode(body)
			if err == nil && common == nil {
				t.Fatalf("%s: decoded %v without its common schema", name, v)
			}
			_ = (*commonschema.Schema)(common)
		}
	})
}

// FuzzNewCodec makes codecs from arbitrary schema texts, as a registry
// could answer them: a schema no codec can be made from is an error, never
// a panic, so that only the messages of its id fail.
func FuzzNewCodec(f *testing.F) {
	f.Add(avroLogicalSchema)
	f.Add(protoMoney)
	f.Add(jsonOrder)
	f.Add(`{"type":"record","name":"R","fields":[{"name":"a","type":["null",{"type":"map","values":"long"}]}]}`)
	f.Fuzz(func(t *testing.T, text string) {
		for _, format := range []Format{Avro, Protobuf, JSONSchema} {
			_, _ = NewCodec(Schema{ID: 1, Format: format, Text: text}, Options{Avro: AvroOptions{PreserveLogicalTypes: true}})
		}
	})
}
