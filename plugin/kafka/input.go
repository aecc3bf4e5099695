package kafka

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp"
	"github.com/benthos-zerobus/benthos-zerobus/internal/kafkain"
	"github.com/benthos-zerobus/benthos-zerobus/internal/kafkamsg"
)

// Name is the input's registered name.
const Name = "redpanda"

// LagMetric is the lag gauge's name, labelled topic and partition, as
// Redpanda Connect's input names it.
const LagMetric = "redpanda_lag"

// CommitAgeMetric is the commit-age gauge's name, in seconds, labelled
// topic and partition: how long a partition has had records above its
// committed offset without the commit moving (0 when it is at the end). This
// project's own: Redpanda Connect's input has none.
const CommitAgeMetric = "redpanda_commit_age_seconds"

func init() {
	err := service.RegisterBatchInput(Name, Spec(), func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchInput, error) {
		cfg, err := ParseConfig(conf)
		if err != nil {
			return nil, err
		}
		return newInput(cfg, mgr), nil
	})
	if err != nil {
		panic(err)
	}
}

// input is the redpanda BatchInput: Connect creates the consumer, ReadBatch
// turns its batches into messages, their acks go back to it.
type input struct {
	cfg  Config
	log  *service.Logger
	mLag *service.MetricGauge
	conn *kafkain.Connector
	// unhealth removes the input from the health endpoint.
	unhealth func()

	loggedConfig sync.Once
	connectMu    sync.Mutex // one Connect at a time

	mu   sync.Mutex
	cons *kafkain.Consumer
}

func newInput(cfg Config, mgr *service.Resources) *input {
	if cfg.Consumer.Group != "" {
		age := mgr.Metrics().NewGauge(CommitAgeMetric, "topic", "partition")
		cfg.Consumer.CommitAge = func(tp kafkain.TP, d time.Duration) {
			age.Set(int64(d.Seconds()), tp.Topic, strconv.Itoa(int(tp.Partition)))
		}
	}
	in := &input{cfg: cfg, log: mgr.Logger(), mLag: mgr.Metrics().NewGauge(LagMetric, "topic", "partition")}
	in.conn = kafkain.NewConnector(cfg.Consumer, in.log, func(tp kafkain.TP, lag int64) {
		in.mLag.Set(lag, tp.Topic, strconv.Itoa(int(tp.Partition)))
	}, nil)
	var err error
	if _, in.unhealth, err = healthhttp.AttachInput(mgr, mgr.Label(), healthhttp.Input{Health: in.health}); err != nil {
		in.log.Debugf("redpanda: no health endpoint %s: %v", healthhttp.Path, err)
	}
	return in
}

// health is the input's connection state for the health endpoint.
func (in *input) health() healthhttp.InputHealth {
	st := in.conn.State()
	h := healthhttp.InputHealth{Connected: st.Connected, Since: st.Since, Attempts: st.Attempts}
	if st.Failing != nil {
		h.Problem = st.Failing.Error()
	}
	return h
}

// Connect logs the configuration once and creates the consumer, once the
// brokers can be used (see kafkain.Connector: a cause is returned, and
// logged by the engine, once; while it persists Connect waits and retries
// itself with a back-off, logging rare reminders). Once connected it is a
// no-op: franz-go reconnects to the brokers by itself.
func (in *input) Connect(ctx context.Context) error {
	in.connectMu.Lock()
	defer in.connectMu.Unlock()
	if in.consumer() != nil {
		return nil
	}
	in.loggedConfig.Do(in.logConfig)
	cons, wait, err := in.conn.Connect(ctx)
	if err != nil {
		if wait > 0 {
			return service.NewErrBackOff(err, wait)
		}
		return err
	}
	in.mu.Lock()
	in.cons = cons
	in.mu.Unlock()
	return nil
}

func (in *input) logConfig() {
	c, k := in.cfg, in.cfg.Consumer
	topics := strings.Join(k.Topics, ",")
	if len(k.Partitions) > 0 {
		var parts []string
		for t, ps := range k.Partitions {
			for p, o := range ps {
				parts = append(parts, t+":"+strconv.Itoa(int(p))+"@"+o.String())
			}
		}
		topics = strings.Join(parts, ",")
	}
	group := k.Group
	if group == "" {
		group = "(none: no commits)"
	}
	in.log.Infof("redpanda: seed_brokers=%v client_id=%s tls.enabled=%t tls.skip_cert_verify=%t sasl=%v (credentials not logged) metadata_max_age=%s request_timeout_overhead=%s conn_idle_timeout=%s tcp.connect_timeout=%s tcp.keep_alive=[idle=%s interval=%s count=%d] tcp.tcp_user_timeout=%s topics=[%s] regexp=%t regexp_topics_exclude=%v consumer_group=%s instance_id=%q rack_id=%q rebalance_timeout=%s session_timeout=%s heartbeat_interval=%s start_offset=%s fetch_max_bytes=%d fetch_max_wait=%s fetch_min_bytes=%d fetch_max_partition_bytes=%d transaction_isolation_level=%s commit_period=%s commit_on_ack=%t partition_buffer_bytes=%d topic_lag_refresh_period=%s max_yield_batch_bytes=%d max_unacked_per_partition=%d max_unacked_bytes=%d auto_replay_nacks=%t pack_records=%t",
		k.SeedBrokers, k.ClientID, c.TLSEnabled, c.SkipVerify, c.SASLMechs, k.MetadataMaxAge, k.RequestTimeoutOverhead, k.ConnIdleTimeout,
		k.Dial.ConnectTimeout, k.Dial.KeepAliveIdle, k.Dial.KeepAliveInterval, k.Dial.KeepAliveCount, k.Dial.UserTimeout,
		topics, k.Regex, k.Exclude, group, k.InstanceID, k.RackID, k.RebalanceTimeout, k.SessionTimeout, k.HeartbeatInterval, c.StartOffset,
		k.FetchMaxBytes, k.FetchMaxWait, k.FetchMinBytes, k.FetchMaxPartitionBytes, c.Isolation, k.CommitPeriod, k.CommitOnAck, k.Limits.BufferBytes,
		k.LagRefreshPeriod, k.Limits.YieldBytes, k.Limits.MaxUnacked, k.Limits.MaxUnackedBytes, k.Limits.Replay, c.PackRecords)
}

func (in *input) consumer() *kafkain.Consumer {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cons
}

// ReadBatch returns the next batch of one partition, with Redpanda
// Connect's metadata on every message, or as one record pack
// (pack_records); its ack settles the batch in the commit tracker.
func (in *input) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	cons := in.consumer()
	if cons == nil {
		return nil, nil, service.ErrNotConnected
	}
	b, err := cons.Next(ctx)
	if errors.Is(err, kafkain.ErrClosed) {
		return nil, nil, service.ErrEndOfInput
	}
	if err != nil {
		return nil, nil, err
	}
	recs := cons.Handed(b)
	var batch service.MessageBatch
	if in.cfg.PackRecords {
		batch = service.MessageBatch{kafkamsg.NewPack(kafkamsg.TP(b.TP), recs, b.HighWatermark).Message()}
	} else {
		batch = kafkamsg.Messages(kafkamsg.TP(b.TP), recs, b.HighWatermark)
	}
	delivery := b.Delivery()
	return batch, func(_ context.Context, err error) error {
		cons.Ack(b, delivery, err)
		return nil
	}, nil
}

// Close stops the consumer: it commits what is durable and leaves the
// group (see kafkain.Consumer.Close).
func (in *input) Close(ctx context.Context) error {
	if in.unhealth != nil {
		in.unhealth()
	}
	in.mu.Lock()
	cons := in.cons
	in.mu.Unlock()
	if cons == nil {
		return nil
	}
	return cons.Close(ctx)
}
