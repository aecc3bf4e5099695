// Network causes: why this machine could not reach the Zerobus endpoint or
// the workspace, named in the user's terms (which host did not resolve,
// which address refused, why TLS failed, what timed out) with the field to
// check, so that an outage is explained by its cause rather than as "the
// service, the network or the workspace failed".

package ingest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"syscall"
)

// NetKind is the kind of a network failure.
type NetKind int

// The kinds of network failure NetCauseOf recognises.
const (
	// NetUnresolved: the host name does not resolve (DNS).
	NetUnresolved NetKind = iota + 1
	// NetRefused: the address refused the connection (nothing listens).
	NetRefused
	// NetTLS: the TLS handshake failed (certificate, or a server that does
	// not speak TLS).
	NetTLS
	// NetTimeout: the host did not answer in time (a black hole, a
	// firewall dropping packets, a proxy that hangs).
	NetTimeout
	// NetUnreachable: no route to the host, or the connection was reset.
	NetUnreachable
)

var netKindNames = [...]string{
	NetUnresolved:  "does not resolve",
	NetRefused:     "refused the connection",
	NetTLS:         "TLS handshake failed",
	NetTimeout:     "timed out",
	NetUnreachable: "unreachable",
}

func (k NetKind) String() string {
	if k > 0 && int(k) < len(netKindNames) {
		return netKindNames[k]
	}
	return fmt.Sprintf("netkind(%d)", int(k))
}

// The config fields a network cause points at.
const (
	FieldEndpoint  = "endpoint"
	FieldWorkspace = "workspace_url"
)

// NetCause is a network failure reaching the service named by Field (the
// output's endpoint, or its workspace_url: the token endpoint, workspace
// discovery, Unity Catalog), at Host, of kind Kind. Detail is what the
// failure said in particular (the certificate's complaint); Err the failure
// as it came.
type NetCause struct {
	Field  string
	Host   string
	Kind   NetKind
	Detail string
	Err    error
}

// Summary names the cause in a few words, the same for as long as the
// cause persists: "endpoint host x.invalid does not resolve".
func (c *NetCause) Summary() string {
	what := c.Field
	if what == "" {
		what = "a service"
	}
	host := c.Host
	if host == "" {
		host = "?"
	}
	switch c.Kind {
	case NetUnresolved:
		return fmt.Sprintf("%s host %s does not resolve from this machine", what, host)
	case NetRefused:
		return fmt.Sprintf("%s address %s refused the connection (nothing listens there)", what, host)
	case NetTLS:
		return fmt.Sprintf("TLS handshake with %s %s failed: %s", what, host, c.Detail)
	case NetTimeout:
		return fmt.Sprintf("%s %s did not answer in time", what, host)
	}
	return fmt.Sprintf("%s %s is unreachable: %s", what, host, c.Detail)
}

// Advice says what to check, naming the config field.
func (c *NetCause) Advice() string {
	field := "`" + c.Field + "`"
	if c.Field == "" {
		field = "`endpoint` and `workspace_url`"
	}
	switch c.Kind {
	case NetUnresolved:
		return fmt.Sprintf("check %s: host %s does not resolve from this machine; a typo, or DNS/proxy settings (proxy_url, HTTPS_PROXY)", field, c.Host)
	case NetRefused:
		return fmt.Sprintf("check %s: nothing accepts connections at %s; a wrong port, a service that is down, or a firewall that rejects", field, c.Host)
	case NetTLS:
		return fmt.Sprintf("check %s and tls: %s; an https:// URL pointing at a plaintext port, a proxy or firewall that intercepts TLS (add its CA with tls.root_cas_file), or a wrong host name", field, c.Detail)
	case NetTimeout:
		return fmt.Sprintf("check %s: %s does not answer; a firewall dropping packets, a proxy that hangs, or an outage", field, c.Host)
	}
	return fmt.Sprintf("check %s and the network path to %s (routes, firewall, proxy)", field, c.Host)
}

// Error is the summary, then the failure as it came.
func (c *NetCause) Error() string { return c.Summary() + " (" + c.Err.Error() + ")" }

// Unwrap returns the failure as it came.
func (c *NetCause) Unwrap() error { return c.Err }

// NetCauseOf returns the network cause of err, nil when err is not a
// network failure it recognises. field and host name the service the
// failure reached (either may be empty: then an HTTP request's URL, or the
// failure's own address, names it). A *NetCause already in err's chain is
// returned as it is.
//
// The typed errors of the standard library are looked for first through
// the chain (net.DNSError, ECONNREFUSED, x509 and tls errors, timeouts);
// gRPC flattens a dial failure into a status message, so the message is
// read next: "produced zero addresses" (its DNS resolver found none),
// "connection refused", "authentication handshake failed: …", "i/o timeout".
func NetCauseOf(field, host string, err error) *NetCause {
	if err == nil {
		return nil
	}
	var nc *NetCause
	if errors.As(err, &nc) {
		return nc
	}
	c := &NetCause{Field: field, Host: host, Err: err}
	// Only the workspace is reached over HTTP (the token endpoint,
	// workspace discovery, Unity Catalog): a failed HTTP request names it,
	// typed or flattened to text by a client that formats its errors with
	// %v (`Post "https://host/path": …`).
	rawURL := ""
	var ue *url.Error
	if errors.As(err, &ue) {
		rawURL = ue.URL
	} else if m := httpURLRE.FindStringSubmatch(err.Error()); m != nil {
		rawURL = m[1]
	}
	if rawURL != "" {
		c.Field = FieldWorkspace
		if u, perr := url.Parse(rawURL); perr == nil && u.Host != "" {
			c.Host = u.Host
		}
	}
	if c.Kind, c.Detail = typedKind(err, &c.Host); c.Kind == 0 {
		c.Kind, c.Detail = textKind(err.Error(), &c.Host)
	}
	if c.Kind == 0 || (c.Host == "" && c.Field == "") {
		return nil // none, or nothing to name: a bare deadline says no more
	}
	return c
}

// typedKind recognises the standard library's errors in err's chain; a
// refused or unresolved address found there replaces *host.
func typedKind(err error, host *string) (NetKind, string) {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		if dns.Name != "" {
			*host = dns.Name
		}
		if dns.IsTimeout {
			return NetUnresolved, "the DNS lookup timed out"
		}
		return NetUnresolved, dns.Err
	}
	var op *net.OpError
	hasOp := errors.As(err, &op)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		if hasOp && op.Addr != nil {
			*host = op.Addr.String()
		}
		return NetRefused, "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return NetUnreachable, "no route to host"
	}
	if kind, detail := tlsKind(err); kind != 0 {
		return kind, detail
	}
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return NetTimeout, "timed out"
	}
	if errors.Is(err, syscall.ECONNRESET) {
		return NetUnreachable, "the connection was reset"
	}
	return 0, ""
}

// tlsKind recognises a failed TLS handshake and says why.
func tlsKind(err error) (NetKind, string) {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
		verify   *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &unknown):
		return NetTLS, "the server's certificate is signed by an authority this machine does not trust (x509: unknown authority)"
	case errors.As(err, &hostname):
		return NetTLS, "the server's certificate is not valid for this host name (x509: " + hostname.Error() + ")"
	case errors.As(err, &invalid):
		return NetTLS, "the server's certificate is invalid (" + invalid.Error() + ")"
	case errors.As(err, &record):
		return NetTLS, "the server does not speak TLS (a plaintext server, or http:// meant)"
	case errors.As(err, &verify):
		return NetTLS, "the server's certificate failed verification (" + verify.Err.Error() + ")"
	}
	return 0, ""
}

var (
	httpURLRE = regexp.MustCompile(`(?:Get|Post|Put|Patch|Delete|Head) "(https?://[^"]+)"`)
	// lookupRE is Go's resolver message: "lookup HOST[ on SERVER]: no such host".
	lookupRE = regexp.MustCompile(`lookup ([^\s:]+)(?: on [^\s]+)?: (no such host|[^"]*?timeout|server misbehaving|[^"]*)`)
	dialRE   = regexp.MustCompile(`dial tcp ([^\s:]+:\d+|\[[^\]]+\]:\d+): `)
	tlsRE    = regexp.MustCompile(`(?:authentication handshake failed|tls|x509): ([^"]+)`)
)

// textKind recognises a failure from its text, as gRPC's status messages
// carry it; a host the text names replaces *host.
func textKind(text string, host *string) (NetKind, string) {
	addr := func() {
		if m := dialRE.FindStringSubmatch(text); m != nil {
			*host = m[1]
		}
	}
	switch {
	case strings.Contains(text, "produced zero addresses"), strings.Contains(text, "no such host"):
		if m := lookupRE.FindStringSubmatch(text); m != nil {
			*host = m[1]
		}
		return NetUnresolved, "no such host"
	case strings.Contains(text, "connection refused"):
		addr()
		return NetRefused, "connection refused"
	case strings.Contains(text, "server gave HTTP response to HTTPS client"),
		strings.Contains(text, "first record does not look like a TLS handshake"):
		return NetTLS, "the server does not speak TLS (a plaintext server, or http:// meant)"
	case strings.Contains(text, "x509: certificate signed by unknown authority"):
		return NetTLS, "the server's certificate is signed by an authority this machine does not trust (x509: unknown authority)"
	case strings.Contains(text, "x509:"), strings.Contains(text, "authentication handshake failed"), strings.Contains(text, "tls: "):
		detail := "the handshake failed"
		if m := tlsRE.FindStringSubmatch(text); m != nil {
			detail = strings.TrimSpace(m[1])
		}
		if strings.Contains(detail, "deadline exceeded") || strings.Contains(detail, "timeout") {
			addr()
			return NetTimeout, "the TLS handshake timed out"
		}
		return NetTLS, detail
	case strings.Contains(text, "no route to host"), strings.Contains(text, "network is unreachable"):
		addr()
		return NetUnreachable, "no route to host"
	case strings.Contains(text, "error reading server preface"):
		// gRPC gave up waiting for the server's first HTTP/2 frame: the
		// connection was accepted and nothing answered.
		addr()
		return NetTimeout, "no answer to the connection's handshake"
	case strings.Contains(text, "i/o timeout"), strings.Contains(text, "context deadline exceeded"),
		strings.Contains(text, "DeadlineExceeded"), strings.Contains(text, "Client.Timeout exceeded"):
		addr()
		return NetTimeout, "timed out"
	case strings.Contains(text, "connection reset by peer"):
		addr()
		return NetUnreachable, "the connection was reset"
	}
	return 0, ""
}
