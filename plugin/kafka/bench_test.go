package kafka

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkConsume compares, per record, the input (ReadBatch, the messages
// with their metadata, the ack through the commit tracker) with a bare
// franz-go poll loop that discards records, both reading 200-byte records
// from a kfake cluster that serves canned batches (SyntheticFetch: the
// broker's own cost is the same for both and small). Without a consumer
// group, so no commits: the cost measured is the input's own.
//
//	go test -run '^$' -bench BenchmarkConsume -benchtime 2000000x ./plugin/kafka/
func BenchmarkConsume(b *testing.B) {
	const topic = "bench"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic),
		kfake.SyntheticFetch(kfake.SyntheticBatch{RecordBytes: 200, Records: 500}))
	require.NoError(b, err)
	defer c.Close()
	addrs := c.ListenAddrs()

	b.Run("bare_poll_loop", func(b *testing.B) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		require.NoError(b, err)
		defer cl.Close()
		b.SetBytes(200)
		b.ResetTimer()
		for n := 0; n < b.N; {
			fs := cl.PollFetches(context.Background())
			fs.EachRecord(func(*kgo.Record) { n++ })
		}
	})
	b.Run("input", func(b *testing.B) {
		in := newTestInput(b, yamlConf(addrs, "topics: [ "+topic+" ]"))
		b.SetBytes(200)
		b.ResetTimer()
		ctx := context.Background()
		for n := 0; n < b.N; {
			msgs, ack, err := in.ReadBatch(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n += len(msgs)
			_ = ack(ctx, nil)
		}
	})
}
