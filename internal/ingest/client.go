package ingest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Defaults, modelled on the official SDKs.
const (
	DefaultReadyTimeout       = 30 * time.Second
	DefaultRecoveryAttempts   = 4
	DefaultRecoveryBackoff    = 2 * time.Second
	DefaultMaxInflightBytes   = 64 << 20
	DefaultMaxInflightBatches = 1000
	DefaultUserAgent          = "benthos-zerobus/dev"
	DefaultAckTimeout         = 60 * time.Second
)

// Observer receives the events the plugin turns into metrics and logs. Every
// method must be cheap and must not block. Embed NopObserver to implement only
// some hooks.
type Observer interface {
	// OnRotation is called when the service announces a stream rotation.
	OnRotation(table string)
	// OnReconnect is called when a logical stream replaces its connection;
	// reason is the classified cause (rotation included).
	OnReconnect(table string, reason error)
	// OnRetry is called when a reconnect attempt failed and another follows.
	OnRetry(table string, attempt int, err error)
	// OnFailure is called once when a logical stream fails for good, before
	// its waiters are woken; the stream's lock is held, so it must not call
	// back into the stream.
	OnFailure(table string, err *Error)
}

// NopObserver ignores every event.
type NopObserver struct{}

func (NopObserver) OnRotation(string)                {}
func (NopObserver) OnReconnect(string, error)        {}
func (NopObserver) OnRetry(string, int, error)       {}
func (NopObserver) OnFailure(table string, _ *Error) {}

// Config configures a Client.
type Config struct {
	// Endpoint is the Zerobus endpoint, https://<workspace-id>.zerobus.<region>...
	// http:// means plaintext gRPC and is only meant for loopback (the
	// emulator); a bare host:port uses TLS.
	Endpoint string
	// WorkspaceURL is where the OAuth token endpoint lives.
	WorkspaceURL string
	// WorkspaceID names the workspace in the token request; empty means
	// derived from the endpoint's first DNS label, or for IP/loopback
	// endpoints discovered from {WorkspaceURL}/.well-known/databricks-config.
	WorkspaceID  string
	ClientID     string
	ClientSecret string
	// CredentialSource says where ClientID/ClientSecret came from (e.g.
	// "env DATABRICKS_CLIENT_ID/DATABRICKS_CLIENT_SECRET"), for the message
	// of a token refusal; empty leaves it unsaid.
	CredentialSource string
	// Token overrides OAuth for every table (static tokens, tests).
	Token TokenSource
	// TLS is the TLS client config of https:// endpoints, gRPC and the
	// token requests alike (custom roots, client certificates); nil means
	// the system roots. http:// endpoints (loopback only) stay plaintext.
	TLS *tls.Config
	// ProxyURL, when set, is the HTTP CONNECT proxy of every TLS
	// connection, loopback included, overriding the environment. When nil,
	// both paths honour HTTPS_PROXY / NO_PROXY the way net/http does (gRPC
	// through grpc-go's own proxy support), never for a loopback host. A
	// plaintext connection (http://, loopback only) is never proxied.
	ProxyURL *url.URL
	// HTTPClient is used for token requests; nil means a client over
	// NewHTTPTransport(TLS, ProxyURL).
	HTTPClient *http.Client
	// Compression is the IPC body compression: "none" (default), "lz4_frame"
	// or "zstd".
	Compression string
	// UserAgent is sent as the gRPC user agent (product/version).
	UserAgent string
	// ReadyTimeout bounds the wait for the ready signal of each connection.
	ReadyTimeout time.Duration
	// RecoveryAttempts and RecoveryBackoff bound reconnects: a logical
	// stream that fails this many reconnect attempts in a row is poisoned.
	// Zero means the default (4 attempts, 2 s); a negative backoff means none.
	RecoveryAttempts int
	RecoveryBackoff  time.Duration
	// MaxInflightBytes and MaxInflightBatches bound what a logical stream
	// keeps unacknowledged; Submit blocks beyond them.
	MaxInflightBytes   int64
	MaxInflightBatches int
	// AckTimeout is how long a connection may go without any ack while rows
	// are outstanding before it is treated as dead and replaced (the SDKs'
	// server_lack_of_ack_timeout).
	AckTimeout time.Duration
	// MaxFrameBytes caps one IPC frame (one FlightData message without its
	// envelope). Batches are cut into frames of about FrameTargetBytes (or
	// MaxFrameBytes, if smaller); only a single larger row takes a frame up
	// to MaxFrameBytes. Zero, or anything above DefaultMaxFrameBytes, means
	// DefaultMaxFrameBytes: a frame never passes the service's request cap.
	MaxFrameBytes int
	// FrameTargetBytes is the frame size the encoder aims at when it cuts a
	// batch; zero means FrameTargetBytes (about 2 MiB, as the official SDK).
	// Benchmarks set it to compare frame sizes; it never passes MaxFrameBytes.
	FrameTargetBytes int
	// Observer receives reconnect, retry and failure events; may be nil.
	Observer Observer
	// Keepalive sets the HTTP/2 pings that find a dead connection; zero
	// fields mean the defaults (10 s, 5 s).
	Keepalive Keepalive
	// DialOptions are appended to the gRPC dial options (tests, proxies).
	DialOptions []grpc.DialOption
}

func (c Config) withDefaults() Config {
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.RecoveryAttempts <= 0 {
		c.RecoveryAttempts = DefaultRecoveryAttempts
	}
	if c.RecoveryBackoff < 0 {
		c.RecoveryBackoff = 0
	} else if c.RecoveryBackoff == 0 {
		c.RecoveryBackoff = DefaultRecoveryBackoff
	}
	if c.MaxInflightBytes <= 0 {
		c.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if c.MaxInflightBatches <= 0 {
		c.MaxInflightBatches = DefaultMaxInflightBatches
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.MaxFrameBytes <= 0 || c.MaxFrameBytes > DefaultMaxFrameBytes {
		c.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if c.UserAgent == "" {
		c.UserAgent = DefaultUserAgent
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	c.Keepalive = c.Keepalive.withDefaults()
	return c
}

// RedialObserver is an optional hook of the Config's Observer: OnRedial is
// called when the client replaced its gRPC connection because a call on it
// failed the way a silently dead transport makes calls fail (see
// transportSuspect); gen is the new connection's generation (the first is 1).
type RedialObserver interface {
	OnRedial(gen uint64, reason error)
}

// Client opens Zerobus streams over one gRPC connection at a time, which it
// replaces when the connection looks dead (see channels). It implements
// Opener. It is safe for concurrent use.
type Client struct {
	cfg     Config
	chans   *channels
	encoder *frameEncoder
	codec   flightCodec

	mu     sync.Mutex
	tokens map[string]TokenSource
}

var _ Opener = (*Client)(nil)

// NewClient validates cfg and creates the gRPC connection (lazily dialled).
func NewClient(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	target, creds, err := dialTarget(cfg.Endpoint, cfg.TLS)
	if err != nil {
		return nil, err
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Transport: NewHTTPTransport(cfg.TLS, cfg.ProxyURL)}
	}
	if cfg.Token == nil {
		if cfg.WorkspaceURL == "" || cfg.ClientID == "" || cfg.ClientSecret == "" {
			return nil, errors.New("zerobus client: workspace URL, client id and client secret are required without a token override")
		}
		if cfg.WorkspaceID == "" {
			// Derivation fails for loopback endpoints: the token source
			// then discovers the id from the workspace.
			cfg.WorkspaceID, _ = WorkspaceIDFromEndpoint(cfg.Endpoint)
		}
	}
	enc, err := newFrameEncoder(cfg.Compression, cfg.MaxFrameBytes, cfg.FrameTargetBytes)
	if err != nil {
		return nil, fmt.Errorf("zerobus client: %w", err)
	}
	codec, err := newFlightCodec()
	if err != nil {
		return nil, fmt.Errorf("zerobus client: %w", err)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithUserAgent(cfg.UserAgent),
		cfg.Keepalive.dialOption(),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(math.MaxInt32),
			grpc.MaxCallSendMsgSize(math.MaxInt32),
		),
	}
	proxyOpts, target, err := proxyDialOptions(target, creds.Info().SecurityProtocol == "insecure", cfg.ProxyURL, cfg.UserAgent)
	if err != nil {
		return nil, fmt.Errorf("zerobus client: %w", err)
	}
	opts = append(opts, proxyOpts...)
	opts = append(opts, cfg.DialOptions...)
	dial := func() (*grpc.ClientConn, error) {
		conn, err := grpc.NewClient(target, opts...)
		if err != nil {
			return nil, fmt.Errorf("zerobus client: dial %s: %w", target, err)
		}
		return conn, nil
	}
	var onRedial func(uint64, error)
	if ro, ok := cfg.Observer.(RedialObserver); ok {
		onRedial = ro.OnRedial
	}
	chans, err := newChannels(dial, onRedial)
	if err != nil {
		return nil, err
	}
	return &Client{
		cfg:     cfg,
		chans:   chans,
		encoder: enc,
		codec:   codec,
		tokens:  make(map[string]TokenSource),
	}, nil
}

// dialTarget turns an endpoint URL into a gRPC target and credentials: TLS
// with custom (nil: the system roots) for https and a bare host:port,
// plaintext for http.
func dialTarget(endpoint string, custom *tls.Config) (string, credentials.TransportCredentials, error) {
	if endpoint == "" {
		return "", nil, errors.New("zerobus client: endpoint is required")
	}
	if !strings.Contains(endpoint, "://") {
		host, _, _ := net.SplitHostPort(endpoint)
		return endpoint, credentials.NewTLS(endpointTLS(custom, host)), nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", nil, fmt.Errorf("zerobus client: parse endpoint: %w", err)
	}
	host := u.Host
	switch u.Scheme {
	case "https":
		if u.Port() == "" {
			host += ":443"
		}
		return host, credentials.NewTLS(endpointTLS(custom, u.Hostname())), nil
	case "http":
		// Plaintext: only meant for loopback endpoints such as the emulator.
		if u.Port() == "" {
			host += ":80"
		}
		return host, insecure.NewCredentials(), nil
	default:
		return "", nil, fmt.Errorf("zerobus client: endpoint scheme %q is not http or https", u.Scheme)
	}
}

// TokenSource returns the token source used for table, creating the
// per-table OAuth source on first use.
func (c *Client) TokenSource(table string) (TokenSource, error) {
	if c.cfg.Token != nil {
		return c.cfg.Token, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts, ok := c.tokens[table]; ok {
		return ts, nil
	}
	ts, err := NewTableTokenSource(c.cfg.HTTPClient, c.cfg.WorkspaceURL, c.cfg.WorkspaceID, c.cfg.ClientID, c.cfg.ClientSecret, table, WithCredentialSource(c.cfg.CredentialSource))
	if err != nil {
		return nil, err
	}
	c.tokens[table] = ts
	return ts, nil
}

// Open opens a logical Arrow stream to table and waits for the service's
// ready signal. Transient failures are retried within the recovery budget;
// other failures return at once as an *Error.
func (c *Client) Open(ctx context.Context, table string, schema *arrow.Schema) (Stream, error) {
	return c.OpenArrowStream(ctx, table, schema)
}

// OpenArrowStream is Open with the concrete type, for callers that want the
// diagnostics it offers.
func (c *Client) OpenArrowStream(ctx context.Context, table string, schema *arrow.Schema) (*ArrowStream, error) {
	if _, _, _, err := splitTable(table); err != nil {
		return nil, &Error{Class: FatalConfig, Code: codes.InvalidArgument, Err: err}
	}
	if schema == nil {
		return nil, &Error{Class: FatalConfig, Code: codes.InvalidArgument, Err: errors.New("schema is required")}
	}
	ts, err := c.TokenSource(table)
	if err != nil {
		return nil, &Error{Class: FatalConfig, Code: codes.InvalidArgument, Err: err}
	}
	schemaFrame, err := c.encoder.schemaHeader(schema)
	if err != nil {
		return nil, &Error{Class: FatalConfig, Code: codes.InvalidArgument, Err: fmt.Errorf("stream to %s: %w", table, err)}
	}
	s := newArrowStream(c, streamObserver(ctx, c.cfg.Observer), table, schema, connParams{
		channels:    c.chans,
		codec:       c.codec,
		token:       ts,
		table:       table,
		schemaFrame: schemaFrame,
		ready:       c.cfg.ReadyTimeout,
		endpoint:    c.endpointHost(),
	})
	if err := s.connectFirst(ctx); err != nil {
		return nil, fmt.Errorf("open stream to %s: %w", table, WithGrantHint(err, table, c.cfg.ClientID))
	}
	return s, nil
}

// endpointHost is the endpoint's host:port (its host, without a port), as a
// network failure names it.
func (c *Client) endpointHost() string {
	if u, err := url.Parse(c.cfg.Endpoint); err == nil && u.Host != "" {
		return u.Host
	}
	return c.cfg.Endpoint
}

// Close closes the gRPC connections; streams still open on them fail.
func (c *Client) Close() error { return c.chans.close() }

// ConnectionGen returns the generation of the gRPC connection new streams
// open on: 1 at first, one more each time a dead-looking connection was
// replaced.
func (c *Client) ConnectionGen() uint64 { return c.chans.gen() }
