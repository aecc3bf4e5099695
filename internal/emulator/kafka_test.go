package emulator

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaClient is a franz-go client of the emulator's Kafka broker.
func kafkaClient(t *testing.T, srv *Server, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(srv.KafkaAddr()), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// TestKafkaServesTopicsAndReportsAddress starts the emulator with a Kafka
// listener on a free loopback port and two topics: the broker advertises
// that address, the topics have their partition counts, a record produced
// by franz-go is consumed back, and the health endpoint and --addr-file
// report the address (KAFKA_BROKERS).
func TestKafkaServesTopicsAndReportsAddress(t *testing.T) {
	srv, err := Start(Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(),
		KafkaAddr: "127.0.0.1:0", KafkaTopics: []KafkaTopic{{"orders", 3}, {"events", 1}}})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })

	addr := srv.KafkaAddr()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", host, "loopback, as asked")
	assert.NotEqual(t, "0", port, "the port picked, not the :0 asked for")
	assert.Equal(t, addr, srv.Addresses().Kafka)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(kafkaClient(t, srv))
	md, err := adm.Metadata(ctx)
	require.NoError(t, err)
	require.Len(t, md.Brokers, 1)
	assert.Equal(t, addr, net.JoinHostPort(md.Brokers[0].Host, fmt.Sprint(md.Brokers[0].Port)), "the broker advertises the --kafka address")
	assert.Len(t, md.Topics["orders"].Partitions, 3)
	assert.Len(t, md.Topics["events"].Partitions, 1)

	prod := kafkaClient(t, srv)
	require.NoError(t, prod.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 2, Key: []byte("k"), Value: []byte(`{"id":1}`)}).FirstErr())
	cons := kafkaClient(t, srv, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {2: kgo.NewOffset().AtStart()}}))
	fs := cons.PollFetches(ctx)
	require.NoError(t, fs.Err())
	recs := fs.Records()
	require.Len(t, recs, 1)
	assert.Equal(t, `{"id":1}`, string(recs[0].Value))

	path := filepath.Join(t.TempDir(), "addr.env")
	require.NoError(t, srv.WriteAddrFile(path))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(raw), "\nKAFKA_BROKERS="+addr+"\n")
}

// TestKafkaKeepsRecordsAndOffsetsAcrossRestart: records and a consumer
// group's committed offset survive a restart on the same data directory,
// as the tables do, and a topic asked for again keeps its stored partitions.
func TestKafkaKeepsRecordsAndOffsetsAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: dir, KafkaAddr: "127.0.0.1:0", KafkaTopics: []KafkaTopic{{"orders", 2}}}
	srv, err := Start(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := kafkaClient(t, srv)
	for i := 0; i < 10; i++ {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: int32(i % 2), Value: []byte(fmt.Sprint(i))}).FirstErr())
	}
	adm := kadm.NewClient(cl)
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "orders", Partition: 1, At: 3, LeaderEpoch: -1})
	_, err = adm.CommitOffsets(ctx, "g", offs)
	require.NoError(t, err)
	cl.Close()
	require.NoError(t, srv.Close())

	cfg.KafkaTopics = []KafkaTopic{{"orders", 5}} // a different count: the stored topic wins
	srv, err = Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	adm = kadm.NewClient(kafkaClient(t, srv))
	ends, err := adm.ListEndOffsets(ctx, "orders")
	require.NoError(t, err)
	got := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { got[o.Partition] = o.Offset })
	assert.Equal(t, map[int32]int64{0: 5, 1: 5}, got, "every record kept, in the stored two partitions")
	committed, err := adm.FetchOffsets(ctx, "g")
	require.NoError(t, err)
	o, ok := committed.Lookup("orders", 1)
	require.True(t, ok, "the committed offset survived the restart")
	assert.EqualValues(t, 3, o.At)
}

// TestKafkaBusyPortAndFlags: a busy --kafka port fails naming the listener
// and the flag like the others; --kafka-topic is parsed, needs --kafka, and
// a bad spec is refused naming the flag.
func TestKafkaBusyPortAndFlags(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer held.Close()
	busy := held.Addr().String()
	srv, err := Start(Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(), KafkaAddr: busy})
	if srv != nil {
		srv.Close()
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Kafka port "+busy+" (--kafka) is already in use")
	assert.Contains(t, err.Error(), "127.0.0.1:0 picks a free port")

	got, err := configFromArgs("--kafka", "127.0.0.1:0", "--kafka-topic", "orders:12", "--kafka-topic", "events")
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:0", got.KafkaAddr)
	assert.Equal(t, []KafkaTopic{{"orders", 12}, {"events", 1}}, got.KafkaTopics)

	err = configArgsError("--kafka-topic", "orders:3")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--kafka-topic needs --kafka")
	for _, bad := range []string{"orders:0", "orders:x", ":3"} {
		err = configArgsError("--kafka", "127.0.0.1:0", "--kafka-topic", bad)
		require.Error(t, err, bad)
		assert.True(t, strings.Contains(err.Error(), "--kafka-topic"), "%s: %v", bad, err)
	}
	_, err = Start(Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(), KafkaTopics: []KafkaTopic{{"orders", 1}}})
	require.Error(t, err, "topics without a Kafka listener")
}

// TestKafkaProduceAndOffsetsCommands runs the emulator's kafka-produce,
// kafka-offsets and kafka-consume commands against its broker: the records
// are spread evenly over the partitions, each a JSON object with its id;
// kafka-offsets prints each partition's committed and end offsets;
// kafka-consume reads them all back.
func TestKafkaProduceAndOffsetsCommands(t *testing.T) {
	srv, err := Start(Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(), KafkaAddr: "127.0.0.1:0", KafkaTopics: []KafkaTopic{{"orders", 3}}})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	var out strings.Builder
	app := App("test")
	app.Writer = &out
	require.NoError(t, app.Run([]string{"zerobus-emulator", "kafka-produce", "--brokers", srv.KafkaAddr(), "--topic", "orders", "--count", "300", "--first", "1001"}))
	assert.Contains(t, out.String(), "produced 300 records to orders")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(kafkaClient(t, srv))
	ends, err := adm.ListEndOffsets(ctx, "orders")
	require.NoError(t, err)
	ends.Each(func(o kadm.ListedOffset) { assert.EqualValues(t, 100, o.Offset, "partition %d", o.Partition) })
	cons := kafkaClient(t, srv, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {0: kgo.NewOffset().AtStart()}}))
	fs := cons.PollFetches(ctx)
	require.NoError(t, fs.Err())
	require.NotEmpty(t, fs.Records())
	assert.Contains(t, string(fs.Records()[0].Value), `"id":1001,`)

	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "orders", Partition: 1, At: 40, LeaderEpoch: -1})
	_, err = adm.CommitOffsets(ctx, "demo", offs)
	require.NoError(t, err)
	out.Reset()
	require.NoError(t, app.Run([]string{"zerobus-emulator", "kafka-offsets", "--brokers", srv.KafkaAddr(), "--topic", "orders", "--group", "demo"}))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 4, out.String())
	assert.Equal(t, []string{"orders", "0", "-", "100", "100"}, strings.Fields(lines[1]))
	assert.Equal(t, []string{"orders", "1", "40", "100", "60"}, strings.Fields(lines[2]))

	out.Reset()
	require.NoError(t, app.Run([]string{"zerobus-emulator", "kafka-consume", "--brokers", srv.KafkaAddr(), "--topic", "orders", "--group", "bare", "--count", "300"}))
	assert.Contains(t, out.String(), "consumed 300 records")
	assert.Contains(t, out.String(), "in 1 passes")

	// --min-duration: passes of 300 records, each a fresh group from the
	// start, until the duration has passed; the count covers them all. The
	// duration doubles until it asks for a second pass.
	re := regexp.MustCompile(`consumed (\d+) records \(\d+ value bytes\) in (\d+) passes, ([0-9.]+) s`)
	for i, d := 0, 300*time.Millisecond; ; i, d = i+1, 2*d {
		require.Less(t, d, time.Minute, "a pass took longer than the duration asked for every time")
		group := fmt.Sprintf("again%d", i)
		out.Reset()
		require.NoError(t, app.Run([]string{"zerobus-emulator", "kafka-consume", "--brokers", srv.KafkaAddr(), "--topic", "orders", "--group", group, "--count", "300", "--min-duration", d.String()}))
		m := re.FindStringSubmatch(out.String())
		require.NotNil(t, m, out.String())
		passes, _ := strconv.Atoi(m[2])
		secs, _ := strconv.ParseFloat(m[3], 64)
		assert.Equal(t, strconv.Itoa(300*passes), m[1], "every pass read the whole topic: %s", out.String())
		assert.GreaterOrEqual(t, secs, d.Seconds(), "ran at least --min-duration")
		if passes < 2 {
			continue
		}
		// Each pass after the first was its own group.
		groups, err := adm.ListGroups(ctx)
		require.NoError(t, err)
		for k := 2; k <= passes; k++ {
			_, ok := groups[fmt.Sprintf("%s-%d", group, k)]
			assert.True(t, ok, "group %s-%d of pass %d", group, k, k)
		}
		break
	}

	err = app.Run([]string{"zerobus-emulator", "kafka-produce", "--brokers", srv.KafkaAddr(), "--topic", "missing", "--count", "1"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--kafka-topic missing:PARTITIONS")
}
