package zerobusreplay

import (
	"errors"
	"sync/atomic"

	"github.com/apache/iceberg-go/catalog/rest"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
)

// RefusedExitCode is the exit status of benthos-zerobus when a
// zerobus_replay input refused its table (cmd/benthos-zerobus checks
// Refused after the run). Benthos itself exits 0 when a pipeline ends and 1
// when it fails to start, so a distinct status lets a script tell "the table
// cannot be replayed as configured" from both.
const RefusedExitCode = 3

// refusals counts the inputs of this process that refused their table.
var refusals atomic.Int64

// Refused reports whether a zerobus_replay input of this process refused its
// table and ended without replaying it.
func Refused() bool { return refusals.Load() > 0 }

// refusal marks an error that retrying cannot cure: the configuration or the
// table has to change first (a selection with coverage gaps under
// require_complete, a column the selection needs and the table lacks).
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

func refuse(err error) error { return &refusal{err} }

// isRefusal reports whether a Connect error is permanent: the table does not
// exist or fails the primary_raw preconditions, the principal lacks a grant
// or its credentials are refused, any other 4xx answer of the workspace or
// of the Iceberg REST catalog (but 404), or a refusal of this input.
// Everything else — a table not converted to Iceberg yet,
// an unreachable host, a timeout, a 5xx, throttling, a conversion that did
// not finish within force_timeout — may pass, and is retried with back-off.
func isRefusal(err error) bool {
	var r *refusal
	var pe *catalog.PreconditionError
	var we *catalog.WorkspaceError
	switch {
	case errors.As(err, &r), errors.As(err, &pe):
		return true
	case errors.As(err, &we):
		return we.Permanent()
	}
	// Not catalog.ErrNoSuchTable: Describe has found the table in Unity
	// Catalog by then, so the REST catalog's 404 means its first Iceberg
	// conversion has not happened yet, which passes.
	for _, target := range []error{rest.ErrBadRequest, rest.ErrUnauthorized, rest.ErrForbidden, rest.ErrOAuthError} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
