package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The tests run the input against kfake, franz-go's in-process
// implementation of the Kafka protocol (consumer groups, offset commits,
// fetch sessions): an implementation this project did not write.

// wait is the generous deadline of every condition a test waits for (a
// loaded 2-core CI box).
const wait = 30 * time.Second

// newCluster starts a one-broker kfake cluster with topic holding parts
// partitions, closed at the end of the test.
func newCluster(t *testing.T, topic string, parts int32, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(parts, topic)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// produce writes n records to each of parts partitions of topic, one
// produce request (one record batch) per record, so that fetch size limits
// can split them. Record i of partition p has key "p-i", value
// {"p":p,"i":i} and a header h=v<i>.
func produce(t *testing.T, addrs []string, topic string, parts int32, from, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for i := from; i < from+n; i++ {
		var recs []*kgo.Record
		for p := int32(0); p < parts; p++ {
			recs = append(recs, &kgo.Record{
				Topic: topic, Partition: p,
				Key:     fmt.Appendf(nil, "%d-%d", p, i),
				Value:   fmt.Appendf(nil, `{"p":%d,"i":%d}`, p, i),
				Headers: []kgo.RecordHeader{{Key: "h", Value: fmt.Appendf(nil, "v%d", i)}},
			})
		}
		require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	}
}

// committed returns the group's committed offset of every partition of
// topic that has one, read with kadm.
func committed(t *testing.T, addrs []string, group, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	out := map[int32]int64{}
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return out // the group has not been created yet: nothing committed
	}
	require.NoError(t, err)
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// yamlConf renders an input config: seed_brokers from addrs plus the
// given lines (already indented by nothing; each "key: value").
func yamlConf(addrs []string, lines ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed_brokers: [ %q ]\n", strings.Join(addrs, ","))
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// newTestInput parses conf and returns a connected input, closed at the end
// of the test.
func newTestInput(t testing.TB, conf string) *input {
	t.Helper()
	pc, err := Spec().ParseYAML(conf, nil)
	require.NoError(t, err)
	cfg, err := ParseConfig(pc)
	require.NoError(t, err)
	in := newInput(cfg, service.MockResources())
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(t, in.Connect(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_ = in.Close(ctx)
	})
	return in
}

// delivery is one ReadBatch result.
type delivery struct {
	msgs service.MessageBatch
	ack  service.AckFunc
}

func (d delivery) partition(t *testing.T) int {
	t.Helper()
	v, ok := d.msgs[0].MetaGetMut("kafka_partition")
	require.True(t, ok)
	return v.(int)
}

// offsets returns the kafka_offset of each message.
func (d delivery) offsets(t *testing.T) []int {
	t.Helper()
	out := make([]int, len(d.msgs))
	for i, m := range d.msgs {
		v, ok := m.MetaGetMut("kafka_offset")
		require.True(t, ok)
		out[i] = v.(int)
	}
	return out
}

func read(t *testing.T, in *input) delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	msgs, ack, err := in.ReadBatch(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, msgs)
	return delivery{msgs, ack}
}

// readN reads batches until n records were delivered.
func readN(t *testing.T, in *input, n int) []delivery {
	t.Helper()
	var ds []delivery
	got := 0
	for got < n {
		d := read(t, in)
		ds = append(ds, d)
		got += len(d.msgs)
	}
	require.Equal(t, n, got, "no more records than produced")
	return ds
}

func ack(t *testing.T, d delivery, err error) {
	t.Helper()
	require.NoError(t, d.ack(context.Background(), err))
}
