package arrowconv

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// offsetsNode is what lists and maps share: per value, the end offset of its
// entries in the child nodes.
type offsetsNode struct {
	base
	offsets []int32
}

// end ends a valid value whose entries end at child index childLen, failing
// when the batch's nested values overflow Arrow's 32-bit offsets.
func (n *offsetsNode) end(childLen int) error {
	if childLen > math.MaxInt32 {
		return fmt.Errorf("more than %d nested values in one batch", math.MaxInt32)
	}
	n.offsets = append(n.offsets, int32(childLen))
	n.validity.add(true)
	return nil
}

func (n *offsetsNode) appendNull() {
	n.offsets = append(n.offsets, n.offsets[len(n.offsets)-1])
	n.validity.add(false)
}

func (n *offsetsNode) appendEmpty() {
	n.offsets = append(n.offsets, n.offsets[len(n.offsets)-1])
	n.validity.add(true)
}

// truncateOffsets keeps the first k values and returns how many child
// entries they hold.
func (n *offsetsNode) truncateOffsets(k int) int {
	n.offsets = n.offsets[:k+1]
	n.truncateBits(k)
	return int(n.offsets[k])
}

func (n *offsetsNode) resetOffsets(c int) {
	n.offsets = append(getSlice[int32](c+1), 0)
	n.resetBits(c)
}

// buildOffsets hands the values over as Arrow data with the given child.
func (n *offsetsNode) buildOffsets(child arrow.ArrayData) arrow.ArrayData {
	size := n.n
	offs := pooledSlice(n.offsets)
	bits, nulls := n.takeBits()
	n.offsets = nil
	return newData(n.dt, size, []*memory.Buffer{bits, offs}, []arrow.ArrayData{child}, nulls)
}

// listNode holds an ARRAY column.
type listNode struct {
	offsetsNode
	elem node
	// elemHint is the element count of the previous batch, to size the next.
	elemHint int
}

func (n *listNode) decode(st *state) error {
	c := st.peek()
	if c == 'n' {
		return n.null(st, n)
	}
	if c != '[' {
		return n.mismatch(st, "a JSON array", c)
	}
	st.pos++
	if st.peek() == ']' {
		st.pos++
		return n.commit()
	}
	for i := 0; ; i++ {
		if err := n.elem.decode(st); err != nil {
			return at("["+strconv.Itoa(i)+"]", err)
		}
		switch st.peek() {
		case ',':
			st.pos++
		case ']':
			st.pos++
			return n.commit()
		default:
			return st.errorf("expected ',' or ']' in array")
		}
	}
}

func (n *listNode) commit() error { return n.end(n.elem.length()) }

func (n *listNode) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		return n.nullValue(n)
	case []any:
		for i, e := range v {
			if err := n.elem.put(st, e); err != nil {
				return at("["+strconv.Itoa(i)+"]", err)
			}
		}
		return n.commit()
	case []byte, string, map[string]any:
		return n.mismatchGo("an array", v)
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return n.mismatchGo("an array", v)
	}
	for i := range rv.Len() {
		if err := n.elem.put(st, rv.Index(i).Interface()); err != nil {
			return at("["+strconv.Itoa(i)+"]", err)
		}
	}
	return n.commit()
}

func (n *listNode) truncate(k int) { n.elem.truncate(n.truncateOffsets(k)) }
func (n *listNode) reset(c int) {
	n.resetOffsets(c)
	n.elem.reset(n.elemHint)
}
func (n *listNode) build() (arrow.ArrayData, error) {
	child, err := n.elem.build()
	if err != nil {
		return nil, err
	}
	defer child.Release()
	n.elemHint = child.Len()
	return n.buildOffsets(child), nil
}

// keyNode is a node that can take map keys, which JSON spells as strings.
type keyNode interface {
	node
	addKey(st *state, k []byte) error
	// keyText spells key i, for messages and large-map duplicate checks.
	keyText(i int) string
	// keyEqual reports whether keys i and j are equal, without allocating.
	keyEqual(i, j int) bool
}

// mapNode holds a MAP column: offsets into parallel key and value children.
type mapNode struct {
	offsetsNode
	keys keyNode
	vals node
	// entryHint is the entry count of the previous batch, to size the next.
	entryHint int
	// sorted is put's scratch space for a Go map's entries in key order,
	// reused from row to row (and cleared after each) so that sorting a map
	// allocates nothing per row.
	sorted []mapEntry
}

// mapEntry is one entry of a Go map being put.
type mapEntry struct {
	k string
	v any
}

func (n *mapNode) decode(st *state) error {
	c := st.peek()
	if c == 'n' {
		return n.null(st, n)
	}
	if c != '{' {
		return n.mismatch(st, "a JSON object", c)
	}
	st.pos++
	if st.peek() == '}' {
		st.pos++
		return n.commit(st)
	}
	for {
		if st.peek() != '"' {
			return st.errorf("expected object key")
		}
		k, err := st.readString()
		if err != nil {
			return err
		}
		if err := n.keys.addKey(st, k); err != nil {
			return at(keySeg(k), err)
		}
		ki := n.keys.length() - 1 // k may be overwritten by the value's strings
		if err := st.expect(':'); err != nil {
			return err
		}
		if err := n.vals.decode(st); err != nil {
			return at(keySeg([]byte(n.keys.keyText(ki))), err)
		}
		switch st.peek() {
		case ',':
			st.pos++
		case '}':
			st.pos++
			return n.commit(st)
		default:
			return st.errorf("expected ',' or '}' in object")
		}
	}
}

func keySeg(k []byte) string { return "[" + strconv.Quote(string(k)) + "]" }

// commit ends one map value, refusing duplicate keys (the same key spelled
// differently, such as "01" and "1" for an integer key, counts as duplicate).
func (n *mapNode) commit(st *state) error {
	start, end := int(n.offsets[len(n.offsets)-1]), n.keys.length()
	if end-start > 1 {
		if end-start <= 16 {
			for i := start; i < end; i++ {
				for j := i + 1; j < end; j++ {
					if n.keys.keyEqual(i, j) {
						return at(keySeg([]byte(n.keys.keyText(i))), kerr(ErrDuplicateField, "duplicate map key"))
					}
				}
			}
		} else {
			if st.keySet == nil {
				st.keySet = map[string]struct{}{}
			}
			clear(st.keySet)
			for i := start; i < end; i++ {
				k := n.keys.keyText(i)
				if _, dup := st.keySet[k]; dup {
					return at(keySeg([]byte(k)), kerr(ErrDuplicateField, "duplicate map key"))
				}
				st.keySet[k] = struct{}{}
			}
		}
	}
	return n.end(end)
}

func (n *mapNode) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		return n.nullValue(n)
	case map[string]any:
		es := n.sorted[:0]
		for k, e := range v {
			es = append(es, mapEntry{k, e})
		}
		slices.SortFunc(es, func(a, b mapEntry) int { return strings.Compare(a.k, b.k) })
		n.sorted = es
		defer clear(es) // keep no row's keys or values alive
		for _, e := range es {
			if !utf8.ValidString(e.k) {
				return at(keySeg([]byte(e.k)), kerr(ErrInvalidValue, "invalid UTF-8 in map key"))
			}
			if err := n.keys.addKey(st, textOf(e.k)); err != nil {
				return at(keySeg([]byte(e.k)), err)
			}
			if err := n.vals.put(st, e.v); err != nil {
				return at(keySeg([]byte(e.k)), err)
			}
		}
		return n.commit(st)
	}
	return n.mismatchGo("an object", v)
}

func (n *mapNode) truncate(k int) {
	e := n.truncateOffsets(k)
	n.keys.truncate(e)
	n.vals.truncate(e)
}
func (n *mapNode) reset(c int) {
	n.resetOffsets(c)
	n.keys.reset(n.entryHint)
	n.vals.reset(n.entryHint)
}
func (n *mapNode) build() (arrow.ArrayData, error) {
	entries := n.keys.length()
	n.entryHint = entries
	kd, err := n.keys.build()
	if err != nil {
		return nil, err
	}
	defer kd.Release()
	vd, err := n.vals.build()
	if err != nil {
		return nil, err
	}
	defer vd.Release()
	mt := n.dt.(*arrow.MapType)
	sd := newData(mt.Elem(), entries, []*memory.Buffer{nil}, []arrow.ArrayData{kd, vd}, 0)
	defer sd.Release()
	return n.buildOffsets(sd), nil
}

// structNode holds a STRUCT column, or (root) the row itself.
type structNode struct {
	base
	root     bool
	fields   []node
	names    []string
	nullable []bool
	index    map[string]int
	fold     map[string]int // lower-case name → field, for unique lower-case names
	seen     []uint32
	gen      uint32
	// plain[i] reports that names[i] is spelled the same raw in JSON: valid
	// UTF-8 without quotes, backslashes or control characters.
	plain []bool
	// follow[i+1] predicts the field after field i (follow[0]: the first),
	// learned from the previous object: JSON producers repeat key order.
	follow []int
	// keyw[i] is names[i] as compact JSON spells it after its opening
	// quote, `name":`, when that fits one word: the expected key is then
	// recognised, colon included, with one load and compare.
	keyw []keyWord
}

// keyWord is the bytes of a short plain key, its closing quote and a colon
// as a little-endian word (w), and the mask of those bytes (zero for names
// longer than 6 bytes or not plain).
type keyWord struct{ w, mask uint64 }

// newKeyWord returns the keyWord of a plain name.
func newKeyWord(name string) keyWord {
	if len(name) > 6 {
		return keyWord{}
	}
	var b [8]byte
	copy(b[:], name+`":`)
	mask := uint64(1)<<(8*(len(name)+2)) - 1
	return keyWord{w: binary.LittleEndian.Uint64(b[:]) & mask, mask: mask}
}

// compactKey consumes the key at pos (which holds its opening quote) and
// the colon after it when they read exactly `"name":`, the spelling kw was
// made for, with at least 8 bytes of input after the quote; anything else
// (other keys, whitespace before the colon, the end of input near) is left
// to the general path. The bytes consumed after the quote, `name":`, are
// those kw's mask covers.
func (st *state) compactKey(kw keyWord) bool {
	start := st.pos + 1
	if kw.mask == 0 || start+8 > len(st.data) || binary.LittleEndian.Uint64(st.data[start:])&kw.mask != kw.w {
		return false
	}
	st.pos = start + bits.Len64(kw.mask)/8
	return true
}

func newStruct(fs []typemap.Field, nullable bool, dt *arrow.StructType, root bool) (*structNode, error) {
	n := &structNode{
		base:     base{nullable: nullable, name: "STRUCT", dt: dt},
		root:     root,
		fields:   make([]node, len(fs)),
		names:    make([]string, len(fs)),
		nullable: make([]bool, len(fs)),
		index:    make(map[string]int, len(fs)),
		fold:     make(map[string]int, len(fs)),
		seen:     make([]uint32, len(fs)),
		follow:   make([]int, len(fs)+1),
		plain:    make([]bool, len(fs)),
		keyw:     make([]keyWord, len(fs)),
	}
	folded := map[string]int{}
	for i, f := range fs {
		child, err := newNode(f.Type, dt.Field(i).Type, f.Nullable)
		if err != nil {
			return nil, fmt.Errorf("arrowconv: field %q: %w", f.Name, err)
		}
		n.fields[i] = child
		n.names[i] = f.Name
		n.nullable[i] = f.Nullable
		n.index[f.Name] = i
		folded[strings.ToLower(f.Name)]++
		n.follow[i] = i // first guess: keys in column order
		n.plain[i] = utf8.ValidString(f.Name) && !strings.ContainsFunc(f.Name, func(r rune) bool {
			return r == '"' || r == '\\' || r < 0x20
		})
		if n.plain[i] {
			n.keyw[i] = newKeyWord(f.Name)
		}
	}
	n.follow[len(fs)] = -1
	for i, f := range fs {
		if k := strings.ToLower(f.Name); folded[k] == 1 {
			n.fold[k] = i
		}
	}
	return n, nil
}

// lookup finds the field for key k after field prev (-1 at the start);
// folded reports a case-insensitive match.
func (n *structNode) lookup(st *state, k []byte, prev int) (idx int, folded bool) {
	if h := n.follow[prev+1]; h >= 0 && n.names[h] == string(k) {
		return h, false
	}
	if i, ok := n.index[string(k)]; ok {
		n.follow[prev+1] = i
		return i, false
	}
	st.fold = st.fold[:0]
	for _, c := range k {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		st.fold = append(st.fold, c)
	}
	if i, ok := n.fold[string(st.fold)]; ok {
		return i, true
	}
	// The column-name rule (typemap.SafeIdentifier): "my-field" is the
	// column my_field the output creates for it.
	if !typemap.ValidIdentifier(string(k)) {
		if i, ok := n.fold[typemap.ColumnKey(string(k))]; ok {
			return i, true
		}
	}
	return -1, false
}

func (n *structNode) nextGen() {
	n.gen++
	if n.gen == 0 {
		clear(n.seen)
		n.gen = 1
	}
}

func (n *structNode) fieldErr(i int, err error) error {
	return at(n.names[i], err)
}

func (n *structNode) decode(st *state) error {
	c := st.peek()
	if c == 'n' {
		return n.null(st, n)
	}
	if c != '{' {
		return n.mismatch(st, "a JSON object", c)
	}
	return n.decodeObject(st)
}

func (n *structNode) decodeObject(st *state) error {
	st.pos++ // '{'
	n.nextGen()
	prev := -1
	if st.peek() == '}' {
		st.pos++
		return n.finish()
	}
	for {
		if st.peek() != '"' {
			return st.errorf("expected object key")
		}
		// The key the last object had here, when spelled plainly, is
		// recognised in place: no string scan, UTF-8 check or lookup.
		i := n.follow[prev+1]
		var k []byte // the key, when it was read as a string
		colon := i >= 0 && st.compactKey(n.keyw[i])
		if !colon && (i < 0 || !n.plain[i] || !st.plainKey(n.names[i])) {
			var err error
			if k, err = st.readString(); err != nil {
				return err
			}
			var folded bool
			i, folded = n.lookup(st, k, prev)
			if i < 0 {
				// A null for a field the table lacks is the field absent:
				// skipped, so a field null in every message of a first
				// batch (no type to create its column with) fails nothing.
				if err := st.expect(':'); err != nil {
					return err
				}
				if st.peek() != 'n' {
					return n.unknown(string(k))
				}
				if err := st.literal("null"); err != nil {
					return err
				}
				switch st.peek() {
				case ',':
					st.pos++
					continue
				case '}':
					st.pos++
					return n.finish()
				default:
					return st.errorf("expected ',' or '}' in object")
				}
			}
			if folded {
				st.rowFolded++
			}
		}
		if n.seen[i] == n.gen {
			key := n.names[i] // recognised in place, so spelled so
			if k != nil {
				key = string(k)
			}
			return at(key, kerr(ErrDuplicateField, "duplicate field (maps to %q)", n.names[i]))
		}
		n.seen[i] = n.gen
		if !colon {
			if err := st.expect(':'); err != nil {
				return err
			}
		}
		if err := n.fields[i].decode(st); err != nil {
			return n.fieldErr(i, err)
		}
		prev = i
		switch st.peek() {
		case ',':
			st.pos++
		case '}':
			st.pos++
			return n.finish()
		default:
			return st.errorf("expected ',' or '}' in object")
		}
	}
}

func (n *structNode) unknown(k string) error {
	what := "the table has no such column"
	if !n.root {
		what = "the struct has no such field"
	}
	return at(k, kerr(ErrUnknownField, "unknown field: %s", what))
}

// finish fills the fields the object did not carry and ends the value.
func (n *structNode) finish() error {
	for i, f := range n.fields {
		if n.seen[i] == n.gen {
			continue
		}
		if ts, ok := f.(*tsNode); ok && ts.emit != nil {
			_ = ts.add(*ts.emit)
			continue
		}
		if !n.nullable[i] {
			what := "NOT NULL column"
			if !n.root {
				what = "NOT NULL field"
			}
			return n.fieldErr(i, kerr(ErrMissingRequired, "missing value for %s", what))
		}
		f.appendNull()
	}
	if !n.root {
		n.validity.add(true)
	}
	return nil
}

func (n *structNode) put(st *state, v any) error {
	switch v := v.(type) {
	case nil:
		return n.nullValue(n)
	case map[string]any:
		return n.putObject(st, v)
	}
	return n.mismatchGo("an object", v)
}

func (n *structNode) putObject(st *state, m map[string]any) error {
	n.nextGen()
	matched := 0
	for i, name := range n.names {
		v, ok := m[name]
		if !ok {
			continue
		}
		matched++
		n.seen[i] = n.gen
		if err := n.fields[i].put(st, v); err != nil {
			return n.fieldErr(i, err)
		}
	}
	if matched < len(m) {
		var extra []string
		for k := range m {
			if _, ok := n.index[k]; !ok {
				extra = append(extra, k)
			}
		}
		slices.Sort(extra)
		for _, k := range extra {
			i, _ := n.lookup(st, []byte(k), len(n.names)-1)
			if i < 0 {
				if m[k] == nil {
					continue // a null for a field the table lacks is the field absent
				}
				return n.unknown(k)
			}
			if n.seen[i] == n.gen {
				return at(k, kerr(ErrDuplicateField, "duplicate field (maps to %q)", n.names[i]))
			}
			st.rowFolded++
			n.seen[i] = n.gen
			if err := n.fields[i].put(st, m[k]); err != nil {
				return n.fieldErr(i, err)
			}
		}
	}
	return n.finish()
}

// appendNull appends a null struct: nullable fields get nulls and NOT NULL
// fields valid zero values, as Arrow children must stay aligned.
func (n *structNode) appendNull() {
	n.fillChildren()
	n.validity.add(false)
}

func (n *structNode) appendEmpty() {
	n.fillChildren()
	n.validity.add(true)
}

func (n *structNode) fillChildren() {
	for i, f := range n.fields {
		if n.nullable[i] {
			f.appendNull()
		} else {
			f.appendEmpty()
		}
	}
}

func (n *structNode) truncate(k int) {
	for _, f := range n.fields {
		f.truncate(k)
	}
	if !n.root {
		n.truncateBits(k)
	}
}

func (n *structNode) reset(c int) {
	for _, f := range n.fields {
		f.reset(c)
	}
	n.resetBits(c)
}

func (n *structNode) build() (arrow.ArrayData, error) {
	children := make([]arrow.ArrayData, len(n.fields))
	for i, f := range n.fields {
		d, err := f.build()
		if err != nil {
			return nil, err
		}
		children[i] = d
		defer d.Release()
	}
	size := n.n
	bits, nulls := n.takeBits()
	return newData(n.dt, size, []*memory.Buffer{bits}, children, nulls), nil
}
