package zerobusreplay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// Random Arrow types and rows for the differential test and the benchmark
// of the nested JSON writer.

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// fillOptions says what random values look like.
type fillOptions struct {
	nullPct  int  // chance in percent of a null at every level
	maxLen   int  // most entries in a list or map
	specials bool // NaN/Inf floats, out-of-range times, duplicate map keys
}

// scalarTypes are the leaf types the input writes.
func scalarTypes() []arrow.DataType {
	return []arrow.DataType{
		arrow.FixedWidthTypes.Boolean,
		arrow.PrimitiveTypes.Int8, arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64,
		arrow.PrimitiveTypes.Uint8, arrow.PrimitiveTypes.Uint16, arrow.PrimitiveTypes.Uint32, arrow.PrimitiveTypes.Uint64,
		arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float64,
		arrow.BinaryTypes.String, arrow.BinaryTypes.LargeString, arrow.BinaryTypes.StringView,
		arrow.BinaryTypes.Binary, arrow.BinaryTypes.LargeBinary, arrow.BinaryTypes.BinaryView,
		&arrow.FixedSizeBinaryType{ByteWidth: 3},
		&arrow.Decimal128Type{Precision: 10, Scale: 2}, &arrow.Decimal128Type{Precision: 38, Scale: 0},
		&arrow.Decimal128Type{Precision: 38, Scale: 10}, &arrow.Decimal128Type{Precision: 38, Scale: 38},
		&arrow.Decimal128Type{Precision: 10, Scale: -3},
		&arrow.Decimal256Type{Precision: 40, Scale: 5}, &arrow.Decimal256Type{Precision: 76, Scale: 0},
		arrow.FixedWidthTypes.Date32, arrow.FixedWidthTypes.Date64,
		&arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, &arrow.TimestampType{Unit: arrow.Microsecond},
		&arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "Europe/Paris"}, &arrow.TimestampType{Unit: arrow.Second},
		&arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"},
		typemap.VariantArrowType(),
	}
}

var fieldNames = []string{"a", "b", "Z", "id", "é", "quote\"", "back\\slash", "", "tab\t", "aa", "a b", "\u2028", "日本"}

// randomType is a random type nested at most depth levels.
func randomType(r *rand.Rand, depth int) arrow.DataType {
	if depth == 0 || r.IntN(3) == 0 {
		ts := scalarTypes()
		return ts[r.IntN(len(ts))]
	}
	elem := func() arrow.DataType { return randomType(r, depth-1) }
	switch r.IntN(8) {
	case 0, 1:
		n := r.IntN(5)
		fs := make([]arrow.Field, 0, n)
		used := map[string]bool{}
		for len(fs) < n {
			name := fieldNames[r.IntN(len(fieldNames))]
			if used[name] {
				continue
			}
			used[name] = true
			fs = append(fs, arrow.Field{Name: name, Type: elem(), Nullable: true})
		}
		return arrow.StructOf(fs...)
	case 2:
		return arrow.MapOf(arrow.BinaryTypes.String, elem())
	case 3:
		keys := []arrow.DataType{arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.LargeString, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}}
		return arrow.MapOf(keys[r.IntN(len(keys))], elem())
	case 4:
		return arrow.ListOf(elem())
	case 5:
		return arrow.LargeListOf(elem())
	case 6:
		return arrow.FixedSizeListOf(int32(1+r.IntN(3)), elem())
	default:
		return arrow.ListViewOf(elem())
	}
}

// randomSchema has n body columns of random types.
func randomSchema(r *rand.Rand, n, depth int) *arrow.Schema {
	fs := make([]arrow.Field, n)
	for i := range fs {
		fs[i] = arrow.Field{Name: "c" + strconv.Itoa(n-i), Type: randomType(r, depth), Nullable: true}
	}
	return arrow.NewSchema(fs, nil)
}

// randomRecord is n random rows of schema.
func randomRecord(r *rand.Rand, schema *arrow.Schema, n int, opt fillOptions) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.NewGoAllocator(), schema)
	defer b.Release()
	for f, field := range schema.Fields() {
		for range n {
			fill(r, b.Field(f), field.Type, opt, true)
		}
	}
	return b.NewRecordBatch()
}

var (
	floatPool = []float64{0, math.Copysign(0, -1), 0.1, -1.5, 1e-7, 1e21, 123456789.125, math.MaxFloat64, math.SmallestNonzeroFloat64, 1e20, 3e-6, float64(math.MaxFloat32)}
	strPool   = []string{"", "x", "quote \" back \\ tab \t nl \n", "<&>", "\u2028\u2029", "é日本", "\x00\x1f", "bad \xff utf8", "long string with spaces and more text"}
)

func randString(r *rand.Rand) string {
	if r.IntN(3) == 0 {
		return strPool[r.IntN(len(strPool))]
	}
	var sb strings.Builder
	for range r.IntN(12) {
		sb.WriteByte(byte(32 + r.IntN(95)))
	}
	return sb.String()
}

func randBytes(r *rand.Rand, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(r.IntN(256))
	}
	return out
}

func randInt(r *rand.Rand, bits int) int64 {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return -1 << (bits - 1)
	case 2:
		return 1<<(bits-1) - 1
	}
	return r.Int64() >> (64 - bits)
}

func randFloat(r *rand.Rand, opt fillOptions) float64 {
	if opt.specials && r.IntN(200) == 0 {
		return []float64{math.NaN(), math.Inf(1), math.Inf(-1)}[r.IntN(3)]
	}
	if r.IntN(2) == 0 {
		f := floatPool[r.IntN(len(floatPool))]
		if r.IntN(2) == 0 {
			f = -f
		}
		return f
	}
	return (r.Float64() - 0.5) * math.Pow(10, float64(r.IntN(40)-20))
}

// randVariantJSON is a random JSON document for a VARIANT value.
func randVariantJSON(r *rand.Rand, depth int) string {
	switch k := r.IntN(9); {
	case depth > 0 && k == 0:
		var parts []string
		used := map[string]bool{}
		for range r.IntN(4) {
			if k := fieldNames[r.IntN(len(fieldNames))]; !used[k] {
				used[k] = true
				parts = append(parts, strconv.Quote(k)+":"+randVariantJSON(r, depth-1))
			}
		}
		return "{" + strings.Join(parts, ",") + "}"
	case depth > 0 && k == 1:
		parts := make([]string, r.IntN(4))
		for i := range parts {
			parts[i] = randVariantJSON(r, depth-1)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case k == 2:
		return "null"
	case k == 3:
		return "true"
	case k == 4:
		return strconv.FormatInt(randInt(r, 64), 10)
	case k == 5:
		return []string{"1.50", "-0.001", "12345678901234567890.5", "1e300", "2.5e-8", "0.0"}[r.IntN(6)]
	case k == 6:
		return strconv.FormatFloat(randFloat(r, fillOptions{}), 'g', -1, 64)
	}
	return strconv.Quote(strPool[r.IntN(4)])
}

// fill appends one random value of type dt to b, null with opt.nullPct
// percent chance when nullable.
func fill(r *rand.Rand, b array.Builder, dt arrow.DataType, opt fillOptions, nullable bool) {
	if nullable && r.IntN(100) < opt.nullPct {
		b.AppendNull()
		return
	}
	switch bb := b.(type) {
	case *array.BooleanBuilder:
		bb.Append(r.IntN(2) == 0)
	case *array.Int8Builder:
		bb.Append(int8(randInt(r, 8)))
	case *array.Int16Builder:
		bb.Append(int16(randInt(r, 16)))
	case *array.Int32Builder:
		bb.Append(int32(randInt(r, 32)))
	case *array.Int64Builder:
		bb.Append(randInt(r, 64))
	case *array.Uint8Builder:
		bb.Append(uint8(randInt(r, 8)))
	case *array.Uint16Builder:
		bb.Append(uint16(randInt(r, 16)))
	case *array.Uint32Builder:
		bb.Append(uint32(randInt(r, 32)))
	case *array.Uint64Builder:
		bb.Append(uint64(randInt(r, 64)))
	case *array.Float32Builder:
		f := randFloat(r, opt)
		if math.Abs(f) > math.MaxFloat32 && !math.IsInf(f, 0) {
			f = math.Copysign(math.MaxFloat32, f) // keep Inf for opt.specials only
		}
		bb.Append(float32(f))
	case *array.Float64Builder:
		bb.Append(randFloat(r, opt))
	case *array.StringBuilder:
		bb.Append(randString(r))
	case *array.LargeStringBuilder:
		bb.Append(randString(r))
	case *array.StringViewBuilder:
		bb.Append(randString(r))
	case *array.BinaryBuilder:
		bb.Append(randBytes(r, r.IntN(20)))
	case *array.BinaryViewBuilder:
		bb.Append(randBytes(r, r.IntN(20)))
	case *array.FixedSizeBinaryBuilder:
		bb.Append(randBytes(r, dt.(*arrow.FixedSizeBinaryType).ByteWidth))
	case *array.Decimal128Builder:
		v := decimal128.FromI64(randInt(r, 64))
		switch r.IntN(6) {
		case 0, 1:
			v = decimal128.New(int64(r.IntN(1<<40))-1<<39, r.Uint64())
		case 2: // 38 digits and more, up to the 128-bit extremes
			v = []decimal128.Num{decimal128.MaxDecimal128, decimal128.MaxDecimal128.Negate(), decimal128.New(math.MaxInt64, math.MaxUint64), decimal128.New(math.MinInt64, 0)}[r.IntN(4)]
		}
		bb.Append(v)
	case *array.Decimal256Builder:
		v := decimal256.FromI64(randInt(r, 64))
		if r.IntN(3) == 0 {
			v = decimal256.New(uint64(int64(r.IntN(1<<40))-1<<39), r.Uint64(), r.Uint64(), r.Uint64())
		}
		bb.Append(v)
	case *array.Date32Builder:
		bb.Append(arrow.Date32(r.IntN(2_000_000) - 719_162))
	case *array.Date64Builder:
		bb.Append(arrow.Date64(int64(r.IntN(200_000)-100_000) * 86_400_000))
	case *array.TimestampBuilder:
		tt := dt.(*arrow.TimestampType)
		sec := r.Int64N(253402300799+62135596800) - 62135596800 // years 1..9999
		if opt.specials && r.IntN(50) == 0 {
			sec = []int64{-62135596801 - 86400*400, 253402300800 + 86400}[r.IntN(2)] // years -1, 10000
		}
		mul := map[arrow.TimeUnit]int64{arrow.Second: 1, arrow.Millisecond: 1e3, arrow.Microsecond: 1e6, arrow.Nanosecond: 1e9}[tt.Unit]
		if tt.Unit == arrow.Nanosecond {
			sec %= 9_000_000_000 // int64 nanoseconds reach only years 1678..2262
		}
		bb.Append(arrow.Timestamp(sec*mul + r.Int64N(mul)))
	case *array.StructBuilder:
		st := dt.(*arrow.StructType)
		if isVariant(st) {
			if err := appendVariantRow(bb, randVariantJSON(r, 3)); err != nil {
				panic(err)
			}
			return
		}
		bb.Append(true)
		for f := range st.NumFields() {
			fill(r, bb.FieldBuilder(f), st.Field(f).Type, opt, true)
		}
	case *array.MapBuilder:
		mt := dt.(*arrow.MapType)
		bb.Append(true)
		n := r.IntN(opt.maxLen + 1)
		seen := map[string]bool{}
		for range n {
			if _, ok := bb.KeyBuilder().(*array.StringBuilder); ok {
				k := randString(r)
				if opt.specials {
					k = fieldNames[r.IntN(4)] // duplicates
				} else if seen[k] {
					k += strconv.Itoa(len(seen))
				}
				seen[k] = true
				bb.KeyBuilder().(*array.StringBuilder).Append(k)
			} else {
				fill(r, bb.KeyBuilder(), mt.KeyType(), opt, false)
			}
			fill(r, bb.ItemBuilder(), mt.ItemType(), opt, true)
		}
	case *array.ListBuilder:
		bb.Append(true)
		for range r.IntN(opt.maxLen + 1) {
			fill(r, bb.ValueBuilder(), dt.(arrow.ListLikeType).Elem(), opt, true)
		}
	case *array.LargeListBuilder:
		bb.Append(true)
		for range r.IntN(opt.maxLen + 1) {
			fill(r, bb.ValueBuilder(), dt.(arrow.ListLikeType).Elem(), opt, true)
		}
	case *array.FixedSizeListBuilder:
		bb.Append(true)
		for range dt.(*arrow.FixedSizeListType).Len() {
			fill(r, bb.ValueBuilder(), dt.(arrow.ListLikeType).Elem(), opt, true)
		}
	case *array.ListViewBuilder:
		n := r.IntN(opt.maxLen + 1)
		bb.AppendWithSize(true, n)
		for range n {
			fill(r, bb.ValueBuilder(), dt.(arrow.ListLikeType).Elem(), opt, true)
		}
	default:
		panic(fmt.Sprintf("fill: no generator for %T (%s)", b, dt))
	}
}
