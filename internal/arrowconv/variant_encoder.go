package arrowconv

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/apache/arrow-go/v18/parquet/variant"
)

// variantEncoder writes the Parquet variant binary encoding (a metadata
// dictionary and a value) of one value at a time, byte for byte as arrow-go's
// parquet/variant Builder does (v18.8.0, duplicate keys disallowed), but
// without allocating per value: the value is appended straight onto a caller's
// buffer (the column's data), and the dictionary, key bytes and the stacks of
// open objects and arrays are kept and reused across values.
//
// A value starts with begin, is written by the append and finish methods, and
// ends with appendMetadata, which appends the value's dictionary: its keys in
// order of first use, as the Builder's dictionary holds them.
type variantEncoder struct {
	// buf holds the value being written from base on; the bytes before base
	// belong to the caller.
	buf  []byte
	base int

	// dict is the value's key dictionary in order of first use, dictSize the
	// total bytes of its keys. Lookups scan dict while it is small and use
	// dictIdx (rebuilt from dict) once it exceeds linearDictMax keys.
	dict     []string
	dictSize int
	dictIdx  map[string]uint32
	// arena holds the bytes of keys read from JSON, which dict and the field
	// entries reference (as strings) until the next begin; keys from
	// structured values are the caller's strings.
	arena []byte

	// fields and elems are stacks of the open objects' entries and the open
	// arrays' element offsets, shared by all nesting levels of a value.
	fields []variantField
	elems  []int
	// goKeys is a stack of the open structured maps' sorted keys.
	goKeys []string
	// scratch holds the text of a time.Time or []byte while it is appended;
	// digits is parseNumLit's space for checking a json.Number.
	scratch, digits []byte
}

// variantField is one entry of an open object: its key, the key's id in the
// dictionary and the value's offset from the object's start.
type variantField struct {
	key    string
	id     uint32
	offset int
}

const (
	// linearDictMax is the dictionary size up to which a key is looked up by
	// scanning: cheaper than hashing for the few keys of most documents.
	linearDictMax = 32
	// maxKeptDictIdx bounds the index map kept for the next value, so that
	// one document with very many keys does not make every later clear slow.
	maxKeptDictIdx = 4096
	// variantMetadataLimit is arrow-go's limit on the metadata size (and on
	// the dictionary's key bytes), beyond which Build fails.
	variantMetadataLimit = 128 << 20
	// maxShortString is the longest string written as a short string.
	maxShortString = 0x3F
)

// begin starts a value appended to buf (which it takes over; the value is
// buf[base:] where base is len(buf)).
func (e *variantEncoder) begin(buf []byte) {
	e.buf, e.base = buf, len(buf)
	clear(e.dict)
	e.dict, e.dictSize = e.dict[:0], 0
	if len(e.dictIdx) > 0 {
		if len(e.dictIdx) > maxKeptDictIdx {
			e.dictIdx = nil
		} else {
			clear(e.dictIdx)
		}
	}
	e.arena = e.arena[:0]
	e.fields, e.elems = e.fields[:0], e.elems[:0]
}

// offset is the position of the next value byte in buf.
func (e *variantEncoder) offset() int { return len(e.buf) }

func primitiveHeader(t variant.PrimitiveType) byte {
	return byte(t)<<2 | byte(variant.BasicPrimitive)
}

func (e *variantEncoder) appendNull() { e.buf = append(e.buf, primitiveHeader(variant.PrimitiveNull)) }

func (e *variantEncoder) appendBool(v bool) {
	t := variant.PrimitiveBoolFalse
	if v {
		t = variant.PrimitiveBoolTrue
	}
	e.buf = append(e.buf, primitiveHeader(t))
}

// appendInt writes v as the smallest integer type that holds it.
func (e *variantEncoder) appendInt(v int64) {
	switch {
	case v >= math.MinInt8 && v <= math.MaxInt8:
		e.buf = append(e.buf, primitiveHeader(variant.PrimitiveInt8), byte(v))
	case v >= math.MinInt16 && v <= math.MaxInt16:
		e.buf = binary.LittleEndian.AppendUint16(append(e.buf, primitiveHeader(variant.PrimitiveInt16)), uint16(v))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		e.buf = binary.LittleEndian.AppendUint32(append(e.buf, primitiveHeader(variant.PrimitiveInt32)), uint32(v))
	default:
		e.buf = binary.LittleEndian.AppendUint64(append(e.buf, primitiveHeader(variant.PrimitiveInt64)), uint64(v))
	}
}

func (e *variantEncoder) appendFloat32(v float32) {
	e.buf = binary.LittleEndian.AppendUint32(append(e.buf, primitiveHeader(variant.PrimitiveFloat)), math.Float32bits(v))
}

func (e *variantEncoder) appendFloat64(v float64) {
	e.buf = binary.LittleEndian.AppendUint64(append(e.buf, primitiveHeader(variant.PrimitiveDouble)), math.Float64bits(v))
}

// appendString writes s, as a short string when it is at most 63 bytes.
func (e *variantEncoder) appendString(s string) {
	if len(s) > maxShortString {
		e.buf = binary.LittleEndian.AppendUint32(append(e.buf, primitiveHeader(variant.PrimitiveString)), uint32(len(s)))
	} else {
		e.buf = append(e.buf, byte(len(s))<<2|byte(variant.BasicShortString))
	}
	e.buf = append(e.buf, s...)
}

// appendStringBytes writes the string with bytes b (copied).
func (e *variantEncoder) appendStringBytes(b []byte) {
	e.appendString(unsafe.String(unsafe.SliceData(b), len(b)))
}

func (e *variantEncoder) appendDecimal4(scale uint8, v int32) {
	e.buf = binary.LittleEndian.AppendUint32(append(e.buf, primitiveHeader(variant.PrimitiveDecimal4), scale), uint32(v))
}

func (e *variantEncoder) appendDecimal8(scale uint8, v int64) {
	e.buf = binary.LittleEndian.AppendUint64(append(e.buf, primitiveHeader(variant.PrimitiveDecimal8), scale), uint64(v))
}

// appendDecimal16 writes the 128-bit two's complement unscaled value hi:lo.
func (e *variantEncoder) appendDecimal16(scale uint8, hi, lo uint64) {
	e.buf = append(e.buf, primitiveHeader(variant.PrimitiveDecimal16), scale)
	e.buf = binary.LittleEndian.AppendUint64(e.buf, lo)
	e.buf = binary.LittleEndian.AppendUint64(e.buf, hi)
}

// decimal16Digits returns the 128-bit two's complement of the decimal
// digits (at most 38, so the magnitude fits), negated when neg.
func decimal16Digits(digits []byte, neg bool) (hi, lo uint64) {
	for _, c := range digits {
		// (hi:lo) = (hi:lo)*10 + digit
		h, l := bits.Mul64(lo, 10)
		h += hi * 10
		var carry uint64
		l, carry = bits.Add64(l, uint64(c-'0'), 0)
		hi, lo = h+carry, l
	}
	if neg {
		var borrow uint64
		lo, borrow = bits.Sub64(0, lo, 0)
		hi, _ = bits.Sub64(0, hi, borrow)
	}
	return hi, lo
}

// fieldJSON starts the field with key k (a view of scanner bytes, copied
// when new) of the object starting at start, pushing its entry.
func (e *variantEncoder) fieldJSON(start int, k []byte) {
	id, ok := e.lookup(unsafe.String(unsafe.SliceData(k), len(k)))
	if !ok {
		// Own the bytes: the arena keeps them until the next begin (an
		// arena grown meanwhile leaves earlier keys in the old array).
		at := len(e.arena)
		e.arena = append(e.arena, k...)
		id = e.add(unsafe.String(unsafe.SliceData(e.arena[at:]), len(k)))
	}
	e.pushField(start, id)
}

// fieldString starts the field with key k, a string that stays unchanged
// until the value ends, of the object starting at start.
func (e *variantEncoder) fieldString(start int, k string) {
	id, ok := e.lookup(k)
	if !ok {
		id = e.add(k)
	}
	e.pushField(start, id)
}

// pushField pushes the entry of the field with key id whose value starts
// next, in the object starting at start.
func (e *variantEncoder) pushField(start int, id uint32) {
	e.fields = append(e.fields, variantField{key: e.dict[id], id: id, offset: e.offset() - start})
}

// lookup returns the dictionary id of key k.
func (e *variantEncoder) lookup(k string) (uint32, bool) {
	if len(e.dict) > linearDictMax {
		id, ok := e.dictIdx[k]
		return id, ok
	}
	for i, d := range e.dict {
		if d == k {
			return uint32(i), true
		}
	}
	return 0, false
}

// add appends key k (owned until the next begin) to the dictionary.
func (e *variantEncoder) add(k string) uint32 {
	id := uint32(len(e.dict))
	e.dict = append(e.dict, k)
	e.dictSize += len(k)
	switch n := len(e.dict); {
	case n == linearDictMax+1:
		if e.dictIdx == nil {
			e.dictIdx = make(map[string]uint32, 2*linearDictMax)
		}
		for i, d := range e.dict {
			e.dictIdx[d] = uint32(i)
		}
	case n > linearDictMax+1:
		e.dictIdx[k] = id
	}
	return id
}

// finishObject ends the object starting at start whose entries are
// e.fields[mark:]: it sorts them by key, rejects a duplicate key, and
// inserts the object header before the field values.
func (e *variantEncoder) finishObject(start, mark int) error {
	// Pop the entries; fields still views them, and nothing is pushed
	// before they are written.
	fields := e.fields[mark:]
	e.fields = e.fields[:mark]
	slices.SortFunc(fields, func(a, b variantField) int { return cmp.Compare(a.key, b.key) })
	sz := len(fields)
	var maxID uint32
	if sz > 0 {
		maxID = fields[0].id
	}
	for i := 1; i < sz; i++ {
		maxID = max(maxID, fields[i].id)
		if fields[i].key == fields[i-1].key {
			return kerr(ErrDuplicateField, "VARIANT object: disallowed duplicate key found: %s", fields[i].key)
		}
	}
	dataSize := len(e.buf) - start
	largeBit, sizeBytes := countSize(sz)
	idSize, offSize := intSize(int(maxID)), intSize(dataSize)
	header := 1 + sizeBytes + sz*idSize + (sz+1)*offSize
	bs := e.shift(start, dataSize, header)
	bs[start] = largeBit<<6 | byte(idSize-1)<<4 | byte(offSize-1)<<2 | byte(variant.BasicObject)
	putLE(bs[start+1:], sz, sizeBytes)
	ids := start + 1 + sizeBytes
	offs := ids + sz*idSize
	for i, f := range fields {
		putLE(bs[ids+i*idSize:], int(f.id), idSize)
		putLE(bs[offs+i*offSize:], f.offset, offSize)
	}
	putLE(bs[offs+sz*offSize:], dataSize, offSize)
	return nil
}

// finishArray ends the array starting at start whose element offsets are
// e.elems[mark:], inserting the array header before the elements.
func (e *variantEncoder) finishArray(start, mark int) {
	elems := e.elems[mark:]
	e.elems = e.elems[:mark] // popped, as in finishObject
	sz, dataSize := len(elems), len(e.buf)-start
	largeBit, sizeBytes := countSize(sz)
	offSize := intSize(dataSize)
	header := 1 + sizeBytes + (sz+1)*offSize
	bs := e.shift(start, dataSize, header)
	bs[start] = largeBit<<4 | byte(offSize-1)<<2 | byte(variant.BasicArray)
	putLE(bs[start+1:], sz, sizeBytes)
	offs := start + 1 + sizeBytes
	for i, off := range elems {
		putLE(bs[offs+i*offSize:], off, offSize)
	}
	putLE(bs[offs+sz*offSize:], dataSize, offSize)
}

// countSize returns the is_large bit of an object or array of sz elements
// and the bytes its element count takes: 1, or 4 past 255 elements.
func countSize(sz int) (largeBit byte, sizeBytes int) {
	if sz > math.MaxUint8 {
		return 1, 4
	}
	return 0, 1
}

// shift moves the dataSize bytes from start up by header bytes, making room
// for a header, and returns the buffer.
func (e *variantEncoder) shift(start, dataSize, header int) []byte {
	e.buf = append(e.buf, make([]byte, header)...)
	copy(e.buf[start+header:], e.buf[start:start+dataSize])
	return e.buf
}

// appendMetadata appends the value's metadata (version 1, the dictionary
// keys in order of first use, flagged sorted when they are) to dst.
func (e *variantEncoder) appendMetadata(dst []byte) ([]byte, error) {
	nkeys := len(e.dict)
	maxSize := max(e.dictSize, nkeys)
	if maxSize > variantMetadataLimit {
		return dst, fmt.Errorf("metadata size too large: %d", maxSize)
	}
	offSize := intSize(maxSize)
	size := 1 + offSize + (nkeys+1)*offSize + e.dictSize
	if size > variantMetadataLimit {
		return dst, fmt.Errorf("metadata size too large: %d", size)
	}
	hdr := byte(1) | byte(offSize-1)<<6
	if nkeys > 0 && slices.IsSorted(e.dict) {
		hdr |= 1 << 4
	}
	at := len(dst)
	dst = append(dst, make([]byte, 1+offSize+(nkeys+1)*offSize)...)
	dst[at] = hdr
	putLE(dst[at+1:], nkeys, offSize)
	offs, cur := at+1+offSize, 0
	for i, k := range e.dict {
		putLE(dst[offs+i*offSize:], cur, offSize)
		cur += len(k)
	}
	putLE(dst[offs+nkeys*offSize:], cur, offSize)
	for _, k := range e.dict {
		dst = append(dst, k...)
	}
	return dst, nil
}

// intSize is the number of bytes (1 to 4) an offset or id up to v takes.
func intSize(v int) int {
	switch {
	case v <= math.MaxUint8:
		return 1
	case v <= math.MaxUint16:
		return 2
	case v <= 0xFFFFFF:
		return 3
	default:
		return 4
	}
}

// putLE writes the n low bytes of v little-endian at the start of b.
func putLE(b []byte, v, n int) {
	for i := range n {
		b[i] = byte(v >> (8 * i))
	}
}
