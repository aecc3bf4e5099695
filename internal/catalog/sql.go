package catalog

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// QuoteTableName renders catalog.schema.table with every part backtick-quoted.
func QuoteTableName(full string) (string, error) {
	c, s, t, err := typemap.ParseTableName(full)
	if err != nil {
		return "", err
	}
	return typemap.QuoteIdent(c) + "." + typemap.QuoteIdent(s) + "." + typemap.QuoteIdent(t), nil
}

// SQL renders the plan's steps as Databricks SQL statements, in order. Every
// identifier is backtick-quoted and every literal escaped, so no column name,
// comment or property can break out of its statement. A plan with refusals
// renders to an error: it must not be applied.
func (p ReconcilePlan) SQL() ([]string, error) {
	if err := p.RefusedError(); err != nil {
		return nil, err
	}
	table, err := QuoteTableName(p.Table)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(p.Steps))
	for _, s := range p.Steps {
		stmt, err := s.sql(table)
		if err != nil {
			return nil, err
		}
		out = append(out, stmt)
	}
	return out, nil
}

// sql renders one step against an already quoted table name.
func (s Step) sql(table string) (string, error) {
	switch s.Kind {
	case StepCreateTable:
		if len(s.Columns) == 0 {
			return "", fmt.Errorf("create table %s: no columns", table)
		}
		defs := make([]string, len(s.Columns))
		for i, c := range s.Columns {
			defs[i] = columnDef(c.Name, c.Type, c.Nullable, c.Comment)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s (%s) USING DELTA", table, strings.Join(defs, ", "))
		if s.Comment != "" {
			b.WriteString(" COMMENT " + typemap.QuoteString(s.Comment))
		}
		if len(s.Properties) > 0 {
			b.WriteString(" TBLPROPERTIES " + kvList(s.Properties))
		}
		return b.String(), nil
	case StepAddColumn:
		// Added columns are always nullable: existing rows read NULL.
		return fmt.Sprintf("ALTER TABLE %s ADD COLUMNS (%s)", table, columnDef(s.Column, s.Type, true, s.Comment)), nil
	case StepWidenColumn:
		return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s", table, typemap.QuoteIdent(s.Column), s.Type.DDL()), nil
	case StepDropNotNull:
		// https://docs.databricks.com/en/sql/language-manual/sql-ref-syntax-ddl-alter-table-manage-column.html
		return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL", table, typemap.QuoteIdent(s.Column)), nil
	case StepSetComment:
		if s.Column == "" {
			return fmt.Sprintf("COMMENT ON TABLE %s IS %s", table, typemap.QuoteString(s.Comment)), nil
		}
		return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s COMMENT %s", table, typemap.QuoteIdent(s.Column), typemap.QuoteString(s.Comment)), nil
	case StepSetProperty:
		return fmt.Sprintf("ALTER TABLE %s SET TBLPROPERTIES %s", table, kvList(s.Properties)), nil
	case StepSetTags:
		return fmt.Sprintf("ALTER TABLE %s SET TAGS %s", table, kvList(s.Tags)), nil
	case StepRefuse:
		return "", fmt.Errorf("refused step has no SQL: %s", s)
	}
	return "", fmt.Errorf("unknown step kind %s", s.Kind)
}

func columnDef(name string, t typemap.Type, nullable bool, comment string) string {
	def := typemap.QuoteIdent(name) + " " + t.DDL()
	if !nullable {
		def += " NOT NULL"
	}
	if comment != "" {
		def += " COMMENT " + typemap.QuoteString(comment)
	}
	return def
}

// kvList renders ('k'='v', ...) with sorted keys, so a plan renders the same
// statement every time.
func kvList(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = typemap.QuoteString(k) + "=" + typemap.QuoteString(m[k])
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
