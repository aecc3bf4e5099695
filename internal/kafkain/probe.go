package kafkain

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// probeTimeout bounds one probe: a broker that accepts the connection but
// never answers is an attempt that failed, not a Connect that hangs.
const probeTimeout = 30 * time.Second

// failedRequests is a franz-go hook that keeps the key of the last request
// a broker failed on: franz-go returns a bare io.EOF when a broker closes
// the connection, and the key says whether that was during the SASL
// exchange.
type failedRequests struct {
	mu  sync.Mutex
	key int16
}

func newFailedRequests() *failedRequests { return &failedRequests{key: -1} }

func (f *failedRequests) note(key int16, err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	f.key = key
	f.mu.Unlock()
}

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (f *failedRequests) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	f.note(key, err)
}

// OnBrokerRead implements kgo.HookBrokerRead.
func (f *failedRequests) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	f.note(key, err)
}

func (f *failedRequests) last() int16 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.key
}

// probe checks, with a client of the connection options conn only (a
// consumer group's client would join the group as soon as it exists), that
// a seed broker answers and accepts the credentials, that the named topics
// exist (not with Regex: a pattern may match nothing yet) and that the
// consumer group may be used. Its error is a *ConnectError.
func (c *Consumer) probe(ctx context.Context, conn []kgo.Opt) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	failed := newFailedRequests()
	cl, err := kgo.NewClient(append(slices.Clip(conn), kgo.WithHooks(failed))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	a := attempt{sasl: c.cfg.saslIdentity(), tls: c.cfg.TLS != nil}
	fail := func(err error) error {
		a.failedKey = failed.last()
		return classify(err, a, c.cfg.SeedBrokers)
	}
	if err := cl.Ping(ctx); err != nil {
		if a.tls && dialFailed(err) && isTimeout(err) {
			a.handshakeHung = tcpOpens(ctx, c.cfg.SeedBrokers[0])
		}
		return fail(err)
	}
	if topics := c.cfg.namedTopics(); len(topics) > 0 {
		req := kmsg.NewPtrMetadataRequest()
		req.AllowAutoTopicCreation = false
		for _, t := range topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(t)
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return fail(err)
		}
		for _, t := range resp.Topics {
			if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
				ce := fail(err).(*ConnectError)
				if t.Topic != nil {
					ce.Detail = fmt.Sprintf("topic %s: %s", *t.Topic, ce.Detail)
				}
				return ce
			}
		}
	}
	if c.cfg.Group != "" {
		r := kadm.NewClient(cl).FindGroupCoordinators(ctx, c.cfg.Group)[c.cfg.Group]
		if r.Err != nil {
			ce := fail(r.Err).(*ConnectError)
			ce.Detail = fmt.Sprintf("consumer group %s: %s", c.cfg.Group, ce.Detail)
			return ce
		}
	}
	return nil
}

// tcpOpens reports whether a plain TCP connection to addr opens within a
// few seconds.
func tcpOpens(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// namedTopics are the topics the input names outright: Topics without
// Regex, or those of Partitions.
func (cfg Config) namedTopics() []string {
	if len(cfg.Partitions) > 0 {
		var ts []string
		for t := range cfg.Partitions {
			ts = append(ts, t)
		}
		slices.Sort(ts)
		return ts
	}
	if cfg.Regex {
		return nil
	}
	return cfg.Topics
}

// saslIdentity names the first SASL mechanism, which franz-go tries
// first, and its user: "SCRAM-SHA-256 as user alice"; "" without SASL.
func (cfg Config) saslIdentity() string {
	if len(cfg.SASL) == 0 {
		return ""
	}
	name := cfg.SASL[0].Name()
	if len(cfg.SASLUsers) > 0 && cfg.SASLUsers[0] != "" {
		return name + " as user " + cfg.SASLUsers[0]
	}
	return name
}
