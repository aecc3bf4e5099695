package kafka

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp"
	"github.com/benthos-zerobus/benthos-zerobus/internal/kafkain"
	"github.com/benthos-zerobus/benthos-zerobus/internal/testnet"
)

// firstConnectError parses conf, tries to connect an input with it once
// (the first failure of a cause is returned at once) and returns the
// error, with the input's health report after it.
func firstConnectError(t *testing.T, conf string) (*kafkain.ConnectError, healthhttp.InputHealth) {
	t.Helper()
	pc, err := Spec().ParseYAML(conf, nil)
	require.NoError(t, err)
	cfg, err := ParseConfig(pc)
	require.NoError(t, err)
	in := newInput(cfg, service.MockResources())
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	err = in.Connect(ctx)
	require.Error(t, err)
	require.Less(t, time.Since(start), 20*time.Second, "the first failure is returned at once")
	_ = in.Close(ctx)
	var bo *service.ErrBackOff
	require.True(t, errors.As(err, &bo), "the engine is told how long to wait: %v", err)
	assert.Greater(t, bo.Wait, time.Duration(0))
	var ce *kafkain.ConnectError
	require.True(t, errors.As(bo.Err, &ce), "a ConnectError: %v", err)
	return ce, in.health()
}

func saslConf(mech, user, pass string) string {
	return "sasl:\n  - mechanism: " + mech + "\n    username: " + user + "\n    password: " + pass
}

// TestConnectCauses: each fault that keeps the input from connecting is
// named, with what to check, in the error the engine logs and in the
// health report; the password is never in either.
func TestConnectCauses(t *testing.T) {
	const topic, password = "orders", "wr0ng-pa55word"
	ca := testnet.NewCA(t)
	cert, err := tls.LoadX509KeyPair(ca.CertFile, ca.KeyFile)
	require.NoError(t, err)
	serverTLS := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	rootCAs := "tls:\n  enabled: true\n  root_cas: |\n    " + strings.ReplaceAll(strings.TrimSpace(string(ca.CAPEM)), "\n", "\n    ")

	cases := []struct {
		name  string
		conf  func(t *testing.T) string
		cause kafkain.Cause
		says  []string
	}{{
		name: "SASL SCRAM wrong password, connection closed",
		conf: func(t *testing.T) string {
			c := newCluster(t, topic, 1, kfake.EnableSASL(), kfake.Superuser(MechScramSHA256, "alice", "s3cret"))
			return yamlConf(c.ListenAddrs(), "topics: [ "+topic+" ]", saslConf(MechScramSHA256, "alice", password))
		},
		cause: kafkain.CauseSASL,
		says:  []string{"the broker closed the connection during SASL authentication (SCRAM-SHA-256 as user alice): check the password/mechanism"},
	}, {
		name: "SASL PLAIN unknown user, connection closed",
		conf: func(t *testing.T) string {
			c := newCluster(t, topic, 1, kfake.EnableSASL(), kfake.Superuser(MechPlain, "alice", "s3cret"))
			return yamlConf(c.ListenAddrs(), "topics: [ "+topic+" ]", saslConf(MechPlain, "bob", password))
		},
		cause: kafkain.CauseSASL,
		says:  []string{"during SASL authentication (PLAIN as user bob)"},
	}, {
		name: "SASL refused with an error code",
		conf: func(t *testing.T) string {
			c := newCluster(t, topic, 1, kfake.EnableSASL(), kfake.Superuser(MechScramSHA512, "alice", "s3cret"))
			c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				resp := req.(*kmsg.SASLAuthenticateRequest).ResponseKind().(*kmsg.SASLAuthenticateResponse)
				resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
				return resp, nil, true
			})
			return yamlConf(c.ListenAddrs(), "topics: [ "+topic+" ]", saslConf(MechScramSHA512, "alice", password))
		},
		cause: kafkain.CauseSASL,
		says:  []string{"the broker refused the credentials (SCRAM-SHA-512 as user alice)", "check the password"},
	}, {
		name: "TLS listener, plaintext client",
		conf: func(t *testing.T) string {
			c := newCluster(t, topic, 1, kfake.TLS(serverTLS))
			return yamlConf(c.ListenAddrs(), "topics: [ "+topic+" ]")
		},
		cause: kafkain.CauseTLSExpected,
		says:  []string{"speaks TLS but the input connects in plaintext", "check `tls.enabled: true`"},
	}, {
		name: "plaintext listener, TLS client",
		conf: func(t *testing.T) string {
			c := newCluster(t, topic, 1)
			return yamlConf(c.ListenAddrs(), "topics: [ "+topic+" ]", rootCAs, "tcp:\n  connect_timeout: 1s")
		},
		cause: kafkain.CauseTLSRefused,
		says:  []string{"did not complete the TLS handshake: its listener is probably plaintext", "`tls.enabled`"},
	}, {
		name: "TLS certificate of an unknown CA",
		conf: func(t *testing.T) string {
			c := newCluster(t, topic, 1, kfake.TLS(serverTLS))
			return yamlConf(c.ListenAddrs(), "topics: [ "+topic+" ]", "tls:\n  enabled: true")
		},
		cause: kafkain.CauseTLSRefused,
		says:  []string{"certificate is not trusted", "`tls.root_cas`"},
	}, {
		name: "host unresolvable",
		conf: func(t *testing.T) string {
			return yamlConf([]string{"kafka.nope.invalid:9092"}, "topics: [ "+topic+" ]")
		},
		cause: kafkain.CauseUnresolved,
		says:  []string{"host kafka.nope.invalid does not resolve", "`seed_brokers`"},
	}, {
		name: "connection refused",
		conf: func(t *testing.T) string {
			return yamlConf([]string{fmt.Sprintf("127.0.0.1:%d", freePort(t))}, "topics: [ "+topic+" ]")
		},
		cause: kafkain.CauseRefused,
		says:  []string{"nothing accepts connections at 127.0.0.1:", "that the broker is up"},
	}, {
		name: "no such topic",
		conf: func(t *testing.T) string {
			c := newCluster(t, topic, 1)
			return yamlConf(c.ListenAddrs(), "topics: [ ordres ]", "consumer_group: g")
		},
		cause: kafkain.CauseNoTopic,
		says:  []string{"topic ordres: the topic does not exist", "or create the topic"},
	}, {
		name: "group not authorised",
		conf: func(t *testing.T) string {
			allow := func(r kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
				return kfake.ACL{Resource: r, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
			}
			c := newCluster(t, topic, 1, kfake.EnableSASL(), kfake.EnableACLs(),
				kfake.Superuser(MechScramSHA256, "admin", "admin"),
				kfake.User(MechScramSHA256, "bob", "s3cret",
					allow(kmsg.ACLResourceTypeTopic, topic, kmsg.ACLOperationDescribe),
					allow(kmsg.ACLResourceTypeTopic, topic, kmsg.ACLOperationRead)))
			return yamlConf(c.ListenAddrs(), "topics: [ "+topic+" ]", "consumer_group: g-bob", saslConf(MechScramSHA256, "bob", "s3cret"))
		},
		cause: kafkain.CauseGroupAuth,
		says:  []string{"consumer group g-bob: the broker does not let user bob use the consumer group", "the group's ACLs"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ce, h := firstConnectError(t, tc.conf(t))
			t.Logf("%v", ce)
			assert.Equal(t, tc.cause, ce.Cause, "%v", ce)
			msg := ce.Error()
			assert.True(t, strings.HasPrefix(msg, "kafka input: "+string(tc.cause)+": "), msg)
			for _, s := range tc.says {
				assert.Contains(t, msg, s)
			}
			assert.NotContains(t, msg, password)
			assert.False(t, h.Connected)
			assert.Equal(t, msg, h.Problem, "health names the cause")
			assert.Equal(t, 1, h.Attempts)
		})
	}
}

// TestReadyAndHealthNameTheCause: in a running stream, an input refused by
// SASL logs the cause once (not once a second), and /ready and the health
// endpoint answer 503 naming it.
func TestReadyAndHealthNameTheCause(t *testing.T) {
	const topic = "orders"
	c := newCluster(t, topic, 1, kfake.EnableSASL(), kfake.Superuser(MechScramSHA256, "alice", "s3cret"))
	var logs lockedBuffer
	b := service.NewStreamBuilder()
	b.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	mux := http.NewServeMux()
	b.SetHTTPMux(mux)
	require.NoError(t, b.SetYAML(fmt.Sprintf(`
input:
  redpanda:
    seed_brokers: [ %q ]
    topics: [ %s ]
    consumer_group: g
    sasl:
      - mechanism: SCRAM-SHA-256
        username: alice
        password: not-the-password
output:
  drop: {}
`, c.ListenAddrs()[0], topic)))
	stream, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = stream.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	const cause = "kafka input: SASL refused: the broker closed the connection during SASL authentication (SCRAM-SHA-256 as user alice)"
	require.Eventually(t, func() bool {
		code, body := get("/ready")
		return code == http.StatusServiceUnavailable && strings.Contains(body, cause)
	}, wait, 50*time.Millisecond, "/ready names the cause")
	var rep healthhttp.Report
	code, body := get(healthhttp.Path)
	require.NoError(t, json.Unmarshal([]byte(body), &rep), body)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	require.Len(t, rep.Inputs, 1, body)
	assert.Equal(t, healthhttp.StatusDown, rep.Inputs[0].Status)
	require.Len(t, rep.Inputs[0].Problems, 1)
	assert.Contains(t, rep.Inputs[0].Problems[0], cause)

	time.Sleep(4 * time.Second) // 4 attempts' worth at the engine's old pace of one a second
	out := logs.String()
	assert.Equal(t, 1, strings.Count(out, "Failed to connect to redpanda"), "the cause logged once:\n%s", out)
	assert.Equal(t, 1, strings.Count(out, "redpanda: seed_brokers="), "the settings logged once")
	assert.NotContains(t, out, "not-the-password")
}
