package catalog

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

const tbl = "main.raw.events"

func col(name, typ string, nullable bool, comment string) typemap.Column {
	return typemap.Column{Name: name, Type: typemap.MustParse(typ), Nullable: nullable, Comment: comment}
}

// simulate applies a plan to a table state the way UC would, so tests can
// check that a second plan is empty. Tags are not visible (as in UC).
func simulate(t *testing.T, live *TableState, p ReconcilePlan) *TableState {
	t.Helper()
	require.Empty(t, p.Refused(), "simulating a refused plan")
	var s *TableState
	if live != nil {
		cp := *live
		cp.Columns = slices.Clone(live.Columns)
		cp.Properties = maps.Clone(live.Properties)
		s = &cp
	}
	for _, st := range p.Steps {
		switch st.Kind {
		case StepCreateTable:
			require.Nil(t, s, "create over an existing table")
			s = &TableState{FullName: p.Table, TableID: "id-1", TableType: "MANAGED",
				Columns: slices.Clone(st.Columns), Properties: maps.Clone(st.Properties), Comment: st.Comment}
		case StepAddColumn:
			s.Columns = append(s.Columns, typemap.Column{Name: st.Column, Type: st.Type, Nullable: true, Comment: st.Comment})
		case StepWidenColumn:
			i := slices.IndexFunc(s.Columns, func(c typemap.Column) bool { return strings.EqualFold(c.Name, st.Column) })
			require.GreaterOrEqual(t, i, 0)
			s.Columns[i].Type = st.Type
		case StepSetComment:
			if st.Column == "" {
				s.Comment = st.Comment
				continue
			}
			i := slices.IndexFunc(s.Columns, func(c typemap.Column) bool { return strings.EqualFold(c.Name, st.Column) })
			require.GreaterOrEqual(t, i, 0)
			s.Columns[i].Comment = st.Comment
		case StepSetProperty:
			if s.Properties == nil {
				s.Properties = map[string]string{}
			}
			maps.Copy(s.Properties, st.Properties)
		case StepDropNotNull:
			i := slices.IndexFunc(s.Columns, func(c typemap.Column) bool { return strings.EqualFold(c.Name, st.Column) })
			require.GreaterOrEqual(t, i, 0)
			s.Columns[i].Nullable = true
		case StepSetTags:
		default:
			t.Fatalf("unexpected step %s", st)
		}
	}
	return s
}

func kinds(p ReconcilePlan) []StepKind {
	var out []StepKind
	for _, s := range p.Steps {
		out = append(out, s.Kind)
	}
	return out
}

// managedLive is a table this package created from desired.
func managedLive(t *testing.T, d DesiredTable) *TableState {
	t.Helper()
	return simulate(t, nil, Plan(nil, d))
}

func TestPlanCreate(t *testing.T) {
	d := DesiredTable{
		FullName: tbl,
		Columns: []typemap.Column{
			col("id", "bigint", false, ""),
			col("ts", "timestamp_ntz", true, ""),
			col("_zb_emit_ts", "timestamp", false, "Time the zerobus output stamped this row at write"),
		},
		Comments:      map[string]string{"id": "Event id"},
		Comment:       "Raw events",
		Properties:    map[string]string{"owner": "team-a"},
		Tags:          map[string]string{"domain": "events"},
		AllowWidening: true,
	}
	p := Plan(nil, d)
	require.Equal(t, []StepKind{StepCreateTable, StepSetTags}, kinds(p))
	create := p.Steps[0]
	assert.Equal(t, "Event id", create.Columns[0].Comment, "payload comment from Comments")
	assert.Equal(t, "Time the zerobus output stamped this row at write", create.Columns[2].Comment, "reserved built-in comment")
	assert.Equal(t, "team-a", create.Properties["owner"])
	assert.Equal(t, "supported", create.Properties[PropTimestampNTZFeature], "NTZ column needs the feature")
	assert.Equal(t, "true", create.Properties[PropEnableTypeWidening], "widening opted in")
	assert.Equal(t, "true", create.Properties[PropManaged])
	assert.NotContains(t, create.Properties, PropDeletionVectors, "derived role gets no primary-raw properties")
	hashes := decodeHashes(create.Properties[PropCommentHashes])
	assert.Equal(t, commentHash("Event id"), hashes["id"])
	assert.Equal(t, commentHash("Raw events"), hashes[tableCommentKey])
	assert.NotContains(t, hashes, "", "never an empty key")
	assert.NotContains(t, hashes, "ts", "no description → no managed comment")

	stmts, err := p.SQL()
	require.NoError(t, err)
	require.Len(t, stmts, 2)
	assert.Equal(t, "CREATE TABLE IF NOT EXISTS `main`.`raw`.`events` (`id` bigint NOT NULL COMMENT 'Event id', "+
		"`ts` timestamp_ntz, `_zb_emit_ts` timestamp NOT NULL COMMENT 'Time the zerobus output stamped this row at write') "+
		"USING DELTA COMMENT 'Raw events' TBLPROPERTIES (", stmts[0][:strings.Index(stmts[0], "TBLPROPERTIES (")+len("TBLPROPERTIES (")])
	assert.Equal(t, "ALTER TABLE `main`.`raw`.`events` SET TAGS ('domain'='events')", stmts[1])

	live := simulate(t, nil, p)
	again := Plan(live, d)
	assert.True(t, again.Empty(), "second plan after create: %s", again)
}

func TestPlanPrimaryRawCreateSatisfiesPreconditions(t *testing.T) {
	d := DesiredTable{FullName: tbl, Role: RolePrimaryRaw, Columns: []typemap.Column{col("id", "bigint", true, "")}}
	p := Plan(nil, d)
	props := p.Steps[0].Properties
	assert.Equal(t, "true", props[PropIcebergCompatV2])
	assert.Equal(t, "iceberg", props[PropUniversalFormats])
	assert.Equal(t, "name", props[PropColumnMappingMode])
	assert.Equal(t, "false", props[PropDeletionVectors])
	assert.Equal(t, "2", props[PropMinReaderVersion])
	assert.Equal(t, "7", props[PropMinWriterVersion])
	live := simulate(t, nil, p)
	assert.Empty(t, CheckPrimaryRaw(live))

	// A derived table created the same way is not eligible.
	d.Role = RoleDerived
	assert.NotEmpty(t, CheckPrimaryRaw(simulate(t, nil, Plan(nil, d))))
}

func TestPlanEvolve(t *testing.T) {
	base := []typemap.Column{col("id", "int", true, ""), col("name", "string", true, "")}
	iceberg := map[string]string{PropUniversalFormats: "iceberg", PropIcebergCompatV2: "true"}
	tests := []struct {
		name       string
		live       []typemap.Column
		props      map[string]string
		desired    []typemap.Column
		widen      bool
		narrowerOK bool
		kinds      []StepKind
		refused    string // column the plan must refuse
		reason     string // substring of the refusal reason
		checkSQL   []string
	}{
		{name: "unchanged", live: base, desired: base},
		{name: "names match case-insensitively", live: []typemap.Column{col("ID", "int", true, "")}, desired: []typemap.Column{col("id", "int", true, "")}},
		{name: "nullability alone is no change", live: base, desired: []typemap.Column{col("id", "int", false, ""), col("name", "string", true, "")}},
		{
			name: "additive", live: base, desired: append(slices.Clone(base), col("email", "string", false, "Contact")),
			kinds:    []StepKind{StepAddColumn, StepSetProperty},
			checkSQL: []string{"ALTER TABLE `main`.`raw`.`events` ADD COLUMNS (`email` string COMMENT 'Contact')"},
		},
		{
			name: "adding an NTZ column turns the feature on first", live: base, desired: append(slices.Clone(base), col("at", "timestamp_ntz", true, "")),
			kinds: []StepKind{StepSetProperty, StepAddColumn},
			checkSQL: []string{"ALTER TABLE `main`.`raw`.`events` SET TBLPROPERTIES ('delta.feature.timestampNtz'='supported')",
				"ALTER TABLE `main`.`raw`.`events` ADD COLUMNS (`at` timestamp_ntz)"},
		},
		{name: "omitted nullable column is fine", live: base, desired: base[:1]},
		{
			name: "omitted NOT NULL column is refused", live: []typemap.Column{col("id", "int", true, ""), col("must", "string", false, "")},
			desired: base[:1], refused: "must", reason: "NOT NULL",
		},
		{
			name: "lossless widening without opt-in is refused", live: base, desired: []typemap.Column{col("id", "bigint", true, "")},
			refused: "id", reason: "not opted in",
		},
		{
			name: "lossless widening under opt-in", live: base, desired: []typemap.Column{col("id", "bigint", true, "")}, widen: true,
			kinds: []StepKind{StepSetProperty, StepWidenColumn},
			checkSQL: []string{"ALTER TABLE `main`.`raw`.`events` SET TBLPROPERTIES ('delta.enableTypeWidening'='true')",
				"ALTER TABLE `main`.`raw`.`events` ALTER COLUMN `id` TYPE bigint"},
		},
		{
			name: "widening with the feature already on", live: base, props: map[string]string{PropEnableTypeWidening: "true"},
			desired: []typemap.Column{col("id", "bigint", true, "")}, widen: true, kinds: []StepKind{StepWidenColumn},
		},
		{
			name: "float to double under opt-in", live: []typemap.Column{col("f", "float", true, "")},
			desired: []typemap.Column{col("f", "double", true, "")}, widen: true, kinds: []StepKind{StepSetProperty, StepWidenColumn},
		},
		{
			name: "iceberg-legal widening with iceberg reads on", live: base, props: iceberg,
			desired: []typemap.Column{col("id", "bigint", true, "")}, widen: true, kinds: []StepKind{StepSetProperty, StepWidenColumn},
		},
		{
			name: "iceberg-illegal widening with iceberg reads on", live: []typemap.Column{col("b", "tinyint", true, "")}, props: iceberg,
			desired: []typemap.Column{col("b", "smallint", true, "")}, widen: true, refused: "b", reason: "Iceberg reads on",
		},
		{
			// The output widens to the narrowest integer that fits a value:
			// a SMALLINT outgrown past INT asks for BIGINT, which Iceberg V2
			// does not allow either.
			name: "iceberg-illegal smallint to bigint with iceberg reads on", live: []typemap.Column{col("n", "smallint", true, "")},
			props: iceberg, desired: []typemap.Column{col("n", "bigint", true, "")}, widen: true, refused: "n", reason: "Iceberg reads on",
		},
		{
			name: "lossy int to double", live: base, desired: []typemap.Column{col("id", "double", true, "")}, widen: true,
			refused: "id", reason: "lossy",
		},
		{
			name: "narrowing", live: []typemap.Column{col("n", "bigint", true, "")}, desired: []typemap.Column{col("n", "int", true, "")}, widen: true,
			refused: "n", reason: "narrowing",
		},
		{
			name: "narrower input accepted on request", live: []typemap.Column{col("n", "bigint", true, "")},
			desired: []typemap.Column{col("n", "int", true, "")}, narrowerOK: true,
		},
		{
			name: "accepting narrower input still refuses a lossy fit", live: []typemap.Column{col("n", "double", true, "")},
			desired: []typemap.Column{col("n", "bigint", true, "")}, narrowerOK: true, refused: "n", reason: "type conflict",
		},
		{
			name: "decimal narrowing", live: []typemap.Column{col("d", "decimal(10,2)", true, "")}, desired: []typemap.Column{col("d", "decimal(8,2)", true, "")}, widen: true,
			refused: "d", reason: "narrowing",
		},
		{
			name: "conflict", live: base, desired: []typemap.Column{col("name", "int", true, "")}, widen: true,
			refused: "name", reason: "type conflict",
		},
		{
			name: "nested change", live: []typemap.Column{col("s", "struct<a:int>", true, "")},
			desired: []typemap.Column{col("s", "struct<a:int,b:string>", true, "")}, widen: true, refused: "s", reason: "nested",
		},
		{
			name: "VARIANT cannot be added with iceberg reads on", live: base, props: iceberg,
			desired: append(slices.Clone(base), col("v", "variant", true, "")), refused: "v", reason: "VARIANT",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			live := &TableState{FullName: tbl, TableType: "MANAGED", Columns: tc.live, Properties: maps.Clone(tc.props)}
			if live.Properties == nil {
				live.Properties = map[string]string{}
			}
			d := DesiredTable{FullName: tbl, Columns: tc.desired, AllowWidening: tc.widen, AcceptNarrowerInput: tc.narrowerOK}
			p := Plan(live, d)
			if tc.refused != "" {
				r := p.Refused()
				require.Len(t, r, 1, "plan: %s", p)
				assert.Equal(t, tc.refused, r[0].Column)
				assert.Contains(t, r[0].Reason, tc.reason)
				assert.Contains(t, p.String(), "REFUSE column \""+tc.refused+"\"")
				_, err := p.SQL()
				var re *RefusedError
				require.ErrorAs(t, err, &re, "a refused plan renders no SQL")
				assert.Contains(t, re.Error(), tc.refused)
				return
			}
			assert.Equal(t, tc.kinds, kinds(p), "plan: %s", p)
			assert.Equal(t, len(tc.kinds) == 0, p.Empty())
			stmts, err := p.SQL()
			require.NoError(t, err)
			for i, want := range tc.checkSQL {
				assert.Equal(t, want, stmts[i])
			}
			again := Plan(simulate(t, live, p), d)
			assert.True(t, again.Empty(), "second plan: %s", again)
		})
	}
}

func TestPlanComments(t *testing.T) {
	d := DesiredTable{
		FullName: tbl,
		Columns:  []typemap.Column{col("id", "bigint", true, ""), col("_zb_emit_ts", "timestamp", true, "Built-in")},
		Comments: map[string]string{"id": "Event id"},
	}
	created := managedLive(t, d)

	edited := func(comment string) *TableState {
		s := simulate(t, created, ReconcilePlan{Table: tbl})
		s.Columns[0].Comment = comment
		return s
	}
	contractChanged := d
	contractChanged.Comments = map[string]string{"id": "Event identifier"}
	restore := d
	restore.CommentsPolicy = PolicyRestore

	tests := []struct {
		name    string
		live    *TableState
		desired DesiredTable
		kinds   []StepKind
		comment string // the SetComment written, if any
		note    string
	}{
		{name: "unchanged hash is a no-op", live: created, desired: d},
		{name: "contract description changed", live: created, desired: contractChanged,
			kinds: []StepKind{StepSetComment, StepSetProperty}, comment: "Event identifier"},
		{name: "human edit under respect", live: edited("hand written"), desired: d, note: "respect"},
		{name: "human edit under respect survives a contract change", live: edited("hand written"), desired: contractChanged, note: "respect"},
		{name: "human edit under restore", live: edited("hand written"), desired: restore,
			kinds: []StepKind{StepSetComment}, comment: "Event id", note: "restore"},
		{name: "human removal under restore", live: edited(""), desired: restore,
			kinds: []StepKind{StepSetComment}, comment: "Event id", note: "restore"},
		{name: "unmanaged table, empty comment: written and recorded",
			live:    &TableState{FullName: tbl, Columns: []typemap.Column{col("id", "bigint", true, "")}, Properties: map[string]string{}},
			desired: DesiredTable{FullName: tbl, Columns: []typemap.Column{col("id", "bigint", true, "")}, Comments: map[string]string{"id": "Event id"}},
			kinds:   []StepKind{StepSetComment, StepSetProperty}, comment: "Event id"},
		{name: "unmanaged table, same comment: only recorded",
			live:    &TableState{FullName: tbl, Columns: []typemap.Column{col("id", "bigint", true, "Event id")}, Properties: map[string]string{}},
			desired: DesiredTable{FullName: tbl, Columns: []typemap.Column{col("id", "bigint", true, "")}, Comments: map[string]string{"id": "Event id"}},
			kinds:   []StepKind{StepSetProperty}},
		{name: "table comment changed", live: created,
			desired: func() DesiredTable { x := d; x.Comment = "Now described"; return x }(),
			kinds:   []StepKind{StepSetComment, StepSetProperty}, comment: "Now described"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Plan(tc.live, tc.desired)
			assert.Equal(t, tc.kinds, kinds(p), "plan: %s", p)
			if tc.comment != "" {
				assert.Equal(t, tc.comment, p.Steps[0].Comment)
			}
			if tc.note != "" {
				require.Len(t, p.Notes, 1)
				assert.Contains(t, p.Notes[0], tc.note)
				assert.Contains(t, p.String(), "note: ")
			} else {
				assert.Empty(t, p.Notes)
			}
			again := Plan(simulate(t, tc.live, p), tc.desired)
			assert.True(t, again.Empty(), "second plan: %s", again)
		})
	}
}

func TestPlanTagsAndProperties(t *testing.T) {
	d := DesiredTable{FullName: tbl, Columns: []typemap.Column{col("id", "bigint", true, "")},
		Properties: map[string]string{"owner": "a"}, Tags: map[string]string{"domain": "events"}}
	live := managedLive(t, d)
	assert.True(t, Plan(live, d).Empty())

	d2 := d
	d2.Properties = map[string]string{"owner": "b"}
	d2.Tags = map[string]string{"domain": "orders"}
	p := Plan(live, d2)
	require.Equal(t, []StepKind{StepSetProperty, StepSetTags}, kinds(p))
	assert.Equal(t, "b", p.Steps[0].Properties["owner"])
	assert.Equal(t, tagsHash(d2.Tags), p.Steps[0].Properties[PropTagsHash])
	assert.True(t, Plan(simulate(t, live, p), d2).Empty())

	// A backend that reads tags compares them directly.
	live.Tags = map[string]string{"domain": "orders", "other": "x"}
	assert.Equal(t, []StepKind{StepSetProperty}, kinds(Plan(live, d2)))
}

func TestPlanValidation(t *testing.T) {
	tests := []struct {
		name    string
		desired DesiredTable
		column  string
		reason  string
	}{
		{name: "no columns", desired: DesiredTable{FullName: tbl}, reason: "no columns"},
		{name: "case clash", desired: DesiredTable{FullName: tbl, Columns: []typemap.Column{col("a", "int", true, ""), col("A", "int", true, "")}},
			column: "A", reason: "case-insensitive"},
		{name: "variant on primary raw", desired: DesiredTable{FullName: tbl, Role: RolePrimaryRaw,
			Columns: []typemap.Column{col("v", "array<variant>", true, "")}}, column: "v", reason: "VARIANT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, live := range []*TableState{nil, {FullName: tbl, Properties: map[string]string{}}} {
				r := Plan(live, tc.desired).Refused()
				require.Len(t, r, 1)
				assert.Equal(t, tc.column, r[0].Column)
				assert.Contains(t, r[0].Reason, tc.reason)
			}
		})
	}
}

// Hostile names and comments must stay inside their quotes: render the
// statement, then parse the column list back and get the same names.
func TestSQLQuotesHostileIdentifiers(t *testing.T) {
	names := []string{"a`b", "x'); DROP TABLE y; --", `back\slash`, "ok"}
	comment := `it's a "comment"; DROP TABLE z; -- \'`
	var cols []typemap.Column
	for _, n := range names {
		cols = append(cols, typemap.Column{Name: n, Type: typemap.MustParse("struct<`we``ird`:int>"), Nullable: true, Comment: comment})
	}
	p := Plan(nil, DesiredTable{FullName: tbl, Columns: cols})
	stmts, err := p.SQL()
	require.NoError(t, err)
	create := stmts[0]
	open := strings.Index(create, "(")
	end := strings.LastIndex(create, ") USING DELTA")
	parsed, err := typemap.ParseColumns(create[open+1 : end])
	require.NoError(t, err, create)
	require.Len(t, parsed, len(names))
	for i, c := range parsed {
		assert.Equal(t, names[i], c.Name)
		assert.Equal(t, comment, c.Comment)
		assert.True(t, c.Type.Equal(cols[i].Type))
	}

	assert.Equal(t, "name", p.Steps[0].Properties[PropColumnMappingMode], "Delta needs column mapping for such names")
	assert.Equal(t, "2", p.Steps[0].Properties[PropMinReaderVersion])
	assert.Equal(t, "5", p.Steps[0].Properties[PropMinWriterVersion])

	live := &TableState{FullName: tbl, Columns: []typemap.Column{col("id", "int", true, "")}, Properties: map[string]string{}}
	refused := Plan(live, DesiredTable{FullName: tbl, Columns: []typemap.Column{col("id", "int", true, ""), {Name: names[1], Type: typemap.Primitive(typemap.String), Nullable: true}}})
	require.Len(t, refused.Refused(), 1, "no column mapping: such a name cannot be added")
	assert.Equal(t, names[1], refused.Refused()[0].Column)

	live.Properties[PropColumnMappingMode] = "name"
	p = Plan(live, DesiredTable{FullName: tbl, Columns: []typemap.Column{col("id", "int", true, ""), {Name: names[1], Type: typemap.Primitive(typemap.String), Nullable: true}}})
	stmts, err = p.SQL()
	require.NoError(t, err)
	assert.Equal(t, "ALTER TABLE `main`.`raw`.`events` ADD COLUMNS (`x'); DROP TABLE y; --` string)", stmts[0])

	_, err = ReconcilePlan{Table: "a.b`c", Steps: []Step{{Kind: StepSetTags, Tags: map[string]string{"k'": "v'"}}}}.SQL()
	require.Error(t, err, "a two-part name is not a table")
	stmts, err = ReconcilePlan{Table: "a.b`c.d", Steps: []Step{{Kind: StepSetTags, Tags: map[string]string{"k'": "v'"}}}}.SQL()
	require.NoError(t, err)
	assert.Equal(t, "ALTER TABLE `a`.`b``c`.`d` SET TAGS ('k'''='v''')", stmts[0])
}

func TestParseRoleAndPolicy(t *testing.T) {
	r, err := ParseRole("PRIMARY_RAW")
	require.NoError(t, err)
	assert.Equal(t, RolePrimaryRaw, r)
	r, err = ParseRole("")
	require.NoError(t, err)
	assert.Equal(t, RoleDerived, r)
	_, err = ParseRole("raw")
	assert.Error(t, err)
	p, err := ParsePolicy("restore")
	require.NoError(t, err)
	assert.Equal(t, PolicyRestore, p)
	_, err = ParsePolicy("stomp")
	assert.Error(t, err)
}

func TestPlanPrimaryRawOnExistingTableOnlyNotes(t *testing.T) {
	live := &TableState{FullName: tbl, TableType: "MANAGED", Columns: []typemap.Column{col("id", "bigint", true, "")},
		Properties: map[string]string{PropDeletionVectors: "true"}}
	p := Plan(live, DesiredTable{FullName: tbl, Role: RolePrimaryRaw, Columns: []typemap.Column{col("id", "bigint", true, "")}})
	assert.True(t, p.Empty(), "existing tables are never retrofitted: %s", p)
	assert.NotEmpty(t, p.Notes)
	assert.Contains(t, strings.Join(p.Notes, "\n"), PreDeletionVectors)
}

// DropNotNull relaxes the named live NOT NULL columns, once (a second plan
// on the relaxed table is empty, as when another writer relaxed it first),
// leaves a nullable or absent one alone, and never adds NOT NULL: a desired
// NOT NULL column over a nullable live one is no change.
func TestPlanDropNotNull(t *testing.T) {
	live := &TableState{FullName: tbl, Columns: []typemap.Column{col("id", "bigint", false, ""), col("qty", "int", false, ""), col("note", "string", true, "")}}
	d := DesiredTable{FullName: tbl, Columns: slices.Clone(live.Columns), DropNotNull: []string{"QTY", "note", "gone"}}
	p := Plan(live, d)
	require.Equal(t, []StepKind{StepDropNotNull}, kinds(p), "%s", p)
	assert.Equal(t, "qty", p.Steps[0].Column, "the live column's name")
	assert.Equal(t, `drop NOT NULL on column "qty"`, p.Steps[0].String())
	stmts, err := p.SQL()
	require.NoError(t, err)
	assert.Equal(t, []string{"ALTER TABLE `main`.`raw`.`events` ALTER COLUMN `qty` DROP NOT NULL"}, stmts)
	assert.True(t, ReconcileOutcome{Applied: []ReconcilePlan{p}}.ColumnsChanged(), "streams reopen on the nullable column")

	after := simulate(t, live, p)
	assert.True(t, after.Columns[1].Nullable)
	assert.False(t, after.Columns[0].Nullable, "id was not named")
	assert.True(t, Plan(after, d).Empty(), "idempotent")

	d.DropNotNull = nil
	d.Columns = []typemap.Column{col("id", "bigint", false, ""), col("qty", "int", false, ""), col("note", "string", false, "")}
	assert.True(t, Plan(after, d).Empty(), "NOT NULL is never added")
	assert.True(t, Plan(live, DesiredTable{FullName: tbl, Columns: []typemap.Column{col("id", "bigint", true, ""), col("qty", "int", true, ""), col("note", "string", true, "")}}).Empty(),
		"a nullable desired column alone does not relax: only DropNotNull does")
}
