package registry

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/linker"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

// protobufCodec decodes the Protobuf values written with one registry schema.
// A value starts with the Confluent message-index array, which picks the
// message type among the schema's messages (nested ones by path).
//
// With protobuf.serialize_to_json (the default) Redpanda Connect's message is
// the protojson text of the value. protojson deliberately varies its
// whitespace from build to build, so the codec returns that text parsed:
// map[string]any with json.Number numbers, as encoding/json reads it with
// UseNumber. Serialising it again gives the same JSON document (64-bit
// integers as strings, bytes as base64, Timestamps as RFC 3339 text, enums
// by name), though not the same bytes.
//
// Without serialize_to_json the value is "kept in decoded form" (Connect's
// docs): see protoValue.
type protobufCodec struct {
	id   int
	main protoreflect.FileDescriptor
	opts ProtobufOptions
	json protojson.MarshalOptions
	// schemas caches the common schema of each message type, by full name.
	schemas map[protoreflect.FullName]*commonschema.Schema
}

// maxMessageIndexLength bounds the message-index array: its length is the
// nesting depth of the message, which no real schema takes near this.
const maxMessageIndexLength = 64

// newProtobufCodec compiles s and its references in memory, keyed by import
// path; the well-known google/protobuf imports resolve without a reference.
func newProtobufCodec(s Schema, o ProtobufOptions) (Codec, error) {
	sources := map[string]string{}
	if err := collectProtoSources(s.References, sources); err != nil {
		return nil, fmt.Errorf("schema %d: %w", s.ID, err)
	}
	// The schema itself has no import path: any name no reference has.
	mainPath := fmt.Sprintf("registry-schema-%d.proto", s.ID)
	for _, taken := sources[mainPath]; taken; _, taken = sources[mainPath] {
		mainPath = "_" + mainPath
	}
	sources[mainPath] = s.Text
	compiler := protocompile.Compiler{Resolver: protocompile.WithStandardImports(protoSources(sources))}
	compiled, err := compiler.Compile(context.Background(), mainPath)
	if err != nil {
		return nil, fmt.Errorf("schema %d: compiling the Protobuf schema: %w", s.ID, err)
	}
	files, err := standardDescriptors(compiled[0])
	if err != nil {
		return nil, fmt.Errorf("schema %d: %w", s.ID, err)
	}
	main, err := files.FindFileByPath(mainPath)
	if err != nil {
		return nil, fmt.Errorf("schema %d: %w", s.ID, err)
	}
	c := &protobufCodec{
		id:   s.ID,
		main: main,
		opts: o,
		json: protojson.MarshalOptions{
			UseProtoNames:     o.UseProtoNames,
			UseEnumNumbers:    o.UseEnumNumbers,
			EmitUnpopulated:   o.EmitUnpopulated,
			EmitDefaultValues: o.EmitDefaultValues,
			Resolver:          dynamicpb.NewTypes(files),
		},
		schemas: map[protoreflect.FullName]*commonschema.Schema{},
	}
	if c.main.Messages().Len() == 0 {
		return nil, fmt.Errorf("schema %d: the Protobuf schema defines no message", s.ID)
	}
	// Every message's schema up front, so Decode only reads the map.
	if err := c.buildSchemas(c.main.Messages()); err != nil {
		return nil, fmt.Errorf("schema %d: %w", s.ID, err)
	}
	return c, nil
}

func (c *protobufCodec) buildSchemas(msgs protoreflect.MessageDescriptors) error {
	for i := range msgs.Len() {
		md := msgs.Get(i)
		if md.IsMapEntry() {
			continue
		}
		s, err := protoCommonSchema(md, c.opts)
		if err != nil {
			return err
		}
		c.schemas[md.FullName()] = &s
		if err := c.buildSchemas(md.Messages()); err != nil {
			return err
		}
	}
	return nil
}

// standardDescriptors rebuilds a compiled file and its imports as the
// protobuf runtime's own descriptors, which answer the questions decoding
// asks of every field (presence, kind) from fields they keep, where the
// compiler's resolve them again each time: decoding is about a fifth faster.
func standardDescriptors(f linker.File) (*protoregistry.Files, error) {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(f)
	files, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, fmt.Errorf("building the Protobuf descriptors: %w", err)
	}
	return files, nil
}

// protoSources resolves an import path to its schema, which the registry
// holds either as .proto text or, when it was registered in the registry's
// "serialized" format (Confluent's own JavaScript serializer does this), as a
// base64 FileDescriptorProto
// (https://docs.confluent.io/platform/current/schema-registry/develop/api.html#get--schemas-ids-int-%20id,
// format=serialized).
func protoSources(sources map[string]string) protocompile.Resolver {
	return protocompile.ResolverFunc(func(path string) (protocompile.SearchResult, error) {
		text, ok := sources[path]
		if !ok {
			return protocompile.SearchResult{}, fmt.Errorf("import %q: %w", path, fs.ErrNotExist)
		}
		if fd := serializedDescriptor(text); fd != nil {
			fd.Name = proto.String(path)
			return protocompile.SearchResult{Proto: fd}, nil
		}
		return protocompile.SearchResult{Source: strings.NewReader(text)}, nil
	})
}

// serializedDescriptor reads text as a base64 FileDescriptorProto, or
// returns nil. .proto text is never valid base64: it has spaces and ';'.
func serializedDescriptor(text string) *descriptorpb.FileDescriptorProto {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil || len(raw) == 0 {
		return nil
	}
	fd := new(descriptorpb.FileDescriptorProto)
	if proto.Unmarshal(raw, fd) != nil {
		return nil
	}
	return fd
}

// collectProtoSources adds every reference, and theirs, under its import path.
func collectProtoSources(refs []Reference, sources map[string]string) error {
	for _, r := range refs {
		if have, ok := sources[r.Name]; ok {
			if have != r.Schema.Text {
				return fmt.Errorf("two different schemas are referenced as import %q", r.Name)
			}
			continue
		}
		sources[r.Name] = r.Schema.Text
		if err := collectProtoSources(r.Schema.References, sources); err != nil {
			return err
		}
	}
	return nil
}

// Decode reads the message-index array, then the message it names.
func (c *protobufCodec) Decode(body []byte) (any, *commonschema.Schema, error) {
	index, payload, err := new(sr.ConfluentHeader).DecodeIndex(body, maxMessageIndexLength)
	if err != nil {
		if errors.Is(err, sr.ErrNotRegistered) {
			err = fmt.Errorf("more than %d indexes", maxMessageIndexLength)
		}
		return nil, nil, fmt.Errorf("schema %d: reading the Protobuf message-index array: %w", c.id, err)
	}
	md, err := c.message(index)
	if err != nil {
		return nil, nil, fmt.Errorf("schema %d: %w", c.id, err)
	}
	msg := dynamicpb.NewMessage(md)
	if err := c.unmarshal(payload, msg); err != nil {
		return nil, nil, fmt.Errorf("schema %d: decoding Protobuf message %s (message index %s): %w", c.id, md.FullName(), indexText(index), err)
	}
	schema := c.schemas[md.FullName()]
	if !c.opts.SerializeToJSON {
		p := protoValue{opts: c.opts, json: c.json}
		v := p.message(msg)
		if p.err != nil {
			return nil, nil, fmt.Errorf("schema %d: Protobuf message %s: %w", c.id, md.FullName(), p.err)
		}
		return v, schema, nil
	}
	v, err := protoJSONValue(c.json, msg)
	if err != nil {
		return nil, nil, fmt.Errorf("schema %d: Protobuf message %s as JSON: %w", c.id, md.FullName(), err)
	}
	return v, schema, nil
}

// unmarshal reads payload into msg. google.golang.org/protobuf (v1.36.12)
// panics on some malformed map entries of a dynamic message ("type
// mismatch: cannot convert nil to map key", found by FuzzCodecs): that is
// this value's fault, an error failing its message alone, not a crash of
// the pipeline.
func (c *protobufCodec) unmarshal(payload []byte, msg *dynamicpb.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed Protobuf value (the decoder panicked: %v)", p)
		}
	}()
	return proto.UnmarshalOptions{Resolver: c.json.Resolver}.Unmarshal(payload, msg)
}

// message follows the message-index path: the first index picks a top-level
// message of the schema, each next one a message nested in the last. Map
// entries are not counted: they are not messages of the schema text, which is
// what Confluent's serializers number (the message-index array in
// https://docs.confluent.io/platform/current/schema-registry/fundamentals/serdes-develop/index.html#wire-format).
func (c *protobufCodec) message(index []int) (protoreflect.MessageDescriptor, error) {
	msgs := c.main.Messages()
	var md protoreflect.MessageDescriptor
	for depth, i := range index {
		next := nthMessage(msgs, i)
		if next == nil {
			where := "the schema"
			if md != nil {
				where = "message " + string(md.FullName())
			}
			return nil, fmt.Errorf("message index %s: index %d at depth %d is past the %d messages of %s", indexText(index), i, depth, countMessages(msgs), where)
		}
		md = next
		msgs = md.Messages()
	}
	return md, nil
}

// nthMessage returns the i-th message of msgs that is not a map entry, or nil.
func nthMessage(msgs protoreflect.MessageDescriptors, i int) protoreflect.MessageDescriptor {
	if i < 0 {
		return nil
	}
	for j := range msgs.Len() {
		md := msgs.Get(j)
		if md.IsMapEntry() {
			continue
		}
		if i == 0 {
			return md
		}
		i--
	}
	return nil
}

func countMessages(msgs protoreflect.MessageDescriptors) int {
	n := 0
	for j := range msgs.Len() {
		if !msgs.Get(j).IsMapEntry() {
			n++
		}
	}
	return n
}

func indexText(index []int) string {
	parts := make([]string, len(index))
	for i, v := range index {
		parts[i] = strconv.Itoa(v)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// ProtobufCodec is the codec of a Protobuf schema with the message
// descriptors it decodes with: a fast path plans each message from the
// same descriptors the codec reads values with.
type ProtobufCodec interface {
	Codec
	// Message is the message a value's message-index array names (nil:
	// [0]), the error the codec would fail the value with when it names
	// none.
	Message(index []int) (protoreflect.MessageDescriptor, error)
	// Options are the options the codec was made with.
	Options() ProtobufOptions
}

// NewProtobufCodec makes the codec for the Protobuf schema s.
func NewProtobufCodec(s Schema, o ProtobufOptions) (ProtobufCodec, error) {
	c, err := newProtobufCodec(s, o)
	if err != nil {
		return nil, err
	}
	return c.(*protobufCodec), nil
}

// Message is the message of index, as Decode resolves it.
func (c *protobufCodec) Message(index []int) (protoreflect.MessageDescriptor, error) {
	if len(index) == 0 {
		index = []int{0}
	}
	md, err := c.message(index)
	if err != nil {
		return nil, fmt.Errorf("schema %d: %w", c.id, err)
	}
	return md, nil
}

// Options are the codec's options.
func (c *protobufCodec) Options() ProtobufOptions { return c.opts }

// MessageIndex reads the Confluent message-index array at the start of a
// Protobuf value's body (what follows the 5-byte header) as Decode reads
// it, into index (reused; the single byte 0 is [0]), and returns it with
// the length of the array's bytes; ok is false when the array does not read
// or has more than maxMessageIndexLength indexes (Decode then fails the
// value). It allocates nothing when index has room.
func MessageIndex(body []byte, index []int) (_ []int, n int, ok bool) {
	count, n := binary.Varint(body)
	if n <= 0 || count < 0 || count > maxMessageIndexLength {
		return index, 0, false
	}
	index = index[:0]
	if count == 0 {
		return append(index, 0), n, true
	}
	for range count {
		v, k := binary.Varint(body[n:])
		if k <= 0 {
			return index, 0, false
		}
		index = append(index, int(v))
		n += k
	}
	return index, n, true
}
