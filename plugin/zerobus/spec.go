package zerobus

import (
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/lintrule"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/tablewriter"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
	"github.com/benthos-zerobus/benthos-zerobus/plugin/schemaregistry"
)

// Config field names. Kept as constants so that error messages and the
// start-up log name exactly what the user wrote.
const (
	fEndpoint      = "endpoint"
	fWorkspaceURL  = "workspace_url"
	fWorkspaceID   = "workspace_id"
	fTable         = "table"
	fMaxOpenTables = "max_open_tables"
	fDeadLetter    = "dead_letter"
	fDLTable       = "table"
	fDLPayload     = "include_payload"
	fCoverage      = "coverage"
	fClientID      = "client_id"
	fClientSecret  = "client_secret"
	fBatching      = "batching"
	fMaxInFlightB  = "max_in_flight_bytes"
	fStreams       = "streams"
	fStreamsMin    = "min"
	fStreamsMax    = "max"
	fPerStreamMBps = "per_stream_mb_per_sec"
	fPeakMBps      = "peak_mb_per_sec"
	// Sizing by rows and self-sizing (pool.Config).
	fPerStreamRows = "per_stream_rows_per_sec"
	fPeakRows      = "peak_rows_per_sec"
	fSelfSizing    = "self_sizing"
	fGrowInterval  = "grow_interval"
	fShrinkAfter   = "shrink_after"
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
	fWSTimeout     = "workspace_timeout"
	fCatalog       = "catalog"
	fProvision     = "provision"
	fWarehouseID   = "warehouse_id"
	fWiden         = "widen"
	fCommentsPol   = "comments_policy"
	fContract      = "contract"
	fColumnDescs   = "column_descriptions"
	fRole          = "role"
	fRecheck       = "recheck_interval"
	fSchemaMeta    = "schema_metadata"
	fDedupView     = "dedup_view"
	fDedupViewName = "dedup_view_name"
	fTLS           = "tls"
	fProxyURL      = "proxy_url"
	fKeepalive     = "keepalive"
	fKATime        = "time"
	fSchemaReg     = "schema_registry"
	fKATimeout     = "timeout"
)

// The rescue column knob.
const fRescue = "rescue_column"

// rescueLint is the lint rule of rescue_column: a column name Zerobus
// writes (typemap.ValidIdentifier).
const rescueLint = `root = if this.type() == "string" && this != "" && !this.re_match("^[A-Za-z_][A-Za-z0-9_]*$") { [ "field ` + fRescue + `: must be a column name of ASCII letters, digits and underscores, not starting with a digit, got " + this.quote() ] } else { [] }`

// Environment variables the credentials fall back to (catalog's, shared
// with the replay input).
const (
	EnvClientID     = catalog.EnvClientID
	EnvClientSecret = catalog.EnvClientSecret
	EnvWarehouseID  = catalog.EnvWarehouseID
)

// Role values.
const (
	RoleDerived    = string(catalog.RoleDerived)
	RolePrimaryRaw = string(catalog.RolePrimaryRaw)
)

// DefaultMaxInFlight is the output's max_in_flight default (Benthos's is
// 64): the batches of messages the engine holds for the output, bounded so
// their memory stays modest whatever the row size (see the field).
const DefaultMaxInFlight = 16

// Default batching applied when the `batching` field is absent: a count
// bounded by a period, so a partially filled batch (for example redelivered
// rows) is flushed within a second instead of parking until shutdown. The
// count, 4,000, keeps 64,000 small rows in flight at max_in_flight 16 (as
// 64 × 1,000 did), which hides 50 ms of ack latency; the byte bound keeps
// larger rows' batches to about 1 MiB.
const (
	DefaultBatchCount  = 4000
	DefaultBatchBytes  = 1 << 20
	DefaultBatchPeriod = "1s"
)

// DefaultCloseTimeout is the close_timeout default: inside the engine's
// default shutdown_timeout (20s), so that the output's own drain ends first.
const DefaultCloseTimeout = 10 * time.Second

// durationDefault writes a duration default the way a user would, "5m" or
// "30s" rather than time.Duration's "5m0s", so that the printed config and
// the docs read naturally; the spec's defaults come from the engine's
// constants through it (one source per default).
func durationDefault(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d >= time.Second && d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

// warehouseLint is the lint rule of the catalog block: provisioning runs DDL
// on a SQL warehouse, so it needs warehouse_id, unless the environment the
// spec is built in (the lint run's) has DATABRICKS_WAREHOUSE_ID (fromEnv).
func warehouseLint(fromEnv bool) string {
	if fromEnv {
		return `root = []`
	}
	return `root = if this.provision.or(false) && this.warehouse_id.or("") == "" { [ "field ` + fCatalog + "." + fWarehouseID + `: required when ` + fCatalog + "." + fProvision + ` is true (or set ` + EnvWarehouseID + `)" ] } else { [] }`
}

// catalogLint is the lint rule of the catalog block: the warehouse rule
// (warehouseLint), and catalog.schema_metadata only with provisioning,
// which is what it steers.
func catalogLint(fromEnv bool) string {
	return `let warehouse = ` + strings.TrimPrefix(warehouseLint(fromEnv), "root = ") + `
let schema_metadata = if this.` + fSchemaMeta + `.or("") != "" && !this.provision.or(false) { [ "field ` + fCatalog + "." + fSchemaMeta + `: takes effect only with ` + fCatalog + "." + fProvision + `: true (it sets the types of the columns the output creates and adds); set provision or remove it" ] } else { [] }
root = $warehouse.concat($schema_metadata)`
}

// schemaMetaLint is the lint rule of catalog.schema_metadata: a metadata
// key, without surrounding space (a key " schema" never matches "schema").
const schemaMetaLint = `root = if this.type() == "string" && this != this.trim() { [ "field ` + fCatalog + "." + fSchemaMeta + `: metadata key " + this.quote() + " has surrounding white space, which no key schema_registry_decode stores has" ] } else { [] }`

// proxyLint is the lint rule of proxy_url: an HTTP CONNECT proxy
// (ingest.CheckProxyURL says the same at run time).
const proxyLint = `root = if this == "" { [] } else { match this.parse_url().catch(null) {
  this == null => [ "field ` + fProxyURL + `: not a URL" ],
  this.scheme == "https" || this.scheme == "socks5" || this.scheme == "socks5h" => [ "field ` + fProxyURL + `: " + this.scheme + ":// proxies are not supported; use an HTTP CONNECT proxy, http://[user:password@]host:port (the tunnel carries TLS from end to end)" ],
  this.scheme != "http" => [ "field ` + fProxyURL + `: scheme must be http (an HTTP CONNECT proxy), got " + this.scheme.or("").quote() ],
  this.host.or("") == "" => [ "field ` + fProxyURL + `: has no host" ],
  _ => [],
} }`

// plaintextLint is the component's lint rule across fields (validate says
// the same at run time): a plaintext http:// endpoint or workspace_url
// (loopback only) takes neither TLS settings, which would be silently
// ignored, nor a proxy, which never carries a plaintext request. A lint of
// the whole block carries the block's line.
// dedupViewLint is the lint rule of catalog.dedup_view, which needs the
// source position columns (coverage) and the DDL (catalog.provision); a
// fixed view name needs a fixed table. validate says the same.
const dedupViewLint = `root = if !this.` + fCatalog + `.` + fDedupView + `.or(false) {
  if this.` + fCatalog + `.` + fDedupViewName + `.or("") != "" { [ "field ` + fCatalog + `.` + fDedupViewName + `: set without ` + fCatalog + `.` + fDedupView + `: true" ] } else { [] }
} else { [
  if this.` + fCoverage + `.source.or("") == "" { "field ` + fCatalog + `.` + fDedupView + `: needs ` + fCoverage + `.source and ` + fCoverage + `.offset, whose columns _zb_source and _zb_offset it deduplicates on" },
  if !this.` + fCatalog + `.` + fProvision + `.or(false) { "field ` + fCatalog + `.` + fDedupView + `: needs ` + fCatalog + `.` + fProvision + `: true, which runs the DDL that defines it" },
  if this.` + fCatalog + `.` + fDedupViewName + `.or("") != "" && this.` + fTable + `.or("").contains("${!") { "field ` + fCatalog + `.` + fDedupViewName + `: one name cannot serve an interpolated table: leave it empty for <table>` + catalog.DedupViewSuffix + `" },
  if this.` + fCatalog + `.` + fDedupViewName + `.or("") != "" && this.` + fCatalog + `.` + fDedupViewName + `.lowercase() == this.` + fTable + `.or("").lowercase() { "field ` + fCatalog + `.` + fDedupViewName + `: names the table itself" },
].filter(v -> v != null) }`

// componentLint is the component-level lint rule (a component has one):
// plaintextLint's and dedupViewLint's messages.
var componentLint = strings.Replace(plaintextLint, "root = ", "let plaintext = ", 1) + "\n" +
	strings.Replace(dedupViewLint, "root = ", "let dedup = ", 1) + "\n" +
	strings.Replace(registrySourceLint, "root = ", "let registry = ", 1) + "\nroot = $plaintext.concat($dedup).concat($registry)"

// registrySourceLint refuses two sources of a table's types: the registry
// itself (schema_registry.url) and the schema a processor stored in
// metadata (catalog.schema_metadata). validate says the same.
const registrySourceLint = `root = if this.` + fSchemaReg + `.url.or("") != "" && this.` + fCatalog + `.` + fSchemaMeta + `.or("") != "" { [ "fields ` + fSchemaReg + `.url and ` + fCatalog + `.` + fSchemaMeta + `: both set, two sources of the table's types; with ` + fSchemaReg + ` the output decodes the framed values and types the table from the registry itself: remove ` + fCatalog + `.` + fSchemaMeta + ` (or remove ` + fSchemaReg + ` and decode with schema_registry_decode)" ] } else { [] }`

const plaintextLint = `let plain = [
  if this.endpoint.or("").parse_url().catch({}).scheme.or("") == "http" { "` + fEndpoint + `" },
  if this.workspace_url.or("").parse_url().catch({}).scheme.or("") == "http" { "` + fWorkspaceURL + `" },
].filter(v -> v != null)
root = if $plain.length() == 0 { [] } else { [
  if this.tls.enabled.or(false) { "field ` + fTLS + `.enabled: " + $plain.join(" and ") + " " + if $plain.length() == 1 { "is" } else { "are" } + " plaintext http://, which TLS settings do not apply to; use https:// (the emulator serves TLS with --tls-cert/--tls-key) or remove the ` + fTLS + ` block" },
  if this.` + fProxyURL + `.or("") != "" { "field ` + fProxyURL + `: " + $plain.join(" and ") + " " + if $plain.length() == 1 { "is" } else { "are" } + " plaintext http:// (loopback only), which is never sent through a proxy; use https:// or remove ` + fProxyURL + `" },
].filter(v -> v != null) }`

// description is the component's documentation text (AsciiDoc headings, as
// Benthos renders them), kept beside the code as a document.
//
//go:embed description.md
var description string

// Spec returns the configuration spec of the zerobus output.
// Its catalog lint rule depends on whether DATABRICKS_WAREHOUSE_ID is set.
func Spec() *service.ConfigSpec {
	if os.Getenv(EnvWarehouseID) != "" {
		return specs[1]()
	}
	return specs[0]()
}

// specs builds each of the two specs once: their lint rules are Bloblang
// mappings, parsed when built, and every config parse (each test's too) asks
// for one. Nothing adds to a spec once built, so one instance serves every
// caller.
var specs = [2]func() *service.ConfigSpec{
	sync.OnceValue(func() *service.ConfigSpec { return newSpec(false) }),
	sync.OnceValue(func() *service.ConfigSpec { return newSpec(true) }),
}

func newSpec(warehouseFromEnv bool) *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Streams message batches into a Databricks Unity Catalog managed Delta table through the Zerobus ingest service, as Apache Arrow over Arrow Flight.").
		Description(description).
		Fields(
			service.NewStringField(fEndpoint).
				Description("The Zerobus ingest endpoint: `https://<workspace-id>.zerobus.<region>.cloud.databricks.com`. TLS is always used for `https://`; `http://` is accepted only for a loopback host (the emulator).").
				Example("https://1234567890123456.zerobus.us-west-2.cloud.databricks.com").
				Example("http://127.0.0.1:50051").
				LintRule(lintrule.URL(fEndpoint)),
			service.NewStringField(fWorkspaceURL).
				Description("The workspace URL: OAuth token endpoint and Unity Catalog REST API. `http://` only for a loopback host.").
				Example("https://dbc-a1b2c3d4-e5f6.cloud.databricks.com").
				Example("http://127.0.0.1:8080").
				LintRule(lintrule.URL(fWorkspaceURL)),
			service.NewStringField(fWorkspaceID).
				Description("The workspace id the ingest token is scoped to. Empty means derived from the first DNS label of `endpoint`, or, for an IP-address or localhost endpoint (the emulator), discovered from `workspace_url`'s `/.well-known/databricks-config`.").
				Advanced().Default(""),
			service.NewTLSToggledField(fTLS).
				Description("Custom TLS settings of the `https://` endpoint and workspace URL. Disabled means TLS with the system roots; it never turns TLS off.").
				Advanced(),
			service.NewURLField(fProxyURL).
				Description("An HTTP CONNECT proxy (`http://[user:password@]host:port`) for every `https://` connection, gRPC and HTTP, loopback included: the proxy sees the target's host and port and a TLS tunnel, never a request or a token. Empty (the default) means the `HTTPS_PROXY` / `NO_PROXY` environment. A plaintext `http://` endpoint (loopback only) is never proxied, so `proxy_url` is refused with one. `https://` and `socks5://` proxies are not supported.").
				Default("").Example("http://proxy.corp.example.com:3128").Advanced().
				LintRule(proxyLint),
			service.NewObjectField(fKeepalive,
				service.NewDurationField(fKATime).
					Description("How long the Zerobus connection may stay quiet (nothing received) before it is pinged. At least 10s: gRPC pings no more often, and that is the rate the service is assumed to permit.").
					Default(ingest.DefaultKeepaliveTime.String()).LintRule(lintrule.DurationAtLeast(fKeepalive+"."+fKATime, ingest.MinKeepaliveTime, "gRPC's floor")),
				service.NewDurationField(fKATimeout).
					Description("How long a ping may go unanswered before the connection is declared dead.").
					Default(ingest.DefaultKeepaliveTimeout.String()).LintRule(lintrule.Duration(fKeepalive+"."+fKATimeout)),
			).Description("HTTP/2 keepalive of the Zerobus connection, pinged only while streams are open. A connection that died silently (a NAT or load balancer dropped its state, the host crashed: no FIN, no RST) is found within `time` + `timeout` of the last frame received (15s at the defaults), then closed; a new connection is dialled, the streams are rebuilt on it and rows not yet acknowledged are resent.").Advanced(),
			service.NewInterpolatedStringField(fTable).
				LintRule(lintrule.Table(fTable, true)).
				Description("The target table, `catalog.schema.table` (three non-empty dot-separated parts of ASCII letters, digits and underscores). It may be interpolated per message: each distinct table then gets its own lazily opened writer (at most `max_open_tables`), a batch spanning tables is split into one write per table, and a message whose table cannot be computed, or is not a valid name, fails alone.").
				Example("main.default.events").
				Example(`main.cdc.${! meta("table_name") }`),
			service.NewIntField(fMaxOpenTables).
				Description("With an interpolated `table`: the most tables whose writers hold streams at once, counting the evicted writers still closing (so at most `max_open_tables` × `streams.max` streams; one per table at `streams.min: 0` without self-sizing). A batch's tables beyond it wait their turn, first come first served, and the rows of every batch in flight waiting for one table go in one write through the one writer opened for it; to make room, the writer idle longest is drained and closed (evicted). Size it to the number of distinct tables written within a minute, so that writers are not evicted in steady state: an eviction costs a stream close and an open (and a describe, once a minute per table) for the table's next rows, so evicting more than a few writers a second makes routing slow; the output then logs one warning naming the distinct tables of the last minute and the eviction rate, and `zerobus_table_evictions_total` counts every eviction. Each open table holds its streams (counted against the workspace's stream quota) and a converter; lower it only to bound those.").
				Default(tablewriter.DefaultMaxOpenTables).LintRule(lintrule.AtLeast(fMaxOpenTables, 1)).Advanced(),
			service.NewObjectField(fDeadLetter,
				service.NewStringField(fDLTable).
					Description("The dead-letter table, `catalog.schema.table`. With `catalog.provision` it is created when absent (columns `source_table`, `message_index`, `column_name`, `error`, `payload`, all nullable, and `_zb_emit_ts`); otherwise it must exist with them, nullable. Empty (the default) means no dead-letter table.").
					Default("").LintRule(lintrule.TableOrEmpty(fDeadLetter+"."+fDLTable)),
				service.NewBoolField(fDLPayload).
					Description("Store each failed message's bytes in `payload`.").
					Default(true),
			).Description("Rows that do not fit their table (they fail conversion, or the catalog refused the change they need) are written, durably, to this table, and the batch is acknowledged once the good rows and the dead letters are both durable: an upstream retry then duplicates nothing. A dead-letter write that fails is retried alone (3 attempts); a dead-letter table that still cannot take them is reported once, and only the rows that do not fit fail, through a batch error: the good rows are durable and this output never sends them again. Without it, such rows fail through a batch error (a `fallback` output can route them).").
				Optional(),
			service.NewStringField(fRescue).
				Description("A rescue column for the Arrow path, as the Zerobus service offers one for JSON records (Beta: a nullable VARIANT column tagged `zerobus-rescue`): a nullable VARIANT column of this name, created with the table or, with `catalog.provision`, added to it. A field the table has no column for (and provisioning cannot add), or whose value does not fit its column, goes into it, all of a row's in one object `{field: value}`, instead of failing the row; the row's other fields land as usual. A message field named like the rescue column itself is rescued under its own name, never taken for the column. Counted by `zerobus_rescued_fields_total{column}`. Not with `catalog.role: primary_raw` (Iceberg reads allow no VARIANT). Empty: none.").
				Default("").LintRule(rescueLint).Advanced(),
			service.NewObjectField(fCoverage,
				service.NewInterpolatedStringField("source").Description("Each message's source, e.g. `${! meta(\"kafka_topic\") }/${! meta(\"kafka_partition\") }`; stamped into `_zb_source`.").Default(""),
				service.NewInterpolatedStringField("offset").Description("Each message's integer offset in its source, e.g. `${! meta(\"kafka_offset\") }`; stamped into `_zb_offset`.").Default(""),
				service.NewStringField(fDLTable).Description("The coverage table; empty (the default) means `<table>_zb_coverage`.").Default("").LintRule(lintrule.TableOrEmpty(fCoverage+"."+fDLTable)),
			).Description("Record which source offsets are durable: each row's source and offset go into the reserved columns `_zb_source STRING` and `_zb_offset BIGINT` (created or, with `catalog.provision`, added), and the offsets whose rows the service acknowledged durable are written in the background, as ranges `[start, end)` per (writer = the output's label, source), to a companion table (`writer_id`, `source`, `start`, `end`, `_zb_emit_ts`) by a table writer of its own: its own stream, reconnects and back-off, and acknowledgements that can only advance coverage, never acknowledge input messages. A coverage table that fails (a grant revoked, the service down) is explained once in the log and written again once it recovers, with the ranges kept meanwhile; the rows keep flowing. Readers union-merge all rows of a source; coverage may lag the raw table, never lead it. A message whose source or offset fails, or whose offset is not an integer, fails alone.").
				LintRule(`root = if (this.source.or("") == "") != (this.offset.or("") == "") { [ "field `+fCoverage+`: source and offset must be set together" ] } else { [] }`).Optional().Advanced(),
			service.NewStringField(fClientID).
				Description("OAuth client id of the service principal. Empty means the `DATABRICKS_CLIENT_ID` environment variable.").
				Default(""),
			service.NewStringField(fClientSecret).
				Description("OAuth client secret of the service principal. Empty means the `DATABRICKS_CLIENT_SECRET` environment variable. Never logged.").
				Secret().Default(""),
			service.NewOutputMaxInFlightField().Default(DefaultMaxInFlight).
				LintRule(lintrule.AtLeast("max_in_flight", 1)).
				Description("The number of batches written concurrently. Each waits for its own durability confirmation while the others keep submitting, so this is the pipelining depth. It also bounds memory: the engine hands the output up to this many batches and holds each one's messages until it is acknowledged, whether it is being written or waiting for `max_in_flight_bytes`. At the default batching a batch holds up to about 4 MiB (the engine adds a whole input batch before it checks `byte_size`, and a message made by a mapping keeps its value and its JSON), so the default 16 (Benthos's is 64) keeps that under 64 MiB at any row size and, with the default batching count of 4,000, still keeps 64,000 small rows in flight."),
			service.NewIntField(fMaxInFlightB).
				Description("A byte budget for the data in flight: a batch reserves its bytes (its messages' bytes, corrected to its Arrow size once converted) before it is converted, waits while the budget is used up, and gives them back once it is durable or failed. This, not `max_in_flight`, bounds the output's memory whatever the row size; a batch larger than the whole budget is written alone. It also bounds, in bytes, what the `ack` lanes hold. It does not cover the messages of batches waiting their turn (see `max_in_flight`). Unless `GOMEMLIMIT` is set, and when `batching.byte_size` bounds a batch, the output sets the Go soft memory limit to 48 MiB plus this budget plus `max_in_flight` × 4 × `batching.byte_size` (176 MiB at the defaults; logged at start-up; never below 1.25 × the live heap + 32 MiB, so a process holding more than that still collects at a steady pace): the collector then runs before the heap reaches twice the data in flight, not after. Set `GOMEMLIMIT` (or `GOMEMLIMIT=off`) to choose your own.").
				Advanced().Default(tablewriter.DefaultMaxInFlightBytes).
				LintRule(`root = if this <= 0 { [ "field `+fMaxInFlightB+`: must be positive, got %v".format(this) ] } else { [] }`),
			service.NewBatchPolicyField(fBatching).
				Description("Batching policy. When the field is absent the output batches `count: 4000` or `byte_size: 1048576`, whichever comes first, with `period: 1s` (the byte bound keeps the memory of large rows in check: the engine holds up to `max_in_flight` batches; the count keeps 64,000 small rows in flight at the default `max_in_flight`, enough to hide tens of milliseconds of ack latency); a policy with a `count` or `byte_size` but no `period` gets `period: 1s` so that a partial batch never waits until shutdown. When the input already delivers batches (a Kafka input's `batching`, `generate`'s `batch_size`, the messages of one HTTP request), batch there and set `batching: {count: 0}` here: each input batch is then written as it comes, without a second batcher, which is the fastest configuration (see docs/performance.md). `byte_size` costs most on structured messages (made by a mapping or by parsing JSON): the batcher serialises each one to JSON to count its bytes, while for messages that are still raw bytes it only reads their length; with small structured rows, `count` and `period` alone avoid that cost but no longer bound the bytes of a batch of large rows.").
				Default(map[string]any{"count": DefaultBatchCount, "byte_size": DefaultBatchBytes, "period": DefaultBatchPeriod, "check": "", "processors": []any{}}),
			service.NewObjectField(fStreams,
				service.NewIntField(fStreamsMin).
					Description("The minimum number of long-lived streams to the table. 0 means automatic: 2 for a fixed `table`, 1 for each table of an interpolated one.").
					Default(0).LintRule(lintrule.AtLeast(fStreams+"."+fStreamsMin, 0)),
				service.NewIntField(fStreamsMax).
					Description("The maximum number of streams; caps the size derived from bandwidth.").
					Default(pool.DefaultConfig().MaxStreams).LintRule(lintrule.AtLeast(fStreams+"."+fStreamsMax, 1)),
				service.NewFloatField(fPerStreamMBps).
					Description("The bandwidth one stream carries, in MB/s (Zerobus documents 100). Lower it to leave headroom.").
					Default(pool.DefaultConfig().PerStreamMBps).LintRule(`root = if this <= 0 { [ "field `+fStreams+"."+fPerStreamMBps+`: must be positive, got %v".format(this) ] } else { [] }`),
				service.NewFloatField(fPeakMBps).
					Description("The expected peak bandwidth into the table, in MB/s. The pool size is the larger of `ceil(peak_mb_per_sec / per_stream_mb_per_sec)` and `ceil(peak_rows_per_sec / per_stream_rows_per_sec)`, at least `min`, capped at `max`. 0 means unknown: `min` streams.").
					Default(0.0).LintRule(lintrule.AtLeast(fStreams+"."+fPeakMBps, 0)),
				service.NewFloatField(fPerStreamRows).
					Description("The rows per second one stream carries. The default is the per-stream quota Databricks' Zerobus Ingest quotas page gives (100,000 records/s, adjustable; read 2026-12-03); a workspace still held to the former 15,000 (some copies of the limitations page say so) sets `15000`, and one with a raised quota sets that. Small rows reach it long before `per_stream_mb_per_sec`.").Example(15000.0).
					Default(float64(pool.DefaultPerStreamRowsPerSec)).LintRule(`root = if this <= 0 { [ "field `+fStreams+"."+fPerStreamRows+`: must be positive, got %v".format(this) ] } else { [] }`),
				service.NewFloatField(fPeakRows).
					Description("The expected peak rows per second into the table; sizes the pool beside `peak_mb_per_sec` (the larger need wins). 0 means unknown.").
					Default(0.0).LintRule(lintrule.AtLeast(fStreams+"."+fPeakRows, 0)),
				service.NewBoolField(fSelfSizing).
					Description("Open one more stream at a time, up to `max`, while every stream is saturated (carrying its quota, by `per_stream_rows_per_sec` or `per_stream_mb_per_sec`, or falling behind, with rows queued for acknowledgement), and retire those extra streams gracefully (drained, nothing lost or duplicated) once no stream has been saturated for `shrink_after`. It never grows on a stream error or a concurrency reject, and a refused extra stream holds growth for a minute; rows with an `ordering_key` stay on the first streams. Each change is logged with its reason.").
					Default(true),
				service.NewDurationField(fGrowInterval).
					Description("The least time between two changes of the pool's size.").
					Default(pool.DefaultGrowInterval.String()).LintRule(lintrule.Duration(fStreams+"."+fGrowInterval)),
				service.NewDurationField(fShrinkAfter).
					Description("How long no stream may have been saturated before an extra stream is retired.").
					Default(pool.DefaultShrinkAfter.String()).LintRule(lintrule.Duration(fStreams+"."+fShrinkAfter)),
			).Description("The stream pool: a few long-lived streams sized to bandwidth and rows per second, never a stream per batch, growing while they are saturated.").Advanced().
				LintRule(fmt.Sprintf(`root = if this.min.or(%[1]d) > this.max.or(%[2]d) { [ "field `+fStreams+`: max (%%v) must be at least min (%%v)".format(this.max.or(%[2]d), this.min.or(%[1]d)) ] } else { [] }`, pool.DefaultConfig().MinStreams, pool.DefaultConfig().MaxStreams)),
			service.NewInterpolatedStringField(fOrderingKey).
				Description("When set, rows whose key is equal always go to the same stream, so Zerobus keeps their relative order as the output receives them. Order across batches also needs `max_in_flight: 1` (concurrent batches are not ordered with each other) and, when the config has `pipeline.processors`, `pipeline.threads: 1` (the default, one worker per CPU, lets batches pass each other before they reach the output). Empty (the default) means batches are spread round-robin.").
				Default("").
				Example("${! this.device_id }").
				Example(`${! meta("kafka_key") }`),
			service.NewObjectField(fAck,
				service.NewIntField(fAckCapacity).
					Description("Pending batches each stream's acknowledgement lane holds; a full lane is backpressure on writes.").
					Default(acklane.DefaultCapacity).LintRule(lintrule.AtLeast(fAck+"."+fAckCapacity, 1)),
				service.NewDurationField(fAckTimeout).
					Description("How long a batch may wait for its durability confirmation before it is nacked (and redelivered).").
					Default(durationDefault(tablewriter.DefaultAckTimeout)).LintRule(lintrule.Duration(fAck+"."+fAckTimeout)),
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
					Default(arrowconv.DefaultEpochUnit),
				service.NewBoolField(fNTZFromZoned).
					Description("Store a timestamp value (a Bloblang `timestamp`, which names an instant in a zone) into a TIMESTAMP_NTZ column as its UTC wall time. When false such a row fails, naming the column: a zoned value in a zone-less column is a mismatch to fix upstream, not to guess. Zoned strings and epochs always fail.").
					Default(false),
			).Description("Emit-time type reconciliation.").Advanced(),
			service.NewDurationField(fCloseTimeout).
				Description("Bound on shutdown: draining streams and closing clients. The default stays inside the engine's `shutdown_timeout` (20s by default): keep it below yours. Rows not durable by then are nacked (redelivered), never acked, and the log says how many.").
				Default(durationDefault(DefaultCloseTimeout)).LintRule(lintrule.Duration(fCloseTimeout)),
			service.NewDurationField(fWSTimeout).
				Description("Bound on every single workspace call (OAuth, Unity Catalog, SQL statements): an unreachable or silent workspace fails the attempt after this long, naming the URL and the cause, and the output retries with back-off.").
				Default(durationDefault(catalog.DefaultCallTimeout)).LintRule(lintrule.Duration(fWSTimeout)).Advanced(),
			service.NewObjectField(fCatalog,
				service.NewBoolField(fProvision).
					Description("Create the table when absent and add columns for new message fields (needs `warehouse_id`). When false the table must exist and is only described. One column-name rule creates a column and matches a field to it: each character outside ASCII letters, digits and `_` becomes `_` (a leading digit gets a `_` prefix), since the Zerobus service writes only such columns, so `my-field` is the column `my_field`. A field whose values disagree in type still gets its column: numbers widen integer → double, any other disagreement takes the type most messages have and the other messages fail on that column alone.").
					Default(false),
				service.NewStringField(fWarehouseID).
					Description("The SQL warehouse DDL statements run on. Empty means the `DATABRICKS_WAREHOUSE_ID` environment variable.").
					Default(""),
				service.NewBoolField(fWiden).
					Description("Allow lossless column type widenings when provisioning: a value out of range for a TINYINT, SMALLINT or INT column widens it to the narrowest integer type that holds the batch's values (a FLOAT column to DOUBLE), once, before the rows are written. A table with Iceberg reads on only widens INT to BIGINT and FLOAT to DOUBLE; a refused widening is logged, naming the column, and its rows fail alone. When false such rows fail, naming the column.").
					Default(false),
				service.NewStringField(fSchemaMeta).
					Description("The metadata key under which messages carry their Schema Registry schema, as `schema_registry_decode` stores it (`avro.store_schema_metadata`; compare Redpanda Connect's `iceberg` output `schema_evolution.schema_metadata`). When set, a table the output creates and every column it adds take the registry's types instead of types inferred from values: DECIMAL(p,s), TIMESTAMP or TIMESTAMP_NTZ, DATE, BINARY, STRUCT, ARRAY, MAP<STRING,…>, with the schema's nullability in a created table (columns added later are nullable). A new schema version's field is added as a column before its rows are written, and a NOT NULL column whose field it makes optional drops NOT NULL first (NOT NULL is never added); a field the table cannot take (a narrower column, without `widen`; another type; a union of two non-null types) refuses that schema's rows, naming the field, subject, version and schema id, and they go to the dead-letter table. A TIMESTAMP_NTZ value given as a time is stored as its UTC wall time (`reconcile.timestamp_ntz_from_zoned` is on), as the Avro decoder gives a local timestamp. Messages without the key are inferred as before. Needs `provision`. Mapping: docs/schema-registry.md. Empty (the default): off.").
					Default("").LintRule(schemaMetaLint),
				service.NewStringEnumField(fCommentsPol, "respect", "restore").
					Description("What to do with a managed column comment a human has edited: keep the edit (`respect`) or write the contract's text back (`restore`).").
					Default(string(catalog.PolicyRespect)),
				service.NewStringField(fContract).
					Description("Path to an ODCS data-contract YAML file whose column descriptions become column comments. Empty (the default) means none.").
					Default(""),
				service.NewStringMapField(fColumnDescs).
					Description("Column comments, by column name; merged over the contract's.").
					Default(map[string]any{}),
				service.NewStringEnumField(fRole, RoleDerived, RolePrimaryRaw).
					Description("`primary_raw` makes this table the recovery anchor: Iceberg reads and column mapping on, protocol reader >= 2 / writer >= 7, deletion vectors off. These are checked at connect and on `recheck_interval`; while any is unmet the output refuses to write, naming it.").
					Default(RoleDerived),
				service.NewDurationField(fRecheck).
					Description("How often the primary-raw preconditions are re-checked (a table property can change under a running pipeline).").
					Default(durationDefault(tablewriter.DefaultRecheckInterval)).LintRule(lintrule.Duration(fCatalog+"."+fRecheck)),
				service.NewBoolField(fDedupView).
					Description("Keep a deduplicating view beside the table, for readers who want each source record once: `SELECT * FROM <table> QUALIFY _zb_source IS NULL OR _zb_offset IS NULL OR row_number() OVER (PARTITION BY _zb_source, _zb_offset ORDER BY _zb_emit_ts) = 1`. It is created with the table (or at start-up when absent) and redefined with `ALTER VIEW … AS` whenever the output adds or widens a column, since a view's columns are fixed when it is defined; `ALTER VIEW` keeps the grants on it. Needs `coverage` (the source position columns) and `provision` (the output runs the DDL, as the view's owner: it needs `CREATE TABLE` on the schema and `SELECT` on the table; readers need `SELECT` on the view). A view that cannot be defined is logged with what to do and tried again a minute later at the next change; the rows keep flowing. Every query of the view windows the whole table; rows without a source position are all kept. See docs/kafka.md, \"Exactly once for readers\".").
					Default(false),
				service.NewStringField(fDedupViewName).
					Description("The deduplicating view's name, `catalog.schema.view`. Empty (the default) means `<table>"+catalog.DedupViewSuffix+"`, in the table's schema; with an interpolated `table` it must be empty (one view per table).").
					Default("").LintRule(lintrule.TableOrEmpty(fCatalog+"."+fDedupViewName)),
			).Description("Unity Catalog integration: describing, provisioning and evolving the table.").Advanced().
				LintRule(catalogLint(warehouseFromEnv)),
			service.NewObjectField(fSchemaReg, schemaregistry.ClientFields(fSchemaReg+".")...).
				Description("Decode Schema Registry framed values (the Confluent wire format: magic byte 0, a 4-byte schema id, the encoded value) in the output itself, the fast path: Avro values are read from their bytes straight into the Arrow columns sent, without a Go value per message; Protobuf and JSON Schema values are decoded by the registry's codec. The fields are `schema_registry_decode`'s (`url`, `tls`, `basic_auth`/`oauth`/`jwt`, `cache_duration`); values land as that processor lands them with `avro.preserve_logical_types` and `avro.raw_unions` on. With `catalog.provision` the table is created and evolved from the registry's schema (the types of `catalog.schema_metadata`, which must then be unset: one source of types). Messages that are not framed are read as JSON, as without it. A registry that cannot be reached, answers 5xx or refuses the credentials, or a `url` that answers 404 without a registry error (a wrong path or a proxy's page), holds the batch (retried with back-off, explained once, reported by the health endpoint); a value whose schema id the registry does not know, or that does not decode, fails alone (to the dead-letter table) with the registry's message. Use `schema_registry_decode` instead when a Bloblang step needs the decoded value. See docs/schema-registry.md, \"Fast path\". An empty `url` (the default): off.").
				Advanced(),
		).
		LintRule(componentLint).
		Example("Quickstart against the local emulator",
			"Generates rows into a table of the emulator started with `zerobus-emulator`.",
			`
output:
  zerobus:
    endpoint: http://127.0.0.1:50051
    workspace_url: http://127.0.0.1:8080
    table: main.default.events
    client_id: emulator
    client_secret: emulator-secret
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
	TLS          *tls.Config // nil: system roots (tls.enabled false)
	ProxyURL     *url.URL    // nil: the environment's
	WorkspaceURL string
	WorkspaceID  string
	Table        string
	// TableInterp is the per-message table; nil when table is static.
	TableInterp   *service.InterpolatedString
	MaxOpenTables int
	DLTable       string
	DLPayload     bool
	// Rescue is the rescue column; empty: none.
	Rescue string
	// CovSource and CovOffset are nil without coverage.
	CovSource, CovOffset *service.InterpolatedString
	CovTable             string
	// tableTmpl, orderingTmpl, covSourceTmpl and covOffsetTmpl are
	// TableInterp's, OrderingKey's, CovSource's and CovOffset's text when
	// it is only metadata references (nil otherwise): a record pack's
	// records are rendered from their metadata (rowString).
	tableTmpl, orderingTmpl, covSourceTmpl, covOffsetTmpl *metaTemplate

	ClientID     string
	ClientSecret string
	// cfgClientID and cfgClientSecret are the configured values (empty:
	// from the environment), kept to re-read the environment on reconnect.
	cfgClientID, cfgClientSecret string
	// credSource says where the credentials came from, for messages.
	credSource string

	MaxInFlight      int
	MaxInFlightBytes int
	Batching         service.BatchPolicy

	StreamsMin    int
	StreamsMax    int
	PerStreamMBps float64
	PeakMBps      float64
	PerStreamRows float64
	PeakRows      float64
	SelfSizing    bool
	GrowInterval  time.Duration
	ShrinkAfter   time.Duration

	OrderingKey *service.InterpolatedString
	orderingRaw string

	AckCapacity int
	AckTimeout  time.Duration

	Compression string

	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration

	NestedToString bool
	EpochUnit      string
	NTZFromZoned   bool

	CloseTimeout time.Duration
	WSTimeout    time.Duration

	Provision          bool
	WarehouseID        string
	Widen              bool
	CommentsPolicy     string
	ContractPath       string
	ColumnDescriptions map[string]string
	Role               string
	RecheckInterval    time.Duration
	SchemaMetadata     string
	// RegistryURL is schema_registry.url ("" is off); registryConf the
	// parsed schema_registry block, read by newOutput (its jwt key file is
	// read through the manager's file system); registryKnobs its start-up
	// log text, set then.
	RegistryURL   string
	registryConf  *service.ParsedConfig
	registryKnobs string
	// registryHolder is the block's decoder, set by newOutput (tests
	// shorten its back-off).
	registryHolder *schemaregistry.Holder
	DedupView      bool
	DedupViewName  string

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
	integer(&c.MaxOpenTables, fMaxOpenTables)
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
	float(&c.PerStreamRows, fStreams, fPerStreamRows)
	float(&c.PeakRows, fStreams, fPeakRows)
	boolean(&c.SelfSizing, fStreams, fSelfSizing)
	duration(&c.GrowInterval, fStreams, fGrowInterval)
	duration(&c.ShrinkAfter, fStreams, fShrinkAfter)
	integer(&c.AckCapacity, fAck, fAckCapacity)
	duration(&c.AckTimeout, fAck, fAckTimeout)
	str(&c.Compression, fCompression)
	duration(&c.KeepaliveTime, fKeepalive, fKATime)
	duration(&c.KeepaliveTimeout, fKeepalive, fKATimeout)
	boolean(&c.NestedToString, fReconcile, fNestedToStr)
	str(&c.EpochUnit, fReconcile, fEpochUnit)
	boolean(&c.NTZFromZoned, fReconcile, fNTZFromZoned)
	duration(&c.CloseTimeout, fCloseTimeout)
	duration(&c.WSTimeout, fWSTimeout)
	boolean(&c.Provision, fCatalog, fProvision)
	str(&c.WarehouseID, fCatalog, fWarehouseID)
	boolean(&c.Widen, fCatalog, fWiden)
	str(&c.CommentsPolicy, fCatalog, fCommentsPol)
	str(&c.Role, fCatalog, fRole)
	duration(&c.RecheckInterval, fCatalog, fRecheck)
	str(&c.SchemaMetadata, fCatalog, fSchemaMeta)
	boolean(&c.DedupView, fCatalog, fDedupView)
	str(&c.DedupViewName, fCatalog, fDedupViewName)
	if err != nil {
		return nil, err
	}
	if c.TLS, _, err = conf.FieldTLSToggled(fTLS); err != nil {
		return nil, fmt.Errorf("field %s: %w", fTLS, err)
	}
	if raw, _ := conf.FieldString(fProxyURL); strings.TrimSpace(raw) != "" {
		if c.ProxyURL, err = conf.FieldURL(fProxyURL); err != nil {
			return nil, err
		}
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
		} else {
			c.orderingTmpl = compileMetaTemplate(c.orderingRaw)
		}
	}
	if strings.Contains(c.Table, "${!") {
		if c.TableInterp, err = conf.FieldInterpolatedString(fTable); err != nil {
			return nil, err
		}
		c.tableTmpl = compileMetaTemplate(c.Table)
	}
	if c.Rescue, err = conf.FieldString(fRescue); err != nil {
		return nil, err
	}
	if conf.Contains(fDeadLetter) {
		if c.DLTable, err = conf.FieldString(fDeadLetter, fDLTable); err != nil {
			return nil, err
		}
		if c.DLPayload, err = conf.FieldBool(fDeadLetter, fDLPayload); err != nil {
			return nil, err
		}
	}
	if conf.Contains(fCoverage) {
		src, _ := conf.FieldString(fCoverage, "source")
		off, _ := conf.FieldString(fCoverage, "offset")
		if (src == "") != (off == "") {
			return nil, fmt.Errorf("field %s: source and offset must be set together", fCoverage)
		}
		if src != "" {
			if c.CovSource, err = conf.FieldInterpolatedString(fCoverage, "source"); err != nil {
				return nil, err
			}
			if c.CovOffset, err = conf.FieldInterpolatedString(fCoverage, "offset"); err != nil {
				return nil, err
			}
			c.covSourceTmpl, c.covOffsetTmpl = compileMetaTemplate(src), compileMetaTemplate(off)
			c.CovTable, _ = conf.FieldString(fCoverage, fDLTable)
		}
	}
	if conf.Contains(fSchemaReg) {
		if c.RegistryURL, err = conf.FieldString(fSchemaReg, "url"); err != nil {
			return nil, fmt.Errorf("field %s.url: %w", fSchemaReg, err)
		}
		if c.RegistryURL = strings.TrimSpace(c.RegistryURL); c.RegistryURL != "" {
			c.registryConf = conf.Namespace(fSchemaReg)
		}
	}
	if c.Batching, err = conf.FieldBatchPolicy(fBatching); err != nil {
		return nil, err
	}
	c.Batching, c.batchingDefaulted = effectiveBatching(c.Batching)

	c.cfgClientID, c.cfgClientSecret = c.ClientID, c.ClientSecret
	c.loadCredentials()
	if c.StreamsMin == 0 { // automatic
		c.StreamsMin = pool.DefaultConfig().MinStreams
		if c.TableInterp != nil {
			c.StreamsMin = 1 // many tables: one stream each
		}
	}
	if c.WarehouseID == "" {
		c.WarehouseID = os.Getenv(EnvWarehouseID)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// loadCredentials sets the credentials from the configured values or, for
// each one left empty, the environment (again on every call: a secret
// rotated in the environment is picked up on reconnect).
func (c *outputConfig) loadCredentials() {
	c.ClientID, c.ClientSecret, c.credSource = catalog.ClientCredentials(c.cfgClientID, c.cfgClientSecret)
}

// effectiveBatching adds a period to a count/byte_size policy that lacks
// one (the field's own default, count 4000 or 1 MiB every 1s, applies when it is
// absent). The string says what was done, for the start-up log.
func effectiveBatching(p service.BatchPolicy) (service.BatchPolicy, string) {
	if (p.Count > 1 || p.ByteSize > 0) && p.Period == "" {
		p.Period = DefaultBatchPeriod
		return p, "period added"
	}
	return p, "as configured"
}

func (c *outputConfig) validate() error {
	var errs []error
	add := func(err error, format string, args ...any) {
		if err != nil {
			errs = append(errs, fmt.Errorf(format+"%w", append(args, err)...))
		}
	}
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf("field "+format, args...))
		}
	}
	// One source of the table's types (registrySourceLint says the same).
	check(c.RegistryURL != "" && c.SchemaMetadata != "", "%s.url and %s.%s: both set, two sources of the table's types; with %s the output decodes the framed values and types the table from the registry itself: remove %s.%s (or remove %s and decode with schema_registry_decode)",
		fSchemaReg, fCatalog, fSchemaMeta, fSchemaReg, fCatalog, fSchemaMeta, fSchemaReg)
	tlsOn, urlErr := ingest.CheckURL(fEndpoint, c.Endpoint)
	add(urlErr, "")
	c.EndpointTLS = tlsOn
	_, err := ingest.CheckURL(fWorkspaceURL, c.WorkspaceURL)
	add(err, "")
	if c.ProxyURL != nil {
		add(ingest.CheckProxyURL(c.ProxyURL), "field %s: ", fProxyURL)
	}
	// Plaintext (loopback) URLs take neither TLS settings nor a proxy
	// (plaintextLint says the same in lint).
	var plain []string
	if urlErr == nil && !tlsOn {
		plain = append(plain, fEndpoint)
	}
	if wsTLS, err := ingest.CheckURL(fWorkspaceURL, c.WorkspaceURL); err == nil && !wsTLS {
		plain = append(plain, fWorkspaceURL)
	}
	if len(plain) > 0 {
		verb := map[bool]string{true: "is", false: "are"}[len(plain) == 1]
		check(c.TLS != nil, "%s.enabled: %s %s plaintext http://, which TLS settings do not apply to; use https:// (the emulator serves TLS with --tls-cert/--tls-key) or remove the %s block", fTLS, strings.Join(plain, " and "), verb, fTLS)
		check(c.ProxyURL != nil, "%s: %s %s plaintext http:// (loopback only), which is never sent through a proxy; use https:// or remove %s", fProxyURL, strings.Join(plain, " and "), verb, fProxyURL)
	}
	if c.TableInterp == nil {
		add(typemap.CheckTableName(c.Table), "field %s: ", fTable)
	}
	if c.DLTable != "" {
		add(typemap.CheckTableName(c.DLTable), "field %s.%s: ", fDeadLetter, fDLTable)
	}
	if c.CovTable != "" {
		add(typemap.CheckTableName(c.CovTable), "field %s.%s: ", fCoverage, fDLTable)
	}
	if c.WorkspaceID == "" && urlErr == nil {
		c.WorkspaceID, _ = ingest.WorkspaceIDFromEndpoint(c.Endpoint) // none for loopback: discovered
	}
	check(c.ClientID == "", "%s: empty and %s is not set", fClientID, EnvClientID)
	check(c.ClientSecret == "", "%s: empty and %s is not set", fClientSecret, EnvClientSecret)
	check(c.MaxOpenTables < 1, "%s: must be at least 1, got %d", fMaxOpenTables, c.MaxOpenTables)
	check(c.MaxInFlight < 1, "max_in_flight: must be at least 1, got %d", c.MaxInFlight)
	check(c.MaxInFlightBytes <= 0, "%s: must be positive, got %d", fMaxInFlightB, c.MaxInFlightBytes)
	check(c.StreamsMin < 1, "%s.%s: must be at least 1, got %d", fStreams, fStreamsMin, c.StreamsMin)
	check(c.StreamsMax < c.StreamsMin, "%s.%s: must be at least %s.%s (%d), got %d", fStreams, fStreamsMax, fStreams, fStreamsMin, c.StreamsMin, c.StreamsMax)
	check(c.PerStreamMBps <= 0, "%s.%s: must be positive, got %v", fStreams, fPerStreamMBps, c.PerStreamMBps)
	check(c.PeakMBps < 0, "%s.%s: must not be negative, got %v", fStreams, fPeakMBps, c.PeakMBps)
	check(c.PerStreamRows <= 0, "%s.%s: must be positive, got %v", fStreams, fPerStreamRows, c.PerStreamRows)
	check(c.PeakRows < 0, "%s.%s: must not be negative, got %v", fStreams, fPeakRows, c.PeakRows)
	check(c.GrowInterval <= 0, "%s.%s: must be positive, got %v", fStreams, fGrowInterval, c.GrowInterval)
	check(c.ShrinkAfter <= 0, "%s.%s: must be positive, got %v", fStreams, fShrinkAfter, c.ShrinkAfter)
	check(c.AckCapacity < 1, "%s.%s: must be at least 1, got %d", fAck, fAckCapacity, c.AckCapacity)
	check(c.AckTimeout <= 0, "%s.%s: must be positive, got %v", fAck, fAckTimeout, c.AckTimeout)
	check(c.KeepaliveTime < ingest.MinKeepaliveTime, "%s.%s: must be at least %v (gRPC's floor), got %v", fKeepalive, fKATime, ingest.MinKeepaliveTime, c.KeepaliveTime)
	check(c.KeepaliveTimeout <= 0, "%s.%s: must be positive, got %v", fKeepalive, fKATimeout, c.KeepaliveTimeout)
	check(c.CloseTimeout <= 0, "%s: must be positive, got %v", fCloseTimeout, c.CloseTimeout)
	check(c.WSTimeout <= 0, "%s: must be positive, got %v", fWSTimeout, c.WSTimeout)
	check(c.RecheckInterval <= 0, "%s.%s: must be positive, got %v", fCatalog, fRecheck, c.RecheckInterval)
	check(c.Provision && c.WarehouseID == "", "%s.%s: required when %s.%s is true (or set %s)", fCatalog, fWarehouseID, fCatalog, fProvision, EnvWarehouseID)
	check(c.Rescue != "" && !typemap.ValidIdentifier(c.Rescue), "%s: must be a column name of ASCII letters, digits and underscores, not starting with a digit, got %q", fRescue, c.Rescue)
	check(c.Rescue != "" && strings.HasPrefix(strings.ToLower(c.Rescue), "_zb_"), "%s: %q is in the output's reserved _zb_ namespace", fRescue, c.Rescue)
	check(c.Rescue != "" && c.Role == RolePrimaryRaw, "%s: needs a VARIANT column, which a table with Iceberg reads (%s.%s: %s) cannot have", fRescue, fCatalog, fRole, RolePrimaryRaw)
	check(c.DedupViewName != "" && !c.DedupView, "%s.%s: set without %s.%s: true", fCatalog, fDedupViewName, fCatalog, fDedupView)
	if c.DedupView {
		check(c.CovSource == nil, "%s.%s: needs %s.source and %s.offset, whose columns _zb_source and _zb_offset it deduplicates on", fCatalog, fDedupView, fCoverage, fCoverage)
		check(!c.Provision, "%s.%s: needs %s.%s: true, which runs the DDL that defines it", fCatalog, fDedupView, fCatalog, fProvision)
		check(c.DedupViewName != "" && c.TableInterp != nil, "%s.%s: one name cannot serve an interpolated table: leave it empty for <table>%s", fCatalog, fDedupViewName, catalog.DedupViewSuffix)
		check(c.DedupViewName != "" && strings.EqualFold(c.DedupViewName, c.Table), "%s.%s: names the table itself", fCatalog, fDedupViewName)
		if c.DedupViewName != "" {
			add(typemap.CheckTableName(c.DedupViewName), "field %s.%s: ", fCatalog, fDedupViewName)
		}
	}
	if c.ContractPath != "" {
		_, err := os.Stat(c.ContractPath)
		add(err, "field %s.%s: ", fCatalog, fContract)
	}
	return errors.Join(errs...)
}

// knobs returns every effective setting as key/value pairs for the one
// start-up log line. Secrets are reported only as set/unset.
func (c *outputConfig) knobs(poolSize int) []any {
	ordering := "(none: round-robin)"
	if c.OrderingKey != nil {
		ordering = c.orderingRaw
	}
	secret, proxy := "unset", "(environment)"
	if c.ClientSecret != "" {
		secret = "set"
	}
	if c.ProxyURL != nil {
		proxy = c.ProxyURL.Redacted()
	}
	kv := []any{
		"table", c.Table,
		"max_open_tables", c.MaxOpenTables,
		"dead_letter.table", c.DLTable,
		"rescue_column", c.Rescue,
		"coverage", c.CovSource != nil,
		"endpoint", c.Endpoint,
		"tls", c.EndpointTLS,
		"tls.enabled", c.TLS != nil,
		"tls.skip_cert_verify", c.TLS != nil && c.TLS.InsecureSkipVerify,
		"proxy_url", proxy,
		"keepalive.time", c.KeepaliveTime.String(),
		"keepalive.timeout", c.KeepaliveTimeout.String(),
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
		"streams.per_stream_rows_per_sec", c.PerStreamRows,
		"streams.peak_rows_per_sec", c.PeakRows,
		"streams.self_sizing", c.SelfSizing,
		"streams.grow_interval", c.GrowInterval.String(),
		"streams.shrink_after", c.ShrinkAfter.String(),
		"pool_size", poolSize,
		"ordering_key", ordering,
		"ack.channel_capacity", c.AckCapacity,
		"ack.timeout", c.AckTimeout.String(),
		"compression", c.Compression,
		"reconcile.nested_to_string", c.NestedToString,
		"reconcile.timestamp_epoch_unit", c.EpochUnit,
		"reconcile.timestamp_ntz_from_zoned", c.ntzFromZoned(),
		"close_timeout", c.CloseTimeout.String(),
		"workspace_timeout", c.WSTimeout.String(),
		"credentials", c.credSource,
		"catalog.provision", c.Provision,
		"catalog.warehouse_id", c.WarehouseID,
		"catalog.widen", c.Widen,
		"catalog.comments_policy", c.CommentsPolicy,
		"catalog.contract", c.ContractPath,
		"catalog.column_descriptions", len(c.ColumnDescriptions),
		"catalog.role", c.Role,
		"catalog.recheck_interval", c.RecheckInterval.String(),
		"catalog.schema_metadata", c.SchemaMetadata,
		"catalog.dedup_view", c.dedupViewLog(),
		"schema_registry", c.registryLog(),
	}
	if c.DLTable != "" {
		// include_payload means nothing without a dead-letter table: logged
		// beside the table, only with one.
		i := slices.Index(kv, any("dead_letter.table")) + 2
		kv = slices.Insert(kv, i, any("dead_letter.include_payload"), any(c.DLPayload))
	}
	return kv
}

// registryLog is the schema_registry block for the start-up log: "off", or
// its url (password redacted), auth mechanism (never its credentials), tls
// and cache_duration.
func (c *outputConfig) registryLog() string {
	switch {
	case c.RegistryURL == "":
		return "off"
	case c.registryKnobs != "":
		return c.registryKnobs
	}
	return "on"
}

// dedupViewLog is the deduplicating view for the start-up log: "off", or
// its name.
func (c *outputConfig) dedupViewLog() string {
	switch {
	case !c.DedupView:
		return "off"
	case c.DedupViewName != "":
		return c.DedupViewName
	}
	return "<table>" + catalog.DedupViewSuffix
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
