package arrowconv

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

type strMode uint8

const (
	modeString strMode = iota
	modeBinary
	modeDecimal
)

// strNode holds a LargeUtf8 or LargeBinary column: STRING, BINARY or DECIMAL
// (as canonical text).
type strNode struct {
	base
	mode             strMode
	precision, scale int
	offsets          []int64
	data             []byte
	// hint sizes the next batch's data from the previous one's.
	hint dataHint
	// long reports that the last string value was longer than longString:
	// the next is read without first looking at its head word by word.
	long bool
}

// longString is the length past which a column's next string is taken to be
// long too.
const longString = 64

func (n *strNode) decode(st *state) error {
	c := st.peek()
	if c == 'n' {
		return n.null(st, n)
	}
	switch n.mode {
	case modeString:
		switch c {
		case '"':
			out, err := st.appendString(n.data, n.long)
			n.long = len(out)-len(n.data) > longString
			n.data = out
			if err != nil {
				return err
			}
			return n.commit()
		case '{', '[':
			if !st.nestedToString {
				return n.nestedErr(jsonKind(c))
			}
			v, err := st.decodeAny(0)
			if err != nil {
				return err
			}
			if n.data, err = appendJSON(n.data, v, 0); err != nil {
				return err
			}
			st.rowNested++
			return n.commit()
		}
		return n.mismatch(st, "a JSON string", c)
	case modeBinary:
		if c != '"' {
			return n.mismatch(st, "a base64 JSON string", c)
		}
		s, err := st.readString()
		if err != nil {
			return err
		}
		return n.addBase64(s)
	default: // modeDecimal
		text, quoted, ok, err := st.readTextOrNumber(c)
		switch {
		case !ok:
			return n.mismatch(st, "a JSON number or numeric string", c)
		case err != nil:
			return err
		}
		return n.addDecimal(st, text, quoted)
	}
}

func (n *strNode) nestedErr(kind string) error {
	return kerr(ErrNestedIntoString, "a JSON %s into a STRING column: enable reconcile.nested_to_string, serialise it explicitly (to_json / format_json) or declare a typed column", kind)
}

func (n *strNode) addBase64(s []byte) error {
	start := len(n.data)
	out, err := base64.StdEncoding.AppendDecode(n.data, s)
	if err != nil {
		n.data = n.data[:start]
		return kerr(ErrInvalidValue, "invalid base64 for BINARY: %v", err)
	}
	n.data = out
	return n.commit()
}

func (n *strNode) addDecimal(st *state, text []byte, lenient bool) error {
	lit, buf, ok := parseNumLit(text, st.num, lenient)
	st.num = buf
	if !ok {
		return kerr(ErrInvalidValue, "%s is not a decimal number for %s", Quote(text), n.name)
	}
	out, err := appendDecimal(n.data, lit, n.precision, n.scale)
	if err != nil {
		n.data = n.data[:n.offsets[len(n.offsets)-1]]
		return kerr(ErrOutOfRange, "value %s out of range for %s: %v", text, n.name, err)
	}
	n.data = out
	return n.commit()
}

// commit ends the value written to data since the last offset.
func (n *strNode) commit() error {
	n.offsets = append(n.offsets, int64(len(n.data)))
	n.validity.add(true)
	return nil
}

func (n *strNode) put(st *state, v any) error {
	if v == nil {
		return n.nullValue(n)
	}
	switch n.mode {
	case modeString:
		switch v := v.(type) {
		case string:
			if !utf8.ValidString(v) {
				return kerr(ErrInvalidValue, "invalid UTF-8 in string for STRING")
			}
			n.data = append(n.data, v...)
			return n.commit()
		case [16]byte:
			// A uuid on fixed(16), as the Avro decoder gives it
			// (github.com/twmb/avro, Schema.Decode: "uuid on fixed(16):
			// [16]byte"): its canonical text, as a string uuid reads.
			n.data = appendUUID(n.data, v)
			return n.commit()
		case []byte: // Bloblang content() and friends: text if it is UTF-8
			if !utf8.Valid(v) {
				return kerr(ErrInvalidValue, "bytes are not UTF-8 text for STRING; declare a BINARY column")
			}
			n.data = append(n.data, v...)
			return n.commit()
		case map[string]any, []any:
			if !st.nestedToString {
				return n.nestedErr(goKind(v))
			}
			out, err := appendJSON(n.data, v, 0)
			if err != nil {
				n.data = n.data[:n.offsets[len(n.offsets)-1]]
				return kerr(ErrInvalidValue, "serialising to JSON: %v", err)
			}
			n.data = out
			st.rowNested++
			return n.commit()
		}
		return n.mismatchGo("a string", v)
	case modeBinary:
		switch v := v.(type) {
		case []byte:
			n.data = append(n.data, v...)
			return n.commit()
		case string:
			return n.addBase64(textOf(v))
		}
		return n.mismatchGo("bytes or a base64 string", v)
	default: // modeDecimal
		switch v := v.(type) {
		case string:
			return n.addDecimal(st, textOf(v), true)
		case json.Number:
			return n.addDecimal(st, textOf(string(v)), false)
		case float64:
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return kerr(ErrInvalidValue, "value %v is not a decimal number for %s", v, n.name)
			}
			st.text = strconv.AppendFloat(st.text[:0], v, 'g', -1, 64)
			return n.addDecimal(st, st.text, false)
		case float32:
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return kerr(ErrInvalidValue, "value %v is not a decimal number for %s", v, n.name)
			}
			st.text = strconv.AppendFloat(st.text[:0], float64(v), 'g', -1, 32)
			return n.addDecimal(st, st.text, false)
		case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
			st.text, _ = appendJSON(st.text[:0], v, 0) // an integer: never fails
			return n.addDecimal(st, st.text, false)
		case *big.Rat:
			return n.putRat(st, v)
		}
		return n.mismatchGo("a number or numeric string", v)
	}
}

// addKey appends a string map key.
func (n *strNode) addKey(st *state, k []byte) error {
	n.data = append(n.data, k...)
	return n.commit()
}

func (n *strNode) keyText(i int) string { return string(n.data[n.offsets[i]:n.offsets[i+1]]) }
func (n *strNode) keyEqual(i, j int) bool {
	return string(n.data[n.offsets[i]:n.offsets[i+1]]) == string(n.data[n.offsets[j]:n.offsets[j+1]])
}
func (n *strNode) appendNull() {
	n.offsets = append(n.offsets, int64(len(n.data)))
	n.validity.add(false)
}
func (n *strNode) appendEmpty() { _ = n.commit() }
func (n *strNode) truncate(k int) {
	n.offsets = n.offsets[:k+1]
	n.data = n.data[:n.offsets[k]]
	n.truncateBits(k)
}
func (n *strNode) reset(c int) {
	n.offsets = append(getSlice[int64](c+1), 0)
	n.data = buffers.get(n.hint.size(c))
	n.resetBits(c)
}
func (n *strNode) build() (arrow.ArrayData, error) {
	size := n.n
	offs := pooledSlice(n.offsets)
	data := pooledBuffer(n.data)
	n.hint = dataHint{bytes: len(n.data), values: size}
	bits, nulls := n.takeBits()
	n.offsets, n.data = nil, nil
	return newData(n.dt, size, []*memory.Buffer{bits, offs, data}, nil, nulls), nil
}

// putRat stores an exact fraction, as the Avro decoder gives a decimal
// (github.com/twmb/avro, Schema.Decode: "decimal: *math/big.Rat"), without
// passing through a float: its digits at the column's scale when it has no
// more fraction digits than that, refused otherwise.
func (n *strNode) putRat(st *state, r *big.Rat) error {
	if r == nil {
		return n.nullValue(n)
	}
	scaled := new(big.Int).Mul(r.Num(), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n.scale)), nil))
	if new(big.Int).Rem(scaled, r.Denom()).Sign() != 0 {
		return kerr(ErrOutOfRange, "value %s has more fraction digits than %s holds", r.RatString(), n.name)
	}
	st.text = append(st.text[:0], r.FloatString(n.scale)...)
	return n.addDecimal(st, st.text, false)
}

// appendUUID appends u in the canonical 8-4-4-4-12 lower-case hex form (RFC
// 9562, section 4).
func appendUUID(dst []byte, u [16]byte) []byte {
	const hexDigits = "0123456789abcdef"
	for i, b := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hexDigits[b>>4], hexDigits[b&0xf])
	}
	return dst
}
