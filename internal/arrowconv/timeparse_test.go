package arrowconv

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTimestampHeadAtEveryByte replaces each byte of the head of valid
// timestamps (the digits, the separators) in turn with bytes that are and
// are not digits or separators, bytes next to '0' and '9' and high bytes,
// and checks the word-at-a-time head parser agrees with the byte-wise one,
// and parseTimestamp with time.Parse on what both accept.
func TestTimestampHeadAtEveryByte(t *testing.T) {
	bases := []string{
		"2026-11-29T08:00:01.234Z", "0001-01-01T00:00:00Z", "9999-12-31t23:59:59.999999999+01:00",
		"2024-02-29 12:34:56-0130", "1970-01-01T00:00:00", "2023-02-28T19:09:59.5Z",
	}
	subst := []byte("0123456789/:-Tt Z.+\x00\x7f\x80\xff@`a\x2f\x3a")
	for _, base := range bases {
		for pos := range 19 {
			for _, c := range subst {
				b := []byte(base)
				b[pos] = c
				days, clock, ok := timestampHead(b, nil)
				wd, wc, wok := timestampHeadBytewise(b)
				require.Equal(t, wok, ok, "%q", b)
				require.Equal(t, wd, days, "%q", b)
				require.Equal(t, wc, clock, "%q", b)
				// And with the date cache holding the base's day: a
				// changed byte must miss it, or be in the clock.
				var dc dateCache
				_, _, baseOK := timestampHead([]byte(base), &dc)
				require.True(t, baseOK, base)
				cd, cc, cok := timestampHead(b, &dc)
				require.Equal(t, []any{wok, wd, wc}, []any{cok, cd, cc}, "%q after %q", b, base)

				us, zoned, err := parseTimestamp(b)
				layout := time.RFC3339Nano
				if !zonedText(b) {
					layout = "2006-01-02T15:04:05.999999999"
				}
				norm := []byte(string(b))
				if norm[10] == 't' || norm[10] == ' ' {
					norm[10] = 'T'
				}
				if len(norm) >= 5 && norm[len(norm)-5] != ':' && (norm[len(norm)-5] == '+' || norm[len(norm)-5] == '-') {
					norm = append(norm[:len(norm)-2:len(norm)-2], ':', norm[len(norm)-2], norm[len(norm)-1])
				}
				tm, terr := time.Parse(layout, string(norm))
				if terr != nil || !ok {
					require.Error(t, err, "%q (time.Parse: %v)", b, terr)
					continue
				}
				require.NoError(t, err, "%q", b)
				require.Equal(t, zonedText(b), zoned, "%q", b)
				require.Equal(t, tm.UnixMicro(), us, "%q", b)
			}
		}
	}
}

// zonedText reports whether timestamp text b ends in a zone or offset.
func zonedText(b []byte) bool {
	for _, c := range b[19:] {
		if c == 'Z' || c == 'z' || c == '+' || c == '-' {
			return true
		}
	}
	return false
}

// TestTimestampFractionDigits checks fractions of every length: up to six
// digits scaled to microseconds, more truncated, ten or none refused.
func TestTimestampFractionDigits(t *testing.T) {
	base := time.Date(2026, 11, 29, 8, 0, 1, 0, time.UTC).UnixMicro()
	for n, want := range []int64{-1, 100000, 120000, 123000, 123400, 123450, 123456, 123456, 123456, 123456, -1} {
		s := "2026-11-29T08:00:01"
		if n > 0 {
			s += "." + "1234567890"[:n]
		} else {
			s += "."
		}
		us, _, err := parseTimestamp([]byte(s + "Z"))
		if want < 0 {
			require.Error(t, err, s)
			continue
		}
		require.NoError(t, err, s)
		require.Equal(t, base+want, us, s)
	}
}

// TestTimestampDateCache parses a run of timestamps through one date cache,
// many on the same day and some on other days, invalid days among them, and
// checks each against the uncached parse.
func TestTimestampDateCache(t *testing.T) {
	var dc dateCache
	for _, s := range []string{
		"2024-02-29T00:00:00Z", "2024-02-29T23:59:59.5Z", "2023-02-29T00:00:00Z", "2024-02-29T12:00:00+02:00",
		"2024-02-30T00:00:00Z", "2024-03-01T00:00:00Z", "2024-03-01T25:00:00Z", "2024-03-01T01:00:00Z",
		"2024-03-11T01:00:00Z", "2024-13-01T01:00:00Z", "2024-03-01T01:00:00Z", "1970-01-01T00:00:00Z",
	} {
		us, zoned, err := parseTimestampCached([]byte(s), &dc)
		wus, wzoned, werr := parseTimestamp([]byte(s))
		require.Equal(t, werr == nil, err == nil, s)
		require.Equal(t, wus, us, s)
		require.Equal(t, wzoned, zoned, s)
	}
}

// timestampHeadBytewise is timestampHead a byte at a time, for any input:
// the plain parse the word-at-a-time one is checked against.
func timestampHeadBytewise(b []byte) (days, clock int64, ok bool) {
	days, ok = parseDate(b)
	if !ok || (b[10] != 'T' && b[10] != 't' && b[10] != ' ') {
		return 0, 0, false
	}
	hh, ok1 := digits(b, 11, 2)
	mm, ok2 := digits(b, 14, 2)
	ss, ok3 := digits(b, 17, 2)
	if !ok1 || !ok2 || !ok3 || b[13] != ':' || b[16] != ':' || hh > 23 || mm > 59 || ss > 59 {
		return 0, 0, false
	}
	return days, int64(hh*3600 + mm*60 + ss), true
}
