package zerobus

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp"
)

// The Avro schemas of the fast-path tests: v2 adds a nullable field.
const (
	fastV1 = `{"type":"record","name":"Reading","fields":[
 {"name":"id","type":"long"},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
 {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["OK","FAIL"]}},
 {"name":"note","type":["null","string"],"default":null}]}`
	fastV2 = `{"type":"record","name":"Reading","fields":[
 {"name":"id","type":"long"},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
 {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["OK","FAIL"]}},
 {"name":"note","type":["null","string"],"default":null},
 {"name":"qty","type":["null","int"],"default":null}]}`
	fastTable = "main.default.readings"
	fastDLQ   = "main.default.readings_dlq"
)

// fastRegistry is an in-process registry (franz-go's srfake) with schema
// v1 of subject readings-value registered.
type fastRegistry struct {
	reg  *srfake.Registry
	idV1 int
}

func newFastRegistry(t *testing.T) *fastRegistry {
	t.Helper()
	reg := srfake.New()
	t.Cleanup(reg.Close)
	id, _, err := reg.RegisterSchema("readings-value", sr.Schema{Schema: fastV1, Type: sr.TypeAvro})
	require.NoError(t, err)
	return &fastRegistry{reg: reg, idV1: id}
}

// frame encodes v with schema text in the Confluent wire format with id.
func frame(t *testing.T, text string, id int, v map[string]any) *service.Message {
	t.Helper()
	s, err := avro.Parse(text)
	require.NoError(t, err)
	var hdr sr.ConfluentHeader
	b, err := hdr.AppendEncode(nil, id, nil)
	require.NoError(t, err)
	b, err = s.AppendEncode(b, v)
	require.NoError(t, err)
	return service.NewMessage(b)
}

func reading(i int) map[string]any {
	r := map[string]any{
		"id": int64(i), "amount": big.NewRat(int64(i)*125+1, 100),
		"at":     time.Date(2026, 3, 1, 12, 30, 45, 123456000+i*1000, time.UTC),
		"day":    time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC),
		"status": "OK", "note": nil,
	}
	if i%2 == 0 {
		r["note"] = fmt.Sprintf("even %d", i)
	}
	return r
}

func fastYAML(url string) string {
	return "catalog:\n  provision: true\n  warehouse_id: wh\ndead_letter:\n  table: " + fastDLQ + "\nschema_registry:\n  url: " + url + "\n"
}

// The output's schema_registry block, against the emulator: framed Avro
// values create the table with the registry's types (not inferred ones) and
// land exactly through the fast path; v2's new field becomes a column
// before its rows land; a value of a schema id the registry does not know
// and a value that does not decode fail alone (dead letters with the
// registry's message) beside good rows; a JSON message still lands as JSON.
func TestSchemaRegistryFastPathEmulated(t *testing.T) {
	fr := newFastRegistry(t)
	e := startEmulated(t, fastTable, fastYAML(fr.reg.URL()))

	require.Empty(t, e.write(t, service.MessageBatch{frame(t, fastV1, fr.idV1, reading(1)), frame(t, fastV1, fr.idV1, reading(2))}))
	tbl, ok := e.srv.Registry().Get(fastTable)
	require.True(t, ok)
	types := map[string]string{}
	for _, c := range tbl.Columns {
		types[c.Name] = c.Type.Text()
		if !c.Nullable {
			types[c.Name] += " NOT NULL"
		}
	}
	for name, w := range map[string]string{
		"id": "bigint NOT NULL", "amount": "decimal(12,2) NOT NULL", "at": "timestamp NOT NULL",
		"day": "date NOT NULL", "status": "string NOT NULL", "note": "string",
	} {
		assert.Equal(t, w, types[name], "column %s", name)
	}
	byID := func() map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, r := range e.rows(t, fastTable) {
			out[jsonText(t, r["id"])] = r
		}
		return out
	}
	rows := byID()
	require.Len(t, rows, 2)
	assert.Equal(t, `"1.26"`, jsonText(t, rows["1"]["amount"]), "every decimal digit")
	assert.Equal(t, `"2026-03-01T12:30:45.123457Z"`, jsonText(t, rows["1"]["at"]), "the microsecond")
	assert.Equal(t, `"1999-12-31"`, jsonText(t, rows["1"]["day"]))
	assert.Equal(t, `"OK"`, jsonText(t, rows["1"]["status"]))
	assert.Nil(t, rows["1"]["note"])
	assert.Equal(t, `"even 2"`, jsonText(t, rows["2"]["note"]))

	// v2 adds qty: the column first (the registry's INT), then its rows.
	idV2, _, err := fr.reg.RegisterSchema("readings-value", sr.Schema{Schema: fastV2, Type: sr.TypeAvro})
	require.NoError(t, err)
	r3 := reading(3)
	r3["qty"] = int32(7)
	require.Empty(t, e.write(t, service.MessageBatch{frame(t, fastV2, idV2, r3), frame(t, fastV1, fr.idV1, reading(4))}))
	tbl, _ = e.srv.Registry().Get(fastTable)
	qty, at := tbl.Column("qty")
	require.GreaterOrEqual(t, at, 0, "v2's field became a column")
	assert.Equal(t, "int", qty.Type.Text(), "the registry's type")
	rows = byID()
	require.Len(t, rows, 4)
	assert.Equal(t, `7`, jsonText(t, rows["3"]["qty"]))
	assert.Nil(t, rows["4"]["qty"])

	// An unknown schema id and a truncated value fail alone; the good
	// framed row and a JSON row land.
	unknown := service.NewMessage([]byte{0, 0, 0, 0x03, 0xe7, 2})
	good := frame(t, fastV1, fr.idV1, reading(5))
	gb, _ := good.AsBytes()
	truncated := service.NewMessage(gb[:8])
	plain := service.NewMessage([]byte(`{"id":6,"amount":"6.00","at":"2026-03-01T00:00:00Z","day":"2026-03-01","status":"FAIL"}`))
	require.Empty(t, e.write(t, service.MessageBatch{unknown, good, truncated, plain}), "dead-lettered, the batch is acknowledged")
	rows = byID()
	require.Len(t, rows, 6)
	assert.Equal(t, `"6.26"`, jsonText(t, rows["5"]["amount"]))
	assert.Equal(t, `"FAIL"`, jsonText(t, rows["6"]["status"]), "a JSON message still lands as JSON")
	dead := map[string]string{}
	for _, d := range e.rows(t, fastDLQ) {
		dead[jsonText(t, d["message_index"])] = fmt.Sprint(d["error"])
	}
	require.Len(t, dead, 2, "dead letters: %v", dead)
	assert.Contains(t, dead["0"], "schema id 999 is not in the schema registry (error 40403", "the registry's message")
	assert.Contains(t, dead["2"], "schema id 1 (subject readings-value version 1): decoding the Avro value")
	if st, _ := e.out.cfg.registryHolder.Health(); st != healthhttp.StatusUp {
		t.Fatalf("health %s: a value's fault is no registry fault", st)
	}
}

// While the registry answers 503 the batch of a schema id not yet fetched
// is held (WriteBatch waits, retrying with back-off; health reports it),
// nothing is failed, and it lands once the registry answers again.
func TestSchemaRegistryDownHoldsTheBatchAndHealsEmulated(t *testing.T) {
	fr := newFastRegistry(t)
	var down atomic.Bool
	var hits atomic.Int64
	fr.reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		if !down.Load() {
			return false
		}
		hits.Add(1)
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error_code":50301,"message":"the registry is restarting"}`))
		return true
	})
	e := startEmulated(t, fastTable, fastYAML(fr.reg.URL()))
	h := e.out.cfg.registryHolder
	require.NotNil(t, h)
	h.SetBackoff(10*time.Millisecond, 50*time.Millisecond)

	down.Store(true)
	done := make(chan error, 1)
	go func() {
		done <- e.out.WriteBatch(context.Background(), service.MessageBatch{frame(t, fastV1, fr.idV1, reading(1)), frame(t, fastV1, fr.idV1, reading(2))})
	}()
	require.Eventually(t, func() bool { return hits.Load() >= 3 }, 10*time.Second, 10*time.Millisecond, "retried with back-off")
	select {
	case err := <-done:
		t.Fatalf("the batch was not held: %v", err)
	default:
	}
	st, problems := h.Health()
	assert.Equal(t, healthhttp.StatusDegraded, st)
	require.Len(t, problems, 1)
	assert.Contains(t, problems[0], "503")
	assert.Contains(t, problems[0], "check that the registry is up")
	assert.Empty(t, e.rows(t, fastTable), "nothing written while held")

	down.Store(false)
	select {
	case err := <-done:
		require.NoError(t, err, "the held batch lands whole")
	case <-time.After(20 * time.Second):
		t.Fatal("the batch did not heal")
	}
	assert.Len(t, e.rows(t, fastTable), 2)
	st, _ = h.Health()
	assert.Equal(t, healthhttp.StatusUp, st)
}

// schema_registry: off by default; refused beside catalog.schema_metadata
// (one source of types) at run time as in lint; its start-up line names the
// url and the auth mechanism, never the credentials.
func TestSchemaRegistryConfig(t *testing.T) {
	c, err := parseYAML(t, minimalYAML)
	require.NoError(t, err)
	assert.Equal(t, "off", c.registryLog())

	_, err = parseYAML(t, minimalYAML+"catalog:\n  provision: true\n  warehouse_id: wh\n  schema_metadata: s\nschema_registry:\n  url: http://127.0.0.1:8081\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "field schema_registry.url and catalog.schema_metadata: both set, two sources of the table's types")

	c, err = parseYAML(t, minimalYAML+"schema_registry:\n  url: http://127.0.0.1:8081\n  cache_duration: 1m\n  basic_auth:\n    enabled: true\n    username: u\n    password: hunter2secret\n")
	require.NoError(t, err)
	o, err := newOutput(c, service.MockResources(), deps{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close(context.Background()) })
	line := knobsLine(c.knobs(1))
	assert.Contains(t, line, "schema_registry=url=http://127.0.0.1:8081 auth=basic_auth tls=false cache_duration=1m0s")
	assert.NotContains(t, line, "hunter2secret")
	assert.True(t, c.ntzFromZoned(), "a local-timestamp lands as its wall clock")
}

// A JSON Schema topic through the schema_registry block takes the general
// path (the registry codec, then the structured converter): the table gets
// the schema's types and the values their coerced types.
func TestSchemaRegistryJSONSchemaEmulated(t *testing.T) {
	reg := srfake.New()
	t.Cleanup(reg.Close)
	id, _, err := reg.RegisterSchema("people-value", sr.Schema{Type: sr.TypeJSON, Schema: `{"type":"object","properties":{
 "id":{"type":"integer"},"name":{"type":"string"},"born":{"type":"string","format":"date-time"}},"required":["id","name"]}`})
	require.NoError(t, err)
	const table = "main.default.people"
	e := startEmulated(t, table, "catalog:\n  provision: true\n  warehouse_id: wh\nschema_registry:\n  url: "+reg.URL()+"\n")
	msg := func(v string) *service.Message {
		var hdr sr.ConfluentHeader
		b, err := hdr.AppendEncode(nil, id, nil)
		require.NoError(t, err)
		return service.NewMessage(append(b, v...))
	}
	require.Empty(t, e.write(t, service.MessageBatch{msg(`{"id":1,"name":"Ada","born":"1815-12-10T00:00:00Z"}`), msg(`{"id":2,"name":"Alan"}`)}))
	tbl, ok := e.srv.Registry().Get(table)
	require.True(t, ok)
	types := map[string]string{}
	for _, c := range tbl.Columns {
		types[c.Name] = c.Type.Text()
		if !c.Nullable {
			types[c.Name] += " NOT NULL"
		}
	}
	assert.Equal(t, "bigint NOT NULL", types["id"])
	assert.Equal(t, "string NOT NULL", types["name"])
	assert.Equal(t, "timestamp", types["born"])
	got := map[string]string{}
	for _, r := range e.rows(t, table) {
		got[jsonText(t, r["id"])] = jsonText(t, r["name"]) + " " + jsonText(t, r["born"])
	}
	assert.Equal(t, map[string]string{"1": `"Ada" "1815-12-10T00:00:00Z"`, "2": `"Alan" null`}, got)
}
