// Package avrodecimal spells an Avro decimal's value as text: the one
// spelling the registry's decoder (a json.Number per value) and the Avro
// fast path (straight into a DECIMAL column's digits) share, so that a value
// lands with the same digits whichever path converts it.
//
// An Avro decimal is its unscaled integer as two's-complement big-endian
// bytes, divided by 10^scale (Apache Avro specification, "Decimal",
// https://avro.apache.org/docs/1.11.1/specification/#decimal).
package avrodecimal

import (
	"math"
	"math/big"
	"strconv"
)

// Append appends the decimal whose unscaled value is the two's-complement
// big-endian integer b, with every digit and exactly scale of them after the
// point ("12.30", "-0.001"); a scale of 0 or less gives the integer. No
// bytes is zero.
func Append(dst, b []byte, scale int) []byte {
	neg := negative(b)
	if len(b) <= 8 {
		var buf [20]byte
		return appendScaled(dst, neg, smallDigits(buf[:0], b), scale)
	}
	n := new(big.Int).SetBytes(b)
	if neg {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(len(b))*8))
		n.Neg(n)
	}
	return appendScaled(dst, neg, n.Append(nil, 10), scale)
}

// AppendFitting appends what Append does for b of at most 8 bytes whose
// unscaled value has at most precision digits; ok is false, and dst is
// returned as it is, when b is longer or its digits pass precision (the
// caller then decides). At a DECIMAL column's own scale and precision its
// text is the column's canonical text, with no parse.
func AppendFitting(dst, b []byte, scale, precision int) ([]byte, bool) {
	if len(b) > 8 {
		return dst, false
	}
	var buf [20]byte
	digits := smallDigits(buf[:0], b)
	if len(digits) > precision {
		return dst, false
	}
	return appendScaled(dst, negative(b), digits, scale), true
}

func negative(b []byte) bool { return len(b) > 0 && b[0]&0x80 != 0 }

// smallDigits appends the decimal digits of the magnitude of the
// two's-complement big-endian integer b of at most 8 bytes.
func smallDigits(dst, b []byte) []byte {
	neg := negative(b)
	var u uint64
	if neg {
		u = math.MaxUint64
	}
	for _, c := range b {
		u = u<<8 | uint64(c)
	}
	if v := int64(u); neg {
		return strconv.AppendUint(dst, uint64(-v), 10) // -MinInt64 as uint64 is exact
	}
	return strconv.AppendUint(dst, u, 10)
}

// appendScaled appends the digits of a decimal's unscaled magnitude with a
// point before the last scale of them, zero-padded to one integer digit.
func appendScaled(dst []byte, neg bool, digits []byte, scale int) []byte {
	if neg {
		dst = append(dst, '-')
	}
	if scale <= 0 {
		return append(dst, digits...)
	}
	if len(digits) <= scale {
		dst = append(dst, '0', '.')
		for range scale - len(digits) {
			dst = append(dst, '0')
		}
		return append(dst, digits...)
	}
	cut := len(digits) - scale
	dst = append(dst, digits[:cut]...)
	dst = append(dst, '.')
	return append(dst, digits[cut:]...)
}
