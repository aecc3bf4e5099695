package arrowconv

import (
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// boolNode holds a BOOLEAN column; values is a second bitmap.
type boolNode struct {
	base
	values validity
}

func (n *boolNode) decode(st *state) error {
	switch st.peek() {
	case 'n':
		return n.null(st, n)
	case 't':
		if err := st.literal("true"); err != nil {
			return err
		}
		return n.add(true)
	case 'f':
		if err := st.literal("false"); err != nil {
			return err
		}
		return n.add(false)
	}
	return n.mismatch(st, "true or false", st.peek())
}

func (n *boolNode) add(b bool) error {
	n.values.add(b)
	n.validity.add(true)
	return nil
}

func (n *boolNode) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		return n.nullValue(n)
	case bool:
		return n.add(v)
	}
	return n.mismatchGo("a boolean", v)
}

func (n *boolNode) addKey(st *state, k []byte) error {
	switch string(k) {
	case "true":
		return n.add(true)
	case "false":
		return n.add(false)
	}
	return kerr(ErrInvalidValue, "map key %s is not true or false", Quote(k))
}

func (n *boolNode) keyEqual(i, j int) bool {
	n.values.materialise()
	return bitutil.BitIsSet(n.values.bits, i) == bitutil.BitIsSet(n.values.bits, j)
}

func (n *boolNode) keyText(i int) string {
	n.values.materialise()
	return strconv.FormatBool(bitutil.BitIsSet(n.values.bits, i))
}
func (n *boolNode) appendNull()    { n.values.add(false); n.validity.add(false) }
func (n *boolNode) appendEmpty()   { n.values.add(false); n.validity.add(true) }
func (n *boolNode) truncate(k int) { n.values.truncateBits(k); n.truncateBits(k) }
func (n *boolNode) reset(c int)    { n.values.resetBits(c); n.resetBits(c) }
func (n *boolNode) build() (arrow.ArrayData, error) {
	size := n.n
	vals := n.values.takeValues()
	bits, nulls := n.takeBits()
	return newData(n.dt, size, []*memory.Buffer{bits, vals}, nil, nulls), nil
}
