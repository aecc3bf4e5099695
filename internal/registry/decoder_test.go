package registry

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

// textCodec decodes a body as its text, prefixed with the schema's text: it
// shows which schema a value was decoded with, and fails on "bad".
type textCodec struct{ s Schema }

func (c textCodec) Decode(body []byte) (any, *commonschema.Schema, error) {
	if string(body) == "bad" {
		return nil, nil, errors.New("body does not match the schema")
	}
	return c.s.Subject + ":" + string(body), &commonschema.Schema{Type: commonschema.String}, nil
}

func frame(id int, body string) []byte {
	b := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(b[1:], uint32(id))
	return append(b, body...)
}

func TestDecoderDecodesWithTheFramedSchemaAndCachesIt(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id := mustRegister(t, reg, "c-value", sr.Schema{Schema: avroC})
	var prepared int
	d := NewDecoder(newClient(t, reg.URL(), nil, ""), DecoderConfig{
		MakeCodec: func(s Schema, _ Options) (Codec, error) { return textCodec{s}, nil },
		Prepare:   func(s Schema) (Schema, error) { prepared++; return s, nil },
	})
	for i := 0; i < 3; i++ {
		got, err := d.Decode(context.Background(), frame(id, "v"))
		if err != nil {
			t.Fatal(err)
		}
		if got.Value != "c-value:v" || got.ID != id || got.Subject != "c-value" || got.Version != 1 || got.Format != Avro || got.Common == nil {
			t.Fatalf("decoded = %+v", got)
		}
	}
	if prepared != 1 || d.Cache().Loads() != 1 {
		t.Fatalf("prepared %d times, %d loads: the schema is fetched and prepared once", prepared, d.Cache().Loads())
	}
	_, err := d.Decode(context.Background(), frame(id, "bad"))
	if err == nil || !strings.Contains(err.Error(), "schema id 1 (subject c-value version 1): body does not match") {
		t.Fatalf("err = %v", err)
	}
	_, err = d.Decode(context.Background(), []byte("{}"))
	var nf *NotFramedError
	if !errors.As(err, &nf) {
		t.Fatalf("err = %v, want NotFramedError", err)
	}
}

func TestDecoderDefaultSchemaIDReadsUnframedValues(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id := mustRegister(t, reg, "c-value", sr.Schema{Schema: avroC})
	pid := mustRegister(t, reg, "p-value", sr.Schema{Schema: `syntax = "proto3"; message P { int32 a = 1; }`, Type: sr.TypeProtobuf})
	mk := func(s Schema, _ Options) (Codec, error) { return textCodec{s}, nil }
	d := NewDecoder(newClient(t, reg.URL(), nil, ""), DecoderConfig{MakeCodec: mk, DefaultID: id, HasDefaultID: true})
	got, err := d.Decode(context.Background(), []byte("raw"))
	if err != nil || got.Value != "c-value:raw" || got.ID != id {
		t.Fatalf("decoded = %+v, %v", got, err)
	}
	if got, err := d.Decode(context.Background(), frame(id, "framed")); err != nil || got.Value != "c-value:framed" {
		t.Fatalf("a framed value still uses its own header: %+v, %v", got, err)
	}
	d = NewDecoder(newClient(t, reg.URL(), nil, ""), DecoderConfig{MakeCodec: mk, DefaultID: pid, HasDefaultID: true})
	if _, err := d.Decode(context.Background(), []byte("raw")); err == nil || !strings.Contains(err.Error(), "Protobuf schema, which needs the message index") {
		t.Fatalf("err = %v", err)
	}
}

func TestDecoderSchemaWithoutCodecFailsItsMessages(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id := mustRegister(t, reg, "c-value", sr.Schema{Schema: avroC})
	d := NewDecoder(newClient(t, reg.URL(), nil, ""), DecoderConfig{
		MakeCodec: func(Schema, Options) (Codec, error) { return nil, errors.New("field c: unknown type") },
	})
	_, err := d.Decode(context.Background(), frame(id, "v"))
	var se *SchemaError
	if !errors.As(err, &se) || Retryable(err) || !strings.Contains(err.Error(), "AVRO schema (subject c-value version 1): field c: unknown type") {
		t.Fatalf("err = %v", err)
	}
}

// constCodec decodes every body as the same value.
type constCodec struct{ common *commonschema.Schema }

func (c constCodec) Decode([]byte) (any, *commonschema.Schema, error) { return true, c.common, nil }

// With default_schema_id an unframed value, which may be every value of
// the topic, costs what a framed one does: no header error is made for it.
func TestDecoderDefaultSchemaIDCostsNoErrorPerValue(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id := mustRegister(t, reg, "c-value", sr.Schema{Schema: avroC})
	common := &commonschema.Schema{Type: commonschema.Boolean}
	d := NewDecoder(newClient(t, reg.URL(), nil, ""), DecoderConfig{
		MakeCodec: func(Schema, Options) (Codec, error) { return constCodec{common}, nil },
		DefaultID: id, HasDefaultID: true,
	})
	ctx := context.Background()
	raw, framed := []byte("raw"), frame(id, "v")
	if _, err := d.Decode(ctx, raw); err != nil {
		t.Fatal(err)
	}
	perFramed := testing.AllocsPerRun(100, func() { _, _ = d.Decode(ctx, framed) })
	perRaw := testing.AllocsPerRun(100, func() { _, _ = d.Decode(ctx, raw) })
	if perRaw > perFramed {
		t.Fatalf("an unframed value allocates %v times, a framed one %v", perRaw, perFramed)
	}
}

// A codec maker that panics on a schema fails the messages of that id with
// a SchemaError; the next message of the id is answered too, not left
// waiting on an entry that never loads.
func TestDecoderCodecPanicFailsItsMessages(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id := mustRegister(t, reg, "c-value", sr.Schema{Schema: avroC})
	d := NewDecoder(newClient(t, reg.URL(), nil, ""), DecoderConfig{
		MakeCodec: func(Schema, Options) (Codec, error) { panic("index out of range") },
	})
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := d.Decode(ctx, frame(id, "v"))
		cancel()
		var se *SchemaError
		if !errors.As(err, &se) || Retryable(err) || !strings.Contains(err.Error(), "the schema parser panicked: index out of range") {
			t.Fatalf("err = %v, want a SchemaError naming the panic", err)
		}
	}
}
