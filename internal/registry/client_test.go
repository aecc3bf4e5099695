package registry

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

const (
	avroC = `{"type":"record","name":"C","namespace":"t","fields":[{"name":"c","type":"int"}]}`
	avroB = `{"type":"record","name":"B","namespace":"t","fields":[{"name":"c","type":"t.C"}]}`
	avroA = `{"type":"record","name":"A","namespace":"t","fields":[{"name":"b","type":"t.B"},{"name":"c","type":"t.C"}]}`
)

func newClient(t *testing.T, url string, sign func(*http.Request) error, field string) *Client {
	t.Helper()
	c, err := NewClient(ClientConfig{URL: url, Sign: sign, CredentialsField: field})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestFetchResolvesReferencesRecursivelyOnce(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	mustRegister(t, reg, "c-value", sr.Schema{Schema: avroC})
	mustRegister(t, reg, "b-value", sr.Schema{Schema: avroB, References: []sr.SchemaReference{{Name: "t.C", Subject: "c-value", Version: 1}}})
	id := mustRegister(t, reg, "a-value", sr.Schema{Schema: avroA, References: []sr.SchemaReference{
		{Name: "t.B", Subject: "b-value", Version: 1}, {Name: "t.C", Subject: "c-value", Version: 1}}})
	var versionGets atomic.Int64
	reg.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/subjects/c-value/versions/1" {
			versionGets.Add(1)
		}
		return false
	})

	s, err := newClient(t, reg.URL(), nil, "").Fetch(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != id || s.Format != Avro || s.Text != avroA || s.Subject != "a-value" || s.Version != 1 {
		t.Fatalf("schema = %+v", s)
	}
	if len(s.References) != 2 {
		t.Fatalf("references = %+v", s.References)
	}
	b, c := s.References[0], s.References[1]
	if b.Name != "t.B" || b.Schema.Text != avroB || b.Schema.Subject != "b-value" || len(b.Schema.References) != 1 {
		t.Fatalf("reference B = %+v", b)
	}
	if cc := b.Schema.References[0]; cc.Name != "t.C" || cc.Schema.Text != avroC || cc.Schema.Subject != "c-value" || cc.Schema.Version != 1 {
		t.Fatalf("B's reference C = %+v", cc)
	}
	if c.Name != "t.C" || c.Schema.Text != avroC {
		t.Fatalf("reference C = %+v", c)
	}
	if n := versionGets.Load(); n != 1 {
		t.Fatalf("c-value version 1 fetched %d times, want once (diamond references are fetched once)", n)
	}
}

func TestFetchRefusesAReferenceCycle(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id := mustRegister(t, reg, "a-value", sr.Schema{Schema: avroA})
	// A registry refuses cycles (srfake too), so one answering them is
	// played by an interceptor: a → x/1 → y/1 → x/1.
	serve := func(w http.ResponseWriter, subject, ref string) {
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		_ = json.NewEncoder(w).Encode(sr.SubjectSchema{Subject: subject, Version: 1, ID: 50, Schema: sr.Schema{Schema: avroC,
			References: []sr.SchemaReference{{Name: "r", Subject: ref, Version: 1}}}})
	}
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		switch r.URL.Path {
		case "/schemas/ids/1":
			w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
			_ = json.NewEncoder(w).Encode(sr.Schema{Schema: avroA, References: []sr.SchemaReference{{Name: "x", Subject: "x", Version: 1}}})
		case "/subjects/x/versions/1":
			serve(w, "x", "y")
		case "/subjects/y/versions/1":
			serve(w, "y", "x")
		default:
			return false
		}
		return true
	})
	_, err := newClient(t, reg.URL(), nil, "").Fetch(context.Background(), id)
	var se *SchemaError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "reference cycle") || Retryable(err) {
		t.Fatalf("err = %v, want a reference cycle SchemaError", err)
	}
}

func TestFetchUnknownIDNamesTheIDAndTheRegistryMessage(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	_, err := newClient(t, reg.URL(), nil, "").Fetch(context.Background(), 4242)
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.ID != 4242 || nf.Code != 40403 || Retryable(err) {
		t.Fatalf("err = %#v, want NotFoundError 40403 for 4242", err)
	}
	for _, want := range []string{"4242", "40403", "schema not found"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%q lacks %q", err, want)
		}
	}
}

func TestFetchMissingReferenceIsNotFound(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id := mustRegister(t, reg, "a-value", sr.Schema{Schema: avroA})
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/schemas/ids/1" {
			w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
			_ = json.NewEncoder(w).Encode(sr.Schema{Schema: avroA, References: []sr.SchemaReference{{Name: "t.B", Subject: "gone", Version: 3}}})
			return true
		}
		return false
	})
	_, err := newClient(t, reg.URL(), nil, "").Fetch(context.Background(), id)
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.ID != id || !strings.Contains(nf.Reference, `"gone" version 3`) {
		t.Fatalf("err = %v, want the missing reference named", err)
	}
}

func TestFetchServerErrorsAndNoListenerAreRetryable(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id := mustRegister(t, reg, "c-value", sr.Schema{Schema: avroC})
	var down atomic.Bool
	down.Store(true)
	reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		if down.Load() {
			w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error_code":50003,"message":"Error while forwarding the request to the leader"}`))
			return true
		}
		return false
	})
	c := newClient(t, reg.URL(), nil, "")
	_, err := c.Fetch(context.Background(), id)
	var ue *UnreachableError
	if !errors.As(err, &ue) || ue.Status != 503 || !Retryable(err) || !strings.Contains(err.Error(), "forwarding") {
		t.Fatalf("err = %v, want a retryable 503", err)
	}
	down.Store(false)
	if _, err := c.Fetch(context.Background(), id); err != nil {
		t.Fatalf("after the registry healed: %v", err)
	}

	url := reg.URL()
	reg.Close()
	_, err = newClient(t, url, nil, "").Fetch(context.Background(), id)
	if !errors.As(err, &ue) || ue.Status != 0 || !Retryable(err) {
		t.Fatalf("err = %v, want a retryable unreachable error", err)
	}
}

func TestFetchRefusedCredentialsNameTheField(t *testing.T) {
	good := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:right"))
	reg := srfake.New(srfake.WithAuth(good))
	defer reg.Close()
	id := mustRegister(t, reg, "c-value", sr.Schema{Schema: avroC})
	sign := func(pass string) func(*http.Request) error {
		return func(r *http.Request) error { r.SetBasicAuth("u", pass); return nil }
	}
	for _, tc := range []struct {
		name   string
		sign   func(*http.Request) error
		field  string
		status int
	}{
		{"none", nil, "", 401},
		{"wrong", sign("wrong"), "basic_auth.username/basic_auth.password", 403},
	} {
		_, err := newClient(t, reg.URL(), tc.sign, tc.field).Fetch(context.Background(), id)
		var ue *UnauthorizedError
		if !errors.As(err, &ue) || ue.Status != tc.status || !Retryable(err) {
			t.Fatalf("%s: err = %v, want a %d UnauthorizedError", tc.name, err, tc.status)
		}
		want := tc.field
		if want == "" {
			want = "none are configured"
		}
		if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "wrong") {
			t.Fatalf("%s: %q should name %q and never the password", tc.name, err, want)
		}
	}
	if _, err := newClient(t, reg.URL(), sign("right"), "").Fetch(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}

func mustRegister(t *testing.T, reg *srfake.Registry, subject string, s sr.Schema) int {
	t.Helper()
	id, _, err := reg.RegisterSchema(subject, s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestClientNamesTheRegistryWithoutItsPassword(t *testing.T) {
	c := newClient(t, "http://svc:s3cret@127.0.0.1:1", nil, "")
	if strings.Contains(c.URL(), "s3cret") || !strings.Contains(c.URL(), "svc:") {
		t.Fatalf("URL() = %q", c.URL())
	}
	_, err := c.Fetch(context.Background(), 1)
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("err = %v: the password must not appear", err)
	}
}

// A 404 without a registry error (a url that names a web server or a
// wrong path, not the registry's API) is not the registry's 40403: no id
// is at fault, so it is Retryable (the batch is held) and names url.
func TestFetchBare404IsAWrongURLNotAnUnknownID(t *testing.T) {
	for _, tc := range []struct{ name, contentType, body, want string }{
		{"html page", "text/html", "<html>\n<body>Not Found</body></html>", "<html> <body>Not Found</body></html>"},
		{"empty", "", "", "no response"},
		{"registry's generic 404", "application/vnd.schemaregistry.v1+json", `{"error_code":404,"message":"HTTP 404 Not Found"}`, "HTTP 404 Not Found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if tc.contentType != "" {
					w.Header().Set("Content-Type", tc.contentType)
				}
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c, err := NewClient(ClientConfig{URL: srv.URL + "/wrong", URLField: "schema_registry.url"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Fetch(context.Background(), 7)
			var wu *WrongURLError
			var nf *NotFoundError
			if !errors.As(err, &wu) || errors.As(err, &nf) || !Retryable(err) {
				t.Fatalf("err = %#v, want a Retryable WrongURLError", err)
			}
			want := "the registry at " + srv.URL + "/wrong answered 404 without a registry error (" + tc.want + "): check schema_registry.url, the registry's base URL"
			if err.Error() != want {
				t.Fatalf("err = %q\nwant  %q", err, want)
			}
		})
	}
}

// A registry's own 404 (error_code 40403 in its JSON body) stays an
// unknown id: only that id's messages fail.
func TestFetch40403IsAnUnknownIDNotAWrongURL(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error_code":40403,"message":"Schema 7 not found"}`))
	}))
	defer srv.Close()
	_, err := newClient(t, srv.URL, nil, "").Fetch(context.Background(), 7)
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.Code != 40403 || Retryable(err) {
		t.Fatalf("err = %#v, want a NotFoundError 40403", err)
	}
}

// A registry without GET /schemas/ids/{id}/versions answers it 404
// without a 404xx code: the schema came from the same url, so that is no
// wrong url, and the schema is returned without its subject.
func TestFetchToleratesAMissingVersionsEndpoint(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id := mustRegister(t, reg, "c-value", sr.Schema{Schema: avroC})
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasSuffix(r.URL.Path, "/versions") {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error_code":404,"message":"HTTP 404 Not Found"}`))
			return true
		}
		return false
	})
	s, err := newClient(t, reg.URL(), nil, "").Fetch(context.Background(), id)
	if err != nil || s.Text != avroC || s.Subject != "" {
		t.Fatalf("schema = %+v, err = %v", s, err)
	}
}
