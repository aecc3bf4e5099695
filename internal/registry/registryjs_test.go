package registry

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	cs "github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

// The proof against an encoder this project did not write: Confluent's own
// JavaScript serializers (npm @confluentinc/schemaregistry, pinned in
// test/registryjs/package.json) register schemas in franz-go's srfake and
// encode records (test/registryjs/encode.js); the codecs decode them from the
// schemas fetched back by id, and every value is compared exactly.

// registryJSDir is test/registryjs, found from this file or, when the build
// trimmed paths, from the package directory go test runs in.
func registryJSDir(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	dir := filepath.Dir(file)
	if !ok || !filepath.IsAbs(file) {
		wd, err := os.Getwd()
		require.NoError(t, err)
		dir = wd
	}
	return filepath.Join(dir, "..", "..", "test", "registryjs")
}

// registryJSNode returns node, once the npm packages are installed. Missing
// packages fail the test (never skip it), saying how to install them, as the
// conformance tests do.
func registryJSNode(t *testing.T, dir string) string {
	t.Helper()
	const pkg = "node_modules/@confluentinc/schemaregistry/package.json"
	if _, err := os.Stat(filepath.Join(dir, pkg)); err != nil {
		msg := "Confluent's JavaScript serializers are not installed (test/registryjs/" + pkg +
			" missing): run `make conformance-deps` (npm ci --prefix test/registryjs)"
		t.Fatal(msg)
	}
	if n := os.Getenv("NODE_BINARY"); n != "" {
		return n
	}
	n, err := exec.LookPath("node")
	require.NoError(t, err, "node not found on PATH (set $NODE_BINARY)")
	return n
}

// proofDescriptors compiles the Protobuf schema,
// test/registryjs/proto/proof/v1/event.proto (the e2e tests use it too), and
// writes it, with its imports, as a base64 FileDescriptorSet for the script.
func proofDescriptors(t *testing.T, path string) {
	t.Helper()
	compiler := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		ImportPaths: []string{filepath.Join(registryJSDir(t), "proto")},
	})}
	files, err := compiler.Compile(context.Background(), "proof/v1/event.proto")
	require.NoError(t, err)
	event := files[0]
	set := &descriptorpb.FileDescriptorSet{}
	imports := event.Imports()
	for i := range imports.Len() {
		set.File = append(set.File, protodesc.ToFileDescriptorProto(imports.Get(i).FileDescriptor))
	}
	set.File = append(set.File, protodesc.ToFileDescriptorProto(event))
	raw, err := proto.Marshal(set)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(raw)), 0o600))
}

// fetchSchema reads schema id and its references, recursively, as the
// registry serves them.
func fetchSchema(t *testing.T, cl *sr.Client, id int) Schema {
	t.Helper()
	s, err := cl.SchemaByID(context.Background(), id)
	require.NoError(t, err)
	out := Schema{ID: id, Format: registryFormat(s.Type), Text: s.Schema}
	out.References = fetchReferences(t, cl, s.References)
	return out
}

func fetchReferences(t *testing.T, cl *sr.Client, refs []sr.SchemaReference) []Reference {
	var out []Reference
	for _, r := range refs {
		ss, err := cl.SchemaByVersion(context.Background(), r.Subject, r.Version)
		require.NoError(t, err)
		out = append(out, Reference{Name: r.Name, Schema: Schema{
			ID: ss.ID, Format: registryFormat(ss.Type), Text: ss.Schema.Schema, Subject: ss.Subject, Version: ss.Version,
			References: fetchReferences(t, cl, ss.References),
		}})
	}
	return out
}

func registryFormat(t sr.SchemaType) Format {
	switch t {
	case sr.TypeProtobuf:
		return Protobuf
	case sr.TypeJSON:
		return JSONSchema
	}
	return Avro
}

// jsFrames are the script's output: base64 framed values per format.
type jsFrames struct {
	Avro     []string `json:"avro"`
	Protobuf []string `json:"protobuf"`
	JSON     []string `json:"json"`
}

// decodeFrame strips the header of a framed value and decodes it with the
// schema fetched by its id.
func decodeFrame(t *testing.T, cl *sr.Client, frame string, o Options) (any, *cs.Schema, []byte) {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(frame)
	require.NoError(t, err)
	id, body, err := new(sr.ConfluentHeader).DecodeID(raw)
	require.NoError(t, err)
	c, err := NewCodec(fetchSchema(t, cl, id), o)
	require.NoError(t, err)
	v, schema, err := c.Decode(body)
	require.NoError(t, err)
	return v, schema, body
}

func TestConfluentJSSerializers(t *testing.T) {
	dir := registryJSDir(t)
	node := registryJSNode(t, dir)

	reg := srfake.New()
	defer reg.Close()
	tmp := t.TempDir()
	descriptors, out := filepath.Join(tmp, "descriptors.b64"), filepath.Join(tmp, "frames.json")
	proofDescriptors(t, descriptors)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "encode.js", "--registry="+reg.URL(), "--descriptors="+descriptors, "--out="+out)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "encode.js: %s\n%s", stdout.String(), stderr.String())
	text, err := os.ReadFile(out)
	require.NoError(t, err)
	var frames jsFrames
	require.NoError(t, json.Unmarshal(text, &frames))
	require.Len(t, frames.Avro, 2)
	require.Len(t, frames.Protobuf, 3)
	require.Len(t, frames.JSON, 2)

	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	require.NoError(t, err)

	t.Run("avro", func(t *testing.T) { checkJSAvro(t, cl, frames.Avro) })
	t.Run("protobuf", func(t *testing.T) { checkJSProtobuf(t, cl, frames.Protobuf) })
	t.Run("json", func(t *testing.T) { checkJSJSON(t, cl, frames.JSON) })
}

func utc(y int, mo time.Month, d, h, mi, s, ns int) time.Time {
	return time.Date(y, mo, d, h, mi, s, ns, time.UTC)
}

func checkJSAvro(t *testing.T, cl *sr.Client, frames []string) {
	money := func(amount, cur string) map[string]any {
		return map[string]any{"amount": json.Number(amount), "currency": cur}
	}
	v, schema, _ := decodeFrame(t, cl, frames[0], Options{Avro: AvroOptions{PreserveLogicalTypes: true}})
	assert.Equal(t, map[string]any{
		"id":       int64(4503599627370496), // 2^52, the largest long avsc writes from a JS number
		"price":    json.Number("12.30"),
		"rate":     json.Number("-0.000001"),
		"day":      utc(2023, 12, 9, 0, 0, 0, 0),
		"at_ms":    utc(1970, 1, 1, 12, 34, 56, 789_000_000),
		"at_us":    utc(1970, 1, 1, 12, 34, 56, 789_012_000),
		"ts_ms":    utc(2023, 11, 14, 22, 13, 20, 123_000_000),
		"ts_us":    utc(2023, 11, 14, 22, 13, 20, 123_456_000),
		"local_ms": utc(2023, 11, 14, 22, 13, 20, 123_000_000),
		"local_us": utc(2023, 11, 14, 22, 13, 20, 123_456_000),
		"ref":      "123e4567-e89b-12d3-a456-426614174000",
		"status":   "PAID",
		"customer": map[string]any{"name": "Zoë", "address": map[string]any{"city": "Paris", "zip": map[string]any{"string": "75001"}}},
		"lines": []any{
			map[string]any{"sku": "A-1", "qty": int32(2), "unit": money("0.05", "EUR")},
			map[string]any{"sku": "B-2", "qty": int32(-1), "unit": money("-1000000000.99", "USD")},
		},
		"attrs":   map[string]any{"weight": int64(1500), "volume": int64(-3)},
		"note":    map[string]any{"string": "leave at door"},
		"paid_at": map[string]any{"long": utc(2023, 11, 14, 22, 13, 20, 654_321_000)},
		"total":   money("9999999999.99", "EUR"),
	}, v)
	moneySchema := []cs.Schema{{Name: "amount", Type: cs.Decimal, Precision: 12, Scale: 2}, {Name: "currency", Type: cs.String}}
	assert.Equal(t, cs.Schema{Name: "Order", Type: cs.Object, Children: []cs.Schema{
		{Name: "id", Type: cs.Int64},
		{Name: "price", Type: cs.Decimal, Precision: 10, Scale: 2},
		{Name: "rate", Type: cs.Decimal, Precision: 18, Scale: 6},
		{Name: "day", Type: cs.Date},
		{Name: "at_ms", Type: cs.TimeOfDay, Unit: cs.Millis},
		{Name: "at_us", Type: cs.TimeOfDay, Unit: cs.Micros},
		{Name: "ts_ms", Type: cs.Timestamp, Unit: cs.Millis, AdjustToUTC: true},
		{Name: "ts_us", Type: cs.Timestamp, Unit: cs.Micros, AdjustToUTC: true},
		{Name: "local_ms", Type: cs.Timestamp, Unit: cs.Millis},
		{Name: "local_us", Type: cs.Timestamp, Unit: cs.Micros},
		{Name: "ref", Type: cs.UUID},
		{Name: "status", Type: cs.String},
		{Name: "customer", Type: cs.Object, Children: []cs.Schema{
			{Name: "name", Type: cs.String},
			{Name: "address", Type: cs.Object, Children: []cs.Schema{
				{Name: "city", Type: cs.String}, {Name: "zip", Type: cs.String, Optional: true},
			}},
		}},
		{Name: "lines", Type: cs.Array, Children: []cs.Schema{{Type: cs.Object, Children: []cs.Schema{
			{Name: "sku", Type: cs.String}, {Name: "qty", Type: cs.Int32}, {Name: "unit", Type: cs.Object, Children: moneySchema},
		}}}},
		{Name: "attrs", Type: cs.Map, Children: []cs.Schema{{Type: cs.Int64}}},
		{Name: "note", Type: cs.String, Optional: true},
		{Name: "paid_at", Type: cs.Timestamp, Unit: cs.Micros, AdjustToUTC: true, Optional: true},
		{Name: "total", Type: cs.Object, Children: moneySchema},
	}}, *schema)
	assert.NoError(t, schema.Validate())

	v, _, _ = decodeFrame(t, cl, frames[1], Options{Avro: AvroOptions{PreserveLogicalTypes: true, RawUnions: true}})
	assert.Equal(t, map[string]any{
		"id": int64(-1), "price": json.Number("-0.01"), "rate": json.Number("123456789012.345678"),
		"day": utc(1969, 12, 31, 0, 0, 0, 0), "at_ms": utc(1970, 1, 1, 0, 0, 0, 0), "at_us": utc(1970, 1, 1, 23, 59, 59, 999_999_000),
		"ts_ms": utc(1969, 12, 31, 23, 59, 59, 999_000_000), "ts_us": utc(1969, 12, 31, 23, 59, 59, 999_999_000),
		"local_ms": utc(1970, 1, 1, 0, 0, 0, 0), "local_us": utc(1970, 1, 1, 0, 0, 0, 1000),
		"ref": "00000000-0000-0000-0000-000000000000", "status": "NEW",
		"customer": map[string]any{"name": "", "address": map[string]any{"city": "Oslo", "zip": nil}},
		"lines":    []any{}, "attrs": map[string]any{}, "note": nil, "paid_at": nil, "total": money("0.00", "NOK"),
	}, v)

	// Without preserve_logical_types: the underlying values.
	v, schema, _ = decodeFrame(t, cl, frames[0], Options{})
	m := v.(map[string]any)
	assert.Equal(t, []byte{0x04, 0xce}, m["price"]) // 1230
	assert.Equal(t, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, m["rate"])
	assert.Equal(t, int32(19700), m["day"])
	assert.Equal(t, int32(45296789), m["at_ms"])
	assert.Equal(t, int64(45296789012), m["at_us"])
	assert.Equal(t, int64(1700000000123), m["ts_ms"])
	assert.Equal(t, int64(1700000000123456), m["local_us"])
	assert.Equal(t, map[string]any{"long": int64(1700000000654321)}, m["paid_at"])
	unit := m["lines"].([]any)[1].(map[string]any)["unit"].(map[string]any)
	assert.Equal(t, twosComplement(big.NewInt(-100000000099)), unit["amount"])
	assert.Equal(t, cs.ByteArray, schema.Children[1].Type)
	assert.Equal(t, cs.Int64, schema.Children[6].Type)
}

func checkJSProtobuf(t *testing.T, cl *sr.Client, frames []string) {
	v, schema, body := decodeFrame(t, cl, frames[0], Options{Protobuf: ProtobufOptions{SerializeToJSON: true}})
	assert.Equal(t, []byte{0x02, 0x02}, body[:2], "message index [1]")
	assert.Equal(t, map[string]any{
		"id": "evt-1", "big": "-9007199254740993",
		"amount": map[string]any{"units": "1230", "currency": "EUR"},
		"at":     "2023-11-14T22:13:20.123456789Z",
		"counts": map[string]any{"a": json.Number("1"), "b": json.Number("-2")},
		"kind":   "KIND_SALE",
		"items":  []any{map[string]any{"sku": "A", "qty": json.Number("4294967295"), "blob": "AAH+/w=="}},
	}, v)
	opt := func(s cs.Schema) cs.Schema { s.Optional = true; return s }
	assert.Equal(t, cs.Schema{Name: "Event", Type: cs.Object, Children: []cs.Schema{
		opt(cs.Schema{Name: "id", Type: cs.String}),
		opt(cs.Schema{Name: "big", Type: cs.Int64}),
		opt(cs.Schema{Name: "amount", Type: cs.Object, Children: []cs.Schema{
			opt(cs.Schema{Name: "units", Type: cs.Int64}), opt(cs.Schema{Name: "currency", Type: cs.String}),
		}}),
		opt(cs.Schema{Name: "at", Type: cs.Timestamp, Unit: cs.Nanos, AdjustToUTC: true}),
		opt(cs.Schema{Name: "counts", Type: cs.Map, Children: []cs.Schema{{Type: cs.Int32}}}),
		opt(cs.Schema{Name: "kind", Type: cs.String}),
		opt(cs.Schema{Name: "items", Type: cs.Array, Children: []cs.Schema{{Type: cs.Object, Children: []cs.Schema{
			opt(cs.Schema{Name: "sku", Type: cs.String}), opt(cs.Schema{Name: "qty", Type: cs.Int64}), opt(cs.Schema{Name: "blob", Type: cs.ByteArray}),
		}}}}),
	}}, *schema)

	v, _, _ = decodeFrame(t, cl, frames[0], Options{Protobuf: ProtobufOptions{UseProtoNames: true}})
	m := v.(map[string]any)
	assert.Equal(t, int64(-9007199254740993), m["big"])
	assert.Equal(t, utc(2023, 11, 14, 22, 13, 20, 123456789), m["at"])
	assert.Equal(t, []any{map[string]any{"sku": "A", "qty": uint32(4294967295), "blob": []byte{0, 1, 254, 255}}}, m["items"])

	v, schema, body = decodeFrame(t, cl, frames[1], Options{Protobuf: ProtobufOptions{SerializeToJSON: true}})
	assert.Equal(t, []byte{0x06, 0x02, 0x02, 0x00}, body[:4], "message index [1,1,0]")
	assert.Equal(t, map[string]any{"field": "price", "delta": json.Number("-0.5")}, v)
	assert.Equal(t, "Change", schema.Name)

	v, schema, body = decodeFrame(t, cl, frames[2], Options{Protobuf: ProtobufOptions{SerializeToJSON: true}})
	assert.Equal(t, byte(0), body[0], "message index [0] as the single byte 0")
	assert.Equal(t, map[string]any{"source": "js"}, v)
	assert.Equal(t, "Header", schema.Name)
}

func checkJSJSON(t *testing.T, cl *sr.Client, frames []string) {
	v, schema, _ := decodeFrame(t, cl, frames[0], Options{})
	assert.Equal(t, map[string]any{
		"id": json.Number("42"), "amount": json.Number("12.5"), "placed": "2023-11-14T22:13:20.123456Z",
		"day": "2023-12-09", "tags": []any{"a", "b"}, "note": nil, "ship": map[string]any{"city": "Paris", "zip": "75001"},
	}, v)
	assert.Equal(t, cs.Schema{Name: "Order", Type: cs.Object, Children: []cs.Schema{
		{Name: "id", Type: cs.Int64},
		{Name: "amount", Type: cs.Float64},
		{Name: "placed", Type: cs.Timestamp, Unit: cs.Micros, AdjustToUTC: true},
		{Name: "day", Type: cs.Date, Optional: true},
		{Name: "tags", Type: cs.Array, Optional: true, Children: []cs.Schema{{Type: cs.String}}},
		{Name: "note", Type: cs.String, Optional: true},
		{Name: "ship", Type: cs.Object, Optional: true, Children: []cs.Schema{
			{Name: "city", Type: cs.String}, {Name: "zip", Type: cs.String, Optional: true},
		}},
	}}, *schema)

	v, _, _ = decodeFrame(t, cl, frames[1], Options{})
	assert.Equal(t, map[string]any{"id": json.Number("-7"), "amount": json.Number("0.1"), "placed": "1969-12-31T23:59:59.999999Z"}, v)
}
