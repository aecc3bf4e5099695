package emulator

import (
	"context"
	"fmt"
	"math/big"
	"time"

	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/urfave/cli/v2"
)

// DemoAvroSchema is the schema avro-produce registers: a reading with the
// Avro logical types a registry-typed table shows (timestamp-micros, date,
// decimal), an enum, an array and a nullable union.
const DemoAvroSchema = `{"type":"record","name":"Reading","namespace":"demo","fields":[
 {"name":"id","type":"long"},
 {"name":"device","type":"string"},
 {"name":"temperature","type":"double"},
 {"name":"reading_time","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["OK","WARN","FAIL"]}},
 {"name":"tags","type":{"type":"array","items":"string"}},
 {"name":"note","type":["null","string"],"default":null}
]}`

// avroCommands are the emulator's Schema Registry helper: avro-produce
// registers DemoAvroSchema and produces records encoded with it in the
// Confluent wire format (franz-go's sr.ConfluentHeader, twmb/avro), so that
// `make demo-avro` needs nothing installed. It works against any broker and
// registry, the emulator's own (--kafka, --schema-registry) or real ones.
func avroCommands() []*cli.Command {
	return []*cli.Command{{
		Name:  "avro-produce",
		Usage: "register an Avro schema (a reading with timestamp, date, decimal, enum, array and nullable fields) in a Schema Registry and produce records encoded with it in the Confluent wire format",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "brokers", Value: "127.0.0.1:9092", Usage: "seed broker host:port (comma-separated for several)", EnvVars: []string{"KAFKA_BROKERS"}},
			&cli.StringFlag{Name: "registry", Value: "http://127.0.0.1:8081", Usage: "Schema Registry base URL", EnvVars: []string{"SCHEMA_REGISTRY_URL"}},
			&cli.StringFlag{Name: "topic", Value: "readings", Usage: "topic to produce to"},
			&cli.StringFlag{Name: "subject", Usage: "subject to register the schema under (default TOPIC-value, the TopicNameStrategy)"},
			&cli.IntFlag{Name: "count", Value: 1000, Usage: "records to produce; their ids are first … first+count-1"},
			&cli.IntFlag{Name: "first", Value: 1, Usage: "id of the first record"},
		},
		Action: func(c *cli.Context) error {
			subject := c.String("subject")
			if subject == "" {
				subject = c.String("topic") + "-value"
			}
			id, n, err := produceAvroRecords(c.Context, splitBrokers(c.String("brokers")), c.String("registry"), c.String("topic"), subject, c.Int("first"), c.Int("count"))
			if err != nil {
				return fmt.Errorf("avro-produce: %w", err)
			}
			fmt.Fprintf(c.App.Writer, "registered %s as schema id %d; produced %d Avro records to %s\n", subject, id, n, c.String("topic"))
			return nil
		},
	}}
}

// DemoAvroRecord is record id of avro-produce, as twmb/avro encodes it.
func DemoAvroRecord(id int, at time.Time) map[string]any {
	statuses := []string{"OK", "WARN", "FAIL"}
	r := map[string]any{
		"id":           int64(id),
		"device":       fmt.Sprintf("sensor-%02d", id%10),
		"temperature":  15 + float64(id%200)/10,
		"reading_time": at.Add(time.Duration(id) * time.Millisecond).UTC(),
		"day":          time.Date(2026, 1, 1+id%28, 0, 0, 0, 0, time.UTC),
		"price":        big.NewRat(int64(id)*125+99, 100),
		"status":       statuses[id%3],
		"tags":         []any{"demo", fmt.Sprintf("batch-%d", id/100)},
		"note":         nil,
	}
	if id%2 == 0 {
		r["note"] = fmt.Sprintf("even reading %d", id)
	}
	return r
}

// produceAvroRecords registers DemoAvroSchema under subject and produces
// count records to topic (produceRecords). It returns the schema id.
func produceAvroRecords(ctx context.Context, brokers []string, registryURL, topic, subject string, first, count int) (int, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	schema, err := avro.Parse(DemoAvroSchema)
	if err != nil {
		return 0, 0, err
	}
	rc, err := sr.NewClient(sr.URLs(registryURL))
	if err != nil {
		return 0, 0, err
	}
	ss, err := rc.CreateSchema(ctx, subject, sr.Schema{Schema: DemoAvroSchema, Type: sr.TypeAvro})
	if err != nil {
		return 0, 0, fmt.Errorf("register %s at %s: %w", subject, registryURL, err)
	}
	var hdr sr.ConfluentHeader
	now := time.Now()
	err = produceRecords(ctx, brokers, topic, first, count, func(id int) ([]byte, error) {
		v, err := hdr.AppendEncode(nil, ss.ID, nil)
		if err != nil {
			return nil, err
		}
		if v, err = schema.AppendEncode(v, DemoAvroRecord(id, now)); err != nil {
			return nil, fmt.Errorf("record %d: %w", id, err)
		}
		return v, nil
	})
	if err != nil {
		return 0, 0, err
	}
	return ss.ID, count, nil
}
