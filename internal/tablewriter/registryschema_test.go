package tablewriter

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	cs "github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

const testSchemaKey = "registry_schema"

// metaTestRow is a decoded message with metadata, as schema_registry_decode
// leaves one.
type metaTestRow struct {
	testRow
	meta map[string]any
}

func (r metaTestRow) MetaGetMut(k string) (any, bool) { v, ok := r.meta[k]; return v, ok }

// registryRow is a structured message carrying schema s (as ToAny writes
// it) and the subject, version and id beside it.
func registryRow(v map[string]any, s cs.Schema, subject string, version, id int) Row {
	return metaTestRow{testRow: testRow{v: v, structured: true}, meta: map[string]any{
		testSchemaKey: s.ToAny(), MetaSchemaSubject: subject, MetaSchemaVersion: version, MetaSchemaID: id,
	}}
}

func ordersV1() cs.Schema {
	return cs.Schema{Name: "order", Type: cs.Object, Children: []cs.Schema{
		{Name: "id", Type: cs.Int64},
		{Name: "qty", Type: cs.Int32},
		{Name: "amount", Type: cs.Decimal, Precision: 10, Scale: 2},
		{Name: "placed", Type: cs.Timestamp, Unit: cs.Micros, AdjustToUTC: true},
		{Name: "local", Type: cs.Timestamp, Unit: cs.Millis},
		{Name: "day", Type: cs.Date},
		{Name: "raw", Type: cs.ByteArray},
		{Name: "ref", Type: cs.UUID},
		{Name: "note", Type: cs.Union, Children: []cs.Schema{{Type: cs.Null}, {Type: cs.String}}},
		{Name: "tags", Type: cs.Array, Children: []cs.Schema{{Type: cs.String}}},
		{Name: "attrs", Type: cs.Map, Children: []cs.Schema{{Type: cs.Int64}}},
		{Name: "addr", Type: cs.Object, Children: []cs.Schema{{Name: "city", Type: cs.String}, {Name: "zip", Type: cs.String, Optional: true}}},
		{Name: "at", Type: cs.TimeOfDay, Unit: cs.Micros},
		{Name: "ratio", Type: cs.Float32},
		{Name: "ok", Type: cs.Boolean},
	}}
}

func orderV1(id int) map[string]any {
	return map[string]any{
		"id": json.Number(itoa(int64(id))), "qty": int32(3), "amount": json.Number("12345678.90"),
		"placed": time.Date(2026, 3, 1, 12, 30, 45, 123456000, time.UTC),
		"local":  "2026-03-01T12:30:45.123",
		"day":    "2026-03-01", "raw": []byte{0, 1, 0xfe}, "ref": "7b2c2c9e-0d3f-4d8e-9a37-2a8d3c1e0f11",
		"note": nil, "tags": []any{"a", "b"}, "attrs": map[string]any{"k": json.Number("9007199254740993")},
		"addr": map[string]any{"city": "Oslo"}, "at": json.Number("45045123456"), "ratio": 0.5, "ok": true,
	}
}

func registryCfg(c *Config) { c.Provision, c.SchemaMetadata = true, testSchemaKey }

func absentTable(*catalogfake.Catalog) {}

// A table created from registry-framed messages takes the registry's types,
// not inferred ones, with the schema's nullability, and the values land
// exactly.
func TestRegistrySchemaCreatesTableWithItsTypes(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, registryCfg, absentTable)
	failed := h.write(t, []Row{registryRow(orderV1(1), ordersV1(), "orders-value", 1, 7), registryRow(orderV1(2), ordersV1(), "orders-value", 1, 7)})
	require.Empty(t, failed)

	st, err := h.cat.Describe(context.Background(), testTable)
	require.NoError(t, err)
	got := map[string]string{}
	for _, c := range st.Columns {
		text := c.Type.Text()
		if !c.Nullable {
			text += " not null"
		}
		got[c.Name] = text
	}
	want := map[string]string{
		"id": "bigint not null", "qty": "int not null", "amount": "decimal(10,2) not null",
		"placed": "timestamp not null", "local": "timestamp_ntz not null", "day": "date not null",
		"raw": "binary not null", "ref": "string not null", "note": "string",
		"tags": "array<string> not null", "attrs": "map<string,bigint> not null",
		"addr": "struct<city:string,zip:string> not null", "at": "bigint not null",
		"ratio": "float not null", "ok": "boolean not null",
	}
	for name, w := range want {
		assert.Equal(t, w, got[name], "column %s", name)
	}
	assert.Equal(t, "id", st.Columns[0].Name, "columns in the schema's field order")

	for col, vals := range map[string][]string{
		"amount": {"12345678.90", "12345678.90"},
		"placed": {"2026-03-01T12:30:45.123456Z", "2026-03-01T12:30:45.123456Z"},
		"local":  {"2026-03-01T12:30:45.123", "2026-03-01T12:30:45.123"},
		"day":    {"2026-03-01", "2026-03-01"},
		"at":     {"45045123456", "45045123456"},
		"note":   {"<null>", "<null>"},
	} {
		sent, _ := submittedColumn(t, h.opener, col)
		assert.Equal(t, vals, sent, "column %s", col)
	}
	raw, _ := submittedColumn(t, h.opener, "raw")
	require.Len(t, raw, 2)
	assert.Equal(t, "AAH+", raw[0], "arrow shows BINARY as base64: the bytes 00 01 fe")
}

func ordersV2() cs.Schema {
	s := ordersV1()
	s.Children = append(s.Children,
		cs.Schema{Name: "price", Type: cs.Decimal, Precision: 12, Scale: 3, Optional: true},
		cs.Schema{Name: "seen", Type: cs.Timestamp, Unit: cs.Micros, Optional: true})
	return s
}

// A new schema version's field becomes a column, with the registry's type,
// before its rows are converted: one reconcile, no row fails, and the
// values land in it.
func TestRegistrySchemaNewVersionAddsColumnBeforeRows(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, registryCfg, absentTable)
	require.Empty(t, h.write(t, []Row{registryRow(orderV1(1), ordersV1(), "orders-value", 1, 7)}))
	before := h.cat.ReconcileCount()

	v2 := orderV1(2)
	v2["price"], v2["seen"] = json.Number("1.500"), "2026-03-02T08:00:00.000001"
	failed := h.write(t, []Row{registryRow(orderV1(3), ordersV1(), "orders-value", 1, 7), registryRow(v2, ordersV2(), "orders-value", 2, 8)})
	require.Empty(t, failed)
	assert.Equal(t, 1, h.cat.ReconcileCount()-before, "one evolution for the new version")

	st, _ := h.cat.Describe(context.Background(), testTable)
	price, ok := st.Column("price")
	require.True(t, ok)
	assert.Equal(t, "decimal(12,3)", price.Type.Text(), "the registry's type, not an inferred DOUBLE")
	assert.True(t, price.Nullable)
	seen, ok := st.Column("seen")
	require.True(t, ok)
	assert.Equal(t, "timestamp_ntz", seen.Type.Text())

	sent, _ := submittedColumn(t, h.opener, "price")
	assert.ElementsMatch(t, []string{"<null>", "1.500"}, sent)

	// The same versions again: nothing to change.
	after := h.cat.ReconcileCount()
	require.Empty(t, h.write(t, []Row{registryRow(v2, ordersV2(), "orders-value", 2, 8)}))
	assert.Equal(t, after, h.cat.ReconcileCount())
}

// A field the table cannot take refuses the rows of its schema, naming the
// field, subject, version and schema id; the other rows land.
func TestRegistrySchemaRefusals(t *testing.T) {
	base := func(extra ...cs.Schema) cs.Schema {
		return cs.Schema{Type: cs.Object, Children: append([]cs.Schema{{Name: "id", Type: cs.Int64}}, extra...)}
	}
	tests := []struct {
		name   string
		cfg    func(*Config)
		cols   string
		schema cs.Schema
		value  any
		want   []string // substrings of the refused row's error; none: it lands
		col    string   // the column's type afterwards
		colTyp string
	}{
		{name: "string column, int64 field", cols: "id BIGINT NOT NULL, name STRING",
			schema: base(cs.Schema{Name: "name", Type: cs.Int64}), value: json.Number("5"),
			want: []string{`field "name"`, `column "name" is STRING; the schema's BIGINT does not fit it`}, col: "name", colTyp: "string"},
		{name: "int column, int64 field, no widening opt-in", cols: "id BIGINT NOT NULL, n INT",
			schema: base(cs.Schema{Name: "n", Type: cs.Int64}), value: json.Number("5"),
			want: []string{`field "n"`, `column "n" is INT, narrower than the schema's BIGINT`, "catalog.widen"}, col: "n", colTyp: "int"},
		{name: "int column, int64 field, widening on", cfg: func(c *Config) { registryCfg(c); c.Widen = true }, cols: "id BIGINT NOT NULL, n INT",
			schema: base(cs.Schema{Name: "n", Type: cs.Int64}), value: json.Number("3000000000"), col: "n", colTyp: "bigint"},
		{name: "bigint column, int32 field fits", cols: "id BIGINT NOT NULL, n BIGINT",
			schema: base(cs.Schema{Name: "n", Type: cs.Int32}), value: json.Number("5"), col: "n", colTyp: "bigint"},
		{name: "decimal precision grows", cols: "id BIGINT NOT NULL, d DECIMAL(10,2)",
			schema: base(cs.Schema{Name: "d", Type: cs.Decimal, Precision: 12, Scale: 2}), value: json.Number("1.25"),
			want: []string{`field "d"`, "DECIMAL(10,2), narrower than the schema's DECIMAL(12,2)"}, col: "d", colTyp: "decimal(10,2)"},
		{name: "decimal scale shrinks", cfg: func(c *Config) { registryCfg(c); c.Widen = true }, cols: "id BIGINT NOT NULL, d DECIMAL(10,2)",
			schema: base(cs.Schema{Name: "d", Type: cs.Decimal, Precision: 10, Scale: 1}), value: json.Number("1.5"),
			want: []string{`field "d"`, "does not fit it"}, col: "d", colTyp: "decimal(10,2)"},
		{name: "union of two non-null types", cols: "id BIGINT NOT NULL",
			schema: base(cs.Schema{Name: "u", Type: cs.Union, Children: []cs.Schema{{Type: cs.Null}, {Type: cs.Int64}, {Type: cs.String}}}), value: "x",
			want: []string{`field "u"`, "a union of INT64 and STRING"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg == nil {
				cfg = registryCfg
			}
			h := newHarness(t, ingestfake.Config{KeepRecords: true}, cfg, func(c *catalogfake.Catalog) { c.Put(testTable, tc.cols, nil) })
			field := tc.schema.Children[1].Name
			good := registryRow(map[string]any{"id": json.Number("1")}, base(), "orders-value", 1, 7)
			bad := registryRow(map[string]any{"id": json.Number("2"), field: tc.value}, tc.schema, "orders-value", 3, 12)
			rowErrs, err := h.w.Write(context.Background(), []Row{good, bad}, nil)
			require.NoError(t, err)
			if len(tc.want) == 0 {
				require.Empty(t, rowErrs)
			} else {
				require.Len(t, rowErrs, 1)
				assert.Equal(t, 1, rowErrs[0].Index)
				assert.True(t, errors.Is(rowErrs[0].Err, ErrRegistrySchema))
				for _, w := range append(tc.want, `subject "orders-value" version 3 (schema id 12)`) {
					assert.Contains(t, rowErrs[0].Err.Error(), w)
				}
			}
			ids, _ := submittedColumn(t, h.opener, "id")
			if len(tc.want) == 0 {
				assert.ElementsMatch(t, []string{"1", "2"}, ids)
			} else {
				assert.Equal(t, []string{"1"}, ids, "the refused row is not written")
			}
			if tc.col != "" {
				st, _ := h.cat.Describe(context.Background(), testTable)
				c, ok := st.Column(tc.col)
				require.True(t, ok)
				assert.Equal(t, tc.colTyp, c.Type.Text())
			}
		})
	}
}

// A refused row is a dead letter naming the field, subject, version and
// schema id; nothing is dropped.
func TestRegistrySchemaRefusalIsDeadLettered(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, registryCfg, func(c *catalogfake.Catalog) { c.Put(testTable, "id BIGINT NOT NULL, name STRING", nil) })
	dlOpener := ingestfake.NewOpener(ingestfake.Config{KeepRecords: true})
	dl := New(Config{Table: "main.default.dlq", Provision: true, CreateColumns: DeadLetterColumns(), Pool: testPoolConfig()}, dlOpener, catalogfake.New(), nil, nil)
	t.Cleanup(func() { _ = dl.Close(context.Background()) })
	e := &Engine{Writer: h.w, DeadLetters: NewDeadLetters(dl, true)}
	require.NoError(t, e.Open(context.Background()))

	v := cs.Schema{Type: cs.Object, Children: []cs.Schema{{Name: "id", Type: cs.Int64}, {Name: "name", Type: cs.Int64}}}
	rest, err := e.Write(context.Background(), []Row{
		registryRow(map[string]any{"id": json.Number("1"), "name": json.Number("9")}, v, "people-value", 4, 31),
	}, nil, nil, nil)
	require.NoError(t, err)
	assert.Empty(t, rest, "the refused row is a durable dead letter")
	errsCol, _ := submittedColumn(t, dlOpener, "error")
	require.Len(t, errsCol, 1)
	for _, w := range []string{`field "name"`, `subject "people-value" version 4 (schema id 31)`, "STRING"} {
		assert.Contains(t, errsCol[0], w)
	}
	colCol, _ := submittedColumn(t, dlOpener, "column_name")
	assert.Equal(t, []string{"name"}, colCol)
}

// Registry-framed bytes meeting an output without schema_registry_decode:
// the error, the log and the health report say so and what to add.
func TestRegistryFramedValuesAreExplained(t *testing.T) {
	framed := func(id byte) Row { return testRow{b: []byte{0, 0, 0, 0, id, 0x02, 'h', 'i'}} }
	want := "values are Schema Registry framed (schema id 42): add a schema_registry_decode processor before the zerobus output"

	// An absent table: nothing to create it from.
	h := newHarness(t, ingestfake.Config{}, provisionCfg, absentTable)
	_, err := h.w.Write(context.Background(), []Row{framed(42), framed(42)}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), want)
	assert.Contains(t, err.Error(), "(2 of 2 messages)")
	assert.NotContains(t, err.Error(), "no column could be inferred")
	th := h.w.Health()
	assert.Contains(t, th.Reason, want)
	assert.Equal(t, StateRebuilding, th.State)

	// Decoded rows create it, and the health report heals.
	require.Empty(t, h.write(t, rows(`{"id":1}`)))
	assert.NotContains(t, h.w.Health().Reason, "framed")

	// An existing table: each framed message fails alone, saying so.
	failed := h.write(t, []Row{framed(42), testRow{b: []byte(`{"id":2}`)}})
	require.Len(t, failed, 1)
	assert.Contains(t, failed[0], want)
	assert.True(t, strings.Contains(failed[0], "invalid JSON") || strings.Contains(failed[0], "JSON"), failed[0])
}

// A first batch whose schemas give no column creates nothing, and its rows
// fail alone (to the dead-letter table), naming why, instead of the batch
// being held for ever.
func TestRegistrySchemaWithoutColumnsFailsRowsAlone(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, registryCfg, absentTable)
	s := cs.Schema{Type: cs.Object, Children: []cs.Schema{{Name: "v", Type: cs.Union, Children: []cs.Schema{{Type: cs.Boolean}, {Type: cs.String}}}}}
	rowErrs, err := h.w.Write(context.Background(), []Row{
		registryRow(map[string]any{"v": true}, s, "flags-value", 1, 3),
		registryRow(map[string]any{"v": "x"}, s, "flags-value", 1, 3),
	}, nil)
	require.NoError(t, err)
	require.Len(t, rowErrs, 2)
	for i, re := range rowErrs {
		assert.Equal(t, i, re.Index)
		assert.Equal(t, "v", re.Column)
		assert.ErrorIs(t, re.Err, ErrRegistrySchema)
		assert.Contains(t, re.Err.Error(), `field "v" of the registry schema of subject "flags-value" version 1 (schema id 3): v: a union of BOOLEAN and STRING`)
	}
	st, _ := h.cat.Describe(context.Background(), testTable)
	assert.Nil(t, st, "no table is created")
	assert.Nil(t, h.w.schema.blocked.Load(), "nothing is held")
}

// A column widened by hand takes the rows of a schema it refused, at the
// next look (SchemaRefreshInterval), without a restart.
func TestRegistrySchemaRefusalHealsWhenTheTableChanges(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, func(c *Config) { registryCfg(c); c.SchemaRefreshInterval = time.Millisecond },
		func(c *catalogfake.Catalog) { c.Put(testTable, "id BIGINT NOT NULL, n INT", nil) })
	s := cs.Schema{Type: cs.Object, Children: []cs.Schema{{Name: "id", Type: cs.Int64}, {Name: "n", Type: cs.Int64}}}
	batch := []Row{registryRow(map[string]any{"id": json.Number("1"), "n": json.Number("3000000000")}, s, "nums-value", 2, 5)}
	require.Len(t, h.write(t, batch), 1)

	h.cat.Put(testTable, "id BIGINT NOT NULL, n BIGINT", nil) // widened by hand
	time.Sleep(5 * time.Millisecond)
	require.Empty(t, h.write(t, batch))
	sent, _ := submittedColumn(t, h.opener, "n")
	assert.Equal(t, []string{"3000000000"}, sent)
}

// A batch's schemas are parsed once per fingerprint, not once per message,
// and kept for the next batches: the rows of one schema share one parse.
func TestRegistrySchemasParsedOncePerFingerprint(t *testing.T) {
	a := &metadataSchemas{key: testSchemaKey}
	batch := make([]Row, 0, 1001)
	for i := range 1000 {
		s := ordersV1()
		if i%2 == 1 {
			s = ordersV2()
		}
		batch = append(batch, registryRow(orderV1(i), s, "orders-value", 1+i%2, 7+i%2))
	}
	batch = append(batch, structuredRow(map[string]any{"id": 1}))
	bs, _ := a.schemasOf(context.Background(), batch, nil)
	require.Len(t, bs.schemas, 2)
	assert.Equal(t, 0, bs.of[0])
	assert.Equal(t, 1, bs.of[1])
	assert.Equal(t, 0, bs.of[998])
	assert.Equal(t, -1, bs.of[1000], "a message without the key")
	assert.Len(t, a.schemas.m, 2, "two fingerprints, two parses")

	again, _ := a.schemasOf(context.Background(), batch[:2], nil)
	assert.Same(t, bs.schemas[0], again.schemas[0], "the next batch reuses the parse")
	assert.Same(t, bs.schemas[1], again.schemas[1])
}

// Batches meeting a new schema version at once cause one table change.
func TestRegistrySchemaNewVersionOnceUnderConcurrentBatches(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, registryCfg, absentTable)
	require.Empty(t, h.write(t, []Row{registryRow(orderV1(0), ordersV1(), "orders-value", 1, 7)}))
	before := h.cat.ReconcileCount()
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			v := orderV1(i + 1)
			v["price"] = json.Number("2.250")
			rowErrs, err := h.w.Write(context.Background(), []Row{registryRow(v, ordersV2(), "orders-value", 2, 8)}, nil)
			if err == nil && len(rowErrs) > 0 {
				err = rowErrs[0]
			}
			errs <- err
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	assert.Equal(t, 1, h.cat.ReconcileCount()-before, "one evolution for the new version")
	sent, _ := submittedColumn(t, h.opener, "price")
	assert.Len(t, sent, n, "every v2 row landed in the new column")
}

// An Avro time-millis or time-micros reaches the output as
// schema_registry_decode gives it with preserve_logical_types: a time on the
// Unix epoch day (internal/registry's decodeTimeOfDay). Its TIME_OF_DAY
// column (BIGINT) takes it as microseconds since midnight, as it takes a
// time.Duration; a time on any other day is no time of day and fails its
// row, naming the column.
func TestRegistryTimeOfDayFromTheDecodersTime(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, registryCfg, absentTable)
	epoch := func(h, m, s, ns int) time.Time { return time.Date(1970, 1, 1, h, m, s, ns, time.UTC) }
	row := func(id int, at any) Row {
		o := orderV1(id)
		o["at"] = at
		return registryRow(o, ordersV1(), "orders-value", 1, 7)
	}
	failed := h.write(t, []Row{
		row(1, epoch(12, 34, 56, 789_000_000)),              // time-millis 45296789
		row(2, epoch(23, 59, 59, 999_999_000)),              // the last microsecond of the day
		row(3, epoch(0, 0, 0, 0)),                           // midnight
		row(4, 45296789012*time.Microsecond),                // a time.Duration, as before
		row(5, time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC)), // not on the epoch day
	})
	require.Len(t, failed, 1)
	require.Contains(t, failed, 4)
	assert.Contains(t, failed[4], `message 4: column "at"`)
	sent, _ := submittedColumn(t, h.opener, "at")
	assert.Equal(t, []string{"45296789000", "86399999999", "0", "45296789012"}, sent)
}

// A stored schema a mapping rewrote but whose fingerprint it kept is never
// taken for the original: it is not cached under that fingerprint (its
// content's differs), it is said once, and the original, met later, is
// parsed as itself.
func TestRegistrySchemaStaleFingerprintIsNotTrusted(t *testing.T) {
	a := &metadataSchemas{key: testSchemaKey}
	var said []string
	a.schemas.stale = func(claimed, actual string) { said = append(said, claimed+" "+actual) }
	v1, v2 := ordersV1(), ordersV2()
	rewritten := v2.ToAny().(map[string]any)
	rewritten["fingerprint"] = v1.Fingerprint() // kept from the original
	row := func(s any) Row {
		return metaTestRow{testRow: testRow{v: orderV1(1), structured: true}, meta: map[string]any{testSchemaKey: s}}
	}

	bs, _ := a.schemasOf(context.Background(), []Row{row(rewritten)}, nil)
	require.Len(t, bs.schemas, 1)
	assert.Len(t, bs.schemas[0].fields, len(v2.Children), "the rewritten schema is read as itself")
	assert.Empty(t, a.schemas.m, "not cached under a fingerprint that is not its own")
	require.Len(t, said, 1)
	assert.Equal(t, v1.Fingerprint()+" "+v2.Fingerprint(), said[0])

	bs, _ = a.schemasOf(context.Background(), []Row{row(v1.ToAny())}, nil)
	assert.Len(t, bs.schemas[0].fields, len(v1.Children), "the original under its own fingerprint")
	bs, _ = a.schemasOf(context.Background(), []Row{row(rewritten)}, nil)
	assert.Len(t, bs.schemas[0].fields, len(v2.Children))
	assert.Len(t, said, 1, "said once")
	assert.Len(t, a.schemas.m, 1)
}

// Within one batch too: a row whose stored schema claims the previous row's
// fingerprint but was rewritten is read as itself, not given the previous
// row's schema.
func TestRegistrySchemaStaleFingerprintInOneBatch(t *testing.T) {
	a := &metadataSchemas{key: testSchemaKey}
	v1, v2 := ordersV1(), ordersV2()
	rewritten := v2.ToAny().(map[string]any)
	rewritten["fingerprint"] = v1.Fingerprint() // kept from the original
	row := func(s any) Row {
		return metaTestRow{testRow: testRow{v: orderV1(1), structured: true}, meta: map[string]any{testSchemaKey: s}}
	}
	bs, _ := a.schemasOf(context.Background(), []Row{row(v1.ToAny()), row(rewritten), row(rewritten), row(v1.ToAny())}, nil)
	require.Len(t, bs.schemas, 2)
	assert.Equal(t, []int{0, 1, 1, 0}, bs.of)
	assert.Len(t, bs.schemas[0].fields, len(v1.Children))
	assert.Len(t, bs.schemas[1].fields, len(v2.Children), "the rewritten schema is read as itself")
}

// BenchmarkParseStoredSchema is the cost of a stored schema parsed for each
// message (one without a fingerprint, or a stale one): the 15 fields of
// ordersV1. docs/schema-registry.md quotes it.
func BenchmarkParseStoredSchema(b *testing.B) {
	s := ordersV1()
	v := s.ToAny()
	for b.Loop() {
		if s, _ := parseSchemaValue(v, false); s.err != nil {
			b.Fatal(s.err)
		}
	}
}

// BenchmarkMetadataSchemasOf is the per-batch cost of reading the registry
// schemas of 1000 messages carrying one stored schema (ordersV1): one
// stored value shared by every message, as schema_registry_decode stores
// it, or a value of its own per message.
func BenchmarkMetadataSchemasOf(b *testing.B) {
	for _, shared := range []bool{true, false} {
		b.Run("shared="+strconv.FormatBool(shared), func(b *testing.B) {
			a := &metadataSchemas{key: testSchemaKey}
			v1 := ordersV1()
			stored := v1.ToAny()
			batch := make([]Row, 1000)
			for i := range batch {
				r := registryRow(orderV1(i), ordersV1(), "orders-value", 1, 7).(metaTestRow)
				if shared {
					r.meta[testSchemaKey] = stored
				}
				batch[i] = r
			}
			for b.Loop() {
				if bs, _ := a.schemasOf(context.Background(), batch, nil); len(bs.schemas) != 1 {
					b.Fatal(len(bs.schemas))
				}
			}
		})
	}
}
