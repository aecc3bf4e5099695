// Package fastpath converts batches of Schema Registry framed Avro and
// Protobuf values into the zerobus output's Arrow records without a Go
// value per row: it fetches each schema once (through a SchemaSource, the
// registry client's job), matches it to the table's columns once
// (arrowconv.CompileAvro; for Protobuf arrowconv.CompileProtobuf, once per
// message the values' message-index arrays name) and reads each value's
// bytes straight into the column buffers (arrowconv.ConvertAvro,
// arrowconv.ConvertProtobuf).
//
// A Protobuf batch takes the fast path when all its values have one schema
// id and one message index; any other Protobuf batch, or one of a message
// the fast path does not plan, is left to the caller (ok false), whose
// general path converts it as before.
//
// A batch of several schema ids, or of a schema the fast path does not
// plan, takes the general path within Convert (the registry codec's decode,
// then ConvertStructured), which gives the same record. A batch with a
// value that is not framed, a schema that is not Avro, or a schema id the
// registry does not give for a reason of its own (unknown, unusable) is
// left to the caller, whose general path fails those rows alone: Convert
// reports ok false.
package fastpath

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowconv"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// SchemaSource gives a registry schema by id, its references resolved: the
// schema_registry_decode processor's registry client (registry.Client) is
// one.
type SchemaSource interface {
	Fetch(ctx context.Context, id int) (registry.Schema, error)
}

var _ SchemaSource = (*registry.Client)(nil)

// Options are the codec options of the general path a failing row is
// redone with: the shapes the fast path lands (preserve_logical_types and
// raw_unions on; Protobuf values kept decoded, serialize_to_json off, with
// no unset fields emitted), so that a redone row lands as the fast path
// would have landed it.
var Options = registry.Options{
	Avro:     registry.AvroOptions{PreserveLogicalTypes: true, RawUnions: true},
	Protobuf: registry.ProtobufOptions{SerializeToJSON: false},
}

// ValueDecoder is the caller's general path for one framed value (the
// schema_registry block's Holder is one): when the SchemaSource is one too,
// a Protobuf row the fast path does not take is redone with it, so that
// its value, or its error, is the one the caller's general path gives.
type ValueDecoder interface {
	Decode(ctx context.Context, value []byte) (registry.Decoded, error)
}

// Path is the fast path for one output. It is safe for concurrent use.
//
// Its plans are kept on the converter they were made for
// (arrowconv.Converter.Keep, by path and schema id, bounded there): a table
// that evolves gets a new converter, and the old one's plans go with it.
type Path struct {
	src SchemaSource
}

// planKey is the key of a plan kept on a converter: the path that made it
// (whose source the schema id is of) and the schema id.
type planKey struct {
	path *Path
	id   int
}

// plan is one schema matched to one converter, or why it is not planned.
type plan struct {
	avro  *arrowconv.AvroPlan // nil: not on the fast path (why says why)
	codec registry.Codec      // nil: not Avro, or not parsed (why says why)
	// proto is a Protobuf schema's codec, whose messages are planned each
	// on first use (protoKey); nil: not Protobuf, or not compiled.
	proto registry.ProtobufCodec
	why   error
}

// protoKey is the key of a Protobuf message's plan kept on a converter:
// the schema id and the message index (as text).
type protoKey struct {
	path  *Path
	id    int
	index string
}

// protoPlan is one Protobuf message matched to one converter, or why not.
type protoPlan struct {
	plan *arrowconv.ProtobufPlan // nil: not on the fast path
	why  error
}

// New returns the fast path fetching schemas from src.
func New(src SchemaSource) *Path {
	return &Path{src: src}
}

// Convert converts values, each a whole framed value, on conv when they are
// all framed with Avro schema ids: straight from their bytes when there is
// one id and the fast path plans it for conv's table, else through the
// general path (the registry codec's decode, then ConvertStructured), which
// gives the same record. A batch of one Protobuf schema id and one message
// index whose message is planned converts from its bytes too
// (convertProtobuf); any other Protobuf batch is the caller's. ok false
// means the batch is the caller's (a value not framed, a schema that is not
// Avro or a Protobuf batch not planned, a schema id the registry does
// not know or a schema it cannot use: the caller's general path fails
// those rows alone); nothing was converted. The error return is the
// registry's fault (registry.Retryable) or ctx's end, so the caller holds
// the batch and tries again.
func (p *Path) Convert(ctx context.Context, conv *arrowconv.Converter, values [][]byte) (res arrowconv.Result, ok bool, err error) {
	if len(values) == 0 {
		return arrowconv.Result{}, false, nil
	}
	// The usual batch is of one schema id: its ids are read without a
	// slice of them.
	first, _ := registry.Framed(values[0])
	one := true
	for _, v := range values {
		id, framed := registry.Framed(v)
		if !framed {
			return arrowconv.Result{}, false, nil
		}
		one = one && id == first
	}
	plans := map[int]*plan{}
	for _, v := range values {
		id, _ := registry.Framed(v)
		if plans[id] != nil {
			continue
		}
		pl, err := p.plan(ctx, conv, id)
		if err != nil {
			if registry.Retryable(err) || ctx.Err() != nil {
				return arrowconv.Result{}, false, err
			}
			// The schema's own fault (an id the registry does not know,
			// a schema it cannot use): the caller's general path fails
			// that id's rows alone, each with this reason.
			return arrowconv.Result{}, false, nil
		}
		if pl.proto != nil && one {
			return p.convertProtobuf(ctx, conv, pl, first, values)
		}
		if pl.codec == nil {
			return arrowconv.Result{}, false, nil
		}
		plans[id] = pl
		if one {
			break
		}
	}
	if pl := plans[first]; one && pl.avro != nil {
		bodies := make([][]byte, len(values))
		for i, v := range values {
			bodies[i] = v[registry.HeaderSize:]
		}
		res, err = conv.ConvertAvro(pl.avro, bodies, func(body []byte) (any, error) {
			v, _, err := pl.codec.Decode(body)
			return v, err
		})
		return res, err == nil, err
	}
	rows := make([]arrowconv.StructuredRow, len(values))
	for i, v := range values {
		id, _ := registry.Framed(v)
		d, _, err := plans[id].codec.Decode(v[registry.HeaderSize:])
		rows[i] = decoded{v: d, err: err}
	}
	res, err = conv.ConvertStructured(rows)
	return res, err == nil, err
}

// decoded is a value the codec decoded, or failed to, for ConvertStructured.
type decoded struct {
	v   any
	err error
}

func (r decoded) AsBytes() ([]byte, error)   { return nil, errDecodedOnly }
func (r decoded) HasStructured() bool        { return true }
func (r decoded) AsStructured() (any, error) { return r.v, r.err }

var errDecodedOnly = errors.New("fastpath: a decoded value has no bytes")

// Why says why values of schema id on conv do not take the fast path; nil
// when they do or the schema has not been met.
func (p *Path) Why(conv *arrowconv.Converter, id int) error {
	if pl, _ := conv.Kept(planKey{p, id}).(*plan); pl != nil {
		return pl.why
	}
	return nil
}

func (p *Path) plan(ctx context.Context, conv *arrowconv.Converter, id int) (*plan, error) {
	if pl, _ := conv.Kept(planKey{p, id}).(*plan); pl != nil {
		return pl, nil
	}
	s, err := p.src.Fetch(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	pl := makePlan(conv, s)
	conv.Keep(planKey{p, id}, pl)
	return pl, nil
}

var errNotAvro = errors.New("not an Avro or Protobuf schema")

func makePlan(conv *arrowconv.Converter, s registry.Schema) *plan {
	if s.Format == registry.Protobuf {
		codec, err := registry.NewProtobufCodec(s, Options.Protobuf)
		if err != nil {
			return &plan{why: err}
		}
		return &plan{proto: codec}
	}
	if s.Format != registry.Avro && s.Format != "" {
		return &plan{why: fmt.Errorf("schema %d: %w (%s)", s.ID, errNotAvro, s.Format)}
	}
	// One parse gives the codec (the general path's decode) and the tree
	// matched to conv's columns.
	codec, tree, err := registry.NewAvroCodec(s, Options.Avro)
	if err != nil {
		return &plan{why: err}
	}
	ap, err := conv.CompileAvro(tree)
	if err != nil {
		return &plan{codec: codec, why: fmt.Errorf("schema %d: %w", s.ID, err)}
	}
	return &plan{avro: ap, codec: codec}
}

// convertProtobuf converts a batch of Protobuf values of schema id (whose
// plan is pl) on the fast path when they all have one message index and
// its message is planned for conv; ok false otherwise (the caller's
// general path converts them).
func (p *Path) convertProtobuf(ctx context.Context, conv *arrowconv.Converter, pl *plan, id int, values [][]byte) (res arrowconv.Result, ok bool, err error) {
	var firstBuf, curBuf [8]int
	first, _, ok := registry.MessageIndex(values[0][registry.HeaderSize:], firstBuf[:0])
	if !ok {
		return arrowconv.Result{}, false, nil
	}
	payloads := make([][]byte, len(values))
	for i, v := range values {
		body := v[registry.HeaderSize:]
		index, n, ok := registry.MessageIndex(body, curBuf[:0])
		if !ok || !slices.Equal(index, first) {
			return arrowconv.Result{}, false, nil
		}
		payloads[i] = body[n:]
	}
	pp := p.protoPlan(conv, pl, id, first)
	if pp.plan == nil {
		return arrowconv.Result{}, false, nil
	}
	redo := func(i int) (any, error) {
		v, _, err := pl.proto.Decode(values[i][registry.HeaderSize:])
		return v, err
	}
	if dec, ok := p.src.(ValueDecoder); ok {
		redo = func(i int) (any, error) {
			d, err := dec.Decode(ctx, values[i])
			return d.Value, err
		}
	}
	res, err = conv.ConvertProtobuf(pp.plan, payloads, redo)
	if err == nil && ctx.Err() != nil {
		// A redone row may have met ctx's end in the decoder: the batch
		// is held, as the caller's general path holds it.
		res.Record.Release()
		return arrowconv.Result{}, false, fmt.Errorf("the schema registry could not be read: %w", ctx.Err())
	}
	return res, err == nil, err
}

// protoPlan returns the plan of the message index names in pl's schema on
// conv, made on first use and kept on conv.
func (p *Path) protoPlan(conv *arrowconv.Converter, pl *plan, id int, index []int) *protoPlan {
	key := protoKey{path: p, id: id, index: indexKey(index)}
	if pp, _ := conv.Kept(key).(*protoPlan); pp != nil {
		return pp
	}
	pp := makeProtoPlan(conv, pl.proto, id, index)
	conv.Keep(key, pp)
	return pp
}

var errProtoOptions = errors.New("the codec's options are not the fast path's (serialize_to_json, emit_unpopulated and emit_default_values off)")

func makeProtoPlan(conv *arrowconv.Converter, codec registry.ProtobufCodec, id int, index []int) *protoPlan {
	o := codec.Options()
	if o.SerializeToJSON || o.EmitUnpopulated || o.EmitDefaultValues {
		return &protoPlan{why: fmt.Errorf("schema %d: %w: %w", id, arrowconv.ErrProtobufNotPlanned, errProtoOptions)}
	}
	md, err := codec.Message(index)
	if err != nil {
		return &protoPlan{why: err}
	}
	pp, err := conv.CompileProtobuf(md, arrowconv.ProtobufOptions{UseProtoNames: o.UseProtoNames, UseEnumNumbers: o.UseEnumNumbers})
	if err != nil {
		return &protoPlan{why: fmt.Errorf("schema %d message %s: %w", id, md.FullName(), err)}
	}
	return &protoPlan{plan: pp}
}

// WhyProtobuf says why values of schema id with message index on conv do
// not take the fast path; nil when they do or have not been met.
func (p *Path) WhyProtobuf(conv *arrowconv.Converter, id int, index []int) error {
	if pl, _ := conv.Kept(planKey{p, id}).(*plan); pl != nil && pl.proto == nil {
		return pl.why
	}
	if pp, _ := conv.Kept(protoKey{path: p, id: id, index: indexKey(index)}).(*protoPlan); pp != nil {
		return pp.why
	}
	return nil
}

func indexKey(index []int) string {
	var b strings.Builder
	for i, v := range index {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(v))
	}
	return b.String()
}
