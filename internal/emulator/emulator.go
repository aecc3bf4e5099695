// Package emulator is a local stand-in for a Databricks workspace and its
// Zerobus ingest service, reached over real sockets.
//
// One HTTP listener serves the workspace side: OAuth M2M tokens (plain
// workspace tokens and table-scoped Zerobus tokens), the Unity Catalog and SQL
// endpoints of internal/emulator/workspace, read-back of ingested rows, and an
// admin API for fault injection and statistics. One gRPC listener serves the
// Zerobus side: Arrow Flight DoPut and the JSON EphemeralStream, enforcing
// authentication, table scope, table existence, the schema contract,
// sequential offsets and the 10 MiB request cap the way the service does.
//
// Rows are durable before they are acknowledged: each table is stored as zstd
// Parquet files plus a Delta transaction log under the data directory, both
// fsync'd before the cumulative ack goes out, and the log is replayed when the
// emulator starts again on the same directory.
//
// The two halves share one workspace.Workspace: tables seeded from
// Config.Tables get the same CREATE-time properties as tables created through
// SQL, and every durable data commit moves the table's Delta version there,
// so Unity Catalog's delta_uniform_iceberg.converted_delta_version follows
// ingestion (IcebergLag later, or at once after MSCK REPAIR TABLE … SYNC
// METADATA). On start the data commits replayed from each Delta log are
// seeded back, so versions survive a restart.
//
// HTTP routes (workspace URL):
//
//	GET  /.well-known/databricks-config               discovery
//	GET  /oidc/.well-known/oauth-authorization-server  OAuth metadata
//	POST /oidc/v1/token                                 client_credentials tokens
//	     /api/2.1/unity-catalog/…, /api/2.0/sql/…       package workspace
//	GET  /emulator/v1/tables[/{full_name}[/rows?limit=N]]  read-back
//	GET|PUT /emulator/v1/faults, GET /emulator/v1/stats    admin
//	GET|PATCH /emulator/v1/grants                        writer grants
//	GET  /emulator/v1/health                             readiness, with the addresses
//	GET  /api/2.1/unity-catalog/iceberg-rest/v1/…        Iceberg REST catalog (icebergrest.go)
//
// A third listener (Config.S3Addr) serves table storage over an
// S3-compatible API, read-only, to holders of the temporary credentials the
// Iceberg REST catalog vends (s3.go); the Iceberg metadata it serves is
// generated over the stored Parquet files as tables are converted
// (iceberg.go).
package emulator

import (
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/benthos-zerobus/benthos-zerobus/internal/bufpool"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
	"github.com/benthos-zerobus/benthos-zerobus/internal/zbpb"
)

// Defaults used when the corresponding Config field is empty.
const (
	DefaultHTTPAddr     = "127.0.0.1:8080"
	DefaultGRPCAddr     = "127.0.0.1:50051"
	DefaultClientID     = "emulator"
	DefaultClientSecret = "emulator-secret"
	DefaultWorkspaceID  = "123"
	DefaultTokenTTL     = time.Hour
	// DefaultS3Addr is the --s3 default of the command, as Config.S3Addr
	// empty: a free loopback port. Readers learn the endpoint from the
	// Iceberg REST catalog (s3.endpoint), so no fixed port is needed, and a
	// fixed one (MinIO's 9000) collides with other services and with a
	// second emulator.
	DefaultS3Addr = "127.0.0.1:0"
	// DefaultCredentialTTL is the lifetime of vended storage credentials.
	DefaultCredentialTTL = time.Hour

	// MaxRequestBytes is the service's cap on one ingest request
	// (docs/protocol.md#endpoints: 10 MiB; databricks/zerobus-sdk issue
	// #36, 2025-12-25, and pull request #331, 2026-05-28).
	MaxRequestBytes = 10 << 20
)

// Config configures an emulator. The zero value is usable: loopback default
// addresses, default credentials, and a temporary data directory that Close
// removes.
type Config struct {
	// HTTPAddr and GRPCAddr are listen addresses; "127.0.0.1:0" picks a free
	// port (see Server.HTTPURL and Server.GRPCURL).
	HTTPAddr, GRPCAddr string
	// DataDir holds the tables (Parquet + Delta log) and the UC registry.
	// Empty means a fresh temporary directory removed by Close.
	DataDir string
	// Tables are created at start unless they already exist, each written as
	// "cat.sch.tbl:col TYPE [NOT NULL], …".
	Tables []string
	// ClientID and ClientSecret are the only OAuth M2M credentials accepted.
	ClientID, ClientSecret string
	// WorkspaceID names the workspace in discovery and in the Zerobus token
	// resource (api://databricks/workspaces/<id>/zerobusDirectWriteApi).
	WorkspaceID string
	// TokenTTL is the lifetime of issued tokens.
	TokenTTL time.Duration
	// IcebergLag is how long after a Delta commit a table with Iceberg reads
	// reports it in delta_uniform_iceberg.converted_delta_version (the
	// service converts asynchronously). Zero means workspace.DefaultIcebergLag;
	// a negative value means no lag.
	IcebergLag time.Duration
	// S3Addr is the listen address of the S3-compatible storage endpoint
	// serving table files to Iceberg readers. Empty means "127.0.0.1:0" (a
	// free port; see Server.S3URL), so that emulators started side by side
	// never collide.
	S3Addr string
	// CredentialTTL is the lifetime of the storage credentials the Iceberg
	// REST catalog vends; zero means DefaultCredentialTTL.
	CredentialTTL time.Duration
	// Faults are the initial fault-injection settings.
	Faults Faults
	// Grants is the Unity Catalog grant model of Zerobus writers; the zero
	// value is open (no grant is checked).
	Grants GrantsConfig
	// TLSCertFile and TLSKeyFile, when both set, are a PEM certificate
	// (chain) and its key: both listeners then serve TLS (HTTPS, and gRPC
	// over TLS) as the real workspace and Zerobus endpoints do, and the URLs
	// are https://. Empty means plaintext on loopback.
	TLSCertFile, TLSKeyFile string
	// AdminToken, when set, is the bearer token the admin API
	// (/emulator/v1/…) requires, from any client; empty means the admin API
	// answers loopback clients only (admin.go).
	AdminToken string
	// KafkaAddr, when set, is the listen address of an embedded Kafka
	// broker (kafka.go; "127.0.0.1:0" picks a free port, see
	// Server.KafkaAddr). Empty means no Kafka.
	KafkaAddr string
	// KafkaTopics are created on the Kafka broker at start unless they
	// already exist; they need KafkaAddr.
	KafkaTopics []KafkaTopic
	// SchemaRegistryAddr, when set, is the listen address of an embedded
	// Confluent Schema Registry (schemaregistry.go; "127.0.0.1:0" picks a
	// free port, see Server.SchemaRegistryURL). Empty means none.
	SchemaRegistryAddr string
	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger
}

func (c *Config) applyDefaults() {
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.GRPCAddr == "" {
		c.GRPCAddr = DefaultGRPCAddr
	}
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if c.ClientSecret == "" {
		c.ClientSecret = DefaultClientSecret
	}
	if c.WorkspaceID == "" {
		c.WorkspaceID = DefaultWorkspaceID
	}
	if c.TokenTTL <= 0 {
		c.TokenTTL = DefaultTokenTTL
	}
	if c.S3Addr == "" {
		c.S3Addr = "127.0.0.1:0"
	}
	if c.CredentialTTL <= 0 {
		c.CredentialTTL = DefaultCredentialTTL
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(discard{}, nil))
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Server is a running emulator.
type Server struct {
	cfg Config
	log *slog.Logger
	reg *workspace.Registry
	// ws serves the UC and SQL routes and tracks each table's Delta version
	// and Iceberg conversion; the table stores report data commits to it.
	ws     *workspace.Workspace
	tokens *tokenStore
	grants *grantStore
	// s3creds are the storage credentials vended with Iceberg tables.
	s3creds *s3Credentials
	stats   *statsCollector
	faults  atomic.Pointer[Faults]

	scheme  string // of both URLs: "https" with TLS, else "http"
	httpLn  net.Listener
	grpcLn  net.Listener
	httpSrv *http.Server
	grpcSrv *grpc.Server
	s3Ln    net.Listener
	s3Srv   *http.Server
	kafka   *kafkaBroker    // nil without Config.KafkaAddr
	schemas *schemaRegistry // nil without Config.SchemaRegistryAddr

	storesMu sync.Mutex
	stores   map[string]*tableStore // key: workspace.NormalizeName
	closed   bool

	removeDir bool
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup
}

// Start opens the data directory, recovers every table from its Delta log,
// creates the configured tables, and starts serving HTTP and gRPC.
func Start(cfg Config) (*Server, error) {
	cfg.applyDefaults()
	if err := cfg.Faults.Validate(); err != nil {
		return nil, err
	}
	if cfg.KafkaAddr == "" && len(cfg.KafkaTopics) > 0 {
		return nil, fmt.Errorf("emulator: --kafka-topic needs --kafka ADDR (e.g. --kafka 127.0.0.1:9092) to serve the topics on")
	}
	s := &Server{
		cfg:    cfg,
		log:    cfg.Logger,
		stats:  newStatsCollector(),
		stores: map[string]*tableStore{},
	}
	f := cfg.Faults.clone()
	s.faults.Store(&f)
	grants, err := newGrantStore(cfg.Grants)
	if err != nil {
		return nil, fmt.Errorf("emulator: grants: %w", err)
	}
	s.grants = grants

	if s.cfg.DataDir == "" {
		dir, err := os.MkdirTemp("", "zerobus-emulator-")
		if err != nil {
			return nil, fmt.Errorf("emulator: create temporary data dir: %w", err)
		}
		s.cfg.DataDir = dir
		s.removeDir = true
	}
	if err := s.open(); err != nil {
		s.closeStores()
		if s.removeDir {
			_ = os.RemoveAll(s.cfg.DataDir)
		}
		return nil, err
	}
	return s, nil
}

// open does the fallible part of Start: registry, signing key, tables,
// recovery, listeners.
func (s *Server) open() error {
	if err := os.MkdirAll(s.cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("emulator: create data dir: %w", err)
	}
	// A name with a dot can never collide with a catalog directory.
	reg, err := workspace.OpenRegistry(filepath.Join(s.cfg.DataDir, ".workspace"))
	if err != nil {
		return fmt.Errorf("emulator: %w", err)
	}
	s.reg = reg
	s.ws = workspace.New(reg, workspace.Options{Authorize: s.authorizeWorkspace, Now: time.Now, IcebergLag: s.cfg.IcebergLag, StorageLocation: tableLocation, OnDrop: s.onDrop})
	s.s3creds = newS3Credentials(time.Now)
	key, err := loadTokenKey(filepath.Join(s.cfg.DataDir, ".workspace", "token-signing-key"))
	if err != nil {
		return fmt.Errorf("emulator: %w", err)
	}
	s.tokens = newTokenStore(time.Now, key)
	if err := s.createConfiguredTables(); err != nil {
		return err
	}
	for _, t := range reg.List() {
		ts, err := s.store(t.FullName)
		if err != nil {
			return fmt.Errorf("emulator: recover table %s: %w", t.FullName, err)
		}
		// The Delta log is the record of data commits; without this a
		// restart would reset the table's Delta version to its DDL count.
		s.ws.SeedDataCommits(t.FullName, ts.dataCommitCount())
	}
	return s.listen()
}

func (s *Server) createConfiguredTables() error {
	// Parse every spec before creating anything, so a typo creates nothing.
	tables := make([]workspace.Table, 0, len(s.cfg.Tables))
	for _, spec := range s.cfg.Tables {
		name, defs, ok := strings.Cut(spec, ":")
		if !ok {
			return fmt.Errorf("emulator: table %q: want \"cat.sch.tbl:col TYPE, …\"", spec)
		}
		name = strings.TrimSpace(name)
		if _, _, _, err := typemap.ParseTableName(name); err != nil {
			return fmt.Errorf("emulator: %w", err)
		}
		cols, err := typemap.ParseColumns(defs)
		if err != nil {
			return fmt.Errorf("emulator: table %s: %w", name, err)
		}
		// A seeded table is one the emulator is asked to ingest into, so a
		// definition the service could never write is a configuration
		// error here (tables made by SQL DDL may still be unwritable and
		// are refused at stream open, as by the service).
		if _, err := serviceSchema(cols); err != nil {
			return fmt.Errorf("emulator: table %s: %w", name, err)
		}
		// The same CREATE-time properties a SQL CREATE TABLE gets (deletion
		// vectors, protocol versions, table features), so a seeded table
		// looks to a catalog client like one it created itself.
		tables = append(tables, workspace.WithCreateDefaults(workspace.Table{FullName: name, TableType: "MANAGED", Columns: cols}))
	}
	for _, t := range tables {
		_, err := s.reg.Create(t)
		switch {
		case errors.Is(err, workspace.ErrAlreadyExists):
			if old, ok := s.reg.Get(t.FullName); ok && !typemap.SameColumns(old.Columns, t.Columns) {
				s.log.Warn("table already exists with a different definition; keeping the stored one (use a fresh --data directory to start over)", "table", t.FullName)
			}
		case err != nil:
			return fmt.Errorf("emulator: create table %s: %w", t.FullName, err)
		}
	}
	return nil
}

// recvPoolIdle bounds the idle receive buffers of the gRPC server: a few
// frames per stream of a handful of clients.
const recvPoolIdle = 16 << 20

func (s *Server) listen() error {
	var tlsConf *tls.Config
	s.scheme = "http"
	if s.cfg.TLSCertFile != "" || s.cfg.TLSKeyFile != "" {
		cert, err := tls.LoadX509KeyPair(s.cfg.TLSCertFile, s.cfg.TLSKeyFile)
		if err != nil {
			return fmt.Errorf("emulator: TLS certificate %q and key %q: %w", s.cfg.TLSCertFile, s.cfg.TLSKeyFile, err)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		s.scheme = "https"
	}
	var err error
	s.httpLn, err = listenOn("workspace HTTP", "http", s.cfg.HTTPAddr)
	if err != nil {
		return err
	}
	s.grpcLn, err = listenOn("Zerobus gRPC", "grpc", s.cfg.GRPCAddr)
	if err != nil {
		s.httpLn.Close()
		return err
	}
	s.s3Ln, err = listenOn("S3 storage", "s3", s.cfg.S3Addr)
	if err != nil {
		s.httpLn.Close()
		s.grpcLn.Close()
		return err
	}
	if s.cfg.KafkaAddr != "" {
		ln, err := listenOn("Kafka", "kafka", s.cfg.KafkaAddr)
		if err == nil {
			s.kafka, err = startKafka(ln, kafkaDir(s.cfg.DataDir), s.cfg.KafkaTopics, tlsConf, s.log)
		}
		if err != nil {
			s.httpLn.Close()
			s.grpcLn.Close()
			s.s3Ln.Close()
			return err
		}
	}
	if s.cfg.SchemaRegistryAddr != "" {
		ln, err := listenOn("Schema Registry", "schema-registry", s.cfg.SchemaRegistryAddr)
		if err == nil {
			s.schemas, err = startSchemaRegistry(ln, schemaRegistryFile(s.cfg.DataDir), tlsConf, s.log)
		}
		if err != nil {
			s.httpLn.Close()
			s.grpcLn.Close()
			s.s3Ln.Close()
			if s.kafka != nil {
				s.kafka.cluster.Close()
			}
			return err
		}
	}
	// Each server gets its own copy: ServeTLS configures HTTP/2 on it.
	s.s3Srv = &http.Server{Handler: s.s3Handler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConf.Clone(), ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}

	// Failed handshakes (a client not trusting the CA) are the client's to
	// report; here they are debug logs, not stderr noise.
	s.httpSrv = &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConf.Clone(), ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	grpcOpts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.MaxSendMsgSize(64 << 20),
		// Client keepalive pings: permitted every 10 s while calls are
		// open, answered faster or without a call by GOAWAY too_many_pings
		// (after grpc-go's two strikes). The service publishes no policy and
		// the official SDK sets no keepalive of its own (databricks/zerobus-sdk
		// rust/sdk/src/arrow_stream.rs); so this is an assumption: the
		// allowance of common cloud front ends, and grpc-go's floor for a
		// client (keepalive.ClientParameters), where the client's keepalive
		// knob starts. A gRPC server's default (5 minutes) would refuse it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: false}),
		// DoPut frames are decoded with one copy instead of two
		// (flightCodec), into buffers not cleared first (bufpool, the
		// client's pool too: grpc-go's default pool clears every buffer it
		// hands out, a memclr of 16 KB per DATA frame received): what the
		// emulator costs per batch is charged to the client's machine in
		// the benchmarks.
		grpc.ForceServerCodecV2(newFlightCodec()),
		experimental.BufferPool(bufpool.New(recvPoolIdle)),
	}
	if tlsConf != nil {
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(tlsConf.Clone())))
	}
	s.grpcSrv = grpc.NewServer(grpcOpts...)
	flight.RegisterFlightServiceServer(s.grpcSrv, &flightService{srv: s})
	zbpb.RegisterZerobusServer(s.grpcSrv, &zerobusService{srv: s})

	s.wg.Add(3)
	go func() {
		defer s.wg.Done()
		serve := s.s3Srv.Serve
		if tlsConf != nil {
			serve = func(ln net.Listener) error { return s.s3Srv.ServeTLS(ln, "", "") }
		}
		if err := serve(s.s3Ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("s3 server stopped", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		serve := s.httpSrv.Serve
		if tlsConf != nil {
			// The certificate is in TLSConfig; ServeTLS adds HTTP/2.
			serve = func(ln net.Listener) error { return s.httpSrv.ServeTLS(ln, "", "") }
		}
		if err := serve(s.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server stopped", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		if err := s.grpcSrv.Serve(s.grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("grpc server stopped", "err", err)
		}
	}()
	s.log.Info("emulator started", "http", s.HTTPURL(), "grpc", s.GRPCURL(), "s3", s.S3URL(), "kafka", s.KafkaAddr(), "schema_registry", s.SchemaRegistryURL(), "data", s.cfg.DataDir, "admin_api", adminMode(s.cfg))
	return nil
}

// HTTPURL is the workspace URL ("http://127.0.0.1:port", https:// with
// TLS): the host for the Databricks SDK, the OAuth endpoints and the
// read-back API.
func (s *Server) HTTPURL() string { return s.scheme + "://" + s.httpLn.Addr().String() }

// GRPCURL is the Zerobus endpoint ("http://127.0.0.1:port", plaintext, or
// https:// with TLS).
func (s *Server) GRPCURL() string { return s.scheme + "://" + s.grpcLn.Addr().String() }

// S3URL is the S3-compatible storage endpoint ("http://127.0.0.1:port", or
// https:// with TLS) vended as s3.endpoint with Iceberg tables.
func (s *Server) S3URL() string { return s.scheme + "://" + s.s3Ln.Addr().String() }

// KafkaAddr is the embedded Kafka broker's host:port (a seed_brokers
// entry), or "" when the emulator serves no Kafka.
func (s *Server) KafkaAddr() string {
	if s.kafka == nil {
		return ""
	}
	return s.kafka.addr
}

// SchemaRegistryURL is the embedded Schema Registry's base URL (a
// schema_registry_decode url), or "" when the emulator serves none.
func (s *Server) SchemaRegistryURL() string {
	if s.schemas == nil {
		return ""
	}
	return s.schemas.url
}

// SchemaRegistry is the embedded registry (nil without
// Config.SchemaRegistryAddr): for tests that register schemas, or inject
// faults with its interceptors, in process.
func (s *Server) SchemaRegistry() *srfake.Registry {
	if s.schemas == nil {
		return nil
	}
	return s.schemas.reg
}

// Kafka is the embedded Kafka cluster (nil without Config.KafkaAddr): for
// tests that inspect or change it in process.
func (s *Server) Kafka() *kfake.Cluster {
	if s.kafka == nil {
		return nil
	}
	return s.kafka.cluster
}

// tableDir is the directory holding a table's files.
func (s *Server) tableDir(fullName string) string {
	cat, sch, tbl, _ := typemap.ParseTableName(workspace.NormalizeName(fullName))
	return filepath.Join(s.cfg.DataDir, cat, sch, tbl)
}

// DataDir is the directory holding the tables.
func (s *Server) DataDir() string { return s.cfg.DataDir }

// WorkspaceID is the workspace id served in discovery and token resources.
func (s *Server) WorkspaceID() string { return s.cfg.WorkspaceID }

// Registry is the Unity Catalog table registry the emulator serves.
func (s *Server) Registry() *workspace.Registry { return s.reg }

// Workspace is the UC/SQL side of the emulator: statement log and counters,
// Delta versions and Iceberg conversion state.
func (s *Server) Workspace() *workspace.Workspace { return s.ws }

// Faults returns the current fault-injection settings.
func (s *Server) Faults() Faults { return s.faults.Load().clone() }

// SetFaults replaces the fault-injection settings. Per-batch faults (error
// rate, ack latency, stalls, ack-only) apply at once; stream lifetime and the
// concurrency cap apply to streams opened afterwards.
func (s *Server) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	f = f.clone()
	s.faults.Store(&f)
	return nil
}

func (s *Server) currentFaults() *Faults { return s.faults.Load() }

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	st := s.stats.snapshot()
	s.storesMu.Lock()
	stores := make([]*tableStore, 0, len(s.stores))
	for _, ts := range s.stores {
		stores = append(stores, ts)
	}
	s.storesMu.Unlock()
	for _, ts := range stores {
		name := ts.fullName
		ent := st.Tables[name]
		ent.RowCount, ent.Commits, ent.DeltaVersion = ts.counts()
		st.Tables[name] = ent
	}
	return st
}

// RowsAcked sums TableStats.RowsAcked over the tables whose full name
// starts with prefix ("" for all), without Stats' copy of every table's
// streams: a bench polls it every few milliseconds while hundreds of tables
// are written, and Stats' copy, under the lock every stream's open and ack
// take, grows with the streams kept.
func (s *Server) RowsAcked(prefix string) int64 {
	return s.stats.rowsAcked(prefix)
}

// TableRowCount returns the number of durable rows stored for a table.
func (s *Server) TableRowCount(fullName string) (int64, error) {
	ts, err := s.existingStore(fullName)
	if err != nil {
		return 0, err
	}
	n, _, _ := ts.counts()
	return n, nil
}

// TableRows reads up to limit stored rows of a table, or the rows of a view
// (viewRows), (limit <= 0: all) as
// JSON-ready maps: decimals as strings, timestamps RFC 3339, binary as bytes
// (base64 once marshalled).
func (s *Server) TableRows(fullName string, limit int) ([]map[string]any, error) {
	if v, ok := s.ws.View(fullName); ok {
		return s.viewRows(v, limit)
	}
	ts, err := s.existingStore(fullName)
	if err != nil {
		return nil, err
	}
	t, _ := s.reg.Get(fullName)
	return ts.readRows(t.Columns, limit)
}

// viewRows evaluates view v over every row of its table (workspace.View
// Evaluate) and returns the first limit (all when limit <= 0). A view whose
// table is gone is ErrNotFound, as querying it is TABLE_OR_VIEW_NOT_FOUND.
func (s *Server) viewRows(v workspace.View, limit int) ([]map[string]any, error) {
	t, ok := s.reg.Get(v.Source)
	if !ok {
		return nil, fmt.Errorf("view %s reads table %s: %w", v.FullName, v.Source, workspace.ErrNotFound)
	}
	raw, err := s.TableRows(v.Source, 0)
	if err != nil {
		return nil, err
	}
	rows, err := v.Evaluate(raw, t)
	if err != nil {
		return nil, err
	}
	if limit > 0 && len(rows) > limit {
		rows = rows[:limit]
	}
	return rows, nil
}

func (s *Server) existingStore(fullName string) (*tableStore, error) {
	if _, ok := s.reg.Get(fullName); !ok {
		return nil, fmt.Errorf("table %s: %w", fullName, workspace.ErrNotFound)
	}
	return s.store(fullName)
}

// store returns the table's store, recovering it from disk on first use.
func (s *Server) store(fullName string) (*tableStore, error) {
	key := workspace.NormalizeName(fullName)
	s.storesMu.Lock()
	defer s.storesMu.Unlock()
	if s.closed {
		return nil, errors.New("emulator is closed")
	}
	if ts, ok := s.stores[key]; ok {
		if t, ok := s.reg.Get(key); !ok || t.TableID == ts.tableID {
			return ts, nil
		}
		// Dropped and created again, and the drop's own cleanup (onDrop)
		// has not run yet: the old store goes first, so nothing of the
		// dropped table is seen in the new one.
		s.retireStoreLocked(key, ts)
	}
	cat, sch, tbl, err := typemap.ParseTableName(key)
	if err != nil {
		return nil, err
	}
	ts, err := openTableStore(key, filepath.Join(s.cfg.DataDir, cat, sch, tbl), s.reg, s.log, s.ws.NoteDataCommit, s.ws.DeltaVersion)
	if err != nil {
		return nil, err
	}
	s.stores[key] = ts
	return ts, nil
}

// onDrop is the workspace's drop hook: the dropped table's streams end,
// its queued batches fail, its files are removed (so a table created again
// under its name starts empty at Delta version 0), and its grants go with it
// (see workspace.Workspace.drop for the source).
func (s *Server) onDrop(t workspace.Table) {
	key := workspace.NormalizeName(t.FullName)
	s.storesMu.Lock()
	if ts, ok := s.stores[key]; ok && ts.tableID == t.TableID {
		s.retireStoreLocked(key, ts)
	}
	s.storesMu.Unlock()
	s.grants.dropTable(key)
	s.log.Info("table dropped", "table", key, "table_id", t.TableID)
}

// retireStoreLocked drops the store ts of the table key and removes its
// files; storesMu is held, so no store of a table of the same name opens
// on the directory meanwhile.
func (s *Server) retireStoreLocked(key string, ts *tableStore) {
	delete(s.stores, key)
	ts.drop()
	if err := os.RemoveAll(ts.dir); err != nil {
		s.log.Error("remove the files of a dropped table", "table", key, "table_id", ts.tableID, "err", err)
	}
}

func (s *Server) closeStores() {
	s.storesMu.Lock()
	s.closed = true
	stores := s.stores
	s.storesMu.Unlock()
	for _, ts := range stores {
		ts.close()
	}
}

// Close stops both servers (open streams end UNAVAILABLE), waits for queued
// commits to finish, and removes a temporary data directory.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.grpcSrv.Stop()
		if err := s.httpSrv.Close(); err != nil {
			s.closeErr = fmt.Errorf("emulator: close http: %w", err)
		}
		if err := s.s3Srv.Close(); err != nil && s.closeErr == nil {
			s.closeErr = fmt.Errorf("emulator: close s3: %w", err)
		}
		s.wg.Wait()
		if s.schemas != nil {
			if err := s.schemas.close(); err != nil && s.closeErr == nil {
				s.closeErr = fmt.Errorf("emulator: close schema registry: %w", err)
			}
		}
		if s.kafka != nil {
			// Saves the topics and group offsets under the data directory.
			s.kafka.cluster.Close()
		}
		s.closeStores()
		if s.removeDir {
			if err := os.RemoveAll(s.cfg.DataDir); err != nil && s.closeErr == nil {
				s.closeErr = fmt.Errorf("emulator: remove data dir: %w", err)
			}
		}
	})
	return s.closeErr
}
