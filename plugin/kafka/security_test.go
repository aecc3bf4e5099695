package kafka

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/benthos-zerobus/benthos-zerobus/internal/testnet"
)

// connectErr parses conf and tries to connect an input with it.
func connectErr(t *testing.T, conf string) error {
	t.Helper()
	pc, err := Spec().ParseYAML(conf, nil)
	require.NoError(t, err)
	cfg, err := ParseConfig(pc)
	require.NoError(t, err)
	in := newInput(cfg, service.MockResources())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = in.Connect(ctx)
	if err == nil {
		_ = in.Close(ctx)
	}
	return err
}

// TestSASLMechanisms: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 authenticate
// against kfake and consume; a wrong password is refused at Connect.
func TestSASLMechanisms(t *testing.T) {
	for _, mech := range []string{MechPlain, MechScramSHA256, MechScramSHA512} {
		t.Run(mech, func(t *testing.T) {
			const topic = "secured"
			c := newCluster(t, topic, 1, kfake.EnableSASL(), kfake.Superuser(mech, "alice", "s3cret"))
			addrs := c.ListenAddrs()
			// Produce as the superuser.
			var m kgo.Opt
			switch mech {
			case MechPlain:
				m = kgo.SASL(plainMech("alice", "s3cret"))
			case MechScramSHA256:
				m = kgo.SASL(scram.Auth{User: "alice", Pass: "s3cret"}.AsSha256Mechanism())
			default:
				m = kgo.SASL(scram.Auth{User: "alice", Pass: "s3cret"}.AsSha512Mechanism())
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), m)
			require.NoError(t, err)
			require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr())
			cl.Close()

			sasl := func(pass string) string {
				return "sasl:\n  - mechanism: " + mech + "\n    username: alice\n    password: " + pass
			}
			in := newTestInput(t, yamlConf(addrs, "topics: [ "+topic+" ]", sasl("s3cret")))
			d := read(t, in)
			b, _ := d.msgs[0].AsBytes()
			assert.Equal(t, "x", string(b))
			ack(t, d, nil)

			require.Error(t, connectErr(t, yamlConf(addrs, "topics: [ "+topic+" ]", sasl("wrong"))), "a wrong password is refused")
		})
	}
}

// TestTLS: with tls.enabled and the CA in root_cas the input consumes from
// a TLS listener; without the CA (the system roots) the handshake fails.
func TestTLS(t *testing.T) {
	const topic = "tls"
	ca := testnet.NewCA(t)
	cert, err := tls.LoadX509KeyPair(ca.CertFile, ca.KeyFile)
	require.NoError(t, err)
	c := newCluster(t, topic, 1, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	addrs := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DialTLSConfig(ca.ClientTLS()))
	require.NoError(t, err)
	require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr())
	cl.Close()

	rootCAs := "tls:\n  enabled: true\n  root_cas: |\n    " + strings.ReplaceAll(strings.TrimSpace(string(ca.CAPEM)), "\n", "\n    ")
	in := newTestInput(t, yamlConf(addrs, "topics: [ "+topic+" ]", rootCAs))
	d := read(t, in)
	b, _ := d.msgs[0].AsBytes()
	assert.Equal(t, "x", string(b))
	ack(t, d, nil)

	require.Error(t, connectErr(t, yamlConf(addrs, "topics: [ "+topic+" ]", "tls:\n  enabled: true")), "an unknown CA is refused")
}

// TestZerobusDoesNotImportTheInput: plugin/zerobus, which Redpanda Connect
// builds import, must not pull in this package: Redpanda Connect has its own
// redpanda input and would see two.
func TestZerobusDoesNotImportTheInput(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/benthos-zerobus/benthos-zerobus/plugin/zerobus").CombinedOutput()
	require.NoError(t, err, string(out))
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/benthos-zerobus/benthos-zerobus/plugin/zerobus")
	assert.NotContains(t, deps, "github.com/benthos-zerobus/benthos-zerobus/plugin/kafka")
	assert.NotContains(t, deps, "github.com/benthos-zerobus/benthos-zerobus/internal/kafkain")
}

func plainMech(user, pass string) sasl.Mechanism {
	return plain.Auth{User: user, Pass: pass}.AsMechanism()
}

// lockedBuffer is a goroutine-safe log sink.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStartupLogNamesEveryKnobNoSecret: the start-up line names every knob
// and never a password or token.
func TestStartupLogNamesEveryKnobNoSecret(t *testing.T) {
	var logs lockedBuffer
	b := service.NewStreamBuilder()
	b.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, b.SetYAML(`
input:
  redpanda:
    seed_brokers: [ "127.0.0.1:1" ]
    topics: [ t ]
    consumer_group: g
    sasl:
      - mechanism: SCRAM-SHA-256
        username: alice
        password: hunter2-password
      - mechanism: OAUTHBEARER
        token: hunter2-token
output:
  drop: {}
`))
	stream, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = stream.Run(ctx)
	out := logs.String()
	require.Contains(t, out, "redpanda: seed_brokers=")
	for _, knob := range []string{
		"seed_brokers", "client_id", "tls.enabled", "sasl", "metadata_max_age", "request_timeout_overhead",
		"conn_idle_timeout", "tcp.connect_timeout", "tcp.keep_alive", "tcp.tcp_user_timeout", "topics", "regexp_topics_exclude",
		"consumer_group", "instance_id", "rack_id", "rebalance_timeout", "session_timeout", "heartbeat_interval", "start_offset",
		"fetch_max_bytes", "fetch_max_wait", "fetch_min_bytes", "fetch_max_partition_bytes", "transaction_isolation_level",
		"commit_period", "commit_on_ack", "partition_buffer_bytes", "topic_lag_refresh_period", "max_yield_batch_bytes",
		"max_unacked_per_partition", "max_unacked_bytes", "auto_replay_nacks",
	} {
		assert.Contains(t, out, knob+"=", "the start-up line names %s", knob)
	}
	assert.NotContains(t, out, "hunter2")
}
