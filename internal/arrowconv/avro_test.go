package arrowconv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/avro"

	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// avroAllSchema has a field of every type the Avro fast path takes, and one
// (gone) the table has no column for.
const avroAllSchema = `{"type":"record","name":"Row","namespace":"t","fields":[
 {"name":"b","type":"boolean"},
 {"name":"i","type":"int"},
 {"name":"l","type":"long"},
 {"name":"small","type":"int"},
 {"name":"il","type":"int"},
 {"name":"f","type":"float"},
 {"name":"d","type":"double"},
 {"name":"df","type":"double"},
 {"name":"s","type":"string"},
 {"name":"by","type":"bytes"},
 {"name":"fx","type":{"type":"fixed","name":"F8","size":8}},
 {"name":"e","type":{"type":"enum","name":"Color","symbols":["RED","GREEN","BLUE"]}},
 {"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":18,"scale":4}},
 {"name":"decBig","type":{"type":"fixed","name":"D16","size":16,"logicalType":"decimal","precision":38,"scale":10}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"tsms","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"tsus","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"tsns","type":{"type":"long","logicalType":"timestamp-nanos"}},
 {"name":"lts","type":{"type":"long","logicalType":"local-timestamp-micros"}},
 {"name":"uid","type":{"type":"string","logicalType":"uuid"}},
 {"name":"fuid","type":{"type":"fixed","name":"U16","size":16,"logicalType":"uuid"}},
 {"name":"optS","type":["null","string"]},
 {"name":"optL","type":["long","null"]},
 {"name":"addr","type":{"type":"record","name":"Addr","fields":[
   {"name":"street","type":"string"},{"name":"zip","type":["null","int"]}]}},
 {"name":"optAddr","type":["null","Addr"]},
 {"name":"tags","type":{"type":"array","items":"string"}},
 {"name":"items","type":{"type":"array","items":{"type":"record","name":"Item","fields":[
   {"name":"sku","type":"string"},{"name":"qty","type":"int"}]}}},
 {"name":"attrs","type":{"type":"map","values":"long"}},
 {"name":"optMap","type":["null",{"type":"map","values":["null","string"]}]},
 {"name":"MixedCase","type":"int"},
 {"name":"gone","type":["null","string"]}
]}`

// avroAllDefs is the table for avroAllSchema: every field but gone, in
// another order, and two columns the schema lacks.
const avroAllDefs = "_zb_emit_ts TIMESTAMP, note STRING, " +
	"l BIGINT NOT NULL, b BOOLEAN NOT NULL, i INT NOT NULL, small SMALLINT NOT NULL, il BIGINT, f FLOAT, d DOUBLE, df FLOAT, " +
	"s STRING, by BINARY, fx BINARY, e STRING, dec DECIMAL(18,4), decBig DECIMAL(38,10), day DATE, " +
	"tsms TIMESTAMP, tsus TIMESTAMP, tsns TIMESTAMP, lts TIMESTAMP_NTZ, uid STRING, fuid STRING, " +
	"optS STRING, optL BIGINT, addr STRUCT<street: STRING NOT NULL, zip: INT>, " +
	"optAddr STRUCT<street: STRING NOT NULL, zip: INT>, tags ARRAY<STRING>, " +
	"items ARRAY<STRUCT<sku: STRING, qty: INT>>, attrs MAP<STRING, BIGINT>, optMap MAP<STRING, STRING>, mixedcase INT"

// avroEnc appends Avro binary encodings.
type avroEnc []byte

func (e avroEnc) long(v int64) avroEnc {
	return binary.AppendUvarint(e, uint64(v<<1)^uint64(v>>63))
}
func (e avroEnc) bytes(b []byte) avroEnc { return append(e.long(int64(len(b))), b...) }
func (e avroEnc) str(s string) avroEnc   { return e.bytes([]byte(s)) }

// avroGen makes random values of avroAllSchema; bad makes about one value
// in twenty out of its column's range (a row error on both paths).
type avroGen struct {
	r   *rand.Rand
	bad bool
}

func (g *avroGen) pick(n int) int { return g.r.IntN(n) }
func (g *avroGen) oops() bool     { return g.bad && g.r.IntN(20) == 0 }

func (g *avroGen) text() string {
	words := []string{"", "a", "héllo", "日本", "x\"y\\z", "tab\tnew\nline", "emoji 🎉", "plain-text-value"}
	return words[g.pick(len(words))] + fmt.Sprint(g.pick(1000))
}

func (g *avroGen) record() []byte {
	var e avroEnc
	e = append(e, byte(g.pick(2)))         // b
	e = e.long(int64(int32(g.r.Uint32()))) // i
	e = e.long(int64(g.r.Uint64()))        // l
	small := int64(g.pick(65536) - 32768)  // small
	if g.oops() {
		small = 40000
	}
	e = e.long(small)
	e = e.long(int64(int32(g.r.Uint32())))                                           // il
	e = binary.LittleEndian.AppendUint32(e, math.Float32bits(g.r.Float32()*1e6-5e5)) // f
	d := g.r.NormFloat64() * 1e9
	if g.pick(10) == 0 {
		d = []float64{math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), math.SmallestNonzeroFloat64}[g.pick(5)]
	}
	e = binary.LittleEndian.AppendUint64(e, math.Float64bits(d)) // d
	df := g.r.NormFloat64() * 1e3
	if g.oops() {
		df = 1e300
	}
	e = binary.LittleEndian.AppendUint64(e, math.Float64bits(df)) // df
	e = e.str(g.text())                                           // s
	by := make([]byte, g.pick(12))
	for k := range by {
		by[k] = byte(g.r.Uint32())
	}
	e = e.bytes(by) // by
	for range 8 {   // fx
		e = append(e, byte(g.r.Uint32()))
	}
	e = e.long(int64(g.pick(3))) // e
	// dec: up to 8 bytes of two's complement, within 18 digits.
	unscaled := g.r.Int64N(1e18) - 5e17
	if g.oops() {
		unscaled = math.MaxInt64
	}
	n := 1 + g.pick(8)
	if unscaled >= 1<<(8*n-1)-1 || unscaled < -(1<<(8*n-1)) {
		n = 8
	}
	db := make([]byte, 8)
	binary.BigEndian.PutUint64(db, uint64(unscaled))
	e = e.bytes(db[8-n:])
	// decBig: 16 bytes, within 38 digits (an int64 high part times 2^64 is
	// at most about 1.7e38: keep the high part small).
	hi := g.r.Int64N(1<<40) - 1<<39
	if g.oops() {
		hi = math.MaxInt64
	}
	e = binary.BigEndian.AppendUint64(e, uint64(hi))
	e = binary.BigEndian.AppendUint64(e, g.r.Uint64())
	day := g.r.Int64N(maxDays-minDays+1) + minDays // day
	if g.oops() {
		day = maxDays + 1
	}
	e = e.long(day)
	ms := g.r.Int64N(4e12) - 1e12 // tsms
	if g.oops() {
		ms = math.MaxInt64
	}
	e = e.long(ms)
	us := g.r.Int64N(4e15) - 1e15 // tsus
	if g.oops() {
		us = maxMicros + 1
	}
	e = e.long(us)
	e = e.long(g.r.Int64N(math.MaxInt64) - math.MaxInt64/2) // tsns
	e = e.long(g.r.Int64N(4e15) - 1e15)                     // lts
	uid := fmt.Sprintf("%08x-0000-4000-8000-%012x", g.r.Uint32(), g.r.Uint64()&(1<<48-1))
	if g.pick(8) == 0 {
		uid = g.text() // not a uuid: a string all the same
	}
	e = e.str(uid) // uid
	for range 16 { // fuid
		e = append(e, byte(g.r.Uint32()))
	}
	if g.pick(3) == 0 { // optS
		e = e.long(0)
	} else {
		e = e.long(1).str(g.text())
	}
	if g.pick(3) == 0 { // optL
		e = e.long(1)
	} else {
		e = e.long(0).long(int64(g.r.Uint64()))
	}
	street := g.text()
	e = e.str(street) // addr
	if g.pick(2) == 0 {
		e = e.long(0)
	} else {
		e = e.long(1).long(int64(g.pick(99999)))
	}
	if g.pick(2) == 0 { // optAddr
		e = e.long(0)
	} else {
		e = e.long(1).str(g.text()).long(0)
	}
	tags := g.pick(4) // tags, sometimes in a sized (negative-count) block
	if tags > 0 {
		if g.pick(2) == 0 {
			var blk avroEnc
			for range tags {
				blk = blk.str(g.text())
			}
			e = e.long(-int64(tags)).long(int64(len(blk)))
			e = append(e, blk...)
		} else {
			e = e.long(int64(tags))
			for range tags {
				e = e.str(g.text())
			}
		}
	}
	e = e.long(0)
	items := g.pick(3) // items
	if items > 0 {
		e = e.long(int64(items))
		for range items {
			e = e.str(g.text()).long(int64(g.pick(100)))
		}
	}
	e = e.long(0)
	keys := []string{"b", "a", "c", "a", "zz", "é"} // attrs: unsorted, with a duplicate, or in order
	if g.pick(2) == 0 {
		keys = []string{"a", "b", "c", "zz", "é", "éé"}
	}
	entries := g.pick(len(keys) + 1)
	if entries > 0 {
		e = e.long(int64(entries))
		for k := range entries {
			e = e.str(keys[k]).long(int64(g.r.Uint64()))
		}
	}
	e = e.long(0)
	switch g.pick(3) { // optMap
	case 0:
		e = e.long(0)
	case 1:
		e = e.long(1).long(0)
	default:
		e = e.long(1).long(2).str("k2").long(1).str(g.text()).str("k1").long(0).long(0)
	}
	e = e.long(int64(g.pick(1000))) // MixedCase
	if g.pick(4) == 0 && g.bad {    // gone: a value fails its row (no column)
		e = e.long(1).str("x")
	} else {
		e = e.long(0)
	}
	return e
}

// avroSlowPath is the general path: the registry's Avro codec (as the
// schema_registry_decode processor with preserve_logical_types and
// raw_unions runs it) and ConvertStructured.
type avroSlowPath struct{ codec registry.Codec }

func newAvroSlowPath(t testing.TB, schema string) avroSlowPath {
	t.Helper()
	codec, err := registry.NewCodec(registry.Schema{ID: 7, Format: registry.Avro, Text: schema},
		registry.Options{Avro: registry.AvroOptions{PreserveLogicalTypes: true, RawUnions: true}})
	require.NoError(t, err)
	return avroSlowPath{codec}
}

func (p avroSlowPath) decode(body []byte) (any, error) {
	v, _, err := p.codec.Decode(body)
	return v, err
}

func (p avroSlowPath) convert(c *Converter, bodies [][]byte) (Result, error) {
	rows := make([]StructuredRow, len(bodies))
	for i, b := range bodies {
		v, err := p.decode(b)
		rows[i] = decodedAvro{v: v, err: err}
	}
	res, err := c.ConvertStructured(rows)
	// A value the codec cannot decode fails with the codec's error (the
	// processor would fail the message so), not as a structured message
	// that could not be read.
	for k, re := range res.RowErrors {
		if derr := rows[re.Index].(decodedAvro).err; derr != nil {
			res.RowErrors[k].Err = kerr(ErrInvalidValue, "%v", derr)
		}
	}
	return res, err
}

// decodedAvro is a message the codec decoded, or failed to.
type decodedAvro struct {
	v   any
	err error
}

func (r decodedAvro) AsBytes() ([]byte, error)   { return nil, errors.New("structured only") }
func (r decodedAvro) HasStructured() bool        { return true }
func (r decodedAvro) AsStructured() (any, error) { return r.v, r.err }

func mustAvroPlan(t testing.TB, c *Converter, schema string) *AvroPlan {
	t.Helper()
	s, err := avro.Parse(schema)
	require.NoError(t, err)
	p, err := c.CompileAvro(s.Root())
	require.NoError(t, err)
	return p
}

// assertSameResult checks that two conversions produced equal records, row
// for row and byte for byte, the same source indexes, row errors and
// reconciliation counts.
func assertSameResult(t testing.TB, want, got Result) {
	t.Helper()
	require.Equal(t, want.Record.Schema(), got.Record.Schema())
	require.Equal(t, want.Record.NumRows(), got.Record.NumRows())
	for k := range int(want.Record.NumCols()) {
		w, g := want.Record.Column(k), got.Record.Column(k)
		if !array.Equal(w, g) {
			t.Fatalf("column %s differs:\nwant %v\ngot  %v", want.Record.Schema().Field(k).Name, w, g)
		}
		require.Equal(t, w.NullN(), g.NullN(), want.Record.Schema().Field(k).Name)
	}
	assert.True(t, array.RecordEqual(want.Record, got.Record))
	assert.Equal(t, want.SourceIndex, got.SourceIndex)
	assert.Equal(t, want.Reconciled, got.Reconciled)
	require.Len(t, got.RowErrors, len(want.RowErrors))
	for k := range want.RowErrors {
		assert.Equal(t, want.RowErrors[k].Index, got.RowErrors[k].Index)
		assert.Equal(t, want.RowErrors[k].Column, got.RowErrors[k].Column)
		assert.Equal(t, want.RowErrors[k].Error(), got.RowErrors[k].Error())
	}
}

// The fast path gives the record the codec and ConvertStructured give, for
// generated records of every supported type, with and without bad values.
func TestConvertAvroEqualsStructuredPath(t *testing.T) {
	c := mustConverter(t, avroAllDefs, Options{NTZFromZoned: true})
	p := mustAvroPlan(t, c, avroAllSchema)
	slow := newAvroSlowPath(t, avroAllSchema)
	for seed, bad := range map[uint64]bool{1: false, 2: true, 3: false, 4: true} {
		g := &avroGen{r: rand.New(rand.NewPCG(seed, 99)), bad: bad}
		bodies := make([][]byte, 500)
		for i := range bodies {
			bodies[i] = g.record()
		}
		want, err := slow.convert(c, bodies)
		require.NoError(t, err)
		got, err := c.ConvertAvro(p, bodies, slow.decode)
		require.NoError(t, err)
		if bad {
			require.NotEmpty(t, want.RowErrors, "seed %d makes bad values", seed)
		} else {
			require.Empty(t, want.RowErrors)
		}
		assertSameResult(t, want, got)
		// Without redo, the same rows land and the same rows fail, each
		// error naming its own row and column.
		alone, err := c.ConvertAvro(p, bodies, nil)
		require.NoError(t, err)
		assert.True(t, array.RecordEqual(want.Record, alone.Record))
		assert.Equal(t, want.SourceIndex, alone.SourceIndex)
		require.Len(t, alone.RowErrors, len(want.RowErrors))
		for k := range want.RowErrors {
			assert.Equal(t, want.RowErrors[k].Index, alone.RowErrors[k].Index)
			assert.Equal(t, want.RowErrors[k].Column, alone.RowErrors[k].Column, alone.RowErrors[k].Error())
		}
		want.Record.Release()
		got.Record.Release()
		alone.Record.Release()
	}
}

// Bad bytes fail only their own row, with an error naming the message and
// the column where the bytes ran out or went wrong.
func TestConvertAvroBadBytesFailOnlyTheirRow(t *testing.T) {
	c := mustConverter(t, avroAllDefs, Options{NTZFromZoned: true})
	p := mustAvroPlan(t, c, avroAllSchema)
	slow := newAvroSlowPath(t, avroAllSchema)
	g := &avroGen{r: rand.New(rand.NewPCG(5, 5))}
	bodies := make([][]byte, 6)
	for i := range bodies {
		bodies[i] = g.record()
	}
	good := bodies[0]
	bodies[1] = good[:len(good)/2]                                   // truncated
	bodies[3] = append(append([]byte{}, good...), 0)                 // a byte left over
	bodies[4] = append([]byte{1}, bytes.Repeat([]byte{0xff}, 11)...) // a varint past 64 bits
	bodies[5] = nil                                                  // empty

	for _, redo := range []func([]byte) (any, error){nil, slow.decode} {
		res, err := c.ConvertAvro(p, bodies, redo)
		require.NoError(t, err)
		assert.Equal(t, []int{0, 2}, res.SourceIndex)
		require.Len(t, res.RowErrors, 4)
		for k, idx := range []int{1, 3, 4, 5} {
			re := res.RowErrors[k]
			assert.Equal(t, idx, re.Index)
			assert.ErrorIs(t, re, ErrInvalidValue)
			assert.Contains(t, re.Error(), fmt.Sprintf("message %d", idx))
		}
		if redo == nil {
			assert.NotEmpty(t, res.RowErrors[0].Column, "a truncated value names the column it ran out in")
			assert.Equal(t, "i", res.RowErrors[2].Column)
			assert.Contains(t, res.RowErrors[1].Error(), "1 bytes left after the Avro value")
		}
		res.Record.Release()
	}
}

// What the fast path does not do is refused at compile time, naming the
// field, so that the caller takes the general path for that schema.
func TestCompileAvroRefusesWhatItDoesNotPlan(t *testing.T) {
	for _, tc := range []struct {
		name, defs, fields, field string
	}{
		{"two non-null branches", "a STRING", `{"name":"a","type":["long","string"]}`, "a"},
		{"a NOT NULL column the schema lacks", "a STRING, req BIGINT NOT NULL", `{"name":"a","type":"string"}`, "req"},
		{"a field the table lacks", "a STRING", `{"name":"a","type":"string"},{"name":"x","type":"long"}`, "x"},
		{"time of day", "t BIGINT", `{"name":"t","type":{"type":"int","logicalType":"time-millis"}}`, "t"},
		{"a long into STRING", "a STRING", `{"name":"a","type":"long"}`, "a"},
		{"a VARIANT column", "a VARIANT", `{"name":"a","type":"string"}`, "a"},
		{"local time into NTZ without the reconcile", "a TIMESTAMP_NTZ", `{"name":"a","type":{"type":"long","logicalType":"local-timestamp-micros"}}`, "a"},
		{"a nested field the struct lacks", "s STRUCT<a: INT>", `{"name":"s","type":{"type":"record","name":"S","fields":[{"name":"a","type":"int"},{"name":"b","type":"int"}]}}`, "s.b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustConverter(t, tc.defs, Options{})
			s, err := avro.Parse(`{"type":"record","name":"R","fields":[` + tc.fields + `]}`)
			require.NoError(t, err)
			_, err = c.CompileAvro(s.Root())
			require.ErrorIs(t, err, ErrAvroNotPlanned)
			assert.Contains(t, err.Error(), tc.field)
		})
	}
	c := mustConverter(t, "a STRING", Options{})
	s, err := avro.Parse(`"string"`)
	require.NoError(t, err)
	_, err = c.CompileAvro(s.Root())
	assert.ErrorIs(t, err, ErrAvroNotPlanned)
}

// Concurrent batches on one plan each bind it to their own state and give
// the same record.
func TestConvertAvroConcurrent(t *testing.T) {
	c := mustConverter(t, avroAllDefs, Options{NTZFromZoned: true})
	p := mustAvroPlan(t, c, avroAllSchema)
	g := &avroGen{r: rand.New(rand.NewPCG(8, 8))}
	bodies := make([][]byte, 200)
	for i := range bodies {
		bodies[i] = g.record()
	}
	want, err := newAvroSlowPath(t, avroAllSchema).convert(c, bodies)
	require.NoError(t, err)
	defer want.Record.Release()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	equal := make([]bool, 4)
	for k := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				res, err := c.ConvertAvro(p, bodies, nil)
				if err != nil {
					errs[k] = err
					return
				}
				equal[k] = array.RecordEqual(want.Record, res.Record) && len(res.RowErrors) == 0
				res.Record.Release()
				if !equal[k] {
					return
				}
			}
		}()
	}
	wg.Wait()
	for k := range 4 {
		require.NoError(t, errs[k])
		assert.True(t, equal[k], "goroutine %d", k)
	}
}

// avroCrossSchema lands values in columns of another width, unit or scale
// than their own.
const avroCrossSchema = `{"type":"record","name":"X","fields":[
 {"name":"tiny","type":"int"},
 {"name":"fl","type":"float"},
 {"name":"il","type":"int"},
 {"name":"ll","type":"long"},
 {"name":"lt","type":{"type":"long","logicalType":"local-timestamp-millis"}},
 {"name":"tsn","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"dur","type":{"type":"fixed","name":"Dur","size":12,"logicalType":"duration"}},
 {"name":"up","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
 {"name":"down","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":4}},
 {"name":"nums","type":{"type":"array","items":["null","long"]}},
 {"name":"deep","type":{"type":"record","name":"Deep","fields":[
   {"name":"rows","type":{"type":"array","items":{"type":"record","name":"R","fields":[
     {"name":"at","type":["null",{"type":"int","logicalType":"date"}]},
     {"name":"m","type":{"type":"map","values":"boolean"}}]}}}]}}
]}`

const avroCrossDefs = "tiny TINYINT, fl DOUBLE, il DOUBLE, ll FLOAT, lt TIMESTAMP, tsn TIMESTAMP_NTZ, dur BINARY, " +
	"up DECIMAL(12,4), down DECIMAL(10,2), nums ARRAY<BIGINT>, deep STRUCT<rows: ARRAY<STRUCT<at: DATE, m: MAP<STRING, BOOLEAN>>>>"

func (g *avroGen) crossRecord() []byte {
	var e avroEnc
	e = e.long(int64(g.pick(300) - 150)) // tiny: out of range now and then
	e = binary.LittleEndian.AppendUint32(e, math.Float32bits(float32(g.r.NormFloat64()*1e3)))
	e = e.long(int64(int32(g.r.Uint32())))
	e = e.long(int64(g.r.Uint64()))
	e = e.long(g.r.Int64N(4e12) - 1e12)
	e = e.long(g.r.Int64N(4e15) - 1e15)
	for range 12 {
		e = append(e, byte(g.r.Uint32()))
	}
	e = e.bytes(twosComplement(big.NewInt(g.r.Int64N(1e10))))
	down := g.r.Int64N(1e8)
	if g.pick(2) == 0 {
		down = down / 100 * 100 // no digits past the column's scale
	}
	e = e.bytes(twosComplement(big.NewInt(down)))
	if n := g.pick(4); n > 0 {
		e = e.long(int64(n))
		for range n {
			if g.pick(3) == 0 {
				e = e.long(0)
			} else {
				e = e.long(1).long(int64(g.r.Uint64()))
			}
		}
	}
	e = e.long(0)
	if n := g.pick(3); n > 0 {
		e = e.long(int64(n))
		for range n {
			if g.pick(2) == 0 {
				e = e.long(0)
			} else {
				e = e.long(1).long(g.r.Int64N(20000))
			}
			keys := []string{"y", "x", "x"}
			if g.pick(2) == 0 {
				keys = []string{"a", "b", "c"}
			}
			k := g.pick(4)
			if k > 0 {
				e = e.long(int64(k))
				for j := range k {
					e = append(e.str(keys[j%len(keys)]), byte(g.pick(2)))
				}
			}
			e = e.long(0)
		}
	}
	return e.long(0)
}

// Values land the same on both paths when the column differs from the
// value's own type: narrower or wider, another unit, another scale.
func TestConvertAvroCrossTypesEqualStructuredPath(t *testing.T) {
	c := mustConverter(t, avroCrossDefs, Options{NTZFromZoned: true})
	p := mustAvroPlan(t, c, avroCrossSchema)
	slow := newAvroSlowPath(t, avroCrossSchema)
	g := &avroGen{r: rand.New(rand.NewPCG(17, 17))}
	bodies := make([][]byte, 400)
	for i := range bodies {
		bodies[i] = g.crossRecord()
	}
	want, err := slow.convert(c, bodies)
	require.NoError(t, err)
	defer want.Record.Release()
	require.NotEmpty(t, want.RowErrors, "some tiny values and scales do not fit")
	require.NotEmpty(t, want.SourceIndex)
	for _, redo := range []func([]byte) (any, error){slow.decode, nil} {
		got, err := c.ConvertAvro(p, bodies, redo)
		require.NoError(t, err)
		if redo != nil {
			assertSameResult(t, want, got)
		} else {
			assert.True(t, array.RecordEqual(want.Record, got.Record))
			require.Len(t, got.RowErrors, len(want.RowErrors))
			for k := range want.RowErrors {
				assert.Equal(t, want.RowErrors[k].Error(), got.RowErrors[k].Error())
			}
		}
		got.Record.Release()
	}
}

// Each reading fault fails its row alone, naming the column and the fault;
// the general path refuses the same values.
func TestConvertAvroReaderFaults(t *testing.T) {
	const schema = `{"type":"record","name":"F","fields":[
	 {"name":"u","type":["null","long"]},
	 {"name":"u3","type":["long"]},
	 {"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}},
	 {"name":"s","type":"string"},
	 {"name":"a","type":{"type":"array","items":"long"}}]}`
	c := mustConverter(t, "u BIGINT, u3 BIGINT, e STRING, s STRING, a ARRAY<BIGINT>", Options{})
	p := mustAvroPlan(t, c, schema)
	slow := newAvroSlowPath(t, schema)
	good := avroEnc{}.long(1).long(5).long(0).long(6).long(1).str("x").long(1).long(9).long(0)
	pre := func() avroEnc { return avroEnc{}.long(0).long(0).long(6) } // u null, u3 6
	cases := []struct {
		body         avroEnc
		column, want string
	}{
		{avroEnc{}.long(4).long(5), "u", "union branch 4 out of range"},
		{avroEnc{}.long(0).long(3), "u3", "union branch 3 out of range (the union has 1)"},
		{pre().long(2), "e", "enum index 2 out of range"},
		{pre().long(0).long(-1), "s", "negative Avro length"},
		{pre().long(0).str("\xff"), "s", "invalid UTF-8"},
		{pre().long(0).str("x").long(-1).long(50), "a", "block size 50"},
		{pre().long(0).str("x").long(1000), "a", "truncated"},
	}
	bodies := [][]byte{good}
	for _, tc := range cases {
		bodies = append(bodies, tc.body)
	}
	res, err := c.ConvertAvro(p, bodies, nil)
	require.NoError(t, err)
	defer res.Record.Release()
	assert.Equal(t, []int{0}, res.SourceIndex)
	require.Len(t, res.RowErrors, len(cases))
	for k, tc := range cases {
		re := res.RowErrors[k]
		assert.Equal(t, k+1, re.Index)
		assert.Equal(t, tc.column, re.Column, re.Error())
		assert.ErrorContains(t, re, tc.want)
	}
	want, err := slow.convert(c, bodies)
	require.NoError(t, err)
	defer want.Record.Release()
	assert.Equal(t, []int{0}, want.SourceIndex, "the general path refuses the same values")
}
