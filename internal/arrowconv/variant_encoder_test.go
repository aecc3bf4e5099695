package arrowconv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Bounds TestVariantKeysBeyondTheInternBounds sizes its rows by: the column
// once interned up to 1024 keys of up to 64 bytes. variantEncoder copies
// every key into its arena instead, and that test still checks many
// distinct keys, long keys and escaped keys against arrow-go.
const (
	maxInternedKeys   = 1024
	maxInternedKeyLen = 64
)

// randomJSON writes a random JSON value meant to reach every branch of the
// encoder: keys shared across and within objects (and duplicated now and
// then), escaped and non-ASCII keys, objects past the linear dictionary
// scan and past 255 fields, arrays past 255 elements, strings around the
// short-string limit, values big enough for 2- and 3-byte offsets, and
// numbers of every encoding (int8 to int64, decimals of 4, 8 and 16 bytes,
// beyond-int64 integers, exponents, doubles out of range).
func randomJSON(r *rand.Rand, dst []byte, depth int) []byte {
	k := r.IntN(20)
	if depth > 4 {
		k = 6 + r.IntN(14)
	}
	switch {
	case k < 3: // object
		n := r.IntN(6)
		switch r.IntN(25) {
		case 0:
			n = 30 + r.IntN(20) // around linearDictMax
		case 1:
			n = 250 + r.IntN(20) // around the 1-byte field count
		}
		dst = append(dst, '{')
		for i := range n {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendRandomKey(r, dst, n)
			dst = append(dst, ':')
			dst = randomJSON(r, dst, depth+1)
		}
		return append(dst, '}')
	case k < 6: // array
		n := r.IntN(6)
		if r.IntN(30) == 0 {
			n = 250 + r.IntN(20)
		}
		dst = append(dst, '[')
		for i := range n {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = randomJSON(r, dst, depth+1)
		}
		return append(dst, ']')
	case k < 10:
		return appendRandomNumber(r, dst)
	case k < 15: // string
		n := r.IntN(10)
		switch r.IntN(6) {
		case 0:
			n = 60 + r.IntN(8) // around the short-string limit
		case 1:
			n = 200 + r.IntN(400) // offsets past one byte
		}
		if r.IntN(200) == 0 {
			n = 70_000 // offsets past two bytes
		}
		dst = append(dst, '"')
		for range n {
			switch r.IntN(40) {
			case 0:
				dst = append(dst, `\n`...)
			case 1:
				dst = append(dst, "é"...)
			case 2:
				dst = append(dst, `\u00e9`...)
			default:
				dst = append(dst, byte('a'+r.IntN(26)))
			}
		}
		return append(dst, '"')
	case k < 17:
		return append(dst, "null"...)
	case k < 18:
		return append(dst, "true"...)
	default:
		return append(dst, "false"...)
	}
}

// appendRandomKey writes a quoted object key from a small shared pool (so
// keys repeat across objects, and sometimes within one), or a fresh one.
func appendRandomKey(r *rand.Rand, dst []byte, fields int) []byte {
	switch r.IntN(12) {
	case 0:
		return append(dst, `"k\u0031"`...) // escaped, the same key as "k1"
	case 1:
		return append(dst, `"clé"`...)
	case 2:
		return fmt.Appendf(dst, `"%s%d"`, strings.Repeat("long", 20), r.IntN(3))
	case 3, 4:
		return fmt.Appendf(dst, `"u%d"`, r.Uint32())
	}
	return fmt.Appendf(dst, `"k%d"`, r.IntN(fields*4+3))
}

// appendRandomNumber writes a number of random magnitude, precision, scale
// and form.
func appendRandomNumber(r *rand.Rand, dst []byte) []byte {
	if r.IntN(2) == 0 {
		dst = append(dst, '-')
	}
	digits := func(n int) {
		for i := range n {
			d := byte('0' + r.IntN(10))
			if i == 0 && n > 1 && d == '0' {
				d = '1'
			}
			dst = append(dst, d)
		}
	}
	switch r.IntN(6) {
	case 0: // integer up to int64 and a little beyond
		digits(1 + r.IntN(21))
	case 1: // small values
		dst = strconv.AppendInt(dst, int64(r.IntN(70000)), 10)
	case 2, 3: // decimals of every precision, sometimes with leading zeros
		if r.IntN(3) == 0 {
			dst = append(dst, '0')
		} else {
			digits(1 + r.IntN(25))
		}
		dst = append(dst, '.')
		for range r.IntN(4) {
			dst = append(dst, '0')
		}
		digits(1 + r.IntN(22))
	case 4: // exponents
		digits(1 + r.IntN(4))
		if r.IntN(2) == 0 {
			dst = append(dst, '.')
			digits(1 + r.IntN(4))
		}
		dst = append(dst, "eE"[r.IntN(2)])
		dst = append(dst, "+-"[r.IntN(2)])
		dst = strconv.AppendInt(dst, int64(r.IntN(400)), 10)
	default: // a very long integer: a double
		digits(35 + r.IntN(10))
	}
	return dst
}

// TestVariantEncoderMatchesOracle encodes thousands of random documents
// with variantEncoder and with the former Builder-based encoder, through
// the Encode functions and through a converter column (whose encoder and
// buffers carry over between rows and batches), on both the JSON and the
// structured path, and requires the same bytes and the same errors.
func TestVariantEncoderMatchesOracle(t *testing.T) {
	c := mustConverter(t, "id BIGINT, v VARIANT", Options{})
	for seed := range uint64(8) {
		r := rand.New(rand.NewPCG(seed, 0x5eed))
		docs := make([][]byte, 400)
		for i := range docs {
			docs[i] = randomJSON(r, nil, 0)
		}
		rows := make([]string, len(docs))
		var structs []Row
		for i, d := range docs {
			rows[i] = fmt.Sprintf(`{"id": %d, "v": %s}`, i, d)
		}
		res := convertJSON(t, c, rows...)
		failed := map[int]bool{}
		for _, re := range res.RowErrors {
			failed[re.Index] = true
		}
		got := 0
		for i, d := range docs {
			wantMeta, wantVal, wantErr := oracleEncodeJSON(d)
			meta, val, err := EncodeVariantJSON(d)
			require.Equal(t, wantErr != nil, err != nil, "seed %d doc %d: %s: %v / %v", seed, i, d, wantErr, err)
			require.Equal(t, wantErr != nil, failed[i], "seed %d doc %d: column error %v", seed, i, wantErr)
			if wantErr != nil {
				assert.Equal(t, errText(wantErr), errText(err), "seed %d doc %d", seed, i)
				continue
			}
			require.Equal(t, wantMeta, meta, "seed %d doc %d metadata: %s", seed, i, d)
			require.Equal(t, wantVal, val, "seed %d doc %d value: %s", seed, i, d)
			col := variantAt(t, res, "v", got)
			require.Equal(t, wantMeta, col.Metadata().Bytes(), "seed %d doc %d column metadata", seed, i)
			require.Equal(t, wantVal, col.Bytes(), "seed %d doc %d column value", seed, i)
			got++

			// The structured path.
			generic := decodeUseNumber(t, d)
			gMeta, gVal, gErr := oracleEncodeGo(generic)
			meta, val, err = EncodeVariant(generic)
			require.Equal(t, gErr != nil, err != nil, "seed %d doc %d structured: %v / %v", seed, i, gErr, err)
			if gErr == nil {
				require.Equal(t, gMeta, meta, "seed %d doc %d structured metadata", seed, i)
				require.Equal(t, gVal, val, "seed %d doc %d structured value", seed, i)
				structs = append(structs, structured(map[string]any{"v": generic}))
			}
		}
		require.EqualValues(t, got, res.Record.NumRows())

		sres, err := c.Convert(structs)
		require.NoError(t, err)
		require.Empty(t, sres.RowErrors)
		s := sres.Record.Column(1).(*array.Struct)
		for i, row := range structs {
			wantMeta, wantVal, err := oracleEncodeGo(row.(msg).structured.(map[string]any)["v"])
			require.NoError(t, err)
			meta, val := variantChildren(s, i)
			assert.Equal(t, wantMeta, meta, "seed %d structured row %d metadata", seed, i)
			assert.Equal(t, wantVal, val, "seed %d structured row %d value", seed, i)
		}
		sres.Record.Release()
	}
}

// decodeUseNumber decodes doc as a structured row holds it: numbers as
// json.Number.
func decodeUseNumber(t *testing.T, doc []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v))
	return v
}

// variantChildren returns the metadata and value bytes of row i of a
// VARIANT column's struct: its children's bytes, not variant.New, whose
// metadata reader in arrow-go v18.8.0 overflows a uint8 offset on large
// dictionaries.
func variantChildren(s *array.Struct, i int) (meta, value []byte) {
	return s.Field(0).(*array.LargeBinary).Value(i), s.Field(1).(*array.LargeBinary).Value(i)
}

// errText is an error's message without the converter's kind prefix, which
// the two encoders word alike.
func errText(err error) string { return rowErrorless(err).Error() }

// TestVariantEncoderEdgeCases compares the encoders on hand-picked values at
// the encoding's boundaries, including duplicate keys (an error in both).
func TestVariantEncoderEdgeCases(t *testing.T) {
	many := func(n int, f func(i int) string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = f(i)
		}
		return strings.Join(parts, ",")
	}
	docs := []string{
		`{}`, `[]`, `null`, `0`, `-0`, `-0.0`, `127`, `128`, `-128`, `-129`, `32767`, `32768`, `2147483648`,
		`9223372036854775807`, `-9223372036854775808`, `9223372036854775808`, `-9223372036854775809`,
		`99999999999999999999999999999999999999`, `-99999999999999999999999999999999999999`,
		`0.99999999999999999999999999999999999999`, `999999999.9`, `-999999999999999999`, `0.000000000000000001`,
		`1e400`, `-1e400`, `1e-400`,
		`"` + strings.Repeat("x", 63) + `"`, `"` + strings.Repeat("x", 64) + `"`,
		`{"a":1,"b":2,"a":3}`, `[{"a":1},{"b":{"a":2,"a":3}}]`, `{"k\u0031":1,"k1":2}`,
		`{"b":1,"a":2}`, `{"a":{"b":{"c":[1,{"a":null}]}},"b":[]}`,
		`{` + many(300, func(i int) string { return fmt.Sprintf(`"f%03d":%d`, 299-i, i) }) + `}`,
		`[` + many(300, func(i int) string { return strconv.Itoa(i * 1000) }) + `]`,
		`{` + many(40, func(i int) string { return fmt.Sprintf(`"%s%d":[%d]`, strings.Repeat("z", 10), i, i) }) + `}`,
	}
	for _, d := range docs {
		wantMeta, wantVal, wantErr := oracleEncodeJSON([]byte(d))
		meta, val, err := EncodeVariantJSON([]byte(d))
		if wantErr != nil {
			require.Error(t, err, d)
			assert.Equal(t, errText(wantErr), errText(err), d)
			continue
		}
		require.NoError(t, err, d)
		assert.Equal(t, wantMeta, meta, "metadata of %.60s", d)
		assert.Equal(t, wantVal, val, "value of %.60s", d)
	}
	for _, v := range []any{uint64(1<<63 + 5), uint(1 << 63), uint64(1<<64 - 1), int8(-5), float32(1.5),
		map[string]any{"b": []byte{1}, "a": []any{json.Number("1.50"), json.Number("1e3"), nil, true}}} {
		wantMeta, wantVal, err := oracleEncodeGo(v)
		require.NoError(t, err)
		meta, val, err := EncodeVariant(v)
		require.NoError(t, err)
		assert.Equal(t, wantMeta, meta, "metadata of %#v", v)
		assert.Equal(t, wantVal, val, "value of %#v", v)
	}
}

// TestVariantEncoderAllocatesNothingPerValue checks that a warmed-up encoder
// writes a value and its metadata onto buffers with room without
// allocating: the point of replacing the per-row Builder.
func TestVariantEncoderAllocatesNothingPerValue(t *testing.T) {
	doc := []byte(`{"tags":["web","eu-west-1","ab\u00e9"],"attrs":{"campaign":"c-4","n":[1,2.50,` +
		`12345678901234567890.12345,-7e3,null,true]},"long":"` + strings.Repeat("s", 100) + `"}`)
	var e variantEncoder
	value, meta := make([]byte, 0, 1<<16), make([]byte, 0, 1<<16)
	var s scanner // reused, as the converter's state reuses its scanner
	// encoder returns a function writing one value with write, then its
	// metadata, onto the reused buffers.
	encoder := func(write func() error) func() {
		return func() {
			e.begin(value[:0])
			if err := write(); err != nil {
				t.Fatal(err)
			}
			var err error
			if meta, err = e.appendMetadata(meta[:0]); err != nil {
				t.Fatal(err)
			}
			value = e.buf
		}
	}
	encode := encoder(func() error {
		s.reset(doc)
		return e.encodeJSON(&s, 0)
	})
	encode()
	assert.Zero(t, testing.AllocsPerRun(200, encode))
	generic := map[string]any{"b": []any{json.Number("1.5"), "x", map[string]any{"c": nil}}, "a": int64(3)}
	encodeGo := encoder(func() error { return e.encodeGo(generic, 0) })
	encodeGo()
	assert.Zero(t, testing.AllocsPerRun(200, encodeGo))
}

// FuzzVariantEncoder requires variantEncoder to encode any input exactly as
// the former Builder-based encoder does, or to fail where it fails.
func FuzzVariantEncoder(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5,"x",{"a":null}],"b":true}`, `[1e5,-0.10,99999999999999999999]`,
		`{"k":1,"k":2}`, `"\u00e9\n"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		wantMeta, wantVal, wantErr := oracleEncodeJSON(doc)
		meta, val, err := EncodeVariantJSON(doc)
		if wantErr != nil {
			require.Error(t, err)
			require.Equal(t, errText(wantErr), errText(err))
			return
		}
		require.NoError(t, err)
		require.Equal(t, wantMeta, meta)
		require.Equal(t, wantVal, val)
	})
}

// TestVariantEncoderAcrossRows runs one column, and one reused encoder,
// over rows chosen so that state kept from row to row shows, on the JSON and
// on the structured path: a row past the linear dictionary scan that reuses
// its own keys found through the index, and a key of an earlier such row (a stale index entry would give it the old
// id; the structured path shows it, the JSON path's stale keys being
// overwritten arena bytes), rows past maxKeptDictIdx keys
// (the index is dropped) and past 64 KiB of key bytes (3-byte metadata
// offsets) followed by small rows, escaped keys, and duplicate-key errors
// deep in a row followed by rows that must encode as if alone.
func TestVariantEncoderAcrossRows(t *testing.T) {
	obj := func(n int, field func(i int) string, extra ...string) string {
		parts := make([]string, n, n+len(extra))
		for i := range parts {
			parts[i] = field(i)
		}
		return "{" + strings.Join(append(parts, extra...), ",") + "}"
	}
	docs := []string{
		obj(40, func(i int) string { return fmt.Sprintf(`"k%d":%d`, 39-i, i) }),
		`{"k3":1,"a":2}`,
		obj(40, func(i int) string { return fmt.Sprintf(`"a%d":%d`, i, i) }, `"k5":5`, `"z":{"a35":1,"a1":2}`),
		obj(maxKeptDictIdx+100, func(i int) string { return fmt.Sprintf(`"q%d":%d`, i, i) }),
		`{"q1":1,"k\u0031":2}`,
		obj(40, func(i int) string { return fmt.Sprintf(`"d%d":{"x":[%d]}`, i, i) }, `"z":[{"d3":1,"d3":2}]`),
		`{"d1":1,"zz":{"d1":2}}`,
		obj(33, func(i int) string { return fmt.Sprintf(`"e%02d":%d`, i, i) }),
		obj(33, func(i int) string { return fmt.Sprintf(`"e%02d":%d`, 32-i, i) }, `"k5":0`),
		obj(300, func(i int) string { return fmt.Sprintf(`"%s%03d":[%d,{"x":1}]`, strings.Repeat("w", 300), i, i) }),
		`[{"x":1},{"x":{"y":[1,2,{"x":3}]}}]`,
		`{"a":[1,{"b":[2,{"c":3,"c":4}]}]}`,
		`{"b":1,"a":{"b":2,"c":3}}`,
		obj(70000, func(i int) string { return fmt.Sprintf(`"r%d":%d`, i, i) }),
		`{"r1":1}`,
	}
	rows := make([]string, len(docs))
	for i, d := range docs {
		rows[i] = fmt.Sprintf(`{"id":%d,"v":%s}`, i, d)
	}
	c := mustConverter(t, "id BIGINT, v VARIANT", Options{})
	var e variantEncoder
	for round := range 2 { // the second batch reuses the pooled state
		res := convertJSON(t, c, rows...)
		failed := map[int]bool{}
		for _, re := range res.RowErrors {
			failed[re.Index] = true
		}
		s := res.Record.Column(1).(*array.Struct)
		got := 0
		var structs []Row
		var want [][2][]byte
		for i, d := range docs {
			wantMeta, wantVal, wantErr := oracleEncodeJSON([]byte(d))
			require.Equal(t, wantErr != nil, failed[i], "round %d doc %d: %v", round, i, wantErr)
			e.begin(nil)
			sc := scanner{data: []byte(d)}
			err := e.encodeJSON(&sc, 0)
			require.Equal(t, wantErr != nil, err != nil, "round %d doc %d: %v", round, i, err)
			if wantErr != nil {
				continue
			}
			meta, err := e.appendMetadata(nil)
			require.NoError(t, err)
			require.Equal(t, wantMeta, meta, "round %d doc %d encoder metadata", round, i)
			require.Equal(t, wantVal, e.buf, "round %d doc %d encoder value", round, i)
			colMeta, colVal := variantChildren(s, got)
			require.Equal(t, wantMeta, colMeta, "round %d doc %d column metadata", round, i)
			require.Equal(t, wantVal, colVal, "round %d doc %d column value", round, i)
			got++

			generic := decodeUseNumber(t, []byte(d))
			wantMeta, wantVal, err = oracleEncodeGo(generic)
			require.NoError(t, err, "doc %d", i)
			e.begin(nil)
			require.NoError(t, e.encodeGo(generic, 0), "round %d doc %d structured", round, i)
			meta, err = e.appendMetadata(nil)
			require.NoError(t, err)
			require.Equal(t, wantMeta, meta, "round %d doc %d structured metadata", round, i)
			require.Equal(t, wantVal, e.buf, "round %d doc %d structured value", round, i)
			structs = append(structs, structured(map[string]any{"v": generic}))
			want = append(want, [2][]byte{wantMeta, wantVal})
		}
		require.EqualValues(t, got, res.Record.NumRows())

		sres, err := c.Convert(structs)
		require.NoError(t, err)
		require.Empty(t, sres.RowErrors)
		s = sres.Record.Column(1).(*array.Struct)
		for i, w := range want {
			meta, val := variantChildren(s, i)
			assert.Equal(t, w[0], meta, "round %d structured row %d metadata", round, i)
			assert.Equal(t, w[1], val, "round %d structured row %d value", round, i)
		}
		sres.Record.Release()
	}
}

// TestVariantNodeErrorKeepsColumn checks that a value failing part way
// leaves the column's children as they were, without the converter's row
// truncation, so the next value starts where the last good one ended.
func TestVariantNodeErrorKeepsColumn(t *testing.T) {
	var n variantNode
	n.reset(4)
	var st state
	good := []string{`{"a":[1,"x"],"b":{"c":null}}`, `{"b":2}`}
	st.scanner.reset([]byte(good[0]))
	require.NoError(t, n.decode(&st))
	st.scanner.reset([]byte(`{"a":1,"b":[2,3,{"a":` + strings.Repeat("9", 10) + `,"a":2}]}`))
	require.Error(t, n.decode(&st))
	require.NoError(t, n.put(&st, map[string]any{"b": int64(2)}))
	require.Len(t, n.meta.offsets, 3, "one metadata per good value")
	require.Len(t, n.value.offsets, 3, "one value per good value")
	for i, d := range good {
		wantMeta, wantVal, err := oracleEncodeJSON([]byte(d))
		require.NoError(t, err)
		assert.Equal(t, wantMeta, n.meta.data[n.meta.offsets[i]:n.meta.offsets[i+1]], "value %d metadata", i)
		assert.Equal(t, wantVal, n.value.data[n.value.offsets[i]:n.value.offsets[i+1]], "value %d value", i)
	}
	assert.Equal(t, n.value.offsets[2], int64(len(n.value.data)), "no bytes of the failed value left")
}
