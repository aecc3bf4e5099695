package arrowconv

import (
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"
)

// Delta's DATE and TIMESTAMP range: 0001-01-01 through 9999-12-31.
const (
	minDays   = -719162 // 0001-01-01
	maxDays   = 2932896 // 9999-12-31
	usPerDay  = 86400 * 1_000_000
	minMicros = minDays * usPerDay
	maxMicros = (maxDays+1)*usPerDay - 1
)

// daysFromCivil returns the days since 1970-01-01 of a proleptic Gregorian
// date (Howard Hinnant's algorithm), for years 1..9999.
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

func daysIn(y, m int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

func digits(b []byte, i, n int) (int, bool) {
	if i+n > len(b) {
		return 0, false
	}
	v := 0
	for _, c := range b[i : i+n] {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// parseDate parses "YYYY-MM-DD" at b[0:10] and returns days since the epoch.
func parseDate(b []byte) (int64, bool) {
	y, ok1 := digits(b, 0, 4)
	m, ok2 := digits(b, 5, 2)
	d, ok3 := digits(b, 8, 2)
	if !ok1 || !ok2 || !ok3 || b[4] != '-' || b[7] != '-' {
		return 0, false
	}
	return civilDays(y, m, d)
}

// civilDays returns the days since the epoch of year y, month m, day d when
// they name a real date of years 1..9999 (as parsed, y has at most four
// digits), and false otherwise.
func civilDays(y, m, d int) (int64, bool) {
	if y < 1 || m < 1 || m > 12 || d < 1 || d > daysIn(y, m) {
		return 0, false
	}
	return daysFromCivil(y, m, d), true
}

// pow10Micro[n] scales a fraction of n digits (n <= 6) to microseconds.
var pow10Micro = [7]int64{1_000_000, 100_000, 10_000, 1000, 100, 10, 1}

// timestampHead parses "YYYY-MM-DD(T|t| )HH:MM:SS" at b[0:19] (len(b) >= 19)
// and returns its days since the epoch and seconds into the day. The common
// layout is checked and read three words at a time (every timestamp of every
// row passes here); a digit or separator out of place fails it, as it fails
// a byte-wise parse (timestampHeadBytewise in the tests, the oracle).
//
// dc, when not nil, remembers the last date read: the rows of a batch mostly
// share a day, and the calendar arithmetic is then skipped.
func timestampHead(b []byte, dc *dateCache) (days, clock int64, ok bool) {
	const (
		zeros = swarLSB * '0'
		// Digit bytes of "YYYY-MM-" and of "DDTHH:MM", and of
		// "HH:MM:SS" read from b[11].
		digitsA = 0x00ffff00ffffffff
		digitsB = 0xffff00ffff00ffff
		digitsC = 0xffff000000000000
		nibbles = swarLSB * 0xf0
	)
	a := binary.LittleEndian.Uint64(b[0:8])
	c := binary.LittleEndian.Uint64(b[8:16])
	e := binary.LittleEndian.Uint64(b[11:19])
	// Each digit byte xor '0' is 0..9 exactly when it is a digit: no high
	// nibble, and none after adding 6 (no carry crosses bytes of 0..15).
	xa, xc, xe := (a^zeros)&digitsA, (c^zeros)&digitsB, (e^zeros)&digitsC
	if (xa|xc|xe)&nibbles != 0 || ((xa+swarLSB*6)&digitsA|(xc+swarLSB*6)&digitsB|(xe+swarLSB*6)&digitsC)&nibbles != 0 ||
		b[4] != '-' || b[7] != '-' || b[13] != ':' || b[16] != ':' || (b[10] != 'T' && b[10] != 't' && b[10] != ' ') {
		return 0, 0, false
	}
	dig := func(x uint64, k int) int { return int(x >> (8 * k) & 0xf) }
	hh := dig(xc, 3)*10 + dig(xc, 4)
	mm := dig(xc, 6)*10 + dig(xc, 7)
	ss := dig(xe, 6)*10 + dig(xe, 7)
	if hh > 23 || mm > 59 || ss > 59 {
		return 0, 0, false
	}
	clock = int64(hh*3600 + mm*60 + ss)
	if dc != nil && dc.set && dc.ym == a && dc.d == uint16(c) {
		return dc.days, clock, true
	}
	y := dig(xa, 0)*1000 + dig(xa, 1)*100 + dig(xa, 2)*10 + dig(xa, 3)
	m := dig(xa, 5)*10 + dig(xa, 6)
	d := dig(xc, 0)*10 + dig(xc, 1)
	if days, ok = civilDays(y, m, d); !ok {
		return 0, 0, false
	}
	if dc != nil {
		*dc = dateCache{set: true, ym: a, d: uint16(c), days: days}
	}
	return days, clock, true
}

// dateCache is the last valid date timestampHead read: the raw bytes of
// "YYYY-MM-" (ym) and "DD" (d), and its days since the epoch.
type dateCache struct {
	set  bool
	d    uint16
	ym   uint64
	days int64
}

// parseTimestamp parses an RFC 3339 timestamp, "YYYY-MM-DD(T|t| )HH:MM:SS
// [.fraction][Z|z|±HH:MM|±HHMM]", with the zone optional. It returns
// microseconds since the epoch of the UTC instant (or, without a zone, of the
// wall-clock time read as UTC) and whether a zone was present. Fractions
// beyond microseconds are truncated.
func parseTimestamp(b []byte) (us int64, zoned bool, err error) {
	return parseTimestampCached(b, nil)
}

// parseTimestampCached is parseTimestamp remembering the last date in dc.
func parseTimestampCached(b []byte, dc *dateCache) (us int64, zoned bool, err error) {
	bad := func() (int64, bool, error) {
		return 0, false, fmt.Errorf("%s is not an RFC 3339 timestamp (2006-01-02T15:04:05[.999999][Z|±07:00])", Quote(b))
	}
	if len(b) < 19 {
		return bad()
	}
	days, clock, ok := timestampHead(b, dc)
	if !ok {
		return bad()
	}
	i := 19
	var frac int64
	if i < len(b) && b[i] == '.' {
		i++
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if i-start < 6 {
				frac = frac*10 + int64(b[i]-'0')
			}
			i++
		}
		n := i - start
		if n == 0 || n > 9 {
			return bad()
		}
		frac *= pow10Micro[min(n, 6)]
	}
	var offset int64 // seconds east of UTC
	if i < len(b) {
		zoned = true
		switch c := b[i]; {
		case c == 'Z' || c == 'z':
			i++
		case c == '+' || c == '-':
			oh, okh := digits(b, i+1, 2)
			if !okh {
				return bad()
			}
			j := i + 3
			if j < len(b) && b[j] == ':' {
				j++
			}
			om, okm := digits(b, j, 2)
			if !okm || oh > 23 || om > 59 {
				return bad()
			}
			offset = int64(oh*3600 + om*60)
			if c == '-' {
				offset = -offset
			}
			i = j + 2
		default:
			return bad()
		}
		if i != len(b) {
			return bad()
		}
	}
	secs := days*86400 + clock - offset
	us = secs*1_000_000 + frac
	if us < minMicros || us > maxMicros {
		return 0, zoned, fmt.Errorf("%s is outside the supported range 0001-01-01..9999-12-31", Quote(b))
	}
	return us, zoned, nil
}

// timeMicros converts a Go time (a Bloblang timestamp) to microseconds since
// the epoch: the instant for a TIMESTAMP column, its UTC wall time for a
// TIMESTAMP_NTZ column (the caller decides whether that is allowed).
func timeMicros(t time.Time) (int64, error) {
	us := t.UnixMicro()
	if us < minMicros || us > maxMicros {
		return 0, kerr(ErrOutOfRange, "time %s is outside the supported range 0001-01-01..9999-12-31", t.Format(time.RFC3339Nano))
	}
	return us, nil
}

// textOf views s as read-only bytes, without the copy []byte(s) makes, for
// the parsers here that only read their input (a timestamp or date string
// of every row would otherwise cost an allocation).
func textOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
