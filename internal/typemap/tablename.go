package typemap

import (
	"fmt"
	"strings"
)

// TableNameError is a table name that breaks the naming rule Zerobus
// enforces. Rule names the rule that failed in words a user can act on. It is
// permanent: retrying the same name cannot succeed.
type TableNameError struct {
	Name string
	Rule string
}

func (e *TableNameError) Error() string { return fmt.Sprintf("table name %q: %s", e.Name, e.Rule) }

// Permanent reports true: a malformed name never becomes valid by retrying.
func (e *TableNameError) Permanent() bool { return true }

// tablePartNames names the three parts of a full table name, for messages.
var tablePartNames = [3]string{"catalog", "schema", "table"}

// CheckTableName checks a full table name against the rule Zerobus enforces
// (docs/protocol.md#table-names): exactly three non-empty
// dot-separated parts, catalog.schema.table, each made only of ASCII letters,
// digits and underscore ("table and column names ASCII letters, digits,
// underscore", docs.databricks.com Zerobus Ingest limitations). The name
// travels in the x-databricks-zerobus-table-name gRPC header, which refuses
// non-ASCII values (main.default.é) before the service sees it, and Unity
// Catalog answers INVALID_SCHEMA_OR_RELATION_NAME for other violations. The
// error is a *TableNameError saying which rule failed and where.
func CheckTableName(name string) error {
	parts := strings.Split(name, ".")
	if len(parts) != 3 {
		return &TableNameError{Name: name, Rule: fmt.Sprintf(
			"has %d dot-separated part(s); want exactly three, catalog.schema.table", len(parts))}
	}
	for i, p := range parts {
		if p == "" {
			return &TableNameError{Name: name, Rule: fmt.Sprintf(
				"the %s part is empty; want three non-empty parts, catalog.schema.table", tablePartNames[i])}
		}
		for j, r := range p {
			if r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
				continue
			}
			return &TableNameError{Name: name, Rule: fmt.Sprintf(
				"the %s part %q holds %q at byte %d; each part may hold only ASCII letters, digits and underscore",
				tablePartNames[i], p, r, j)}
		}
	}
	return nil
}

// GrantHint returns the statements that give principal what a Zerobus writer
// of table needs: USE CATALOG, USE SCHEMA, and SELECT + MODIFY granted
// explicitly on the table, since inherited grants have been reported
// insufficient (docs/protocol.md#authentication; the per-table token
// request asks for exactly these privileges). principal is the service
// principal's application id (the OAuth client_id); empty means unknown and a
// placeholder is printed. Both the Unity Catalog and the Zerobus
// PERMISSION_DENIED paths use it so the advice is the same everywhere.
func GrantHint(table, principal string) string {
	if principal == "" {
		principal = "<service principal application id>"
	}
	to := QuoteIdent(principal)
	cat, rest, _ := strings.Cut(table, ".")
	sch, _, _ := strings.Cut(rest, ".")
	return fmt.Sprintf("grant the writer explicit privileges (inherited grants are reported insufficient for Zerobus): "+
		"GRANT USE CATALOG ON CATALOG %s TO %s; GRANT USE SCHEMA ON SCHEMA %s.%s TO %s; GRANT SELECT, MODIFY ON TABLE %s TO %s",
		cat, to, cat, sch, to, table, to)
}
