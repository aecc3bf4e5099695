package tablewriter

import (
	"context"
	"encoding/json"
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

func TestTypeForPicksNarrowestWiderType(t *testing.T) {
	tests := []struct {
		name string
		from typemap.Kind
		v    any
		want typemap.Kind // "": no wider type holds v
	}{
		{"int overflow to bigint", typemap.Int, json.Number("3000000000"), typemap.Long},
		{"int underflow to bigint", typemap.Int, json.Number("-2147483649"), typemap.Long},
		{"exponent spelling is an exact integer", typemap.Int, json.Number("3e9"), typemap.Long},
		{"tinyint to smallint", typemap.Byte, json.Number("200"), typemap.Short},
		{"tinyint to int, skipping smallint", typemap.Byte, json.Number("40000"), typemap.Int},
		{"smallint to int", typemap.Short, json.Number("-40000"), typemap.Int},
		{"bigint max fits bigint", typemap.Int, json.Number("9223372036854775807"), typemap.Long},
		{"beyond bigint has no integer type", typemap.Int, json.Number("9223372036854775808"), ""},
		{"a fraction is not an integer", typemap.Int, json.Number("3000000000.5"), ""},
		{"structured int64", typemap.Int, int64(3000000000), typemap.Long},
		{"structured uint64 beyond bigint", typemap.Int, uint64(math.MaxUint64), ""},
		{"structured integral float", typemap.Short, float64(70000), typemap.Int},
		{"float overflow to double", typemap.Float, json.Number("1e39"), typemap.Double},
		{"beyond double stays", typemap.Float, json.Number("1e400"), ""},
		{"structured float64 to double", typemap.Float, float64(1e39), typemap.Double},
		{"a string is not a number", typemap.Int, "3000000000", ""},
		{"bigint has no wider integer", typemap.Long, json.Number("9223372036854775808"), ""},
		{"a string column is not widened", typemap.String, json.Number("1"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := typeFor(typemap.Primitive(tc.from), tc.v)
			if tc.want == "" {
				assert.False(t, ok, "got %s", got.Text())
				return
			}
			require.True(t, ok)
			assert.Equal(t, tc.want, got.Kind)
		})
	}
}

// widenCfg turns on provisioning and widening.
func widenCfg(c *Config) { c.Provision, c.Widen = true, true }

// provisionCfg turns on provisioning only.
func provisionCfg(c *Config) { c.Provision = true }

// submittedColumn returns the values of column name over every record the
// fake received, as strings, and the Arrow type it was sent as last.
func submittedColumn(t *testing.T, op *ingestfake.Opener, name string) ([]string, arrow.DataType) {
	t.Helper()
	var vals []string
	var dt arrow.DataType
	for _, s := range op.Streams() {
		for _, rec := range s.Records() {
			idx := rec.Schema().FieldIndices(name)
			if len(idx) == 0 {
				continue
			}
			col := rec.Column(idx[0])
			dt = col.DataType()
			for r := 0; r < int(rec.NumRows()); r++ {
				if col.IsValid(r) {
					vals = append(vals, col.ValueStr(r))
				} else {
					vals = append(vals, "<null>")
				}
			}
		}
	}
	return vals, dt
}

func TestProvisionWidensOutOfRangeColumn(t *testing.T) {
	icebergProps := func() map[string]string { return catalog.PrimaryRawProperties() }
	tests := []struct {
		name    string
		cols    string
		props   map[string]string
		cfg     func(*Config)
		bodies  []string
		col     string
		wantCol string // the column's type afterwards
		// wantFailed maps a failing message index to substrings its error has.
		wantFailed map[int][]string
		wantSent   []string // the column's values that landed
		evolutions int      // reconciles the batch causes
		hinted     bool     // the "catalog.widen would widen it" hint was logged
	}{
		{
			name: "int to bigint", cols: "id BIGINT NOT NULL, n INT", cfg: widenCfg, col: "n",
			bodies:  []string{`{"id":1,"n":7}`, `{"id":2,"n":3000000000}`},
			wantCol: "bigint", wantSent: []string{"7", "3000000000"}, evolutions: 1,
		},
		{
			name: "narrowest type that holds every value", cols: "id BIGINT NOT NULL, n TINYINT", cfg: widenCfg, col: "n",
			bodies:  []string{`{"id":1,"n":200}`, `{"id":2,"n":-40000}`, `{"id":3,"n":5}`},
			wantCol: "int", wantSent: []string{"200", "-40000", "5"}, evolutions: 1,
		},
		{
			name: "field name matched case-insensitively", cols: "id BIGINT NOT NULL, n SMALLINT", cfg: widenCfg, col: "n",
			bodies:  []string{`{"id":1,"N":70000}`},
			wantCol: "int", wantSent: []string{"70000"}, evolutions: 1,
		},
		{
			name: "float to double", cols: "id BIGINT NOT NULL, f FLOAT", cfg: widenCfg, col: "f",
			bodies:  []string{`{"id":1,"f":1e39}`},
			wantCol: "double", wantSent: []string{"1e+39"}, evolutions: 1,
		},
		{
			name: "without widen the row fails alone, naming the column", cols: "id BIGINT NOT NULL, n INT",
			cfg: provisionCfg, col: "n",
			bodies:  []string{`{"id":1,"n":7}`, `{"id":2,"n":3000000000}`, `{"id":3,"n":8}`},
			wantCol: "int", wantSent: []string{"7", "8"},
			wantFailed: map[int][]string{1: {"message 1", `column "n"`, "out of range for INT"}},
			hinted:     true,
		},
		{
			name: "without provisioning the row fails alone", cols: "id BIGINT NOT NULL, n INT", cfg: nil, col: "n",
			bodies:  []string{`{"id":1,"n":3000000000}`, `{"id":2,"n":8}`},
			wantCol: "int", wantSent: []string{"8"},
			wantFailed: map[int][]string{0: {"message 0", `column "n"`}},
			hinted:     true,
		},
		{
			name: "iceberg reads refuse smallint to bigint", cols: "id BIGINT NOT NULL, n SMALLINT", props: icebergProps(),
			cfg: widenCfg, col: "n",
			bodies:  []string{`{"id":1,"n":3000000000}`, `{"id":2,"n":8}`},
			wantCol: "smallint", wantSent: []string{"8"},
			wantFailed: map[int][]string{0: {"message 0", `column "n"`, "widening column \"n\" to BIGINT refused", "Iceberg reads on"}},
			evolutions: 1,
		},
		{
			name: "beyond bigint nothing is widened", cols: "id BIGINT NOT NULL, n INT", cfg: widenCfg, col: "n",
			bodies:  []string{`{"id":1,"n":99999999999999999999}`, `{"id":2,"n":8}`},
			wantCol: "int", wantSent: []string{"8"},
			wantFailed: map[int][]string{0: {"message 0", `column "n"`, "out of range"}},
		},
		{
			name: "a refused widening does not hold back a new column", cols: "id BIGINT NOT NULL, n SMALLINT", props: icebergProps(),
			cfg: widenCfg, col: "region",
			bodies:  []string{`{"id":1,"n":3000000000,"region":"eu"}`, `{"id":2,"n":8,"region":"us"}`},
			wantCol: "string", wantSent: []string{"us"},
			wantFailed: map[int][]string{0: {"message 0", `column "n"`, "refused"}},
			evolutions: 2, // refused together, then the column alone
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, ingestfake.Config{KeepRecords: true}, tc.cfg, func(c *catalogfake.Catalog) {
				c.Put(testTable, tc.cols, tc.props)
			})
			before := h.cat.ReconcileCount()

			failed := h.write(t, rows(tc.bodies...))
			require.Len(t, failed, len(tc.wantFailed), "failed rows: %v", failed)
			for i, subs := range tc.wantFailed {
				for _, sub := range subs {
					assert.Contains(t, failed[i], sub)
				}
			}
			assert.Equal(t, tc.evolutions, h.cat.ReconcileCount()-before, "reconciles")
			st, _ := h.cat.Describe(context.Background(), testTable)
			c, ok := st.Column(tc.col)
			require.True(t, ok)
			assert.Equal(t, tc.wantCol, c.Type.Text())
			sent, _ := submittedColumn(t, h.opener, tc.col)
			assert.ElementsMatch(t, tc.wantSent, sent)
			_, hinted := h.w.schema.widenHinted.Load("n")
			assert.Equal(t, tc.hinted, hinted)

			// The same drift again: a done widening needs no reconcile, a
			// refused one is remembered, not re-planned.
			after := h.cat.ReconcileCount()
			assert.Len(t, h.write(t, rows(tc.bodies...)), len(tc.wantFailed))
			assert.Equal(t, after, h.cat.ReconcileCount(), "the second batch reconciles nothing")
		})
	}
}

func TestWideningOnceUnderConcurrentBatches(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, widenCfg, func(c *catalogfake.Catalog) {
		c.Put(testTable, "id BIGINT NOT NULL, n INT", nil)
	})
	before := h.cat.ReconcileCount()
	errs := h.writeConcurrently(8, func(i int) string {
		return `{"id":` + itoa(int64(i)) + `,"n":` + itoa(int64(3000000000+i)) + `}`
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, before+1, h.cat.ReconcileCount(), "one drift, one reconcile")
	sent, dt := submittedColumn(t, h.opener, "n")
	assert.Len(t, sent, 8)
	assert.Equal(t, arrow.INT64, dt.ID(), "the rows were sent on the widened schema")
}

func TestWideningReadsStructuredMessages(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, widenCfg, func(c *catalogfake.Catalog) {
		c.Put(testTable, "id BIGINT NOT NULL, n INT", nil)
	})
	m := structuredRow(map[string]any{"id": int64(1), "n": int64(-3000000000)})
	require.Empty(t, h.write(t, []Row{m}))
	sent, _ := submittedColumn(t, h.opener, "n")
	assert.Equal(t, []string{"-3000000000"}, sent)
}

func TestHintedColumnIsNotDecodedAgain(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, provisionCfg, func(c *catalogfake.Catalog) {
		c.Put(testTable, "id BIGINT NOT NULL, n INT", nil)
	})
	batch := rows(`{"id":1,"n":3000000000}`)
	errs := []arrowconv.RowError{{Index: 0, Column: "n", Err: arrowconv.ErrOutOfRange}}
	st := h.w.st.Load()
	require.Len(t, widenings(st.snap.columns(), batch, errs, h.w.schema.hinted), 1, "not hinted yet: the row is looked at")

	require.Len(t, h.write(t, batch), 1)
	assert.True(t, h.w.schema.hinted("n"))
	assert.Empty(t, widenings(h.w.Columns(), batch, errs, h.w.schema.hinted), "once hinted, the column is skipped")
	assert.Len(t, widenings(h.w.Columns(), batch, errs, nil), 1)
}
