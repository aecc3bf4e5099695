package workspace

import (
	"strings"
	"testing"
)

// FuzzParseStatement feeds any text to the workspace's SQL parser (the SQL
// statements API): parsed or refused with a *sqlError, never a panic, and
// an error message of bounded size whatever the statement's. Seeds:
// testdata/fuzz/FuzzParseStatement and the statements below.
func FuzzParseStatement(f *testing.F) {
	for _, s := range []string{
		"CREATE TABLE IF NOT EXISTS `main`.sales.`orders` (id BIGINT NOT NULL COMMENT 'key', items ARRAY<STRUCT<`sku`:STRING NOT NULL, qty:INT COMMENT 'a,b>c'>>, price decimal(10, 2), m MAP<STRING,BIGINT>) USING DELTA COMMENT 'it''s orders' TBLPROPERTIES ('delta.enableDeletionVectors'='false', delta.appendOnly = true, 'n'=3);",
		"ALTER TABLE main.default.t ADD COLUMNS (a INT, b STRING COMMENT 'x')",
		"ALTER TABLE main.default.t ALTER COLUMN a TYPE BIGINT",
		"ALTER TABLE main.default.t SET TBLPROPERTIES ('delta.enableIcebergCompatV2' = 'true')",
		"COMMENT ON TABLE main.default.t IS 'hello'",
		"ALTER TABLE main.default.t ALTER COLUMN a COMMENT 'c'",
		"MSCK REPAIR TABLE main.default.t SYNC METADATA",
		"DROP TABLE main.default.t",
		"DROP TABLE IF EXISTS `main`.default.`t`;",
		"CREATE TABLE a.b.c (x " + strings.Repeat("ARRAY<", 200) + "INT" + strings.Repeat(">", 200) + ")",
		"CREATE TABLE a.b.c (x STRUCT<a: MAP<STRING, ARRAY<VARIANT>>>)",
		"CREATE VIEW `main`.`default`.`t_dedup` AS SELECT * FROM `main`.`default`.`t` QUALIFY `_zb_source` IS NULL OR `_zb_offset` IS NULL OR row_number() OVER (PARTITION BY `_zb_source`, `_zb_offset` ORDER BY `_zb_emit_ts`) = 1",
		"ALTER VIEW a.b.v AS SELECT * FROM a.b.t QUALIFY row_number() OVER (PARTITION BY k ORDER BY ts DESC) = 1;",
		"DROP VIEW IF EXISTS a.b.v",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		st, err := parseStatement(sql)
		if err != nil {
			if st != nil {
				t.Fatalf("parseStatement(%q) returned a statement and an error", sql)
			}
			if n := len(err.Error()); n > 4*len(sql)+2000 && n > 10000 {
				t.Fatalf("parseStatement(%q): error of %d bytes", sql, n)
			}
		}
	})
}
