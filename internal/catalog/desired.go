package catalog

import (
	"fmt"
	"maps"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// ArrowCommentKey is the Arrow field metadata key DesiredFromArrow reads a
// column description from (the converter stamps reserved columns with it).
const ArrowCommentKey = "comment"

// DesiredFromArrow builds the desired table from an incoming Arrow schema:
// every field becomes a column named by typemap.SafeIdentifier and typed by
// typemap.FromArrow, with its description from field metadata "comment" if
// any. The reserved metadata columns are appended after the payload columns;
// a reserved column replaces an Arrow field of the same name, so passing the
// converter's full schema (reserved fields included) is fine.
//
// The result has the derived role and the respect policy; set the other
// fields (or ApplyContract) before reconciling.
func DesiredFromArrow(table string, schema *arrow.Schema, reserved ...typemap.Column) (DesiredTable, error) {
	if _, _, _, err := typemap.ParseTableName(table); err != nil {
		return DesiredTable{}, err
	}
	if schema == nil {
		return DesiredTable{}, fmt.Errorf("table %s: nil arrow schema", table)
	}
	isReserved := map[string]bool{}
	for _, r := range reserved {
		isReserved[strings.ToLower(r.Name)] = true
	}
	d := DesiredTable{FullName: table, Comments: map[string]string{}, Role: RoleDerived, CommentsPolicy: PolicyRespect}
	from := map[string]string{} // lower-cased column name → Arrow field name it came from
	for _, f := range schema.Fields() {
		name := typemap.SafeIdentifier(f.Name)
		key := strings.ToLower(name)
		if isReserved[key] {
			continue
		}
		if prev, ok := from[key]; ok {
			return DesiredTable{}, fmt.Errorf("table %s: arrow fields %q and %q both map to column %q", table, prev, f.Name, name)
		}
		from[key] = f.Name
		t, err := typemap.FromArrow(f.Type)
		if err != nil {
			return DesiredTable{}, fmt.Errorf("table %s: column %q: %w", table, name, err)
		}
		c := typemap.Column{Name: name, Type: t, Nullable: f.Nullable}
		if f.HasMetadata() {
			if i := f.Metadata.FindKey(ArrowCommentKey); i >= 0 {
				c.Comment = f.Metadata.Values()[i]
			}
		}
		d.Columns = append(d.Columns, c)
	}
	for _, r := range reserved {
		if !typemap.ValidIdentifier(r.Name) {
			return DesiredTable{}, fmt.Errorf("table %s: reserved column %q is not a valid identifier", table, r.Name)
		}
		d.Columns = append(d.Columns, r)
	}
	return d, nil
}

// ApplyContract merges a data contract's descriptions and identity into d:
// column descriptions for the columns d has (names matched after
// SafeIdentifier, case-insensitively), the table description, and the
// contract id and version as table properties. Explicit entries already in
// d.Comments win over the contract's.
func (d *DesiredTable) ApplyContract(c *Contract) {
	if c == nil {
		return
	}
	obj := c.Object(d.FullName)
	if obj == nil {
		return
	}
	byLower := map[string]string{}
	for _, col := range d.Columns {
		byLower[strings.ToLower(col.Name)] = col.Name
	}
	if d.Comments == nil {
		d.Comments = map[string]string{}
	}
	for _, p := range obj.Properties {
		name, ok := byLower[strings.ToLower(typemap.SafeIdentifier(p.Name))]
		if !ok || p.Description == "" {
			continue
		}
		if _, set := d.Comments[name]; !set {
			d.Comments[name] = p.Description
		}
	}
	if d.Comment == "" {
		d.Comment = obj.Description
	}
	if d.Properties == nil {
		d.Properties = map[string]string{}
	}
	maps.Copy(d.Properties, c.Properties())
}
