package arrowconv

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds JSON nesting inside VARIANT values and serialised nested
// values, so that a hostile message cannot exhaust the stack.
const maxDepth = 1000

// scanner is a minimal pull tokenizer over one JSON document. It validates as
// it goes and never builds a generic value unless asked to (decodeAny, used
// only on the rare nested_to_string path). Strings without escapes are returned
// as sub-slices of the input; strings with escapes are unescaped into buf and
// are valid only until the next string is read.
type scanner struct {
	data  []byte
	pos   int
	buf   []byte
	quote quoteCache
}

func (s *scanner) reset(data []byte) {
	s.data = data
	s.pos = 0
	s.quote = quoteCache{}
}

// syntaxError reports malformed JSON at a byte offset of the message.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.off, e.msg)
}

func (e *syntaxError) Unwrap() error { return ErrInvalidJSON }

func (s *scanner) errorf(format string, args ...any) error {
	return &syntaxError{off: s.pos, msg: fmt.Sprintf(format, args...)}
}

// peek skips whitespace and returns the next byte without consuming it, or 0
// at the end of input. A NUL byte in the input also reads as 0: atEnd tells
// the two apart wherever it matters.
func (s *scanner) peek() byte {
	d := s.data
	for s.pos < len(d) {
		switch c := d[s.pos]; c {
		case ' ', '\n', '\t', '\r':
			s.pos++
		default:
			return c
		}
	}
	return 0
}

// atEnd skips whitespace and reports whether the input is exhausted.
func (s *scanner) atEnd() bool {
	s.peek()
	return s.pos >= len(s.data)
}

// expect consumes byte c after optional whitespace.
func (s *scanner) expect(c byte) error {
	if got := s.peek(); got != c {
		if s.atEnd() {
			return s.errorf("unexpected end of input, expected %q", c)
		}
		return s.errorf("expected %q, got %q", c, got)
	}
	s.pos++
	return nil
}

// notValue is the error for byte c at pos, which starts no JSON value. NaN
// and Infinity, which some encoders write, get a message of their own.
func (s *scanner) notValue(c byte) error {
	if lit := s.nonFinite(); lit != "" {
		return s.nonFiniteError(lit)
	}
	if s.atEnd() {
		return s.errorf("unexpected end of input, expected a value")
	}
	return s.errorf("unexpected %q, expected a value", c)
}

// nonFinite returns the non-finite float literal (NaN, Infinity, -Infinity,
// +Infinity) starting at pos, or "".
func (s *scanner) nonFinite() string {
	rest := s.data[s.pos:]
	for _, lit := range [...]string{"NaN", "Infinity", "-Infinity", "+Infinity"} {
		if len(rest) >= len(lit) && string(rest[:len(lit)]) == lit {
			return lit
		}
	}
	return ""
}

func (s *scanner) nonFiniteError(lit string) error {
	return s.errorf("%s is not JSON: JSON has no NaN or Infinity; send null, or the string %q into a FLOAT or DOUBLE column", lit, lit)
}

// literal consumes the literal lit ("null", "true", "false") at pos.
func (s *scanner) literal(lit string) error {
	end := s.pos + len(lit)
	if end > len(s.data) || string(s.data[s.pos:end]) != lit {
		return s.errorf("invalid literal, expected %s", lit)
	}
	s.pos = end
	return nil
}

// readString reads the string starting at pos (which holds '"') and returns
// its unescaped bytes: a sub-slice of the input when the string has no
// escapes, else scanner.buf, valid until the next string is read.
func (s *scanner) readString() ([]byte, error) {
	d := s.data
	start := s.pos + 1
	i, valid := scanPlainQ(d, start, &s.quote)
	if i < len(d) && d[i] == '"' {
		s.pos = i + 1
		if !valid {
			return nil, &syntaxError{off: start, msg: "invalid UTF-8 in string"}
		}
		return d[start:i], nil
	}
	b, err := s.unescape(s.buf[:0], start, i, valid)
	s.buf = b
	if err != nil {
		return nil, err
	}
	return b, nil
}

// plainKey consumes the string at pos (which holds '"') when its raw text is
// exactly name, which must be plain (no quote, backslash or control
// character, valid UTF-8): then the text needs no unescaping or checking.
func (s *scanner) plainKey(name string) bool {
	start := s.pos + 1
	end := start + len(name)
	if end >= len(s.data) || s.data[end] != '"' || string(s.data[start:end]) != name {
		return false
	}
	s.pos = end + 1
	return true
}

// appendString reads the string starting at pos (which holds '"') and appends
// its unescaped bytes to dst: one bulk copy when it has no escapes, and no
// detour through scanner.buf when it has. On error dst is returned as it was.
// long tells that the string is likely long (its column's last value was):
// then the word-at-a-time look at its first 32 bytes, which only pays for
// short strings, is skipped.
func (s *scanner) appendString(dst []byte, long bool) ([]byte, error) {
	d := s.data
	start := s.pos + 1
	var i int
	var valid bool
	if long {
		i, valid = scanRest(d, start, start, 0, &s.quote)
	} else {
		i, valid = scanPlainQ(d, start, &s.quote)
	}
	if i < len(d) && d[i] == '"' {
		s.pos = i + 1
		if !valid {
			return dst, &syntaxError{off: start, msg: "invalid UTF-8 in string"}
		}
		return append(dst, d[start:i]...), nil
	}
	out, err := s.unescape(dst, start, i, valid)
	if err != nil {
		return dst, err
	}
	return out, nil
}

// unescape appends to dst the string whose contents start at start, of which
// d[start:i] are plain bytes, and consumes it up to its closing quote. valid
// reports whether those plain bytes are valid UTF-8. Each run of plain bytes
// is checked on its own: since an escape always yields ASCII or a whole
// encoded rune, the unescaped string is valid UTF-8 exactly when every run
// is.
//
// A string whose raw text holds no control character and is valid UTF-8
// (cleanEnd), which is most strings with escapes, is checked so once, whole:
// then only backslashes are searched for between escapes, not every run
// scanned for control characters and UTF-8 on its own (for a long text with
// an escape every few sentences, that came to a third of its cost). Any other
// string is scanned run by run, so errors are found, and reported, in the
// same order.
func (s *scanner) unescape(dst []byte, start, i int, valid bool) ([]byte, error) {
	d := s.data
	dst = append(dst, d[start:i]...)
	q := -1 // the closing quote, when d[i:q] is clean
	if valid && i < len(d) && d[i] == '\\' {
		q = s.cleanEnd(i)
	}
	for {
		if i >= len(d) {
			s.pos = len(d)
			return dst, s.errorf("unterminated string")
		}
		switch c := d[i]; {
		case c == '"':
			s.pos = i + 1
			if !valid {
				return dst, &syntaxError{off: start, msg: "invalid UTF-8 in string"}
			}
			return dst, nil
		case c == '\\':
			if i+1 >= len(d) {
				s.pos = i
				return dst, s.errorf("unterminated string")
			}
			e := d[i+1]
			if u := simpleEscapes[e]; u != 0 {
				dst = append(dst, u)
				i += 2
				break
			}
			if e != 'u' {
				s.pos = i
				return dst, s.errorf("invalid escape \\%c", e)
			}
			r, ok := hex4(d, i+2)
			if !ok {
				s.pos = i
				return dst, s.errorf("invalid \\u escape")
			}
			i += 6
			if utf16.IsSurrogate(r) {
				r2, ok2 := rune(-1), false
				if i+1 < len(d) && d[i] == '\\' && d[i+1] == 'u' {
					r2, ok2 = hex4(d, i+2)
				}
				if dec := utf16.DecodeRune(r, r2); ok2 && dec != utf8.RuneError {
					r = dec
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // scanPlain stops only at a quote, a backslash or a control character
			s.pos = i
			return dst, s.errorf("control character %#x in string", c)
		}
		if i <= q { // clean: the run ends at the next backslash or at q
			j := q
			if k := bytes.IndexByte(d[i:q], '\\'); k >= 0 {
				j = i + k
			}
			dst = append(dst, d[i:j]...)
			i = j
			continue
		}
		j, ok := scanPlainQ(d, i, &s.quote)
		valid = valid && ok
		dst = append(dst, d[i:j]...)
		i = j
	}
}

// cleanEnd returns the closing quote q of the string whose first backslash
// is at i when d[i:q] holds no control character and is valid UTF-8, else -1
// (also when the string is unterminated). The closing quote is the first
// one after i preceded by an even run of backslashes: each pair in the run
// is an escaped backslash, and a run cannot start inside an escape, since
// the byte before it is no backslash. Escapes are ASCII and printable, so
// the raw text is valid UTF-8 and free of control characters exactly when
// every run of plain bytes between escapes is. No escape reaches past q (a
// \u escape's four bytes are hex digits, and \" is an odd run), so unescape
// meets q as the closing quote, or stops first at an invalid escape.
func (s *scanner) cleanEnd(i int) int {
	d := s.data
	q := i
	for {
		k := bytes.IndexByte(d[q:], '"')
		if k < 0 {
			return -1
		}
		q += k
		n := 0
		for p := q - 1; p >= i && d[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			break
		}
		q++
	}
	if j, h := firstControl(d[:q], i); j != q || h && !validUTF8(d[i:q]) {
		return -1
	}
	return q
}

// tailWord returns the last r (1..7) bytes of d, which holds at least 8, as
// the low bytes of a little-endian word, zeros above: the word ending with d,
// shifted right past the bytes before them. It lets a word-at-a-time scan
// finish its last bytes with one more step instead of a byte loop.
func tailWord(d []byte, r int) uint64 {
	return binary.LittleEndian.Uint64(d[len(d)-8:]) >> (8 * (8 - r))
}

// Word-at-a-time ("SWAR") constants: a byte of ones and of high bits.
const (
	swarLSB = 0x0101010101010101
	swarMSB = 0x8080808080808080
)

// scanPlain returns the index j of the first byte at or after i that ends a
// run of plain string bytes (a quote, a backslash or a control character), or
// len(d), and whether d[i:j] is valid UTF-8.
//
// The first 32 bytes are tested a word at a time (stopBytes), which settles
// keys, short values and timestamps. A longer string is searched for its quote and for a
// backslash with bytes.IndexByte, which the runtime vectorises, and only the
// bytes before the first of the two are then checked, 32 at a time, for
// control characters (firstControl), so that long text costs little more
// than the copy that follows.
func scanPlain(d []byte, i int) (int, bool) {
	return scanPlainQ(d, i, &quoteCache{})
}

// quoteCache remembers where the last search for a quote, from index from,
// found one (at; len(d) when there was none): that is the next quote for
// every i in from..at. A string with many escapes is scanned run by run, and
// each run would otherwise search again up to the same closing quote. The
// zero value is valid for no i > 0, and no string's contents start at 0.
type quoteCache struct{ from, at int }

// scanPlainQ is scanPlain with a quote cache for d.
func scanPlainQ(d []byte, i int, qc *quoteCache) (int, bool) {
	start := i
	var hi uint64
	for range 4 {
		if i+8 > len(d) {
			for ; i < len(d); i++ {
				c := d[i]
				if c == '"' || c == '\\' || c < 0x20 {
					break
				}
				hi |= uint64(c)
			}
			return i, hi&swarMSB == 0 || utf8.Valid(d[start:i])
		}
		w := binary.LittleEndian.Uint64(d[i:])
		if m := stopBytes(w); m != 0 {
			j := i + bits.TrailingZeros64(m)>>3
			return j, (hi|w)&swarMSB == 0 || utf8.Valid(d[start:j])
		}
		hi |= w
		i += 8
	}
	return scanRest(d, start, i, hi, qc)
}

// scanRest is scanPlainQ past the bytes d[start:i] it found plain, whose
// bytes or'ed together are hi.
func scanRest(d []byte, start, i int, hi uint64, qc *quoteCache) (int, bool) {
	if i < qc.from || i > qc.at {
		qc.from, qc.at = i, len(d)
		if q := bytes.IndexByte(d[i:], '"'); q >= 0 {
			qc.at = i + q
		}
	}
	end := qc.at
	if b := bytes.IndexByte(d[i:end], '\\'); b >= 0 {
		end = i + b
	}
	j, h := firstControl(d[:end], i)
	// One more pass for UTF-8, only over text with a non-ASCII byte:
	// validUTF8 skips ASCII 32 bytes at a time, and checking runes inside
	// the scan loop measured slower.
	return j, (hi&swarMSB == 0 && !h) || validUTF8(d[start:j])
}

// firstControl returns the index of the first control character at or after
// i, or len(d), and whether a byte >= 0x80 comes before it (or may: it may
// report one in the same 8 bytes past it). 32 bytes per step are tested for
// printable ASCII with one branch, which settles most text; a block that
// fails is tested for control characters as in stopBytes, and otherwise only
// noted as holding a non-ASCII byte.
func firstControl(d []byte, i int) (int, bool) {
	const k = swarLSB * 0x20
	var acc uint64
	for ; i+32 <= len(d); i += 32 {
		b := d[i : i+32 : i+32]
		w1 := binary.LittleEndian.Uint64(b[0:])
		w2 := binary.LittleEndian.Uint64(b[8:])
		w3 := binary.LittleEndian.Uint64(b[16:])
		w4 := binary.LittleEndian.Uint64(b[24:])
		// Printable ASCII throughout (every byte in 0x20..0x7f: no byte
		// borrows in w - 0x20…, so neither it nor w has a high bit set)
		// settles a block with one test; otherwise it holds a control
		// character or a byte >= 0x80.
		if ((w1-k)|w1|(w2-k)|w2|(w3-k)|w3|(w4-k)|w4)&swarMSB != 0 {
			if ((w1-k)&^w1|(w2-k)&^w2|(w3-k)&^w3|(w4-k)&^w4)&swarMSB != 0 {
				break // the loop below finds it
			}
			acc = swarMSB
		}
	}
	for ; i+8 <= len(d); i += 8 {
		w := binary.LittleEndian.Uint64(d[i:])
		acc |= w
		if m := ((w - k) &^ w) & swarMSB; m != 0 {
			return i + bits.TrailingZeros64(m)>>3, acc&swarMSB != 0
		}
	}
	if r := len(d) - i; r > 0 && len(d) >= 8 {
		// The last 1..7 bytes in one word (the bytes before i are checked
		// already, or not the string's). The zero bytes shifted in flag as
		// control characters above every real one, so only a flag below
		// them counts.
		w := tailWord(d, r)
		acc |= w
		if m := ((w - k) &^ w) & swarMSB; m != 0 {
			if at := bits.TrailingZeros64(m) >> 3; at < r {
				return i + at, acc&swarMSB != 0
			}
		}
		return len(d), acc&swarMSB != 0
	}
	for ; i < len(d); i++ {
		if d[i] < 0x20 {
			break
		}
		acc |= uint64(d[i])
	}
	return i, acc&swarMSB != 0
}

// stopBytes flags (in its high bit) each byte of w that is a quote, a
// backslash or a control character; only the lowest flag is exact.
func stopBytes(w uint64) uint64 {
	q := w ^ (swarLSB * '"')
	b := w ^ (swarLSB * '\\')
	return (((q - swarLSB) &^ q) | ((b - swarLSB) &^ b) | ((w - swarLSB*0x20) &^ w)) & swarMSB
}

// simpleEscapes maps the byte after a backslash to the byte it stands for;
// zero for \u and invalid escapes.
var simpleEscapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, c := range d[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// readTextOrNumber reads the JSON string or number starting with c (the byte
// at pos), for columns that take either: a string's unescaped bytes (as
// readString) with quoted true, or a number's text. ok is false, with nothing
// consumed, when c starts neither.
func (s *scanner) readTextOrNumber(c byte) (text []byte, quoted, ok bool, err error) {
	switch {
	case c == '"':
		text, err = s.readString()
		return text, true, true, err
	case c == '-' || (c >= '0' && c <= '9'):
		text, _, err = s.readNumber()
		return text, false, true, err
	}
	return nil, false, false, nil
}

// readIntFast reads the number at pos in one pass when it is a plain integer
// of 1 to 18 digits (no fraction, no exponent, no leading zero), the common
// case, and returns its value and text. Otherwise it consumes nothing and ok
// is false: readNumber then reads it, and reports what is wrong with it.
func (s *scanner) readIntFast() (v int64, text []byte, ok bool) {
	d := s.data
	i := s.pos
	neg := i < len(d) && d[i] == '-'
	if neg {
		i++
	}
	j := i
	for ; j < len(d); j++ {
		c := d[j] - '0'
		if c > 9 {
			break
		}
		v = v*10 + int64(c)
	}
	switch n := j - i; {
	case n == 0 || n > 18 || n > 1 && d[i] == '0':
		return 0, nil, false
	case j < len(d) && (d[j] == '.' || d[j] == 'e' || d[j] == 'E'):
		return 0, nil, false
	}
	if neg {
		v = -v
	}
	text = d[s.pos:j]
	s.pos = j
	return v, text, true
}

// readNumber reads the number at pos and returns its text; integer reports
// whether it has neither a fraction nor an exponent.
func (s *scanner) readNumber() (text []byte, integer bool, err error) {
	d := s.data
	start := s.pos
	i := start
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		if lit := s.nonFinite(); lit != "" {
			return nil, false, s.nonFiniteError(lit)
		}
		s.pos = i
		return nil, false, s.errorf("invalid number")
	}
	integer = true
	if i < len(d) && d[i] == '.' {
		integer = false
		i++
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == j {
			s.pos = i
			return nil, false, s.errorf("invalid number: no digits after '.'")
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		integer = false
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == j {
			s.pos = i
			return nil, false, s.errorf("invalid number: no digits in exponent")
		}
	}
	s.pos = i
	return d[start:i], integer, nil
}

// decodeAny decodes the value at pos into the generic form ToJSON accepts:
// map[string]any, []any, string, json.Number, bool or nil. Later duplicate
// keys win, as with encoding/json. Only the nested_to_string path uses it.
func (s *scanner) decodeAny(depth int) (any, error) {
	if depth > maxDepth {
		return nil, s.errorf("nesting deeper than %d", maxDepth)
	}
	switch c := s.peek(); c {
	case '{':
		s.pos++
		m := map[string]any{}
		if s.peek() == '}' {
			s.pos++
			return m, nil
		}
		for {
			if s.peek() != '"' {
				return nil, s.errorf("expected object key")
			}
			k, err := s.readString()
			if err != nil {
				return nil, err
			}
			key := string(k)
			if err := s.expect(':'); err != nil {
				return nil, err
			}
			v, err := s.decodeAny(depth + 1)
			if err != nil {
				return nil, err
			}
			m[key] = v
			switch s.peek() {
			case ',':
				s.pos++
			case '}':
				s.pos++
				return m, nil
			default:
				return nil, s.errorf("expected ',' or '}'")
			}
		}
	case '[':
		s.pos++
		a := []any{}
		if s.peek() == ']' {
			s.pos++
			return a, nil
		}
		for {
			v, err := s.decodeAny(depth + 1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
			switch s.peek() {
			case ',':
				s.pos++
			case ']':
				s.pos++
				return a, nil
			default:
				return nil, s.errorf("expected ',' or ']'")
			}
		}
	case '"':
		str, err := s.readString()
		return string(str), err
	case 't':
		return true, s.literal("true")
	case 'f':
		return false, s.literal("false")
	case 'n':
		return nil, s.literal("null")
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		num, _, err := s.readNumber()
		return json.Number(num), err
	default:
		return nil, s.notValue(c)
	}
}

// isValueStart reports whether byte c can start a JSON value.
func isValueStart(c byte) bool {
	switch c {
	case '{', '[', '"', 't', 'f', 'n', '-':
		return true
	}
	return c >= '0' && c <= '9'
}

// jsonKind names the kind of the JSON value starting with byte c (one for
// which isValueStart holds), for error messages.
func jsonKind(c byte) string {
	switch c {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}
