package zerobus

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/tablewriter"
)

// Config field names. Kept as constants so that error messages and the
// start-up log name exactly what the user wrote.
const (
	fEndpoint      = "endpoint"
	fWorkspaceURL  = "workspace_url"
	fWorkspaceID   = "workspace_id"
	fTable         = "table"
	fClientID      = "client_id"
	fClientSecret  = "client_secret"
	fBatching      = "batching"
	fMaxInFlightB  = "max_in_flight_bytes"
	fStreams       = "streams"
	fStreamsMin    = "min"
	fStreamsMax    = "max"
	fPerStreamMBps = "per_stream_mb_per_sec"
	fPeakMBps      = "peak_mb_per_sec"
	fOrderingKey   = "ordering_key"
	fAck           = "ack"
	fAckCapacity   = "channel_capacity"
	fAckTimeout    = "timeout"
	fCompression   = "compression"
	fReconcile     = "reconcile"
	fNestedToStr   = "nested_to_string"
	fEpochUnit     = "timestamp_epoch_unit"
	fNTZFromZoned  = "timestamp_ntz_from_zoned"
	fCloseTimeout  = "close_timeout"
	fCatalog       = "catalog"
	fProvision     = "provision"
	fWarehouseID   = "warehouse_id"
	fWiden         = "widen"
	fCommentsPol   = "comments_policy"
	fContract      = "contract"
	fColumnDescs   = "column_descriptions"
	fRole          = "role"
	fRecheck       = "recheck_interval"
)

// Environment variables the credentials fall back to, named as the
// databricks-sdk-go unified auth names them.
const (
	EnvClientID     = "DATABRICKS_CLIENT_ID"
	EnvClientSecret = "DATABRICKS_CLIENT_SECRET"
	EnvWarehouseID  = "DATABRICKS_WAREHOUSE_ID"
)

// Role values.
const (
	RoleDerived    = "derived"
	RolePrimaryRaw = "primary_raw"
)

// Default batching applied when the `batching` field is absent: a count
// bounded by a period, so a partially filled batch (for example redelivered
// rows) is flushed within a second instead of parking until shutdown.
const (
	defaultBatchCount  = 1000
	defaultBatchPeriod = "1s"
)

// tableNamePattern is the table-name rule (a Bloblang/RE2 pattern): Zerobus
// takes catalog, schema and table names of ASCII letters, digits and
// underscores (shared/spec/zerobus-wire.md, "Published limits").
const tableNamePattern = `^[A-Za-z0-9_]+\\.[A-Za-z0-9_]+\\.[A-Za-z0-9_]+$`

// urlLint is the lint rule of a URL field: https, or http for a loopback
// host only, so a credential never crosses a network in the clear.
func urlLint(field string) string {
	return `root = match this.parse_url().catch(null) {
  this == null => [ "field ` + field + `: not a URL" ],
  this.host.or("") == "" => [ "field ` + field + `: has no host; want https://host[:port]" ],
  this.scheme == "https" => [],
  this.scheme == "http" && this.host.re_match("^(?i)(localhost|127\\.[0-9.]+|\\[::1\\])(:[0-9]+)?$") => [],
  this.scheme == "http" => [ "field ` + field + `: plaintext http:// is only allowed for a loopback host (the emulator), got " + this.host + "; use https://" ],
  _ => [ "field ` + field + `: scheme must be https (or http for a loopback host), got " + this.scheme.or("").quote() ],
}`
}

// durationLint is the lint rule of a positive duration field.
func durationLint(field string) string {
	return `root = if this.type() == "string" && this.parse_duration().catch(-1) <= 0 { [ "field ` + field + `: must be a positive duration such as 30s or 5m, got " + this.quote() ] } else { [] }`
}

// warehouseLint is the lint rule of the catalog block: provisioning runs DDL
// on a SQL warehouse, so it needs warehouse_id, unless the environment the
// spec is built in (the lint run's) has DATABRICKS_WAREHOUSE_ID.
func warehouseLint() string {
	if os.Getenv(EnvWarehouseID) != "" {
		return `root = []`
	}
	return `root = if this.provision.or(false) && this.warehouse_id.or("") == "" { [ "field ` + fCatalog + "." + fWarehouseID + `: required when ` + fCatalog + "." + fProvision + ` is true (or set ` + EnvWarehouseID + `)" ] } else { [] }`
}

// atLeast is the lint rule of a number field with a lower bound.
func atLeast(field string, lo int) string {
	return fmt.Sprintf(`root = if this < %d { [ "field %s: must be at least %d, got %%v".format(this) ] } else { [] }`, lo, field, lo)
}

// Spec returns the configuration spec of the zerobus output.
func Spec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Streams message batches into a Databricks Unity Catalog managed Delta table through the Zerobus ingest service, as Apache Arrow over Arrow Flight.").
		Description(`
Each message is a JSON object whose fields are the table's columns. The target schema always comes from
describing the table in Unity Catalog (`+"`GET /api/2.1/unity-catalog/tables/{name}`"+`), so the Arrow
record batches match what the service expects.

== Delivery guarantees

A batch is acknowledged upstream (the input commits) only after the Zerobus service has confirmed every
row of it durable. Submission is fire-and-forget onto a small pool of long-lived streams; each stream's
acknowledgement lane waits once for a burst of pending batches and confirms them together, so many
batches (up to `+"`max_in_flight`"+`) are in flight at once without a per-batch round trip. A batch that
cannot be confirmed (shutdown, stream failure, timeout) is nacked and redelivered: delivery is
at-least-once.

== Row-level errors

A message that cannot be converted to the table's schema (an unknown field, a missing NOT NULL
column, a value out of range, a nested value landing in a STRING column without
`+"`reconcile.nested_to_string`"+`, a zoned timestamp into TIMESTAMP_NTZ) fails only itself: the output
returns a batch error naming the message index and the column, while the other rows are written and
durable before the batch returns. Wrap the output in a `+"`fallback`"+` to route failed rows to a
dead-letter queue with the reason in the `+"`fallback_error`"+` metadata. For a row-level dead-letter queue
batch at the input and set `+"`batching.count: 0`"+` here: the engine's output batcher reduces a per-row error
to one error for each upstream batch, which would route whole batches (good rows included, already
written) to the fallback.

== Credentials

OAuth machine-to-machine: `+"`client_id`"+` and `+"`client_secret`"+` of a service principal with USE CATALOG,
USE SCHEMA and SELECT + MODIFY granted explicitly on the table. When left empty they are read from the
`+"`DATABRICKS_CLIENT_ID`"+` and `+"`DATABRICKS_CLIENT_SECRET`"+` environment variables. The same principal
authenticates to the workspace (Unity Catalog, SQL warehouse) for describing and provisioning the table.

== TLS

`+"`https://`"+` endpoints always use TLS. Plain `+"`http://`"+` is accepted only for loopback hosts (the local
emulator started with `+"`zerobus-emulator`"+`).

== Metrics

Besides the engine's `+"`output_*`"+` metrics, the output emits, labelled `+"`{table, stream}`"+`:
`+"`zerobus_ack_coalesce_ratio`"+` (gauge: size of the last acknowledgement burst; > 1 under load means
batches are pipelined), `+"`zerobus_ack_bursts_total`"+` and `+"`zerobus_ack_burst_items_total`"+` (their rate
ratio is the mean coalesce ratio), `+"`zerobus_pending_offsets`"+`, `+"`zerobus_delivery_latency`"+` (timer),
`+"`zerobus_ack_lane_retry_total`"+`, `+"`zerobus_ack_lane_poisoned_total`"+`, `+"`zerobus_stream_rebuilds_total`"+`,
`+"`zerobus_concurrency_rejects_total`"+`, `+"`zerobus_rows_sent_total`"+`, `+"`zerobus_bytes_sent_total`"+`; labelled
`+"`{table}`"+`: `+"`zerobus_row_errors_total`"+`, `+"`zerobus_type_reconcile_total{kind}`"+`,
`+"`zerobus_primary_raw_unmet{precondition}`"+`.`).
		Fields(
			service.NewStringField(fEndpoint).
				Description("The Zerobus ingest endpoint: `https://<workspace-id>.zerobus.<region>.cloud.databricks.com`. TLS is always used for `https://`; `http://` is accepted only for a loopback host (the emulator).").
				Example("https://1234567890123456.zerobus.us-west-2.cloud.databricks.com").
				Example("http://127.0.0.1:50051").
				LintRule(urlLint(fEndpoint)),
			service.NewStringField(fWorkspaceURL).
				Description("The workspace URL: OAuth token endpoint and Unity Catalog REST API. `http://` only for a loopback host.").
				Example("https://dbc-a1b2c3d4-e5f6.cloud.databricks.com").
				Example("http://127.0.0.1:8080").
				LintRule(urlLint(fWorkspaceURL)),
			service.NewStringField(fWorkspaceID).
				Description("The workspace id the ingest token is scoped to. Empty means derived from the first DNS label of `endpoint`, or, for an IP-address or localhost endpoint (the emulator), discovered from `workspace_url`'s `/.well-known/databricks-config`.").
				Advanced().Default(""),
			service.NewStringField(fTable).
				LintRule(`root = if this.type() == "string" && !this.re_match("`+tableNamePattern+`") { [ "field table: must be catalog.schema.table, three non-empty dot-separated parts of ASCII letters, digits and underscores, got " + this.quote() ] } else { [] }`).
				Description("The target table, `catalog.schema.table` (three non-empty dot-separated parts).").
				Example("main.default.events"),
			service.NewStringField(fClientID).
				Description("OAuth client id of the service principal. Empty means the `DATABRICKS_CLIENT_ID` environment variable.").
				Default(""),
			service.NewStringField(fClientSecret).
				Description("OAuth client secret of the service principal. Empty means the `DATABRICKS_CLIENT_SECRET` environment variable. Never logged.").
				Secret().Default(""),
			service.NewOutputMaxInFlightField().
				LintRule(atLeast("max_in_flight", 1)).
				Description("The number of batches written concurrently. Each waits for its own durability confirmation while the others keep submitting, so this is the pipelining depth; the default keeps a small stream pool busy."),
			service.NewIntField(fMaxInFlightB).
				Description("A byte budget for the data in flight: a batch reserves its bytes (its messages' bytes, corrected to its Arrow size once converted) before it is converted, waits while the budget is used up, and gives them back once it is durable or failed. This, not `max_in_flight`, bounds the output's memory whatever the row size; a batch larger than the whole budget is written alone. It also bounds, in bytes, what the `ack` lanes hold. It does not cover the messages of batches waiting their turn: the engine holds up to `max_in_flight` batches, so with large rows keep `batching.byte_size` or `max_in_flight` modest too.").
				Advanced().Default(tablewriter.DefaultMaxInFlightBytes).
				LintRule(`root = if this <= 0 { [ "field `+fMaxInFlightB+`: must be positive, got %v".format(this) ] } else { [] }`),
			service.NewBatchPolicyField(fBatching).
				Description("Batching policy. When the field is absent the output batches `count: 1000` with `period: 1s`; a policy with a `count` or `byte_size` but no `period` gets `period: 1s` so that a partial batch never waits until shutdown.").
				Default(map[string]any{"count": defaultBatchCount, "byte_size": 0, "period": defaultBatchPeriod, "check": "", "processors": []any{}}),
			service.NewObjectField(fStreams,
				service.NewIntField(fStreamsMin).
					Description("The minimum number of long-lived streams to the table.").
					Default(2).LintRule(atLeast(fStreams+"."+fStreamsMin, 1)),
				service.NewIntField(fStreamsMax).
					Description("The maximum number of streams; caps the size derived from bandwidth.").
					Default(16).LintRule(atLeast(fStreams+"."+fStreamsMax, 1)),
				service.NewFloatField(fPerStreamMBps).
					Description("The bandwidth one stream carries, in MB/s (Zerobus documents 100). Lower it to leave headroom.").
					Default(100.0).LintRule(`root = if this <= 0 { [ "field `+fStreams+"."+fPerStreamMBps+`: must be positive, got %v".format(this) ] } else { [] }`),
				service.NewFloatField(fPeakMBps).
					Description("The expected peak bandwidth into the table, in MB/s. The pool size is `max(min, ceil(peak / per_stream))`, capped at `max`. 0 means unknown: `min` streams.").
					Default(0.0).LintRule(atLeast(fStreams+"."+fPeakMBps, 0)),
			).Description("The stream pool: a few long-lived streams sized to bandwidth, never a stream per batch.").Advanced().
				LintRule(`root = if this.min.or(2) > this.max.or(16) { [ "field `+fStreams+`: max (%v) must be at least min (%v)".format(this.max.or(16), this.min.or(2)) ] } else { [] }`),
			service.NewInterpolatedStringField(fOrderingKey).
				Description("When set, rows whose key is equal always go to the same stream, so Zerobus keeps their relative order. When empty, batches are spread round-robin.").
				Example("${! this.device_id }").
				Example(`${! meta("kafka_key") }`).
				Optional(),
			service.NewObjectField(fAck,
				service.NewIntField(fAckCapacity).
					Description("Pending batches each stream's acknowledgement lane holds; a full lane is backpressure on writes.").
					Default(4096).LintRule(atLeast(fAck+"."+fAckCapacity, 1)),
				service.NewDurationField(fAckTimeout).
					Description("How long a batch may wait for its durability confirmation before it is nacked (and redelivered).").
					Default("5m").LintRule(durationLint(fAck+"."+fAckTimeout)),
			).Description("The per-stream acknowledgement lanes.").Advanced(),
			service.NewStringEnumField(fCompression, "none", "lz4_frame", "zstd").
				Description("Arrow IPC body compression of the record batches sent.").
				Default("none"),
			service.NewObjectField(fReconcile,
				service.NewBoolField(fNestedToStr).
					Description("Serialise a JSON object or array landing in a STRING column to JSON text (the same serialiser as the `zerobus_to_json` Bloblang method). When false such a row fails, naming the column.").
					Default(false),
				service.NewStringEnumField(fEpochUnit, "s", "ms", "us", "ns").
					Description("The unit of numeric values written to TIMESTAMP / TIMESTAMP_NTZ columns.").
					Default("us"),
				service.NewBoolField(fNTZFromZoned).
					Description("Store a timestamp value (a Bloblang `timestamp`, which names an instant in a zone) into a TIMESTAMP_NTZ column as its UTC wall time. When false such a row fails, naming the column: a zoned value in a zone-less column is a mismatch to fix upstream, not to guess. Zoned strings and epochs always fail.").
					Default(false),
			).Description("Emit-time type reconciliation.").Advanced(),
			service.NewDurationField(fCloseTimeout).
				Description("Bound on shutdown: draining streams and closing clients. The default stays inside the engine's `shutdown_timeout` (20s by default): keep it below yours. Rows not durable by then are nacked (redelivered), never acked, and the log says how many.").
				Default("10s").LintRule(durationLint(fCloseTimeout)),
			service.NewObjectField(fCatalog,
				service.NewBoolField(fProvision).
					Description("Create the table when absent and add columns for new message fields (needs `warehouse_id`). When false the table must exist and is only described.").
					Default(false),
				service.NewStringField(fWarehouseID).
					Description("The SQL warehouse DDL statements run on. Empty means the `DATABRICKS_WAREHOUSE_ID` environment variable.").
					Default(""),
				service.NewBoolField(fWiden).
					Description("Allow lossless column type widenings when provisioning: a value out of range for a TINYINT, SMALLINT or INT column widens it to the narrowest integer type that holds the batch's values (a FLOAT column to DOUBLE), once, before the rows are written. A table with Iceberg reads on only widens INT to BIGINT and FLOAT to DOUBLE; a refused widening is logged, naming the column, and its rows fail alone. When false such rows fail, naming the column.").
					Default(false),
				service.NewStringEnumField(fCommentsPol, "respect", "restore").
					Description("What to do with a managed column comment a human has edited: keep the edit (`respect`) or write the contract's text back (`restore`).").
					Default("respect"),
				service.NewStringField(fContract).
					Description("Path to an ODCS data-contract YAML file whose column descriptions become column comments.").
					Optional(),
				service.NewStringMapField(fColumnDescs).
					Description("Column comments, by column name; merged over the contract's.").
					Optional(),
				service.NewStringEnumField(fRole, RoleDerived, RolePrimaryRaw).
					Description("`primary_raw` makes this table the recovery anchor: Iceberg reads and column mapping on, protocol reader >= 2 / writer >= 7, deletion vectors off. These are checked at connect and on `recheck_interval`; while any is unmet the output refuses to write, naming it.").
					Default(RoleDerived),
				service.NewDurationField(fRecheck).
					Description("How often the primary-raw preconditions are re-checked (a table property can change under a running pipeline).").
					Default("5m").LintRule(durationLint(fCatalog+"."+fRecheck)),
			).Description("Unity Catalog integration: describing, provisioning and evolving the table.").Advanced().
				LintRule(warehouseLint()),
		).
		Example("Quickstart against the local emulator",
			"Generates rows into a table of the emulator started with `zerobus-emulator`.",
			`
output:
  zerobus:
    endpoint: http://127.0.0.1:50051
    workspace_url: http://127.0.0.1:8080
    table: main.default.events
    client_id: emulator
    client_secret: emulator
`).
		Example("Databricks with provisioning",
			"Creates the table when absent and adds columns for new fields; credentials from the environment.",
			`
output:
  zerobus:
    endpoint: https://1234567890123456.zerobus.us-west-2.cloud.databricks.com
    workspace_url: https://dbc-a1b2c3d4-e5f6.cloud.databricks.com
    table: main.bronze.orders
    ordering_key: ${! this.customer_id }
    catalog:
      provision: true
      warehouse_id: abcdef1234567890
`)
}

// outputConfig is the parsed, validated configuration of one zerobus output.
type outputConfig struct {
	Endpoint     string
	EndpointTLS  bool
	WorkspaceURL string
	WorkspaceID  string
	Table        string
	ClientID     string
	ClientSecret string

	MaxInFlight      int
	MaxInFlightBytes int
	Batching         service.BatchPolicy

	StreamsMin    int
	StreamsMax    int
	PerStreamMBps float64
	PeakMBps      float64

	OrderingKey *service.InterpolatedString
	orderingRaw string

	AckCapacity int
	AckTimeout  time.Duration

	Compression string

	NestedToString bool
	EpochUnit      string
	NTZFromZoned   bool

	CloseTimeout time.Duration

	Provision          bool
	WarehouseID        string
	Widen              bool
	CommentsPolicy     string
	ContractPath       string
	ColumnDescriptions map[string]string
	Role               string
	RecheckInterval    time.Duration

	// batchingDefaulted says how Batching was derived, for the start-up log.
	batchingDefaulted string
}

// parseConfig reads and validates a parsed zerobus config. Every error names
// the offending field.
func parseConfig(conf *service.ParsedConfig) (*outputConfig, error) {
	c := &outputConfig{}
	var err error
	str := func(dst *string, path ...string) {
		if err == nil {
			*dst, err = conf.FieldString(path...)
		}
	}
	integer := func(dst *int, path ...string) {
		if err == nil {
			*dst, err = conf.FieldInt(path...)
		}
	}
	float := func(dst *float64, path ...string) {
		if err == nil {
			*dst, err = conf.FieldFloat(path...)
		}
	}
	boolean := func(dst *bool, path ...string) {
		if err == nil {
			*dst, err = conf.FieldBool(path...)
		}
	}
	duration := func(dst *time.Duration, path ...string) {
		if err == nil {
			*dst, err = conf.FieldDuration(path...)
		}
	}
	str(&c.Endpoint, fEndpoint)
	str(&c.WorkspaceURL, fWorkspaceURL)
	str(&c.WorkspaceID, fWorkspaceID)
	str(&c.Table, fTable)
	str(&c.ClientID, fClientID)
	str(&c.ClientSecret, fClientSecret)
	if err == nil {
		c.MaxInFlight, err = conf.FieldMaxInFlight()
	}
	integer(&c.MaxInFlightBytes, fMaxInFlightB)
	integer(&c.StreamsMin, fStreams, fStreamsMin)
	integer(&c.StreamsMax, fStreams, fStreamsMax)
	float(&c.PerStreamMBps, fStreams, fPerStreamMBps)
	float(&c.PeakMBps, fStreams, fPeakMBps)
	integer(&c.AckCapacity, fAck, fAckCapacity)
	duration(&c.AckTimeout, fAck, fAckTimeout)
	str(&c.Compression, fCompression)
	boolean(&c.NestedToString, fReconcile, fNestedToStr)
	str(&c.EpochUnit, fReconcile, fEpochUnit)
	boolean(&c.NTZFromZoned, fReconcile, fNTZFromZoned)
	duration(&c.CloseTimeout, fCloseTimeout)
	boolean(&c.Provision, fCatalog, fProvision)
	str(&c.WarehouseID, fCatalog, fWarehouseID)
	boolean(&c.Widen, fCatalog, fWiden)
	str(&c.CommentsPolicy, fCatalog, fCommentsPol)
	str(&c.Role, fCatalog, fRole)
	duration(&c.RecheckInterval, fCatalog, fRecheck)
	if err != nil {
		return nil, err
	}
	if conf.Contains(fCatalog, fContract) {
		if c.ContractPath, err = conf.FieldString(fCatalog, fContract); err != nil {
			return nil, err
		}
	}
	if conf.Contains(fCatalog, fColumnDescs) {
		if c.ColumnDescriptions, err = conf.FieldStringMap(fCatalog, fColumnDescs); err != nil {
			return nil, err
		}
	}
	if conf.Contains(fOrderingKey) {
		if c.OrderingKey, err = conf.FieldInterpolatedString(fOrderingKey); err != nil {
			return nil, err
		}
		if c.orderingRaw, err = conf.FieldString(fOrderingKey); err != nil {
			return nil, err
		}
		if strings.TrimSpace(c.orderingRaw) == "" {
			c.OrderingKey, c.orderingRaw = nil, ""
		}
	}
	if c.Batching, err = conf.FieldBatchPolicy(fBatching); err != nil {
		return nil, err
	}
	c.Batching, c.batchingDefaulted = effectiveBatching(c.Batching)

	if c.ClientID == "" {
		c.ClientID = os.Getenv(EnvClientID)
	}
	if c.ClientSecret == "" {
		c.ClientSecret = os.Getenv(EnvClientSecret)
	}
	if c.WarehouseID == "" {
		c.WarehouseID = os.Getenv(EnvWarehouseID)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// effectiveBatching adds a period to a count/byte_size policy that lacks
// one (the field's own default, count 1000 every 1s, applies when it is
// absent). The string says what was done, for the start-up log.
func effectiveBatching(p service.BatchPolicy) (service.BatchPolicy, string) {
	if (p.Count > 1 || p.ByteSize > 0) && p.Period == "" {
		p.Period = defaultBatchPeriod
		return p, "period added"
	}
	return p, "as configured"
}

func (c *outputConfig) validate() error {
	var errs []error
	tlsOn, err := checkURL(fEndpoint, c.Endpoint)
	if err != nil {
		errs = append(errs, err)
	}
	c.EndpointTLS = tlsOn
	if _, err := checkURL(fWorkspaceURL, c.WorkspaceURL); err != nil {
		errs = append(errs, err)
	}
	if err := checkTable(c.Table); err != nil {
		errs = append(errs, err)
	}
	if c.WorkspaceID == "" && err == nil {
		c.WorkspaceID = deriveWorkspaceID(c.Endpoint)
	}
	if c.ClientID == "" {
		errs = append(errs, fmt.Errorf("field %s: empty and %s is not set", fClientID, EnvClientID))
	}
	if c.ClientSecret == "" {
		errs = append(errs, fmt.Errorf("field %s: empty and %s is not set", fClientSecret, EnvClientSecret))
	}
	if c.MaxInFlight < 1 {
		errs = append(errs, fmt.Errorf("field max_in_flight: must be at least 1, got %d", c.MaxInFlight))
	}
	if c.MaxInFlightBytes <= 0 {
		errs = append(errs, fmt.Errorf("field %s: must be positive, got %d", fMaxInFlightB, c.MaxInFlightBytes))
	}
	if c.StreamsMin < 1 {
		errs = append(errs, fmt.Errorf("field %s.%s: must be at least 1, got %d", fStreams, fStreamsMin, c.StreamsMin))
	}
	if c.StreamsMax < c.StreamsMin {
		errs = append(errs, fmt.Errorf("field %s.%s: must be at least %s.%s (%d), got %d", fStreams, fStreamsMax, fStreams, fStreamsMin, c.StreamsMin, c.StreamsMax))
	}
	if c.PerStreamMBps <= 0 {
		errs = append(errs, fmt.Errorf("field %s.%s: must be positive, got %v", fStreams, fPerStreamMBps, c.PerStreamMBps))
	}
	if c.PeakMBps < 0 {
		errs = append(errs, fmt.Errorf("field %s.%s: must not be negative, got %v", fStreams, fPeakMBps, c.PeakMBps))
	}
	if c.AckCapacity < 1 {
		errs = append(errs, fmt.Errorf("field %s.%s: must be at least 1, got %d", fAck, fAckCapacity, c.AckCapacity))
	}
	if c.AckTimeout <= 0 {
		errs = append(errs, fmt.Errorf("field %s.%s: must be positive, got %v", fAck, fAckTimeout, c.AckTimeout))
	}
	if c.CloseTimeout <= 0 {
		errs = append(errs, fmt.Errorf("field %s: must be positive, got %v", fCloseTimeout, c.CloseTimeout))
	}
	if c.RecheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("field %s.%s: must be positive, got %v", fCatalog, fRecheck, c.RecheckInterval))
	}
	if c.Provision && c.WarehouseID == "" {
		errs = append(errs, fmt.Errorf("field %s.%s: required when %s.%s is true (or set DATABRICKS_WAREHOUSE_ID)", fCatalog, fWarehouseID, fCatalog, fProvision))
	}
	if c.ContractPath != "" {
		if _, err := os.Stat(c.ContractPath); err != nil {
			errs = append(errs, fmt.Errorf("field %s.%s: %w", fCatalog, fContract, err))
		}
	}
	return errors.Join(errs...)
}

// checkURL validates an endpoint URL and reports whether TLS is used: always
// for https, never for http, which is only accepted for loopback hosts so a
// credential can never cross a network in the clear.
func checkURL(field, raw string) (tlsOn bool, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return false, fmt.Errorf("field %s: %w", field, err)
	}
	if u.Host == "" {
		return false, fmt.Errorf("field %s: %q has no host; want https://host[:port]", field, raw)
	}
	switch u.Scheme {
	case "https":
		return true, nil
	case "http":
		if !isLoopback(u.Hostname()) {
			return false, fmt.Errorf("field %s: plaintext http:// is only allowed for a loopback host (the emulator), got %q; use https://", field, u.Hostname())
		}
		return false, nil
	default:
		return false, fmt.Errorf("field %s: scheme must be https (or http for a loopback host), got %q", field, u.Scheme)
	}
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func checkTable(full string) error {
	parts := strings.Split(full, ".")
	if len(parts) != 3 {
		return fmt.Errorf("field %s: must be catalog.schema.table (three dot-separated parts), got %q", fTable, full)
	}
	for i, p := range parts {
		if p == "" {
			return fmt.Errorf("field %s: part %d of %q is empty", fTable, i+1, full)
		}
	}
	return nil
}

// deriveWorkspaceID returns the first DNS label of the endpoint host, the way
// the Zerobus SDKs do; an IP address or localhost yields "" (emulator only).
func deriveWorkspaceID(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return ""
	}
	host := u.Hostname()
	if net.ParseIP(host) != nil || strings.EqualFold(host, "localhost") {
		return ""
	}
	label, _, _ := strings.Cut(host, ".")
	return label
}

// knobs returns every effective setting as key/value pairs for the one
// start-up log line. Secrets are reported only as set/unset.
func (c *outputConfig) knobs(poolSize int) []any {
	ordering := "(none: round-robin)"
	if c.OrderingKey != nil {
		ordering = c.orderingRaw
	}
	secret := "unset"
	if c.ClientSecret != "" {
		secret = "set"
	}
	return []any{
		"table", c.Table,
		"endpoint", c.Endpoint,
		"tls", c.EndpointTLS,
		"workspace_url", c.WorkspaceURL,
		"workspace_id", c.WorkspaceID,
		"client_id", c.ClientID,
		"client_secret", secret,
		"max_in_flight", c.MaxInFlight,
		"max_in_flight_bytes", c.MaxInFlightBytes,
		"batching", fmt.Sprintf("count=%d byte_size=%d period=%q check=%q (%s)", c.Batching.Count, c.Batching.ByteSize, c.Batching.Period, c.Batching.Check, c.batchingDefaulted),
		"streams.min", c.StreamsMin,
		"streams.max", c.StreamsMax,
		"streams.per_stream_mb_per_sec", c.PerStreamMBps,
		"streams.peak_mb_per_sec", c.PeakMBps,
		"pool_size", poolSize,
		"ordering_key", ordering,
		"ack.channel_capacity", c.AckCapacity,
		"ack.timeout", c.AckTimeout.String(),
		"compression", c.Compression,
		"reconcile.nested_to_string", c.NestedToString,
		"reconcile.timestamp_epoch_unit", c.EpochUnit,
		"reconcile.timestamp_ntz_from_zoned", c.NTZFromZoned,
		"close_timeout", c.CloseTimeout.String(),
		"catalog.provision", c.Provision,
		"catalog.warehouse_id", c.WarehouseID,
		"catalog.widen", c.Widen,
		"catalog.comments_policy", c.CommentsPolicy,
		"catalog.contract", c.ContractPath,
		"catalog.column_descriptions", len(c.ColumnDescriptions),
		"catalog.role", c.Role,
		"catalog.recheck_interval", c.RecheckInterval.String(),
	}
}

// knobsLine renders knobs as "k=v k=v ...", for loggers without structured
// fields.
func knobsLine(kv []any) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%v=%v", kv[i], kv[i+1])
	}
	return b.String()
}
