package catalog

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cs "github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// A table created with the registry's types (catalog.schema_metadata) is
// one CREATE with those types and the schema's NOT NULL, the
// TIMESTAMP_NTZ feature it needs; a field a later version adds is an ADD
// COLUMN of the registry's type, nullable.
func TestPlanRegistryTypes(t *testing.T) {
	fields := []cs.Schema{
		{Name: "id", Type: cs.Int64},
		{Name: "amount", Type: cs.Decimal, Precision: 12, Scale: 4},
		{Name: "local", Type: cs.Timestamp, Unit: cs.Micros},
		{Name: "day", Type: cs.Date, Optional: true},
		{Name: "addr", Type: cs.Object, Children: []cs.Schema{{Name: "city", Type: cs.String}, {Name: "zip", Type: cs.Int32, Optional: true}}},
	}
	var cols []typemap.Column
	for i := range fields {
		typ, nullable, err := typemap.FromCommonSchema(&fields[i])
		require.NoError(t, err)
		cols = append(cols, typemap.Column{Name: fields[i].Name, Type: typ, Nullable: nullable})
	}
	d := DesiredTable{FullName: "main.default.orders", Columns: cols, Role: RoleDerived, CommentsPolicy: PolicyRespect}
	p := Plan(nil, d)
	require.NoError(t, p.RefusedError())
	stmts, err := p.SQL()
	require.NoError(t, err)
	require.NotEmpty(t, stmts)
	create := stmts[0]
	for _, want := range []string{
		"`id` bigint NOT NULL", "`amount` decimal(12,4) NOT NULL", "`local` timestamp_ntz NOT NULL", "`day` date,",
		"`addr` struct<`city`:string NOT NULL,`zip`:int> NOT NULL",
	} {
		assert.Contains(t, create, want)
	}
	assert.Equal(t, featureSupported, p.Steps[0].Properties[PropTimestampNTZFeature])

	// v2 adds a decimal: an ADD COLUMN of its type, nullable.
	live := &TableState{FullName: d.FullName, Columns: cols, Properties: p.Steps[0].Properties}
	added := typemap.Column{Name: "discount", Type: typemap.DecimalOf(5, 2), Nullable: true}
	d.Columns = append(append([]typemap.Column(nil), cols...), added)
	p = Plan(live, d)
	require.NoError(t, p.RefusedError())
	stmts, err = p.SQL()
	require.NoError(t, err)
	joined := strings.Join(stmts, "\n")
	assert.Contains(t, joined, "ADD COLUMNS (`discount` decimal(5,2)")
	assert.NotContains(t, joined, "discount` decimal(5,2) NOT NULL")
}
