package ingest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Class says what the layers above should do about an error.
type Class int

const (
	// Transient errors are retried on the existing logical stream; the
	// stream reconnects by itself, so callers normally never see them.
	Transient Class = iota + 1
	// Poison means this logical stream cannot continue: rebuild it.
	Poison
	// FatalConfig means retrying cannot help (bad credentials, missing
	// table or grants, schema mismatch): fail loud and stop.
	FatalConfig
	// ConcurrencyReject means the service refused more streams or pipelines
	// for now: back off for RetryAfter and reuse an existing stream, never
	// open another one in response.
	ConcurrencyReject
)

// String returns the lower-case name of the class, suitable as a metric label.
func (c Class) String() string {
	switch c {
	case Transient:
		return "transient"
	case Poison:
		return "poison"
	case FatalConfig:
		return "fatal_config"
	case ConcurrencyReject:
		return "concurrency_reject"
	default:
		return fmt.Sprintf("class(%d)", int(c))
	}
}

// Service error codes seen in Zerobus status messages ("Error Code: NNNN").
const (
	ServiceCodeStreamRotation  = "6002" // stream timeout reached: normal rotation
	ServiceCodePipelineBlocked = "6006" // pipeline creation temporarily blocked
	ServiceCodeSchemaMismatch  = "8001" // schema validation failed
	ServiceCodeMissingGrants   = "4024" // missing table-level grants (uncertain)
)

// Back-off hints for concurrency rejects that carry no google.rpc.RetryInfo.
const (
	// PipelineBlockedBackoff is the wait after a 6006 reject; the service is
	// reported to need at least a minute.
	PipelineBlockedBackoff = 60 * time.Second
	// ResourceExhaustedBackoff is the wait after a plain RESOURCE_EXHAUSTED.
	ResourceExhaustedBackoff = 10 * time.Second
)

// SchemaValidationReason is the google.rpc.ErrorInfo reason the service uses
// when a stream's schema does not match the table.
const SchemaValidationReason = "SCHEMA_VALIDATION_FAILED"

// Error is a classified Zerobus error. Err is the underlying cause.
type Error struct {
	Class Class
	// Code is the gRPC status code, codes.Unknown when there was none.
	Code codes.Code
	// ServiceCode is the Zerobus "Error Code: NNNN" or ErrorInfo error_code,
	// empty when absent.
	ServiceCode string
	// Causes lists the SCHEMA_VALIDATION_FAILED causes (e.g.
	// FIELD_NOT_IN_TABLE); non-empty only for schema mismatches, which is
	// the signal for the layers above to reconcile the catalog.
	Causes []string
	// RetryAfter is how long to back off before using the stream again;
	// set for ConcurrencyReject.
	RetryAfter time.Duration
	Err        error
}

// Error describes the class, the codes and the cause.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("zerobus ")
	b.WriteString(e.Class.String())
	if e.Code != codes.OK && e.Code != codes.Unknown {
		fmt.Fprintf(&b, " (%s)", e.Code)
	}
	if e.ServiceCode != "" {
		fmt.Fprintf(&b, " [error code %s]", e.ServiceCode)
	}
	if len(e.Causes) > 0 {
		fmt.Fprintf(&b, " causes=%s", strings.Join(e.Causes, ","))
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " retry after %s", e.RetryAfter)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Permanent reports whether retrying soon cannot help (FatalConfig): the
// caller should back off exponentially and say what to fix.
func (e *Error) Permanent() bool { return e.Class == FatalConfig }

// IsPermanent reports whether err is permanent: bad credentials, an invalid
// table name, missing grants, a missing table or a schema the table refuses.
// Such errors are not cured by retrying once a second, only by a change of
// configuration or grants, so callers back off exponentially (see
// internal/backoff) and log each attempt. The first error in err's chain that
// has a Permanent() bool method decides (*Error, *CredentialError,
// *typemap.TableNameError, the catalog's workspace errors); otherwise err is
// classified as a service error (see Classify). nil, cancellation and
// transport failures are not permanent.
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	var p interface{ Permanent() bool }
	if errors.As(err, &p) {
		return p.Permanent()
	}
	return Classify(err).Class == FatalConfig
}

// HintError attaches advice to an error: what the user should do about it.
type HintError struct {
	Err  error
	Hint string
}

func (e *HintError) Error() string { return e.Err.Error() + "; " + e.Hint }

// Unwrap returns the error the hint is about.
func (e *HintError) Unwrap() error { return e.Err }

// WithGrantHint attaches the GRANT statements a Zerobus writer needs
// (typemap.GrantHint) to err when the service refused the stream for missing
// privileges: PERMISSION_DENIED, or service code 4024 (missing table-level
// grants). principal is the service principal's application id (the OAuth
// client id), empty when unknown. Other errors are returned unchanged.
func WithGrantHint(err error, table, principal string) error {
	c := Classify(err)
	if c == nil || (c.Code != codes.PermissionDenied && c.ServiceCode != ServiceCodeMissingGrants) {
		return err
	}
	return &HintError{Err: err, Hint: typemap.GrantHint(table, principal)}
}

// IsSchemaMismatch reports whether the service rejected the stream's schema,
// the cue to reconcile the catalog and rebuild the stream.
func (e *Error) IsSchemaMismatch() bool {
	return len(e.Causes) > 0 || e.ServiceCode == ServiceCodeSchemaMismatch
}

// IsRotation reports whether the error is the service's normal stream
// rotation (6002).
func (e *Error) IsRotation() bool { return e.ServiceCode == ServiceCodeStreamRotation }

// ClassOf returns the class of err if it is or wraps an *Error.
func ClassOf(err error) (Class, bool) {
	var ze *Error
	if errors.As(err, &ze) {
		return ze.Class, true
	}
	return 0, false
}

// ConcurrencyRejectOf is the first concurrency reject in err's chain of
// classified errors (Classify's, then each one's wrapped error), nil for
// none. A reject may sit under another class: a stream the service rotated
// whose reconnect it refused fails Poison (so that the pool waits before it
// rebuilds the stream), wrapping the refusal, and that is still the
// service's limit, not a network fault.
func ConcurrencyRejectOf(err error) *Error {
	for ze := Classify(err); ze != nil; {
		if ze.Class == ConcurrencyReject {
			return ze
		}
		var inner *Error
		if !errors.As(ze.Err, &inner) {
			return nil
		}
		ze = inner
	}
	return nil
}

var serviceCodeRE = regexp.MustCompile(`Error Code:\s*(\d{4})`)

// invalidNameClass is the Databricks error class for a malformed catalog,
// schema or table name (Unity Catalog answers it for names such as "a.b.c d";
// docs.databricks.com error-classes INVALID_SCHEMA_OR_RELATION_NAME). A name
// never becomes valid by retrying, whatever status code carries the class.
const invalidNameClass = "INVALID_SCHEMA_OR_RELATION_NAME"

// nonIncrementalOffset is the mock server's text for an offset gap; it means
// our own stream state is broken, which a rebuild fixes.
const nonIncrementalOffset = "Non-incremental offset"

// Classify maps an error from the service (a gRPC status, a transport error,
// or an already classified *Error) to an *Error. It returns nil for nil.
//
// The rules follow the official SDKs: INVALID_ARGUMENT, UNAUTHENTICATED,
// PERMISSION_DENIED, OUT_OF_RANGE, UNIMPLEMENTED and NOT_FOUND are not
// retryable (FatalConfig, schema mismatches carrying their causes), nor is
// an invalid-name refusal (INVALID_SCHEMA_OR_RELATION_NAME) under any code;
// RESOURCE_EXHAUSTED and service code 6006 are concurrency rejects; rotation
// (6002) and every other code or transport failure is transient. An offset
// gap reported by the server is Poison: our stream state is wrong.
func Classify(err error) *Error {
	if err == nil {
		return nil
	}
	var ze *Error
	if errors.As(err, &ze) {
		return ze
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &Error{Class: Transient, Code: status.FromContextError(err).Code(), Err: err}
	}
	st, ok := status.FromError(err)
	if !ok {
		return &Error{Class: Transient, Code: codes.Unknown, Err: err}
	}
	out := &Error{Code: st.Code(), Err: err}
	if m := serviceCodeRE.FindStringSubmatch(st.Message()); m != nil {
		out.ServiceCode = m[1]
	}
	var retryInfo *errdetails.RetryInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if code := d.GetMetadata()["error_code"]; code != "" && out.ServiceCode == "" {
				out.ServiceCode = code
			}
			if d.GetReason() == SchemaValidationReason {
				out.Causes = splitCauses(d.GetMetadata()["causes"])
				if out.ServiceCode == "" {
					out.ServiceCode = ServiceCodeSchemaMismatch
				}
			}
		case *errdetails.RetryInfo:
			retryInfo = d
		}
	}

	switch {
	case out.ServiceCode == ServiceCodePipelineBlocked:
		out.Class = ConcurrencyReject
		out.RetryAfter = PipelineBlockedBackoff
	case out.Code == codes.ResourceExhausted:
		out.Class = ConcurrencyReject
		out.RetryAfter = ResourceExhaustedBackoff
	case out.ServiceCode == ServiceCodeStreamRotation:
		out.Class = Transient
	case out.IsSchemaMismatch():
		out.Class = FatalConfig
	case out.Code == codes.InvalidArgument && strings.Contains(st.Message(), nonIncrementalOffset):
		out.Class = Poison
	case strings.Contains(st.Message(), invalidNameClass):
		out.Class = FatalConfig
	case nonRetryable(out.Code):
		out.Class = FatalConfig
	default:
		out.Class = Transient
	}
	if out.Class == ConcurrencyReject && retryInfo.GetRetryDelay() != nil {
		if d := retryInfo.GetRetryDelay().AsDuration(); d > 0 {
			out.RetryAfter = d
		}
	}
	return out
}

func nonRetryable(c codes.Code) bool {
	switch c {
	case codes.InvalidArgument, codes.Unauthenticated, codes.PermissionDenied,
		codes.OutOfRange, codes.Unimplemented, codes.NotFound:
		return true
	}
	return false
}

func splitCauses(s string) []string {
	var out []string
	for _, c := range strings.Split(s, ",") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		// The reason alone still says "schema mismatch"; keep Causes
		// non-empty so IsSchemaMismatch and the catalog cue hold.
		out = []string{SchemaValidationReason}
	}
	return out
}

// poisonf builds a Poison error for failures of our own stream state or of
// the protocol (for example an ack above what was sent).
func poisonf(format string, args ...any) *Error {
	return &Error{Class: Poison, Code: codes.Internal, Err: fmt.Errorf(format, args...)}
}

// exhausted wraps the last error of a logical stream whose reconnect budget
// ran out: the stream is poisoned and must be rebuilt.
func exhausted(attempts int, last error) *Error {
	c := Classify(last)
	code := codes.Unknown
	if c != nil {
		code = c.Code
	}
	return &Error{
		Class: Poison,
		Code:  code,
		Err:   fmt.Errorf("reconnect budget of %d attempts exhausted: %w", attempts, last),
	}
}
