package arrowconv

import (
	"encoding/json"
	"math"
	"strconv"
	"time"
)

// dateNode holds a DATE column as days since the epoch.
type dateNode struct {
	fixedNode[int32]
}

func (n *dateNode) decode(st *state) error {
	c := st.peek()
	if c == 'n' {
		return n.null(st, n)
	}
	text, quoted, ok, err := st.readTextOrNumber(c)
	switch {
	case !ok:
		return n.mismatch(st, `a "2006-01-02" string or epoch days`, c)
	case err != nil:
		return err
	case quoted:
		return n.addText(text)
	}
	return n.addDays(st, text)
}

func (n *dateNode) addText(s []byte) error {
	if len(s) != 10 {
		return kerr(ErrInvalidValue, "%s is not a 2006-01-02 date", Quote(s))
	}
	d, ok := parseDate(s)
	if !ok {
		return kerr(ErrInvalidValue, "%s is not a 2006-01-02 date", Quote(s))
	}
	return n.add(d)
}

func (n *dateNode) addDays(st *state, text []byte) error {
	lit, buf, ok := parseNumLit(text, st.num, false)
	st.num = buf
	if !ok {
		return kerr(ErrInvalidValue, "%s is not a number of days", Quote(text))
	}
	d, err := lit.int64()
	if err == errNotInteger {
		return kerr(ErrTypeMismatch, "value %s is not a whole number of days for DATE", text)
	}
	if err != nil || d < minDays || d > maxDays {
		return kerr(ErrOutOfRange, "value %s out of range for DATE (0001-01-01..9999-12-31)", text)
	}
	return n.add(d)
}

func (n *dateNode) add(d int64) error {
	if d < minDays || d > maxDays {
		return kerr(ErrOutOfRange, "day %d out of range for DATE (0001-01-01..9999-12-31)", d)
	}
	n.push(int32(d))
	return nil
}

func (n *dateNode) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		return n.nullValue(n)
	case string:
		return n.addText(textOf(v))
	case time.Time:
		y, m, d := v.Date()
		if y < 1 || y > 9999 {
			return kerr(ErrOutOfRange, "time %s out of range for DATE", v.Format(time.RFC3339))
		}
		return n.add(daysFromCivil(y, int(m), d))
	case json.Number:
		return n.addDays(st, textOf(string(v)))
	case int64:
		return n.add(v)
	case int:
		return n.add(int64(v))
	case int32:
		return n.add(int64(v))
	case float64:
		if v != math.Trunc(v) || math.IsInf(v, 0) {
			return kerr(ErrTypeMismatch, "value %v is not a whole number of days for DATE", v)
		}
		if v < minDays || v > maxDays {
			return kerr(ErrOutOfRange, "value %v out of range for DATE (0001-01-01..9999-12-31)", v)
		}
		return n.add(int64(v))
	}
	return n.mismatchGo(`a "2006-01-02" string, a time or epoch days`, v)
}

// tsNode holds a TIMESTAMP (ntz false) or TIMESTAMP_NTZ column as
// microseconds. emit, when set, is the batch's emit time: this is the
// reserved _zb_emit_ts column, stamped when a row has no value for it.
type tsNode struct {
	fixedNode[int64]
	ntz  bool
	emit *int64
	// date is the last date parsed, reused by the next value on that day.
	date dateCache
}

func (n *tsNode) decode(st *state) error {
	c := st.peek()
	if c == 'n' {
		if n.emit != nil {
			if err := st.literal("null"); err != nil {
				return err
			}
			return n.add(*n.emit)
		}
		return n.null(st, n)
	}
	text, quoted, ok, err := st.readTextOrNumber(c)
	switch {
	case !ok:
		return n.mismatch(st, "an RFC 3339 string or an epoch number", c)
	case err != nil:
		return err
	case quoted:
		return n.addText(text)
	}
	return n.addEpoch(st, text)
}

func (n *tsNode) addText(s []byte) error {
	us, zoned, err := parseTimestampCached(s, &n.date)
	switch {
	case err != nil:
		return kerr(ErrInvalidValue, "%v", err)
	case n.ntz && zoned:
		return kerr(ErrTZIntoNTZ, "%v: %s has a zone or offset; send a zone-less wall clock (2006-01-02T15:04:05) or use a TIMESTAMP column", ErrTZIntoNTZ, Quote(s))
	case !n.ntz && !zoned:
		return kerr(ErrInvalidValue, "%s has no zone or offset, so names no instant for TIMESTAMP; add Z or ±hh:mm, or use a TIMESTAMP_NTZ column", Quote(s))
	}
	return n.add(us)
}

func (n *tsNode) addEpoch(st *state, text []byte) error {
	if n.ntz {
		return kerr(ErrTZIntoNTZ, "%v: epoch number %s is an instant; send a zone-less wall clock string or use a TIMESTAMP column", ErrTZIntoNTZ, text)
	}
	lit, buf, ok := parseNumLit(text, st.num, false)
	st.num = buf
	if !ok {
		return kerr(ErrInvalidValue, "%s is not a number", Quote(text))
	}
	us, err := lit.scaleFloor(st.epochExp)
	if err != nil || us < minMicros || us > maxMicros {
		return kerr(ErrOutOfRange, "epoch value %s out of range for %s (0001-01-01..9999-12-31)", text, n.name)
	}
	return n.add(us)
}

func (n *tsNode) add(us int64) error {
	n.push(us)
	return nil
}

func (n *tsNode) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		if n.emit != nil {
			return n.add(*n.emit)
		}
		return n.nullValue(n)
	case time.Time:
		return n.putTime(st, v)
	case string:
		return n.addText(textOf(v))
	case json.Number:
		return n.addEpoch(st, textOf(string(v)))
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		st.text, _ = appendJSON(st.text[:0], v, 0) // an integer: never fails
		return n.addEpoch(st, st.text)
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return kerr(ErrInvalidValue, "epoch value %v is not finite", v)
		}
		st.text = strconv.AppendFloat(st.text[:0], v, 'g', -1, 64)
		return n.addEpoch(st, st.text)
	}
	return n.mismatchGo("a time, an RFC 3339 string or an epoch number", v)
}

// putTime stores a time (a structured value's, or a Protobuf Timestamp's on
// the fast path) as its instant.
func (n *tsNode) putTime(st *state, v time.Time) error {
	if n.ntz {
		if !st.ntzFromZoned {
			name, _ := v.Zone()
			return kerr(ErrTZIntoNTZ, "%v: time %s (zone %q) is an instant; format it as a zone-less wall clock (2006-01-02T15:04:05) upstream, enable reconcile.timestamp_ntz_from_zoned to store its UTC wall time, or use a TIMESTAMP column", ErrTZIntoNTZ, v.Format(time.RFC3339Nano), name)
		}
		st.rowNTZ++
	}
	us, err := timeMicros(v)
	if err != nil {
		return err
	}
	return n.add(us)
}
