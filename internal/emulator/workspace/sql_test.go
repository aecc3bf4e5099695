package workspace

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

func TestParseStatement(t *testing.T) {
	tests := []struct {
		name  string
		sql   string
		check func(t *testing.T, st *statement)
	}{
		{
			name: "create with everything",
			sql: "CREATE TABLE IF NOT EXISTS `main`.sales.`orders` (id BIGINT NOT NULL COMMENT 'key', " +
				"items ARRAY<STRUCT<`sku`:STRING NOT NULL, qty:INT COMMENT 'a,b>c'>>, price decimal(10, 2), m MAP<STRING,BIGINT>) " +
				"USING DELTA COMMENT 'it''s orders' TBLPROPERTIES ('delta.enableDeletionVectors'='false', delta.appendOnly = true, 'n'=3);",
			check: func(t *testing.T, st *statement) {
				assert.Equal(t, KindCreateTable, st.Kind)
				assert.True(t, st.IfNotExists)
				assert.Equal(t, tableRef{"main", "sales", "orders"}, st.Table)
				require.Len(t, st.Columns, 4)
				assert.Equal(t, typemap.Column{Name: "id", Type: typemap.Primitive(typemap.Long), Nullable: false, Comment: "key"}, st.Columns[0])
				assert.Equal(t, "array<struct<sku:string,qty:int>>", st.Columns[1].Type.Text())
				assert.False(t, st.Columns[1].Type.Elem.Fields[0].Nullable)
				assert.Equal(t, "a,b>c", st.Columns[1].Type.Elem.Fields[1].Comment)
				assert.Equal(t, typemap.DecimalOf(10, 2), st.Columns[2].Type)
				assert.Equal(t, "map<string,bigint>", st.Columns[3].Type.Text())
				require.NotNil(t, st.Comment)
				assert.Equal(t, "it's orders", *st.Comment)
				assert.Equal(t, []property{{"delta.enableDeletionVectors", "false"}, {"delta.appendOnly", "true"}, {"n", "3"}}, st.Properties)
			},
		},
		{
			name: "injection-looking names stay names and literals",
			sql:  "CREATE TABLE c.s.`x'); DROP TABLE y; --` (`a``b` STRING COMMENT 'x\\'); DROP TABLE y; --', `x'); DROP TABLE y; --` INT)",
			check: func(t *testing.T, st *statement) {
				assert.Equal(t, tableRef{"c", "s", "x'); DROP TABLE y; --"}, st.Table)
				assert.Equal(t, "a`b", st.Columns[0].Name)
				assert.Equal(t, "x'); DROP TABLE y; --", st.Columns[0].Comment)
				assert.Equal(t, "x'); DROP TABLE y; --", st.Columns[1].Name)
			},
		},
		{
			name: "quoting produced by typemap round-trips",
			sql: "ALTER TABLE c.s.t ADD COLUMNS (" + typemap.QuoteIdent("we`ird; --") + " STRING COMMENT " +
				typemap.QuoteString(`back\slash 'quote' "dq"`) + ")",
			check: func(t *testing.T, st *statement) {
				assert.Equal(t, KindAddColumns, st.Kind)
				assert.Equal(t, "we`ird; --", st.Columns[0].Name)
				assert.Equal(t, `back\slash 'quote' "dq"`, st.Columns[0].Comment)
			},
		},
		{
			name: "add single column without parens, comments skipped",
			sql:  "-- evolve\nALTER TABLE c.s.t /* why */ ADD COLUMN note STRING",
			check: func(t *testing.T, st *statement) {
				assert.Equal(t, KindAddColumns, st.Kind)
				assert.Equal(t, "note", st.Columns[0].Name)
			},
		},
		{
			name: "alter column type",
			sql:  "alter table c.s.t alter column `n` type BIGINT",
			check: func(t *testing.T, st *statement) {
				assert.Equal(t, KindAlterColumnType, st.Kind)
				assert.Equal(t, "n", st.Column)
				assert.Equal(t, typemap.Primitive(typemap.Long), st.NewType)
			},
		},
		{
			name: "alter column comment",
			sql:  "ALTER TABLE c.s.t ALTER COLUMN n COMMENT 'new\\ncomment'",
			check: func(t *testing.T, st *statement) {
				assert.Equal(t, KindAlterColumnComment, st.Kind)
				assert.Equal(t, "new\ncomment", *st.Comment)
			},
		},
		{
			name:  "drop not null",
			sql:   "ALTER TABLE c.s.t ALTER COLUMN n DROP NOT NULL",
			check: func(t *testing.T, st *statement) { assert.Equal(t, KindDropNotNull, st.Kind) },
		},
		{
			name: "set tblproperties",
			sql:  "ALTER TABLE t SET TBLPROPERTIES ('a'='1')",
			check: func(t *testing.T, st *statement) {
				assert.Equal(t, KindSetProperties, st.Kind)
				assert.Equal(t, tableRef{"t"}, st.Table)
				assert.Equal(t, []property{{"a", "1"}}, st.Properties)
			},
		},
		{
			name: "set tags with a bare key",
			sql:  "ALTER TABLE c.s.t SET TAGS ('owner'='team-a', 'pii')",
			check: func(t *testing.T, st *statement) {
				assert.Equal(t, KindSetTags, st.Kind)
				assert.Equal(t, []property{{"owner", "team-a"}, {"pii", ""}}, st.Properties)
			},
		},
		{
			name: "comment on table",
			sql:  "COMMENT ON TABLE c.s.t IS 'hello'",
			check: func(t *testing.T, st *statement) {
				assert.Equal(t, KindCommentOnTable, st.Kind)
				assert.Equal(t, "hello", *st.Comment)
			},
		},
		{
			name: "comment on table is null",
			sql:  "COMMENT ON TABLE c.s.t IS NULL",
			check: func(t *testing.T, st *statement) {
				assert.Equal(t, "", *st.Comment)
			},
		},
		{
			name: "msck",
			sql:  "MSCK REPAIR TABLE c.s.t SYNC METADATA",
			check: func(t *testing.T, st *statement) {
				assert.Equal(t, KindRepairSyncMetadata, st.Kind)
				assert.Equal(t, tableRef{"c", "s", "t"}, st.Table)
			},
		},
		{
			name: "drop",
			sql:  "drop table `main`.raw.`ev ents`;",
			check: func(t *testing.T, st *statement) {
				assert.Equal(t, KindDropTable, st.Kind)
				assert.False(t, st.IfExists)
				assert.Equal(t, tableRef{"main", "raw", "ev ents"}, st.Table)
			},
		},
		{
			name: "drop if exists, one part",
			sql:  "DROP TABLE IF EXISTS t",
			check: func(t *testing.T, st *statement) {
				assert.Equal(t, KindDropTable, st.Kind)
				assert.True(t, st.IfExists)
				assert.Equal(t, tableRef{"t"}, st.Table)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, err := parseStatement(tc.sql)
			require.Nil(t, err, "%v", err)
			tc.check(t, st)
		})
	}
}

func TestParseStatementRefuses(t *testing.T) {
	tests := []struct {
		sql       string
		wantClass string
		wantIn    string
	}{
		{"DROP SCHEMA c.s", "UNSUPPORTED_FEATURE", "only DROP TABLE"},
		{"DROP TEMPORARY TABLE t", "UNSUPPORTED_FEATURE", "only DROP TABLE"},
		{"DROP TABLE c.s.t FORCE", "UNSUPPORTED_FEATURE", "FORCE"},
		{"DROP TABLE c.s.t PURGE", "UNSUPPORTED_FEATURE", "PURGE"},
		{"DROP TABLE IF c.s.t", "PARSE_SYNTAX_ERROR", "expected EXISTS"},
		{"DROP TABLE", "PARSE_SYNTAX_ERROR", "expected a table name"},
		{"DROP TABLE c.s.t garbage", "PARSE_SYNTAX_ERROR", "unexpected"},
		{"DROP TABLE c.s.t; DROP TABLE c.s.u", "UNSUPPORTED_FEATURE", "more than one statement"},
		{"DROP TABLE a.b.c.d", "REQUIRES_SINGLE_PART_NAMESPACE", "4 parts"},
		{"SELECT 1", "UNSUPPORTED_FEATURE", "unsupported statement"},
		{"INSERT INTO c.s.t VALUES (1)", "UNSUPPORTED_FEATURE", "unsupported statement"},
		{"CREATE VIEW c.s.v AS SELECT 1", "UNSUPPORTED_FEATURE", "view query SELECT"},
		{"CREATE TABLE c.s.t AS SELECT 1", "UNSUPPORTED_FEATURE", "AS SELECT"},
		{"CREATE TABLE c.s.t (a INT) USING PARQUET", "UNSUPPORTED_FEATURE", "only DELTA"},
		{"CREATE TABLE c.s.t (a INT) LOCATION 's3://x'", "UNSUPPORTED_FEATURE", "LOCATION"},
		{"CREATE TABLE c.s.t (a INT) PARTITIONED BY (a)", "UNSUPPORTED_FEATURE", "PARTITIONED"},
		{"CREATE TABLE c.s.t (a INT DEFAULT 1)", "UNSUPPORTED_FEATURE", "DEFAULT"},
		{"CREATE TABLE c.s.t (a INT) COMMENT 'x' COMMENT 'y'", "PARSE_SYNTAX_ERROR", "duplicate COMMENT"},
		{"CREATE TABLE c.s.t (a INTERVAL DAY)", "UNSUPPORTED_DATATYPE", "INTERVAL"},
		{"CREATE TABLE c.s.t (a FOO)", "UNSUPPORTED_DATATYPE", "FOO"},
		{"CREATE TABLE c.s.t (a ARRAY<INT)", "PARSE_SYNTAX_ERROR", "unbalanced"},
		{"CREATE TABLE c.s.t (a INT", "PARSE_SYNTAX_ERROR", "expected \")\""},
		{"CREATE TABLE c.s.t (`a INT)", "PARSE_SYNTAX_ERROR", "unterminated quoted identifier"},
		{"COMMENT ON TABLE c.s.t IS 'x", "PARSE_SYNTAX_ERROR", "unterminated string"},
		{"ALTER TABLE c.s.t ADD COLUMNS (a INT); DROP TABLE c.s.t", "UNSUPPORTED_FEATURE", "more than one statement"},
		{"ALTER TABLE c.s.t ADD COLUMNS (a INT) garbage", "PARSE_SYNTAX_ERROR", "unexpected"},
		{"ALTER TABLE c.s.t DROP COLUMN a", "UNSUPPORTED_FEATURE", "DROP"},
		{"ALTER TABLE c.s.t RENAME TO c.s.u", "UNSUPPORTED_FEATURE", "RENAME"},
		{"ALTER TABLE c.s.t ALTER COLUMN a SET NOT NULL", "UNSUPPORTED_FEATURE", "SET"},
		{"ALTER TABLE c.s.t ALTER COLUMN s.f TYPE BIGINT", "UNSUPPORTED_FEATURE", "nested"},
		{"ALTER TABLE c.s.t SET OWNER TO x", "UNSUPPORTED_FEATURE", "OWNER"},
		{"ALTER TABLE a.b.c.d SET TAGS ('a'='b')", "REQUIRES_SINGLE_PART_NAMESPACE", "4 parts"},
		{"MSCK REPAIR TABLE c.s.t", "UNSUPPORTED_FEATURE", "SYNC METADATA"},
		{"ALTER TABLE c.s.t SET TBLPROPERTIES ('a')", "PARSE_SYNTAX_ERROR", "expected '='"},
		{"   ", "PARSE_SYNTAX_ERROR", "empty statement"},
		{"DROP SCHEMA c.s", "UNSUPPORTED_FEATURE", "DROP"},
	}
	for _, tc := range tests {
		t.Run(tc.sql, func(t *testing.T) {
			_, err := parseStatement(tc.sql)
			require.NotNil(t, err)
			assert.Equal(t, tc.wantClass, err.Class)
			assert.Contains(t, err.Error(), tc.wantIn)
		})
	}
}

func TestTokenizeEscapes(t *testing.T) {
	toks, err := tokenize(`'a''b' "c""d" 'e\'f' 'g\\h' 'tab\t' ` + "`i``j`")
	require.Nil(t, err)
	var got []string
	for _, tk := range toks[:len(toks)-1] {
		got = append(got, tk.text)
	}
	assert.Equal(t, []string{"a'b", `c"d`, "e'f", `g\h`, "tab\t", "i`j"}, got)
}

// TestDeepTypeIsRefused is issue 19's statement: a column type nested
// 1,000,000 deep overflowed the stack of the type parser and killed the
// emulator. It is refused as an unsupported data type, naming the bound.
func TestDeepTypeIsRefused(t *testing.T) {
	const n = 1_000_000
	sql := "CREATE TABLE main.default.deep (x " + strings.Repeat("ARRAY<", n) + "INT" + strings.Repeat(">", n) + ")"
	_, err := parseStatement(sql)
	require.NotNil(t, err)
	assert.Equal(t, "UNSUPPORTED_DATATYPE", err.Class)
	assert.Contains(t, err.Error(), "type nested more than 100 levels deep")
	assert.Less(t, len(err.Error()), 2000, "the message does not echo the statement")
}
