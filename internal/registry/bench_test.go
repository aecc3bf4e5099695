package registry

import "testing"

// BenchmarkAvroDecode is the processor path's cost per value: the logical
// record of avro_test.go (15 fields, every logical type) into Connect's
// shapes.
func BenchmarkAvroDecode(b *testing.B) {
	body := avroEncode(b, avroLogicalSchema, avroLogicalWire())
	c, err := NewCodec(Schema{ID: 1, Format: Avro, Text: avroLogicalSchema}, Options{Avro: AvroOptions{PreserveLogicalTypes: true}})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := c.Decode(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProtobufDecodeJSON is the same for a 22-field Protobuf message
// with serialize_to_json (protojson text, parsed).
func BenchmarkProtobufDecodeJSON(b *testing.B) {
	benchProtobuf(b, ProtobufOptions{SerializeToJSON: true})
}

// BenchmarkProtobufDecodeStructured is it without serialize_to_json.
func BenchmarkProtobufDecodeStructured(b *testing.B) {
	benchProtobuf(b, ProtobufOptions{})
}

func benchProtobuf(b *testing.B, o ProtobufOptions) {
	body := protoEncode(b, "shop.v1.Order", protoOrderJSON, 0)
	c, err := NewCodec(Schema{ID: 1, Format: Protobuf, Text: protoOrder, References: protoRefs}, Options{Protobuf: o})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := c.Decode(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSONSchemaDecode is the same for a JSON Schema value (the order
// of jsonschema_test.go, every property set): read, coerced with
// json.coerce_data, validated.
func BenchmarkJSONSchemaDecode(b *testing.B) {
	body := []byte(`{"id":" 12 ","amount":"1.50","paid":"true","note":7,"placed":"2023-11-14T22:13:20Z",
	 "day":"2023-12-09","ref":"123e4567-e89b-12d3-a456-426614174000","tags":[1,true],"attrs":{"x":"3"},
	 "ship":{"city":"Paris","zip":75001},"bill":{"n":"2"},"either":"4","anything":[1,{"a":null}]}`)
	c, err := NewCodec(Schema{ID: 21, Format: JSONSchema, Text: jsonOrder, References: jsonRefs}, Options{JSON: JSONOptions{CoerceData: true}})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := c.Decode(body); err != nil {
			b.Fatal(err)
		}
	}
}
