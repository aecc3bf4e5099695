package registry

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/sr"
)

// NotFramedError is a value that is not in the Confluent wire format: shorter
// than the 5-byte header, or without the magic byte. Only that message fails.
type NotFramedError struct {
	Reason string
}

func (e *NotFramedError) Error() string {
	return "value is not in the Schema Registry wire format (" + e.Reason + ")"
}

// UnreachableError is a registry that could not be reached or answered with a
// server error (5xx) or 429: the fetch is retried with back-off, and no
// message fails for it.
type UnreachableError struct {
	URL    string
	Status int // 0 when no answer came
	Err    error
}

func (e *UnreachableError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("schema registry %s answered HTTP %d: %v", e.URL, e.Status, e.Err)
	}
	return fmt.Sprintf("schema registry %s unreachable: %v", e.URL, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// UnauthorizedError is a registry that refused the credentials (HTTP 401) or
// their rights (403). Field names the config field to fix. It is retried with
// back-off too: credentials or grants fixed at the registry heal it without a
// restart.
type UnauthorizedError struct {
	URL     string
	Status  int
	Message string
	Field   string
}

func (e *UnauthorizedError) Error() string {
	what := "refused the credentials"
	if e.Status == http.StatusForbidden {
		what = "refused access with the credentials"
	}
	return fmt.Sprintf("schema registry %s %s (HTTP %d: %s): check %s", e.URL, what, e.Status, e.Message, e.Field)
}

// NotFoundError is a schema id the registry does not know (error 40403), or
// a reference of the schema whose subject or version it does not know
// (40401, 40402): the codes of Confluent's REST API reference,
// https://docs.confluent.io/platform/current/schema-registry/develop/api.html#errors.
// Only the messages written with that id fail.
type NotFoundError struct {
	ID        int
	Code      int    // the registry's error_code, one of its 404xx codes
	Message   string // the registry's own message
	Reference string // "subject version N" of a missing reference; empty for the schema itself
}

func (e *NotFoundError) Error() string {
	if e.Reference != "" {
		return fmt.Sprintf("schema id %d: its reference %s is not in the schema registry (error %d: %s)", e.ID, e.Reference, e.Code, e.Message)
	}
	return fmt.Sprintf("schema id %d is not in the schema registry (error %d: %s)", e.ID, e.Code, e.Message)
}

// WrongURLError is an HTTP 404 without a registry error: no error_code of
// the registry's 404xx family (40401 subject, 40402 version, 40403 schema
// not found) in the body. A registry that does not know an id says 40403;
// a 404 without it comes from something that is not the registry's API: a
// url with a wrong path, which Confluent's registry answers with its
// generic {"error_code":404,"message":"HTTP 404 Not Found"} (as quoted in
// https://github.com/tchiotludo/akhq/discussions/1579), or a web server or
// proxy answering with a page. No schema id is at fault, so no message
// fails for it: it is Retryable, the batch held until url is fixed (or
// the proxy answers again).
type WrongURLError struct {
	URL   string
	Body  string // the answer's message or body, cut short
	Field string // the config field to fix, such as url
}

func (e *WrongURLError) Error() string {
	return fmt.Sprintf("the registry at %s answered 404 without a registry error (%s): check %s, the registry's base URL", e.URL, e.Body, e.Field)
}

// maxBodyQuote bounds how much of an answer's body an error quotes.
const maxBodyQuote = 200

// quote is body on one line, cut to maxBodyQuote bytes at a rune boundary.
func quote(body string) string {
	body = strings.Join(strings.Fields(body), " ")
	if len(body) <= maxBodyQuote {
		return body
	}
	cut := maxBodyQuote
	for cut > 0 && !utf8.RuneStart(body[cut]) {
		cut--
	}
	return body[:cut] + "…"
}

// registryNotFound reports whether code is one of the registry's own
// not-found codes (404xx), which only a registry's API answers.
func registryNotFound(code int) bool { return code >= 40400 && code <= 40499 }

// SchemaError is a schema that was fetched but cannot be used: a reference
// cycle, an answer the registry should not give, or a schema no codec can be
// made from. Only the messages written with that id fail.
type SchemaError struct {
	ID  int
	Err error
}

func (e *SchemaError) Error() string { return fmt.Sprintf("schema id %d: %v", e.ID, e.Err) }
func (e *SchemaError) Unwrap() error { return e.Err }

// Retryable reports whether err is a fault of the registry or of the access
// to it, which heals by itself or by a fix at the registry: the fetch is
// retried with back-off and the messages wait. Every other error fails only
// the messages it concerns.
func Retryable(err error) bool {
	var u *UnreachableError
	var a *UnauthorizedError
	var w *WrongURLError
	return errors.As(err, &u) || errors.As(err, &a) || errors.As(err, &w)
}

// fieldNames are the config fields errors tell the user to check.
type fieldNames struct {
	url         string // the registry's base URL
	credentials string // the credentials
}

// classify turns an error of franz-go's sr client into this package's
// errors: id is the schema id asked for, ref the reference being fetched
// ("subject S version N", empty for the schema itself), fields the config
// fields to name.
func classify(err error, baseURL string, id int, ref string, fields fieldNames) error {
	if err == nil {
		return nil
	}
	var re *sr.ResponseError
	if !errors.As(err, &re) {
		return &UnreachableError{URL: baseURL, Err: err}
	}
	msg := re.Message
	if msg == "" {
		msg = string(re.Raw)
	}
	switch {
	case re.StatusCode >= 500 || re.StatusCode == http.StatusTooManyRequests || re.StatusCode == http.StatusRequestTimeout:
		return &UnreachableError{URL: baseURL, Status: re.StatusCode, Err: errors.New(msg)}
	case re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden:
		return &UnauthorizedError{URL: baseURL, Status: re.StatusCode, Message: msg, Field: fields.credentials}
	case re.StatusCode == http.StatusNotFound && registryNotFound(re.ErrorCode):
		return &NotFoundError{ID: id, Code: re.ErrorCode, Message: msg, Reference: ref}
	case re.StatusCode == http.StatusNotFound:
		return &WrongURLError{URL: baseURL, Body: quote(msg), Field: fields.url}
	}
	if ref != "" {
		return &SchemaError{ID: id, Err: fmt.Errorf("reference %s: the registry answered HTTP %d: %s", ref, re.StatusCode, msg)}
	}
	return &SchemaError{ID: id, Err: fmt.Errorf("the registry answered HTTP %d: %s", re.StatusCode, msg)}
}
