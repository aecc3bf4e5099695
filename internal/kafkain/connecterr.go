package kafkain

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Cause is the kind of fault that keeps the input from connecting: what
// the logs, health and readiness name, and what decides whether a failure
// is new (a new cause is logged at once, the same one only as a reminder).
type Cause string

// The causes, from the errors franz-go, Go's net and TLS packages and the
// broker's error codes give (see classify).
const (
	CauseSASL        Cause = "SASL refused"
	CauseTLSExpected Cause = "TLS expected, plaintext used"
	CauseTLSRefused  Cause = "TLS refused"
	CauseUnresolved  Cause = "host unresolvable"
	CauseRefused     Cause = "connection refused"
	CauseTimeout     Cause = "no answer"
	CauseNoTopic     Cause = "no such topic"
	CauseTopicAuth   Cause = "topic authorisation failed"
	CauseGroupAuth   Cause = "group authorisation failed"
	CauseOther       Cause = "cannot connect"
)

// ConnectError is a failed connection attempt with its cause named and
// what to check. Its text never holds a password: it names the SASL
// mechanism and user only.
type ConnectError struct {
	Cause Cause
	// Detail says what happened, in the user's terms.
	Detail string
	// Check says what to look at to fix it.
	Check string
	// Err is franz-go's (or Go's) error.
	Err error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("kafka input: %s: %s: check %s (%v)", e.Cause, e.Detail, e.Check, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }

// attempt is what a connection attempt saw besides its error: which
// request a broker failed on (franz-go returns a bare io.EOF whether the
// broker closed the connection during the SASL exchange or elsewhere),
// and the configuration the error names.
type attempt struct {
	// failedKey is the key of the last request whose write or read
	// failed, -1 when none did.
	failedKey int16
	// sasl is the first SASL mechanism and its user, as the error names
	// them ("SCRAM-SHA-256 as user alice"); "" without SASL.
	sasl string
	tls  bool
	// handshakeHung: the dial timed out although a plain TCP connection
	// to the broker opens, so the TLS handshake got no answer.
	handshakeHung bool
}

// during reports whether the attempt failed on a SASL request.
func (a attempt) duringSASL() bool {
	return a.failedKey == int16(kmsg.SASLHandshake) || a.failedKey == int16(kmsg.SASLAuthenticate)
}

// closed reports whether err is the broker closing (or resetting) the
// connection.
func closed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// classify names the cause of err, a failed connection attempt to the
// seed brokers (brokers), and says what to check. An error that already
// is a *ConnectError is returned as it is.
func classify(err error, a attempt, brokers []string) *ConnectError {
	var ce *ConnectError
	if errors.As(err, &ce) {
		return ce
	}
	mk := func(c Cause, detail, check string) *ConnectError {
		return &ConnectError{Cause: c, Detail: detail, Check: check, Err: err}
	}
	who := a.sasl
	if who == "" {
		who = "no SASL configured"
	}
	var (
		dns      *net.DNSError
		opErr    *net.OpError
		header   tls.RecordHeaderError
		alert    tls.AlertError
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		kErr     *kerr.Error
	)
	switch {
	case errors.As(err, &dns):
		return mk(CauseUnresolved, fmt.Sprintf("seed broker host %s does not resolve from this machine", dns.Name),
			"`seed_brokers` for a typo, and this machine's DNS settings")
	case errors.Is(err, syscall.ECONNREFUSED):
		at := fmt.Sprint(brokers)
		if errors.As(err, &opErr) && opErr.Addr != nil {
			at = opErr.Addr.String()
		}
		return mk(CauseRefused, fmt.Sprintf("nothing accepts connections at %s", at),
			"the host and port in `seed_brokers`, and that the broker is up and listening there")
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return mk(CauseSASL, fmt.Sprintf("the broker refused the credentials (%s)", who),
			"the password and the mechanism, and that the user exists on the broker")
	case errors.Is(err, kerr.UnsupportedSaslMechanism), errors.Is(err, kerr.IllegalSaslState):
		return mk(CauseSASL, fmt.Sprintf("the broker does not accept the SASL mechanism (%s)", who),
			"`sasl[].mechanism` against the mechanisms the broker's listener enables")
	case a.duringSASL() && closed(err):
		return mk(CauseSASL, fmt.Sprintf("the broker closed the connection during SASL authentication (%s)", who),
			"the password/mechanism, and that the user exists on the broker")
	case a.tls && (a.handshakeHung || dialFailed(err) && closed(err)):
		// A plaintext Kafka listener reads the ClientHello's first
		// bytes as the size of a request of some 370 MB: Apache Kafka
		// closes a connection whose request claims more than
		// socket.request.max.bytes (100 MiB by default,
		// https://kafka.apache.org/documentation/#brokerconfigs_socket.request.max.bytes);
		// kfake waits for the rest, and the handshake times out.
		return mk(CauseTLSRefused, "the broker accepts TCP connections but did not complete the TLS handshake: its listener is probably plaintext",
			"`tls.enabled` (false for a plaintext listener) or the port of the broker's TLS listener in `seed_brokers`")
	case errors.As(err, &header):
		return mk(CauseTLSRefused, "the broker answered the TLS handshake with something that is not TLS: its listener is plaintext",
			"`tls.enabled` (false for a plaintext listener) or the port of the broker's TLS listener in `seed_brokers`")
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid):
		return mk(CauseTLSRefused, "the broker's TLS certificate is not trusted",
			"`tls.root_cas`/`tls.root_cas_file` (the CA that signed the broker's certificate) and that the host in `seed_brokers` is one the certificate names")
	case errors.As(err, &alert):
		return mk(CauseTLSRefused, "the broker refused the TLS handshake",
			"`tls.client_certs` if the listener asks for a client certificate, and the TLS versions both sides allow")
	case strings.Contains(err.Error(), "plaintext connection speaking to a tls endpoint"),
		!a.tls && strings.Contains(err.Error(), "requires TLS but the client is using plaintext"):
		return mk(CauseTLSExpected, "the broker's listener speaks TLS but the input connects in plaintext",
			"`tls.enabled: true` (and `tls.root_cas` for a private CA)")
	case !a.tls && a.sasl == "" && closed(err):
		// A listener that closes at once a connection that neither
		// offers TLS nor authenticates wants one of the two.
		return mk(CauseTLSExpected, "the broker closed the connection at the first request: its listener wants TLS or SASL",
			"`tls.enabled: true` if the listener speaks TLS, else `sasl`")
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return mk(CauseGroupAuth, fmt.Sprintf("the broker does not let %s use the consumer group", userOf(a)),
			"the group's ACLs (DESCRIBE and READ on the `consumer_group`) or `consumer_group`")
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return mk(CauseTopicAuth, fmt.Sprintf("the broker does not let %s describe the topic", userOf(a)),
			"the topic's ACLs (DESCRIBE and READ) or `topics`")
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return mk(CauseNoTopic, "the topic does not exist on the broker",
			"`topics` for a typo, or create the topic (the input starts reading once it exists)")
	case isTimeout(err):
		return mk(CauseTimeout, fmt.Sprintf("no answer from %v in time", brokers),
			"the host and port in `seed_brokers`, firewalls on the way, and `tcp.connect_timeout`")
	case errors.As(err, &kErr):
		return mk(CauseOther, fmt.Sprintf("the broker answered %s", kErr.Message), "the broker's log for the error code")
	case a.tls && closed(err):
		return mk(CauseTLSRefused, "the broker closed the connection during the TLS handshake or the first request",
			"`tls` against the broker's listener (is it TLS?), and `sasl` if it wants authentication")
	}
	return mk(CauseOther, fmt.Sprintf("seed brokers %v", brokers), "that `seed_brokers` names the brokers' advertised addresses, and the broker's log")
}

// userOf names the attempt's user for an authorisation error.
func userOf(a attempt) string {
	if _, user, ok := strings.Cut(a.sasl, " as user "); ok {
		return "user " + user
	}
	return "this client (no SASL user)"
}

// dialFailed reports whether err is franz-go's failed dial (TCP, and TLS
// when enabled), which it words "unable to dial: …".
func dialFailed(err error) bool {
	return strings.Contains(err.Error(), "unable to dial")
}

// isTimeout reports whether err is a dial or read that timed out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
