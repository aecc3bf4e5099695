package arrowconv

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxQuoted is the most bytes of a value (or a field name) an error quotes:
// a message's 1 MB value must not be repeated in full in every row error,
// dead letter, log line and HTTP response carrying it.
const MaxQuoted = 256

// Quote quotes v for an error message as %q does, cut to its first
// MaxQuoted bytes (at a rune boundary) followed by its length when longer:
// "abc…"… (1048576 bytes).
func Quote[T ~string | ~[]byte](v T) string {
	if len(v) <= MaxQuoted {
		return strconv.Quote(string(v))
	}
	cut := MaxQuoted
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return strconv.Quote(string(v[:cut])) + fmt.Sprintf("… (%d bytes)", len(v))
}
