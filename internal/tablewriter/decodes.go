package tablewriter

import (
	"context"

	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// batchDecodes is the registry's decode of the framed values of one batch
// (Config.Registry), each made on first need and kept for the other looks
// at the batch in one Write: its schemas (registrySchemas.schemasOf decodes
// the first value of each schema id, and every Protobuf value) and its
// conversion on the general path, and the conversions again after drift
// (convertOn's rounds). A Protobuf value, or an Avro batch that misses the
// fast path, was decoded once for its schema and again in every round.
//
// Not safe for concurrent use: one Write uses it at a time.
type batchDecodes struct {
	dec   RegistryDecoder
	batch []Row
	// got are the decodes made, by batch index: a map, since the schema
	// lookup decodes only the first value of each Avro or JSON Schema id
	// (a slice per batch would be most of its allocation).
	got map[int]decodeResult
}

type decodeResult struct {
	d   registry.Decoded
	err error
}

// newBatchDecodes returns the decodes of batch through dec; nil (decode
// nothing) without a decoder.
func newBatchDecodes(dec RegistryDecoder, batch []Row) *batchDecodes {
	if dec == nil {
		return nil
	}
	return &batchDecodes{dec: dec, batch: batch}
}

// decode is the decode of the framed value batch[i]: made on first need,
// then kept. One that ctx ended is not kept (ctx's end holds the batch
// anyway).
func (b *batchDecodes) decode(ctx context.Context, i int) (registry.Decoded, error) {
	if r, ok := b.got[i]; ok {
		return r.d, r.err
	}
	value, _ := b.batch[i].AsBytes()
	d, err := b.dec.Decode(ctx, value)
	if err == nil || ctx.Err() == nil {
		if b.got == nil {
			b.got = map[int]decodeResult{}
		}
		b.got[i] = decodeResult{d: d, err: err}
	}
	return d, err
}

// drop lets the decoded values go once the batch is converted: they are
// not held through the wait for the batch to be durable. A conversion
// again (a batch written again after its stream died, or converted again
// on a newer schema) decodes afresh.
func (b *batchDecodes) drop() {
	if b != nil {
		b.got = nil
	}
}
