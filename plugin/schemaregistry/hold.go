package schemaregistry

import (
	"context"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/backoff"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// Holder reads the registry through a decoder and waits out the
// registry's faults (registry.Retryable: unreachable, 5xx, refused
// credentials, a 404 without a registry error): it retries with back-off
// (1 s doubling to 30 s) until the registry answers or ctx ends, explains
// the fault once (a reminder every minute, a line when it heals) and
// reports it in Health. The processor
// holds its batches with one; so does the zerobus output's
// schema_registry block.
type Holder struct {
	dec   *registry.Decoder
	fault *faultState
	log   *service.Logger
	// retryInitial and retryMax are the back-off bounds (tests shorten them).
	retryInitial, retryMax time.Duration
}

// NewHolder is a Holder decoding with opts through a client of c, its
// faults explained under name (such as "zerobus output schema_registry").
func NewHolder(c Client, opts registry.Options, log *service.Logger, name string) (*Holder, error) {
	client, err := c.NewRegistryClient()
	if err != nil {
		return nil, err
	}
	return &Holder{
		dec: registry.NewDecoder(client, registry.DecoderConfig{
			Options: opts, CacheDuration: c.CacheDuration, CacheSize: registry.DefaultCacheSize,
		}),
		fault: &faultState{name: name, url: client.URL(), now: time.Now},
		log:   log, retryInitial: retryInitial, retryMax: retryMax,
	}, nil
}

// SetBackoff changes the back-off bounds (tests shorten them).
func (h *Holder) SetBackoff(initial, maxWait time.Duration) {
	h.retryInitial, h.retryMax = initial, maxWait
}

// Decode decodes a framed value, waiting out registry faults (see Holder):
// it retries with back-off while the registry cannot be read
// (registry.Retryable), until it can or ctx is done. Its errors are the
// value's own (not framed, unknown schema id, a value that does not match
// its schema) or ctx's.
func (h *Holder) Decode(ctx context.Context, value []byte) (registry.Decoded, error) {
	return hold(ctx, h, func() (registry.Decoded, error) { return h.dec.Decode(ctx, value) })
}

// Fetch is the schema of id, from the decoder's cache or the registry,
// waiting out registry faults (see Holder).
func (h *Holder) Fetch(ctx context.Context, id int) (registry.Schema, error) {
	return hold(ctx, h, func() (registry.Schema, error) { return h.dec.Schema(ctx, id) })
}

// Health is the holder's health endpoint status and problems: up, degraded
// while a fault is younger than 30 s, down after.
func (h *Holder) Health() (string, []string) { return h.fault.health() }

// hold calls try until it succeeds or fails for a reason that is not the
// registry's (registry.Retryable), waiting with back-off between tries.
func hold[T any](ctx context.Context, h *Holder, try func() (T, error)) (T, error) {
	var bo *backoff.Backoff
	for {
		v, err := try()
		if err == nil || !registry.Retryable(err) {
			if bo != nil && ctx.Err() == nil {
				h.fault.clear(h.log) // the held batch went on
			}
			return v, err
		}
		if bo == nil {
			bo = backoff.New(h.retryInitial, h.retryMax)
		}
		wait := bo.Next()
		h.fault.set(h.log, err, wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return v, ctx.Err()
		}
	}
}
