package registry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

// DefaultTimeout bounds one request to the registry.
const DefaultTimeout = 10 * time.Second

// maxReferenceDepth bounds how deep references may nest: a registry refuses
// cycles, but one that does not must not recurse for ever.
const maxReferenceDepth = 32

// ClientConfig is how the registry is reached.
type ClientConfig struct {
	// URL is the registry's base URL.
	URL string
	// TLS, when set, is the TLS configuration of the connections.
	TLS *tls.Config
	// Timeout bounds each request (DefaultTimeout when zero).
	Timeout time.Duration
	// Sign, when set, signs every request: benthos' HTTP auth signer
	// (basic_auth, oauth, jwt).
	Sign func(*http.Request) error
	// URLField names the config field holding URL, for the error when a
	// 404 shows that URL is not the registry's ("url" when empty).
	URLField string
	// CredentialsField names the config field holding the credentials, for
	// the error when the registry refuses them.
	CredentialsField string
	// Transport, when set, replaces the HTTP transport (tests).
	Transport http.RoundTripper
}

// Client fetches schemas by id, with their references resolved, through
// franz-go's sr client. It does not cache: Cache does.
type Client struct {
	cl  *sr.Client
	url string
	// fields are the config fields errors name.
	fields fieldNames
	// secret is the url's password, scrubbed from errors.
	secret string
}

// NewClient makes a client; it does not contact the registry.
func NewClient(c ClientConfig) (*Client, error) {
	u := strings.TrimRight(strings.TrimSpace(c.URL), "/")
	if u == "" {
		return nil, errors.New("the registry URL is empty")
	}
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return nil, fmt.Errorf("the registry URL %q must start with http:// or https://", c.URL)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tr := c.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		if c.TLS != nil {
			t.TLSClientConfig = c.TLS.Clone()
		}
		tr = t
	}
	opts := []sr.ClientOpt{
		sr.URLs(u),
		sr.HTTPClient(&http.Client{Timeout: timeout, Transport: tr}),
		sr.UserAgent("benthos-zerobus"),
	}
	if c.Sign != nil {
		opts = append(opts, sr.PreReq(c.Sign))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	cred := c.CredentialsField
	if cred == "" {
		cred = "the credentials (none are configured)"
	}
	urlField := c.URLField
	if urlField == "" {
		urlField = "url"
	}
	c2 := &Client{cl: cl, url: redacted(u), fields: fieldNames{url: urlField, credentials: cred}}
	if p, err := url.Parse(u); err == nil && p.User != nil {
		c2.secret, _ = p.User.Password()
	}
	return c2, nil
}

// redacted is u with the password of any user:password@ replaced, for logs
// and errors.
func redacted(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		return u
	}
	return p.Redacted()
}

// URL is the registry's base URL, its password (if any) redacted.
func (c *Client) URL() string { return c.url }

// Fetch returns the schema with id, its references resolved recursively, and
// the subject and version it is registered under when the registry says
// (GET /schemas/ids/{id}/versions; the first pair it lists). Errors are
// this package's: *UnreachableError, *UnauthorizedError and
// *WrongURLError (Retryable), *NotFoundError, *SchemaError, or ctx's error
// once ctx is done.
func (c *Client) Fetch(ctx context.Context, id int) (Schema, error) {
	s, err := c.cl.SchemaByID(ctx, id)
	if err != nil {
		return Schema{}, c.fail(ctx, err, id, "")
	}
	out := Schema{ID: id, Format: format(s.Type), Text: s.Schema}
	vs, err := c.cl.SchemaVersionsByID(ctx, id)
	var wrongURL *WrongURLError
	switch err := c.fail(ctx, err, id, ""); {
	case err == nil && len(vs) > 0:
		out.Subject, out.Version = vs[0].Subject, vs[0].Version
	case errors.As(err, &wrongURL):
		// The schema came from this url, so it is the registry's: a 404
		// without a registry error here is a registry without the
		// endpoint, not a wrong url.
	case Retryable(err) || ctx.Err() != nil:
		return Schema{}, err
	}
	// Any other answer (a registry without the endpoint) leaves the
	// subject unknown: it is only named in messages.
	r := resolver{c: c, id: id, memo: map[string]Schema{}}
	if out.References, err = r.resolve(ctx, s.References, nil); err != nil {
		return Schema{}, err
	}
	return out, nil
}

// fail classifies err, or returns ctx's error when the caller gave up.
func (c *Client) fail(ctx context.Context, err error, id int, ref string) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if c.secret != "" && strings.Contains(err.Error(), c.secret) {
		err = &scrubbed{msg: strings.ReplaceAll(err.Error(), c.secret, "xxxxx"), err: err}
	}
	return classify(err, c.url, id, ref, c.fields)
}

// scrubbed is an error whose text had the url's password: the text without
// it, the error still underneath.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// resolver resolves the references of one schema: each is fetched once
// (memo, by subject and version), and a reference to one of its own
// referrers is a cycle, refused.
type resolver struct {
	c    *Client
	id   int
	memo map[string]Schema
}

func (r *resolver) resolve(ctx context.Context, refs []sr.SchemaReference, path []string) ([]Reference, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	if len(path) >= maxReferenceDepth {
		return nil, &SchemaError{ID: r.id, Err: fmt.Errorf("references nest deeper than %d: %s", maxReferenceDepth, strings.Join(path, " → "))}
	}
	out := make([]Reference, 0, len(refs))
	for _, ref := range refs {
		key := fmt.Sprintf("subject %q version %d", ref.Subject, ref.Version)
		for _, p := range path {
			if p == key {
				return nil, &SchemaError{ID: r.id, Err: fmt.Errorf("reference cycle: %s → %s", strings.Join(path, " → "), key)}
			}
		}
		s, ok := r.memo[key]
		if !ok {
			ss, err := r.c.cl.SchemaByVersion(ctx, ref.Subject, ref.Version)
			if err != nil {
				return nil, r.c.fail(ctx, err, r.id, key)
			}
			s = Schema{ID: ss.ID, Format: format(ss.Type), Text: ss.Schema.Schema, Subject: ss.Subject, Version: ss.Version}
			if s.References, err = r.resolve(ctx, ss.References, append(path[:len(path):len(path)], key)); err != nil {
				return nil, err
			}
			r.memo[key] = s
		}
		out = append(out, Reference{Name: ref.Name, Schema: s})
	}
	return out, nil
}

// format is the Format of a registry schema type.
func format(t sr.SchemaType) Format {
	switch t {
	case sr.TypeProtobuf:
		return Protobuf
	case sr.TypeJSON:
		return JSONSchema
	default:
		return Avro
	}
}
