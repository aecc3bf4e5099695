package arrowconv

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzConvert feeds arbitrary newline-separated messages through a converter
// for a table using every type. It must never panic, must account for every
// message exactly once (a record row or a row error, in input order), and
// must always produce a structurally valid record. Differentially, it must
// accept only JSON that encoding/json accepts, reject valid JSON as invalid
// only for invalid UTF-8 or excessive depth, and convert an accepted row to
// the same values through the structured path (the Bloblang-value route).
// Its seed corpus, in testdata/fuzz/FuzzConvert, includes a NUL byte after an
// object and NaN/Infinity literals; plain go test replays it.
func FuzzConvert(f *testing.F) {
	f.Add([]byte(`{"id": 1, "s": "x", "tags": ["a", null], "m": {"1": 2.5}, "p": {"a": 1, "q": {"z": "deep"}}}`))
	f.Add([]byte("{\"id\": 1}\n{\"id\": \"bad\"}\n{\"id\": 3, \"amt\": 1.005}\n[]\n"))
	f.Add([]byte(`{"id": 9007199254740993, "ts": "2024-01-02T03:04:05.123456789+01:00", "ntz": "2024-01-02T03:04:05", "dt": "0001-01-01"}`))
	f.Add([]byte(`{"id": -1e2, "bin": "AAEC/w==", "v": {"x": [1, {"y": null}]}, "s": {"nested": true}, "ok": false, "f": "NaN"}`))
	f.Add([]byte(`{"id": 2, "m": {"1": 1, "01": 2}, "p": null, "s": "\ud800\u00e9\\"}`))
	c := mustConverter(f, "id BIGINT NOT NULL, s STRING, v VARIANT, amt DECIMAL(10,2), bin BINARY, dt DATE, ts TIMESTAMP, "+
		"ntz TIMESTAMP_NTZ, f FLOAT, t TINYINT, ok BOOLEAN, tags ARRAY<STRING>, m MAP<BIGINT, DOUBLE>, "+
		"p STRUCT<a: INT NOT NULL, q: STRUCT<z: STRING>, l: ARRAY<STRUCT<k: DATE>>>, _zb_emit_ts TIMESTAMP",
		Options{NestedToString: true})
	f.Fuzz(func(t *testing.T, data []byte) {
		rows := bytes.Split(data, []byte{'\n'})
		res, err := c.ConvertJSON(rows)
		require.NoError(t, err)
		defer res.Record.Release()
		require.Equal(t, len(rows), int(res.Record.NumRows())+len(res.RowErrors))
		require.Len(t, res.SourceIndex, int(res.Record.NumRows()))
		seen := make([]bool, len(rows))
		for i, idx := range res.SourceIndex {
			require.True(t, i == 0 || idx > res.SourceIndex[i-1], "source index increases")
			seen[idx] = true
		}
		for i, e := range res.RowErrors {
			require.True(t, i == 0 || e.Index > res.RowErrors[i-1].Index, "row errors in input order")
			require.False(t, seen[e.Index], "message %d both converted and failed", e.Index)
			require.NotEmpty(t, e.Error())
		}
		validateRecord(t, res.Record)

		for _, e := range res.RowErrors {
			if errors.Is(e, ErrInvalidJSON) && json.Valid(rows[e.Index]) {
				msg := e.Error()
				require.True(t, strings.Contains(msg, "UTF-8") || strings.Contains(msg, "nesting"),
					"valid JSON rejected: %q: %v", rows[e.Index], e)
			}
		}
		for i, idx := range res.SourceIndex {
			row := rows[idx]
			require.True(t, json.Valid(row), "accepted invalid JSON %q", row)
			dec := json.NewDecoder(bytes.NewReader(row))
			dec.UseNumber()
			var v any
			require.NoError(t, dec.Decode(&v))
			sres, err := c.Convert([]Row{structured(v)})
			require.NoError(t, err)
			require.Empty(t, sres.RowErrors, "structured path rejects %q", row)
			for col := range c.Schema().NumFields() {
				switch c.Schema().Field(col).Name {
				case "v":
					// The metadata dictionary keeps key order of first use (document order on
					// the JSON path, sorted on the structured one): compare the values as JSON.
					assert.Equal(t, variantText(t, res.Record.Column(col), i), variantText(t, sres.Record.Column(col), 0), "variant of %q", row)
					continue
				case "m":
					// Map entries keep document order on the JSON path, sorted key order on the
					// structured one (Go maps have none): compare as sets.
					assert.Equal(t, mapEntries(t, res.Record.Column(col), i), mapEntries(t, sres.Record.Column(col), 0), "map of %q", row)
					continue
				}
				want := array.NewSlice(res.Record.Column(col), int64(i), int64(i+1))
				require.True(t, array.ApproxEqual(want, sres.Record.Column(col), array.WithNaNsEqual(true), array.WithAbsTolerance(0)),
					"column %s of %q: json %v, structured %v", c.Schema().Field(col).Name, row, want, sres.Record.Column(col))
				want.Release()
			}
			sres.Record.Release()
		}
	})
}

// variantText returns VARIANT row i as JSON text ("<NULL>" for SQL NULL).
func variantText(t *testing.T, a arrow.Array, i int) string {
	t.Helper()
	if a.IsNull(i) {
		return "<NULL>"
	}
	s := a.(*array.Struct)
	js, err := VariantJSON(s.Field(0).(*array.LargeBinary).Value(i), s.Field(1).(*array.LargeBinary).Value(i))
	require.NoError(t, err)
	return string(js)
}

// mapEntries returns the entries of map row i as sorted JSON texts (nil for a
// null map).
func mapEntries(t *testing.T, a arrow.Array, i int) []string {
	t.Helper()
	if a.IsNull(i) {
		return nil
	}
	b, err := json.Marshal(a.GetOneForMarshal(i))
	require.NoError(t, err)
	var entries []json.RawMessage
	require.NoError(t, json.Unmarshal(b, &entries))
	out := make([]string, len(entries))
	for j, e := range entries {
		out[j] = string(e)
	}
	slices.Sort(out)
	return out
}
