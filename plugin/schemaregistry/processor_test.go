package schemaregistry

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

const avroSchema = `{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}`

// echoCodec decodes a body as {"subject": …, "body": …}: it shows which
// schema a value was decoded with, independently of the real codecs.
type echoCodec struct {
	s      registry.Schema
	common *commonschema.Schema
}

func (c echoCodec) Decode(body []byte) (any, *commonschema.Schema, error) {
	if string(body) == "bad" {
		return nil, nil, errors.New("field a: not a string")
	}
	return map[string]any{"subject": c.s.Subject, "body": string(body)}, c.common, nil
}

func echo(s registry.Schema, _ registry.Options) (registry.Codec, error) {
	return echoCodec{s: s, common: &commonschema.Schema{Type: commonschema.Object, Children: []commonschema.Schema{{Name: "a", Type: commonschema.String}}}}, nil
}

func frame(id int, body string) []byte {
	b := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(b[1:], uint32(id))
	return append(b, body...)
}

// newTestProcessor parses yaml with the processor's spec and builds it with
// the echo codec and short back-off.
func newTestProcessor(t *testing.T, yaml string) (*processor, *service.Resources) {
	t.Helper()
	conf, err := Spec().ParseYAML(yaml, nil)
	if err != nil {
		t.Fatal(err)
	}
	mgr := service.MockResources()
	cfg, err := ParseConfig(conf, mgr.FS())
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProcessorWith(cfg, mgr, echo)
	if err != nil {
		t.Fatal(err)
	}
	p.retryInitial, p.retryMax = 10*time.Millisecond, 50*time.Millisecond
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p, mgr
}

func batchOf(values ...[]byte) service.MessageBatch {
	b := make(service.MessageBatch, len(values))
	for i, v := range values {
		b[i] = service.NewMessage(v)
	}
	return b
}

func TestProcessDecodesSetsMetadataAndFailsOnlyBadMessages(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id, _, err := reg.RegisterSchema("orders-value", sr.Schema{Schema: avroSchema})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := newTestProcessor(t, "url: "+reg.URL()+"\navro:\n  store_schema_metadata: schema\n")
	out, err := p.ProcessBatch(context.Background(), batchOf(frame(id, "x"), []byte(`{"a":"x"}`), frame(777, "x"), []byte{0, 0}, frame(id, "bad")))
	if err != nil || len(out) != 1 || len(out[0]) != 5 {
		t.Fatalf("out = %v, err = %v", out, err)
	}
	m := out[0]
	if err := m[0].GetError(); err != nil {
		t.Fatal(err)
	}
	v, _ := m[0].AsStructured()
	if !reflect.DeepEqual(v, map[string]any{"subject": "orders-value", "body": "x"}) {
		t.Fatalf("value = %v", v)
	}
	for k, want := range map[string]any{MetaSchemaID: id, MetaSchemaSubject: "orders-value", MetaSchemaVersion: 1} {
		if got, ok := m[0].MetaGetMut(k); !ok || got != want {
			t.Fatalf("meta %s = %v, want %v", k, got, want)
		}
	}
	sch, ok := m[0].MetaGetMut("schema")
	if !ok {
		t.Fatal("no schema metadata")
	}
	parsed, err := commonschema.Parse(sch)
	if err != nil || parsed.Type != commonschema.Object || len(parsed.Children) != 1 || parsed.Children[0].Name != "a" {
		t.Fatalf("stored schema = %v (%v)", sch, err)
	}
	wants := []string{
		"",
		`schema_registry_decode: message 1: value is not in the Schema Registry wire format (first byte 0x7b, not the magic byte 0x00: it looks like JSON)`,
		`schema_registry_decode: message 2: schema id 777 is not in the schema registry (error 40403: schema not found)`,
		`schema_registry_decode: message 3: value is not in the Schema Registry wire format (2 bytes, shorter than the 5-byte header)`,
		`schema_registry_decode: message 4: schema id 1 (subject orders-value version 1): field a: not a string`,
	}
	for i, want := range wants[1:] {
		if err := m[i+1].GetError(); err == nil || err.Error() != want {
			t.Fatalf("message %d: error %v, want %q", i+1, err, want)
		}
	}
	if st, _ := p.fault.health(); st != healthhttp.StatusUp {
		t.Fatalf("health = %s: message faults are no registry fault", st)
	}
}

// failFor makes the registry answer 503 (or, with status 0, close the
// connection) while down is set.
func failWhile(reg *srfake.Registry, down *atomic.Bool, status int) *atomic.Int64 {
	var hits atomic.Int64
	reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		if !down.Load() {
			return false
		}
		hits.Add(1)
		if status == 0 {
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			c.Close()
			return true
		}
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"error_code":50001,"message":"Error in the backend data store"}`))
		return true
	})
	return &hits
}

func TestRegistryDownHoldsTheBatchReportsItAndHeals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		want   string
	}{
		{"5xx", 503, "answered HTTP 503: Error in the backend data store"},
		{"connection closed", 0, "unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := srfake.New()
			defer reg.Close()
			id, _, _ := reg.RegisterSchema("orders-value", sr.Schema{Schema: avroSchema})
			var down atomic.Bool
			down.Store(true)
			hits := failWhile(reg, &down, tc.status)
			p, _ := newTestProcessor(t, "url: "+reg.URL()+"\n")

			done := make(chan []service.MessageBatch)
			go func() {
				out, err := p.ProcessBatch(context.Background(), batchOf(frame(id, "1"), frame(id, "2")))
				if err != nil {
					t.Error(err)
				}
				done <- out
			}()
			deadline := time.Now().Add(5 * time.Second)
			for hits.Load() < 3 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			select {
			case <-done:
				t.Fatal("the batch went on while the registry was down")
			default:
			}
			st, problems := p.fault.health()
			if st != healthhttp.StatusDegraded || len(problems) != 1 || !strings.Contains(problems[0], tc.want) || !strings.Contains(problems[0], "check that the registry is up") {
				t.Fatalf("health = %s %v", st, problems)
			}
			p.fault.setClock(func() time.Time { return time.Now().Add(downAfter) })
			if st, _ := p.fault.health(); st != healthhttp.StatusDown {
				t.Fatalf("health after %s = %s, want down", downAfter, st)
			}
			p.fault.setClock(time.Now)

			down.Store(false)
			var out []service.MessageBatch
			select {
			case out = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the batch did not go on once the registry healed")
			}
			for i, m := range out[0] {
				v, err := m.AsStructured()
				if m.GetError() != nil || err != nil || v.(map[string]any)["body"] != []string{"1", "2"}[i] {
					t.Fatalf("message %d: %v %v %v", i, v, err, m.GetError())
				}
			}
			if st, _ := p.fault.health(); st != healthhttp.StatusUp {
				t.Fatalf("health after healing = %s", st)
			}
		})
	}
}

// A url answering 404 without a registry error (a wrong path, or a proxy's
// page) is no unknown id: the batch is held, not failed, the health names
// url, and it goes on once the url answers as the registry.
func TestBare404HoldsTheBatchNamingTheURLField(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id, _, _ := reg.RegisterSchema("orders-value", sr.Schema{Schema: avroSchema})
	var wrong atomic.Bool
	var hits atomic.Int64
	wrong.Store(true)
	reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		if !wrong.Load() {
			return false
		}
		hits.Add(1)
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("<html><body>404 page not found</body></html>"))
		return true
	})
	p, _ := newTestProcessor(t, "url: "+reg.URL()+"\n")

	done := make(chan []service.MessageBatch)
	go func() {
		out, err := p.ProcessBatch(context.Background(), batchOf(frame(id, "1")))
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	deadline := time.Now().Add(5 * time.Second)
	for hits.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case out := <-done:
		t.Fatalf("the batch went on (%v) while the url answered 404 without a registry error", out[0][0].GetError())
	default:
	}
	st, problems := p.fault.health()
	if st != healthhttp.StatusDegraded || len(problems) != 1 ||
		!strings.Contains(problems[0], "the registry at "+reg.URL()+" answered 404 without a registry error (<html><body>404 page not found</body></html>): check url") ||
		!strings.Contains(problems[0], "set url to the registry's base URL") {
		t.Fatalf("health = %s %v", st, problems)
	}

	wrong.Store(false)
	select {
	case out := <-done:
		if err := out[0][0].GetError(); err != nil {
			t.Fatalf("message failed after the url healed: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the batch did not go on once the url answered as the registry")
	}
}

func TestRefusedCredentialsNameTheFieldAndShutdownNacks(t *testing.T) {
	good := "Basic " + base64.StdEncoding.EncodeToString([]byte("svc:right"))
	reg := srfake.New(srfake.WithAuth(good))
	defer reg.Close()
	id, _, _ := reg.RegisterSchema("orders-value", sr.Schema{Schema: avroSchema})
	p, _ := newTestProcessor(t, "url: "+reg.URL()+"\nbasic_auth:\n  enabled: true\n  username: svc\n  password: wrong-secret\n")

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := p.ProcessBatch(ctx, batchOf(frame(id, "1")))
		errc <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if st, _ := p.fault.health(); st != healthhttp.StatusUp || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, problems := p.fault.health()
	if len(problems) != 1 || !strings.Contains(problems[0], "refused access with the credentials (HTTP 403: User not authorized): check basic_auth.username and basic_auth.password") ||
		strings.Contains(problems[0], "wrong-secret") {
		t.Fatalf("problems = %v", problems)
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v: on shutdown the held batch is an error, which the engine nacks", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ProcessBatch did not return on shutdown")
	}
}

func TestAvroMappingRewritesTheSchemaBeforeItsCodec(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id, _, _ := reg.RegisterSchema("orders-value", sr.Schema{Schema: avroSchema})
	conf, err := Spec().ParseYAML("url: "+reg.URL()+"\navro:\n  mapping: 'root = this.assign({\"name\": \"Renamed\"})'\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(conf, nil)
	if err != nil {
		t.Fatal(err)
	}
	var seen string
	p, err := newProcessorWith(cfg, service.MockResources(), func(s registry.Schema, o registry.Options) (registry.Codec, error) {
		seen = s.Text
		return echo(s, o)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if out, _ := p.ProcessBatch(context.Background(), batchOf(frame(id, "x"))); out[0][0].GetError() != nil {
		t.Fatal(out[0][0].GetError())
	}
	if !strings.Contains(seen, `"name":"Renamed"`) || !strings.Contains(seen, `"fields"`) {
		t.Fatalf("codec saw %s", seen)
	}
}

// TestThreadsOfOneConfigShareTheDecoderAndTheFault: Benthos builds a
// processor per pipeline thread; those of one config share one cache and
// one fault state (one explanation, one health entry), another config
// (another url) has its own.
func TestThreadsOfOneConfigShareTheDecoderAndTheFault(t *testing.T) {
	mgr := service.MockResources()
	build := func(url string) *processor {
		conf, err := Spec().ParseYAML("url: "+url+"\n", nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := ParseConfig(conf, mgr.FS())
		if err != nil {
			t.Fatal(err)
		}
		p, err := newProcessorWith(cfg, mgr, echo)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b, c := build("http://127.0.0.1:1"), build("http://127.0.0.1:1"), build("http://127.0.0.1:2")
	if a.dec != b.dec || a.fault != b.fault {
		t.Fatal("two threads of one config should share the decoder and the fault state")
	}
	if a.dec == c.dec || a.fault == c.fault {
		t.Fatal("another config should have its own")
	}
	_ = a.Close(context.Background())
	if a.shared.users != 1 {
		t.Fatalf("users = %d after one of two closed", a.shared.users)
	}
	_ = b.Close(context.Background())
	_ = c.Close(context.Background())
}

// TestEachFormatStoresItsSchemaUnderItsOwnKey, with the real codecs: an
// Avro, a Protobuf and a JSON Schema message in one batch each carry their
// schema under their format's store_schema_metadata key, and only there.
func TestEachFormatStoresItsSchemaUnderItsOwnKey(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	avroID, _, err := reg.RegisterSchema("a-value", sr.Schema{Schema: avroSchema})
	if err != nil {
		t.Fatal(err)
	}
	protoID, _, err := reg.RegisterSchema("p-value", sr.Schema{Schema: `syntax = "proto3"; package t; message P { string a = 1; }`, Type: sr.TypeProtobuf})
	if err != nil {
		t.Fatal(err)
	}
	jsonID, _, err := reg.RegisterSchema("j-value", sr.Schema{Schema: `{"type":"object","properties":{"a":{"type":"string"}}}`, Type: sr.TypeJSON})
	if err != nil {
		t.Fatal(err)
	}
	conf, err := Spec().ParseYAML("url: "+reg.URL()+"\navro:\n  store_schema_metadata: av\nprotobuf:\n  store_schema_metadata: pb\njson:\n  store_schema_metadata: js\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(conf, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProcessor(cfg, service.MockResources())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	avroBody := []byte{2, 'x'}              // Avro string "x": zig-zag length 1, then the byte
	protoBody := []byte{0, 0x0a, 0x01, 'x'} // message index [0] as one 0, then field 1 = "x"
	out, err := p.ProcessBatch(context.Background(), batchOf(frame(avroID, string(avroBody)), frame(protoID, string(protoBody)), frame(jsonID, `{"a":"x"}`)))
	if err != nil {
		t.Fatal(err)
	}
	for i, key := range []string{"av", "pb", "js"} {
		m := out[0][i]
		if err := m.GetError(); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		v, _ := m.AsStructured()
		if v.(map[string]any)["a"] != "x" {
			t.Fatalf("message %d = %v", i, v)
		}
		for _, other := range []string{"av", "pb", "js"} {
			sch, ok := m.MetaGetMut(other)
			if ok != (other == key) {
				t.Fatalf("message %d: key %s present = %v", i, other, ok)
			}
			if ok {
				cs, err := commonschema.Parse(sch)
				if err != nil || cs.Type != commonschema.Object || len(cs.Children) != 1 || cs.Children[0].Name != "a" || cs.Children[0].Type != commonschema.String {
					t.Fatalf("message %d: stored schema %v (%v)", i, sch, err)
				}
			}
		}
	}
}

// TestTLSRegistryTrustsTLSRootCAs: an https registry whose certificate is
// not in the system roots is trusted through tls.root_cas; without it the
// batch is held and the advice names the field.
func TestTLSRegistryTrustsTLSRootCAs(t *testing.T) {
	reg := srfake.NewRegistry()
	srv := httptest.NewUnstartedServer(reg.Handler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the test
	srv.StartTLS()
	defer srv.Close()
	id, _, err := reg.RegisterSchema("orders-value", sr.Schema{Schema: avroSchema})
	if err != nil {
		t.Fatal(err)
	}
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	indented := "    " + strings.ReplaceAll(strings.TrimSpace(ca), "\n", "\n    ")
	p, _ := newTestProcessor(t, "url: "+srv.URL+"\ntls:\n  root_cas: |\n"+indented+"\n")
	out, err := p.ProcessBatch(context.Background(), batchOf(frame(id, "x")))
	if err != nil || out[0][0].GetError() != nil {
		t.Fatalf("with tls.root_cas: %v %v", err, out[0][0].GetError())
	}

	p, _ = newTestProcessor(t, "url: "+srv.URL+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := p.ProcessBatch(ctx, batchOf(frame(id, "x"))); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v: an untrusted certificate holds the batch", err)
	}
	_, problems := p.fault.health()
	if len(problems) != 1 || !strings.Contains(problems[0], "certificate") || !strings.Contains(problems[0], "tls.root_cas") {
		t.Fatalf("problems = %v", problems)
	}
}
