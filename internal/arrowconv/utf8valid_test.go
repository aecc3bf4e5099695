package arrowconv

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// utf8Pieces are encoded runes and broken sequences validUTF8 must judge as
// utf8.Valid does: every length of rune (and the edges of the two-byte
// range it checks in place), U+FFFD itself, the largest rune, and
// surrogates, overlong forms, runes past U+10FFFF, stray continuation bytes
// and cut sequences.
var utf8Pieces = []struct {
	name, bytes string
	valid       bool
}{
	{"2-byte é", "é", true},
	{"2-byte U+0080", "\u0080", true},
	{"2-byte U+07FF", "\u07ff", true},
	{"3-byte €", "€", true},
	{"4-byte 😀", "😀", true},
	{"U+FFFD", "\uFFFD", true},
	{"U+10FFFF", "\U0010FFFF", true},
	{"surrogate D800", "\xed\xa0\x80", false},
	{"surrogate DFFF", "\xed\xbf\xbf", false},
	{"overlong C0", "\xc0\xaf", false},
	{"overlong C1", "\xc1\xbf", false},
	{"overlong 3-byte", "\xe0\x80\xaf", false},
	{"overlong 4-byte", "\xf0\x80\x80\xaf", false},
	{"past U+10FFFF", "\xf4\x90\x80\x80", false},
	{"F5 lead", "\xf5\x80\x80\x80", false},
	{"continuation alone", "\x80", false},
	{"continuation BF alone", "\xbf", false},
	{"2-byte lead then ASCII", "\xc3a", false},
	{"2-byte lead then C0", "\xdf\xc0", false},
	{"cut é", "\xc3", false},
	{"cut €", "\xe2\x82", false},
	{"cut 😀", "\xf0\x9f\x98", false},
	{"FF", "\xff", false},
}

// TestValidUTF8AtEveryOffset puts each piece at every offset of a 72-byte
// ASCII text (every byte of a word and of a 32-byte block, across their
// boundaries and at the very end, also cut there), alone and after earlier
// runes (so after validUTF8 has left and re-entered its ASCII stride), and
// checks validUTF8 agrees with utf8.Valid.
func TestValidUTF8AtEveryOffset(t *testing.T) {
	const n = 72
	for _, pc := range utf8Pieces {
		for _, lead := range []string{"", "é", "😀x", "€é"} {
			for off := len(lead); off+len(pc.bytes) <= n; off++ {
				b := []byte(strings.Repeat("a", n))
				copy(b, lead)
				copy(b[off:], pc.bytes)
				require.Equal(t, pc.valid, utf8.Valid(b), "reference for %s at %d", pc.name, off)
				require.Equal(t, pc.valid, validUTF8(b), "%s at offset %d after %q: %q", pc.name, off, lead, b)
				end := b[:off+len(pc.bytes)]
				require.Equal(t, utf8.Valid(end), validUTF8(end), "%s ending the text at %d after %q", pc.name, off, lead)
				cut := b[:off+len(pc.bytes)-1]
				require.Equal(t, utf8.Valid(cut), validUTF8(cut), "%s cut by the end at %d after %q", pc.name, off, lead)
			}
		}
	}
}

// TestValidUTF8MatchesStdlib compares validUTF8 with utf8.Valid on random
// texts: mostly ASCII with runes and broken bytes here and there, dense
// non-ASCII text, and random bytes.
func TestValidUTF8MatchesStdlib(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 100_000 {
		var b []byte
		dense := r.IntN(4) == 0
		for want := r.IntN(150); len(b) < want; {
			switch {
			case dense && r.IntN(2) == 0 || r.IntN(30) == 0:
				b = append(b, utf8Pieces[r.IntN(len(utf8Pieces))].bytes...)
			case r.IntN(100) == 0:
				b = append(b, byte(r.IntN(256)))
			default:
				b = append(b, byte('a'+r.IntN(26)))
			}
		}
		require.Equal(t, utf8.Valid(b), validUTF8(b), "%q", b)
	}
}

func FuzzValidUTF8(f *testing.F) {
	for _, pc := range utf8Pieces {
		f.Add([]byte("abcdefghijklmnopqrstuvwxyz0123456789" + pc.bytes + "qrstuvwxyz"))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validUTF8(b), utf8.Valid(b); got != want {
			t.Fatalf("validUTF8(%q) = %v, utf8.Valid says %v", b, got, want)
		}
	})
}
