package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/urfave/cli/v2"
)

// kafkaCommands are the emulator's Kafka helpers, so that a demo or a script
// needs nothing installed beyond the emulator binary: kafka-produce writes
// JSON records to a topic, kafka-offsets prints a consumer group's
// committed offsets beside the end offsets. They work against any Kafka
// broker, the emulator's own (--kafka) or a real one.
func kafkaCommands() []*cli.Command {
	brokers := &cli.StringFlag{Name: "brokers", Value: "127.0.0.1:9092", Usage: "seed broker host:port (comma-separated for several)", EnvVars: []string{"KAFKA_BROKERS"}}
	return []*cli.Command{
		{
			Name:  "kafka-produce",
			Usage: "produce JSON records {\"id\", \"device\", \"temperature\", \"reading_ms\"} to a Kafka topic, spread evenly over its partitions",
			Flags: []cli.Flag{
				brokers,
				&cli.StringFlag{Name: "topic", Value: "orders", Usage: "topic to produce to"},
				&cli.IntFlag{Name: "count", Value: 1000, Usage: "records to produce; their ids are first … first+count-1"},
				&cli.IntFlag{Name: "first", Value: 1, Usage: "id of the first record"},
			},
			Action: func(c *cli.Context) error {
				n, err := produceDemoRecords(c.Context, splitBrokers(c.String("brokers")), c.String("topic"), c.Int("first"), c.Int("count"))
				if err != nil {
					return fmt.Errorf("kafka-produce: %w", err)
				}
				fmt.Fprintf(c.App.Writer, "produced %d records to %s\n", n, c.String("topic"))
				return nil
			},
		},
		{
			Name: "kafka-consume",
			Usage: "consume a topic in a consumer group with a bare franz-go poll loop that discards the records, " +
				"until --count records, and print records/s and the seconds it took (a baseline for benchmarks of an input)",
			Flags: []cli.Flag{
				brokers,
				&cli.StringFlag{Name: "topic", Value: "orders", Usage: "topic"},
				&cli.StringFlag{Name: "group", Required: true, Usage: "consumer group (from the start of the topic when it has no commit)"},
				&cli.IntFlag{Name: "count", Required: true, Usage: "records to consume before stopping"},
				&cli.DurationFlag{Name: "min-duration", Usage: "once --count records are consumed, read the topic again from its start, " +
					"each pass as a fresh consumer group (GROUP-2, GROUP-3, …) of --count records, until at least this long has passed since the start; " +
					"the records, bytes and rate printed cover every pass (a benchmark's baseline that runs as long as the side it is compared with)"},
			},
			Action: func(c *cli.Context) error {
				brokers, topic, group, count := splitBrokers(c.String("brokers")), c.String("topic"), c.String("group"), c.Int("count")
				began := time.Now()
				n, bytes, passes := 0, 0, 0
				for passes == 0 || time.Since(began) < c.Duration("min-duration") {
					passes++
					g := group
					if passes > 1 {
						g = fmt.Sprintf("%s-%d", group, passes)
					}
					pn, pb, _, err := consumeAndDiscard(c.Context, brokers, topic, g, count)
					n, bytes = n+pn, bytes+pb
					if err != nil {
						return fmt.Errorf("kafka-consume: pass %d (group %s): %w", passes, g, err)
					}
				}
				took := time.Since(began)
				fmt.Fprintf(c.App.Writer, "consumed %d records (%d value bytes) in %d passes, %.3f s: %.0f records/s\n", n, bytes, passes, took.Seconds(), float64(n)/took.Seconds())
				return nil
			},
		},
		{
			Name:  "kafka-offsets",
			Usage: "print a consumer group's committed offset beside the end offset of every partition of a topic",
			Flags: []cli.Flag{
				brokers,
				&cli.StringFlag{Name: "topic", Value: "orders", Usage: "topic"},
				&cli.StringFlag{Name: "group", Required: true, Usage: "consumer group"},
			},
			Action: func(c *cli.Context) error {
				if err := printGroupOffsets(c.Context, c.App.Writer, splitBrokers(c.String("brokers")), c.String("topic"), c.String("group")); err != nil {
					return fmt.Errorf("kafka-offsets: %w", err)
				}
				return nil
			},
		},
	}
}

func splitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// produceDemoRecords produces count JSON records, record i (id first+i) to
// partition i % partitions, and waits until every one is acknowledged.
func produceDemoRecords(ctx context.Context, brokers []string, topic string, first, count int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	err := produceRecords(ctx, brokers, topic, first, count, func(id int) ([]byte, error) {
		return fmt.Appendf(nil, `{"id":%d,"device":"sensor-%02d","temperature":%.1f,"reading_ms":%d}`, id, id%10, 15+float64(id%200)/10, time.Now().UnixMilli()), nil
	})
	if err != nil {
		return 0, err
	}
	return count, nil
}

// produceRecords produces count records with ids first … first+count-1,
// record i keyed by its id, valued value(id), to partition i % partitions,
// and waits until every one is acknowledged: the loop of kafka-produce and
// avro-produce.
func produceRecords(ctx context.Context, brokers []string, topic string, first, count int, value func(id int) ([]byte, error)) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	parts, err := partitionCount(ctx, cl, topic)
	if err != nil {
		return err
	}
	errs := make(chan error, 1)
	for i := 0; i < count; i++ {
		id := first + i
		v, err := value(id)
		if err != nil {
			return err
		}
		cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(i % parts), Key: []byte(fmt.Sprint(id)), Value: v}, func(_ *kgo.Record, err error) {
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
	}
	return nil
}

// consumeAndDiscard polls topic as a member of group until count records
// have arrived, touching each record's value and dropping it: the least an
// input can do. Offsets are committed by franz-go's default autocommit.
func consumeAndDiscard(ctx context.Context, brokers []string, topic, group string, count int) (n, bytes int, took time.Duration, err error) {
	began := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return 0, 0, 0, err
	}
	defer cl.Close()
	for n < count {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return n, bytes, time.Since(began), err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("%s/%d: %w", t, p, err) })
		if ferr != nil {
			return n, bytes, time.Since(began), ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			n++
			bytes += len(r.Value)
		})
	}
	return n, bytes, time.Since(began), nil
}

// partitionCount asks the cluster how many partitions topic has.
func partitionCount(ctx context.Context, cl *kgo.Client, topic string) (int, error) {
	md, err := kadm.NewClient(cl).Metadata(ctx, topic)
	if err != nil {
		return 0, err
	}
	t, ok := md.Topics[topic]
	if !ok || t.Err != nil || len(t.Partitions) == 0 {
		return 0, fmt.Errorf("topic %q does not exist on %s (the emulator creates it with --kafka-topic %s:PARTITIONS): %v", topic, strings.Join(cl.OptValue(kgo.SeedBrokers).([]string), ","), topic, t.Err)
	}
	return len(t.Partitions), nil
}

// printGroupOffsets writes one line per partition of topic: the group's
// committed offset, the end offset, and the lag between them.
func printGroupOffsets(ctx context.Context, w io.Writer, brokers []string, topic, group string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		committed, err = nil, nil // nothing committed yet
	}
	if err != nil {
		return err
	}
	var parts []int32
	ends.Each(func(o kadm.ListedOffset) { parts = append(parts, o.Partition) })
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	fmt.Fprintf(w, "%-24s %9s %9s %9s %9s\n", "group "+group, "partition", "committed", "end", "lag")
	for _, p := range parts {
		end, _ := ends.Lookup(topic, p)
		at := int64(0)
		shown := "-"
		if c, ok := committed.Lookup(topic, p); ok {
			at, shown = c.At, fmt.Sprint(c.At)
		}
		fmt.Fprintf(w, "%-24s %9d %9s %9d %9d\n", topic, p, shown, end.Offset, end.Offset-at)
	}
	return nil
}
