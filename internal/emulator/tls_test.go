package emulator

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/benthos-zerobus/benthos-zerobus/internal/testnet"
)

func TestTLSServesBothListeners(t *testing.T) {
	ca := testnet.NewCA(t)
	srv, err := Start(Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", TLSCertFile: ca.CertFile, TLSKeyFile: ca.KeyFile})
	require.NoError(t, err)
	defer srv.Close()
	require.True(t, strings.HasPrefix(srv.HTTPURL(), "https://127.0.0.1:"), srv.HTTPURL())
	require.True(t, strings.HasPrefix(srv.GRPCURL(), "https://127.0.0.1:"), srv.GRPCURL())

	// HTTPS: discovery advertises https URLs, over HTTP/2 as a cloud front
	// end would.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientTLS(), ForceAttemptHTTP2: true}}
	resp, err := hc.Get(srv.HTTPURL() + "/.well-known/databricks-config")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 2, resp.ProtoMajor)
	var disc map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&disc))
	assert.Equal(t, srv.HTTPURL()+"/oidc", disc["oidc_endpoint"])
	assert.Equal(t, srv.HTTPURL(), disc["host"])

	// Plaintext HTTP to the TLS listener is refused.
	resp, err = http.Get("http://" + strings.TrimPrefix(srv.HTTPURL(), "https://") + "/.well-known/databricks-config")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "net/http answers plaintext on a TLS port with 400")

	// gRPC over TLS answers (an unauthenticated call gets the service's
	// own refusal, so the handshake went through); plaintext does not.
	call := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(strings.TrimPrefix(srv.GRPCURL(), "https://"), grpc.WithTransportCredentials(creds))
		require.NoError(t, err)
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stream, err := flight.NewFlightServiceClient(conn).DoPut(ctx)
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	err = call(credentials.NewTLS(ca.ClientTLS()))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Unauthenticated")
	err = call(insecure.NewCredentials())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Unavailable")
}

func TestTLSConfigErrors(t *testing.T) {
	ca := testnet.NewCA(t)
	_, err := Start(Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", TLSCertFile: ca.CertFile, TLSKeyFile: ca.CertFile})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "TLS certificate")

	got, err := configFromArgs("--tls-cert", ca.CertFile, "--tls-key", ca.KeyFile)
	require.NoError(t, err)
	assert.Equal(t, ca.CertFile, got.TLSCertFile)
	assert.Equal(t, ca.KeyFile, got.TLSKeyFile)
	err = configArgsError("--tls-cert", ca.CertFile)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "set both or neither")
}
