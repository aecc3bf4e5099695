// Package kafka is the redpanda Benthos input: Redpanda Connect's Kafka
// input, by the same name and with the same fields, built on franz-go, whose
// offsets advance only on records the pipeline acknowledged. The engine (the
// per-partition commit tracker, the group callbacks) is internal/kafkain;
// this package is the config spec and the thin BatchInput around it.
//
// It is registered by cmd/benthos-zerobus only: a Redpanda Connect build that
// imports plugin/zerobus has its own redpanda input and must not see a second
// one.
package kafka

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	// The spec-level lint rule is parsed when Spec is built (in init) and
	// calls Bloblang's parse_duration, which the pure bundle registers: it
	// must be initialised first, whatever binary embeds this input.
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/benthos-zerobus/benthos-zerobus/internal/kafkain"
	"github.com/benthos-zerobus/benthos-zerobus/internal/lintrule"
)

// Config field names, as Redpanda Connect's redpanda input spells them
// (https://docs.redpanda.com/redpanda-connect/components/inputs/redpanda/),
// plus this binary's own max_unacked_per_partition and max_unacked_bytes.
const (
	fSeedBrokers       = "seed_brokers"
	fClientID          = "client_id"
	fTLS               = "tls"
	fSASL              = "sasl"
	fSASLMechanism     = "mechanism"
	fSASLUsername      = "username"
	fSASLPassword      = "password"
	fSASLToken         = "token"
	fSASLExtensions    = "extensions"
	fMetadataMaxAge    = "metadata_max_age"
	fReqTimeoutOver    = "request_timeout_overhead"
	fConnIdleTimeout   = "conn_idle_timeout"
	fTCP               = "tcp"
	fTCPConnectTimeout = "connect_timeout"
	fTCPKeepAlive      = "keep_alive"
	fKAIdle            = "idle"
	fKAInterval        = "interval"
	fKACount           = "count"
	fTCPUserTimeout    = "tcp_user_timeout"
	fTopics            = "topics"
	fRegexpInclude     = "regexp_topics_include"
	fRegexpExclude     = "regexp_topics_exclude"
	fRackID            = "rack_id"
	fInstanceID        = "instance_id"
	fRebalanceTimeout  = "rebalance_timeout"
	fSessionTimeout    = "session_timeout"
	fHeartbeat         = "heartbeat_interval"
	fStartOffset       = "start_offset"
	fFetchMaxBytes     = "fetch_max_bytes"
	fFetchMaxWait      = "fetch_max_wait"
	fFetchMinBytes     = "fetch_min_bytes"
	fFetchMaxPartBytes = "fetch_max_partition_bytes"
	fIsolation         = "transaction_isolation_level"
	fConsumerGroup     = "consumer_group"
	fCommitPeriod      = "commit_period"
	fCommitOnAck       = "commit_on_ack"
	fPartBufferBytes   = "partition_buffer_bytes"
	fLagRefresh        = "topic_lag_refresh_period"
	fMaxYieldBytes     = "max_yield_batch_bytes"
	fPackRecords       = "pack_records"
	fAutoReplayNacks   = service.AutoRetryNacksToggleFieldName
	fMaxUnacked        = "max_unacked_per_partition"
	fMaxUnackedBytes   = "max_unacked_bytes"
)

// Start offsets.
const (
	StartEarliest  = "earliest"
	StartLatest    = "latest"
	StartCommitted = "committed"
)

// SASL mechanisms.
const (
	MechNone        = "none"
	MechPlain       = "PLAIN"
	MechScramSHA256 = "SCRAM-SHA-256"
	MechScramSHA512 = "SCRAM-SHA-512"
	MechOAuthBearer = "OAUTHBEARER"
)

// DefaultMaxUnacked is the default of max_unacked_per_partition.
const DefaultMaxUnacked = 16384

// DefaultMaxUnackedBytes is the default of max_unacked_bytes.
const DefaultMaxUnackedBytes = "16MiB"

// bytesRE is the shape humanize.ParseBytes reads ("1MB", "50MiB", "1B",
// "32KB", "1048576"), for lint.
const bytesRE = `^\\s*[0-9]+(\\.[0-9]+)?\\s*([kKmMgGtTpPeE][iI]?[bB]?|[bB])?\\s*$`

func bytesLint(field string) string {
	return `root = if !this.string().re_match("` + bytesRE + `") { [ "field ` + field + `: must be a size such as 1MB, 50MiB or 1B, got " + this.string().quote() ] } else { [] }`
}

// durationRanges are the bounds franz-go's client accepts for these
// durations (kgo's config validation); outside them it refuses to start.
var durationRanges = map[string][2]time.Duration{
	fMetadataMaxAge:   {10 * time.Millisecond, time.Hour},
	fReqTimeoutOver:   {100 * time.Millisecond, 15 * time.Minute},
	fConnIdleTimeout:  {100 * time.Millisecond, 15 * time.Minute},
	fRebalanceTimeout: {100 * time.Millisecond, math.MaxInt32 * time.Millisecond},
	fSessionTimeout:   {100 * time.Millisecond, math.MaxInt32 * time.Millisecond},
	fFetchMaxWait:     {10 * time.Millisecond, math.MaxInt32 * time.Millisecond},
}

func durationRangeLint(field string) string {
	r := durationRanges[field]
	return fmt.Sprintf(`root = if this.type() == "string" && (this.parse_duration().catch(-1) < %d || this.parse_duration().catch(-1) > %d) { [ "field %s: must be a duration between %s and %s, got " + this.quote() ] } else { [] }`,
		r[0].Nanoseconds(), r[1].Nanoseconds(), field, r[0], r[1])
}

// maxFetchBytes bounds fetch_max_bytes: franz-go reads responses of at most
// 1 GiB (BrokerMaxReadBytes), which is set to fit it.
const maxFetchBytes = 512 << 20

// enumLint names the field when a value is not one of opts (Benthos' own
// enum check gives only the line).
func enumLint(field string, opts ...string) string {
	return `root = if ![ "` + strings.Join(opts, `", "`) + `" ].contains(this) { [ "field ` + field + `: must be one of ` + strings.Join(opts, ", ") + `, got " + this.string().quote() ] } else { [] }`
}

func nonNegDurationLint(field string) string {
	return `root = if this.type() == "string" && this.parse_duration().catch(-1) < 0 { [ "field ` + field + `: must be a duration such as 0s, 10s or 5m, got " + this.quote() ] } else { [] }`
}

// specLint checks the rules across fields: where the topics come from, and
// that explicit partitions and consumer groups do not mix.
const specLint = `
let explicit = this.topics.or([]).map_each(t -> t.split(",")).flatten().any(t -> t.contains(":"))
let has_topics = this.topics.or([]).length() > 0
let has_regexp = this.regexp_topics_include.or([]).length() > 0
root = [
  if this.seed_brokers.or([]).length() == 0 { "field seed_brokers: at least one broker address is required" },
  if !$has_topics && !$has_regexp { "field topics: one of topics or regexp_topics_include is required" },
  if $has_topics && $has_regexp { "field regexp_topics_include: set either topics or regexp_topics_include, not both" },
  if this.regexp_topics_exclude.or([]).length() > 0 && !$has_regexp { "field regexp_topics_exclude: only applies with regexp_topics_include" },
  if $explicit && this.consumer_group.or("") != "" { "field consumer_group: consumer groups are not supported with explicit partitions in topics (topic:partition)" },
  if this.heartbeat_interval.or("3s").parse_duration().catch(0) * 3 >= this.session_timeout.or("1m").parse_duration().catch(0) { "field heartbeat_interval: must be less than a third of session_timeout" },
].filter(e -> e != null)
`

// Spec is the redpanda input's config spec.
func Spec() *service.ConfigSpec { return spec() }

// spec builds the spec once: its lint rules are Bloblang mappings, parsed
// when built, and every config parse (each test's too) asks for it. Nothing
// adds to the spec once built, so one instance serves every caller.
var spec = sync.OnceValue(newSpec)

func newSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Consumes topic data from one or more Kafka brokers (Redpanda Connect's `redpanda` input, same fields), committing a partition's offset only past records the pipeline acknowledged.").
		Description(`A Kafka consumer built on franz-go, with the configuration of Redpanda Connect's `+"`redpanda`"+` input: a config written for one moves to the other unchanged, except for the fields listed in docs/kafka.md as not supported here (lint refuses them, naming the field).

== Consumer groups

With `+"`consumer_group`"+`, the partitions of the topics are balanced across the group's members (franz-go's cooperative-sticky balancer) and offsets are committed under the group's name. Without it, every partition is consumed (or the explicit ones, `+"`topic:partition`"+`), from `+"`start_offset`"+` at every start, and nothing is committed.

== Delivery guarantees

A partition's offset is committed only past records that every output they went to acknowledged: per partition the commit is the offset after the longest run of acknowledged records from the last commit. Acknowledgements that arrive out of order wait for the ones below them. Commits are made every `+"`commit_period`"+` (and, with `+"`commit_on_ack: true`"+`, as soon as an acknowledgement moves a partition's durable offset), when partitions are revoked, and on shutdown.

The records fetched and not yet acknowledged, of every partition, are held within `+"`max_unacked_bytes`"+` (each counted as its key, value and headers plus 1 KiB), and the fetches are sized to what that budget has room for once decompressed. While a partition has `+"`max_unacked_per_partition`"+` records unacknowledged, or `+"`partition_buffer_bytes`"+` of records not yet handed to the pipeline, nothing more is polled (no partition is paused: a fetch that leaves a paused partition out can be held by the broker for `+"`fetch_max_wait`"+`). Past a bound the input waits for acknowledgements: that is its back-pressure, and it bounds its memory.

A nacked batch is handed out again, before anything newer of its partition, after a short back-off (`+"`auto_replay_nacks: true`"+`); with `+"`auto_replay_nacks: false`"+` it is dropped and counts as delivered, as in Redpanda Connect. Several batches of one partition may be in flight at once, so after a nack the batch redelivered may land after newer records of its partition that were acknowledged.

When the group revokes a partition, it is no longer handed out, the input waits up to four fifths of `+"`rebalance_timeout`"+` for the acknowledgements of its records in flight, commits what is durable and only then lets it go. Records still unacknowledged are not committed: the next owner consumes them again (duplicates, never a loss), and their late acknowledgements commit nothing. Partitions lost to a group error are let go without a commit.

On shutdown the engine stops reading, waits for the pipeline to drain (the acknowledgements of every batch in flight, within the shutdown timeout), then the input commits what is durable and leaves the group.

== Metrics

The gauge `+"`redpanda_lag`"+` (labels `+"`topic`, `partition`"+`) is each owned partition's end offset less its oldest unacknowledged offset, refreshed every `+"`topic_lag_refresh_period`"+`. It grows while the output refuses writes. With a `+"`consumer_group`"+`, the gauge `+"`redpanda_commit_age_seconds`"+` (same labels; this binary's own) is how long the partition has had records above its committed offset without the commit moving, refreshed with the lag; 0 once the commit reaches the end.

== Metadata

Each message carries `+"`kafka_key`, `kafka_topic`, `kafka_partition`, `kafka_offset`, `kafka_lag`, `kafka_timestamp_ms`, `kafka_timestamp_unix`, `kafka_tombstone_message`"+` and every record header. For the zerobus output's coverage, use `+"`coverage.source: ${! @kafka_topic }/${! @kafka_partition }`"+` and `+"`coverage.offset: ${! @kafka_offset }`"+`.`).
		Fields(
			service.NewStringListField(fSeedBrokers).
				Description("A list of broker addresses to connect to in order. Use commas to separate multiple addresses in a single list item.").
				Example([]string{"localhost:9092"}).Example([]string{"foo:9092", "bar:9092"}).Example([]string{"foo:9092,bar:9092"}).
				Optional(),
			service.NewStringField(fClientID).
				Description("An identifier for the client connection.").
				Default("redpanda-connect").Advanced(),
			service.NewTLSToggledField(fTLS).Advanced(),
			service.NewObjectListField(fSASL,
				service.NewStringAnnotatedEnumField(fSASLMechanism, map[string]string{
					MechNone:        "Disable SASL authentication.",
					MechPlain:       "Plain text authentication.",
					MechScramSHA256: "SCRAM based authentication as specified in RFC5802.",
					MechScramSHA512: "SCRAM based authentication as specified in RFC5802.",
					MechOAuthBearer: "OAuth Bearer based authentication.",
				}).Description("The SASL mechanism to use. (Redpanda Connect's AWS_MSK_IAM is not supported here.)").
					LintRule(enumLint(fSASL+"[]."+fSASLMechanism, MechNone, MechPlain, MechScramSHA256, MechScramSHA512, MechOAuthBearer)),
				service.NewStringField(fSASLUsername).Description("A username to provide for PLAIN or SCRAM-* authentication.").Default(""),
				service.NewStringField(fSASLPassword).Description("A password to provide for PLAIN or SCRAM-* authentication.").Secret().Default(""),
				service.NewStringField(fSASLToken).Description("The token to use for a single session's OAUTHBEARER authentication.").Secret().Default(""),
				service.NewStringMapField(fSASLExtensions).Description("Key/value pairs to add to OAUTHBEARER authentication requests.").Optional(),
			).Description("Specify one or more methods or mechanisms of SASL authentication. They are tried in order. If the broker supports the first SASL mechanism, all connections use it. If the first mechanism fails, the client picks the first supported mechanism. If the broker does not support any client mechanisms, all connections fail.").
				Example([]any{map[string]any{"mechanism": "SCRAM-SHA-512", "username": "foo", "password": "bar"}}).
				Optional().Advanced(),
			service.NewDurationField(fMetadataMaxAge).
				Description("The maximum period of time after which metadata is refreshed.").
				Default("1m").LintRule(durationRangeLint(fMetadataMaxAge)).Advanced(),
			service.NewDurationField(fReqTimeoutOver).
				Description("Grants an additional buffer or overhead to requests that have timeout fields defined. This field is based on the behavior of Apache Kafka's `request.timeout.ms` parameter.").
				Default("10s").LintRule(durationRangeLint(fReqTimeoutOver)).Advanced(),
			service.NewDurationField(fConnIdleTimeout).
				Description("The maximum duration that connections can remain idle before they are automatically closed.").
				Default("20s").LintRule(durationRangeLint(fConnIdleTimeout)).Advanced(),
			service.NewObjectField(fTCP,
				service.NewDurationField(fTCPConnectTimeout).Description("Maximum time to establish a TCP connection; 0s means the default of 10s.").
					Default("0s").LintRule(nonNegDurationLint(fTCP+"."+fTCPConnectTimeout)),
				service.NewObjectField(fTCPKeepAlive,
					service.NewDurationField(fKAIdle).Description("Idle time before the first keep-alive probe.").Default("15s").LintRule(nonNegDurationLint(fTCP+"."+fTCPKeepAlive+"."+fKAIdle)),
					service.NewDurationField(fKAInterval).Description("Time between keep-alive probes.").Default("15s").LintRule(nonNegDurationLint(fTCP+"."+fTCPKeepAlive+"."+fKAInterval)),
					service.NewIntField(fKACount).Description("Unanswered keep-alive probes before the connection is closed.").Default(9).LintRule(lintrule.AtLeast(fTCP+"."+fTCPKeepAlive+"."+fKACount, 0)),
				).Description("TCP keep-alive probes."),
				service.NewDurationField(fTCPUserTimeout).Description("On Linux, how long transmitted data may stay unacknowledged before the connection is closed (TCP_USER_TIMEOUT); 0s leaves the system default. Ignored elsewhere.").
					Default("0s").LintRule(nonNegDurationLint(fTCP+"."+fTCPUserTimeout)),
			).Description("TCP socket settings of the connections to the brokers.").Advanced(),
			service.NewStringListField(fTopics).
				Description("A list of topics to consume from. Use commas to separate multiple topics in a single element.\n\nWhen a `consumer_group` is specified, partitions are automatically distributed across consumers of a topic. Otherwise, all partitions are consumed.\n\nAlternatively, you can specify explicit partitions to consume by using a colon after the topic name: `foo:0` consumes partition `0` of the topic foo, and `foo:0-10` partitions 0 through 10 inclusive. An explicit offset to start from follows another colon: `foo:0:10` consumes partition 0 of foo from offset 10; without one, `start_offset` applies.").
				Example([]string{"foo", "bar"}).Example([]string{"foo,bar"}).Example([]string{"foo:0", "bar:1", "bar:3"}).Example([]string{"foo:0,bar:1,bar:3"}).Example([]string{"foo:0-5"}).
				Optional(),
			service.NewStringListField(fRegexpInclude).
				Description("Regular expressions of the topics to consume; every topic matching one is consumed (and topics created later that match are picked up at the next metadata refresh).").
				Example([]string{"logs_.*"}).Optional(),
			service.NewStringListField(fRegexpExclude).
				Description("Regular expressions of topics to leave out of those `regexp_topics_include` matches.").
				Example([]string{"logs_internal_.*"}).Optional(),
			service.NewStringField(fRackID).
				Description("A rack specifies where the client is physically located, and changes fetch requests to consume from the closest replica as opposed to the leader replica.").
				Default("").Advanced(),
			service.NewStringField(fInstanceID).
				Description("With a `consumer_group`, a unique value here makes the member static (KIP-345), which avoids rebalances on reconnections. A static member does not leave the group when it stops; its partitions wait for it until `session_timeout`.").
				Default("").Advanced(),
			service.NewDurationField(fRebalanceTimeout).
				Description("With a `consumer_group`, how long every member has to finish its work and commit once a rebalance has begun. A revoked partition waits up to four fifths of it for its in-flight records' acknowledgements.").
				Default("45s").LintRule(durationRangeLint(fRebalanceTimeout)).Advanced(),
			service.NewDurationField(fSessionTimeout).
				Description("With a `consumer_group`, the longest time between heartbeats before the broker removes the member from the group and rebalances.").
				Default("1m").LintRule(durationRangeLint(fSessionTimeout)).Advanced(),
			service.NewDurationField(fHeartbeat).
				Description("With a `consumer_group`, how often the member heartbeats; less than a third of `session_timeout`.").
				Default("3s").LintRule(lintrule.Duration(fHeartbeat)).Advanced(),
			service.NewStringAnnotatedEnumField(fStartOffset, map[string]string{
				StartEarliest:  "Start from the earliest offset. Corresponds to Kafka's `auto.offset.reset=earliest` option.",
				StartLatest:    "Start from the latest offset. Corresponds to Kafka's `auto.offset.reset=latest` option.",
				StartCommitted: "Prevents consuming a partition in a group if the partition has no prior commits. Corresponds to Kafka's `auto.offset.reset=none` option.",
			}).Description("Where a partition without a committed offset starts, and where one restarts after an `OffsetOutOfRange` error on a fetch.").
				Default(StartEarliest).LintRule(enumLint(fStartOffset, StartEarliest, StartLatest, StartCommitted)).Advanced(),
			service.NewStringField(fFetchMaxBytes).
				Description("The maximum number of bytes that a broker tries to send during a fetch. Records larger than this are still sent.").
				Default("50MiB").LintRule(bytesLint(fFetchMaxBytes)).Advanced(),
			service.NewDurationField(fFetchMaxWait).
				Description("The maximum period of time a broker can wait for a fetch response to reach `fetch_min_bytes`.").
				Default("5s").LintRule(durationRangeLint(fFetchMaxWait)).Advanced(),
			service.NewStringField(fFetchMinBytes).
				Description("The minimum number of bytes that a broker tries to send during a fetch (Java's `fetch.min.bytes`).").
				Default("1B").LintRule(bytesLint(fFetchMinBytes)).Advanced(),
			service.NewStringField(fFetchMaxPartBytes).
				Description("The maximum number of bytes consumed from one partition in a fetch (Java's `max.partition.fetch.bytes`). A larger batch is still sent, so that the client can make progress.").
				Default("1MiB").LintRule(bytesLint(fFetchMaxPartBytes)).Advanced(),
			service.NewStringAnnotatedEnumField(fIsolation, map[string]string{
				"read_uncommitted": "Uncommitted transactional records are processed too.",
				"read_committed":   "Only committed transactional records are processed.",
			}).Description("The isolation level for transactional records.").
				Default("read_uncommitted").LintRule(enumLint(fIsolation, "read_uncommitted", "read_committed")),
			service.NewStringField(fConsumerGroup).
				Description("An optional consumer group. With one, the partitions of the `topics` are distributed across the consumers sharing it, and offsets are committed and resumed under its name. Not supported with explicit partitions in `topics`.").
				Optional(),
			service.NewDurationField(fCommitPeriod).
				Description("The period between commits of the durable offsets (what every record below has been acknowledged). Offsets are also committed when partitions are revoked and at shutdown.").
				Default("5s").LintRule(lintrule.Duration(fCommitPeriod)).Advanced(),
			service.NewBoolField(fCommitOnAck).
				Description("Also commit as soon as an acknowledgement moves a partition's durable offset, one commit at a time (acknowledgements that arrive during a commit are covered by the next), besides every `"+fCommitPeriod+"`. After a crash fewer records are read again: with `kill -9` three times during 300,000 records, 11,484 duplicates against 188,145 at `commit_period: 5s` and 126,502 at `1s`. It sends up to one commit per acknowledged batch to the group coordinator: the pipeline's CPU was unchanged and the broker's rose by about a third (docs/performance.md). This binary's own field: Redpanda Connect's input has none. Off by default, as the broker's load is the user's call.").
				Default(false).Advanced(),
			service.NewStringField(fPartBufferBytes).
				Description("How many bytes of records of one partition may wait, fetched, to be handed to the pipeline; while one partition holds this much, the input takes no more records from the client (a poll may pass it by a little).").
				Default("1MB").LintRule(bytesLint(fPartBufferBytes)).Advanced(),
			service.NewDurationField(fLagRefresh).
				Description("The period between refreshes of the `redpanda_lag` and `redpanda_commit_age_seconds` metrics (one ListOffsets request per refresh).").
				Default("5s").LintRule(lintrule.Duration(fLagRefresh)).Advanced(),
			service.NewStringField(fMaxYieldBytes).
				Description("The maximum size of each batch this input yields (records of one partition; a larger record goes alone).").
				Default("32KB").LintRule(bytesLint(fMaxYieldBytes)).Advanced(),
			service.NewBoolField(fPackRecords).
				Description("This binary's own (Redpanda Connect has no such field): hand each batch (the records of one partition, up to `"+fMaxYieldBytes+"`) to the pipeline as one message carrying its records, a record pack, instead of a message per record. The `zerobus` output reads the records of a pack as rows without a message per record: the engine's per-message work (a transaction, a tracing span, the batcher's step, the metadata of each record) is done once per pack, which is most of the pipeline's CPU with small records (docs/performance.md). Only for a `zerobus` output with no `processors` in between: anything else sees a placeholder, and the output fails a pack whose message a processor changed. A pack message's metadata is `kafka_topic`, `kafka_partition` and `kafka_pack_records` (its record count); the output builds each record's message, with the usual metadata, only where it needs one (an interpolated `table`, `ordering_key` or `coverage`). Batching counts a pack as one message of its records' bytes. Acknowledgements and replays are per batch either way.").
				Default(false).Advanced(),
			service.NewIntField(fMaxUnacked).
				Description("This binary's own (Redpanda Connect has no such field): how many records of one partition may be fetched and not yet acknowledged before the input stops polling until acknowledgements take it below, so that one partition cannot take the whole of `max_unacked_bytes`. One poll may take a partition past it (the bound is this plus one poll, itself within `max_unacked_bytes`); the rest of a fetch stays in franz-go's buffer. No partition is paused: a fetch that leaves a paused partition out is held by the broker for up to `fetch_max_wait` when the others are caught up, which stalled consuming. At the default `max_unacked_bytes` (16MiB, more than 1 KiB a record) the default, 16384, is never reached.").
				Default(DefaultMaxUnacked).LintRule(lintrule.AtLeast(fMaxUnacked, 1)).Advanced(),
			service.NewStringField(fMaxUnackedBytes).
				Description("This binary's own (Redpanda Connect has no such field): a memory budget for the records of every partition fetched and not yet acknowledged, each counted as its key, value and header bytes plus 1 KiB for its own structures (the franz-go record, and the message the engine builds from it; 256 B with `pack_records`, which builds no message per record). The input takes a poll of records only while they fit at the largest record size seen (a record larger than the whole budget goes alone), and asks brokers for fetches no larger than the budget has room for once decompressed (at the compression ratio seen so far; `fetch_max_bytes` and `fetch_max_partition_bytes` remain the upper bounds). Every message in the pipeline comes from such a record, so it also bounds the messages the output holds. At most about the budget ÷ (row size + 1 KiB) rows are in flight. The default, 16MiB, holds about 13,000 rows of 200 B, more than three of the zerobus output's default batches of 4,000, so that the input keeps reading while a batch waits for its acknowledgement; with the zerobus output at its defaults the binary then peaks at about 160 MiB with 200 B records (143–164 MiB measured, docs/kafka.md), against 123–133 MiB at 8MiB. A service that acknowledges slowly needs more rows in flight: raise the budget by about (row size + 1 KiB) per row; each MiB costs about 2 MiB of resident memory.").
				Default(DefaultMaxUnackedBytes).LintRule(bytesLint(fMaxUnackedBytes)).Advanced(),
			service.NewAutoRetryNacksToggleField(),
		).
		LintRule(specLint).
		Example("Consumer group into Delta", "Consume a topic as a group and record each partition's durable offsets as coverage in the zerobus output.", `
input:
  redpanda:
    seed_brokers: [ "localhost:9092" ]
    topics: [ "orders" ]
    consumer_group: orders-to-delta
output:
  zerobus:
    endpoint: http://127.0.0.1:50051
    workspace_url: http://127.0.0.1:8080
    table: main.raw.orders
    coverage:
      source: ${! @kafka_topic }/${! @kafka_partition }
      offset: ${! @kafka_offset }
`)
}

// Config is the parsed input configuration: the consumer's, and what the
// input logs.
type Config struct {
	Consumer    kafkain.Config
	StartOffset string
	Isolation   string
	TLSEnabled  bool
	SkipVerify  bool
	SASLMechs   []string
	UserTimeout time.Duration
	// PackRecords hands each batch out as one record pack
	// (kafkamsg.Pack) instead of a message per record.
	PackRecords bool
}

// ParseConfig reads and checks the configuration; every error names its
// field.
func ParseConfig(conf *service.ParsedConfig) (Config, error) {
	var c Config
	k := &c.Consumer
	var err error
	fail := func(field string, e error) error { return fmt.Errorf("field %s: %w", field, e) }

	brokers, err := conf.FieldStringList(fSeedBrokers)
	if err != nil && conf.Contains(fSeedBrokers) {
		return c, fail(fSeedBrokers, err)
	}
	for _, b := range brokers {
		for _, s := range strings.Split(b, ",") {
			if s = strings.TrimSpace(s); s != "" {
				k.SeedBrokers = append(k.SeedBrokers, s)
			}
		}
	}
	if len(k.SeedBrokers) == 0 {
		return c, fail(fSeedBrokers, fmt.Errorf("at least one broker address is required"))
	}
	if k.ClientID, err = conf.FieldString(fClientID); err != nil {
		return c, fail(fClientID, err)
	}
	tlsConf, tlsOn, err := conf.FieldTLSToggled(fTLS)
	if err != nil {
		return c, fail(fTLS, err)
	}
	if tlsOn {
		k.TLS = tlsConf
		c.TLSEnabled, c.SkipVerify = true, tlsConf.InsecureSkipVerify
	}
	if k.SASL, c.SASLMechs, k.SASLUsers, err = parseSASL(conf); err != nil {
		return c, err
	}
	durs := []struct {
		path []string
		dst  *time.Duration
	}{
		{[]string{fMetadataMaxAge}, &k.MetadataMaxAge},
		{[]string{fReqTimeoutOver}, &k.RequestTimeoutOverhead},
		{[]string{fConnIdleTimeout}, &k.ConnIdleTimeout},
		{[]string{fTCP, fTCPConnectTimeout}, &k.Dial.ConnectTimeout},
		{[]string{fTCP, fTCPKeepAlive, fKAIdle}, &k.Dial.KeepAliveIdle},
		{[]string{fTCP, fTCPKeepAlive, fKAInterval}, &k.Dial.KeepAliveInterval},
		{[]string{fTCP, fTCPUserTimeout}, &k.Dial.UserTimeout},
		{[]string{fRebalanceTimeout}, &k.RebalanceTimeout},
		{[]string{fSessionTimeout}, &k.SessionTimeout},
		{[]string{fHeartbeat}, &k.HeartbeatInterval},
		{[]string{fFetchMaxWait}, &k.FetchMaxWait},
		{[]string{fCommitPeriod}, &k.CommitPeriod},
		{[]string{fLagRefresh}, &k.LagRefreshPeriod},
	}
	for _, d := range durs {
		if *d.dst, err = conf.FieldDuration(d.path...); err != nil {
			return c, fail(strings.Join(d.path, "."), err)
		}
		if *d.dst < 0 {
			return c, fail(strings.Join(d.path, "."), fmt.Errorf("must not be negative, got %s", *d.dst))
		}
	}
	for _, f := range []string{fMetadataMaxAge, fReqTimeoutOver, fConnIdleTimeout, fRebalanceTimeout, fSessionTimeout, fHeartbeat, fFetchMaxWait, fCommitPeriod, fLagRefresh} {
		d, _ := conf.FieldDuration(f)
		if d <= 0 {
			return c, fail(f, fmt.Errorf("must be a positive duration, got %s", d))
		}
		if r, ok := durationRanges[f]; ok && (d < r[0] || d > r[1]) {
			return c, fail(f, fmt.Errorf("must be a duration between %s and %s, got %s", r[0], r[1], d))
		}
	}
	if k.HeartbeatInterval*3 >= k.SessionTimeout {
		return c, fail(fHeartbeat, fmt.Errorf("must be less than a third of %s (%s), got %s", fSessionTimeout, k.SessionTimeout, k.HeartbeatInterval))
	}
	if k.Dial.KeepAliveCount, err = conf.FieldInt(fTCP, fTCPKeepAlive, fKACount); err != nil || k.Dial.KeepAliveCount < 0 {
		return c, fail(fTCP+"."+fTCPKeepAlive+"."+fKACount, fmt.Errorf("must be at least 0"))
	}
	var fetchMax, fetchMin, fetchPart, partBuf, yield, unackedBytes int
	sizes := []struct {
		field string
		dst   *int
	}{
		{fFetchMaxBytes, &fetchMax}, {fFetchMinBytes, &fetchMin}, {fFetchMaxPartBytes, &fetchPart},
		{fPartBufferBytes, &partBuf}, {fMaxYieldBytes, &yield}, {fMaxUnackedBytes, &unackedBytes},
	}
	for _, s := range sizes {
		if *s.dst, err = byteSize(conf, s.field); err != nil {
			return c, err
		}
	}
	if fetchMax > maxFetchBytes {
		return c, fail(fFetchMaxBytes, fmt.Errorf("must be at most 512MiB, got %d bytes", fetchMax))
	}
	k.FetchMaxBytes, k.FetchMinBytes, k.FetchMaxPartitionBytes = int32(fetchMax), int32(fetchMin), int32(fetchPart)

	if c.StartOffset, err = conf.FieldString(fStartOffset); err != nil {
		return c, fail(fStartOffset, err)
	}
	switch c.StartOffset {
	case StartEarliest:
		k.StartOffset = kgo.NewOffset().AtStart()
	case StartLatest:
		k.StartOffset = kgo.NewOffset().AtEnd()
	case StartCommitted:
		k.StartOffset = kgo.NoResetOffset()
	default:
		return c, fail(fStartOffset, fmt.Errorf("must be one of earliest, latest, committed; got %q", c.StartOffset))
	}
	if c.Isolation, err = conf.FieldString(fIsolation); err != nil {
		return c, fail(fIsolation, err)
	}
	k.ReadCommitted = c.Isolation == "read_committed"

	if conf.Contains(fConsumerGroup) {
		if k.Group, err = conf.FieldString(fConsumerGroup); err != nil {
			return c, fail(fConsumerGroup, err)
		}
	}
	if k.InstanceID, err = conf.FieldString(fInstanceID); err != nil {
		return c, fail(fInstanceID, err)
	}
	if k.RackID, err = conf.FieldString(fRackID); err != nil {
		return c, fail(fRackID, err)
	}
	if err := parseTopics(conf, k); err != nil {
		return c, err
	}

	maxUnacked, err := conf.FieldInt(fMaxUnacked)
	if err != nil || maxUnacked < 1 {
		return c, fail(fMaxUnacked, fmt.Errorf("must be at least 1, got %d", maxUnacked))
	}
	replay, err := conf.FieldBool(fAutoReplayNacks)
	if err != nil {
		return c, fail(fAutoReplayNacks, err)
	}
	if k.CommitOnAck, err = conf.FieldBool(fCommitOnAck); err != nil {
		return c, fail(fCommitOnAck, err)
	}
	k.Limits = kafkain.Limits{
		MaxUnacked: maxUnacked, BufferBytes: partBuf, MaxUnackedBytes: unackedBytes, YieldBytes: yield, Replay: replay,
		ReplayBackoff: 100 * time.Millisecond, MaxReplayBackoff: 5 * time.Second,
	}
	if c.PackRecords, err = conf.FieldBool(fPackRecords); err != nil {
		return c, fail(fPackRecords, err)
	}
	if c.PackRecords {
		// No message per record: a record in flight costs less.
		k.Limits.Overhead = kafkain.PackedRecordOverhead
	}
	return c, nil
}

func byteSize(conf *service.ParsedConfig, field string) (int, error) {
	s, err := conf.FieldString(field)
	if err != nil {
		return 0, fmt.Errorf("field %s: %w", field, err)
	}
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("field %s: must be a size such as 1MB, 50MiB or 1B, got %q", field, s)
	}
	if n < 1 || n > 1<<31-1 {
		return 0, fmt.Errorf("field %s: must be between 1B and 2GiB, got %q", field, s)
	}
	return int(n), nil
}

// parseTopics reads topics (plain, or explicit partitions with optional
// offsets) and the regexp fields.
func parseTopics(conf *service.ParsedConfig, k *kafkain.Config) error {
	var topics, include, exclude []string
	split := func(field string, dst *[]string) error {
		if !conf.Contains(field) {
			return nil
		}
		l, err := conf.FieldStringList(field)
		if err != nil {
			return fmt.Errorf("field %s: %w", field, err)
		}
		for _, e := range l {
			for _, s := range strings.Split(e, ",") {
				if s = strings.TrimSpace(s); s != "" {
					*dst = append(*dst, s)
				}
			}
		}
		return nil
	}
	if err := split(fTopics, &topics); err != nil {
		return err
	}
	if err := split(fRegexpInclude, &include); err != nil {
		return err
	}
	if err := split(fRegexpExclude, &exclude); err != nil {
		return err
	}
	switch {
	case len(topics) == 0 && len(include) == 0:
		return fmt.Errorf("field %s: one of %s or %s is required", fTopics, fTopics, fRegexpInclude)
	case len(topics) > 0 && len(include) > 0:
		return fmt.Errorf("field %s: set either %s or %s, not both", fRegexpInclude, fTopics, fRegexpInclude)
	case len(exclude) > 0 && len(include) == 0:
		return fmt.Errorf("field %s: only applies with %s", fRegexpExclude, fRegexpInclude)
	case len(include) > 0:
		k.Topics, k.Regex, k.Exclude = include, true, exclude
		return nil
	}
	explicit := map[string]map[int32]kgo.Offset{}
	var plain []string
	for _, t := range topics {
		parts := strings.Split(t, ":")
		if len(parts) == 1 {
			plain = append(plain, t)
			continue
		}
		if len(parts) > 3 || parts[0] == "" {
			return fmt.Errorf("field %s: %q is not topic, topic:partition or topic:partition:offset", fTopics, t)
		}
		lo, hi, err := partitionRange(parts[1])
		if err != nil {
			return fmt.Errorf("field %s: %q: %w", fTopics, t, err)
		}
		off := k.StartOffset
		if len(parts) == 3 {
			o, err := strconv.ParseInt(parts[2], 10, 64)
			if err != nil || o < 0 {
				return fmt.Errorf("field %s: %q: the offset must be a non-negative integer", fTopics, t)
			}
			off = kgo.NewOffset().At(o)
		}
		if explicit[parts[0]] == nil {
			explicit[parts[0]] = map[int32]kgo.Offset{}
		}
		for p := lo; p <= hi; p++ {
			explicit[parts[0]][p] = off
		}
	}
	if len(explicit) > 0 {
		if len(plain) > 0 {
			return fmt.Errorf("field %s: explicit partitions (topic:partition) and whole topics (%v) cannot be mixed", fTopics, plain)
		}
		if k.Group != "" {
			return fmt.Errorf("field %s: consumer groups are not supported with explicit partitions in %s", fConsumerGroup, fTopics)
		}
		k.Partitions = explicit
		return nil
	}
	k.Topics = plain
	return nil
}

func partitionRange(s string) (lo, hi int32, err error) {
	a, b, isRange := strings.Cut(s, "-")
	l, err1 := strconv.ParseInt(a, 10, 32)
	h := l
	var err2 error
	if isRange {
		h, err2 = strconv.ParseInt(b, 10, 32)
	}
	if err1 != nil || err2 != nil || l < 0 || h < l {
		return 0, 0, fmt.Errorf("the partition must be N or N-M with 0 <= N <= M, got %q", s)
	}
	return int32(l), int32(h), nil
}

// parseSASL builds the SASL mechanisms, in order, with their names and
// users (for the logs; never the passwords).
func parseSASL(conf *service.ParsedConfig) (mechs []sasl.Mechanism, names, users []string, err error) {
	if !conf.Contains(fSASL) {
		return nil, nil, nil, nil
	}
	list, err := conf.FieldObjectList(fSASL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("field %s: %w", fSASL, err)
	}
	for i, m := range list {
		field := fmt.Sprintf("%s[%d]", fSASL, i)
		mech, err := m.FieldString(fSASLMechanism)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("field %s.%s: %w", field, fSASLMechanism, err)
		}
		user, _ := m.FieldString(fSASLUsername)
		pass, _ := m.FieldString(fSASLPassword)
		token, _ := m.FieldString(fSASLToken)
		var ext map[string]string
		if m.Contains(fSASLExtensions) {
			ext, _ = m.FieldStringMap(fSASLExtensions)
		}
		switch mech {
		case MechNone:
			continue
		case MechPlain:
			mechs = append(mechs, plain.Auth{User: user, Pass: pass}.AsMechanism())
		case MechScramSHA256:
			mechs = append(mechs, scram.Auth{User: user, Pass: pass}.AsSha256Mechanism())
		case MechScramSHA512:
			mechs = append(mechs, scram.Auth{User: user, Pass: pass}.AsSha512Mechanism())
		case MechOAuthBearer:
			mechs = append(mechs, oauth.Auth{Token: token, Extensions: ext}.AsMechanism())
		default:
			return nil, nil, nil, fmt.Errorf("field %s.%s: unsupported mechanism %q (supported: none, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)", field, fSASLMechanism, mech)
		}
		names = append(names, mech)
		users = append(users, user)
	}
	return mechs, names, users, nil
}
