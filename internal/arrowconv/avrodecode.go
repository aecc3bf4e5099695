package arrowconv

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"time"
)

// ConvertAvro converts a batch of Avro binary values (what follows the
// registry's 5-byte header), all written with p's schema, through p: each
// value is read straight into the column buffers. A value that does not
// read (truncated, an out-of-range union branch or enum index, bytes left
// over) or does not fit its column fails only its row, as a RowError naming
// the message index and the column.
//
// redo, when set, is the general path for one value (the registry codec's
// decode): a row the fast path fails is converted again from redo's value,
// so a failing row's error, and any row the fast path were stricter about
// than the codec, is exactly what ConvertStructured gives.
func (c *Converter) ConvertAvro(p *AvroPlan, bodies [][]byte, redo func(body []byte) (any, error)) (Result, error) {
	if p.conv != c {
		return Result{}, errAvroPlanConverter
	}
	var fn avroFn
	return c.convert(len(bodies), func(st *state, i int) error {
		if fn == nil {
			var err error
			if fn, err = p.boundFn(st); err != nil {
				return err
			}
		}
		good := st.root.fields[0].length()
		err := st.decodeAvro(fn, bodies[i])
		if err == nil || redo == nil {
			return err
		}
		st.root.truncate(good)
		st.rowNested, st.rowFolded, st.rowNTZ = 0, 0, 0
		v, derr := redo(bodies[i])
		if derr != nil {
			return kerr(ErrInvalidValue, "%v", derr)
		}
		return st.putRow(v)
	})
}

var errAvroPlanConverter = kerr(ErrInvalidValue, "arrowconv: an AvroPlan compiled for another Converter")

// decodeAvro appends one Avro record value as a row.
func (st *state) decodeAvro(fn avroFn, body []byte) error {
	r := &st.avro
	*r = avroReader{b: body}
	defer func() { r.b = nil }() // keep no message alive in an idle state
	if err := fn(st, r); err != nil {
		return err
	}
	if r.pos != len(r.b) {
		return kerr(ErrInvalidValue, "%d bytes left after the Avro value: it was not written with this schema", len(r.b)-r.pos)
	}
	return nil
}

// avroReader reads Avro's binary encoding
// (https://avro.apache.org/docs/1.12.0/specification/#binary-encoding).
type avroReader struct {
	b   []byte
	pos int
}

var (
	errAvroTruncated = kerr(ErrInvalidValue, "the Avro value is truncated")
	errAvroVarint    = kerr(ErrInvalidValue, "an Avro varint longer than 10 bytes or past 64 bits")
)

// long reads a zig-zag varint; one byte (values -64..63) inline.
func (r *avroReader) long() (int64, error) {
	if r.pos < len(r.b) {
		if c := r.b[r.pos]; c < 0x80 {
			r.pos++
			return int64(c>>1) ^ -int64(c&1), nil
		}
	}
	return r.longSlow()
}

func (r *avroReader) longSlow() (int64, error) {
	var u uint64
	for shift := uint(0); ; shift += 7 {
		if r.pos >= len(r.b) {
			return 0, errAvroTruncated
		}
		c := r.b[r.pos]
		r.pos++
		if shift == 63 && c > 1 {
			return 0, errAvroVarint
		}
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return int64(u>>1) ^ -int64(u&1), nil
		}
		if shift == 63 {
			return 0, errAvroVarint
		}
	}
}

// int reads a zig-zag varint that must fit 32 bits.
func (r *avroReader) int() (int64, error) {
	v, err := r.long()
	if err == nil && (v < math.MinInt32 || v > math.MaxInt32) {
		return 0, kerr(ErrInvalidValue, "Avro int %d overflows 32 bits", v)
	}
	return v, err
}

func (r *avroReader) boolean() (bool, error) {
	if r.pos >= len(r.b) {
		return false, errAvroTruncated
	}
	c := r.b[r.pos]
	r.pos++
	switch c {
	case 0:
		return false, nil
	case 1:
		return true, nil
	}
	return false, kerr(ErrInvalidValue, "Avro boolean byte %d is neither 0 nor 1", c)
}

func (r *avroReader) float() (float32, error) {
	b, err := r.fixed(4)
	if err != nil {
		return 0, err
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(b)), nil
}

func (r *avroReader) double() (float64, error) {
	b, err := r.fixed(8)
	if err != nil {
		return 0, err
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b)), nil
}

// bytes reads a length-prefixed bytes or string value; the result aliases
// the input.
func (r *avroReader) bytes() ([]byte, error) {
	n, err := r.long()
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, kerr(ErrInvalidValue, "negative Avro length %d", n)
	}
	if n > int64(len(r.b)-r.pos) {
		return nil, errAvroTruncated
	}
	b := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b, nil
}

func (r *avroReader) fixed(n int) ([]byte, error) {
	if n > len(r.b)-r.pos {
		return nil, errAvroTruncated
	}
	b := r.b[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

// blockCount reads an array or map block's item count (0: the end); a
// negative count is followed by the block's size in bytes, which is read
// and checked. Each item takes at least one byte (CompileAvro plans no
// array of items that may take none; a map entry has its key's length), so
// a count beyond the bytes left is refused before any item is read.
func (r *avroReader) blockCount() (int64, error) {
	n, err := r.long()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		if n == math.MinInt64 {
			return 0, kerr(ErrInvalidValue, "Avro block count %d", n)
		}
		n = -n
		size, err := r.long()
		if err != nil {
			return 0, err
		}
		if size < 0 || size > int64(len(r.b)-r.pos) {
			return 0, kerr(ErrInvalidValue, "Avro block size %d does not fit the %d bytes left", size, len(r.b)-r.pos)
		}
	}
	if n > int64(len(r.b)-r.pos) {
		return 0, errAvroTruncated
	}
	return n, nil
}

// putFloat64 stores a double into a FLOAT column as the structured path
// stores a float64: refused when finite but past float32's range.
func (n *floatNode[T]) putFloat64(v float64) error {
	if n.bits == 32 && !math.IsInf(v, 0) && math.IsInf(float64(float32(v)), 0) {
		return kerr(ErrOutOfRange, "value %v out of range for %s", v, n.name)
	}
	n.push(T(v))
	return nil
}

// dateTime is an Avro date as the registry's decoder gives it: midnight UTC.
func dateTime(days int64) time.Time { return time.Unix(days*86400, 0).UTC() }

// avroMicros converts a timestamp in unit ("millis", "micros", "nanos") to
// microseconds, floored; ok is false on overflow.
func avroMicros(v int64, unit string) (int64, bool) {
	switch unit {
	case "millis":
		if v > math.MaxInt64/1000 || v < math.MinInt64/1000 {
			return 0, false
		}
		return v * 1000, true
	case "micros":
		return v, true
	}
	us := v / 1000
	if v%1000 < 0 {
		us--
	}
	return us, true
}

// avroTime is a timestamp as the registry's decoder gives it.
func avroTime(v int64, unit string) time.Time {
	switch unit {
	case "millis":
		return time.UnixMilli(v).UTC()
	case "micros":
		return time.UnixMicro(v).UTC()
	}
	return time.Unix(0, v).UTC()
}

// avroEntry is one map entry being read: its key and its value's bytes.
type avroEntry struct {
	key        []byte
	start, end int
}

// sortEntries orders a map's entries by key and keeps the last of each
// duplicate key, as a Go map decoded from the value holds it and the
// structured path stores it.
func sortEntries(es []avroEntry) []avroEntry {
	if len(es) < 2 {
		return es
	}
	if len(es) <= 16 {
		// Insertion sort: stable, and no call per comparison.
		for i := 1; i < len(es); i++ {
			for j := i; j > 0 && string(es[j].key) < string(es[j-1].key); j-- {
				es[j], es[j-1] = es[j-1], es[j]
			}
		}
	} else {
		slices.SortStableFunc(es, func(a, b avroEntry) int { return bytes.Compare(a.key, b.key) })
	}
	out := es[:0]
	for i, e := range es {
		if i+1 < len(es) && bytes.Equal(e.key, es[i+1].key) {
			continue // a later entry has this key
		}
		out = append(out, e)
	}
	return out
}
