package arrowconv

import (
	"fmt"
	"math"
)

// numLit is an exactly parsed decimal number: (-1)^neg × digits × 10^exp, with
// digits free of leading and trailing zeros (empty for zero). Parsing numbers
// this way, instead of through float64, keeps 9007199254740993 exact and lets
// DECIMAL columns refuse values that would lose digits.
type numLit struct {
	neg    bool
	digits []byte
	exp    int
}

func (n numLit) isZero() bool { return len(n.digits) == 0 }

// expLimit saturates exponents far beyond any representable value so that the
// arithmetic below cannot overflow.
const expLimit = 1 << 20

// parseNumLit parses a JSON number, or with lenient also a leading '+', leading
// zeros and forms like "1." or ".5" (as accepted in DECIMAL strings). digits are
// copied into buf, which is returned for reuse.
func parseNumLit(b []byte, buf []byte, lenient bool) (numLit, []byte, bool) {
	var n numLit
	i := 0
	if i < len(b) && (b[i] == '-' || (lenient && b[i] == '+')) {
		n.neg = b[i] == '-'
		i++
	}
	buf = buf[:0]
	intStart := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if len(buf) > 0 || b[i] != '0' {
			buf = append(buf, b[i])
		}
		i++
	}
	nInt := i - intStart
	if !lenient && (nInt == 0 || (nInt > 1 && b[intStart] == '0')) {
		return n, buf, false
	}
	nFrac := 0
	if i < len(b) && b[i] == '.' {
		i++
		fracStart := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if len(buf) > 0 || b[i] != '0' {
				buf = append(buf, b[i])
			}
			i++
		}
		nFrac = i - fracStart
		if nFrac == 0 && !lenient {
			return n, buf, false
		}
	}
	if nInt+nFrac == 0 {
		return n, buf, false
	}
	exp := -nFrac
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		if i == len(b) {
			return n, buf, false
		}
		e := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if e < expLimit {
				e = e*10 + int(b[i]-'0')
			}
			i++
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	if i != len(b) {
		return n, buf, false
	}
	// Trailing zeros move into the exponent; leading zeros were never kept.
	d := buf
	for len(d) > 0 && d[len(d)-1] == '0' {
		d = d[:len(d)-1]
		exp++
	}
	n.digits = d
	n.exp = exp
	if len(d) == 0 {
		n.neg, n.exp = false, 0
	}
	return n, buf, true
}

// errNotInteger and errOverflow classify why a number does not fit an
// integer column.
var (
	errNotInteger = fmt.Errorf("not an integer")
	errOverflow   = fmt.Errorf("out of range")
)

// int64 returns the exact integer value of n.
func (n numLit) int64() (int64, error) {
	if n.exp < 0 { // digits has no trailing zeros, so n has a fraction
		return 0, errNotInteger
	}
	return n.scaleFloor(0)
}

func signed(u uint64, neg bool) (int64, error) {
	if neg {
		if u > 1<<63 {
			return 0, errOverflow
		}
		return -int64(u), nil
	}
	if u > math.MaxInt64 {
		return 0, errOverflow
	}
	return int64(u), nil
}

// parseIntFast parses a plain JSON integer of at most 18 digits, the common
// case, without copying. ok is false when the slow exact path is needed (also
// for a leading zero, which JSON number text never has). It is readIntFast
// (the one reader of such integers) over b, taking all of it.
func parseIntFast(b []byte) (v int64, ok bool) {
	s := scanner{data: b}
	v, _, ok = s.readIntFast()
	return v, ok && s.pos == len(b)
}

// appendDecimal appends the canonical text of n as DECIMAL(p, s): exactly s
// fraction digits, no exponent, "-" only for non-zero negatives. It fails
// rather than round when n has more than s significant fraction digits, and
// when its integer part has more than p-s digits.
func appendDecimal(dst []byte, n numLit, p, s int) ([]byte, error) {
	d, exp := n.digits, n.exp
	if -exp > s {
		return dst, fmt.Errorf("has more than %d fraction digits", s)
	}
	intDigits := len(d) + exp
	if intDigits > p-s {
		return dst, fmt.Errorf("needs %d integer digits, DECIMAL(%d,%d) allows %d", intDigits, p, s, p-s)
	}
	if n.neg {
		dst = append(dst, '-')
	}
	switch {
	case intDigits <= 0:
		dst = append(dst, '0')
	case exp >= 0:
		dst = append(dst, d...)
		for range exp {
			dst = append(dst, '0')
		}
	default:
		dst = append(dst, d[:intDigits]...)
	}
	if s == 0 {
		return dst, nil
	}
	dst = append(dst, '.')
	written := 0
	if exp < 0 {
		for range -intDigits {
			dst = append(dst, '0')
			written++
		}
		frac := d
		if intDigits > 0 {
			frac = d[intDigits:]
		}
		dst = append(dst, frac...)
		written += len(frac)
	}
	for ; written < s; written++ {
		dst = append(dst, '0')
	}
	return dst, nil
}

// scaleFloor returns floor(n × 10^shift) as an int64.
func (n numLit) scaleFloor(shift int) (int64, error) {
	if n.isZero() {
		return 0, nil
	}
	e := n.exp + shift
	d := n.digits
	inexact := false
	if e < 0 {
		if -e >= len(d) {
			d, inexact = nil, true
		} else {
			d, inexact = d[:len(d)+e], true // dropped digits are non-zero: digits has no trailing zeros
		}
		e = 0
	}
	if len(d)+e > 19 {
		return 0, errOverflow
	}
	var u uint64
	for _, c := range d {
		u = u*10 + uint64(c-'0')
	}
	for range e {
		if u > math.MaxUint64/10 {
			return 0, errOverflow
		}
		u *= 10
	}
	if inexact && n.neg {
		u++ // floor, not truncation, for negative values
	}
	return signed(u, n.neg)
}
