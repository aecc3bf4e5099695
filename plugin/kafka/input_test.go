package kafka

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/benthos-zerobus/benthos-zerobus/internal/kafkain"
)

// TestMetadataAsRedpandaConnect: every message carries Redpanda Connect's
// kafka_* metadata, with the values of its record, and the record headers.
func TestMetadataAsRedpandaConnect(t *testing.T) {
	const topic = "meta"
	c := newCluster(t, topic, 2)
	addrs := c.ListenAddrs()
	produce(t, addrs, topic, 2, 0, 5)
	// A tombstone (nil value) on partition 1.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	ts := time.UnixMilli(1767225600123)
	require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: 1, Key: []byte("gone"), Timestamp: ts}).FirstErr())
	cl.Close()

	// No consumer group: both partitions, from the start.
	in := newTestInput(t, yamlConf(addrs, "topics: [ "+topic+" ]"))
	seen := map[string]*service.Message{}
	for len(seen) < 11 {
		d := read(t, in)
		for _, m := range d.msgs {
			p, _ := m.MetaGetMut("kafka_partition")
			o, _ := m.MetaGetMut("kafka_offset")
			seen[fmt.Sprintf("%d/%d", p, o)] = m
		}
		ack(t, d, nil)
	}
	require.Len(t, seen, 11)

	m := seen["0/2"]
	require.NotNil(t, m)
	meta := map[string]any{}
	require.NoError(t, m.MetaWalkMut(func(k string, v any) error { meta[k] = v; return nil }))
	assert.Equal(t, "0-2", meta["kafka_key"])
	assert.Equal(t, topic, meta["kafka_topic"])
	assert.Equal(t, 0, meta["kafka_partition"])
	assert.Equal(t, 2, meta["kafka_offset"])
	assert.Equal(t, int64(2), meta["kafka_lag"], "high watermark 5, offset 2: 2 records behind")
	assert.Equal(t, false, meta["kafka_tombstone_message"])
	assert.Equal(t, "v2", meta["h"], "record header")
	ms, ok := meta["kafka_timestamp_ms"].(int64)
	require.True(t, ok)
	assert.InDelta(t, time.Now().UnixMilli(), ms, float64(time.Hour.Milliseconds()))
	assert.Equal(t, ms/1000, meta["kafka_timestamp_unix"])
	body, err := m.AsBytes()
	require.NoError(t, err)
	assert.JSONEq(t, `{"p":0,"i":2}`, string(body))

	tomb := seen["1/5"]
	require.NotNil(t, tomb)
	v, _ := tomb.MetaGetMut("kafka_tombstone_message")
	assert.Equal(t, true, v)
	v, _ = tomb.MetaGetMut("kafka_timestamp_ms")
	assert.Equal(t, ts.UnixMilli(), v)
	v, _ = tomb.MetaGetMut("kafka_timestamp_unix")
	assert.Equal(t, ts.Unix(), v)
	v, _ = tomb.MetaGetMut("kafka_lag")
	assert.Equal(t, int64(0), v)
}

// TestCapStopsPolling: with max_unacked_per_partition records handed out and
// not acknowledged, the input stops polling (nothing more is delivered),
// and acknowledging them resumes it.
func TestCapStopsPolling(t *testing.T) {
	const topic, group, limit = "capped", "g-cap", 10
	c := newCluster(t, topic, 1)
	addrs := c.ListenAddrs()
	produce(t, addrs, topic, 1, 0, 100)
	in := newTestInput(t, groupConf(addrs, topic, group,
		fmt.Sprintf("max_unacked_per_partition: %d", limit),
		"fetch_max_partition_bytes: 1B", "fetch_max_bytes: 1B", "fetch_max_wait: 100ms"))

	var held []delivery
	got, nextOff := 0, 0
	inOrder := func(d delivery) {
		for _, o := range d.offsets(t) {
			require.Equal(t, nextOff, o, "in order, none skipped across the stop and the resumption")
			nextOff++
		}
	}
	for got < limit {
		d := read(t, in)
		inOrder(d)
		held = append(held, d)
		got += len(d.msgs)
	}
	tr := in.consumer().Tracker()
	require.Eventually(t, func() bool { return tr.State()[0].AtCap }, wait, 10*time.Millisecond, "at the cap")

	// Nothing beyond the cap plus one fetch (one record batch, one record
	// here) is fetched, however long we wait.
	time.Sleep(500 * time.Millisecond)
	st := tr.State()[0]
	assert.LessOrEqual(t, st.Unacked, limit+1, "unacknowledged records bounded by the cap plus one fetch")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	for {
		msgs, a, err := in.ReadBatch(ctx)
		if err != nil {
			break
		}
		got += len(msgs)
		held = append(held, delivery{msgs, a})
		inOrder(held[len(held)-1])
	}
	cancel()
	assert.LessOrEqual(t, got, limit+1, "no more delivered while at the cap")

	for _, d := range held {
		ack(t, d, nil)
	}
	// Resumed: the rest arrives, acked as it comes, and all is committed.
	for got < 100 {
		d := read(t, in)
		inOrder(d)
		got += len(d.msgs)
		ack(t, d, nil)
	}
	assert.Equal(t, 100, got)
	waitCommitted(t, addrs, group, topic, 0, 100)
}

// TestHotPartitionNotStalledAtTheCap: one partition with a backlog, the
// other caught up, and max_unacked_per_partition far below the backlog at
// the default fetch_max_wait (5 s). Pausing the partition at its cap left it
// out of the next fetch, which the broker then held for fetch_max_wait since
// the partition it did ask for had nothing: a stall at every cap. Stopping
// the poll instead keeps the hot partition in every fetch.
func TestHotPartitionNotStalledAtTheCap(t *testing.T) {
	const topic, group, limit, n = "hot", "g-hot", 50, 600
	c := newCluster(t, topic, 2)
	addrs := c.ListenAddrs()
	produce(t, addrs, topic, 1, 0, n) // partition 0 only
	in := newTestInput(t, groupConf(addrs, topic, group, fmt.Sprintf("max_unacked_per_partition: %d", limit)))
	began := time.Now()
	for got := 0; got < n; {
		d := read(t, in)
		got += len(d.msgs)
		ack(t, d, nil)
	}
	took := time.Since(began)
	assert.Less(t, took, 5*time.Second, "%d records of one partition at a cap of %d took %s: a stall of fetch_max_wait", n, limit, took)
	waitCommitted(t, addrs, group, topic, 0, n)
}

// TestLintNamesTheField: lint (the spec's rules, and Benthos' unknown-field
// check) refuses bad values and Redpanda Connect fields this binary does
// not have, naming the field.
func TestLintNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		conf, field string
	}{
		{"seed_brokers: [ a:9092 ]\ntopics: [ t ]\nunordered_processing:\n  enabled: true", "unordered_processing"},
		{"seed_brokers: [ a:9092 ]\ntopics: [ t ]\ntimely_nacks_maximum_wait: 10s", "timely_nacks_maximum_wait"},
		{"seed_brokers: [ a:9092 ]\ntopics: [ t ]\nfetch_max_bytes: lots", "fetch_max_bytes"},
		{"seed_brokers: [ a:9092 ]\ntopics: [ t ]\npartition_buffer_bytes: -1MB", "partition_buffer_bytes"},
		{"seed_brokers: [ a:9092 ]\ntopics: [ t ]\nmax_unacked_per_partition: 0", "max_unacked_per_partition"},
		{"seed_brokers: [ a:9092 ]\ntopics: [ t ]\nmax_unacked_bytes: 16 megs", "max_unacked_bytes"},
		{"seed_brokers: [ a:9092 ]\ntopics: [ t ]\ncommit_period: 0s", "commit_period"},
		{"seed_brokers: [ a:9092 ]\ntopics: [ t ]\nconn_idle_timeout: 1h", "conn_idle_timeout"},
		{"seed_brokers: [ a:9092 ]\ntopics: [ t ]\nfetch_max_wait: 1ms", "fetch_max_wait"},
		{"seed_brokers: [ a:9092 ]\ntopics: [ t ]\nstart_offset: newest", "start_offset"},
		{"seed_brokers: [ a:9092 ]\ntopics: [ t ]\nheartbeat_interval: 30s\nsession_timeout: 1m", "heartbeat_interval"},
		{"seed_brokers: [ a:9092 ]\ntopics: [ t:0 ]\nconsumer_group: g", "consumer_group"},
		{"seed_brokers: [ a:9092 ]\nconsumer_group: g", "topics"},
		{"topics: [ t ]", "seed_brokers"},
		{"seed_brokers: [ a:9092 ]\ntopics: [ t ]\nregexp_topics_include: [ 'x.*' ]", "regexp_topics_include"},
		{"seed_brokers: [ a:9092 ]\ntopics: [ t ]\nsasl:\n  - mechanism: AWS_MSK_IAM", "mechanism"},
		{"seed_brokers: [ a:9092 ]\ntopics: [ t ]\ntcp:\n  connect_timeout: -1s", "tcp.connect_timeout"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			b := service.NewStreamBuilder()
			indented := "    " + strings.ReplaceAll(tc.conf, "\n", "\n    ")
			err := b.SetYAML("input:\n  redpanda:\n" + indented + "\noutput:\n  drop: {}\n")
			require.Error(t, err, "lint refuses it")
			assert.Contains(t, err.Error(), tc.field)
			assert.NotContains(t, err.Error(), "failed to parse", "every lint rule parses")
		})
	}

	// And a valid Redpanda Connect config passes lint as it is.
	b := service.NewStreamBuilder()
	require.NoError(t, b.SetYAML(`
input:
  redpanda:
    seed_brokers: [ "localhost:9092" ]
    client_id: redpanda-connect
    tls: { enabled: false }
    sasl:
      - mechanism: SCRAM-SHA-512
        username: foo
        password: bar
    topics: [ "foo,bar" ]
    consumer_group: g
    start_offset: committed
    fetch_max_bytes: 50MiB
    fetch_min_bytes: 1B
    fetch_max_partition_bytes: 1MiB
    partition_buffer_bytes: 1MB
    max_yield_batch_bytes: 32KB
    transaction_isolation_level: read_committed
    tcp: { connect_timeout: 0s, keep_alive: { idle: 15s, interval: 15s, count: 9 }, tcp_user_timeout: 0s }
    auto_replay_nacks: true
output:
  drop: {}
`))
}

// TestParseConfigExplicitPartitions: topic:partition, ranges and
// topic:partition:offset, without a group.
func TestParseConfigExplicitPartitions(t *testing.T) {
	pc, err := Spec().ParseYAML(`
seed_brokers: [ "a:1,b:2" ]
topics: [ "foo:0,foo:2-3", "bar:1:10" ]
start_offset: latest
`, nil)
	require.NoError(t, err)
	cfg, err := ParseConfig(pc)
	require.NoError(t, err)
	k := cfg.Consumer
	assert.Equal(t, []string{"a:1", "b:2"}, k.SeedBrokers)
	assert.Empty(t, k.Topics)
	require.Len(t, k.Partitions, 2)
	assert.Len(t, k.Partitions["foo"], 3)
	assert.Equal(t, kgo.NewOffset().At(10).String(), k.Partitions["bar"][1].String())
	assert.Equal(t, kgo.NewOffset().AtEnd().String(), k.Partitions["foo"][2].String())

	for conf, field := range map[string]string{
		"seed_brokers: [ a:1 ]\ntopics: [ foo, bar:1 ]":                         "topics",
		"seed_brokers: [ a:1 ]\ntopics: [ foo:x ]":                              "topics",
		"seed_brokers: [ a:1 ]\ntopics: [ foo:3-1 ]":                            "topics",
		"seed_brokers: [ a:1 ]\ntopics: [ foo:1:-4 ]":                           "topics",
		"seed_brokers: [ a:1 ]\ntopics: [ foo:1:2:3 ]":                          "topics",
		"seed_brokers: [ a:1 ]\ntopics: [ foo ]\nfetch_max_bytes: 3GiB":         "fetch_max_bytes",
		"seed_brokers: [ a:1 ]\ntopics: [ foo ]\nfetch_max_bytes: 600MiB":       "fetch_max_bytes",
		"seed_brokers: [ a:1 ]\ntopics: [ foo ]\nrequest_timeout_overhead: 20m": "request_timeout_overhead",
	} {
		pc, err := Spec().ParseYAML(conf, nil)
		require.NoError(t, err)
		_, err = ParseConfig(pc)
		require.Error(t, err, conf)
		assert.Contains(t, err.Error(), "field "+field, conf)
	}
}

// TestExplicitPartitionsNoGroup: explicit partitions are consumed in order,
// from the offset given, and nothing is committed (no group).
func TestExplicitPartitionsNoGroup(t *testing.T) {
	const topic = "explicit"
	c := newCluster(t, topic, 3)
	addrs := c.ListenAddrs()
	produce(t, addrs, topic, 3, 0, 20)
	in := newTestInput(t, yamlConf(addrs, "topics: [ "+topic+":1:5 ]", "max_yield_batch_bytes: 100B"))
	next := 5
	for next < 20 {
		d := read(t, in)
		require.Equal(t, 1, d.partition(t), "only the partition asked for")
		for _, o := range d.offsets(t) {
			require.Equal(t, next, o)
			next++
		}
		ack(t, d, nil)
	}
}

// recordingLog counts a consumer's log lines.
type recordingLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *recordingLog) add(level, f string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, level+" "+fmt.Sprintf(f, v...))
}
func (l *recordingLog) Debugf(f string, v ...any) { l.add("DEBUG", f, v...) }
func (l *recordingLog) Infof(f string, v ...any)  { l.add("INFO", f, v...) }
func (l *recordingLog) Warnf(f string, v ...any)  { l.add("WARN", f, v...) }
func (l *recordingLog) Errorf(f string, v ...any) { l.add("ERROR", f, v...) }

func (l *recordingLog) count(level string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.HasPrefix(s, level+" ") {
			n++
		}
	}
	return n
}

var _ kafkain.Logger = (*recordingLog)(nil)

// TestLagGrowsWhileUnacked: while nothing is acknowledged (the output
// refusing writes) and producers go on, the lag reported for the
// redpanda_lag gauge grows, and so does the commit age
// (redpanda_commit_age_seconds); once everything is acknowledged and
// committed both fall to 0.
func TestLagGrowsWhileUnacked(t *testing.T) {
	const topic, group = "lag", "g-lag"
	c := newCluster(t, topic, 1)
	addrs := c.ListenAddrs()
	produce(t, addrs, topic, 1, 0, 10)
	pc, err := Spec().ParseYAML(groupConf(addrs, topic, group, "topic_lag_refresh_period: 50ms", "max_unacked_per_partition: 10"), nil)
	require.NoError(t, err)
	cfg, err := ParseConfig(pc)
	require.NoError(t, err)
	var mu sync.Mutex
	lag := map[kafkain.TP]int64{}
	age := map[kafkain.TP]time.Duration{}
	cfg.Consumer.CommitAge = func(tp kafkain.TP, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		age[tp] = d
	}
	ageOf := func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return age[kafkain.TP{Topic: topic, Partition: 0}]
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cons, err := kafkain.New(ctx, cfg.Consumer, &recordingLog{}, func(tp kafkain.TP, l int64) {
		mu.Lock()
		defer mu.Unlock()
		lag[tp] = l
	})
	require.NoError(t, err)
	defer func() { _ = cons.Close(ctx) }()
	lagOf := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		l, ok := lag[kafkain.TP{Topic: topic, Partition: 0}]
		if !ok {
			return -1
		}
		return l
	}
	var held []*kafkain.Batch
	for n := 0; n < 10; {
		b, err := cons.Next(ctx)
		require.NoError(t, err)
		n += len(cons.Handed(b))
		held = append(held, b)
	}
	require.Eventually(t, func() bool { return lagOf() == 10 }, wait, 10*time.Millisecond, "10 produced, none acknowledged")
	produce(t, addrs, topic, 1, 10, 15)
	require.Eventually(t, func() bool { return lagOf() == 25 }, wait, 10*time.Millisecond, "lag grows while the output refuses")
	require.Eventually(t, func() bool { return ageOf() >= time.Second }, wait, 10*time.Millisecond, "the commit age grows while nothing is acknowledged")
	for _, b := range held {
		cons.Ack(b, b.Delivery(), nil)
	}
	for n := 0; n < 15; {
		b, err := cons.Next(ctx)
		require.NoError(t, err)
		n += len(cons.Handed(b))
		cons.Ack(b, b.Delivery(), nil)
	}
	require.Eventually(t, func() bool { return lagOf() == 0 }, wait, 10*time.Millisecond, "caught up")
	require.Eventually(t, func() bool { return ageOf() == 0 }, wait, 10*time.Millisecond, "committed to the end: commit age 0")
}

// TestRegexpTopics: regexp_topics_include picks every matching topic,
// regexp_topics_exclude leaves some out.
func TestRegexpTopics(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "logs_app", "logs_db", "logs_internal", "metrics"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	for _, topic := range []string{"logs_app", "logs_db", "logs_internal", "metrics"} {
		produce(t, addrs, topic, 1, 0, 3)
	}
	in := newTestInput(t, yamlConf(addrs, "regexp_topics_include: [ '^logs_.*' ]", "regexp_topics_exclude: [ '_internal$' ]", "metadata_max_age: 1s", "fetch_max_bytes: 200MiB"))
	got := map[string]int{}
	for total := 0; total < 6; {
		d := read(t, in)
		for _, m := range d.msgs {
			topic, _ := m.MetaGetMut("kafka_topic")
			got[topic.(string)]++
			total++
		}
		ack(t, d, nil)
	}
	assert.Equal(t, map[string]int{"logs_app": 3, "logs_db": 3}, got)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, _, err = in.ReadBatch(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "nothing of the excluded or unmatched topics")
}

// TestStartOffset: latest skips what was there before the start; committed
// consumes nothing of a partition the group never committed, and resumes
// from the commit of one it did.
func TestStartOffset(t *testing.T) {
	const topic = "start"
	c := newCluster(t, topic, 1)
	addrs := c.ListenAddrs()
	produce(t, addrs, topic, 1, 0, 5)

	latest := newTestInput(t, groupConf(addrs, topic, "g-latest", "start_offset: latest"))
	// Wait for the assignment before producing what latest must see.
	require.Eventually(t, func() bool { return len(latest.consumer().Tracker().State()) == 1 }, wait, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	produce(t, addrs, topic, 1, 5, 2)
	d := read(t, latest)
	assert.Equal(t, 5, d.offsets(t)[0], "latest: only records produced after the start")

	committedIn := newTestInput(t, groupConf(addrs, topic, "g-none", "start_offset: committed"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _, err := committedIn.ReadBatch(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "committed: no commit, nothing consumed")
}
