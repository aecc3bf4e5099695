package emulator

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
)

// KafkaTopic is a topic the emulator's Kafka broker creates at start
// (--kafka-topic NAME:PARTITIONS).
type KafkaTopic struct {
	Name       string
	Partitions int32
}

// ParseKafkaTopic parses "NAME:PARTITIONS" (a bare NAME is one partition).
func ParseKafkaTopic(spec string) (KafkaTopic, error) {
	name, parts, hasParts := strings.Cut(strings.TrimSpace(spec), ":")
	name = strings.TrimSpace(name)
	if name == "" {
		return KafkaTopic{}, fmt.Errorf("--kafka-topic %q: want NAME:PARTITIONS, e.g. orders:3", spec)
	}
	t := KafkaTopic{Name: name, Partitions: 1}
	if hasParts {
		n, err := strconv.ParseInt(strings.TrimSpace(parts), 10, 32)
		if err != nil || n < 1 {
			return KafkaTopic{}, fmt.Errorf("--kafka-topic %q: the partition count %q is not a whole number of at least 1", spec, parts)
		}
		t.Partitions = int32(n)
	}
	return t, nil
}

// kafkaBroker is the emulator's embedded Kafka cluster: one kfake broker
// (github.com/twmb/franz-go/pkg/kfake, the in-process Kafka implementation
// franz-go's own tests run against) on the --kafka listener. It is not an
// emulation of any Databricks service, so it makes no claim about one: it
// is there so that a Kafka → Zerobus pipeline runs locally with nothing to
// install. Its records, topics and committed group offsets persist under
// the data directory, like the tables, so that after a restart a
// consumer's committed offsets and the rows in the tables still agree.
type kafkaBroker struct {
	cluster *kfake.Cluster
	addr    string
}

// startKafka serves a kfake cluster on ln (already bound, so a busy port is
// reported by listenOn with its flag), storing under dir, with the topics
// created unless they already exist.
func startKafka(ln net.Listener, dir string, topics []KafkaTopic, tlsConf *tls.Config, log *slog.Logger) (*kafkaBroker, error) {
	used := false
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.ClusterID("zerobus-emulator"),
		kfake.DataDir(dir),
		kfake.WithLogger(kafkaLogger{log}),
		// kfake binds 127.0.0.1:<port> itself; the listener it gets is the
		// one --kafka bound, so the address (and the loopback default) is
		// the emulator's, like every other listener's. Brokers advertise
		// the host and port they listen on.
		kfake.ListenFn(func(string, string) (net.Listener, error) {
			if used {
				return nil, fmt.Errorf("emulator: kafka: a second listener was asked for")
			}
			used = true
			return ln, nil
		}),
	}
	if tlsConf != nil {
		opts = append(opts, kfake.TLS(tlsConf.Clone()))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("emulator: kafka (--kafka): %w", err)
	}
	for _, t := range topics {
		if info := c.PartitionInfos(t.Name); len(info) > 0 {
			if int32(len(info)) != t.Partitions {
				log.Warn("kafka topic already exists with another partition count; keeping the stored one (use a fresh --data directory to start over)",
					"topic", t.Name, "partitions", len(info), "asked", t.Partitions)
			}
			continue
		}
		if err := c.CreateTopic(t.Name, t.Partitions, nil); err != nil {
			c.Close()
			return nil, fmt.Errorf("emulator: --kafka-topic %s:%d: %w", t.Name, t.Partitions, err)
		}
	}
	return &kafkaBroker{cluster: c, addr: ln.Addr().String()}, nil
}

// kafkaDir is where the Kafka broker keeps its log and state, beside the
// tables (a name with a dot never collides with a catalog directory).
func kafkaDir(dataDir string) string { return filepath.Join(dataDir, ".kafka") }

// kafkaLogger passes kfake's logs to the emulator's logger: its errors as
// errors, the rest (every request at info, every client that went away at
// warn) at debug, where they are no noise for a user of the emulator.
type kafkaLogger struct{ log *slog.Logger }

func (l kafkaLogger) Logf(level kfake.LogLevel, format string, args ...any) {
	lvl := slog.LevelDebug
	if level == kfake.LogLevelError {
		lvl = slog.LevelError
	}
	ctx := context.Background()
	if l.log.Enabled(ctx, lvl) {
		l.log.Log(ctx, lvl, "kafka: "+fmt.Sprintf(format, args...))
	}
}
