package registry

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
)

// DecoderConfig is what a Decoder needs besides its client.
type DecoderConfig struct {
	Options Options
	// Prepare, when set, rewrites a schema before its codec is made (the
	// processor's avro.mapping). An error fails the messages of that id.
	Prepare func(Schema) (Schema, error)
	// DefaultID, when HasDefaultID, is the schema of values that are not in
	// the wire format (Redpanda Connect's default_schema_id): the whole
	// value is then the encoded body.
	DefaultID    int
	HasDefaultID bool
	// MakeCodec makes a schema's codec (NewCodec when nil).
	MakeCodec func(Schema, Options) (Codec, error)
	// CacheDuration and CacheSize bound the cache (defaults when zero).
	CacheDuration time.Duration
	CacheSize     int
}

// Decoder decodes registry-framed values: it reads the header, gets the
// schema's codec from its cache or the registry, and decodes. It is safe for
// concurrent use.
type Decoder struct {
	client *Client
	conf   DecoderConfig
	cache  *Cache[*entry]
}

// entry is one cached schema with its codec.
type entry struct {
	schema Schema
	codec  Codec
}

// Decoded is one decoded value with the schema it was written with.
type Decoded struct {
	// Value is the value in Redpanda Connect's shapes (see Codec).
	Value any
	// Common is the common schema of Value, shared: do not modify.
	Common *commonschema.Schema
	// ID is the schema id; Subject and Version are set when the registry
	// named them.
	ID      int
	Subject string
	Version int
	Format  Format
}

// NewDecoder makes a decoder reading schemas through client.
func NewDecoder(client *Client, conf DecoderConfig) *Decoder {
	return &Decoder{client: client, conf: conf, cache: NewCache[*entry](conf.CacheDuration, conf.CacheSize)}
}

// Client is the decoder's registry client.
func (d *Decoder) Client() *Client { return d.client }

// Cache is the decoder's schema cache.
func (d *Decoder) Cache() *Cache[*entry] { return d.cache }

// Decode decodes one value. Errors: *NotFramedError (the value is not in the
// wire format), the errors of Client.Fetch (Retryable ones are the
// registry's fault: try again later; the others are the message's), a
// *SchemaError when no codec could be made for the schema, or the codec's
// error wrapped with the schema id.
func (d *Decoder) Decode(ctx context.Context, value []byte) (Decoded, error) {
	// Framed first: with default_schema_id every value may be unframed,
	// and ParseHeader's error is only made when it is returned.
	id, framed := Framed(value)
	body := value
	switch {
	case framed:
		body = value[HeaderSize:]
	case !d.conf.HasDefaultID:
		_, _, err := ParseHeader(value)
		return Decoded{}, err
	default:
		id = d.conf.DefaultID
	}
	e, err := d.cache.Get(ctx, id, func(ctx context.Context) (*entry, error) { return d.load(ctx, id) })
	if err != nil {
		return Decoded{}, err
	}
	if !framed && e.schema.Format == Protobuf {
		_, _, hdrErr := ParseHeader(value)
		return Decoded{}, fmt.Errorf("%w; default_schema_id %d is a Protobuf schema, which needs the message index of the wire format", hdrErr, id)
	}
	v, common, err := e.codec.Decode(body)
	if err != nil {
		return Decoded{}, &valueError{prefix: fmt.Sprintf("schema id %d%s: ", id, e.schema.describe()), id: id, err: err}
	}
	return Decoded{Value: v, Common: common, ID: id, Subject: e.schema.Subject, Version: e.schema.Version, Format: e.schema.Format}, nil
}

// Schema is the schema of id (prepared, its references resolved) from the
// decoder's cache, or the registry when not cached; errors as Decode's.
func (d *Decoder) Schema(ctx context.Context, id int) (Schema, error) {
	e, err := d.cache.Get(ctx, id, func(ctx context.Context) (*entry, error) { return d.load(ctx, id) })
	if err != nil {
		return Schema{}, err
	}
	return e.schema, nil
}

// load fetches id and makes its codec.
func (d *Decoder) load(ctx context.Context, id int) (*entry, error) {
	s, err := d.client.Fetch(ctx, id)
	if err != nil {
		return nil, err
	}
	if d.conf.Prepare != nil {
		if s, err = d.conf.Prepare(s); err != nil {
			return nil, &SchemaError{ID: id, Err: err}
		}
	}
	mk := d.conf.MakeCodec
	if mk == nil {
		mk = NewCodec
	}
	c, err := makeCodec(mk, s, d.conf.Options)
	if err != nil {
		return nil, &SchemaError{ID: id, Err: fmt.Errorf("%s schema%s: %w", formatName(s.Format), s.describe(), err)}
	}
	return &entry{schema: s, codec: c}, nil
}

// makeCodec is mk(s, o), a panic of it (a parser meeting a schema text it
// did not foresee) an error: the messages of that id then fail, where the
// panic would leave the cache entry loading for ever, holding every later
// message of the id, or crash the pipeline.
func makeCodec(mk func(Schema, Options) (Codec, error), s Schema, o Options) (c Codec, err error) {
	defer func() {
		if p := recover(); p != nil {
			c, err = nil, fmt.Errorf("the schema parser panicked: %v", p)
		}
	}()
	return mk(s, o)
}

// describe is " (subject S version N)" when the subject is known.
func (s Schema) describe() string {
	if s.Subject == "" {
		return ""
	}
	return fmt.Sprintf(" (subject %s version %d)", s.Subject, s.Version)
}

func formatName(f Format) string {
	if f == "" {
		return string(Avro)
	}
	return string(f)
}

// valueError is a value that does not decode with its schema. Its text is
// prefix and the codec's error, less the codec's own "schema N: ", which
// prefix says already.
type valueError struct {
	prefix string
	id     int
	err    error
}

func (e *valueError) Error() string {
	return e.prefix + strings.TrimPrefix(e.err.Error(), fmt.Sprintf("schema %d: ", e.id))
}

func (e *valueError) Unwrap() error { return e.err }
