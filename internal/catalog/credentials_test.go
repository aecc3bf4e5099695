package catalog

import "testing"

func TestClientCredentialsFallBackPerField(t *testing.T) {
	t.Setenv(EnvClientID, "env-id")
	t.Setenv(EnvClientSecret, "env-secret")
	id, secret, src := ClientCredentials("cfg-id", "")
	if id != "cfg-id" || secret != "env-secret" || src != "config field client_id, env "+EnvClientSecret {
		t.Fatalf("got %q %q %q", id, secret, src)
	}
	t.Setenv(EnvClientSecret, "rotated")
	if _, secret, _ = ClientCredentials("cfg-id", ""); secret != "rotated" {
		t.Fatalf("a second call re-reads the environment: got %q", secret)
	}
	if id, secret, src = ClientCredentials("a", "b"); id != "a" || secret != "b" || src != "config field client_id, config field client_secret" {
		t.Fatalf("got %q %q %q", id, secret, src)
	}
}
