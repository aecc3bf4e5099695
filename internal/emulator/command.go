package emulator

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
)

// DefaultDataDir is where the command keeps tables when --data is not given.
func DefaultDataDir() string { return filepath.Join(os.TempDir(), "zerobus-emulator-data") }

// App is the zerobus-emulator command line (cmd/zerobus-emulator): it starts
// an emulator, prints how to reach it, and runs until SIGINT/SIGTERM.
func App(version string) *cli.App {
	return &cli.App{
		Name:    "zerobus-emulator",
		Version: version,
		Usage:   "Run a local Databricks workspace + Zerobus ingest emulator",
		Description: "Serves OAuth M2M, Unity Catalog, SQL statements and the Iceberg REST catalog " +
			"(/api/2.1/unity-catalog/iceberg-rest) over HTTP, Zerobus (Arrow Flight DoPut and the " +
			"JSON EphemeralStream) over gRPC, and table storage over an S3-compatible endpoint (--s3), " +
			"storing tables as Parquet + Delta log (+ Iceberg metadata once converted, see --iceberg-lag) " +
			"under --data. Every flag has a loopback default. With --kafka it also serves a Kafka broker " +
			"(franz-go's kfake), and the kafka-produce and kafka-offsets commands feed and inspect it; " +
			"with --schema-registry a Confluent Schema Registry (franz-go's srfake), which avro-produce registers a schema in.",
		Commands: append(kafkaCommands(), avroCommands()...),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "http", Value: DefaultHTTPAddr, Usage: "workspace HTTP listen address"},
			&cli.StringFlag{Name: "grpc", Value: DefaultGRPCAddr, Usage: "Zerobus gRPC listen address"},
			&cli.StringFlag{Name: "s3", Value: DefaultS3Addr, Usage: "S3-compatible storage listen address (default: a free port, vended as s3.endpoint): table files for Iceberg readers, read-only, signed with the credentials the Iceberg REST catalog vends"},
			&cli.StringFlag{Name: "kafka", Usage: "serve an embedded Kafka broker (franz-go's kfake) on this address, e.g. 127.0.0.1:9092 (127.0.0.1:0 picks a free port; --addr-file reports it): topics, records and committed group offsets are kept under --data; off when empty"},
			&cli.StringFlag{Name: "schema-registry", Usage: "serve an embedded Confluent Schema Registry (franz-go's srfake) on this address, e.g. 127.0.0.1:8081 (127.0.0.1:0 picks a free port; --addr-file reports it): its schemas are kept under --data; off when empty"},
			&cli.StringSliceFlag{Name: "kafka-topic", Usage: "create a Kafka topic 'NAME:PARTITIONS' on the --kafka broker unless it exists, e.g. orders:3 (repeatable)"},
			&cli.StringFlag{Name: "addr-file", Usage: "once every listener is up, write the chosen addresses here as DATABRICKS_HOST=…, ZEROBUS_ENDPOINT=…, ZEROBUS_EMULATOR_S3=… lines, and KAFKA_BROKERS=… with --kafka, SCHEMA_REGISTRY_URL=… with --schema-registry (with 127.0.0.1:0 addresses: the free ports picked)"},
			&cli.DurationFlag{Name: "credential-ttl", Value: DefaultCredentialTTL, Usage: "lifetime of the storage credentials vended by the Iceberg REST catalog"},
			&cli.StringFlag{Name: "data", Value: DefaultDataDir(), Usage: "data directory (tables persist across restarts)"},
			// Not a StringSliceFlag: that splits values on commas, and a
			// table spec is a comma-separated column list.
			&cli.GenericFlag{Name: "table", Value: &repeatedString{}, Usage: "create a table: 'cat.sch.tbl:col TYPE [NOT NULL], …' (repeatable)"},
			&cli.StringFlag{Name: "client-id", Value: DefaultClientID, Usage: "OAuth client id accepted"},
			&cli.StringFlag{Name: "client-secret", Value: DefaultClientSecret, Usage: "OAuth client secret accepted", EnvVars: []string{"ZEROBUS_EMULATOR_CLIENT_SECRET"}},
			&cli.StringFlag{Name: "workspace-id", Value: DefaultWorkspaceID, Usage: "workspace id"},
			&cli.DurationFlag{Name: "token-ttl", Value: DefaultTokenTTL, Usage: "lifetime of issued tokens"},
			&cli.DurationFlag{Name: "iceberg-lag", Value: workspace.DefaultIcebergLag, Usage: "delay before a Delta commit shows in converted_delta_version of tables with Iceberg reads (negative: none)"},
			&cli.DurationFlag{Name: "ack-latency", Usage: "fault: delay every ack by this long"},
			&cli.DurationFlag{Name: "stream-lifetime", Usage: "fault: rotate streams after this long (close signal, then UNAVAILABLE 6002); the service does so about every 15m (databricks/zerobus-sdk issues #40 and #45)"},
			&cli.DurationFlag{Name: "rotation-grace", Usage: "fault: close_stream_duration announced at rotation (default 2s)"},
			&cli.StringSliceFlag{Name: "error-rate", Usage: "fault: CODE=probability per batch, e.g. UNAVAILABLE=0.01 (repeatable)"},
			&cli.IntFlag{Name: "max-streams-per-table", Usage: "fault: concurrent stream cap per table (RESOURCE_EXHAUSTED beyond)"},
			&cli.Int64Flag{Name: "stream-max-rows-per-sec", Usage: fmt.Sprintf("fault: per-stream quota in rows/s (the service's default: %d; 15000 for a workspace still held to the former figure; 0: none)", ServiceStreamRowsPerSec)},
			&cli.Float64Flag{Name: "stream-max-mb-per-sec", Usage: fmt.Sprintf("fault: per-stream quota in MB/s of requests, MB = 10^6 bytes (the service's default: %d; 0: none)", ServiceStreamMBPerSec)},
			&cli.StringFlag{Name: "stream-quota-mode", Value: QuotaBackpressure, Usage: "how a stream over its quota is treated (both are assumptions): " + QuotaBackpressure + " (read and acked no faster than the quota) or " + QuotaReject + " (the stream fails RESOURCE_EXHAUSTED with a retry hint)"},
			&cli.BoolFlag{Name: "ack-stall", Usage: "fault: never ack (until cleared through the admin API)"},
			&cli.BoolFlag{Name: "ack-only", Usage: "fault: ack without storing, counting each batch from its header without decoding it (benchmarks); given at start-up it also runs the emulator's Go code on one CPU (GOMAXPROCS=1, unless GOMAXPROCS is set or --kafka serves a broker) to keep its CPU on the client's machine low"},
			&cli.StringFlag{Name: "grants", Value: GrantsOpen, Usage: "Unity Catalog grants of Zerobus writers: open (not checked) or strict (USE CATALOG, USE SCHEMA, and SELECT + MODIFY on the table itself, else PERMISSION_DENIED at stream open); change them at runtime with PATCH /emulator/v1/grants"},
			&cli.GenericFlag{Name: "grant", Value: &repeatedString{}, Usage: "grant privileges at start: 'PRINCIPAL:TYPE:FULL_NAME:PRIV[,PRIV]', e.g. 'emulator:TABLE:main.default.t:SELECT,MODIFY' (repeatable)"},
			&cli.StringFlag{Name: "tls-cert", Usage: "PEM certificate (chain): serve HTTPS and gRPC over TLS (needs --tls-key)"},
			&cli.StringFlag{Name: "tls-key", Usage: "PEM private key of --tls-cert"},
			&cli.StringFlag{Name: "admin-token", Usage: "bearer token the admin API (/emulator/v1/…: rows of every table, faults, grants) requires; without it the admin API answers loopback clients only", EnvVars: []string{AdminTokenEnv}},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := configFromFlags(c)
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			if procs, why := ackOnlyProcs(cfg, os.Getenv("GOMAXPROCS")); procs > 0 {
				runtime.GOMAXPROCS(procs)
				cfg.Logger.Info("ack-only: Go code runs on one CPU", "gomaxprocs", procs, "why", why)
			}
			srv, err := Start(cfg)
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			if path := c.String("addr-file"); path != "" {
				if err := srv.WriteAddrFile(path); err != nil {
					_ = srv.Close()
					return cli.Exit(err.Error(), 1)
				}
			}
			printBanner(c.App.Writer, srv, cfg)
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sig)
			<-sig
			fmt.Fprintln(c.App.Writer, "shutting down")
			return srv.Close()
		},
	}
}

func configFromFlags(c *cli.Context) (Config, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return Config{}, fmt.Errorf("--log-level: %w", err)
	}
	cfg := Config{
		HTTPAddr:           c.String("http"),
		KafkaAddr:          c.String("kafka"),
		SchemaRegistryAddr: c.String("schema-registry"),
		GRPCAddr:           c.String("grpc"),
		S3Addr:             c.String("s3"),
		CredentialTTL:      c.Duration("credential-ttl"),
		DataDir:            c.String("data"),
		Tables:             tablesFlag(c),
		ClientID:           c.String("client-id"),
		ClientSecret:       c.String("client-secret"),
		WorkspaceID:        c.String("workspace-id"),
		TokenTTL:           c.Duration("token-ttl"),
		IcebergLag:         c.Duration("iceberg-lag"),
		TLSCertFile:        c.String("tls-cert"),
		TLSKeyFile:         c.String("tls-key"),
		AdminToken:         c.String("admin-token"),
		Logger:             slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
		Faults: Faults{
			AckLatency:          c.Duration("ack-latency"),
			StreamLifetime:      c.Duration("stream-lifetime"),
			RotationGrace:       c.Duration("rotation-grace"),
			MaxStreamsPerTable:  c.Int("max-streams-per-table"),
			AckStall:            c.Bool("ack-stall"),
			AckOnly:             c.Bool("ack-only"),
			StreamMaxRowsPerSec: c.Int64("stream-max-rows-per-sec"),
			StreamMaxMBPerSec:   c.Float64("stream-max-mb-per-sec"),
			StreamQuotaMode:     strings.ToLower(c.String("stream-quota-mode")),
		},
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return Config{}, fmt.Errorf("--tls-cert and --tls-key: set both or neither")
	}
	for _, spec := range c.StringSlice("kafka-topic") {
		t, err := ParseKafkaTopic(spec)
		if err != nil {
			return Config{}, err
		}
		cfg.KafkaTopics = append(cfg.KafkaTopics, t)
	}
	if cfg.KafkaAddr == "" && len(cfg.KafkaTopics) > 0 {
		return Config{}, fmt.Errorf("--kafka-topic needs --kafka ADDR (e.g. --kafka 127.0.0.1:9092) to serve the topics on")
	}
	rates, err := parseErrorRates(c.StringSlice("error-rate"))
	if err != nil {
		return Config{}, err
	}
	cfg.Faults.ErrorRate = rates
	switch mode := c.String("grants"); mode {
	case GrantsOpen:
	case GrantsStrict:
		cfg.Grants.Strict = true
	default:
		return Config{}, fmt.Errorf("--grants %q: want open or strict", mode)
	}
	if r, ok := c.Generic("grant").(*repeatedString); ok && r != nil {
		for _, v := range r.values {
			g, err := parseGrantFlag(v)
			if err != nil {
				return Config{}, err
			}
			cfg.Grants.Grants = append(cfg.Grants.Grants, g)
		}
	}
	return cfg, cfg.Faults.Validate()
}

// ackOnlyProcs is the GOMAXPROCS the command sets for cfg (0: it leaves
// the runtime's, as given by gomaxprocsEnv or the CPUs), and why. An
// emulator started ack-only is a benchmark's stand-in for the service and
// shares the client's machine, where whatever it spends is charged to the
// client; the real service's CPU is not on that machine. On one CPU it no
// longer wakes a second thread for each HTTP/2 frame it reads (a futex
// wake and scheduler work per DATA frame): about a quarter less CPU per
// batch on a 2-core box, and one CPU second still acks 3 to 4 million rows,
// far more than the client sends. Not with --kafka, whose broker serves the
// client's reads, nor when GOMAXPROCS is set: that decides.
func ackOnlyProcs(cfg Config, gomaxprocsEnv string) (int, string) {
	if !cfg.Faults.AckOnly || cfg.KafkaAddr != "" || gomaxprocsEnv != "" {
		return 0, ""
	}
	return 1, "--ack-only stands in for the service on the client's machine; set GOMAXPROCS to choose"
}

// repeatedString is a repeatable string flag that keeps commas.
type repeatedString struct{ values []string }

func (r *repeatedString) Set(v string) error { r.values = append(r.values, v); return nil }
func (r *repeatedString) String() string     { return strings.Join(r.values, " ") }

func tablesFlag(c *cli.Context) []string {
	if r, ok := c.Generic("table").(*repeatedString); ok && r != nil {
		return append([]string(nil), r.values...)
	}
	return nil
}

// parseErrorRates parses "CODE=probability" items.
func parseErrorRates(items []string) (map[string]float64, error) {
	if len(items) == 0 {
		return nil, nil
	}
	out := map[string]float64{}
	for _, it := range items {
		code, p, ok := strings.Cut(it, "=")
		if !ok {
			return nil, fmt.Errorf("--error-rate %q: want CODE=probability", it)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return nil, fmt.Errorf("--error-rate %q: %w", it, err)
		}
		out[strings.ToUpper(strings.TrimSpace(code))] = v
	}
	return out, nil
}

func printBanner(w io.Writer, srv *Server, cfg Config) {
	if w == nil {
		w = os.Stdout
	}
	secret := "(as configured)"
	if cfg.ClientSecret == DefaultClientSecret {
		secret = DefaultClientSecret + " (default)"
	}
	fmt.Fprintf(w, `Zerobus emulator running.
  workspace URL (DATABRICKS_HOST): %s
  Zerobus endpoint:                %s
  S3 storage endpoint:             %s (read-only, vended credentials only)
  workspace id:                    %s
  client id / secret:              %s / %s
  data directory:                  %s
  read back:  GET %s/emulator/v1/tables/{catalog.schema.table}[/rows?limit=N]
  admin:      GET|PUT %s/emulator/v1/faults, GET %s/emulator/v1/stats, GET %s/emulator/v1/health
  admin API:  %s
  grants:     %s (GET|PATCH %s/emulator/v1/grants)
  iceberg:    %s/api/2.1/unity-catalog/iceberg-rest (warehouse=<catalog>; GET v1/config,
              v1/catalogs/{catalog}/namespaces[/{ns}[/tables[/{table}]]]; load table with
              X-Iceberg-Access-Delegation: vended-credentials returns S3 credentials valid %s)
Press Ctrl-C to stop.
`, srv.HTTPURL(), srv.GRPCURL(), srv.S3URL(), srv.WorkspaceID(), cfg.ClientID, secret, srv.DataDir(),
		srv.HTTPURL(), srv.HTTPURL(), srv.HTTPURL(), srv.HTTPURL(), adminMode(cfg), grantsMode(cfg.Grants), srv.HTTPURL(), srv.HTTPURL(), srv.cfg.CredentialTTL)
	for _, t := range srv.Registry().List() {
		fmt.Fprintf(w, "  table %s (%d columns)\n", t.FullName, len(t.Columns))
	}
	if addr := srv.KafkaAddr(); addr != "" {
		fmt.Fprintf(w, "  Kafka broker (seed_brokers):    %s\n", addr)
		for _, t := range cfg.KafkaTopics {
			fmt.Fprintf(w, "  kafka topic %s (%d partitions)\n", t.Name, len(srv.Kafka().PartitionInfos(t.Name)))
		}
	}
	if u := srv.SchemaRegistryURL(); u != "" {
		fmt.Fprintf(w, "  Schema Registry (url):          %s\n", u)
	}
}

func grantsMode(g GrantsConfig) string {
	if g.Strict {
		return GrantsStrict
	}
	return GrantsOpen
}
