// Package lintrule holds the Bloblang lint rules the components' config
// specs share, so that `benthos-zerobus lint` reports the same mistake with
// the same words (and the field's line) whichever component has the field.
package lintrule

import "fmt"

// TableNamePattern is the table-name rule (a Bloblang/RE2 pattern): Zerobus
// takes catalog, schema and table names of ASCII letters, digits and
// underscores (docs/protocol.md#table-names).
const TableNamePattern = `^[A-Za-z0-9_]+\\.[A-Za-z0-9_]+\\.[A-Za-z0-9_]+$`

// Table is the lint rule of a table-name field; an interpolated one
// (when allowed) is checked per message instead.
func Table(field string, interpolated bool) string {
	skip := ""
	if interpolated {
		skip = ` && !this.contains("${!")`
	}
	return `root = if this.type() == "string"` + skip + ` && !this.re_match("` + TableNamePattern + `") { [ "field ` + field + `: must be catalog.schema.table, three non-empty dot-separated parts of ASCII letters, digits and underscores, got " + this.quote() ] } else { [] }`
}

// The one loopback predicate: which hosts plaintext http:// may reach. The
// lint rules match it in Bloblang and ingest.IsLoopback in Go, so `lint`
// and `run` never disagree (both use Go's RE2). Loopback is the name
// localhost, an IPv4 address 127.a.b.c in canonical dotted-quad form (no
// shorthand such as 127.1, no leading zeros), or ::1.
const (
	loopbackOctet = `(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])`
	loopbackIPv4  = `127\.` + loopbackOctet + `\.` + loopbackOctet + `\.` + loopbackOctet
	// LoopbackHostname matches a URL's hostname (no port, IPv6 unbracketed).
	LoopbackHostname = `^(?i:localhost|` + loopbackIPv4 + `|::1)$`
	// LoopbackHostPort matches a URL's host with an optional port, as
	// Bloblang's parse_url returns it (IPv6 bracketed).
	LoopbackHostPort = `^(?i:localhost|` + loopbackIPv4 + `|\[::1\])(?::[0-9]+)?$`
)

// TableOrEmpty is the lint rule of an optional table-name field: empty
// (its default) means the feature is off or derived, anything else must be
// a catalog.schema.table name.
func TableOrEmpty(field string) string {
	return `root = if this.type() == "string" && this != "" && !this.re_match("` + TableNamePattern + `") { [ "field ` + field + `: must be catalog.schema.table, three non-empty dot-separated parts of ASCII letters, digits and underscores, or empty, got " + this.quote() ] } else { [] }`
}

// URL is the lint rule of a URL field: https, or http for a loopback
// host only, so a credential never crosses a network in the clear.
func URL(field string) string {
	return `root = match this.parse_url().catch(null) {
  this == null => [ "field ` + field + `: not a URL" ],
  this.host.or("") == "" => [ "field ` + field + `: has no host; want https://host[:port]" ],
  this.scheme == "https" => [],
  this.scheme == "http" && this.host.re_match("""` + LoopbackHostPort + `""") => [],
  this.scheme == "http" => [ "field ` + field + `: plaintext http:// is only allowed for a loopback host (localhost, 127.x.y.z or ::1: the emulator), got " + this.host + "; use https://" ],
  _ => [ "field ` + field + `: scheme must be https (or http for a loopback host), got " + this.scheme.or("").quote() ],
}`
}

// Duration is the lint rule of a positive duration field.
func Duration(field string) string {
	return `root = if this.type() == "string" && this.parse_duration().catch(-1) <= 0 { [ "field ` + field + `: must be a positive duration such as 30s or 5m, got " + this.quote() ] } else { [] }`
}

// AtLeast is the lint rule of a number field with a lower bound.
func AtLeast(field string, lo int) string {
	return fmt.Sprintf(`root = if this < %d { [ "field %s: must be at least %d, got %%v".format(this) ] } else { [] }`, lo, field, lo)
}
