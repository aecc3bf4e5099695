package arrowconv

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// validUTF8 reports whether p is valid UTF-8, exactly as utf8.Valid does
// (surrogates, overlong forms, runes past U+10FFFF and cut sequences
// refused, an encoded U+FFFD accepted), but is built for text that is
// ASCII with a non-ASCII letter now and then, as most text columns are:
// after each rune it goes straight back to skipping ASCII 32 bytes at a
// time, and a two-byte rune (accented Latin letters) is checked in place.
// utf8.Valid climbs back to its 32-byte stride a byte and a word at a time
// after every rune, which made such text cost nearly three times what
// plain ASCII does.
func validUTF8(p []byte) bool {
	n := len(p)
	i := 0
next:
	for i < n {
		if c := p[i]; c >= utf8.RuneSelf {
			if c >= 0xc2 && c <= 0xdf && i+1 < n && p[i+1]&0xc0 == 0x80 {
				i += 2
				continue
			}
			r, size := utf8.DecodeRune(p[i:])
			if r == utf8.RuneError && size == 1 {
				return false
			}
			i += size
			continue
		}
		// ASCII to the next non-ASCII byte: 32 bytes a step, then that
		// byte found from the step's words without a loop.
		for i+32 <= n {
			b := p[i : i+32 : i+32]
			w1 := binary.LittleEndian.Uint64(b[0:])
			w2 := binary.LittleEndian.Uint64(b[8:])
			w3 := binary.LittleEndian.Uint64(b[16:])
			w4 := binary.LittleEndian.Uint64(b[24:])
			if (w1|w2|w3|w4)&swarMSB == 0 {
				i += 32
				continue
			}
			switch {
			case w1&swarMSB != 0:
				i += bits.TrailingZeros64(w1&swarMSB) >> 3
			case w2&swarMSB != 0:
				i += 8 + bits.TrailingZeros64(w2&swarMSB)>>3
			case w3&swarMSB != 0:
				i += 16 + bits.TrailingZeros64(w3&swarMSB)>>3
			default:
				i += 24 + bits.TrailingZeros64(w4&swarMSB)>>3
			}
			continue next
		}
		for i+8 <= n {
			if m := binary.LittleEndian.Uint64(p[i:]) & swarMSB; m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				continue next
			}
			i += 8
		}
		if r := n - i; r > 0 && n >= 8 {
			// The last 1..7 bytes in one word.
			m := tailWord(p, r) & swarMSB
			if m == 0 {
				return true
			}
			i += bits.TrailingZeros64(m) >> 3
			continue
		}
		for i < n && p[i] < utf8.RuneSelf {
			i++
		}
	}
	return true
}
