package arrowconv

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadIntFastMatchesReadNumber checks the one-pass integer reader against
// readNumber and strconv.ParseInt: on every number it takes, the same value,
// text and end position; on the others (fractions, exponents, leading
// zeros, 19 digits and more, a lone minus) nothing consumed. Cases come from
// a table and from random digit strings with random bytes after them. It
// checks parseIntFast on the text readNumber read as well.
func TestReadIntFastMatchesReadNumber(t *testing.T) {
	cases := []string{
		"0", "-0", "7", "-7", "01", "-01", "00", "-", "--1", "1.5", "1e3", "1E3", "-0.0", "0e1",
		"123456789012345678", "-123456789012345678", "1234567890123456789", "9223372036854775807",
		"9223372036854775808", "-9223372036854775808", "12,", "12}", "12 ", "12]", "12x", "9000000123",
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 20_000 {
		b := []byte{}
		if r.IntN(3) == 0 {
			b = append(b, '-')
		}
		for range r.IntN(22) {
			b = append(b, byte('0'+r.IntN(10)))
		}
		if r.IntN(2) == 0 {
			b = append(b, ".eE,}] x-+"[r.IntN(10)])
		}
		cases = append(cases, string(b))
	}
	var s scanner
	for _, c := range cases {
		s.reset([]byte(c))
		v, text, ok := s.readIntFast()
		fastPos := s.pos

		s.reset([]byte(c))
		wtext, integer, err := s.readNumber()
		if err == nil {
			// parseIntFast, the same reader over a whole number's text,
			// takes exactly the integers of up to 18 digits.
			pv, pok := parseIntFast(wtext)
			digits := len(strings.TrimPrefix(string(wtext), "-"))
			require.Equal(t, integer && digits <= 18, pok, "parseIntFast(%q)", wtext)
			if pok {
				want, perr := strconv.ParseInt(string(wtext), 10, 64)
				require.NoError(t, perr, c)
				require.Equal(t, want, pv, "parseIntFast(%q)", wtext)
			}
		}
		if !ok {
			require.Equal(t, 0, fastPos, "%q: consumed though not taken", c)
			continue
		}
		require.NoError(t, err, c)
		require.True(t, integer, c)
		wv, werr := strconv.ParseInt(string(wtext), 10, 64)
		require.NoError(t, werr, c)
		require.Equal(t, wv, v, c)
		require.Equal(t, string(wtext), string(text), c)
		require.Equal(t, s.pos, fastPos, c)
	}
}

// TestIntColumnsEdgeNumbers converts integers at the edges of INT and
// BIGINT and numbers the fast reader leaves to the general path, checking
// values and refusals.
func TestIntColumnsEdgeNumbers(t *testing.T) {
	c := mustConverter(t, "i INT, b BIGINT", Options{})
	rows := []string{
		`{"i":2147483647,"b":9223372036854775807}`, `{"i":-2147483648,"b":-9223372036854775808}`,
		`{"i":0,"b":-0}`, `{"i":1.0,"b":1e3}`, `{"i":2147483648}`, `{"b":9223372036854775808}`,
		`{"i":01}`, `{"i":-}`, `{"i":1.5}`, `{"i":12`,
	}
	var raw [][]byte
	for _, r := range rows {
		raw = append(raw, []byte(r))
	}
	res, err := c.ConvertJSON(raw)
	require.NoError(t, err)
	defer res.Record.Release()
	require.Equal(t, []int{0, 1, 2, 3}, res.SourceIndex)
	want := [][2]string{{"2147483647", "9223372036854775807"}, {"-2147483648", "-9223372036854775808"}, {"0", "0"}, {"1", "1000"}}
	for r, w := range want {
		require.Equal(t, w[0], res.Record.Column(0).ValueStr(r), rows[r])
		require.Equal(t, w[1], res.Record.Column(1).ValueStr(r), rows[r])
	}
	require.Len(t, res.RowErrors, 6)
	require.ErrorIs(t, res.RowErrors[0], ErrOutOfRange)
	require.ErrorIs(t, res.RowErrors[1], ErrOutOfRange)
	require.ErrorIs(t, res.RowErrors[4], ErrTypeMismatch)
}
