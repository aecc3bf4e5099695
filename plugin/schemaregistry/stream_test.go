package schemaregistry

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

const orderSchema = `{"type":"record","name":"Order","namespace":"t","fields":[
 {"name":"id","type":"long"},
 {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
 {"name":"note","type":["null","string"],"default":null}]}`

// encodeOrder frames an Order in the wire format with twmb/avro and
// franz-go's ConfluentHeader.
func encodeOrder(t *testing.T, id int, v map[string]any) []byte {
	t.Helper()
	s, err := avro.Parse(orderSchema)
	if err != nil {
		t.Fatal(err)
	}
	b, err := new(sr.ConfluentHeader).AppendEncode(nil, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err = s.AppendEncode(b, v); err != nil {
		t.Fatal(err)
	}
	return b
}

// buildStream is producer → schema_registry_decode → consumer, the
// consumer collecting what reaches the output.
func buildStream(t *testing.T, url string) (service.MessageBatchHandlerFunc, *service.Stream, func() service.MessageBatch) {
	t.Helper()
	b := service.NewStreamBuilder()
	if err := b.SetLoggerYAML("level: none"); err != nil {
		t.Fatal(err)
	}
	produce, err := b.AddBatchProducerFunc()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddProcessorYAML("schema_registry_decode:\n  url: " + url + "\n  avro:\n    preserve_logical_types: true\n    raw_unions: true\n    store_schema_metadata: schema\n"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got service.MessageBatch
	if err := b.AddBatchConsumerFunc(func(_ context.Context, mb service.MessageBatch) error {
		mu.Lock()
		got = append(got, mb...)
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	strm, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = strm.Run(context.Background()) }()
	return produce, strm, func() service.MessageBatch {
		mu.Lock()
		defer mu.Unlock()
		return append(service.MessageBatch(nil), got...)
	}
}

// TestStreamDecodesAvroWithRegistryTypesAfterTheRegistryHeals: the
// registry answers 503 when the batch arrives; the batch waits (not
// delivered, not failed), then lands decoded once the registry answers:
// the decimal exact with its scale, the timestamp a time value, the
// union plain, schema_id and the common schema in the metadata.
func TestStreamDecodesAvroWithRegistryTypesAfterTheRegistryHeals(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id, _, err := reg.RegisterSchema("orders-value", sr.Schema{Schema: orderSchema})
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	down.Store(true)
	hits := failWhile(reg, &down, http.StatusServiceUnavailable)
	produce, strm, got := buildStream(t, reg.URL())
	defer strm.StopWithin(5 * time.Second)

	at := time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)
	value := encodeOrder(t, id, map[string]any{"id": int64(7), "at": at, "price": "12.30", "note": "fragile"})
	errc := make(chan error, 1)
	go func() { errc <- produce(context.Background(), service.MessageBatch{service.NewMessage(value)}) }()
	deadline := time.Now().Add(10 * time.Second)
	for hits.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if hits.Load() < 2 || len(got()) != 0 {
		t.Fatalf("registry hits %d, delivered %d: the batch should wait while the registry answers 503", hits.Load(), len(got()))
	}
	down.Store(false)
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("the batch was not acknowledged: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the batch did not land once the registry healed")
	}
	out := got()
	if len(out) != 1 || out[0].GetError() != nil {
		t.Fatalf("delivered %v (%v)", out, out[0].GetError())
	}
	v, err := out[0].AsStructured()
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	if ts, ok := m["at"].(time.Time); !ok || !ts.Equal(at) {
		t.Fatalf("at = %#v, want %v as a time value", m["at"], at)
	}
	if p, ok := m["price"].(json.Number); !ok || p != "12.30" {
		t.Fatalf("price = %#v, want the exact 12.30", m["price"])
	}
	if m["note"] != "fragile" {
		t.Fatalf("note = %#v, want the plain union value", m["note"])
	}
	if sid, _ := out[0].MetaGetMut(MetaSchemaID); sid != id {
		t.Fatalf("schema_id = %v", sid)
	}
	sch, _ := out[0].MetaGetMut("schema")
	cs, err := commonschema.Parse(sch)
	if err != nil {
		t.Fatal(err)
	}
	var price *commonschema.Schema
	for i := range cs.Children {
		if cs.Children[i].Name == "price" {
			price = &cs.Children[i]
		}
	}
	if price == nil || price.Type != commonschema.Decimal || price.Precision != 10 || price.Scale != 2 {
		t.Fatalf("stored schema's price = %+v", price)
	}
}

// TestStreamShutdownWhileTheRegistryIsDownNacksTheBatch: a batch held for
// the registry when the stream stops is never acknowledged (the engine
// nacks it: its input sends it again after a restart) nor delivered, and
// the hold does not keep the stream from stopping.
func TestStreamShutdownWhileTheRegistryIsDownNacksTheBatch(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id, _, _ := reg.RegisterSchema("orders-value", sr.Schema{Schema: orderSchema})
	var down atomic.Bool
	down.Store(true)
	hits := failWhile(reg, &down, 0)
	produce, strm, got := buildStream(t, reg.URL())

	errc := make(chan error, 1)
	value := encodeOrder(t, id, map[string]any{"id": int64(1), "at": time.Now(), "price": "1.00", "note": nil})
	pctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { errc <- produce(pctx, service.MessageBatch{service.NewMessage(value)}) }()
	deadline := time.Now().Add(10 * time.Second)
	for hits.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	began := time.Now()
	_ = strm.StopWithin(2 * time.Second)
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the stream took %s to stop while a batch was held", took)
	}
	// The inproc producer hears of the nack only through its context
	// once the stream is gone; what matters is that it never hears of
	// an acknowledgement.
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("the held batch was acknowledged at shutdown; it must be nacked")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the producer got no answer")
	}
	if n := len(got()); n != 0 {
		t.Fatalf("%d messages reached the output", n)
	}
}
