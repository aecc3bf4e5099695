package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/databricks/databricks-sdk-go"
	"github.com/databricks/databricks-sdk-go/apierr"
	"github.com/databricks/databricks-sdk-go/client"
	"github.com/databricks/databricks-sdk-go/logger"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// DefaultCallTimeout bounds one workspace call (a describe, a tags read, a
// credential vend, one statement submission or poll) when UCConfig.CallTimeout
// is zero.
const DefaultCallTimeout = 30 * time.Second

// sdkRetryTimeoutSeconds is the retry budget handed to databricks-sdk-go. Its
// retry loop (retries.Run) sleeps at least 1 s plus jitter before a second
// attempt, so a 1 s budget means exactly one attempt per request: the SDK
// would otherwise retry connection errors silently for 5 minutes, on
// contexts of its own that our caller cannot cancel. Retrying is left to our
// caller's back-off (the engine's reconnect loop).
const sdkRetryTimeoutSeconds = 1

// ErrorKind says what went wrong talking to the workspace.
type ErrorKind int

const (
	// KindUnreachable: no HTTP answer (refused, reset, not TLS, DNS).
	KindUnreachable ErrorKind = iota + 1
	// KindTimeout: no answer within the call timeout.
	KindTimeout
	// KindCanceled: the caller gave up (ctx canceled).
	KindCanceled
	// KindCredentials: the token endpoint or the API refused the credentials.
	KindCredentials
	// KindPermission: the principal lacks a privilege (PERMISSION_DENIED).
	KindPermission
	// KindInvalidName: the table name breaks a naming rule.
	KindInvalidName
	// KindConfig: the SDK could not be configured from what was given.
	KindConfig
	// KindService: any other answer of the workspace API.
	KindService
)

// String names the kind for logs and metrics.
func (k ErrorKind) String() string {
	switch k {
	case KindUnreachable:
		return "unreachable"
	case KindTimeout:
		return "timeout"
	case KindCanceled:
		return "canceled"
	case KindCredentials:
		return "credentials"
	case KindPermission:
		return "permission"
	case KindInvalidName:
		return "invalid_name"
	case KindConfig:
		return "config"
	case KindService:
		return "service"
	default:
		return fmt.Sprintf("kind(%d)", int(k))
	}
}

// WorkspaceError is a failed workspace call, explained: which workspace,
// which operation, the cause in one line (not the SDK's chain of wrapped
// errors) and, when there is one, what to do. Err keeps the original error.
type WorkspaceError struct {
	Host  string
	Op    string
	Kind  ErrorKind
	Cause string
	Hint  string
	// permanent is set for refusals that retrying cannot cure.
	permanent bool
	Err       error
}

func (e *WorkspaceError) Error() string {
	s := fmt.Sprintf("catalog: %s: workspace %s: %s", e.Op, e.Host, e.Cause)
	if e.Hint != "" {
		s += "; " + e.Hint
	}
	return s
}

// Unwrap returns the SDK's error.
func (e *WorkspaceError) Unwrap() error { return e.Err }

// Permanent reports whether retrying soon cannot help (bad credentials,
// missing grants, an invalid name, a configuration the SDK refuses, another
// 4xx refusal): the caller should back off exponentially.
func (e *WorkspaceError) Permanent() bool { return e.permanent }

// sdkConfigError marks a failure to build the SDK client from the
// configuration (ambiguous or missing auth, bad profile): no request was
// involved, and retrying the same configuration fails the same way.
type sdkConfigError struct{ err error }

func (e *sdkConfigError) Error() string { return e.err.Error() }
func (e *sdkConfigError) Unwrap() error { return e.err }

// callWorkspace runs fn with the SDK clients (built on first use, see
// clients) against the workspace bounded by the call timeout and ctx, and
// explains its error. The SDK resolves its configuration and
// fetches OAuth tokens on contexts of its own, which ctx cannot cancel, so fn
// runs in a goroutine: when ctx ends or the bound passes, callWorkspace
// returns at once and fn finishes by itself within the SDK's HTTP timeout
// (set to the call timeout) and its one-attempt retry budget. fn's result is
// only delivered through the channel, so nothing is shared once abandoned.
// SDK log lines of the call go to the UC's logger.
func callWorkspace[T any](ctx context.Context, u *UC, op, table string, fn func(context.Context, *databricks.WorkspaceClient, *client.DatabricksClient) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, u.explain(ctx, ctx, op, table, err)
	}
	cctx, cancel := context.WithTimeout(ctx, u.callTimeout)
	defer cancel()
	cctx = logger.NewContext(cctx, u.sdkLog)
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		w, raw, err := u.clients()
		if err != nil {
			done <- result{zero, err}
			return
		}
		v, err := fn(cctx, w, raw)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return zero, u.explain(ctx, cctx, op, table, r.err)
		}
		return r.v, nil
	case <-cctx.Done():
		return zero, u.explain(ctx, cctx, op, table, cctx.Err())
	}
}

// explain turns an error of a workspace call into a *WorkspaceError. ctx is
// the caller's context, cctx the bounded one the call ran under.
func (u *UC) explain(ctx, cctx context.Context, op, table string, err error) *WorkspaceError {
	e := &WorkspaceError{Host: u.host, Op: op, Err: err}
	var ae *apierr.APIError
	var ue *url.Error
	var ce *sdkConfigError
	switch {
	case ctx.Err() != nil:
		e.Kind, e.Cause = KindCanceled, "canceled: "+ctx.Err().Error()
	case cctx.Err() == context.DeadlineExceeded:
		e.Kind, e.Cause = KindTimeout, fmt.Sprintf("no answer within %s (call_timeout)", u.callTimeout)
		if last := u.transport.lastFailure(); last != "" {
			e.Cause += "; last failure: " + last
		}
	case errors.As(err, &ae):
		u.explainAPI(e, ae, table)
	case errors.As(err, &ue) && tokenRefused(ue.Err):
		e.Kind, e.permanent = KindCredentials, true
		e.Cause = fmt.Sprintf("token endpoint %s refused the OAuth client credentials of client_id %q%s: %s",
			redactURL(ue.URL), u.principal(), u.fromSource(), oauthReason(ue.Err))
		e.Hint = "check the service principal's OAuth secret (it may be wrong, expired or rotated: create a new one under the service principal's Secrets) and that client_id is that service principal's application id"
	case errors.As(err, &ue) && (ue.Timeout() || strings.Contains(ue.Err.Error(), "timed out after")):
		// The SDK's inactivity timeout is the call timeout too; it may fire
		// just before ours.
		e.Kind = KindTimeout
		e.Cause = fmt.Sprintf("no answer within %s (call_timeout): %s", u.callTimeout, ue.Err)
	case errors.As(err, &ue):
		e.Kind, e.Cause, e.Hint = KindUnreachable, ue.Err.Error(), transportHint(ue.Err)
	case errors.As(err, &ce):
		e.Kind, e.permanent, e.Cause = KindConfig, true, ce.Error()
	case strings.Contains(err.Error(), "auth:"):
		// The SDK's credential strategies failed without reaching an
		// endpoint (nothing configured, or an unusable profile).
		e.Kind, e.permanent = KindConfig, true
		e.Cause = strings.TrimPrefix(err.Error(), "failed during request visitor: ")
	default:
		e.Kind, e.Cause = KindService, err.Error()
	}
	return e
}

// explainAPI phrases an error answer of the workspace REST API.
func (u *UC) explainAPI(e *WorkspaceError, ae *apierr.APIError, table string) {
	e.Cause = fmt.Sprintf("%d %s", ae.StatusCode, ae.ErrorCode)
	if ae.Message != "" {
		e.Cause += ": " + ae.Message
	}
	switch {
	case ae.StatusCode == http.StatusUnauthorized || ae.ErrorCode == "UNAUTHENTICATED":
		e.Kind, e.permanent = KindCredentials, true
		if u.authType == "pat" {
			e.Hint = "check the personal access token" + u.fromSource() + ": it may be wrong, expired or revoked"
		} else {
			e.Hint = fmt.Sprintf("check the credentials of client_id %q%s", u.principal(), u.fromSource())
		}
	case ae.StatusCode == http.StatusForbidden || ae.ErrorCode == "PERMISSION_DENIED":
		e.Kind, e.permanent = KindPermission, true
		if table != "" {
			e.Hint = typemap.GrantHint(table, u.principal())
		}
	case strings.Contains(ae.ErrorCode+" "+ae.Message, invalidNameClass):
		e.Kind, e.permanent = KindInvalidName, true
		if err := typemap.CheckTableName(table); err != nil {
			e.Hint = err.Error()
		} else {
			e.Hint = "names are catalog.schema.table, each part ASCII letters, digits and underscore"
		}
	default:
		e.Kind = KindService
		// Other refusals (4xx) repeat until something changes; throttling,
		// timeouts, conflicts and server errors may pass.
		switch {
		case ae.StatusCode == http.StatusRequestTimeout, ae.StatusCode == http.StatusConflict,
			ae.StatusCode == http.StatusTooManyRequests, ae.StatusCode >= 500:
		case ae.StatusCode >= 400:
			e.permanent = true
		}
	}
}

// invalidNameClass is the Databricks error class for a malformed catalog,
// schema or table name (docs.databricks.com error classes,
// INVALID_SCHEMA_OR_RELATION_NAME).
const invalidNameClass = "INVALID_SCHEMA_OR_RELATION_NAME"

// tokenRefused reports whether err, from the SDK's token request, is the
// token endpoint answering 4xx: the SDK maps the answer to an error that
// unwraps to apierr's status sentinels (config.tokenError), while transport
// failures do not.
func tokenRefused(err error) bool {
	for _, s := range []error{apierr.ErrBadRequest, apierr.ErrUnauthenticated, apierr.ErrPermissionDenied, apierr.ErrNotFound} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// oauthReason extracts "error: error_description" (RFC 6749 §5.2) from a
// token refusal, whose text is the endpoint's body; anything else is kept
// short.
func oauthReason(err error) string {
	text := strings.TrimSpace(err.Error())
	var oe struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	if i := strings.IndexByte(text, '{'); i >= 0 && json.Unmarshal([]byte(text[i:]), &oe) == nil && oe.Error != "" {
		if oe.Description != "" {
			return oe.Error + ": " + oe.Description
		}
		return oe.Error
	}
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	return text
}

// transportHint says what a transport failure usually means.
func transportHint(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "first record does not look like a TLS handshake"),
		strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		return "the server at this address does not speak TLS: check the host URL (plain http:// is only for a loopback emulator)"
	case strings.Contains(msg, "x509:") || strings.Contains(msg, "tls: failed to verify certificate"):
		return "the server's TLS certificate was not accepted: check the host URL"
	case strings.Contains(msg, "connection refused"):
		return "nothing accepts connections there: check the host URL and port, or wait for the workspace to come back"
	case strings.Contains(msg, "no such host"):
		return "the host name does not resolve: check the host URL"
	}
	return ""
}

// redactURL drops the query and credentials of a URL for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// watchTransport is the HTTP transport under databricks-sdk-go. It logs the
// first failed request of a streak at once (warn: which URL, what cause),
// later ones at debug, and the recovery, so that an unreachable workspace is
// visible within a request's failure time rather than after the SDK's
// retries; and it remembers the last failure so a timed-out call can name it.
type watchTransport struct {
	base    http.RoundTripper
	log     *slog.Logger
	failing atomic.Bool
	last    atomic.Pointer[string]
}

func (t *watchTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		if r.Context().Err() != nil {
			// Our own cancellation or timeout: the call reports it.
			return resp, err
		}
		where := r.URL.Scheme + "://" + r.URL.Host + r.URL.Path
		cause := err.Error()
		t.last.Store(&cause)
		level := slog.LevelWarn
		if t.failing.Swap(true) {
			level = slog.LevelDebug
		}
		args := []any{"url", where, "error", cause}
		if h := transportHint(err); h != "" {
			args = append(args, "hint", h)
		}
		t.log.Log(r.Context(), level, "catalog: workspace request failed: "+r.Method+" "+where+": "+cause, args...)
		return resp, err
	}
	if t.failing.Swap(false) {
		t.log.Info("catalog: workspace reachable again", "url", r.URL.Scheme+"://"+r.URL.Host)
	}
	return resp, nil
}

// lastFailure returns the cause of the last failed request, or "".
func (t *watchTransport) lastFailure() string {
	if p := t.last.Load(); p != nil {
		return *p
	}
	return ""
}

// sdkLogger routes databricks-sdk-go's logger (logger.Logger) into slog, so
// its lines, such as "[WARN] Failed to resolve host metadata", reach the
// pipeline's logger instead of stderr.
type sdkLogger struct{ l *slog.Logger }

var _ logger.Logger = sdkLogger{}

// sdkLevel maps the SDK's levels onto slog's; trace sits below debug.
func sdkLevel(level logger.Level) slog.Level {
	switch {
	case level <= logger.LevelTrace:
		return slog.LevelDebug - 4
	case level <= logger.LevelDebug:
		return slog.LevelDebug
	case level <= logger.LevelInfo:
		return slog.LevelInfo
	case level <= logger.LevelWarn:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

func (s sdkLogger) Enabled(ctx context.Context, level logger.Level) bool {
	return s.l.Enabled(ctx, sdkLevel(level))
}

func (s sdkLogger) logf(ctx context.Context, level logger.Level, format string, v ...any) {
	l := sdkLevel(level)
	if !s.l.Enabled(ctx, l) {
		return
	}
	s.l.Log(ctx, l, "databricks-sdk: "+strings.TrimSpace(fmt.Sprintf(format, v...)))
}

func (s sdkLogger) Tracef(ctx context.Context, format string, v ...any) {
	s.logf(ctx, logger.LevelTrace, format, v...)
}
func (s sdkLogger) Debugf(ctx context.Context, format string, v ...any) {
	s.logf(ctx, logger.LevelDebug, format, v...)
}
func (s sdkLogger) Infof(ctx context.Context, format string, v ...any) {
	s.logf(ctx, logger.LevelInfo, format, v...)
}
func (s sdkLogger) Warnf(ctx context.Context, format string, v ...any) {
	s.logf(ctx, logger.LevelWarn, format, v...)
}
func (s sdkLogger) Errorf(ctx context.Context, format string, v ...any) {
	s.logf(ctx, logger.LevelError, format, v...)
}

// globalSDKLog is where the SDK's process-wide lines go (nil: nowhere).
var (
	globalSDKLog     atomic.Pointer[slog.Logger]
	installSDKLogger sync.Once
)

// globalSDKLogger is installed once as logger.DefaultLogger and forwards to
// globalSDKLog, so that routing can change later without writing the SDK's
// unsynchronised global while its goroutines read it.
type globalSDKLogger struct{}

func (globalSDKLogger) target() (sdkLogger, bool) {
	l := globalSDKLog.Load()
	return sdkLogger{l}, l != nil
}

func (g globalSDKLogger) Enabled(ctx context.Context, level logger.Level) bool {
	l, ok := g.target()
	return ok && l.Enabled(ctx, level)
}
func (g globalSDKLogger) Tracef(ctx context.Context, format string, v ...any) {
	if l, ok := g.target(); ok {
		l.Tracef(ctx, format, v...)
	}
}
func (g globalSDKLogger) Debugf(ctx context.Context, format string, v ...any) {
	if l, ok := g.target(); ok {
		l.Debugf(ctx, format, v...)
	}
}
func (g globalSDKLogger) Infof(ctx context.Context, format string, v ...any) {
	if l, ok := g.target(); ok {
		l.Infof(ctx, format, v...)
	}
}
func (g globalSDKLogger) Warnf(ctx context.Context, format string, v ...any) {
	if l, ok := g.target(); ok {
		l.Warnf(ctx, format, v...)
	}
}
func (g globalSDKLogger) Errorf(ctx context.Context, format string, v ...any) {
	if l, ok := g.target(); ok {
		l.Errorf(ctx, format, v...)
	}
}

// RouteSDKLogs sends databricks-sdk-go's process-wide logger
// (logger.DefaultLogger, which otherwise prints "[WARN] …" to stderr) to l.
// The SDK logs configuration resolution and token fetches there, on contexts
// of its own; the calls a UC makes carry their UC's logger in their context
// as well. NewUC calls it when given a logger, so the last configured logger
// wins for the SDK's process-wide lines.
func RouteSDKLogs(l *slog.Logger) {
	if l == nil {
		return
	}
	globalSDKLog.Store(l)
	installSDKLogger.Do(func() { logger.DefaultLogger = globalSDKLogger{} })
}
