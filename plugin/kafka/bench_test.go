//go:build unix

package kafka

import (
	"context"
	"syscall"
	"testing"
	"time"

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
// Besides ns/op (wall time per record, noisy on a shared machine) it
// reports cpu-ns/record, the process's user+sys CPU per record over the
// timed loop (broker included, the same for both sides), and with
// -benchmem the allocations per record.
//
//	go test -run '^$' -bench BenchmarkConsume -benchtime 2000000x -benchmem ./plugin/kafka/
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
		cpu := startCPU(b)
		for n := 0; n < b.N; {
			fs := cl.PollFetches(context.Background())
			fs.EachRecord(func(*kgo.Record) { n++ })
		}
		cpu.report(b)
	})
	b.Run("input", func(b *testing.B) {
		in := newTestInput(b, yamlConf(addrs, "topics: [ "+topic+" ]"))
		b.SetBytes(200)
		cpu := startCPU(b)
		ctx := context.Background()
		for n := 0; n < b.N; {
			msgs, ack, err := in.ReadBatch(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n += len(msgs)
			_ = ack(ctx, nil)
		}
		cpu.report(b)
	})
}

// cpuClock measures the process's user+sys CPU over a benchmark's timed
// loop.
type cpuClock struct{ began time.Duration }

func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	require.NoError(tb, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startCPU resets the benchmark's timer and starts the CPU clock.
func startCPU(b *testing.B) cpuClock {
	b.ResetTimer()
	return cpuClock{processCPU(b)}
}

// report stops the timer and reports the CPU per record (b.N records).
func (c cpuClock) report(b *testing.B) {
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-c.began)/float64(b.N), "cpu-ns/record")
}
