package zerobus

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// propertyNames are the field names random messages draw from: plain ones,
// ones that need quoting, two with one column (my-field, my_field), a
// hostile one and non-ASCII ones.
var propertyNames = []string{
	"a", "b c", "my-field", "my_field", "x;y", "9lives", "a`b); DROP TABLE t; --",
	"ünï", "Tab\tName", "k=v", "(p)", "Qty",
}

// randomValue is a random JSON value: null, numbers, strings, booleans,
// objects (with names needing quoting) and arrays, arrays of arrays
// included (no stream carries them: their rows must fail, saying why).
func randomValue(rng *rand.Rand, depth int) any {
	n := 8
	if depth >= 2 {
		n = 5 // scalars only
	}
	return valueOfKind(rng, rng.IntN(n), depth)
}

// valueOfKind is a random value of kind k (as randomValue numbers them).
func valueOfKind(rng *rand.Rand, k, depth int) any {
	switch k {
	case 0:
		return nil
	case 1:
		return rng.Int64N(1<<40) - 1<<39
	case 2:
		return float64(rng.IntN(1000)) + 0.5
	case 3:
		return fmt.Sprintf("s%d", rng.IntN(100))
	case 4:
		return rng.IntN(2) == 0
	case 5, 6:
		obj := map[string]any{}
		for _, k := range []string{"k-1", "z z", "n"} {
			if rng.IntN(2) == 0 {
				obj[k] = randomValue(rng, depth+1)
			}
		}
		return obj
	default:
		if rng.IntN(8) == 0 {
			return []any{[]any{rng.Int64N(9)}}
		}
		arr := make([]any, rng.IntN(3))
		for i := range arr {
			arr[i] = rng.Int64N(100)
		}
		return arr
	}
}

// Random batches (names needing quoting, mixed types, nulls, nested values)
// into an absent table with provisioning and a dead-letter table: every
// message lands exactly once, in the table or, with its reason, in the
// dead-letter table; no batch is nacked whole; no row fails as an unknown
// field of a column the output made; and the values that land are the ones
// sent.
//
// With a rescue column too, the same holds, and what a landed row's rescue
// object holds is what its message sent.
func TestPropertyEveryRowLandsExactlyOnce(t *testing.T) {
	t.Run("dead letters", func(t *testing.T) { propertyEveryRowLandsOnce(t, "", 10) })
	t.Run("rescue column", func(t *testing.T) { propertyEveryRowLandsOnce(t, "rescued", 6) })
}

func propertyEveryRowLandsOnce(t *testing.T, rescue string, iterations int) {
	srv, err := emulator.Start(emulator.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	e := &emulated{srv: srv}

	knobs := ""
	if rescue != "" {
		knobs = "rescue_column: " + rescue + "\n"
	}
	var landedTotal, deadTotal, rescuedTotal int
	for it := 0; it < iterations; it++ {
		seed := uint64(it + 1)
		rng := rand.New(rand.NewPCG(seed, 18))
		table := fmt.Sprintf("main.default.prop%d", it)
		dlq := table + "_dlq"
		o := connectOutput(t, srv, table, knobs+"catalog:\n  provision: true\n  warehouse_id: wh\ndead_letter:\n  table: "+dlq+"\n")

		names := append([]string(nil), propertyNames...)
		rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		names = names[:3+rng.IntN(5)]
		// Each field mostly holds one kind of value; one value in ten is
		// null and one in ten of another kind.
		kinds := map[string]int{}
		for _, name := range names {
			kinds[name] = 1 + rng.IntN(7)
		}
		value := func(name string) any {
			switch r := rng.IntN(10); {
			case r == 0:
				return nil
			case r == 1:
				return randomValue(rng, 0)
			}
			return valueOfKind(rng, kinds[name], 0)
		}
		var sent []map[string]any
		for b, batches := 0, 1+rng.IntN(3); b < batches; b++ {
			batch := make(service.MessageBatch, 1+rng.IntN(40))
			for i := range batch {
				m := map[string]any{"id": int64(len(sent))}
				for _, name := range names {
					if rng.IntN(10) < 6 {
						m[name] = value(name)
					}
				}
				sent = append(sent, m)
				if rng.IntN(2) == 0 {
					batch[i] = service.NewMessage(nil)
					batch[i].SetStructured(m)
				} else {
					body, err := json.Marshal(m)
					require.NoError(t, err)
					batch[i] = service.NewMessage(body)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := o.WriteBatch(ctx, batch)
			cancel()
			require.NoError(t, err, "seed %d batch %d: every row lands or is dead-lettered", seed, b)
		}

		landed, dead := map[int64]int{}, map[int64]int{}
		rows := e.rows(t, table)
		for _, r := range rows {
			id, ok := r["id"].(int64)
			require.True(t, ok, "seed %d: row without an id: %v", seed, r)
			landed[id]++
		}
		tbl, ok := srv.Registry().Get(table)
		require.True(t, ok, "seed %d: the table was created", seed)
		made := map[string]typemap.Column{}
		for _, c := range tbl.Columns {
			made[strings.ToLower(c.Name)] = c
		}
		for _, d := range e.rows(t, dlq) {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(d["payload"].(string)), &m), "seed %d", seed)
			id := int64(m["id"].(float64))
			dead[id]++
			why, _ := d["error"].(string)
			assert.NotEmpty(t, why, "seed %d: message %d dead-lettered without a reason", seed, id)
			if strings.Contains(why, "unknown field") {
				col, _ := d["column_name"].(string)
				_, own := made[typemap.ColumnKey(col)]
				assert.False(t, own, "seed %d: message %d failed as an unknown field of column %q the output made: %s", seed, id, col, why)
			}
		}
		for id := range sent {
			n := landed[int64(id)] + dead[int64(id)]
			assert.Equal(t, 1, n, "seed %d: message %d landed %d times and was dead-lettered %d times: %v",
				seed, id, landed[int64(id)], dead[int64(id)], sent[id])
		}
		checkLandedValues(t, seed, rows, sent, made)
		if rescue != "" {
			rescuedTotal += checkRescued(t, seed, rows, sent, rescue)
		}
		landedTotal += len(landed)
		deadTotal += len(dead)
		require.NoError(t, o.Close(context.Background()))
	}
	t.Logf("%d iterations: %d messages landed (%d with rescued fields), %d dead-lettered", iterations, landedTotal, rescuedTotal, deadTotal)
	assert.Positive(t, landedTotal)
	if rescue != "" {
		assert.Positive(t, rescuedTotal)
	}
}

// checkRescued checks that every rescued field of a landed row holds what
// its message sent, and returns how many landed rows have rescued fields.
func checkRescued(t *testing.T, seed uint64, rows []map[string]any, sent []map[string]any, rescue string) int {
	t.Helper()
	n := 0
	for _, r := range rows {
		obj := variantObject(t, r[rescue])
		if obj == nil {
			continue
		}
		n++
		id := r["id"].(int64)
		for k, v := range obj {
			want, ok := sent[id][k]
			require.True(t, ok, "seed %d message %d: rescued field %q was not sent", seed, id, k)
			wantJSON, err := json.Marshal(want)
			require.NoError(t, err)
			gotJSON, err := json.Marshal(v)
			require.NoError(t, err)
			assert.JSONEq(t, string(wantJSON), string(gotJSON), "seed %d message %d rescued field %q", seed, id, k)
		}
	}
	return n
}

// checkLandedValues compares the scalar values that landed with the ones
// sent, by the column-name rule.
func checkLandedValues(t *testing.T, seed uint64, rows []map[string]any, sent []map[string]any, made map[string]typemap.Column) {
	t.Helper()
	for _, r := range rows {
		id := r["id"].(int64)
		keys := map[string]int{}
		for name := range sent[id] {
			keys[typemap.ColumnKey(name)]++
		}
		for name, v := range sent[id] {
			c, ok := made[typemap.ColumnKey(name)]
			if !ok || keys[typemap.ColumnKey(name)] > 1 {
				continue // no column, or two fields of one column (one rescued)
			}
			got := r[c.Name]
			switch want := v.(type) {
			case int64:
				if c.Type.Kind == typemap.Long {
					assert.Equal(t, want, got, "seed %d message %d field %q", seed, id, name)
				}
			case string:
				if c.Type.Kind == typemap.String {
					assert.Equal(t, want, got, "seed %d message %d field %q", seed, id, name)
				}
			case bool:
				if c.Type.Kind == typemap.Boolean {
					assert.Equal(t, want, got, "seed %d message %d field %q", seed, id, name)
				}
			}
		}
	}
}
