package arrowconv

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// stringPieces are the byte sequences the string scanner must notice
// wherever they fall: the runes and broken UTF-8 of utf8Pieces, DEL, control
// characters, and the quote, backslash and escapes.
var stringPieces = func() []string {
	var p []string
	for _, u := range utf8Pieces {
		p = append(p, u.bytes)
	}
	return append(p, "\x7f",
		"\x00", "\x01", "\x1f", "\n", "\t",
		`"`, `\`, `\"`, `\\`, `\n`, `\/`, `\u00e9`, `\u0000`, `\ud83d\ude00`, `\ud83d`, `\q`, `\u12`)
}()

// TestStringScanAtEveryOffset puts each piece at every offset of a 100-byte
// ASCII text (and of a 12-byte one, read as short or as long), so at every byte of an 8-byte word and of the scanner's 32-byte
// blocks and of the word and byte tails after them, with and without a
// non-ASCII rune first (so the UTF-8 check is already under way) or an
// escape first (so the piece lies after the string's first backslash, in
// the text unescape checks whole or run by run), and checks:
//   - scanPlain stops where the byte-at-a-time reference stops, with the
//     same UTF-8 verdict;
//   - readString and appendString (told the string is long or not) accept
//     the literal exactly when encoding/json does and the text is valid
//     UTF-8, with the same value;
//   - Convert puts the same value in a STRING column, or refuses the row.
func TestStringScanAtEveryOffset(t *testing.T) {
	c := mustConverter(t, "s STRING", Options{})
	var s scanner
	for _, n := range []int{12, 100} {
		for _, pc := range stringPieces {
			for _, lead := range []string{"", "é", "a€", `\n`, `é\"`, `\\`, `\u00e9\\`} {
				for off := len(lead); off+len(pc) <= n; off++ {
					body := []byte(strings.Repeat("x", n))
					copy(body, lead)
					copy(body[off:], pc)
					name := fmt.Sprintf("%q at offset %d after %q", pc, off, lead)

					got, gotValid := scanPlain(body, 0)
					want, wantValid := scanPlainBytewise(body, 0)
					require.Equal(t, want, got, "stop for %s", name)
					require.Equal(t, wantValid, gotValid, "UTF-8 verdict for %s", name)

					lit := append(append([]byte{'"'}, body...), '"')
					var wantStr string
					wantOK := json.Unmarshal(lit, &wantStr) == nil && utf8.Valid(lit)

					s.reset(lit)
					str, err := s.readString()
					closed := err == nil && s.pos == len(lit)
					require.Equal(t, wantOK, closed, "readString of %s: %v", name, err)
					if wantOK {
						require.Equal(t, wantStr, string(str), "readString of %s", name)
					}
					for _, long := range []bool{false, true} {
						s.reset(lit)
						dst, err := s.appendString([]byte("p:"), long)
						require.Equal(t, wantOK, err == nil && s.pos == len(lit), "appendString (long %v) of %s: %v", long, name, err)
						if wantOK {
							require.Equal(t, "p:"+wantStr, string(dst), "appendString (long %v) of %s", long, name)
						} else if err != nil {
							require.Equal(t, "p:", string(dst), "appendString (long %v) of %s left dst changed", long, name)
						}
					}

					row := append(append([]byte(`{"s":`), lit...), '}')
					res, err := c.ConvertJSON([][]byte{row})
					require.NoError(t, err, name)
					if wantOK {
						require.Empty(t, res.RowErrors, name)
						require.Equal(t, wantStr, res.Record.Column(0).ValueStr(0), "Convert of %s", name)
					} else {
						require.Len(t, res.RowErrors, 1, "Convert accepted %s", name)
					}
					res.Record.Release()
				}
			}
		}
	}
}
