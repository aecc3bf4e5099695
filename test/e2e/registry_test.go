package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	be "encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
)

// The proof against an encoder this project did not write, through the
// built binaries: Confluent's own JavaScript serializers (npm
// @confluentinc/schemaregistry, test/registryjs/e2e.js) register schemas in
// the emulator process's registry (--schema-registry) and encode records;
// the test produces them to the emulator's Kafka broker (--kafka) with
// franz-go, and the product binary runs redpanda → schema_registry_decode →
// zerobus with catalog.provision, catalog.schema_metadata and a dead-letter
// table; beside it a second binary reads the same topics on the fast path
// (pack_records, the output's schema_registry block, no processor) into
// tables of their own. Every column type and every value of both is read
// back from the emulator's UC and rows endpoints and compared exactly.

// The topics of test/registryjs/e2e.js (keep in step).
const (
	srAvroTopic     = "sr_avro"
	srProtoTopic    = "sr_proto"
	srJSONTopic     = "sr_json"
	srDebeziumTopic = "dbz.inventory.customers"
)

// registryJSFrames is e2e.js's output: base64 framed values per topic, and
// the schema id of each subject it registered.
type registryJSFrames struct {
	AvroV1   []string       `json:"avro_v1"`
	AvroV2   []string       `json:"avro_v2"`
	Protobuf []string       `json:"protobuf"`
	JSON     []string       `json:"json"`
	Debezium []string       `json:"debezium"`
	IDs      map[string]int `json:"ids"`
}

// registryJS runs test/registryjs/e2e.js once against the registry at url
// and returns the framed values, decoded. Missing npm packages fail the
// test in CI (CI=true) and skip it elsewhere, saying how to install them.
func registryJS(t *testing.T, url string) (frames map[string][][]byte, ids map[string]int) {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "test", "registryjs")
	const pkg = "node_modules/@confluentinc/schemaregistry/package.json"
	if _, err := os.Stat(filepath.Join(dir, pkg)); err != nil {
		msg := "Confluent's JavaScript serializers are not installed (test/registryjs/" + pkg + " missing): run `make conformance-deps`"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	node := os.Getenv("NODE_BINARY")
	if node == "" {
		var err error
		node, err = exec.LookPath("node")
		require.NoError(t, err, "node not found on PATH (set $NODE_BINARY)")
	}
	tmp := t.TempDir()
	descriptors, out := filepath.Join(tmp, "descriptors.b64"), filepath.Join(tmp, "frames.json")
	writeProofDescriptors(t, filepath.Join(dir, "proto"), descriptors)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "e2e.js", "--registry="+url, "--descriptors="+descriptors, "--out="+out)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "e2e.js: %s\n%s", stdout.String(), stderr.String())
	text, err := os.ReadFile(out)
	require.NoError(t, err)
	var f registryJSFrames
	require.NoError(t, json.Unmarshal(text, &f))
	frames = map[string][][]byte{}
	for name, list := range map[string][]string{"avro_v1": f.AvroV1, "avro_v2": f.AvroV2, "protobuf": f.Protobuf, "json": f.JSON, "debezium": f.Debezium} {
		for _, s := range list {
			b, err := base64.StdEncoding.DecodeString(s)
			require.NoError(t, err)
			frames[name] = append(frames[name], b)
		}
	}
	return frames, f.IDs
}

// writeProofDescriptors compiles test/registryjs/proto/proof/v1/event.proto
// (under root) and writes it, with its imports, as the base64
// FileDescriptorSet e2e.js reads (@bufbuild/protobuf cannot parse .proto
// text at run time).
func writeProofDescriptors(t *testing.T, root, path string) {
	t.Helper()
	compiler := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{root}})}
	files, err := compiler.Compile(context.Background(), "proof/v1/event.proto")
	require.NoError(t, err)
	set := &descriptorpb.FileDescriptorSet{}
	imports := files[0].Imports()
	for i := range imports.Len() {
		set.File = append(set.File, protodesc.ToFileDescriptorProto(imports.Get(i).FileDescriptor))
	}
	set.File = append(set.File, protodesc.ToFileDescriptorProto(files[0]))
	raw, err := proto.Marshal(set)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(raw)), 0o600))
}

// exactRows reads table's rows from the emulator process at httpURL with
// their numbers as json.Number (a BIGINT beyond 2^53 survives), keyed by
// key's value as JSON text.
func exactRows(t *testing.T, httpURL, table, key string) map[string]map[string]any {
	t.Helper()
	resp, err := http.Get(httpURL + "/emulator/v1/tables/" + table + "/rows?limit=0")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	d := json.NewDecoder(resp.Body)
	d.UseNumber()
	var rows []map[string]any
	require.NoError(t, d.Decode(&rows))
	out := map[string]map[string]any{}
	for _, r := range rows {
		k := exactJSON(t, r[key])
		require.NotContains(t, out, k, "table %s: two rows with %s %s", table, key, k)
		out[k] = r
	}
	return out
}

// exactJSON is v as compact JSON text.
func exactJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// columnTypes is table's columns as "name": "type[ NOT NULL]", from the
// emulator process (its Unity Catalog registry).
func columnTypes(t *testing.T, httpURL, table string) map[string]string {
	t.Helper()
	resp, err := http.Get(httpURL + "/emulator/v1/tables/" + table)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var info struct {
		Columns []struct {
			Name     string `json:"name"`
			TypeText string `json:"type_text"`
			Nullable bool   `json:"nullable"`
		} `json:"columns"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&info))
	out := map[string]string{}
	for _, c := range info.Columns {
		out[c.Name] = c.TypeText
		if !c.Nullable {
			out[c.Name] += " NOT NULL"
		}
	}
	return out
}

// produceValues writes values, in order, to partition 0 of topic.
func produceValues(t *testing.T, brokers, topic string, values ...[]byte) {
	t.Helper()
	b := &kafkaBroker{tb: t, addr: brokers}
	require.NoError(t, b.produce(topic, 1, 0, len(values), func(i int) []byte { return values[i] }))
}

// waitRowCounts waits until each table holds at least its count of rows.
func waitRowCounts(t *testing.T, httpURL string, p *proc, want map[string]int64) {
	t.Helper()
	eventually(t, 60*time.Second, 100*time.Millisecond, "the rows land", func() (bool, string) {
		var saw []string
		ok := true
		for table, n := range want {
			ti, err := fetchTableInfo(httpURL, table)
			if err != nil {
				ok = false
				saw = append(saw, err.Error())
				continue
			}
			saw = append(saw, fmt.Sprintf("%s: %d rows", table, ti.RowCount))
			ok = ok && ti.RowCount >= n
		}
		return ok, strings.Join(saw, "; ") + "\n" + tail(p.out.String(), 20)
	})
}

func TestSchemaRegistryConfluentJSEndToEnd(t *testing.T) {
	t.Parallel()
	began := time.Now()
	const (
		avroTable  = "main.default." + srAvroTopic
		protoTable = "main.default." + srProtoTopic
		jsonTable  = "main.default." + srJSONTopic
		dlq        = "main.default.sr_dead_letter"
		dlqFast    = "main.default.sr_dead_letter_fast"
	)
	vars, _ := startEmulatorProcessVars(t, "--kafka", "127.0.0.1:0", "--schema-registry", "127.0.0.1:0",
		"--kafka-topic", srAvroTopic+":1", "--kafka-topic", srProtoTopic+":1", "--kafka-topic", srJSONTopic+":1", "--kafka-topic", srDebeziumTopic+":1")
	brokers, httpURL, regURL := vars["KAFKA_BROKERS"], vars["DATABRICKS_HOST"], vars["SCHEMA_REGISTRY_URL"]
	require.NotEmpty(t, regURL, "--addr-file reports the registry: %v", vars)
	frames, ids := registryJS(t, regURL)
	nodeDone := time.Since(began)
	require.Len(t, frames["avro_v1"], 2)
	require.Len(t, frames["avro_v2"], 2)
	require.Len(t, frames["protobuf"], 2)
	require.Len(t, frames["json"], 2)

	// Two faults among the Avro records: a framed value whose schema id
	// the registry does not have, and a value that is not framed at all.
	const unknownID = 4040
	unknown := be.BigEndian.AppendUint32([]byte{0}, unknownID)
	unknown = append(unknown, 0x02, 'h', 'i')
	unframed := []byte(`{"id":99}`)
	produceValues(t, brokers, srAvroTopic, frames["avro_v1"][0], unknown, frames["avro_v1"][1], unframed)
	produceValues(t, brokers, srProtoTopic, frames["protobuf"]...)
	produceValues(t, brokers, srJSONTopic, frames["json"]...)

	config := filepath.Join(t.TempDir(), "registry.yaml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`
input:
  redpanda:
    seed_brokers: [ %q ]
    topics: [ %s, %s, %s ]
    consumer_group: sr-e2e
    start_offset: earliest
    commit_period: 1s
pipeline:
  processors:
    - schema_registry_decode:
        url: %s
        avro:
          preserve_logical_types: true
          raw_unions: true
          store_schema_metadata: schema
        protobuf:
          serialize_to_json: false
          store_schema_metadata: schema
        json:
          store_schema_metadata: schema
output:
  zerobus:
    endpoint: %s
    workspace_url: %s
    table: main.default.${! @kafka_topic }
    client_id: emulator
    client_secret: emulator-secret
    catalog:
      provision: true
      warehouse_id: emulator-warehouse
      schema_metadata: schema
    dead_letter:
      table: %s
http:
  address: %s
logger:
  level: INFO
`, brokers, srAvroTopic, srProtoTopic, srJSONTopic, regURL, vars["ZEROBUS_ENDPOINT"], httpURL, dlq, freeAddr(t))), 0o644))
	p := start(t, nil, "run", config)
	// The same topics on the fast path, beside it: record packs, the
	// output's own schema_registry block and no processor, into
	// <topic>_fast tables, which must get the same columns and values.
	fastConfig := filepath.Join(t.TempDir(), "registry-fast.yaml")
	require.NoError(t, os.WriteFile(fastConfig, []byte(fmt.Sprintf(`
input:
  redpanda:
    seed_brokers: [ %q ]
    topics: [ %s, %s, %s ]
    consumer_group: sr-e2e-fast
    start_offset: earliest
    commit_period: 1s
    pack_records: true
output:
  zerobus:
    endpoint: %s
    workspace_url: %s
    table: main.default.${! @kafka_topic }_fast
    client_id: emulator
    client_secret: emulator-secret
    catalog:
      provision: true
      warehouse_id: emulator-warehouse
    schema_registry:
      url: %s
    dead_letter:
      table: %s
http:
  address: %s
logger:
  level: INFO
`, brokers, srAvroTopic, srProtoTopic, srJSONTopic, vars["ZEROBUS_ENDPOINT"], httpURL, regURL, dlqFast, freeAddr(t))), 0o644))
	fast := start(t, nil, "run", fastConfig)
	// The Debezium example beside it, against the same emulator.
	produceValues(t, brokers, srDebeziumTopic, append(frames["debezium"], nil)...) // and a tombstone
	dbz := start(t, []string{"KAFKA_BROKERS=" + brokers, "SCHEMA_REGISTRY_URL=" + regURL, "ZEROBUS_ENDPOINT=" + vars["ZEROBUS_ENDPOINT"],
		"DATABRICKS_HOST=" + httpURL, "HTTP_ADDRESS=" + freeAddr(t), "LOG_LEVEL=WARN"}, "run", filepath.Join(repoRoot(t), "config", "examples", "debezium.yaml"))

	waitRowCounts(t, httpURL, p, map[string]int64{avroTable: 2, protoTable: 2, jsonTable: 2, dlq: 2})
	checkRegistryAvroV1(t, httpURL, avroTable)
	checkRegistryProtobuf(t, httpURL, protoTable)
	checkRegistryJSON(t, httpURL, jsonTable)
	var unknownDL, unframedDL map[string]any
	dead := exactRows(t, httpURL, dlq, "error")
	require.Len(t, dead, 2, "the two faults, each once")
	for text, d := range dead {
		switch {
		case strings.Contains(text, "schema id"):
			unknownDL = d
		case strings.Contains(text, "wire format"):
			unframedDL = d
		}
	}
	require.NotNil(t, unknownDL, "dead letters: %v", dead)
	require.NotNil(t, unframedDL, "dead letters: %v", dead)
	assert.Equal(t, `{"id":99}`, unframedDL["payload"], "the message as it reached the output")
	assert.Equal(t, avroTable, unknownDL["source_table"])
	assert.Regexp(t, `^failed in a processor: schema_registry_decode: message \d+: schema id 4040 is not in the schema registry \(error 40403: schema not found\)$`, unknownDL["error"],
		"the id and the registry's own message (srfake's)")
	assert.Regexp(t, `^failed in a processor: schema_registry_decode: message \d+: value is not in the Schema Registry wire format \(first byte 0x7b, not the magic byte 0x00: it looks like JSON\)$`, unframedDL["error"])
	assert.Equal(t, avroTable, unframedDL["source_table"])

	// The fast path: the same tables, and the same two faults
	// dead-lettered (the value that is not framed is read as JSON there,
	// and does not fit the table the registry typed).
	waitRowCounts(t, httpURL, fast, map[string]int64{avroTable + "_fast": 2, protoTable + "_fast": 2, jsonTable + "_fast": 2, dlqFast: 2})
	checkRegistryAvroV1(t, httpURL, avroTable+"_fast")
	checkRegistryProtobuf(t, httpURL, protoTable+"_fast")
	checkRegistryJSON(t, httpURL, jsonTable+"_fast")
	deadFast := exactRows(t, httpURL, dlqFast, "error")
	require.Len(t, deadFast, 2, "the two faults, each once, on the fast path: %v", deadFast)
	var fastErrs, fastPayloads []string
	for text, d := range deadFast {
		fastErrs = append(fastErrs, text)
		fastPayloads = append(fastPayloads, fmt.Sprint(d["payload"]))
		assert.Equal(t, avroTable+"_fast", d["source_table"])
	}
	assert.Contains(t, strings.Join(fastErrs, "\n"), "schema id 4040 is not in the schema registry (error 40403: schema not found)")
	assert.Contains(t, fastPayloads, `{"id":99}`)

	// v2 adds channel and discount: the columns come first, with the
	// registry's types; the v1 rows read null in them.
	produceValues(t, brokers, srAvroTopic, frames["avro_v2"]...)
	waitRowCounts(t, httpURL, p, map[string]int64{avroTable: 4})
	checkRegistryAvroV2(t, httpURL, avroTable)
	assert.Len(t, exactRows(t, httpURL, dlq, "error"), 2, "nothing more dead-lettered")
	waitRowCounts(t, httpURL, fast, map[string]int64{avroTable + "_fast": 4})
	checkRegistryAvroV2(t, httpURL, avroTable+"_fast")
	assert.Len(t, exactRows(t, httpURL, dlqFast, "error"), 2, "nothing more dead-lettered on the fast path")
	assert.Contains(t, p.out.String(), "table "+avroTable+": messages carry new fields")

	waitRowCounts(t, httpURL, dbz, map[string]int64{"main.default.customers_changes": 4})
	checkDebeziumExample(t, httpURL, "main.default.customers_changes")
	if di, err := fetchTableInfo(httpURL, "main.default.customers_changes_dead_letter"); err == nil {
		assert.Zero(t, di.RowCount, "the tombstone is dropped, not dead-lettered")
	}

	for _, pr := range []*proc{p, fast, dbz} {
		code, err := terminate(pr, 30*time.Second)
		require.NoError(t, err)
		assert.Equal(t, 0, code, tail(pr.out.String(), 30))
	}
	t.Logf("registry ids %v; node (register and encode every format) %s; whole test %s", ids, nodeDone.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// rowsJSON is a table's rows keyed by key, each as JSON text without the
// _zb_emit_ts stamp, for an exact comparison of every value.
func rowsJSON(t *testing.T, httpURL, table, key string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, r := range exactRows(t, httpURL, table, key) {
		delete(r, "_zb_emit_ts")
		out[k] = exactJSON(t, r)
	}
	return out
}

// assertExactJSON asserts that the JSON texts want and got hold the same
// values, numbers compared as their digits (JSONEq reads them as float64,
// which cannot tell -9007199254740993 from -9007199254740992).
func assertExactJSON(t *testing.T, want, got string, msgAndArgs ...any) {
	t.Helper()
	canon := func(s string) string {
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			return "invalid JSON: " + err.Error() + ": " + s
		}
		return exactJSON(t, v)
	}
	assert.Equal(t, canon(want), canon(got), msgAndArgs...)
}

// srAvroTypes are the column types of the Avro table from v1 of the schema
// (encode.js's avroOrder): every logical type, records, arrays, maps, an
// enum, nullable unions and the referenced proof.common.Money.
var srAvroTypes = map[string]string{
	"id": "bigint NOT NULL", "price": "decimal(10,2) NOT NULL", "rate": "decimal(18,6) NOT NULL",
	"day": "date NOT NULL", "at_ms": "bigint NOT NULL", "at_us": "bigint NOT NULL",
	"ts_ms": "timestamp NOT NULL", "ts_us": "timestamp NOT NULL",
	"local_ms": "timestamp_ntz NOT NULL", "local_us": "timestamp_ntz NOT NULL",
	"ref": "string NOT NULL", "status": "string NOT NULL",
	"customer": "struct<name:string,address:struct<city:string,zip:string>> NOT NULL",
	"lines":    "array<struct<sku:string,qty:int,unit:struct<amount:decimal(12,2),currency:string>>> NOT NULL",
	"attrs":    "map<string,bigint> NOT NULL", "note": "string", "paid_at": "timestamp",
	"total": "struct<amount:decimal(12,2),currency:string> NOT NULL", "_zb_emit_ts": "timestamp",
}

// The v1 records of encode.js as the table holds them.
const (
	srAvroRow0 = `{"id":4503599627370496,"price":"12.30","rate":"-0.000001","day":"2023-12-09","at_ms":45296789000,"at_us":45296789012,` +
		`"ts_ms":"2023-11-14T22:13:20.123Z","ts_us":"2023-11-14T22:13:20.123456Z","local_ms":"2023-11-14T22:13:20.123","local_us":"2023-11-14T22:13:20.123456",` +
		`"ref":"123e4567-e89b-12d3-a456-426614174000","status":"PAID","customer":{"name":"Zoë","address":{"city":"Paris","zip":"75001"}},` +
		`"lines":[{"sku":"A-1","qty":2,"unit":{"amount":"0.05","currency":"EUR"}},{"sku":"B-2","qty":-1,"unit":{"amount":"-1000000000.99","currency":"USD"}}],` +
		`"attrs":{"weight":1500,"volume":-3},"note":"leave at door","paid_at":"2023-11-14T22:13:20.654321Z","total":{"amount":"9999999999.99","currency":"EUR"}%s}`
	srAvroRow1 = `{"id":-1,"price":"-0.01","rate":"123456789012.345678","day":"1969-12-31","at_ms":0,"at_us":86399999999,` +
		`"ts_ms":"1969-12-31T23:59:59.999Z","ts_us":"1969-12-31T23:59:59.999999Z","local_ms":"1970-01-01T00:00:00","local_us":"1970-01-01T00:00:00.000001",` +
		`"ref":"00000000-0000-0000-0000-000000000000","status":"NEW","customer":{"name":"","address":{"city":"Oslo","zip":null}},` +
		`"lines":[],"attrs":{},"note":null,"paid_at":null,"total":{"amount":"0.00","currency":"NOK"}%s}`
)

func checkRegistryAvroV1(t *testing.T, httpURL, table string) {
	t.Helper()
	assert.Equal(t, srAvroTypes, columnTypes(t, httpURL, table))
	rows := rowsJSON(t, httpURL, table, "id")
	require.Len(t, rows, 2, "the two records; the faults never land")
	assertExactJSON(t, fmt.Sprintf(srAvroRow0, ""), rows["4503599627370496"])
	assertExactJSON(t, fmt.Sprintf(srAvroRow1, ""), rows["-1"])
}

func checkRegistryAvroV2(t *testing.T, httpURL, table string) {
	t.Helper()
	want := map[string]string{"channel": "string", "discount": "decimal(5,2)"}
	for k, v := range srAvroTypes {
		want[k] = v
	}
	assert.Equal(t, want, columnTypes(t, httpURL, table), "the added fields are nullable columns of the registry's types")
	rows := rowsJSON(t, httpURL, table, "id")
	require.Len(t, rows, 4)
	null := `,"channel":null,"discount":null`
	assertExactJSON(t, fmt.Sprintf(srAvroRow0, null), rows["4503599627370496"], "a v1 row reads null in the new columns")
	assertExactJSON(t, fmt.Sprintf(srAvroRow1, null), rows["-1"])
	assertExactJSON(t, strings.Replace(fmt.Sprintf(srAvroRow0, `,"channel":"mobile","discount":"-1.25"`), "4503599627370496", "7", 1), rows["7"])
	assertExactJSON(t, strings.Replace(fmt.Sprintf(srAvroRow1, `,"channel":"web","discount":null`), `"id":-1`, `"id":8`, 1), rows["8"])
}

// The Protobuf table: proof.v1.Event (message index [1]) with the nested
// Item, the imported proof.common.Money and google.protobuf.Timestamp.
// Every proto3 field is optional, so every column is nullable; a field left
// at its default is not populated and reads null.
func checkRegistryProtobuf(t *testing.T, httpURL, table string) {
	t.Helper()
	assert.Equal(t, map[string]string{
		"id": "string", "big": "bigint", "amount": "struct<units:bigint,currency:string>", "at": "timestamp",
		"counts": "map<string,int>", "kind": "string", "items": "array<struct<sku:string,qty:bigint,blob:binary>>",
		"_zb_emit_ts": "timestamp",
	}, columnTypes(t, httpURL, table))
	rows := rowsJSON(t, httpURL, table, "id")
	require.Len(t, rows, 2)
	assertExactJSON(t, `{"id":"evt-1","big":-9007199254740993,"amount":{"units":1230,"currency":"EUR"},"at":"2023-11-14T22:13:20.123456Z",`+
		`"counts":{"a":1,"b":-2},"kind":"KIND_SALE","items":[{"sku":"A","qty":4294967295,"blob":"AAH+/w=="},{"sku":"B","qty":null,"blob":null}]}`,
		rows[`"evt-1"`], "a Timestamp's nanoseconds cut to Delta's microseconds")
	assertExactJSON(t, `{"id":"evt-2","big":null,"amount":null,"at":null,"counts":null,"kind":null,"items":null}`, rows[`"evt-2"`])
}

// The JSON Schema table, with its $ref'd address.
func checkRegistryJSON(t *testing.T, httpURL, table string) {
	t.Helper()
	assert.Equal(t, map[string]string{
		"id": "bigint NOT NULL", "amount": "double NOT NULL", "placed": "timestamp NOT NULL", "day": "date",
		"tags": "array<string>", "note": "string", "ship": "struct<city:string,zip:string>", "_zb_emit_ts": "timestamp",
	}, columnTypes(t, httpURL, table))
	rows := rowsJSON(t, httpURL, table, "id")
	require.Len(t, rows, 2)
	assertExactJSON(t, `{"id":42,"amount":12.5,"placed":"2023-11-14T22:13:20.123456Z","day":"2023-12-09","tags":["a","b"],"note":null,"ship":{"city":"Paris","zip":"75001"}}`, rows["42"])
	assertExactJSON(t, `{"id":-7,"amount":0.1,"placed":"1969-12-31T23:59:59.999999Z","day":null,"tags":null,"note":null,"ship":null}`, rows["-7"])
}

// config/examples/debezium.yaml lands each change as its row image, op and
// source position, with the registry's types; the delete as its before
// image.
func checkDebeziumExample(t *testing.T, httpURL, table string) {
	t.Helper()
	assert.Equal(t, map[string]string{
		"id": "int NOT NULL", "first_name": "string NOT NULL", "email": "string NOT NULL", "balance": "decimal(10,2)",
		"born": "date", "updated_at": "timestamp NOT NULL", "op": "string NOT NULL", "source_lsn": "bigint",
		"source_ts_ms": "bigint NOT NULL", "_zb_emit_ts": "timestamp",
	}, columnTypes(t, httpURL, table))
	rows := rowsJSON(t, httpURL, table, "source_lsn")
	require.Len(t, rows, 4, "four changes; the tombstone dropped")
	assertExactJSON(t, `{"id":1001,"first_name":"Alice","email":"alice@example.com","balance":"1234.50","born":"1980-01-02","updated_at":"2023-11-14T22:13:20.123Z","op":"r","source_lsn":24023128,"source_ts_ms":1700000000200}`, rows["24023128"])
	assertExactJSON(t, `{"id":1002,"first_name":"Bob","email":"bob@example.com","balance":null,"born":null,"updated_at":"2023-11-14T22:13:21Z","op":"c","source_lsn":24023200,"source_ts_ms":1700000001100}`, rows["24023200"])
	assertExactJSON(t, `{"id":1001,"first_name":"Alice","email":"alice@new.example","balance":"-0.01","born":"1980-01-02","updated_at":"2023-11-14T22:13:22Z","op":"u","source_lsn":24023304,"source_ts_ms":1700000002100}`, rows["24023304"])
	assertExactJSON(t, `{"id":1002,"first_name":"Bob","email":"bob@example.com","balance":null,"born":null,"updated_at":"2023-11-14T22:13:21Z","op":"d","source_lsn":24023408,"source_ts_ms":1700000003100}`, rows["24023408"], "a delete lands its before image")
}
