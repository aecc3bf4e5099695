// Package testnet holds the network fixtures of TLS and proxy tests: a
// throw-away certificate authority and server certificate made at test time
// (no key material in the repository, nothing that expires), and an HTTP
// CONNECT proxy on loopback that counts the tunnels it opens.
package testnet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files is a CA and a server certificate it signed, as PEM, with the server
// certificate and key also written to files (for the emulator's flags).
type Files struct {
	CAPEM    []byte // the CA certificate: what a client trusts (tls.root_cas)
	CertFile string // the server certificate, PEM
	KeyFile  string // its private key, PEM (PKCS #8)
}

// Pool returns a certificate pool holding only the CA.
func (f Files) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(f.CAPEM)
	return p
}

// ClientTLS returns a client TLS config trusting only the CA.
func (f Files) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: f.Pool(), MinVersion: tls.VersionTLS12}
}

// NewCA makes a CA and a server certificate for 127.0.0.1, ::1, localhost and
// the extra DNS names, valid for a day, written under tb.TempDir().
func NewCA(tb testing.TB, dnsNames ...string) Files {
	tb.Helper()
	now := time.Now()
	caKey := newKey(tb)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "benthos-zerobus test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatalf("testnet: create CA certificate: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatalf("testnet: parse CA certificate: %v", err)
	}
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "zerobus emulator"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     append([]string{"localhost"}, dnsNames...),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		tb.Fatalf("testnet: create server certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatalf("testnet: marshal key: %v", err)
	}
	dir := tb.TempDir()
	f := Files{
		CAPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		CertFile: filepath.Join(dir, "server.crt"),
		KeyFile:  filepath.Join(dir, "server.key"),
	}
	write(tb, f.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	write(tb, f.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	return f
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("testnet: generate key: %v", err)
	}
	return k
}

func write(tb testing.TB, path string, b []byte) {
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatalf("testnet: write %s: %v", path, err)
	}
}
