// Package zerobusreplay is the zerobus_replay Benthos input: it reads a Unity
// Catalog table back through the workspace's Iceberg REST catalog (vended
// storage credentials, iceberg-go's scan) and emits one message per row, so a
// derived table can be rebuilt from the raw one after a source's retention
// has expired. It lives apart from plugin/zerobus so that a binary importing
// only the output does not link iceberg-go.
package zerobusreplay

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/lintrule"
	"github.com/benthos-zerobus/benthos-zerobus/internal/tablewriter"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Config field names, kept as constants so errors and the start-up log name
// exactly what the user wrote.
const (
	fWorkspaceURL    = "workspace_url"
	fTable           = "table"
	fClientID        = "client_id"
	fClientSecret    = "client_secret"
	fWarehouseID     = "warehouse_id"
	fWhere           = "where"
	fEmitFrom        = "emit_ts_from"
	fEmitTo          = "emit_ts_to"
	fSource          = "source"
	fOffsetFrom      = "offset_from"
	fOffsetTo        = "offset_to"
	fBatchSize       = "batch_size"
	fReadAhead       = "read_ahead"
	fConsistency     = "consistency"
	fForceTimeout    = "force_timeout"
	fRequirePrimary  = "require_primary_raw"
	fRequireComplete = "require_complete"
	fCoverageTable   = "coverage_table"
	fRefreshMargin   = "credential_refresh_margin"
	fWSTimeout       = "workspace_timeout"
)

// Environment variables the credentials fall back to: the output's
// (catalog's), so one credentials block serves both.
const (
	EnvClientID     = catalog.EnvClientID
	EnvClientSecret = catalog.EnvClientSecret
	EnvWarehouseID  = catalog.EnvWarehouseID
)

// maxReadAhead bounds read_ahead: more files fetched ahead than this only
// holds memory, the consumer cannot use them sooner.
const maxReadAhead = 16

// Consistency modes.
const (
	ConsistencyTolerate = "tolerate"
	ConsistencyForce    = "force"
)

// Reserved columns moved from the body into metadata: the ones the output
// writes.
const (
	ColSource = arrowconv.SourceColumn
	ColOffset = arrowconv.OffsetColumn
	ColEmitTS = arrowconv.EmitTimestampColumn
)

// CoverageSuffix names the coverage companion table of a raw table, as the
// output names it.
const CoverageSuffix = tablewriter.CoverageSuffix

func init() {
	err := service.RegisterBatchInput("zerobus_replay", Spec(), func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchInput, error) {
		cfg, err := ParseConfig(conf)
		if err != nil {
			return nil, err
		}
		return newInput(cfg, mgr), nil
	})
	if err != nil {
		panic(err)
	}
}

// Spec is the zerobus_replay config spec.
func Spec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Replays a Unity Catalog table (a primary_raw table written by the zerobus output) through the workspace's Iceberg REST catalog, one message per row, and ends when the selection has been read.").
		Description(`The table is read with the Apache Iceberg REST catalog Unity Catalog serves at `+"`{workspace_url}/api/2.1/unity-catalog/iceberg-rest`"+`, with OAuth M2M (the same credentials as the zerobus output) and storage credentials vended by the catalog (`+"`X-Iceberg-Access-Delegation: vended-credentials`"+`), reloaded before they expire. `+fmt.Sprintf("Data files are read %[1]d to a scan read (one file IO and its connections shared by them), decoded one file at a time and streamed one Arrow batch at a time; files of up to %[2]d MiB are fetched whole in one request, `read_ahead` of them ahead of the one being read. Memory therefore stays bounded whatever the table size: the batch being converted and the one decoded ahead of it, (1 + `read_ahead`) whole files of at most %[2]d MiB, and the Parquet footers of one scan read's %[1]d files (the scan plan itself holds one entry per data file selected).", filesPerRead, wholeFileMaxBytes>>20)+`

Each row becomes a message whose body is the row as a JSON object (the same canonical serialiser as the output's `+"`to_json`"+`); the reserved columns `+"`_zb_source`, `_zb_offset` and `_zb_emit_ts`"+` are moved into metadata of the same names.

Iceberg metadata is generated from the Delta table asynchronously, so a read may see an older snapshot. With `+"`consistency: tolerate`"+` the latest snapshot is read and the lag (Delta versions and rows not yet visible) is logged; with `+"`consistency: force`"+` the input runs `+"`MSCK REPAIR TABLE … SYNC METADATA`"+` on the SQL warehouse and waits, bounded by `+"`force_timeout`"+`, for the conversion to reach the Delta version seen at start — of the coverage table first, then of the table, so the coverage report sees the ranges of the rows replayed. A table with no Iceberg metadata yet cannot be loaded through the REST catalog: with `+"`force`"+` it is converted first, with `+"`tolerate`"+` the input retries until the catalog has converted it.

When the coverage table (`+"`<table>_zb_coverage`"+`) exists, the durable source/offset ranges it records are compared with the selection before reading and the gaps logged; `+"`require_complete`"+` refuses a selection with gaps.

A table that cannot be replayed as configured is refused, and the refusal ends the pipeline instead of being retried: the table does not exist, fails a primary_raw precondition (`+"`require_primary_raw`"+`; without it, has no Iceberg reads), the principal lacks a grant or its credentials are refused, the workspace or the Iceberg REST catalog answers another 4xx (but a 404 of the REST catalog for a table Unity Catalog has: its first conversion is pending), the selection needs a column the table lacks, or `+"`require_complete`"+` finds gaps. The input logs one ERROR line naming every failed precondition (or the gaps), replays nothing and ends; `+"`benthos-zerobus`"+` then exits with status 3 (a binary of your own that embeds the input sees the pipeline end, with the ERROR line, and can call `+"`zerobusreplay.Refused()`"+`). Errors that may pass — an unreachable workspace, a timeout, a 5xx, throttling, a conversion that did not finish within `+"`force_timeout`"+` — are retried with the engine's connection back-off, logged at each attempt.`).
		Fields(
			service.NewStringField(fWorkspaceURL).
				Description("Workspace URL, e.g. `https://<workspace>.cloud.databricks.com`: the OAuth token endpoint, the Unity Catalog API and the Iceberg REST catalog are under it.").
				LintRule(lintrule.URL(fWorkspaceURL)),
			service.NewStringField(fTable).
				Description("The table to replay, `catalog.schema.table`.").
				LintRule(lintrule.Table(fTable, false)),
			service.NewStringField(fClientID).
				Description("OAuth client id of the service principal. Empty means the `DATABRICKS_CLIENT_ID` environment variable.").
				Default(""),
			service.NewStringField(fClientSecret).
				Description("OAuth client secret of the service principal. Empty means the `DATABRICKS_CLIENT_SECRET` environment variable. Never logged.").
				Secret().Default(""),
			service.NewStringField(fWarehouseID).
				Description("SQL warehouse that runs `MSCK REPAIR TABLE … SYNC METADATA` for `consistency: force`. Empty means `DATABRICKS_WAREHOUSE_ID`.").
				Default(""),
			service.NewObjectField(fWhere,
				service.NewStringField(fEmitFrom).Description("Only rows whose `_zb_emit_ts` is at or after this RFC 3339 time.").Default("").
					LintRule(timeLint(fWhere+"."+fEmitFrom)),
				service.NewStringField(fEmitTo).Description("Only rows whose `_zb_emit_ts` is before this RFC 3339 time.").Default("").
					LintRule(timeLint(fWhere+"."+fEmitTo)),
				service.NewStringField(fSource).Description("Only rows whose `_zb_source` equals this.").Default(""),
				service.NewIntField(fOffsetFrom).Description("Only rows whose `_zb_offset` is at least this. 0 (the default) means no lower bound: offsets are never negative.").Default(0).
					LintRule(`root = if this < 0 { [ "field `+fWhere+"."+fOffsetFrom+`: must not be negative, got %v".format(this) ] } else { [] }`),
				service.NewIntField(fOffsetTo).Description("Only rows whose `_zb_offset` is below this (half-open, like the coverage ranges). 0 (the default) means no upper bound, since a window ending at 0 holds no row.").Default(0).
					LintRule(`root = if this < 0 { [ "field `+fWhere+"."+fOffsetTo+`: must not be negative, got %v".format(this) ] } else { [] }`),
			).Description("The selection. Every condition is optional; none selects all rows. Conditions are pushed into the Iceberg scan filter, so files outside the window are skipped.").
				Optional().
				LintRule(`root = if this.offset_from.or(0) > 0 && this.offset_to.or(0) > 0 && this.offset_from >= this.offset_to { [ "field `+fWhere+`: offset_from (%v) must be below offset_to (%v)".format(this.offset_from, this.offset_to) ] } else { [] }`),
			service.NewIntField(fBatchSize).
				Description("Maximum rows per message batch (and per decoded Arrow batch).").
				Default(1000).LintRule(`root = if this < 1 { [ "field `+fBatchSize+`: must be at least 1, got %v".format(this) ] } else { [] }`),
			service.NewIntField(fReadAhead).
				Description(fmt.Sprintf("How many data files of up to %d MiB are fetched whole ahead of the one being read, so that the next file's download overlaps turning the current one into messages (files are otherwise read one at a time). Each holds at most its size in memory: the raw file bytes the input holds are bounded by (1 + read_ahead) × %d MiB. 0 fetches each file when it is reached.", wholeFileMaxBytes>>20, wholeFileMaxBytes>>20)).
				Default(1).Advanced().
				LintRule(fmt.Sprintf(`root = if this < 0 || this > %d { [ "field %s: must be between 0 and %d, got %%v".format(this) ] } else { [] }`, maxReadAhead, fReadAhead, maxReadAhead)),
			service.NewStringEnumField(fConsistency, ConsistencyTolerate, ConsistencyForce).
				Description("`tolerate` reads the latest Iceberg snapshot and logs how far it lags the Delta table; `force` makes the catalog convert first (MSCK REPAIR TABLE … SYNC METADATA) and waits for it.").
				Default(ConsistencyTolerate),
			service.NewDurationField(fForceTimeout).
				Description("How long `consistency: force` waits for the conversion to reach the Delta version seen at start.").
				Default("2m").LintRule(lintrule.Duration(fForceTimeout)).Advanced(),
			service.NewBoolField(fRequirePrimary).
				Description("Refuse a table that fails the primary_raw preconditions (Iceberg reads on, column mapping, protocol, no deletion vectors, no VARIANT), naming each one.").
				Default(true),
			service.NewBoolField(fRequireComplete).
				Description("Refuse a selection for which the coverage table records gaps (or which it does not cover), naming them.").
				Default(false),
			service.NewStringField(fCoverageTable).
				Description("The coverage table. Empty means `<table>_zb_coverage`.").
				Default("").Advanced(),
			service.NewDurationField(fRefreshMargin).
				Description("Vended storage credentials are renewed (the table reloaded) when they expire within this margin.").
				Default("5m").LintRule(lintrule.Duration(fRefreshMargin)).Advanced(),
			service.NewDurationField(fWSTimeout).
				Description("Bound on every single workspace call (describe, statement, poll).").
				Default("30s").LintRule(lintrule.Duration(fWSTimeout)).Advanced(),
		)
}

func timeLint(field string) string {
	return `root = if this != "" && !this.re_match("^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})$") { [ "field ` + field + `: must be an RFC 3339 time such as 2026-01-02T03:04:05Z, got " + this.quote() ] } else { [] }`
}

// Where is the row selection; zero values mean "no condition".
type Where struct {
	EmitFrom, EmitTo     time.Time
	Source               string
	OffsetFrom, OffsetTo *int64
}

// Empty reports whether the selection is all rows.
func (w Where) Empty() bool {
	return w.EmitFrom.IsZero() && w.EmitTo.IsZero() && w.Source == "" && w.OffsetFrom == nil && w.OffsetTo == nil
}

// String renders the selection for the start-up log.
func (w Where) String() string {
	var p []string
	if !w.EmitFrom.IsZero() {
		p = append(p, ColEmitTS+" >= "+w.EmitFrom.Format(time.RFC3339Nano))
	}
	if !w.EmitTo.IsZero() {
		p = append(p, ColEmitTS+" < "+w.EmitTo.Format(time.RFC3339Nano))
	}
	if w.Source != "" {
		p = append(p, fmt.Sprintf("%s = %q", ColSource, w.Source))
	}
	if w.OffsetFrom != nil {
		p = append(p, fmt.Sprintf("%s >= %d", ColOffset, *w.OffsetFrom))
	}
	if w.OffsetTo != nil {
		p = append(p, fmt.Sprintf("%s < %d", ColOffset, *w.OffsetTo))
	}
	if len(p) == 0 {
		return "all rows"
	}
	return strings.Join(p, " AND ")
}

// Config is the parsed input configuration.
type Config struct {
	WorkspaceURL     string
	Table            string
	ClientID         string
	ClientSecret     string
	WarehouseID      string
	Where            Where
	BatchSize        int
	ReadAhead        int
	Consistency      string
	ForceTimeout     time.Duration
	RequirePrimary   bool
	RequireComplete  bool
	CoverageTable    string
	RefreshMargin    time.Duration
	WorkspaceTimeout time.Duration
	credSource       string
}

// ParseConfig reads and checks the configuration, filling the credentials
// and the warehouse from the environment when left empty.
func ParseConfig(conf *service.ParsedConfig) (Config, error) {
	var c Config
	var err error
	str := func(f string, dst *string) {
		if err == nil {
			*dst, err = conf.FieldString(f)
		}
	}
	str(fWorkspaceURL, &c.WorkspaceURL)
	str(fTable, &c.Table)
	str(fClientID, &c.ClientID)
	str(fClientSecret, &c.ClientSecret)
	str(fWarehouseID, &c.WarehouseID)
	str(fConsistency, &c.Consistency)
	str(fCoverageTable, &c.CoverageTable)
	if err != nil {
		return c, err
	}
	c.WorkspaceURL = strings.TrimRight(c.WorkspaceURL, "/")
	if err := typemap.CheckTableName(c.Table); err != nil {
		return c, fmt.Errorf("field %s: %w", fTable, err)
	}
	if c.CoverageTable == "" {
		c.CoverageTable = c.Table + CoverageSuffix
	} else if err := typemap.CheckTableName(c.CoverageTable); err != nil {
		return c, fmt.Errorf("field %s: %w", fCoverageTable, err)
	}
	c.ClientID, c.ClientSecret, c.credSource = catalog.ClientCredentials(c.ClientID, c.ClientSecret)
	if c.ClientID == "" || c.ClientSecret == "" {
		return c, errors.New("fields client_id/client_secret: OAuth client credentials are required (or env " + EnvClientID + "/" + EnvClientSecret + ")")
	}
	if c.WarehouseID == "" {
		c.WarehouseID = os.Getenv(EnvWarehouseID)
	}
	if c.Consistency == ConsistencyForce && c.WarehouseID == "" {
		return c, errors.New("field " + fWarehouseID + ": consistency: force runs MSCK REPAIR TABLE on a SQL warehouse, so it needs warehouse_id (or env " + EnvWarehouseID + ")")
	}
	if c.BatchSize, err = conf.FieldInt(fBatchSize); err != nil {
		return c, err
	}
	if c.BatchSize < 1 {
		return c, fmt.Errorf("field %s: must be at least 1, got %d", fBatchSize, c.BatchSize)
	}
	if c.ReadAhead, err = conf.FieldInt(fReadAhead); err != nil {
		return c, err
	}
	if c.ReadAhead < 0 || c.ReadAhead > maxReadAhead {
		return c, fmt.Errorf("field %s: must be between 0 and %d, got %d", fReadAhead, maxReadAhead, c.ReadAhead)
	}
	if c.ForceTimeout, err = conf.FieldDuration(fForceTimeout); err != nil {
		return c, err
	}
	if c.RefreshMargin, err = conf.FieldDuration(fRefreshMargin); err != nil {
		return c, err
	}
	if c.WorkspaceTimeout, err = conf.FieldDuration(fWSTimeout); err != nil {
		return c, err
	}
	if c.RequirePrimary, err = conf.FieldBool(fRequirePrimary); err != nil {
		return c, err
	}
	if c.RequireComplete, err = conf.FieldBool(fRequireComplete); err != nil {
		return c, err
	}
	if conf.Contains(fWhere) {
		w := conf.Namespace(fWhere)
		for _, f := range []struct {
			name string
			dst  *time.Time
		}{{fEmitFrom, &c.Where.EmitFrom}, {fEmitTo, &c.Where.EmitTo}} {
			s, err := w.FieldString(f.name)
			if err != nil {
				return c, err
			}
			if s == "" {
				continue
			}
			if *f.dst, err = time.Parse(time.RFC3339Nano, s); err != nil {
				return c, fmt.Errorf("field %s.%s: %w", fWhere, f.name, err)
			}
		}
		if c.Where.Source, err = w.FieldString(fSource); err != nil {
			return c, err
		}
		for _, f := range []struct {
			name string
			dst  **int64
		}{{fOffsetFrom, &c.Where.OffsetFrom}, {fOffsetTo, &c.Where.OffsetTo}} {
			v, err := w.FieldInt(f.name)
			if err != nil {
				return c, err
			}
			if v < 0 {
				return c, fmt.Errorf("field %s.%s: must not be negative, got %d", fWhere, f.name, v)
			}
			if v == 0 {
				continue // no bound
			}
			v64 := int64(v)
			*f.dst = &v64
		}
		if c.Where.OffsetFrom != nil && c.Where.OffsetTo != nil && *c.Where.OffsetFrom >= *c.Where.OffsetTo {
			return c, fmt.Errorf("field %s: offset_from (%d) must be below offset_to (%d)", fWhere, *c.Where.OffsetFrom, *c.Where.OffsetTo)
		}
		if !c.Where.EmitFrom.IsZero() && !c.Where.EmitTo.IsZero() && !c.Where.EmitFrom.Before(c.Where.EmitTo) {
			return c, fmt.Errorf("field %s: emit_ts_from (%s) must be before emit_ts_to (%s)", fWhere, c.Where.EmitFrom.Format(time.RFC3339Nano), c.Where.EmitTo.Format(time.RFC3339Nano))
		}
	}
	return c, nil
}
