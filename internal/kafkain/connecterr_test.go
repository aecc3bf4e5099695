package kafkain

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestClassify: every error franz-go and Go give for a fault the user can
// fix is named with its cause and what to check.
func TestClassify(t *testing.T) {
	brokers := []string{"kafka-1:9092"}
	dial := func(err error) error { return fmt.Errorf("unable to dial: %w", err) }
	const scram = "SCRAM-SHA-256 as user alice"
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 9092},
		Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	cases := []struct {
		name  string
		err   error
		a     attempt
		cause Cause
		says  []string
	}{
		{"dns", dial(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Name: "kafka-1", Err: "no such host", IsNotFound: true}}), attempt{},
			CauseUnresolved, []string{"host kafka-1 does not resolve", "check `seed_brokers` for a typo"}},
		{"refused", dial(refused), attempt{},
			CauseRefused, []string{"nothing accepts connections at 10.0.0.7:9092", "the broker is up"}},
		{"sasl error code", fmt.Errorf("x: %w", kerr.SaslAuthenticationFailed), attempt{sasl: scram},
			CauseSASL, []string{"the broker refused the credentials (SCRAM-SHA-256 as user alice)", "check the password"}},
		{"sasl mechanism", kerr.UnsupportedSaslMechanism, attempt{sasl: "SCRAM-SHA-512 as user alice"},
			CauseSASL, []string{"does not accept the SASL mechanism (SCRAM-SHA-512 as user alice)", "`sasl[].mechanism`"}},
		{"sasl closed during authenticate", io.EOF, attempt{sasl: scram, failedKey: int16(kmsg.SASLAuthenticate)},
			CauseSASL, []string{"the broker closed the connection during SASL authentication (SCRAM-SHA-256 as user alice): check the password/mechanism"}},
		{"sasl reset during handshake", syscall.ECONNRESET, attempt{sasl: "PLAIN as user bob", failedKey: int16(kmsg.SASLHandshake)},
			CauseSASL, []string{"during SASL authentication (PLAIN as user bob)"}},
		{"tls to a plaintext listener, header", dial(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), attempt{tls: true},
			CauseTLSRefused, []string{"its listener is plaintext", "`tls.enabled`"}},
		{"tls to a plaintext listener, closed", dial(io.EOF), attempt{tls: true},
			CauseTLSRefused, []string{"did not complete the TLS handshake", "`tls.enabled`"}},
		{"tls to a plaintext listener, hung", dial(context.DeadlineExceeded), attempt{tls: true, handshakeHung: true},
			CauseTLSRefused, []string{"did not complete the TLS handshake"}},
		{"unknown CA", dial(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), attempt{tls: true},
			CauseTLSRefused, []string{"certificate is not trusted", "`tls.root_cas`"}},
		{"wrong host name", dial(x509.HostnameError{Certificate: &x509.Certificate{}, Host: "kafka-1"}), attempt{tls: true},
			CauseTLSRefused, []string{"certificate is not trusted", "names"}},
		{"tls alert", dial(tls.AlertError(42)), attempt{tls: true},
			CauseTLSRefused, []string{"refused the TLS handshake", "`tls.client_certs`"}},
		{"plaintext to a tls listener, alert", errors.New("invalid large response size 352518912 > limit 104857600; the first three bytes received appear to be a tls alert record for TLS v1.2; is this a plaintext connection speaking to a tls endpoint?"), attempt{sasl: scram},
			CauseTLSExpected, []string{"speaks TLS but the input connects in plaintext", "`tls.enabled: true`"}},
		{"plaintext to a tls listener, first read", errors.New("broker closed the connection immediately during api versions negotiation, which often happens when the broker requires TLS but the client is using plaintext: is TLS missing?"), attempt{},
			CauseTLSExpected, []string{"`tls.enabled: true`"}},
		{"closed at once, neither tls nor sasl", io.EOF, attempt{failedKey: int16(kmsg.ApiVersions)},
			CauseTLSExpected, []string{"wants TLS or SASL"}},
		{"group", kerr.GroupAuthorizationFailed, attempt{sasl: scram},
			CauseGroupAuth, []string{"does not let user alice use the consumer group", "DESCRIBE and READ"}},
		{"group without sasl", kerr.GroupAuthorizationFailed, attempt{},
			CauseGroupAuth, []string{"this client (no SASL user)"}},
		{"topic auth", kerr.TopicAuthorizationFailed, attempt{sasl: scram},
			CauseTopicAuth, []string{"does not let user alice describe the topic"}},
		{"no topic", kerr.UnknownTopicOrPartition, attempt{},
			CauseNoTopic, []string{"does not exist", "create the topic"}},
		{"timeout", dial(context.DeadlineExceeded), attempt{},
			CauseTimeout, []string{"no answer from [kafka-1:9092]", "`tcp.connect_timeout`"}},
		{"other broker error", kerr.BrokerNotAvailable, attempt{},
			CauseOther, []string{"the broker answered BROKER_NOT_AVAILABLE"}},
		{"other", errors.New("something odd"), attempt{},
			CauseOther, []string{"seed brokers [kafka-1:9092]", "something odd"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.a.failedKey == 0 {
				tc.a.failedKey = -1
			}
			ce := classify(tc.err, tc.a, brokers)
			assert.Equal(t, tc.cause, ce.Cause, "%v", ce)
			msg := ce.Error()
			assert.True(t, strings.HasPrefix(msg, "kafka input: "+string(tc.cause)+": "), msg)
			assert.Contains(t, msg, ": check ", "says what to check")
			for _, s := range tc.says {
				assert.Contains(t, msg, s)
			}
			assert.ErrorIs(t, ce, tc.err, "franz-go's error stays reachable")
			assert.Same(t, ce, classify(fmt.Errorf("again: %w", ce), attempt{}, brokers), "a ConnectError is kept")
		})
	}
}

// TestDialerTimeout: a dial, the TLS handshake included, is bounded by
// tcp.connect_timeout, 10 s when unset: a plaintext listener that never
// answers a ClientHello must not hold Connect for ever.
func TestDialerTimeout(t *testing.T) {
	assert.Equal(t, DefaultConnectTimeout, DialConfig{}.dialer().Timeout)
	assert.Equal(t, 3*time.Second, DialConfig{ConnectTimeout: 3 * time.Second}.dialer().Timeout)
}
