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
