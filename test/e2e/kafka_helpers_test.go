package e2e

// The harness of the Kafka tests (issue 25): a kfake cluster in the test
// process (franz-go's in-process Kafka, which this project did not write),
// records produced with franz-go, committed and end offsets read with kadm,
// and the built benthos-zerobus binary running redpanda → zerobus against
// it and an in-process emulator. Each row carries its record's partition and
// offset in the columns kafka_partition and kafka_offset, so what landed is
// checked per partition against what the group committed.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

const (
	kafkaTable = "main.default.kafka_rows"
	// kafkaCols are the columns of kafkaTable: the record's own fields, its
	// partition and offset, and the instance that wrote it.
	kafkaCols  = "id BIGINT NOT NULL, msg STRING, kafka_partition BIGINT NOT NULL, kafka_offset BIGINT NOT NULL, instance STRING"
	kafkaTopic = "events"
	kafkaGroup = "zerobus-e2e"
)

// kafkaBroker is a one-broker kfake cluster on a fixed loopback port,
// keeping its log under a directory so that it can be closed and started
// again on the same port with its records and committed offsets (a broker
// outage).
type kafkaBroker struct {
	tb      testing.TB
	cluster *kfake.Cluster
	addr    string
	port    int
	dir     string
}

// startKafkaBroker starts a kfake broker with topic of parts partitions.
func startKafkaBroker(tb testing.TB, topic string, parts int32) *kafkaBroker {
	tb.Helper()
	b := &kafkaBroker{tb: tb, dir: tb.TempDir()}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(b.dir), kfake.SeedTopics(parts, topic))
	require.NoError(tb, err)
	b.cluster = c
	b.addr = c.ListenAddrs()[0]
	_, port, _ := net.SplitHostPort(b.addr)
	b.port, _ = strconv.Atoi(port)
	tb.Cleanup(func() { b.cluster.Close() })
	return b
}

// stop closes the broker: its listener and every connection.
func (b *kafkaBroker) stop() { b.cluster.Close() }

// restart starts the broker again on the same port with the same log. The
// port was free a moment ago; an outgoing connection may take it meanwhile,
// so it is retried for a while.
func (b *kafkaBroker) restart() {
	b.tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := kfake.NewCluster(kfake.Ports(b.port), kfake.DataDir(b.dir))
		if err == nil {
			b.cluster = c
			return
		}
		if time.Now().After(deadline) {
			require.NoError(b.tb, err, "restarting kfake on port %d", b.port)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kafkaValue is record id's value: {"id": id, "msg": "<size bytes>"}.
func kafkaValue(id, size int) []byte {
	return []byte(fmt.Sprintf(`{"id":%d,"msg":"%s"}`, id, strings.Repeat("x", size)))
}

// produce writes records first … first+n-1 to topic, record i to partition
// i % parts, each value from value(i), and waits until all are
// acknowledged. It never fails the test off its goroutine: it returns the
// first produce error.
func (b *kafkaBroker) produce(topic string, parts, first, n int, value func(i int) []byte) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(50_000))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	errs := make(chan error, 1)
	for i := first; i < first+n; i++ {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(i % parts), Value: value(i)}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// offsets reads the group's committed offsets and the topic's end offsets,
// per partition (a partition without a commit is absent from committed).
func (b *kafkaBroker) offsets(topic, group string) (committed, end map[int32]int64, err error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.RequestRetries(2))
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	committed = map[int32]int64{}
	fetched, err := adm.FetchOffsets(ctx, group)
	switch {
	case err == nil:
		fetched.Each(func(o kadm.OffsetResponse) {
			if o.Topic == topic && o.Err == nil && o.At >= 0 {
				committed[o.Partition] = o.At
			}
		})
	case !isNoGroup(err):
		return nil, nil, fmt.Errorf("fetch offsets of group %s: %w", group, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	end = map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset })
	return committed, end, nil
}

// isNoGroup says the group has never committed (kfake answers
// GROUP_ID_NOT_FOUND for a group it does not know).
func isNoGroup(err error) bool { return errors.Is(err, kerr.GroupIDNotFound) }

// landed is what a table holds, per partition: how many rows each offset
// has, and which instances wrote the partition's rows, in storage order.
// A row's partition and offset are its kafka_partition and kafka_offset
// columns, or, in a table written without a mapping (record packs), its
// coverage columns _zb_source (topic/partition) and _zb_offset.
type landed struct {
	rows      int
	byPart    map[int32]map[int64]int
	order     map[int32][]int64 // offsets in storage order
	instances map[int32]map[string]bool
}

// readLanded reads every row of table from the in-process emulator.
func readLanded(tb testing.TB, srv *emulator.Server, table string) landed {
	tb.Helper()
	l, err := fetchLanded(srv, table)
	require.NoError(tb, err)
	return l
}

// fetchLanded is readLanded without the test, for polls.
func fetchLanded(srv *emulator.Server, table string) (landed, error) {
	rows, err := srv.TableRows(table, 0)
	if err != nil {
		return landed{}, err
	}
	l := landed{rows: len(rows), byPart: map[int32]map[int64]int{}, order: map[int32][]int64{}, instances: map[int32]map[string]bool{}}
	for _, r := range rows {
		p, ok1 := asInt64(r["kafka_partition"])
		o, ok2 := asInt64(r["kafka_offset"])
		if src, ok := r["_zb_source"].(string); !ok1 && ok {
			// No mapping stamped them (record packs take no processors):
			// coverage's topic/partition and offset.
			if i := strings.LastIndexByte(src, '/'); i >= 0 {
				if n, err := strconv.ParseInt(src[i+1:], 10, 32); err == nil {
					p, ok1 = n, true
				}
			}
			o, ok2 = asInt64(r["_zb_offset"])
		}
		if !ok1 || !ok2 {
			return landed{}, fmt.Errorf("a row without kafka_partition/kafka_offset (or _zb_source/_zb_offset): %v", r)
		}
		part := int32(p)
		if l.byPart[part] == nil {
			l.byPart[part] = map[int64]int{}
			l.instances[part] = map[string]bool{}
		}
		l.byPart[part][o]++
		l.order[part] = append(l.order[part], o)
		if in, ok := r["instance"].(string); ok {
			l.instances[part][in] = true
		}
	}
	return l, nil
}

// distinct counts the distinct (partition, offset) pairs.
func (l landed) distinct() int {
	n := 0
	for _, offs := range l.byPart {
		n += len(offs)
	}
	return n
}

// duplicates counts the rows beyond the first of each (partition, offset),
// per partition.
func (l landed) duplicates() map[int32]int {
	out := map[int32]int{}
	for p, offs := range l.byPart {
		for _, c := range offs {
			if c > 1 {
				out[p] += c - 1
			}
		}
	}
	return out
}

// missingBelow lists, per partition, the offsets below limit[p] (from 0)
// that have no row: a commit ahead of the table when limit is the committed
// offsets, a loss when it is the end offsets.
func (l landed) missingBelow(limit map[int32]int64) map[int32][]int64 {
	out := map[int32][]int64{}
	for p, lim := range limit {
		for o := int64(0); o < lim; o++ {
			if l.byPart[p][o] == 0 {
				out[p] = append(out[p], o)
			}
		}
	}
	return out
}

// aboveCommitted counts the distinct offsets at or above each partition's
// committed offset that have landed: records durable but not committed,
// which a restart reads again.
func (l landed) aboveCommitted(committed map[int32]int64) int {
	n := 0
	for p, offs := range l.byPart {
		for o := range offs {
			if o >= committed[p] {
				n++
			}
		}
	}
	return n
}

// countMissing sums missingBelow and shows the first few of each partition.
func countMissing(m map[int32][]int64) (int, string) {
	n := 0
	var parts []int32
	for p, offs := range m {
		n += len(offs)
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	var b strings.Builder
	for _, p := range parts {
		fmt.Fprintf(&b, "partition %d: %d missing, first %v; ", p, len(m[p]), head(m[p], 5))
	}
	return n, b.String()
}

func sumOffsets(m map[int32]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// kafkaPipeline is a product config: redpanda (brokers, topic, the group,
// earliest, inputExtra lines under redpanda) → a mapping stamping the
// record's partition and offset and the INSTANCE environment variable into
// columns → zerobus into table on srv (outputExtra lines under zerobus).
// metricsAddr serves /metrics when not empty.
func kafkaPipeline(srv *emulator.Server, brokers, topic, table, metricsAddr, inputExtra, outputExtra string) string {
	httpBlock := "http:\n  enabled: false\n"
	if metricsAddr != "" {
		httpBlock = "http:\n  address: " + metricsAddr + "\n"
	}
	in := fmt.Sprintf("redpanda:\n  seed_brokers: [ %q ]\n  topics: [ %q ]\n  consumer_group: %s\n  start_offset: earliest\n  commit_period: 500ms\n", brokers, topic, kafkaGroup)
	if inputExtra != "" {
		in += indentBy(inputExtra, 2) + "\n"
	}
	return httpBlock + `logger:
  level: INFO
  format: logfmt
metrics:
  prometheus: {}
input:
` + indentBy(in, 2) + `
pipeline:
  processors:
    - mapping: |
        root = this
        root.kafka_partition = @kafka_partition
        root.kafka_offset = @kafka_offset
        root.instance = "${INSTANCE:one}"
output:
` + indentBy(zerobusOutput(srv.GRPCURL(), srv.HTTPURL(), table, outputExtra), 2) + "\n"
}

// kafkaPackedPipeline is kafkaPipeline with record packs (pack_records):
// no processors, so the output itself provisions table from the first
// batch and stamps each record's position as coverage (_zb_source
// topic/partition, _zb_offset), which landed reads.
func kafkaPackedPipeline(srv *emulator.Server, brokers, topic, table, inputExtra string) string {
	in := fmt.Sprintf("redpanda:\n  seed_brokers: [ %q ]\n  topics: [ %q ]\n  consumer_group: %s\n  start_offset: earliest\n  commit_period: 500ms\n  pack_records: true\n", brokers, topic, kafkaGroup)
	if inputExtra != "" {
		in += indentBy(inputExtra, 2) + "\n"
	}
	out := zerobusOutput(srv.GRPCURL(), srv.HTTPURL(), table, "ordering_key: ${! @kafka_partition }\ncatalog:\n  provision: true\n  warehouse_id: wh\n"+
		"coverage:\n  source: ${! @kafka_topic }/${! @kafka_partition }\n  offset: ${! @kafka_offset }\n")
	return "http:\n  enabled: false\nlogger:\n  level: INFO\n  format: logfmt\ninput:\n" + indentBy(in, 2) + "\noutput:\n" + indentBy(out, 2) + "\n"
}

// startKafkaProduct starts the product binary on config with INSTANCE set
// to instance.
func startKafkaProduct(t *testing.T, config, instance string) *proc {
	t.Helper()
	f := filepath.Join(t.TempDir(), "pipeline.yaml")
	require.NoError(t, os.WriteFile(f, []byte(config), 0o600))
	return start(t, []string{"INSTANCE=" + instance, "GOMEMLIMIT="}, "run", f)
}

// kill9 kills p with SIGKILL and reaps it.
func kill9(p *proc) {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// terminate sends p SIGTERM and waits up to d for it to end; it returns the
// exit code, or an error naming the output's tail when it did not end.
func terminate(p *proc, d time.Duration) (int, error) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_, code, err := awaitProduct(p, d)
	return code, err
}

// tableRowCount is the emulator's count of rows stored in table
// (duplicates counted), cheap enough to poll.
func tableRowCount(srv *emulator.Server, table string) int64 {
	for name, ts := range srv.Stats().Tables {
		if strings.EqualFold(name, table) {
			return ts.RowCount
		}
	}
	return 0
}

// waitRows waits until table holds at least n rows (duplicates counted).
func waitRows(t *testing.T, srv *emulator.Server, table string, n int64, wait time.Duration, logs func() string) {
	t.Helper()
	eventually(t, wait, 50*time.Millisecond, fmt.Sprintf("%d rows in %s", n, table), func() (bool, string) {
		got := tableRowCount(srv, table)
		return got >= n, fmt.Sprintf("%d rows\n%s", got, tail(logs(), 20))
	})
}

// waitAllLanded waits until every offset below the end offsets has a row.
func waitAllLanded(t *testing.T, srv *emulator.Server, table string, end map[int32]int64, wait time.Duration, logs func() string) landed {
	t.Helper()
	var l landed
	total := sumOffsets(end)
	eventually(t, wait, 250*time.Millisecond, "every record landed", func() (bool, string) {
		if tableRowCount(srv, table) < total {
			return false, fmt.Sprintf("%d of %d rows\n%s", tableRowCount(srv, table), total, tail(logs(), 20))
		}
		var err error
		if l, err = fetchLanded(srv, table); err != nil {
			return false, err.Error()
		}
		n, saw := countMissing(l.missingBelow(end))
		return n == 0, fmt.Sprintf("%d missing: %s\n%s", n, saw, tail(logs(), 20))
	})
	return l
}

// waitCommittedAtEnd waits until the group's committed offset of every
// partition is its end offset.
func waitCommittedAtEnd(t *testing.T, b *kafkaBroker, topic, group string, wait time.Duration) map[int32]int64 {
	t.Helper()
	var committed map[int32]int64
	eventually(t, wait, 250*time.Millisecond, "committed offsets reach the end offsets", func() (bool, string) {
		c, end, err := b.offsets(topic, group)
		if err != nil {
			return false, err.Error()
		}
		committed = c
		for p, e := range end {
			if c[p] != e {
				return false, fmt.Sprintf("committed %v, end %v", c, end)
			}
		}
		return true, ""
	})
	return committed
}

// scrapeGauge sums the samples of the Prometheus gauge name (every label
// set) served at http://addr/metrics; ok is false when it is not there.
func scrapeGauge(addr, name string) (sum float64, ok bool, err error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, err
	}
	sum, series := promSum(string(body), name)
	return sum, series > 0, nil
}

// randomBetween is a random fraction in [lo, hi).
func randomBetween(r *rand.Rand, lo, hi float64) float64 { return lo + r.Float64()*(hi-lo) }
