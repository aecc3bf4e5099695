package arrowconv

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCompactKeyEveryLength converts rows whose keys have every length
// around the one-word limit (1..8 bytes), spelled compactly, with
// whitespace around the colon, as a longer or shorter key sharing the
// prefix, escaped, and at the very end of the input (fewer than 8 bytes
// after the quote), twice each so that the second row meets the learned key
// order, and checks each value lands in its column and each wrong key is
// refused as unknown.
func TestCompactKeyEveryLength(t *testing.T) {
	for n := 1; n <= 8; n++ {
		name := strings.Repeat("k", n-1) + "z"
		other := "a" + strings.Repeat("k", n-1)
		c := mustConverter(t, fmt.Sprintf("%s BIGINT, %s BIGINT", other, name), Options{})
		good := []string{
			`{"%[1]s":1,"%[2]s":2}`, `{"%[1]s":1,"%[2]s":2}`,
			`{"%[1]s" :1,"%[2]s": 2}`, `{ "%[1]s"	:1 , "%[2]s"
:2 }`,
			`{"%[2]s":2}`, `{"%[2]s":2}`, `{"%[1]s":1}`, `{"%[1]s":1}`,
			`{"%[1]s":1,"%[2]s":2}`, `{"\u0061%[3]s":1,"%[2]s":2}`,
		}
		bad := []string{
			`{"%[1]s":1,"%[2]sx":2}`, `{"%[1]s":1,"x%[2]s":2}`, `{"%[1]s":1,"%[4]s":2}`,
		}
		var rows [][]byte
		for _, f := range append(good, bad...) {
			rows = append(rows, fmt.Appendf(nil, f, other, name, other[1:], name[:n-1]))
		}
		res, err := c.ConvertJSON(rows)
		require.NoError(t, err)
		require.Len(t, res.RowErrors, len(bad), "key length %d", n)
		for k, e := range res.RowErrors {
			require.Equal(t, len(good)+k, e.Index, "key length %d", n)
			require.ErrorIs(t, e, ErrUnknownField, "key length %d, row %s", n, rows[e.Index])
		}
		require.EqualValues(t, len(good), res.Record.NumRows())
		for r, src := range res.SourceIndex {
			row := string(rows[src])
			for col, want := range []string{"1", "2"} {
				got := res.Record.Column(col).ValueStr(r)
				if strings.Contains(row, ":"+want) || strings.Contains(row, ": "+want) || strings.Contains(row, "\n:"+want) {
					require.Equal(t, want, got, "key length %d, row %s", n, row)
				} else {
					require.Equal(t, "(null)", got, "key length %d, row %s", n, row)
				}
			}
		}
		res.Record.Release()
	}
}

// TestCompactKeyWord checks the word compare directly: the key, closing
// quote and colon must all match, and too little input falls back.
func TestCompactKeyWord(t *testing.T) {
	var st state
	for _, tc := range []struct {
		in, name string
		want     bool
	}{
		{`"id":1234567`, "id", true},
		{`"id" :1234567`, "id", false},
		{`"idx":123456`, "id", false},
		{`"i":12345678`, "id", false},
		{`"id":1`, "id", false}, // fewer than 8 bytes after the quote
		{`"abcdef":123`, "abcdef", true},
		{`"abcdeg":123`, "abcdef", false},
		{`"abcdef" 123`, "abcdef", false},
		{`"abcdefg":12`, "abcdefg", false}, // longer than one word
	} {
		st.scanner.reset([]byte(tc.in))
		got := st.compactKey(newKeyWord(tc.name))
		require.Equal(t, tc.want, got, "%s as %q", tc.in, tc.name)
		if got {
			require.Equal(t, len(tc.name)+3, st.pos, tc.in)
		} else {
			require.Equal(t, 0, st.pos, tc.in)
		}
	}
}
