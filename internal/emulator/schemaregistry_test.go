package emulator

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// TestSchemaRegistryServesReportsAndKeepsSchemasAcrossRestart starts the
// emulator with --schema-registry on a free loopback port: franz-go's sr
// client registers a schema with a reference over HTTP, the health
// endpoint and --addr-file report the URL (SCHEMA_REGISTRY_URL), and after
// a restart on the same data directory the ids, subjects, versions and
// references are the same, so records kept by the Kafka broker still decode.
func TestSchemaRegistryServesReportsAndKeepsSchemasAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: dir, SchemaRegistryAddr: "127.0.0.1:0"}
	srv, err := Start(cfg)
	require.NoError(t, err)
	u := srv.SchemaRegistryURL()
	host, port, err := net.SplitHostPort(strings.TrimPrefix(u, "http://"))
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", host)
	assert.NotEqual(t, "0", port)
	assert.Equal(t, u, srv.Addresses().SchemaRegistry)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := sr.NewClient(sr.URLs(u))
	require.NoError(t, err)
	base, err := cl.CreateSchema(ctx, "money-value", sr.Schema{Schema: `{"type":"fixed","name":"Money","size":8}`})
	require.NoError(t, err)
	orders := sr.Schema{Schema: `{"type":"record","name":"Order","fields":[{"name":"m","type":"Money"}]}`,
		References: []sr.SchemaReference{{Name: "Money", Subject: "money-value", Version: 1}}}
	v1, err := cl.CreateSchema(ctx, "orders-value", orders)
	require.NoError(t, err)

	resp, err := http.Get(srv.HTTPURL() + "/emulator/v1/health")
	require.NoError(t, err)
	var health struct{ Addresses Addresses }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&health))
	resp.Body.Close()
	assert.Equal(t, u, health.Addresses.SchemaRegistry)
	path := filepath.Join(t.TempDir(), "addr.env")
	require.NoError(t, srv.WriteAddrFile(path))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(raw), "\nSCHEMA_REGISTRY_URL="+u+"\n")
	require.NoError(t, srv.Close())

	srv, err = Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	cl, err = sr.NewClient(sr.URLs(srv.SchemaRegistryURL()))
	require.NoError(t, err)
	got, err := cl.SchemaByID(ctx, v1.ID)
	require.NoError(t, err, "the schema id survived the restart")
	assert.Equal(t, orders.Schema, got.Schema)
	assert.Equal(t, orders.References, got.References)
	ss, err := cl.SchemaByVersion(ctx, "money-value", 1)
	require.NoError(t, err)
	assert.Equal(t, base.ID, ss.ID)
	next, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: `{"type":"record","name":"Order","fields":[{"name":"m","type":"Money"},{"name":"n","type":["null","string"],"default":null}]}`,
		References: orders.References})
	require.NoError(t, err)
	assert.Equal(t, 2, next.Version, "versions continue after the restart")
	assert.Greater(t, next.ID, v1.ID, "ids are not reused")
}

// TestSchemaRegistryBusyPort: a busy --schema-registry port fails naming the
// listener and the flag, like the others.
func TestSchemaRegistryBusyPort(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer held.Close()
	_, err = Start(Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(), SchemaRegistryAddr: held.Addr().String()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Schema Registry port "+held.Addr().String()+" (--schema-registry) is already in use")
}

// TestAvroProduceRegistersAndFramesRecords: avro-produce registers the demo
// schema under TOPIC-value and produces records in the wire format: the
// header names the registered id, and the body decodes with the schema the
// registry holds to the record it was made from.
func TestAvroProduceRegistersAndFramesRecords(t *testing.T) {
	srv, err := Start(Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(),
		KafkaAddr: "127.0.0.1:0", KafkaTopics: []KafkaTopic{{"readings", 2}}, SchemaRegistryAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, n, err := produceAvroRecords(ctx, []string{srv.KafkaAddr()}, srv.SchemaRegistryURL(), "readings", "readings-value", 1, 10)
	require.NoError(t, err)
	assert.Equal(t, 10, n)
	ss, ok := srv.SchemaRegistry().GetSchema("readings-value", 1)
	require.True(t, ok)
	assert.Equal(t, id, ss.ID)
	schema, err := avro.Parse(ss.Schema.Schema)
	require.NoError(t, err)

	cons := kafkaClient(t, srv, kgo.ConsumeTopics("readings"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := 0
	for seen < 10 {
		fs := cons.PollFetches(ctx)
		require.NoError(t, fs.Err())
		for _, r := range fs.Records() {
			var hdr sr.ConfluentHeader
			gotID, body, err := hdr.DecodeID(r.Value)
			require.NoError(t, err)
			assert.Equal(t, id, gotID)
			var v map[string]any
			rest, err := schema.Decode(body, &v)
			require.NoError(t, err)
			assert.Empty(t, rest)
			key, _ := strconv.Atoi(string(r.Key))
			assert.EqualValues(t, key, v["id"])
			assert.Equal(t, fmt.Sprintf("sensor-%02d", key%10), v["device"])
			seen++
		}
	}
}

// TestSchemaRegistryLoadSharedSchemaKeepsVersions: one schema under two
// subjects keeps its id, and the later subject's versions stay as they were,
// across a save and a load: subject b holds a schema of its own (version 1,
// id 2) and then a's (version 2, id 1). Seeding in id order alone
// registered b's copy of id 1 first, as b's version 1, and the emulator then
// refused to start ("subject b version 1 already seeded").
func TestSchemaRegistryLoadSharedSchemaKeepsVersions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sr.json")
	r := &schemaRegistry{reg: srfake.NewRegistry(), path: path}
	x := sr.Schema{Schema: `"string"`}
	y := sr.Schema{Schema: `"int"`}
	require.NoError(t, r.reg.SetCompat("b", sr.CompatNone))
	for _, s := range []struct {
		subject string
		schema  sr.Schema
		id, ver int
	}{{"a", x, 1, 1}, {"b", y, 2, 1}, {"b", x, 1, 2}} {
		id, ver, err := r.reg.RegisterSchema(s.subject, s.schema)
		require.NoError(t, err)
		require.Equal(t, []int{s.id, s.ver}, []int{id, ver}, "subject %s", s.subject)
	}
	require.NoError(t, r.save())

	loaded := &schemaRegistry{reg: srfake.NewRegistry(), path: path}
	require.NoError(t, loaded.load())
	for _, want := range []struct {
		subject string
		ver, id int
	}{{"a", 1, 1}, {"b", 1, 2}, {"b", 2, 1}} {
		got, ok := loaded.reg.GetSchema(want.subject, want.ver)
		require.True(t, ok, "subject %s version %d", want.subject, want.ver)
		assert.Equal(t, want.id, got.ID, "subject %s version %d", want.subject, want.ver)
	}
}

// TestSchemaRegistryKeepsSoftDeletesAcrossRestart: versions soft-deleted
// alone or with their subject stay soft-deleted after a restart, as
// Confluent's deletion guidelines describe a soft delete: hidden from
// lookups by subject and version (found with ?deleted=true), the id still
// readable, and neither the id nor the version number given again. Before,
// only the live versions were saved: a soft-deleted version was gone after
// a restart, its id unknown to records that carry it, and its id and
// version free for the next schema.
func TestSchemaRegistryKeepsSoftDeletesAcrossRestart(t *testing.T) {
	cfg := Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(), SchemaRegistryAddr: "127.0.0.1:0"}
	srv, err := Start(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := sr.NewClient(sr.URLs(srv.SchemaRegistryURL()))
	require.NoError(t, err)
	field := func(names ...string) sr.Schema {
		fs := `{"name":"a","type":"string"}`
		for _, n := range names {
			fs += `,{"name":"` + n + `","type":["null","string"],"default":null}`
		}
		return sr.Schema{Schema: `{"type":"record","name":"Order","fields":[` + fs + `]}`}
	}
	v1, err := cl.CreateSchema(ctx, "orders-value", field())
	require.NoError(t, err)
	v2, err := cl.CreateSchema(ctx, "orders-value", field("b"))
	require.NoError(t, err)
	require.NoError(t, cl.DeleteSchema(ctx, "orders-value", 2, sr.SoftDelete))
	again, err := cl.CreateSchema(ctx, "orders-value", field("b"))
	require.NoError(t, err)
	require.Equal(t, []int{3, v2.ID}, []int{again.Version, again.ID}, "registered again after its soft delete: a new version of the same id")
	old, err := cl.CreateSchema(ctx, "old-value", sr.Schema{Schema: `"string"`})
	require.NoError(t, err)
	_, err = cl.DeleteSubject(ctx, "old-value", sr.SoftDelete)
	require.NoError(t, err)
	require.NoError(t, srv.Close())

	srv, err = Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	cl, err = sr.NewClient(sr.URLs(srv.SchemaRegistryURL()))
	require.NoError(t, err)

	_, err = cl.SchemaByVersion(ctx, "orders-value", 2)
	var re *sr.ResponseError
	require.ErrorAs(t, err, &re, "the soft-deleted version stays hidden")
	assert.Equal(t, sr.ErrVersionNotFound.Code, re.ErrorCode)
	ss, err := cl.SchemaByVersion(sr.WithParams(ctx, sr.ShowDeleted), "orders-value", 2)
	require.NoError(t, err, "?deleted=true still finds it")
	assert.Equal(t, v2.ID, ss.ID)
	vs, err := cl.SubjectVersions(ctx, "orders-value")
	require.NoError(t, err)
	assert.Equal(t, []int{1, 3}, vs)
	vs, err = cl.SubjectVersions(sr.WithParams(ctx, sr.DeletedOnly), "orders-value")
	require.NoError(t, err)
	assert.Equal(t, []int{2}, vs)
	ss, err = cl.SchemaByVersion(ctx, "orders-value", 1)
	require.NoError(t, err)
	assert.Equal(t, v1.ID, ss.ID)

	subjects, err := cl.Subjects(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"orders-value"}, subjects, "the soft-deleted subject stays hidden")
	subjects, err = cl.Subjects(sr.WithParams(ctx, sr.DeletedOnly))
	require.NoError(t, err)
	assert.Equal(t, []string{"old-value"}, subjects)
	got, err := cl.SchemaByID(ctx, old.ID)
	require.NoError(t, err, "the id of a soft-deleted subject's version stays readable")
	assert.Equal(t, `"string"`, got.Schema)

	next, err := cl.CreateSchema(ctx, "orders-value", field("b", "c"))
	require.NoError(t, err)
	assert.Equal(t, 4, next.Version, "the deleted version's number is not given again")
	assert.Greater(t, next.ID, old.ID, "the deleted versions' ids are not given again")
}
