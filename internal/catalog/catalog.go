// Package catalog provisions and evolves the Unity Catalog tables the Zerobus
// output writes to. Zerobus itself never creates or alters a table, so this
// package does: it describes the live table, computes a pure ReconcilePlan
// from the live state and the desired one (built from the incoming Arrow
// schema, reserved metadata columns and an optional data contract), logs the
// plan and applies it as SQL DDL. It also vends temporary table credentials and
// checks the preconditions of the primary-raw role.
//
// The output depends on the TableCatalog interface only; UC is one backend of
// it (see NewUC).
package catalog

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// TableCatalog is the seam the output is written against: it never talks to
// Unity Catalog directly. Implementations must be safe for concurrent use.
type TableCatalog interface {
	// Describe fetches the live state of a table, bypassing any cache (and
	// refreshing it). It returns nil, nil when the table does not exist.
	Describe(ctx context.Context, table string) (*TableState, error)
	// Reconcile brings the table to the desired shape: it computes a plan,
	// logs it and applies it. It is idempotent and cheap when nothing changed
	// (a backend may answer from the state it last described), so the output
	// calls it before its first write and again on drift. After the service
	// rejected a write for its schema, call Describe first so the plan is
	// computed against the live table. A plan that refuses a change returns a
	// *RefusedError and applies nothing. ReconcileOutcome.State is the table
	// as described after applying: the output's target schema
	// (TableState.ArrowSchema) and, for primary_raw, the input of
	// CheckPrimaryRaw.
	Reconcile(ctx context.Context, desired DesiredTable) (ReconcileOutcome, error)
	// RegisterWriter records this writer in the table's properties, for
	// ownership and coverage bookkeeping. It is a no-op when already recorded.
	RegisterWriter(ctx context.Context, table string, writer WriterInfo) error
	// VendCredentials returns temporary, scoped storage credentials for the
	// table that inherit the caller's privileges.
	VendCredentials(ctx context.Context, table string, access Access) (*VendedCredentials, error)
}

// TableState is a table as the catalog describes it.
type TableState struct {
	FullName  string
	TableID   string
	TableType string // MANAGED, EXTERNAL, VIEW, ...
	// Columns are in table position order.
	Columns    []typemap.Column
	Properties map[string]string
	// Tags are the table's tags when the backend can read them; nil when it
	// cannot (UC's tables endpoint does not return them), and, from UC,
	// until a Reconcile asked for tags (only a plan with tags reads them).
	Tags    map[string]string
	Comment string
	// ViewDefinition is a view's query text (TableType VIEW); "" for a table.
	ViewDefinition string
	// IcebergConvertedVersion is the Delta version the asynchronous Iceberg
	// metadata conversion has reached; nil when the table reports none.
	IcebergConvertedVersion *int64
}

// Column returns the column named name (case-insensitively, as Delta
// resolves names) and whether it exists.
func (s *TableState) Column(name string) (typemap.Column, bool) {
	for _, c := range s.Columns {
		if strings.EqualFold(c.Name, name) {
			return c, true
		}
	}
	return typemap.Column{}, false
}

// ArrowSchema is the Arrow schema a Zerobus stream for this table must carry
// (the converter's target schema), in column order.
func (s *TableState) ArrowSchema() (*arrow.Schema, error) {
	sc, err := typemap.ArrowSchema(s.Columns)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", s.FullName, err)
	}
	return sc, nil
}

// Role is the part a table plays for the output.
type Role string

const (
	// RoleDerived is an ordinary table: the output writes, something else is
	// the record of truth.
	RoleDerived Role = "derived"
	// RolePrimaryRaw is the record of truth that recovery reads back through
	// Iceberg: it must have Iceberg reads on and deletion vectors off.
	RolePrimaryRaw Role = "primary_raw"
)

// ParseRole parses a role as spelled in configuration ("" means derived).
func ParseRole(s string) (Role, error) {
	switch Role(strings.ToLower(s)) {
	case "", RoleDerived:
		return RoleDerived, nil
	case RolePrimaryRaw:
		return RolePrimaryRaw, nil
	}
	return "", fmt.Errorf("role %q: want %q or %q", s, RoleDerived, RolePrimaryRaw)
}

// Policy says what to do with a managed comment a human has edited since the
// catalog last wrote it.
type Policy string

const (
	// PolicyRespect leaves a human edit in place (and notes it in the plan).
	PolicyRespect Policy = "respect"
	// PolicyRestore rewrites the comment from its authority.
	PolicyRestore Policy = "restore"
)

// ParsePolicy parses a comments policy as spelled in configuration ("" means
// respect).
func ParsePolicy(s string) (Policy, error) {
	switch Policy(strings.ToLower(s)) {
	case "", PolicyRespect:
		return PolicyRespect, nil
	case PolicyRestore:
		return PolicyRestore, nil
	}
	return "", fmt.Errorf("comments policy %q: want %q or %q", s, PolicyRespect, PolicyRestore)
}

// DesiredTable is the shape the output needs a table to have.
type DesiredTable struct {
	// FullName is catalog.schema.table.
	FullName string
	// Columns are the incoming payload columns plus the reserved metadata
	// columns, each with its built-in Comment where it has one.
	Columns []typemap.Column
	// Comments maps a payload column name to its description, from the
	// output's config or a data contract. It overrides Column.Comment.
	Comments map[string]string
	// Comment is the table description ("" leaves the table comment alone).
	Comment string
	// Properties are table properties to set at create and keep in sync
	// (owner, contract id and version, source).
	Properties map[string]string
	// Tags are table tags to set at create and keep in sync.
	Tags map[string]string
	// Role decides the table properties a created table gets.
	Role Role
	// AllowWidening opts in to lossless column type widening.
	AllowWidening bool
	// AcceptNarrowerInput keeps a live column whose type losslessly holds the
	// incoming one (live BIGINT, incoming INT): the converter writes the
	// values in the live type. Without it such a difference is refused as a
	// narrowing, which suits callers whose desired types are authoritative.
	AcceptNarrowerInput bool
	// DropNotNull names the live NOT NULL columns to make nullable (ALTER
	// COLUMN … DROP NOT NULL): the fields a registry schema version made
	// optional. A column already nullable, or not in Columns, is left
	// alone; NOT NULL is never added to a live column.
	DropNotNull []string
	// CommentsPolicy handles human edits of managed comments.
	CommentsPolicy Policy
	// DedupView, when set, is the catalog.schema.view Reconcile keeps beside
	// the table: each (_zb_source, _zb_offset) of the table once (see
	// DedupViewQuery). It is created with the table and redefined whenever
	// the table's columns change, since a view's columns are fixed when it
	// is defined. Empty: no view.
	DedupView string
}

// comment returns the desired description of a column: Comments wins over the
// column's own (built-in) comment.
func (d DesiredTable) comment(c typemap.Column) string {
	if s, ok := d.Comments[c.Name]; ok {
		return s
	}
	return c.Comment
}

// WriterInfo identifies a writer of a table.
type WriterInfo struct {
	// ID is a stable identifier of the writer (pipeline or output label).
	ID string
	// Source describes where the rows come from (e.g. a topic).
	Source string
	// Role is the role the writer holds for the table.
	Role Role
}

// Access is the kind of temporary credential to vend.
type Access string

const (
	AccessRead      Access = "READ"
	AccessReadWrite Access = "READ_WRITE"
)

// ReconcileOutcome is what Reconcile did.
type ReconcileOutcome struct {
	// Plan is the plan computed against the live table: empty when it was up
	// to date, the refused plan when Reconcile returned a *RefusedError.
	Plan ReconcilePlan
	// Applied are the plans executed, in order: more than one when another
	// writer changed the table meanwhile and the plan was recomputed.
	Applied []ReconcilePlan
	// Statements is the number of SQL statements executed.
	Statements int
	// State is the table as described after applying.
	State *TableState
}

// ColumnsChanged reports whether an applied plan created the table or
// changed its columns, i.e. whether streams opened on the previous schema
// must be reopened. Comment, property and tag changes do not count.
func (o ReconcileOutcome) ColumnsChanged() bool {
	for _, p := range o.Applied {
		for _, s := range p.Steps {
			switch s.Kind {
			case StepCreateTable, StepAddColumn, StepWidenColumn, StepDropNotNull:
				return true
			}
		}
	}
	return false
}

// AWSCreds are temporary AWS credentials.
type AWSCreds struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	AccessPoint     string
}

// String never prints the secret parts.
func (a AWSCreds) String() string {
	return fmt.Sprintf("aws(access_key_id=%s, secret=<redacted>, session_token=<redacted>)", redactKeyID(a.AccessKeyID))
}

// GoString keeps %#v from printing secrets too.
func (a AWSCreds) GoString() string { return a.String() }

// VendedCredentials are temporary storage credentials for one table. Exactly
// one of AWS, AzureSAS and GCPToken is set.
type VendedCredentials struct {
	AWS        *AWSCreds
	AzureSAS   string
	GCPToken   string
	Expiration time.Time
	// URL is the table's storage location the credentials are scoped to.
	URL string
}

// Cloud names the kind of credential held.
func (v VendedCredentials) Cloud() string {
	switch {
	case v.AWS != nil:
		return "aws"
	case v.AzureSAS != "":
		return "azure"
	case v.GCPToken != "":
		return "gcp"
	}
	return "none"
}

// ExpiresWithin reports whether the credentials expire within d of now, the
// signal to vend fresh ones.
func (v VendedCredentials) ExpiresWithin(now time.Time, d time.Duration) bool {
	return !v.Expiration.After(now.Add(d))
}

// String describes the credentials without any secret.
func (v VendedCredentials) String() string {
	return fmt.Sprintf("credentials(%s, url=%s, expires=%s)", v.Cloud(), v.URL, v.Expiration.UTC().Format(time.RFC3339))
}

// GoString keeps %#v from printing secrets.
func (v VendedCredentials) GoString() string { return v.String() }

func redactKeyID(id string) string {
	if len(id) <= 4 {
		return "<redacted>"
	}
	return id[:4] + "…"
}

// RefusedError is returned by Reconcile when the plan refuses a change: a
// narrowing, a type conflict, a lossy or not opted-in widening, or the removal
// of a NOT NULL column. Nothing was applied.
type RefusedError struct {
	Table    string
	Refusals []Refusal
}

func (e *RefusedError) Error() string {
	parts := make([]string, len(e.Refusals))
	for i, r := range e.Refusals {
		parts[i] = r.String()
	}
	return fmt.Sprintf("catalog: refusing to reconcile table %s: %s", e.Table, strings.Join(parts, "; "))
}

// Refusal is one change the plan refuses.
type Refusal struct {
	Column string
	Reason string
}

func (r Refusal) String() string {
	if r.Column == "" {
		return r.Reason
	}
	return fmt.Sprintf("column %q: %s", r.Column, r.Reason)
}
