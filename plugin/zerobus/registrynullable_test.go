package zerobus

import (
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
)

// fastV2OptionalDay is fastV1 with day optional (["null", date]): the
// schema version that relaxes a field v1 made NOT NULL.
const fastV2OptionalDay = `{"type":"record","name":"Reading","fields":[
 {"name":"id","type":"long"},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
 {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"day","type":["null",{"type":"int","logicalType":"date"}],"default":null},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["OK","FAIL"]}},
 {"name":"note","type":["null","string"],"default":null}]}`

// dayNullable reports whether column day of the fast table is nullable.
func dayNullable(t *testing.T, e *emulated) bool {
	t.Helper()
	tbl, ok := e.srv.Registry().Get(fastTable)
	require.True(t, ok)
	c, at := tbl.Column("day")
	require.GreaterOrEqual(t, at, 0)
	return c.Nullable
}

// A registry schema version that makes a NOT NULL column's field optional
// relaxes the column (ALTER COLUMN … DROP NOT NULL) before its rows are
// converted, with catalog.provision: its row carrying null lands, and v1
// rows still land. Without provisioning the table is left alone and the
// null row fails naming the field and NOT NULL.
func TestSchemaRegistryOptionalFieldDropsNotNullEmulated(t *testing.T) {
	fr := newFastRegistry(t)
	e := startEmulated(t, fastTable, fastYAML(fr.reg.URL()))
	require.Empty(t, e.write(t, service.MessageBatch{frame(t, fastV1, fr.idV1, reading(1))}))
	require.False(t, dayNullable(t, e), "v1 created day NOT NULL")

	idV2, _, err := fr.reg.RegisterSchema("readings-value", sr.Schema{Schema: fastV2OptionalDay, Type: sr.TypeAvro})
	require.NoError(t, err)

	// Without provisioning: the table stays, the null row fails alone.
	bare := &emulated{srv: e.srv, out: connectOutput(t, e.srv, fastTable,
		"catalog:\n  warehouse_id: wh\nschema_registry:\n  url: "+fr.reg.URL()+"\n")}
	r2 := reading(2)
	r2["day"] = nil
	failed := bare.write(t, service.MessageBatch{frame(t, fastV2OptionalDay, idV2, r2), frame(t, fastV1, fr.idV1, reading(3))})
	require.Len(t, failed, 1, "only the null row fails: %v", failed)
	require.Contains(t, failed, 0)
	msg := failed[0].Error()
	assert.True(t, strings.Contains(msg, "day") && strings.Contains(msg, "NOT NULL"), "names the field and NOT NULL: %s", msg)
	assert.False(t, dayNullable(t, e), "no provisioning, no DDL")

	// With provisioning: day is relaxed first, then the rows land.
	r4 := reading(4)
	r4["day"] = nil
	require.Empty(t, e.write(t, service.MessageBatch{frame(t, fastV2OptionalDay, idV2, r4), frame(t, fastV1, fr.idV1, reading(5))}))
	assert.True(t, dayNullable(t, e), "v2 made day optional: the column dropped NOT NULL")
	days := map[string]any{}
	for _, r := range e.rows(t, fastTable) {
		days[jsonText(t, r["id"])] = r["day"]
	}
	require.Len(t, days, 4, "rows 1, 3, 4, 5: %v", days)
	assert.Nil(t, days["4"], "v2's null landed")
	assert.Equal(t, `"1999-12-31"`, jsonText(t, days["5"]), "a v1 row still lands")

	// A batch of v2 alone (the fast path, one schema id) lands its null on
	// the relaxed column; v1 again (day required) never puts NOT NULL back.
	r6 := reading(6)
	r6["day"] = nil
	require.Empty(t, e.write(t, service.MessageBatch{frame(t, fastV2OptionalDay, idV2, r6)}))
	require.Empty(t, e.write(t, service.MessageBatch{frame(t, fastV1, fr.idV1, reading(7))}))
	assert.True(t, dayNullable(t, e), "a field becoming required adds no NOT NULL")
	days = map[string]any{}
	for _, r := range e.rows(t, fastTable) {
		days[jsonText(t, r["id"])] = r["day"]
	}
	require.Len(t, days, 6, "%v", days)
	assert.Nil(t, days["6"])
	require.Empty(t, e.rows(t, fastDLQ), "nothing dead-lettered")
}
