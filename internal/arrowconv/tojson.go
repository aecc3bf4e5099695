package arrowconv

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/parquet/variant"
)

// ToJSON serialises v as compact JSON with object keys in sorted (byte) order,
// so equal values always give identical text. It is the one serialiser of the
// project: the converter uses it for nested_to_string and the plugin exposes
// it to Bloblang, so a manual to_json(...) and the automatic reconciliation
// agree byte for byte.
//
// It accepts the values Benthos messages hold: nil, bool, string, json.Number,
// Go integers and floats, time.Time (RFC 3339 with nanoseconds, as
// encoding/json), []byte (standard base64, as encoding/json), map[string]any,
// []any and variant.Value (a VARIANT read back from its metadata and value
// binaries, see VariantJSON). Other values go through encoding/json and are then re-serialised
// canonically. Unlike encoding/json, '<', '>' and '&' are not escaped. NaN and
// infinities are errors.
func ToJSON(v any) ([]byte, error) {
	return appendJSON(nil, v, 0)
}

// AppendJSON appends the ToJSON text of v to dst, so a caller writing many
// rows (the zerobus_replay input) can build them into one buffer.
func AppendJSON(dst []byte, v any) ([]byte, error) {
	return appendJSON(dst, v, 0)
}

// AppendJSONString appends the ToJSON text of s to dst without boxing s in
// an interface (one allocation per value saved on hot paths).
func AppendJSONString(dst []byte, s string) []byte { return appendQuoted(dst, s) }

// AppendJSONInt appends the ToJSON text of n to dst without boxing it.
func AppendJSONInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }

// AppendJSONFloat appends the ToJSON text of f, a float of the given bit
// size (32 or 64), to dst without boxing it; NaN and infinities are errors.
func AppendJSONFloat(dst []byte, f float64, bits int) ([]byte, error) {
	return appendFloat(dst, f, bits)
}

func appendJSON(dst []byte, v any, depth int) ([]byte, error) {
	if depth > maxDepth {
		return dst, fmt.Errorf("value nested deeper than %d", maxDepth)
	}
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		return strconv.AppendBool(dst, v), nil
	case string:
		return appendQuoted(dst, v), nil
	case json.Number:
		if _, _, ok := parseNumLit(textOf(string(v)), nil, false); !ok {
			return dst, fmt.Errorf("json.Number %s is not a valid JSON number", Quote(string(v)))
		}
		return append(dst, v...), nil
	case int:
		return strconv.AppendInt(dst, int64(v), 10), nil
	case int8:
		return strconv.AppendInt(dst, int64(v), 10), nil
	case int16:
		return strconv.AppendInt(dst, int64(v), 10), nil
	case int32:
		return strconv.AppendInt(dst, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(dst, v, 10), nil
	case uint:
		return strconv.AppendUint(dst, uint64(v), 10), nil
	case uint8:
		return strconv.AppendUint(dst, uint64(v), 10), nil
	case uint16:
		return strconv.AppendUint(dst, uint64(v), 10), nil
	case uint32:
		return strconv.AppendUint(dst, uint64(v), 10), nil
	case uint64:
		return strconv.AppendUint(dst, v, 10), nil
	case float32:
		return appendFloat(dst, float64(v), 32)
	case float64:
		return appendFloat(dst, v, 64)
	case time.Time:
		if y := v.Year(); y < 0 || y > 9999 {
			return dst, fmt.Errorf("time %v: year outside [0,9999]", v)
		}
		dst = append(dst, '"')
		dst = v.AppendFormat(dst, time.RFC3339Nano)
		return append(dst, '"'), nil
	case []byte:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, v)
		return append(dst, '"'), nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendQuoted(dst, k)
			dst = append(dst, ':')
			var err error
			if dst, err = appendJSON(dst, v[k], depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	case variant.Value:
		return appendVariantChecked(dst, v, depth)
	case []any:
		dst = append(dst, '[')
		for i, e := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendJSON(dst, e, depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return append(dst, "null"...), nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	s := scanner{data: raw}
	generic, err := s.decodeAny(depth)
	if err != nil {
		return dst, err
	}
	return appendJSON(dst, generic, depth)
}

// appendFloat formats like encoding/json: shortest representation, exponent
// form only below 1e-6 or from 1e21.
func appendFloat(dst []byte, f float64, bits int) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, fmt.Errorf("unsupported float value %v", f)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		// Shorten e-09 to e-9, as encoding/json does.
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, nil
}

const hexDigits = "0123456789abcdef"

// appendQuoted writes s as a JSON string: quotes, backslashes and control
// characters escaped, U+2028/U+2029 escaped (as encoding/json does), invalid
// UTF-8 replaced by U+FFFD.
func appendQuoted(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
