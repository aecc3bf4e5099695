// Type widening on drift: a value out of range for a narrow numeric column.

package tablewriter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// widening is one column a batch needs wider: the narrowest type that holds
// every offending value of the batch, and the messages that carried them.
type widening struct {
	column string // the live column name
	from   typemap.Type
	to     typemap.Type
	rows   []int // message indices in the batch
	sample string
}

// integerLadder is the order integral columns widen in, narrowest first.
var integerLadder = []typemap.Kind{typemap.Byte, typemap.Short, typemap.Int, typemap.Long}

// integerBounds are the value ranges of the integer kinds.
var integerBounds = map[typemap.Kind][2]*big.Int{
	typemap.Byte:  {big.NewInt(math.MinInt8), big.NewInt(math.MaxInt8)},
	typemap.Short: {big.NewInt(math.MinInt16), big.NewInt(math.MaxInt16)},
	typemap.Int:   {big.NewInt(math.MinInt32), big.NewInt(math.MaxInt32)},
	typemap.Long:  {big.NewInt(math.MinInt64), big.NewInt(math.MaxInt64)},
}

// widenable reports whether a column of type t is one a value can outgrow
// into a wider type: the integers below BIGINT and FLOAT.
func widenable(t typemap.Type) bool {
	switch t.Kind {
	case typemap.Byte, typemap.Short, typemap.Int, typemap.Float:
		return true
	}
	return false
}

// widenings finds the rows of errs that failed only because a value is out
// of range for a narrow top-level numeric column of cols, and for each such
// column the narrowest wider type that holds all of them. Values nothing
// wider can hold (beyond BIGINT, or a float beyond DOUBLE) are left out:
// their rows fail as they are. Columns skip reports true for (nil: none)
// are left out before any message is decoded. The result is in table
// column order.
func widenings(cols []typemap.Column, batch []Row, errs []arrowconv.RowError, skip func(column string) bool) []widening {
	var out []widening
	at := map[string]int{} // column name → index in out
	for _, e := range errs {
		if !errors.Is(e.Err, arrowconv.ErrOutOfRange) {
			continue
		}
		// A top-level column's error is named by the column itself; a path
		// ("s.n", "xs[1]") points into a nested value, which is left alone.
		i := columnIndex(cols, e.Column)
		if i < 0 || !widenable(cols[i].Type) || e.Index < 0 || e.Index >= len(batch) {
			continue
		}
		if skip != nil && skip(e.Column) {
			continue
		}
		col := cols[i]
		v, ok := fieldValue(batch[e.Index], col.Name)
		if !ok {
			continue
		}
		to, ok := typeFor(col.Type, v)
		if !ok {
			continue
		}
		k, seen := at[col.Name]
		if !seen {
			at[col.Name] = len(out)
			out = append(out, widening{column: col.Name, from: col.Type, to: to, sample: valueText(v)})
			k = len(out) - 1
		} else if rank(to) > rank(out[k].to) {
			out[k].to, out[k].sample = to, valueText(v)
		}
		out[k].rows = append(out[k].rows, e.Index)
	}
	slices.SortFunc(out, func(a, b widening) int {
		return columnIndex(cols, a.column) - columnIndex(cols, b.column)
	})
	return out
}

func columnIndex(cols []typemap.Column, name string) int {
	return slices.IndexFunc(cols, func(c typemap.Column) bool { return c.Name == name })
}

// rank orders the types a widening can target.
func rank(t typemap.Type) int {
	if t.Kind == typemap.Double {
		return len(integerLadder) + 1
	}
	return slices.Index(integerLadder, t.Kind)
}

// typeFor is the narrowest type wider than from that holds v, parsed
// exactly (a JSON number is never rounded through float64 on its way to an
// integer column), and whether there is one.
func typeFor(from typemap.Type, v any) (typemap.Type, bool) {
	if from.Kind == typemap.Float {
		f, ok := floatValue(v)
		if !ok || math.IsInf(f, 0) || math.IsNaN(f) {
			return typemap.Type{}, false
		}
		return typemap.Primitive(typemap.Double), true
	}
	step := slices.Index(integerLadder, from.Kind)
	n, ok := integerValue(v)
	if step < 0 || !ok {
		return typemap.Type{}, false
	}
	for _, k := range integerLadder[step+1:] {
		b := integerBounds[k]
		if n.Cmp(b[0]) >= 0 && n.Cmp(b[1]) <= 0 {
			return typemap.Primitive(k), true
		}
	}
	return typemap.Type{}, false
}

// integerValue reads an integral value exactly: JSON numbers through
// big.Rat (so 3e9 is the integer 3000000000), Go integers as they are, and
// floats only when they hold an integer.
func integerValue(v any) (*big.Int, bool) {
	switch x := v.(type) {
	case json.Number:
		r, ok := new(big.Rat).SetString(string(x))
		if !ok || !r.IsInt() {
			return nil, false
		}
		return r.Num(), true
	case int:
		return big.NewInt(int64(x)), true
	case int8:
		return big.NewInt(int64(x)), true
	case int16:
		return big.NewInt(int64(x)), true
	case int32:
		return big.NewInt(int64(x)), true
	case int64:
		return big.NewInt(x), true
	case uint:
		return new(big.Int).SetUint64(uint64(x)), true
	case uint8:
		return big.NewInt(int64(x)), true
	case uint16:
		return big.NewInt(int64(x)), true
	case uint32:
		return big.NewInt(int64(x)), true
	case uint64:
		return new(big.Int).SetUint64(x), true
	case float64:
		return floatInteger(x)
	case float32:
		return floatInteger(float64(x))
	}
	return nil, false
}

func floatInteger(f float64) (*big.Int, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) || f != math.Trunc(f) {
		return nil, false
	}
	n, _ := new(big.Float).SetFloat64(f).Int(nil)
	return n, true
}

// floatValue reads a value bound for a FLOAT column as a float64.
func floatValue(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		return f, err == nil
	case float64:
		return x, true
	case float32:
		return float64(x), true
	}
	return 0, false
}

func valueText(v any) string {
	if n, ok := v.(json.Number); ok {
		return string(n)
	}
	return fmt.Sprint(v)
}

// fieldValue is the value of the top-level field of m that the converter
// matched to column: the field of that exact name or, failing that, an
// ASCII case-insensitive match. A message not yet structured is decoded
// here with json.Number, leaving the message itself untouched so that its
// reconversion still reads the exact bytes.
func fieldValue(m Row, column string) (any, bool) {
	var v any
	if m.HasStructured() {
		s, err := m.AsStructured()
		if err != nil {
			return nil, false
		}
		v = s
	} else {
		b, err := m.AsBytes()
		if err != nil {
			return nil, false
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return nil, false
		}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, false
	}
	if x, ok := obj[column]; ok {
		return x, true
	}
	for k, x := range obj {
		if strings.EqualFold(k, column) {
			return x, true
		}
	}
	return nil, false
}

// widenRefusal is the remembered reason the catalog refused to widen a
// column, so that later batches fail its rows at once, naming it.
func (a *authority) widenRefusal(column string) (string, bool) {
	r, ok := a.widenRefused.Load(strings.ToLower(column))
	if !ok {
		return "", false
	}
	return r.(string), true
}

// pendingWidenings are the widenings a batch needs that the catalog has not
// refused already.
func (a *authority) pendingWidenings(ws []widening) []widening {
	var out []widening
	for _, wd := range ws {
		if _, refused := a.widenRefusal(wd.column); !refused {
			out = append(out, wd)
		}
	}
	return out
}

// hinted reports whether the widening hint was logged for column already:
// its rows then fail without being decoded again only to build it.
func (a *authority) hinted(column string) bool {
	_, done := a.widenHinted.Load(strings.ToLower(column))
	return done
}

// hintWidening logs, once per column, that catalog.widen (with provisioning)
// would have widened a column whose values do not fit: the rows fail either
// way, but the operator learns the remedy from the first one.
func (a *authority) hintWidening(ws []widening) {
	for _, wd := range ws {
		if _, done := a.widenHinted.LoadOrStore(strings.ToLower(wd.column), true); done {
			continue
		}
		a.warnf("table %s: column %q: value %s out of range for %s (message %d); with catalog.provision and catalog.widen enabled the output would widen it to %s; until then its rows fail",
			a.cfg.Table, wd.column, wd.sample, sqlType(wd.from), wd.rows[0], sqlType(wd.to))
	}
}

// annotateRefusedWidenings adds the catalog's refusal to the row errors of
// columns it refused to widen, so the dead-lettered row says why the
// output did not fix it.
func (a *authority) annotateRefusedWidenings(errs []arrowconv.RowError, ws []widening) {
	for _, wd := range ws {
		reason, refused := a.widenRefusal(wd.column)
		if !refused {
			continue
		}
		// A set, not a scan of wd.rows per error: a refused column's rows
		// are annotated on every batch that carries them.
		rows := make(map[int]bool, len(wd.rows))
		for _, i := range wd.rows {
			rows[i] = true
		}
		for k := range errs {
			if errs[k].Column == wd.column && rows[errs[k].Index] && errors.Is(errs[k].Err, arrowconv.ErrOutOfRange) {
				errs[k].Err = fmt.Errorf("%w (widening column %q to %s refused: %s)", errs[k].Err, wd.column, sqlType(wd.to), reason)
			}
		}
	}
}

// sqlType spells a type as the converter's errors do (INT, BIGINT).
func sqlType(t typemap.Type) string { return strings.ToUpper(t.Text()) }
