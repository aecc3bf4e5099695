package arrowconv

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// scanPlainBytewise is scanPlain one byte at a time, the reference for the
// word-at-a-time version.
func scanPlainBytewise(d []byte, i int) (int, bool) {
	j := i
	for ; j < len(d); j++ {
		if c := d[j]; c == '"' || c == '\\' || c < 0x20 {
			break
		}
	}
	return j, utf8.Valid(d[i:j])
}

// randomStringBody returns n bytes drawn mostly from the bytes that matter to
// the string scanner, so that every one lands at every offset of a word.
func randomStringBody(r *rand.Rand, n int) []byte {
	const alphabet = "\"\\\x00\x1f\x20\x21\x7f\x80\xbf\xc3\xa9\xe2\x82\xacab/nu0"
	b := make([]byte, n)
	rare := r.IntN(2) == 0 // long plain runs, now and then
	for i := range b {
		if rare && r.IntN(60) == 0 || !rare && r.IntN(3) == 0 {
			b[i] = alphabet[r.IntN(len(alphabet))]
		} else {
			b[i] = byte('a' + r.IntN(26))
		}
	}
	return b
}

func TestScanPlainMatchesBytewise(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 50_000 {
		d := randomStringBody(r, r.IntN(40)+r.IntN(2)*r.IntN(200))
		from := 0
		if len(d) > 0 {
			from = r.IntN(len(d))
		}
		got, gotValid := scanPlain(d, from)
		want, wantValid := scanPlainBytewise(d, from)
		require.Equal(t, want, got, "stop in %q from %d", d, from)
		require.Equal(t, wantValid, gotValid, "UTF-8 validity of %q from %d", d, from)
	}
}

// TestStringsMatchEncodingJSON reads random string literals with readString
// and appendString and checks them against encoding/json: the same strings
// accepted (ours also refuse invalid UTF-8, which encoding/json replaces), the
// same values, and dst left as it was on error.
func TestStringsMatchEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var s scanner
	for range 20_000 {
		lit := append(append([]byte{'"'}, randomStringBody(r, r.IntN(48)+r.IntN(2)*r.IntN(200))...), '"')
		var want string
		wantOK := json.Unmarshal(lit, &want) == nil && utf8.Valid(lit)

		s.reset(lit)
		got, err := s.readString()
		if wantOK {
			require.NoError(t, err, "%q", lit)
			require.Equal(t, want, string(got), "%q", lit)
		} else if err == nil {
			// The literal may end early at an unescaped quote: then it must
			// be a shorter valid literal followed by trailing bytes.
			require.Less(t, s.pos, len(lit), "accepted %q", lit)
		}
		readPos, readErr := s.pos, err

		s.reset(lit)
		dst, err := s.appendString([]byte("prefix"), false)
		require.Equal(t, readErr == nil, err == nil, "%q", lit)
		require.Equal(t, readPos, s.pos, "%q", lit)
		if err != nil {
			require.Equal(t, readErr.Error(), err.Error())
			require.Equal(t, "prefix", string(dst))
			continue
		}
		if wantOK {
			require.Equal(t, "prefix"+want, string(dst), "%q", lit)
		}
	}
}

// TestKeysRecognisedInPlace converts rows whose keys repeat the previous
// row's order, so that they are recognised in place, alongside spellings
// that must still go through the string reader: escaped, case-folded,
// duplicated and prefixed keys.
func TestKeysRecognisedInPlace(t *testing.T) {
	c := mustConverter(t, "id BIGINT NOT NULL, name STRING, `q\"x` STRING", Options{})
	res, err := c.ConvertJSON([][]byte{
		[]byte(`{"id": 1, "name": "a"}`),
		[]byte(`{"id": 2, "name": "b"}`),
		[]byte(`{"\u0069d": 3, "nam\u0065": "c"}`),
		[]byte(`{"id": 4, "NAME": "d"}`),
		[]byte(`{"id": 5, "id": 6}`),
		[]byte(`{"id": 7, "id": 8}`),
		[]byte(`{"idx": 9}`),
		[]byte(`{"id": 10, "q\"x": "e"}`),
		[]byte(`{"id": 11, "q\"x": "f"}`),
	})
	require.NoError(t, err)
	defer res.Record.Release()
	require.Equal(t, []int{0, 1, 2, 3, 7, 8}, res.SourceIndex)
	require.Len(t, res.RowErrors, 3)
	for k, idx := range []int{4, 5} {
		e := res.RowErrors[k]
		require.Equal(t, idx, e.Index)
		require.Equal(t, "id", e.Column)
		require.ErrorIs(t, e, ErrDuplicateField)
	}
	require.Equal(t, "idx", res.RowErrors[2].Column)
	require.ErrorIs(t, res.RowErrors[2], ErrUnknownField)
	require.Equal(t, 1, res.Reconciled[ReconcileFieldNameCase])
	names := res.Record.Column(1)
	require.Equal(t, "c", names.ValueStr(2))
	require.Equal(t, "d", names.ValueStr(3))
	require.Equal(t, "f", res.Record.Column(2).ValueStr(5))
}

// BenchmarkScanPlainLong and BenchmarkScanPlainShort time the string scan on
// a 9 KB text value and on a short value.
func BenchmarkScanPlainLong(b *testing.B) {
	body := []byte(lorem(5, 9200, false) + `"`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if i, _ := scanPlain(body, 0); i != len(body)-1 {
			b.Fatal(i)
		}
	}
}

func BenchmarkScanPlainShort(b *testing.B) {
	body := []byte(`user-001234","event"`)
	b.SetBytes(12)
	for b.Loop() {
		if i, _ := scanPlain(body, 0); i != 11 {
			b.Fatal(i)
		}
	}
}

// TestScanPlainUTF8 checks the scan's UTF-8 verdict on long text of valid
// runes of every width, at every offset of a word, now and then broken (a
// rune cut short, a stray continuation byte) or ended by a control
// character, a quote or a backslash.
func TestScanPlainUTF8(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	runes := []string{"a", "é", "€", "𝄞", " ", "~", "\x7f"}
	breaks := []string{"\xc3", "\xa9", "\xe2\x82", "\xf0\x9d\x84", "\x1f", "\"", "\\", "\xed\xa0\x80", "\xc0\xaf"}
	for range 20_000 {
		var b []byte
		n := r.IntN(300)
		for len(b) < n {
			b = append(b, runes[r.IntN(len(runes))]...)
			if r.IntN(200) == 0 {
				b = append(b, breaks[r.IntN(len(breaks))]...)
			}
		}
		from := r.IntN(len(b) + 1)
		got, gotValid := scanPlain(b, from)
		want, wantValid := scanPlainBytewise(b, from)
		require.Equal(t, want, got, "stop in %q from %d", b, from)
		require.Equal(t, wantValid, gotValid, "UTF-8 validity of %q from %d", b, from)
	}
}

// BenchmarkScanPlainTimestamp times the scan on a 24-byte value, the size of
// an RFC 3339 timestamp with milliseconds.
func BenchmarkScanPlainTimestamp(b *testing.B) {
	body := []byte(`2026-11-29T08:00:01.234Z","user_id"`)
	b.SetBytes(24)
	for b.Loop() {
		if i, _ := scanPlain(body, 0); i != 24 {
			b.Fatal(i)
		}
	}
}
