package schemaregistry

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/lintrule"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// Client is the part of a config that reaches the registry: url, tls,
// basic_auth / oauth / jwt and cache_duration. The processor's config and
// the zerobus output's schema_registry block both parse it (ParseClient).
type Client struct {
	URL           string
	CacheDuration time.Duration
	TLS           *tls.Config
	// Sign signs each registry request (basic_auth, oauth, jwt).
	Sign func(*http.Request) error
	// Auth names the enabled auth mechanisms, for the start-up log.
	Auth []string
	// URLField names the url field (with its prefix), to fix when the url
	// answers as no registry does.
	URLField string
	// CredentialsField names the fields to fix when the registry refuses
	// the credentials.
	CredentialsField string
	// credentialsID is a hash of the credentials, so that two configs
	// that differ only by them do not share a client.
	credentialsID string
}

// ClientFields are the fields ParseClient reads, with the processor's
// names, descriptions and defaults: cache_duration, url, then the auth
// fields and tls. prefix (such as "schema_registry.") is
// the path of the object they sit in, which lint messages name; with one
// the url defaults to empty (the block is off), for the output's
// schema_registry block.
func ClientFields(prefix string) []*service.ConfigField {
	optionalURL := prefix != ""
	url := service.NewStringField(fURL).
		Description("The base URL of the schema registry: https, or http for a loopback host only.").
		Example("https://schema-registry.example.com:8081").Example("http://127.0.0.1:8081")
	if optionalURL {
		url = url.Default("").
			Description("The base URL of the schema registry: https, or http for a loopback host only. Empty (the default): off.").
			LintRule(`root = if this.or("") == "" { [] } else { ` + strings.TrimPrefix(lintrule.URL(prefix+fURL), "root = ") + ` }`)
	} else {
		url = url.LintRule(lintrule.URL(prefix + fURL))
	}
	fields := []*service.ConfigField{
		service.NewDurationField(fCacheDuration).
			Description("How long a fetched schema is kept before it is fetched again. At most 1000 schema ids are kept (the least recently used goes first); an id the registry does not know is remembered for at most 30s.").
			Default("10m").Example("1h").Example("5m").LintRule(lintrule.Duration(prefix + fCacheDuration)),
		url,
	}
	fields = append(fields, service.NewHTTPRequestAuthSignerFields()...)
	return append(fields, service.NewTLSField(fTLS))
}

// ParseClient reads the registry client's fields of conf; prefix (such as
// "schema_registry.") is put before the field names its errors give. files
// is where jwt.private_key_file is read.
func ParseClient(conf *service.ParsedConfig, files fs.FS, prefix string) (Client, error) {
	var c Client
	var err error
	ferr := func(f string, err error) error { return fieldErr(prefix+f, err) }
	if c.URL, err = conf.FieldString(fURL); err != nil {
		return c, ferr(fURL, err)
	}
	if err := checkURL(c.URL); err != nil {
		return c, ferr(fURL, err)
	}
	if c.CacheDuration, err = conf.FieldDuration(fCacheDuration); err != nil {
		return c, ferr(fCacheDuration, err)
	}
	if c.CacheDuration <= 0 {
		return c, ferr(fCacheDuration, fmt.Errorf("must be a positive duration such as 10m, got %s", c.CacheDuration))
	}
	if strings.HasPrefix(c.URL, "https://") {
		if c.TLS, err = conf.FieldTLS(fTLS); err != nil {
			return c, ferr(fTLS, err)
		}
	}
	sign, err := conf.HTTPRequestAuthSignerFromParsed()
	if err != nil {
		if prefix != "" {
			return c, fmt.Errorf("%s: %w", strings.TrimSuffix(prefix, "."), err)
		}
		return c, err
	}
	c.Sign = func(r *http.Request) error { return sign(files, r) }
	for _, a := range []string{"basic_auth", "oauth", "jwt"} {
		if on, _ := conf.FieldBool(a, "enabled"); on {
			c.Auth = append(c.Auth, a)
		}
	}
	c.URLField = prefix + fURL
	c.CredentialsField = credentialsField(conf, prefix)
	h := sha256.New()
	for _, f := range [][]string{{"basic_auth", "username"}, {"basic_auth", "password"}, {"oauth", "consumer_key"}, {"oauth", "consumer_secret"},
		{"oauth", "access_token"}, {"oauth", "access_token_secret"}, {"jwt", "private_key_file"}, {"jwt", "signing_method"}} {
		v, _ := conf.FieldString(f...)
		fmt.Fprintf(h, "%d:%s;", len(v), v)
	}
	c.credentialsID = hex.EncodeToString(h.Sum(nil))
	return c, nil
}

// NewRegistryClient is the registry client of c.
func (c Client) NewRegistryClient() (*registry.Client, error) {
	return registry.NewClient(registry.ClientConfig{URL: c.URL, TLS: c.TLS, Sign: c.Sign, URLField: c.URLField, CredentialsField: c.CredentialsField})
}

// Knobs is the start-up log text of c (never a secret: the url's password
// is redacted, the auth named, not its credentials).
func (c Client) Knobs() string {
	auth := "none"
	if len(c.Auth) > 0 {
		auth = strings.Join(c.Auth, ",")
	}
	return fmt.Sprintf("url=%s auth=%s tls=%t cache_duration=%s cache_size=%d", redactURL(c.URL), auth, c.TLS != nil, c.CacheDuration, registry.DefaultCacheSize)
}
