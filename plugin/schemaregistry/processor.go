package schemaregistry

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/benthos-zerobus/benthos-zerobus/internal/backoff"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/commonschema"
	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp"
	"github.com/benthos-zerobus/benthos-zerobus/internal/registry"
)

// Retry bounds while the registry cannot be read: the first wait is short so
// that a blip costs little, and the longest is 30 s so that a registry back
// up is seen within half a minute.
const (
	retryInitial = time.Second
	retryMax     = 30 * time.Second
	// downAfter is how long a fault is reported degraded before down.
	downAfter = 30 * time.Second
)

// processor is the schema_registry_decode BatchProcessor.
type processor struct {
	Holder
	cfg Config
	// schemas holds each common schema's serialised form, made once per
	// schema rather than per message.
	schemas  sync.Map // *commonschema.Schema → any
	nSchemas int
	mu       sync.Mutex
	shared   *shared
}

func newProcessor(cfg Config, mgr *service.Resources) (*processor, error) {
	return newProcessorWith(cfg, mgr, nil)
}

// newProcessorWith is newProcessor with the codec maker (registry.NewCodec
// when nil) given, for tests.
func newProcessorWith(cfg Config, mgr *service.Resources, makeCodec func(registry.Schema, registry.Options) (registry.Codec, error)) (*processor, error) {
	// Benthos builds a pipeline's processors once per thread: the threads
	// of one processor config share its decoder (one cache, one fetch per
	// id), its fault state (one explanation, one health entry) and its
	// start-up line.
	key := sharedKey{label: mgr.Label(), knobs: cfg.knobs(), mapping: cfg.MappingText, credentials: cfg.credentialsID}
	var sh *shared
	if v, ok := mgr.GetGeneric(key); ok {
		sh = v.(*shared)
	} else {
		client, err := cfg.NewRegistryClient()
		if err != nil {
			return nil, fieldErr(fURL, err)
		}
		fresh := &shared{
			dec: registry.NewDecoder(client, registry.DecoderConfig{
				Options: cfg.Options, Prepare: cfg.prepare(),
				DefaultID: cfg.DefaultID, HasDefaultID: cfg.HasDefaultID,
				CacheDuration: cfg.CacheDuration, CacheSize: registry.DefaultCacheSize,
				MakeCodec: makeCodec,
			}),
			fault: &faultState{name: Name, url: client.URL(), now: time.Now},
		}
		v, loaded := mgr.GetOrSetGeneric(key, fresh)
		sh = v.(*shared)
		if !loaded {
			mgr.Logger().Infof("%s settings: %s", Name, cfg.knobs())
			var herr error
			_, sh.unhealth, herr = healthhttp.AttachProcessor(mgr, mgr.Label(), healthhttp.Processor{Type: Name, Health: sh.fault.health})
			if herr != nil {
				mgr.Logger().Warnf("%s: no health endpoint %s: %v", Name, healthhttp.Path, herr)
			}
		}
	}
	sh.mu.Lock()
	sh.users++
	sh.mu.Unlock()
	return &processor{
		Holder: Holder{dec: sh.dec, fault: sh.fault, log: mgr.Logger(), retryInitial: retryInitial, retryMax: retryMax},
		cfg:    cfg, shared: sh,
	}, nil
}

// sharedKey identifies one processor config of a manager.
type sharedKey struct{ label, knobs, mapping, credentials string }

// shared is what the threads of one processor config share.
type shared struct {
	dec      *registry.Decoder
	fault    *faultState
	mu       sync.Mutex
	users    int
	unhealth func()
}

// ProcessBatch decodes every message. A message that cannot be decoded
// (not framed, unknown id, a value that does not match its schema) gets its
// error and goes on; while the registry cannot be read the batch is held
// here, retried with back-off, and on shutdown (ctx done) returned as an
// error so that the engine nacks it: nothing is failed for a registry fault.
func (p *processor) ProcessBatch(ctx context.Context, batch service.MessageBatch) ([]service.MessageBatch, error) {
	for i, msg := range batch {
		value, err := msg.AsBytes()
		if err != nil {
			msg.SetError(fmt.Errorf("%s: message %d: %w", Name, i, err))
			continue
		}
		d, err := p.Decode(ctx, value)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%s: stopped while the schema registry could not be read: %w", Name, ctx.Err())
			}
			msg.SetError(fmt.Errorf("%s: message %d: %w", Name, i, err))
			continue
		}
		if b, ok := d.Value.([]byte); ok {
			msg.SetBytes(b)
		} else {
			msg.SetStructuredMut(d.Value)
		}
		msg.MetaSetMut(MetaSchemaID, d.ID)
		if d.Subject != "" {
			msg.MetaSetMut(MetaSchemaSubject, d.Subject)
			msg.MetaSetMut(MetaSchemaVersion, d.Version)
		}
		if key := p.cfg.StoreKeys[formatOf(d.Format)]; key != "" && d.Common != nil {
			msg.MetaSetMut(key, p.serialised(d.Common))
		}
	}
	return []service.MessageBatch{batch}, nil
}

// serialised is s's common schema form, made once per schema. The value is
// shared by the messages of that schema: it is read, never modified, by
// the zerobus output.
func (p *processor) serialised(s *commonschema.Schema) any {
	if v, ok := p.schemas.Load(s); ok {
		return v
	}
	v := s.ToAny()
	p.mu.Lock()
	// Codecs live in a cache bounded by count; so does this, coarsely.
	if p.nSchemas >= 4*registry.DefaultCacheSize {
		p.schemas.Clear()
		p.nSchemas = 0
	}
	p.nSchemas++
	p.mu.Unlock()
	p.schemas.Store(s, v)
	return v
}

func formatOf(f registry.Format) registry.Format {
	if f == "" {
		return registry.Avro
	}
	return f
}

// Close removes the processor from the health endpoint once its last
// thread closes.
func (p *processor) Close(context.Context) error {
	sh := p.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.users--; sh.users == 0 && sh.unhealth != nil {
		sh.unhealth()
	}
	return nil
}

// faultState is the registry fault the processor is waiting out, if any:
// logged once when it starts, reminded at 10 and 30 minutes and then
// twice as far apart each time (backoff.Reminder), logged when it heals,
// and reported by the health endpoint meanwhile.
type faultState struct {
	name string // what holds the batches, for the log: the processor's name
	url  string
	now  func() time.Time

	mu      sync.Mutex
	since   time.Time // zero while healthy
	err     error
	retries int
	remind  backoff.Reminder
}

// setClock replaces the clock (tests move it on while a batch is held).
func (f *faultState) setClock(now func() time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = now
}

// set records err; the first time it explains what happens.
func (f *faultState) set(log *service.Logger, err error, wait time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	f.err = err
	f.retries++
	if f.since.IsZero() {
		f.since = now
		f.remind = backoff.Reminder{First: backoff.DefaultRemindFirst}
		f.remind.Start(now)
		log.Errorf("%s: %v; %s. The batch is held and the schema is fetched again with back-off (next in %s): nothing is failed or dropped, and it resumes by itself once the registry answers",
			f.name, err, advice(err), wait.Round(time.Millisecond))
		return
	}
	if due, nextIn := f.remind.Due(now); due {
		log.Warnf("%s: still waiting for the schema registry after %s (%d attempts; next reminder in %s): %v; %s", f.name, now.Sub(f.since).Round(time.Second), f.retries, nextIn, err, advice(err))
	}
}

// clear ends a fault: the registry answered.
func (f *faultState) clear(log *service.Logger) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.since.IsZero() {
		return
	}
	log.Infof("%s: the schema registry %s answers again after %s (%d attempts); the held batches go on", f.name, f.url, f.now().Sub(f.since).Round(time.Millisecond), f.retries)
	f.since, f.err, f.retries = time.Time{}, nil, 0
}

// health is the processor's health: degraded while a fault is younger than
// downAfter, down after.
func (f *faultState) health() (string, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.since.IsZero() {
		return healthhttp.StatusUp, nil
	}
	age := f.now().Sub(f.since)
	status := healthhttp.StatusDegraded
	if age >= downAfter {
		status = healthhttp.StatusDown
	}
	return status, []string{fmt.Sprintf("batches held for %s (%d attempts): %v; %s", age.Round(time.Second), f.retries, f.err, advice(f.err))}
}

// advice says what to do about a registry fault.
func advice(err error) string {
	var ua *registry.UnauthorizedError
	if errors.As(err, &ua) {
		return "fix the credentials (or their rights at the registry); they are tried again without a restart"
	}
	var wu *registry.WrongURLError
	if errors.As(err, &wu) {
		return "set " + wu.Field + " to the registry's base URL (the path its /schemas/ids/{id} is under), or fix the proxy in front of it"
	}
	var unknownCA x509.UnknownAuthorityError
	var badName x509.HostnameError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &unknownCA) || errors.As(err, &badName) || errors.As(err, &invalid) {
		return "the registry's certificate is not trusted: set tls.root_cas or tls.root_cas_file to its CA (the system roots are used otherwise)"
	}
	return "check that the registry is up and reachable from here"
}
