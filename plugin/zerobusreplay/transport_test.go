package zerobusreplay

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Iceberg REST catalog's requests (its token request carries the client
// secret) follow the output's transport rules: a plaintext request reaches
// a loopback host only, so a redirect to plain http elsewhere is refused
// before anything is sent.
func TestRESTCatalogTransportRefusesPlaintextOffLoopback(t *testing.T) {
	tr, ok := newConfigRecorder().base.(*http.Transport)
	require.True(t, ok)
	require.NotNil(t, tr.Proxy)
	req, err := http.NewRequest(http.MethodPost, "http://10.1.2.3/oidc/v1/token", nil)
	require.NoError(t, err)
	_, err = tr.Proxy(req)
	assert.ErrorContains(t, err, "plaintext")
	req, err = http.NewRequest(http.MethodPost, "http://127.0.0.1:8080/oidc/v1/token", nil)
	require.NoError(t, err)
	u, err := tr.Proxy(req)
	assert.NoError(t, err)
	assert.Nil(t, u, "loopback is never proxied")
}
