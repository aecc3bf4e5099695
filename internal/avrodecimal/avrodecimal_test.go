package avrodecimal

import (
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Decimals of every length get every digit, the widest two's-complement
// values included.
func TestAppend(t *testing.T) {
	for _, tc := range []struct {
		b     []byte
		scale int
		want  string
	}{
		{nil, 2, "0.00"},
		{[]byte{0x01}, 3, "0.001"},
		{[]byte{0xff}, 2, "-0.01"},
		{[]byte{0x30, 0x39}, 2, "123.45"},
		{[]byte{0xcf, 0xc7}, 0, "-12345"},
		{[]byte{0x80, 0, 0, 0, 0, 0, 0, 0}, 4, "-922337203685477.5808"},
		{[]byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0, "9223372036854775807"},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 1, "-0.1"},
		{[]byte{0x00, 0x80, 0, 0, 0, 0, 0, 0, 0}, 2, "92233720368547758.08"},
	} {
		assert.Equal(t, tc.want, string(Append(nil, tc.b, tc.scale)), "%x", tc.b)
	}
	assert.Equal(t, "x=1.5", string(Append([]byte("x="), []byte{0x0f}, 1)), "appended to dst")
}

// Append agrees with big.Rat's exact text for values of 0 to 20 bytes
// (both sides of the 8-byte fast path) at scales 0 to 40, and
// AppendFitting gives the same text exactly when the value has at most 8
// bytes and its digits fit the precision.
func TestAppendMatchesRat(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		b := make([]byte, rng.IntN(21))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if len(b) > 0 && rng.IntN(4) == 0 {
			b[0] |= 0x80 // more negatives
		}
		scale := rng.IntN(41)
		n := new(big.Int).SetBytes(b)
		if len(b) > 0 && b[0]&0x80 != 0 {
			n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(len(b))*8))
		}
		want := new(big.Rat).SetFrac(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)).FloatString(scale)
		got := string(Append(nil, b, scale))
		if !assert.Equal(t, want, got, "%x scale %d", b, scale) {
			return
		}
		precision := rng.IntN(25) + 1
		digits := len(strings.TrimPrefix(n.String(), "-"))
		fit, ok := AppendFitting([]byte("x"), b, scale, precision)
		if len(b) <= 8 && digits <= precision {
			assert.True(t, ok, "%x fits precision %d", b, precision)
			assert.Equal(t, "x"+want, string(fit))
		} else {
			assert.False(t, ok, "%x does not fit precision %d", b, precision)
			assert.Equal(t, "x", string(fit), "dst untouched")
		}
	}
}
