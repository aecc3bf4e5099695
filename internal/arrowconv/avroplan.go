package arrowconv

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/avro"

	"github.com/benthos-zerobus/benthos-zerobus/internal/avrodecimal"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// ErrAvroNotPlanned is what CompileAvro returns when a schema and the
// table's columns need something the Avro fast path does not do: the caller
// then converts that schema's values the general way (decode to Go values,
// ConvertStructured), which gives the same record.
var ErrAvroNotPlanned = errors.New("not on the Avro fast path")

// AvroPlan is one Avro record schema matched to a Converter's columns, once:
// ConvertAvro then reads each value's binary encoding straight into the
// column buffers, with no Go value per row.
//
// The values land exactly as the registry's Avro decoder's values land
// through ConvertStructured, with avro.preserve_logical_types and
// avro.raw_unions on (the shapes docs/schema-registry.md describes): the
// decimal's digits at the column's scale, timestamps of every unit to the
// microsecond (floored), dates as days, a fixed(16) uuid as its text, enums
// as their symbol, a ["null", T] union as a nullable T, map entries in key
// order with the last of duplicate keys kept. CompileAvro refuses
// (ErrAvroNotPlanned) whatever it does not do that way: unions of two
// non-null types, time-of-day and big-decimal values, VARIANT columns, a
// value into a column of another kind, a field the table lacks (unless
// always null) and a NOT NULL column the schema lacks.
type AvroPlan struct {
	conv *Converter
	root *avro.SchemaNode
}

// CompileAvro matches the Avro schema root (a record; named types resolved,
// as avro.Schema.Root gives them) to c's columns. An error wrapping
// ErrAvroNotPlanned says which field the fast path does not take.
func (c *Converter) CompileAvro(root *avro.SchemaNode) (*AvroPlan, error) {
	p := &AvroPlan{conv: c, root: root.ExpandReferences()}
	st, err := c.getState()
	if err != nil {
		return nil, err
	}
	defer c.putState(st)
	if _, err := p.bind(st); err != nil {
		return nil, err
	}
	return p, nil
}

// avroFn reads one Avro value and appends it to the node it was bound to.
type avroFn func(st *state, r *avroReader) error

// avroSkipFn reads past one Avro value.
type avroSkipFn func(r *avroReader) error

// maxBoundPlans bounds the plans a state keeps bound: callers cache plans
// by schema, so more than this many means plans are being made per batch.
const maxBoundPlans = 32

// boundFn returns p's decoder bound to st's nodes, binding it on first use.
func (p *AvroPlan) boundFn(st *state) (avroFn, error) {
	if fn, ok := st.avroPlans[p]; ok {
		return fn, nil
	}
	fn, err := p.bind(st)
	if err != nil {
		return nil, err
	}
	if st.avroPlans == nil || len(st.avroPlans) >= maxBoundPlans {
		st.avroPlans = map[*AvroPlan]avroFn{}
	}
	st.avroPlans[p] = fn
	return fn, nil
}

func (p *AvroPlan) bind(st *state) (avroFn, error) {
	if p.root.Type != "record" {
		return nil, fmt.Errorf("%w: the schema is an Avro %s, not a record", ErrAvroNotPlanned, p.root.Type)
	}
	b := avroBinder{ntzFromZoned: p.conv.opts.NTZFromZoned}
	return b.record(p.root, st.root, "")
}

// avroBinder builds the decoders of one plan for one state's nodes.
type avroBinder struct {
	ntzFromZoned bool
}

func notPlanned(path string, format string, args ...any) error {
	what := "the record"
	if path != "" {
		what = fmt.Sprintf("field %q", path)
	}
	return fmt.Errorf("%w: %s: %s", ErrAvroNotPlanned, what, fmt.Sprintf(format, args...))
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// record binds a record to a struct node (or the row).
func (b *avroBinder) record(s *avro.SchemaNode, n *structNode, path string) (avroFn, error) {
	fns := make([]avroFn, len(s.Fields))
	names := make([]string, len(s.Fields)) // the column name an error is located at; "" for none
	used := make([]bool, len(n.fields))
	folded := 0
	for j := range s.Fields {
		f := &s.Fields[j]
		fpath := joinPath(path, f.Name)
		i, fold := n.match(f.Name)
		if i < 0 {
			skip, err := b.absentField(&f.Type, n, f.Name, fpath)
			if err != nil {
				return nil, err
			}
			fns[j] = skip
			continue
		}
		if used[i] {
			return nil, notPlanned(fpath, "a second field for column %q", n.names[i])
		}
		used[i] = true
		if fold {
			folded++
		}
		fn, err := b.value(&f.Type, n.fields[i], fpath)
		if err != nil {
			return nil, err
		}
		fns[j], names[j] = fn, n.names[i]
	}
	type fill struct {
		n    node
		emit *int64
	}
	var missing []fill
	for i, u := range used {
		if u {
			continue
		}
		if ts, ok := n.fields[i].(*tsNode); ok && ts.emit != nil {
			missing = append(missing, fill{n: ts, emit: ts.emit})
			continue
		}
		if !n.nullable[i] {
			return nil, notPlanned(joinPath(path, n.names[i]), "NOT NULL column has no field in the schema")
		}
		missing = append(missing, fill{n: n.fields[i]})
	}
	root := n.root
	return func(st *state, r *avroReader) error {
		for j, fn := range fns {
			if err := fn(st, r); err != nil {
				if names[j] != "" {
					return at(names[j], err)
				}
				return err
			}
		}
		st.rowFolded += folded
		for _, m := range missing {
			if m.emit != nil {
				m.n.(*tsNode).push(*m.emit)
			} else {
				m.n.appendNull()
			}
		}
		if !root {
			n.validity.add(true)
		}
		return nil
	}, nil
}

// match finds the column of an Avro field name as the JSON and structured
// paths find it for an object key: exactly, else ASCII case-insensitively,
// else by the column-name rule; fold reports the latter two.
func (n *structNode) match(name string) (i int, fold bool) {
	if i, ok := n.index[name]; ok {
		return i, false
	}
	if i, ok := n.fold[strings.ToLower(name)]; ok {
		return i, true
	}
	if !typemap.ValidIdentifier(name) {
		if i, ok := n.fold[typemap.ColumnKey(name)]; ok {
			return i, true
		}
	}
	return -1, false
}

// absentField binds a field the table has no column for: as on the other
// paths, a null is the field absent; any other value fails the row.
func (b *avroBinder) absentField(s *avro.SchemaNode, n *structNode, name, path string) (avroFn, error) {
	switch s.Type {
	case "null":
		return func(*state, *avroReader) error { return nil }, nil
	case "union":
		nullIdx, _, err := nullUnion(s, path)
		if err != nil {
			return nil, err
		}
		if nullIdx < 0 {
			break
		}
		branches := int64(len(s.Branches))
		return func(st *state, r *avroReader) error {
			idx, err := r.long()
			if err != nil {
				return at(name, err)
			}
			if idx < 0 || idx >= branches {
				return at(name, unionErr(idx, branches))
			}
			if idx == int64(nullIdx) {
				return nil
			}
			return n.unknown(name)
		}, nil
	}
	return nil, notPlanned(path, "the table has no column for it")
}

// nullUnion splits a union into its null branch (-1: none) and its one other
// branch; other unions are not planned.
func nullUnion(s *avro.SchemaNode, path string) (nullIdx int, other *avro.SchemaNode, err error) {
	nullIdx = -1
	for k := range s.Branches {
		br := &s.Branches[k]
		if br.Type == "null" {
			nullIdx = k
			continue
		}
		if other != nil {
			return 0, nil, notPlanned(path, "a union of two non-null types")
		}
		other = br
	}
	if other == nil {
		return 0, nil, notPlanned(path, "a union of null alone")
	}
	return nullIdx, other, nil
}

func unionErr(idx, branches int64) error {
	return kerr(ErrInvalidValue, "Avro union branch %d out of range (the union has %d)", idx, branches)
}

// avroLogical lists the logical types the registry's Avro decoder acts on
// with avro.preserve_logical_types; a node with another logicalType is read
// as its underlying type, as the decoder reads it.
var avroLogical = map[string]bool{
	"decimal": true, "big-decimal": true, "uuid": true, "date": true, "time-millis": true, "time-micros": true,
	"timestamp-millis": true, "timestamp-micros": true, "timestamp-nanos": true,
	"local-timestamp-millis": true, "local-timestamp-micros": true, "local-timestamp-nanos": true, "duration": true,
}

// value binds one Avro value to node n.
func (b *avroBinder) value(s *avro.SchemaNode, n node, path string) (avroFn, error) {
	logical := s.LogicalType
	if !avroLogical[logical] {
		logical = ""
	}
	switch s.Type {
	case "null":
		return func(st *state, _ *avroReader) error { return n.put(st, nil) }, nil
	case "union":
		return b.union(s, n, path)
	case "boolean":
		bn, ok := n.(*boolNode)
		if !ok {
			break
		}
		return func(_ *state, r *avroReader) error {
			v, err := r.boolean()
			if err != nil {
				return err
			}
			return bn.add(v)
		}, nil
	case "int", "long":
		return b.integer(s.Type, logical, n, path)
	case "float":
		return b.float(n, path, true)
	case "double":
		return b.float(n, path, false)
	case "string":
		if logical != "" && logical != "uuid" {
			break
		}
		sn, ok := n.(*strNode)
		if !ok || sn.mode != modeString {
			break
		}
		return func(_ *state, r *avroReader) error {
			v, err := r.bytes()
			if err != nil {
				return err
			}
			if !validUTF8(v) {
				return kerr(ErrInvalidValue, "invalid UTF-8 in string for STRING")
			}
			sn.data = append(sn.data, v...)
			return sn.commit()
		}, nil
	case "bytes", "fixed":
		return b.bytesLike(s, logical, n, path)
	case "enum":
		sn, ok := n.(*strNode)
		if !ok || sn.mode != modeString || len(s.Symbols) == 0 {
			break
		}
		syms := s.Symbols
		return func(_ *state, r *avroReader) error {
			idx, err := r.long()
			if err != nil {
				return err
			}
			if idx < 0 || idx >= int64(len(syms)) {
				return kerr(ErrInvalidValue, "Avro enum index %d out of range (the enum has %d symbols)", idx, len(syms))
			}
			sn.data = append(sn.data, syms[idx]...)
			return sn.commit()
		}, nil
	case "record":
		sn, ok := n.(*structNode)
		if !ok {
			break
		}
		return b.record(s, sn, path)
	case "array":
		ln, ok := n.(*listNode)
		if !ok || s.Items == nil {
			break
		}
		if avroMinSize(s.Items) == 0 {
			return nil, notPlanned(path, "array items that may take no bytes")
		}
		elem, err := b.value(s.Items, ln.elem, path+"[]")
		if err != nil {
			return nil, err
		}
		return func(st *state, r *avroReader) error {
			i := 0
			for {
				count, err := r.blockCount()
				if err != nil {
					return err
				}
				if count == 0 {
					return ln.commit()
				}
				for range count {
					if err := elem(st, r); err != nil {
						return at(indexSeg(i), err)
					}
					i++
				}
			}
		}, nil
	case "map":
		return b.mapValue(s, n, path)
	}
	return nil, notPlanned(path, "Avro %s into column type %s", describeAvro(s), nodeName(n))
}

func indexSeg(i int) string { return fmt.Sprintf("[%d]", i) }

func describeAvro(s *avro.SchemaNode) string {
	if s.LogicalType != "" {
		return s.Type + " (" + s.LogicalType + ")"
	}
	return s.Type
}

// nodeName is the SQL type name of a node, for messages.
func nodeName(n node) string {
	if s, ok := n.(interface{ sqlName() string }); ok {
		return s.sqlName()
	}
	return fmt.Sprintf("%T", n)
}

func (b *avroBinder) union(s *avro.SchemaNode, n node, path string) (avroFn, error) {
	nullIdx, other, err := nullUnion(s, path)
	if err != nil {
		return nil, err
	}
	inner, err := b.value(other, n, path)
	if err != nil {
		return nil, err
	}
	branches := int64(len(s.Branches))
	ni := int64(nullIdx)
	if branches == 2 {
		// The branch index is one byte, 0 or 2 (zig-zag 0 or 1): read
		// in place.
		nullByte, valByte := byte(ni*2), byte((1-ni)*2)
		return func(st *state, r *avroReader) error {
			if r.pos < len(r.b) {
				switch r.b[r.pos] {
				case valByte:
					r.pos++
					return inner(st, r)
				case nullByte:
					r.pos++
					return n.put(st, nil)
				}
			}
			idx, err := r.long()
			if err != nil {
				return err
			}
			return unionErr(idx, branches)
		}, nil
	}
	return func(st *state, r *avroReader) error {
		idx, err := r.long()
		if err != nil {
			return err
		}
		if idx < 0 || idx >= branches {
			return unionErr(idx, branches)
		}
		if idx == ni {
			return n.put(st, nil)
		}
		return inner(st, r)
	}, nil
}

// integer binds an int or long: a plain one into an integral or floating
// column, a date into DATE, a timestamp into TIMESTAMP or TIMESTAMP_NTZ.
func (b *avroBinder) integer(typ, logical string, n node, path string) (avroFn, error) {
	read := (*avroReader).long
	if typ == "int" {
		read = (*avroReader).int
	}
	switch logical {
	case "":
		var add func(int64) error
		switch n := n.(type) {
		case *intNode[int8]:
			add = func(v int64) error { return n.add(v, nil) }
		case *intNode[int16]:
			add = func(v int64) error { return n.add(v, nil) }
		case *intNode[int32]:
			if typ == "int" {
				return func(_ *state, r *avroReader) error {
					v, err := r.int()
					if err != nil {
						return err
					}
					n.push(int32(v))
					return nil
				}, nil
			}
			add = func(v int64) error { return n.add(v, nil) }
		case *intNode[int64]:
			return func(_ *state, r *avroReader) error {
				v, err := read(r)
				if err != nil {
					return err
				}
				n.push(v)
				return nil
			}, nil
		case *floatNode[float32]:
			add = func(v int64) error { return n.add(float64(v)) }
		case *floatNode[float64]:
			add = func(v int64) error { return n.add(float64(v)) }
		}
		if add == nil {
			break
		}
		return func(_ *state, r *avroReader) error {
			v, err := read(r)
			if err != nil {
				return err
			}
			return add(v)
		}, nil
	case "date":
		dn, ok := n.(*dateNode)
		if !ok || typ != "int" {
			break
		}
		return func(st *state, r *avroReader) error {
			d, err := r.int()
			if err != nil {
				return err
			}
			if d < minDays || d > maxDays {
				return dn.put(st, dateTime(d)) // its out-of-range error
			}
			dn.push(int32(d))
			return nil
		}, nil
	case "timestamp-millis", "timestamp-micros", "timestamp-nanos",
		"local-timestamp-millis", "local-timestamp-micros", "local-timestamp-nanos":
		tn, ok := n.(*tsNode)
		if !ok || typ != "long" {
			break
		}
		if tn.ntz && !b.ntzFromZoned {
			// Every value would fail its row with ErrTZIntoNTZ.
			return nil, notPlanned(path, "a time into TIMESTAMP_NTZ without reconcile.timestamp_ntz_from_zoned")
		}
		unit := strings.TrimPrefix(strings.TrimPrefix(logical, "local-"), "timestamp-")
		ntz := tn.ntz
		return func(st *state, r *avroReader) error {
			v, err := r.long()
			if err != nil {
				return err
			}
			us, ok := avroMicros(v, unit)
			if !ok || us < minMicros || us > maxMicros {
				return tn.put(st, avroTime(v, unit)) // its out-of-range error
			}
			if ntz {
				st.rowNTZ++
			}
			tn.push(us)
			return nil
		}, nil
	}
	return nil, notPlanned(path, "Avro %s into column type %s", describeTyped(typ, logical), nodeName(n))
}

func describeTyped(typ, logical string) string {
	if logical != "" {
		return typ + " (" + logical + ")"
	}
	return typ
}

func (b *avroBinder) float(n node, path string, single bool) (avroFn, error) {
	switch n := n.(type) {
	case *floatNode[float32]:
		if single {
			return func(_ *state, r *avroReader) error {
				v, err := r.float()
				if err != nil {
					return err
				}
				n.push(v)
				return nil
			}, nil
		}
		return func(st *state, r *avroReader) error {
			v, err := r.double()
			if err != nil {
				return err
			}
			return n.putFloat64(v)
		}, nil
	case *floatNode[float64]:
		if single {
			return func(_ *state, r *avroReader) error {
				v, err := r.float()
				if err != nil {
					return err
				}
				n.push(float64(v))
				return nil
			}, nil
		}
		return func(_ *state, r *avroReader) error {
			v, err := r.double()
			if err != nil {
				return err
			}
			n.push(v)
			return nil
		}, nil
	}
	typ := "double"
	if single {
		typ = "float"
	}
	return nil, notPlanned(path, "Avro %s into column type %s", typ, nodeName(n))
}

// bytesLike binds bytes and fixed: raw into BINARY, a decimal into DECIMAL,
// a fixed(16) uuid into STRING as its text.
func (b *avroBinder) bytesLike(s *avro.SchemaNode, logical string, n node, path string) (avroFn, error) {
	sn, ok := n.(*strNode)
	fixed := s.Type == "fixed"
	size := s.Size
	read := func(r *avroReader) ([]byte, error) {
		if fixed {
			return r.fixed(size)
		}
		return r.bytes()
	}
	switch {
	case !ok:
	case (logical == "" || logical == "duration") && sn.mode == modeBinary:
		if logical == "duration" && !fixed {
			break
		}
		return func(_ *state, r *avroReader) error {
			v, err := read(r)
			if err != nil {
				return err
			}
			sn.data = append(sn.data, v...)
			return sn.commit()
		}, nil
	case logical == "decimal" && sn.mode == modeDecimal:
		scale := s.Scale
		same := scale == sn.scale
		return func(st *state, r *avroReader) error {
			v, err := read(r)
			if err != nil {
				return err
			}
			// At the column's own scale, a value of at most 8 bytes whose
			// digits fit the precision is already canonical: written
			// as it is, with no parse.
			if same {
				if out, ok := avrodecimal.AppendFitting(sn.data, v, scale, sn.precision); ok {
					sn.data = out
					return sn.commit()
				}
			}
			st.text = avrodecimal.Append(st.text[:0], v, scale)
			return sn.addDecimal(st, st.text, false)
		}, nil
	case logical == "uuid" && fixed && size == 16 && sn.mode == modeString:
		return func(_ *state, r *avroReader) error {
			v, err := r.fixed(16)
			if err != nil {
				return err
			}
			sn.data = appendUUID(sn.data, [16]byte(v))
			return sn.commit()
		}, nil
	}
	return nil, notPlanned(path, "Avro %s into column type %s", describeAvro(s), nodeName(n))
}

// mapValue binds a map: its entries land in key order, the last of
// duplicate keys kept, as a decoded Go map lands.
func (b *avroBinder) mapValue(s *avro.SchemaNode, n node, path string) (avroFn, error) {
	mn, ok := n.(*mapNode)
	if !ok || s.Values == nil {
		return nil, notPlanned(path, "Avro map into column type %s", nodeName(n))
	}
	keys, ok := mn.keys.(*strNode)
	if !ok || keys.mode != modeString {
		return nil, notPlanned(path, "Avro map into a map whose keys are not STRING")
	}
	skip, err := avroSkip(s.Values, path+"[]")
	if err != nil {
		return nil, err
	}
	vals, err := b.value(s.Values, mn.vals, path+"[]")
	if err != nil {
		return nil, err
	}
	return func(st *state, r *avroReader) error {
		// Most maps arrive with their keys in order: they are read in
		// one pass. Otherwise the pass is undone and the entries are
		// read again in key order.
		k0, v0, pos := keys.length(), mn.vals.length(), r.pos
		nested, folded, ntz := st.rowNested, st.rowFolded, st.rowNTZ
		ordered, err := readOrderedMap(st, r, keys, vals)
		if err != nil {
			return err
		}
		if !ordered {
			keys.truncate(k0)
			mn.vals.truncate(v0)
			r.pos = pos
			st.rowNested, st.rowFolded, st.rowNTZ = nested, folded, ntz
			base := len(st.avroEntries)
			err := readMap(st, r, skip, keys, vals)
			st.avroEntries = st.avroEntries[:base]
			if err != nil {
				return err
			}
		}
		// Keys are unique: no duplicate check.
		return mn.end(keys.length())
	}, nil
}

// readOrderedMap reads a map's entries in one pass while each key is
// greater than the one before; ordered false means one was not (what was
// appended is then the caller's to undo).
func readOrderedMap(st *state, r *avroReader, keys *strNode, vals avroFn) (ordered bool, err error) {
	var prev []byte
	first := true
	for {
		count, err := r.blockCount()
		if err != nil {
			return false, err
		}
		if count == 0 {
			return true, nil
		}
		for range count {
			k, err := r.bytes()
			if err != nil {
				return false, err
			}
			if !first && string(k) <= string(prev) {
				return false, nil
			}
			first, prev = false, k
			if !validUTF8(k) {
				return false, at(keySeg(k), kerr(ErrInvalidValue, "invalid UTF-8 in map key"))
			}
			keys.data = append(keys.data, k...)
			_ = keys.commit()
			if err := vals(st, r); err != nil {
				return false, at(keySeg(k), err)
			}
		}
	}
}

// readMap reads a map's entries, then appends them in key order, the last
// of duplicate keys kept; its entries use st.avroEntries past their length
// on entry, which the caller restores.
func readMap(st *state, r *avroReader, skip avroSkipFn, keys *strNode, vals avroFn) error {
	base := len(st.avroEntries)
	for {
		count, err := r.blockCount()
		if err != nil {
			return err
		}
		if count == 0 {
			break
		}
		for range count {
			k, err := r.bytes()
			if err != nil {
				return err
			}
			start := r.pos
			if err := skip(r); err != nil {
				return at(keySeg(k), err)
			}
			st.avroEntries = append(st.avroEntries, avroEntry{key: k, start: start, end: r.pos})
		}
	}
	all, end := r.b, r.pos
	defer func() { r.b, r.pos = all, end }()
	for _, e := range sortEntries(st.avroEntries[base:]) {
		if !validUTF8(e.key) {
			return at(keySeg(e.key), kerr(ErrInvalidValue, "invalid UTF-8 in map key"))
		}
		if err := keys.addKey(st, e.key); err != nil {
			return at(keySeg(e.key), err)
		}
		// The value is read again where skip found it.
		r.b, r.pos = all[:e.end], e.start
		if err := vals(st, r); err != nil {
			return at(keySeg(e.key), err)
		}
	}
	return nil
}

// avroSkip returns a reader that steps over one value of s; only the
// values a map may hold (no nested types) are planned.
func avroSkip(s *avro.SchemaNode, path string) (avroSkipFn, error) {
	switch s.Type {
	case "null":
		return func(*avroReader) error { return nil }, nil
	case "boolean":
		return func(r *avroReader) error { _, err := r.boolean(); return err }, nil
	case "int":
		return func(r *avroReader) error { _, err := r.int(); return err }, nil
	case "long":
		return func(r *avroReader) error { _, err := r.long(); return err }, nil
	case "float":
		return func(r *avroReader) error { _, err := r.fixed(4); return err }, nil
	case "double":
		return func(r *avroReader) error { _, err := r.fixed(8); return err }, nil
	case "string", "bytes":
		return func(r *avroReader) error { _, err := r.bytes(); return err }, nil
	case "fixed":
		size := s.Size
		return func(r *avroReader) error { _, err := r.fixed(size); return err }, nil
	case "enum":
		return func(r *avroReader) error { _, err := r.long(); return err }, nil
	case "union":
		skips := make([]avroSkipFn, len(s.Branches))
		for k := range s.Branches {
			fn, err := avroSkip(&s.Branches[k], path)
			if err != nil {
				return nil, err
			}
			skips[k] = fn
		}
		return func(r *avroReader) error {
			idx, err := r.long()
			if err != nil {
				return err
			}
			if idx < 0 || idx >= int64(len(skips)) {
				return unionErr(idx, int64(len(skips)))
			}
			return skips[idx](r)
		}, nil
	}
	return nil, notPlanned(path, "Avro %s as a map value", s.Type)
}

// avroMinSize is the fewest bytes a value of s takes (0 or 1 is all that
// matters: an array count is bounded by the bytes left only when each item
// takes at least one).
func avroMinSize(s *avro.SchemaNode) int {
	switch s.Type {
	case "null":
		return 0
	case "fixed":
		return min(s.Size, 1)
	case "record":
		for k := range s.Fields {
			if avroMinSize(&s.Fields[k].Type) > 0 {
				return 1
			}
		}
		return 0
	}
	return 1 // every other value has at least a length, count, index or byte
}
