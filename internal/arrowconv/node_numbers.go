package arrowconv

import (
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unsafe"
)

// intNode holds an integral column. Values are parsed exactly and range
// checked against [min, max].
type intNode[T int8 | int16 | int32 | int64] struct {
	fixedNode[T]
	min, max int64
}

func (n *intNode[T]) decode(st *state) error {
	c := st.peek()
	if c == 'n' {
		return n.null(st, n)
	}
	if c != '-' && (c < '0' || c > '9') {
		return n.mismatch(st, "a JSON number", c)
	}
	if v, text, ok := st.readIntFast(); ok {
		return n.add(v, text)
	}
	// What readIntFast leaves (fractions, exponents, 19 digits and more, a
	// zero followed by digits) is no plain integer of up to 18 digits:
	// parseNumLit reads it exactly.
	text, _, err := st.readNumber()
	if err != nil {
		return err
	}
	return n.addLit(st, text)
}

func (n *intNode[T]) addLit(st *state, text []byte) error {
	lit, buf, ok := parseNumLit(text, st.num, false)
	st.num = buf
	if !ok {
		return kerr(ErrInvalidValue, "%s is not a number", Quote(text))
	}
	v, err := lit.int64()
	switch err {
	case nil:
		return n.add(v, text)
	case errNotInteger:
		return kerr(ErrTypeMismatch, "value %s is not an integer, as %s needs", text, n.name)
	}
	return kerr(ErrOutOfRange, "value %s out of range for %s", text, n.name)
}

// add appends v; text is its spelling for the error message (nil: decimal).
func (n *intNode[T]) add(v int64, text []byte) error {
	if v < n.min || v > n.max {
		if text == nil {
			text = strconv.AppendInt(nil, v, 10)
		}
		return kerr(ErrOutOfRange, "value %s out of range for %s", text, n.name)
	}
	n.push(T(v))
	return nil
}

func (n *intNode[T]) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		return n.nullValue(n)
	case int:
		return n.add(int64(v), nil)
	case int8:
		return n.add(int64(v), nil)
	case int16:
		return n.add(int64(v), nil)
	case int32:
		return n.add(int64(v), nil)
	case int64:
		return n.add(v, nil)
	case uint:
		return n.putUint(uint64(v))
	case uint8:
		return n.putUint(uint64(v))
	case uint16:
		return n.putUint(uint64(v))
	case uint32:
		return n.putUint(uint64(v))
	case uint64:
		return n.putUint(v)
	case float32:
		return n.putFloat(float64(v))
	case float64:
		return n.putFloat(v)
	case json.Number:
		return n.addLit(st, textOf(string(v)))
	case time.Duration:
		return n.putDuration(v)
	case time.Time:
		if d, ok := timeOfDay(v); ok {
			return n.putDuration(d)
		}
	}
	return n.mismatchGo("a number", v)
}

func (n *intNode[T]) putUint(u uint64) error {
	if u > math.MaxInt64 {
		return kerr(ErrOutOfRange, "value %d out of range for %s", u, n.name)
	}
	return n.add(int64(u), nil)
}

// putDuration stores a time.Duration, which the Avro decoder gives for a
// time-millis or time-micros value (github.com/twmb/avro, Schema.Decode:
// "time-millis, time-micros: time.Duration"), as its microseconds: the
// unit of the BIGINT column a registry TIME_OF_DAY field maps to
// (typemap.FromCommonSchema). A duration with sub-microsecond digits is
// refused rather than rounded.
func (n *intNode[T]) putDuration(d time.Duration) error {
	if d%time.Microsecond != 0 {
		return kerr(ErrInvalidValue, "duration %s has sub-microsecond digits, which %s (microseconds) cannot hold", d, n.name)
	}
	return n.add(int64(d/time.Microsecond), nil)
}

// timeOfDay reads a time on the Unix epoch day (1970-01-01 UTC) as the
// time of day it stands for: the shape schema_registry_decode gives an Avro
// time-millis or time-micros with preserve_logical_types (internal/registry,
// decodeTimeOfDay, after Kafka Connect's Time: "a point in time during the
// first day after the Unix epoch"). Any other time is no time of day.
func timeOfDay(t time.Time) (time.Duration, bool) {
	d := time.Duration(t.UnixNano())
	if t.Location() != time.UTC || d < 0 || d >= 24*time.Hour {
		return 0, false
	}
	return d, true
}

// putFloat spells f only on failure, so a valid value costs no allocation.
func (n *intNode[T]) putFloat(f float64) error {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f):
		return kerr(ErrTypeMismatch, "value %s is not an integer, as %s needs", strconv.AppendFloat(nil, f, 'g', -1, 64), n.name)
	case f < -(1<<63) || f >= 1<<63 || int64(f) < n.min || int64(f) > n.max:
		return kerr(ErrOutOfRange, "value %s out of range for %s", strconv.AppendFloat(nil, f, 'g', -1, 64), n.name)
	}
	return n.add(int64(f), nil)
}

// addKey converts a map key (JSON object keys are strings) to an integer.
func (n *intNode[T]) addKey(st *state, k []byte) error {
	lit, buf, ok := parseNumLit(k, st.num, true)
	st.num = buf
	if !ok {
		return kerr(ErrInvalidValue, "map key %s is not an integer for %s", Quote(k), n.name)
	}
	v, err := lit.int64()
	if err != nil {
		return kerr(ErrOutOfRange, "map key %s out of range for %s", Quote(k), n.name)
	}
	return n.add(v, k)
}

func (n *intNode[T]) keyText(i int) string   { return strconv.FormatInt(int64(n.vals[i]), 10) }
func (n *intNode[T]) keyEqual(i, j int) bool { return n.vals[i] == n.vals[j] }

// floatNode holds a FLOAT or DOUBLE column.
type floatNode[T float32 | float64] struct {
	fixedNode[T]
	bits int
}

func (n *floatNode[T]) decode(st *state) error {
	switch c := st.peek(); {
	case c == 'n':
		return n.null(st, n)
	case c == '-' || (c >= '0' && c <= '9'):
		text, _, err := st.readNumber()
		if err != nil {
			return err
		}
		f, err := strconv.ParseFloat(unsafe.String(&text[0], len(text)), n.bits)
		if err != nil {
			return kerr(ErrOutOfRange, "value %s out of range for %s", text, n.name)
		}
		return n.add(f)
	case c == '"':
		s, err := st.readString()
		if err != nil {
			return err
		}
		return n.addSpecial(string(s))
	default:
		return n.mismatch(st, "a JSON number", c)
	}
}

// addSpecial accepts the strings JSON producers use for non-finite floats.
func (n *floatNode[T]) addSpecial(s string) error {
	switch s {
	case "NaN":
		return n.add(math.NaN())
	case "Infinity", "+Infinity", "Inf", "+Inf":
		return n.add(math.Inf(1))
	case "-Infinity", "-Inf":
		return n.add(math.Inf(-1))
	}
	return kerr(ErrTypeMismatch, "expected a JSON number for %s, got string %s", n.name, Quote(s))
}

func (n *floatNode[T]) add(f float64) error {
	n.push(T(f))
	return nil
}

func (n *floatNode[T]) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		return n.nullValue(n)
	case float64:
		if n.bits == 32 && !math.IsInf(v, 0) && math.IsInf(float64(float32(v)), 0) {
			return kerr(ErrOutOfRange, "value %v out of range for %s", v, n.name)
		}
		return n.add(v)
	case float32:
		return n.add(float64(v))
	case int:
		return n.add(float64(v))
	case int8:
		return n.add(float64(v))
	case int16:
		return n.add(float64(v))
	case int32:
		return n.add(float64(v))
	case int64:
		return n.add(float64(v))
	case uint:
		return n.add(float64(v))
	case uint8:
		return n.add(float64(v))
	case uint16:
		return n.add(float64(v))
	case uint32:
		return n.add(float64(v))
	case uint64:
		return n.add(float64(v))
	case json.Number:
		f, err := strconv.ParseFloat(string(v), n.bits)
		if err != nil {
			return kerr(ErrOutOfRange, "value %s out of range for %s", string(v), n.name)
		}
		return n.add(f)
	case string:
		return n.addSpecial(v)
	}
	return n.mismatchGo("a number", v)
}
