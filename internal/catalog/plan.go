package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Table properties this package reads and writes.
const (
	// PropManaged marks a table whose comments this package manages.
	PropManaged = "zerobus.managed"
	// PropCommentHashes holds, as JSON {column: hash}, the hash of every
	// comment this package last wrote; the table comment's key is "".
	PropCommentHashes = "zerobus.comment_hashes"
	// PropTagsHash holds the hash of the tags this package last set: UC's
	// tables endpoint does not return tags, so this is how a re-sync knows
	// they are current.
	PropTagsHash = "zerobus.tags_hash"
	// PropWriterPrefix prefixes the property RegisterWriter records a writer
	// under.
	PropWriterPrefix = "zerobus.writer."

	PropIcebergCompatV2      = "delta.enableIcebergCompatV2"
	PropUniversalFormats     = "delta.universalFormat.enabledFormats"
	PropColumnMappingMode    = "delta.columnMapping.mode"
	PropDeletionVectors      = "delta.enableDeletionVectors"
	PropMinReaderVersion     = "delta.minReaderVersion"
	PropMinWriterVersion     = "delta.minWriterVersion"
	PropTimestampNTZFeature  = "delta.feature.timestampNtz"
	PropEnableTypeWidening   = "delta.enableTypeWidening"
	tableCommentKey          = "(table)"
	featureSupported         = "supported"
	minReaderForIcebergReads = 2
	minWriterForIcebergReads = 7
)

// PrimaryRawProperties are the table properties a primary-raw table is created
// with: Iceberg reads (UniForm) on, column mapping by name, deletion vectors
// explicitly off (workspaces may enable them by default) and the protocol
// versions those features need.
func PrimaryRawProperties() map[string]string {
	return map[string]string{
		PropIcebergCompatV2:   "true",
		PropUniversalFormats:  "iceberg",
		PropColumnMappingMode: "name",
		PropDeletionVectors:   "false",
		PropMinReaderVersion:  fmt.Sprint(minReaderForIcebergReads),
		PropMinWriterVersion:  fmt.Sprint(minWriterForIcebergReads),
	}
}

// IcebergReadsOn reports whether table properties turn Iceberg reads on, which
// restricts type widening to the Iceberg-V2-legal changes.
func IcebergReadsOn(props map[string]string) bool {
	for _, f := range strings.Split(props[PropUniversalFormats], ",") {
		if strings.EqualFold(strings.TrimSpace(f), "iceberg") {
			return true
		}
	}
	return false
}

// StepKind is the kind of one plan step.
type StepKind int

const (
	StepCreateTable StepKind = iota + 1
	StepAddColumn
	StepWidenColumn
	StepSetComment
	StepSetProperty
	StepSetTags
	StepRefuse
	StepDropNotNull
)

var stepKindNames = map[StepKind]string{
	StepCreateTable: "CreateTable",
	StepAddColumn:   "AddColumn",
	StepWidenColumn: "WidenColumn",
	StepSetComment:  "SetComment",
	StepSetProperty: "SetProperty",
	StepSetTags:     "SetTags",
	StepRefuse:      "Refuse",
	StepDropNotNull: "DropNotNull",
}

func (k StepKind) String() string {
	if s, ok := stepKindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("StepKind(%d)", int(k))
}

// Step is one change of a plan. Which fields are set depends on Kind.
type Step struct {
	Kind StepKind
	// Column names the column of AddColumn, WidenColumn, DropNotNull,
	// SetComment (empty for the table comment) and Refuse (empty for a
	// table-level refusal).
	Column string
	// Columns are the columns of CreateTable, comments included.
	Columns []typemap.Column
	// Type is the type of AddColumn and the new type of WidenColumn.
	Type typemap.Type
	// From is the live type of WidenColumn.
	From typemap.Type
	// Comment is the comment of AddColumn and SetComment, and the table
	// comment of CreateTable.
	Comment string
	// Properties are the properties of CreateTable and SetProperty.
	Properties map[string]string
	// Tags are the tags of SetTags.
	Tags map[string]string
	// Reason explains a Refuse.
	Reason string
}

// String is the step's human log line.
func (s Step) String() string {
	switch s.Kind {
	case StepCreateTable:
		names := make([]string, len(s.Columns))
		for i, c := range s.Columns {
			names[i] = c.Name + " " + c.Type.Text()
		}
		return fmt.Sprintf("create table (%s) with properties %s", strings.Join(names, ", "), formatMap(s.Properties))
	case StepAddColumn:
		line := fmt.Sprintf("add column %q %s", s.Column, s.Type.Text())
		if s.Comment != "" {
			line += fmt.Sprintf(" comment %q", s.Comment)
		}
		return line
	case StepWidenColumn:
		return fmt.Sprintf("widen column %q from %s to %s", s.Column, s.From.Text(), s.Type.Text())
	case StepDropNotNull:
		return fmt.Sprintf("drop NOT NULL on column %q", s.Column)
	case StepSetComment:
		if s.Column == "" {
			return fmt.Sprintf("set table comment %q", s.Comment)
		}
		return fmt.Sprintf("set comment of column %q to %q", s.Column, s.Comment)
	case StepSetProperty:
		return "set properties " + formatMap(s.Properties)
	case StepSetTags:
		return "set tags " + formatMap(s.Tags)
	case StepRefuse:
		return "REFUSE " + Refusal{Column: s.Column, Reason: s.Reason}.String()
	}
	return s.Kind.String()
}

func formatMap(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, m[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// ReconcilePlan is the pure, ordered list of changes that takes a live table
// to the desired one. It is computed without any I/O, logged, then applied.
type ReconcilePlan struct {
	Table string
	Steps []Step
	// Notes record decisions that need no step but deserve a log line, such as
	// a human-edited comment left in place under the respect policy.
	Notes []string
}

// Refused returns the refusals of the plan; a plan with any is not applied.
func (p ReconcilePlan) Refused() []Refusal {
	var out []Refusal
	for _, s := range p.Steps {
		if s.Kind == StepRefuse {
			out = append(out, Refusal{Column: s.Column, Reason: s.Reason})
		}
	}
	return out
}

// Empty reports whether the plan changes nothing (notes do not count).
func (p ReconcilePlan) Empty() bool { return len(p.Steps) == 0 }

// Creates reports whether the plan creates the table.
func (p ReconcilePlan) Creates() bool {
	return len(p.Steps) > 0 && p.Steps[0].Kind == StepCreateTable
}

// String renders the plan as log lines: a header, one line per step, one per
// note.
func (p ReconcilePlan) String() string {
	var b strings.Builder
	if p.Empty() {
		fmt.Fprintf(&b, "table %s: up to date", p.Table)
	} else {
		fmt.Fprintf(&b, "table %s: %d step(s)", p.Table, len(p.Steps))
	}
	for i, s := range p.Steps {
		fmt.Fprintf(&b, "\n  %d. %s", i+1, s)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "\n  note: %s", n)
	}
	return b.String()
}

// RefusedError returns the plan's refusals as an error, or nil if it has none.
func (p ReconcilePlan) RefusedError() error {
	if r := p.Refused(); len(r) > 0 {
		return &RefusedError{Table: p.Table, Refusals: r}
	}
	return nil
}

// Plan computes the steps that take live (nil if the table is absent) to
// desired. It is pure: same inputs, same plan. The rules:
//   - absent → CreateTable with every column, comment and property (the
//     primary-raw role adds PrimaryRawProperties);
//   - a new column → AddColumn (always nullable) with its comment;
//   - a different type → WidenColumn when it is a lossless widening (the
//     Iceberg-V2-legal ones when Iceberg reads are on) and AllowWidening is
//     set, otherwise Refuse naming the column;
//   - a live NOT NULL column named in DropNotNull → DropNotNull (nothing
//     when it is nullable already); nullability is never compared
//     otherwise, and NOT NULL is never added;
//   - a live column missing from desired is fine unless it is NOT NULL;
//   - comments are written only when their authority changed since the last
//     write (hashes in PropCommentHashes); a human edit is left or restored
//     per CommentsPolicy;
//   - desired properties and tags that differ are set.
func Plan(live *TableState, desired DesiredTable) ReconcilePlan {
	p := ReconcilePlan{Table: desired.FullName}
	if r := validateDesired(desired); len(r) > 0 {
		for _, x := range r {
			p.Steps = append(p.Steps, Step{Kind: StepRefuse, Column: x.Column, Reason: x.Reason})
		}
		return p
	}
	if live == nil {
		return planCreate(desired)
	}
	return planEvolve(live, desired)
}

// validateDesired refuses what no table could be: no columns, two columns whose
// names only differ in case (Delta names are case-insensitive), VARIANT columns
// on a primary-raw table.
func validateDesired(d DesiredTable) []Refusal {
	var out []Refusal
	if len(d.Columns) == 0 {
		out = append(out, Refusal{Reason: "the desired table has no columns"})
	}
	seen := map[string]string{}
	for _, c := range d.Columns {
		if c.Name == "" {
			out = append(out, Refusal{Reason: "a desired column has an empty name"})
			continue
		}
		k := strings.ToLower(c.Name)
		if prev, ok := seen[k]; ok {
			out = append(out, Refusal{Column: c.Name, Reason: fmt.Sprintf("clashes with column %q: Delta column names are case-insensitive", prev)})
			continue
		}
		seen[k] = c.Name
		if d.Role == RolePrimaryRaw && c.Type.Contains(typemap.Variant) {
			out = append(out, Refusal{Column: c.Name, Reason: "VARIANT is not allowed on a primary_raw table: Iceberg reads cannot represent it"})
		}
	}
	return out
}

func planCreate(d DesiredTable) ReconcilePlan {
	p := ReconcilePlan{Table: d.FullName}
	props := maps.Clone(d.Properties)
	if props == nil {
		props = map[string]string{}
	}
	if d.Role == RolePrimaryRaw {
		maps.Copy(props, PrimaryRawProperties())
	}
	if d.AllowWidening {
		props[PropEnableTypeWidening] = "true"
	}
	if slices.ContainsFunc(d.Columns, func(c typemap.Column) bool { return needsColumnMapping(c.Name) }) && !columnMappingOn(props) {
		// Delta accepts such names only with column mapping, which needs
		// protocol reader 2 / writer 5.
		props[PropColumnMappingMode] = "name"
		props[PropMinReaderVersion] = fmt.Sprint(max(atoi(props[PropMinReaderVersion]), 2))
		props[PropMinWriterVersion] = fmt.Sprint(max(atoi(props[PropMinWriterVersion]), 5))
	}
	hashes := map[string]string{}
	cols := make([]typemap.Column, len(d.Columns))
	for i, c := range d.Columns {
		c.Comment = d.comment(c)
		if c.Comment != "" {
			hashes[c.Name] = commentHash(c.Comment)
		}
		if c.Type.Contains(typemap.TimestampNTZ) {
			props[PropTimestampNTZFeature] = featureSupported
		}
		cols[i] = c
	}
	if d.Comment != "" {
		hashes[tableCommentKey] = commentHash(d.Comment)
	}
	props[PropManaged] = "true"
	props[PropCommentHashes] = encodeHashes(hashes)
	if len(d.Tags) > 0 {
		props[PropTagsHash] = tagsHash(d.Tags)
	}
	p.Steps = append(p.Steps, Step{Kind: StepCreateTable, Columns: cols, Comment: d.Comment, Properties: props})
	if len(d.Tags) > 0 {
		p.Steps = append(p.Steps, Step{Kind: StepSetTags, Tags: maps.Clone(d.Tags)})
	}
	return p
}

func planEvolve(live *TableState, d DesiredTable) ReconcilePlan {
	p := ReconcilePlan{Table: d.FullName}
	iceberg := IcebergReadsOn(live.Properties)
	prereq := map[string]string{}
	var refusals, changes []Step
	hashes := decodeHashes(live.Properties[PropCommentHashes])
	stored := maps.Clone(hashes)

	desiredNames := map[string]bool{}
	for _, c := range d.Columns {
		desiredNames[strings.ToLower(c.Name)] = true
		want := d.comment(c)
		lc, ok := live.Column(c.Name)
		if !ok {
			if iceberg && c.Type.Contains(typemap.Variant) {
				refusals = append(refusals, Step{Kind: StepRefuse, Column: c.Name, Reason: "cannot add a VARIANT column: the table has Iceberg reads on"})
				continue
			}
			if needsColumnMapping(c.Name) && !columnMappingOn(live.Properties) {
				refusals = append(refusals, Step{Kind: StepRefuse, Column: c.Name,
					Reason: "the name contains characters (' ,;{}()=' or control) Delta accepts only with column mapping, which the table does not have"})
				continue
			}
			if c.Type.Contains(typemap.TimestampNTZ) && live.Properties[PropTimestampNTZFeature] != featureSupported {
				prereq[PropTimestampNTZFeature] = featureSupported
			}
			changes = append(changes, Step{Kind: StepAddColumn, Column: c.Name, Type: c.Type, Comment: want})
			if want != "" {
				hashes[c.Name] = commentHash(want)
			}
			continue
		}
		// Nullability is not compared: a nullable live field accepts non-null
		// values, and a NOT NULL one is the writer's per-row concern, unless
		// the caller asks it relaxed (DropNotNull: a registry schema made
		// the field optional).
		if !lc.Nullable && slices.ContainsFunc(d.DropNotNull, func(n string) bool { return strings.EqualFold(n, lc.Name) }) {
			changes = append(changes, Step{Kind: StepDropNotNull, Column: lc.Name})
		}
		switch {
		case lc.Type.SameShape(c.Type):
		case d.AcceptNarrowerInput && typemap.CanWiden(c.Type, lc.Type, false):
			p.Notes = append(p.Notes, fmt.Sprintf("column %q: incoming %s is written as the live %s", lc.Name, c.Type.Text(), lc.Type.Text()))
		default:
			step, widen := typeChange(lc, c, iceberg, d.AllowWidening)
			if !widen {
				refusals = append(refusals, step)
				continue
			}
			if live.Properties[PropEnableTypeWidening] != "true" {
				prereq[PropEnableTypeWidening] = "true"
			}
			changes = append(changes, step)
		}
		if want != "" {
			if s, ok := syncComment(&p, lc.Name, want, lc.Comment, stored, hashes, d.CommentsPolicy); ok {
				changes = append(changes, s)
			}
		}
	}
	for _, lc := range live.Columns {
		if !desiredNames[strings.ToLower(lc.Name)] && !lc.Nullable {
			refusals = append(refusals, Step{Kind: StepRefuse, Column: lc.Name,
				Reason: "the live column is NOT NULL but missing from the incoming schema, so no row could be written"})
		}
	}
	if d.Comment != "" {
		if s, ok := syncComment(&p, tableCommentKey, d.Comment, live.Comment, stored, hashes, d.CommentsPolicy); ok {
			changes = append(changes, s)
		}
	}

	props := map[string]string{}
	for k, v := range d.Properties {
		if isProtocolVersion(k) {
			// A protocol version is a floor: Delta never lowers one (an
			// ALTER that would is refused), so a live table at or above
			// the desired version is current.
			if cur, ok := live.Properties[k]; ok && atoi(cur) >= atoi(v) {
				continue
			}
		}
		if cur, ok := live.Properties[k]; !ok || cur != v {
			props[k] = v
		}
	}
	if !maps.Equal(hashes, stored) || (len(hashes) > 0 && live.Properties[PropManaged] != "true") {
		props[PropCommentHashes] = encodeHashes(hashes)
		props[PropManaged] = "true"
	}
	var tags *Step
	if len(d.Tags) > 0 && !tagsCurrent(live, d.Tags) {
		tags = &Step{Kind: StepSetTags, Tags: maps.Clone(d.Tags)}
		if h := tagsHash(d.Tags); live.Properties[PropTagsHash] != h {
			props[PropTagsHash] = h
		}
	}

	if d.Role == RolePrimaryRaw {
		// Reconcile never retrofits Iceberg reads or turns deletion vectors
		// off on an existing table: the role is refused instead (CheckPrimaryRaw).
		for _, u := range CheckPrimaryRaw(live) {
			p.Notes = append(p.Notes, "primary_raw precondition unmet: "+u.String())
		}
	}

	p.Steps = append(p.Steps, refusals...)
	if len(prereq) > 0 {
		p.Steps = append(p.Steps, Step{Kind: StepSetProperty, Properties: prereq})
	}
	p.Steps = append(p.Steps, changes...)
	if len(props) > 0 {
		p.Steps = append(p.Steps, Step{Kind: StepSetProperty, Properties: props})
	}
	if tags != nil {
		p.Steps = append(p.Steps, *tags)
	}
	return p
}

// typeChange decides a column whose live and desired types differ: a
// WidenColumn step (true) or a Refuse step naming the column (false).
func typeChange(live, want typemap.Column, iceberg, allowWidening bool) (Step, bool) {
	from, to := live.Type, want.Type
	refuse := func(format string, args ...any) (Step, bool) {
		return Step{Kind: StepRefuse, Column: live.Name, Reason: fmt.Sprintf(format, args...)}, false
	}
	switch {
	case typemap.CanWiden(from, to, iceberg):
		if !allowWidening {
			return refuse("widening %s to %s is lossless but not opted in (enable widening)", from.Text(), to.Text())
		}
		return Step{Kind: StepWidenColumn, Column: live.Name, From: from, Type: to}, true
	case typemap.CanWiden(from, to, false):
		return refuse("widening %s to %s is not allowed while the table has Iceberg reads on (only int to bigint, float to double and decimal precision increases are)", from.Text(), to.Text())
	case typemap.CanWiden(to, from, false):
		return refuse("narrowing %s to %s would lose values", from.Text(), to.Text())
	case from.IsIntegral() && (to.Kind == typemap.Float || to.Kind == typemap.Double):
		return refuse("changing %s to %s is lossy: not every integer fits a floating-point mantissa", from.Text(), to.Text())
	case from.IsNested() || to.IsNested():
		return refuse("changing the nested type %s to %s is not supported", from.Text(), to.Text())
	}
	return refuse("type conflict: the table has %s, the incoming schema has %s", from.Text(), to.Text())
}

// syncComment decides one managed comment (key tableCommentKey is the table
// comment). It
// returns a SetComment step when one must be written and updates hashes with
// what will be recorded.
func syncComment(p *ReconcilePlan, key, want, cur string, stored, hashes map[string]string, policy Policy) (Step, bool) {
	what := fmt.Sprintf("column %q", key)
	if key == tableCommentKey {
		what = "the table"
	}
	wantHash := commentHash(want)
	lastHash, managed := stored[key]
	// Already right: record the hash (a no-op when it is recorded).
	if cur == want {
		hashes[key] = wantHash
		return Step{}, false
	}
	humanEdited := (managed && commentHash(cur) != lastHash) || (!managed && cur != "")
	if humanEdited && policy != PolicyRestore {
		p.Notes = append(p.Notes, fmt.Sprintf("comment of %s was edited outside the catalog; leaving it (comments policy respect)", what))
		return Step{}, false
	}
	if humanEdited {
		p.Notes = append(p.Notes, fmt.Sprintf("comment of %s was edited outside the catalog; restoring it (comments policy restore)", what))
	}
	hashes[key] = wantHash
	column := key
	if key == tableCommentKey {
		column = "" // a SetComment step without a column is the table's
	}
	return Step{Kind: StepSetComment, Column: column, Comment: want}, true
}

// needsColumnMapping reports whether Delta accepts a column name only with
// column mapping on: it contains a space or one of ,;{}()= or a newline or
// tab. (Zerobus itself needs plain identifiers; see typemap.SafeIdentifier.)
func needsColumnMapping(name string) bool {
	return strings.ContainsAny(name, " ,;{}()\n\t=")
}

func columnMappingOn(props map[string]string) bool {
	m := strings.ToLower(props[PropColumnMappingMode])
	return m == "name" || m == "id"
}

// isProtocolVersion reports whether a table property is one of the Delta
// protocol versions, which only ever go up ("Protocol version upgrades are
// irreversible", https://docs.delta.io/latest/versioning.html).
func isProtocolVersion(k string) bool {
	return strings.EqualFold(k, PropMinReaderVersion) || strings.EqualFold(k, PropMinWriterVersion)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// commentHash is the short hash a managed comment is recorded by.
func commentHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:12]
}

func encodeHashes(h map[string]string) string {
	b, _ := json.Marshal(h) // map keys are sorted: stable text
	return string(b)
}

// decodeHashes reads PropCommentHashes; a missing or corrupt value reads as
// "nothing managed", which at worst rewrites comments once.
func decodeHashes(s string) map[string]string {
	h := map[string]string{}
	if s != "" {
		if err := json.Unmarshal([]byte(s), &h); err != nil {
			return map[string]string{}
		}
	}
	// Earlier versions recorded the table comment under the empty key.
	if v, ok := h[""]; ok {
		delete(h, "")
		if _, set := h[tableCommentKey]; !set {
			h[tableCommentKey] = v
		}
	}
	return h
}

func tagsHash(tags map[string]string) string {
	return commentHash(encodeHashes(tags))
}

// tagsCurrent reports whether the live table carries the desired tags: by the
// tags themselves when the backend reads them, else by the recorded hash.
func tagsCurrent(live *TableState, want map[string]string) bool {
	if live.Tags != nil {
		for k, v := range want {
			if cur, ok := live.Tags[k]; !ok || cur != v {
				return false
			}
		}
		return true
	}
	return live.Properties[PropTagsHash] == tagsHash(want)
}
