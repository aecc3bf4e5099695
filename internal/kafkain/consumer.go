package kafkain

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
)

// Config is what the Consumer needs; the redpanda input's fields map onto
// it one to one.
type Config struct {
	SeedBrokers []string
	ClientID    string
	TLS         *tls.Config // nil: plaintext
	SASL        []sasl.Mechanism
	// SASLUsers is the user of each SASL mechanism, in order ("" for
	// OAUTHBEARER): what a refusal names. Never a password.
	SASLUsers []string

	MetadataMaxAge         time.Duration
	RequestTimeoutOverhead time.Duration
	ConnIdleTimeout        time.Duration
	Dial                   DialConfig

	// Topics are topic names, or regular expressions with Regex; Exclude
	// are regular expressions of topics to leave out (with Regex).
	Topics  []string
	Regex   bool
	Exclude []string
	// Partitions are explicit partitions with their start offsets (no
	// consumer group); when set, Topics is empty.
	Partitions map[string]map[int32]kgo.Offset

	Group             string
	InstanceID        string
	RackID            string
	RebalanceTimeout  time.Duration
	SessionTimeout    time.Duration
	HeartbeatInterval time.Duration

	// StartOffset is where a partition without a committed offset starts,
	// and where one restarts after OffsetOutOfRange.
	StartOffset kgo.Offset

	FetchMaxBytes          int32
	FetchMinBytes          int32
	FetchMaxPartitionBytes int32
	FetchMaxWait           time.Duration
	ReadCommitted          bool

	CommitPeriod time.Duration
	// CommitOnAck also commits as soon as an acknowledgement moves a
	// partition's durable offset, one commit at a time (acks that arrive
	// during a commit are covered by the next one), besides every
	// CommitPeriod: fewer records are read again after a crash.
	CommitOnAck      bool
	LagRefreshPeriod time.Duration
	// CommitAge, when set (with a Group), is given each owned partition's
	// commit age every LagRefreshPeriod, beside the lag: how long records
	// above its committed offset have existed without the commit moving (0
	// when it is at the end). A commit that stays behind while records keep
	// coming is a stuck commit.
	CommitAge CommitAgeFunc

	Limits Limits
}

// DefaultConnectTimeout bounds a dial, the TLS handshake included, when
// DialConfig.ConnectTimeout is zero: franz-go's default dial timeout.
const DefaultConnectTimeout = 10 * time.Second

// DialConfig is the TCP dialer's configuration; a zero ConnectTimeout is
// DefaultConnectTimeout, the other zero fields keep Go's defaults.
type DialConfig struct {
	ConnectTimeout    time.Duration
	KeepAliveIdle     time.Duration
	KeepAliveInterval time.Duration
	KeepAliveCount    int
	// UserTimeout sets TCP_USER_TIMEOUT (Linux only).
	UserTimeout time.Duration
}

// Logger is the part of a Benthos logger the consumer uses.
type Logger interface {
	Debugf(format string, v ...any)
	Infof(format string, v ...any)
	Warnf(format string, v ...any)
	Errorf(format string, v ...any)
}

// LagFunc receives the lag of a partition: its end offset less the offset
// of its oldest record not acknowledged (what the group has left to do).
type LagFunc func(tp TP, lag int64)

// CommitAgeFunc receives a partition's commit age (see Config.CommitAge).
type CommitAgeFunc func(tp TP, age time.Duration)

// Consumer is a franz-go consumer whose commits follow its Tracker.
type Consumer struct {
	cfg Config
	log Logger
	lag LagFunc
	// behind is the commit-age clock; only refreshLag uses it.
	behind commitClock
	cl     *kgo.Client
	adm    *kadm.Client
	track  *Tracker

	// commitMu serialises every commit, and a revoke's final commit with
	// the release of its partitions, so that no commit of a partition can
	// follow its release.
	commitMu sync.Mutex
	closing  chanFlag

	pollCtx  context.Context
	stopPoll context.CancelFunc
	loops    sync.WaitGroup
	// acked wakes the commit loop after an acknowledgement (CommitOnAck):
	// one slot, so a burst of acks costs one commit.
	acked chan struct{}

	errLog *limitedLog
	sizer  fetchSizer
}

// chanFlag is a one-way flag.
type chanFlag struct {
	once sync.Once
	ch   chan struct{}
}

func (f *chanFlag) set() { f.once.Do(func() { close(f.ch) }) }
func (f *chanFlag) isSet() bool {
	select {
	case <-f.ch:
		return true
	default:
		return false
	}
}

// RevokeWait is how long a revoke waits for the acks of its partitions'
// in-flight records: four fifths of the rebalance timeout, so that the
// commit that follows still lands inside it.
func RevokeWait(rebalanceTimeout time.Duration) time.Duration {
	return rebalanceTimeout * 4 / 5
}

// CloseGrace bounds how long Close waits for acks still outstanding before
// its final commit.
const CloseGrace = time.Second

// New checks that the brokers can be used (see probe: its error is a
// *ConnectError naming the cause) and creates the client. lag may be nil.
func New(ctx context.Context, cfg Config, log Logger, lag LagFunc) (*Consumer, error) {
	c := &Consumer{cfg: cfg, log: log, lag: lag, errLog: newLimitedLog(log, 30*time.Second, 15*time.Minute)}
	c.sizer.overhead = cfg.Limits.overhead()
	c.closing.ch = make(chan struct{})
	// The tracker exists before the client: the group may assign
	// partitions as soon as the client is created.
	c.track = NewTracker(cfg.Limits, cfg.Group == "")
	conn, consume, err := c.options()
	if err != nil {
		return nil, err
	}
	if err := c.probe(ctx, conn); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(conn, consume...)...)
	if err != nil {
		return nil, err
	}
	c.cl = cl
	c.adm = kadm.NewClient(cl)
	c.pollCtx, c.stopPoll = context.WithCancel(context.Background())
	c.loops.Add(1)
	go c.pollLoop()
	if cfg.Group != "" && (cfg.CommitPeriod > 0 || cfg.CommitOnAck) {
		if cfg.CommitOnAck {
			c.acked = make(chan struct{}, 1)
		}
		c.loops.Add(1)
		go c.commitLoop()
	}
	if lag != nil && cfg.LagRefreshPeriod > 0 {
		c.loops.Add(1)
		go c.every(cfg.LagRefreshPeriod, c.refreshLag)
	}
	return c, nil
}

// dialer returns the TCP dialer of d. Its timeout covers the TLS handshake
// too; without one of its own (franz-go's 10 s applies only to its default
// dialer) a listener that never answers the handshake would hold a
// connection attempt, and Connect, for ever.
func (d DialConfig) dialer() *net.Dialer {
	nd := &net.Dialer{Timeout: cmp.Or(d.ConnectTimeout, DefaultConnectTimeout)}
	if d.KeepAliveIdle > 0 || d.KeepAliveInterval > 0 || d.KeepAliveCount > 0 {
		nd.KeepAliveConfig = net.KeepAliveConfig{Enable: true, Idle: d.KeepAliveIdle, Interval: d.KeepAliveInterval, Count: d.KeepAliveCount}
	}
	if d.UserTimeout > 0 {
		nd.Control = userTimeoutControl(d.UserTimeout)
	}
	return nd
}

// options returns the client's connection options and its consuming ones.
func (c *Consumer) options() (conn, consume []kgo.Opt, err error) {
	cfg := c.cfg
	if len(cfg.SeedBrokers) == 0 {
		return nil, nil, errors.New("no seed brokers")
	}
	d := cfg.Dial.dialer()
	dial := d.DialContext
	if cfg.TLS != nil {
		td := &tls.Dialer{NetDialer: d, Config: cfg.TLS}
		dial = td.DialContext
	}
	conn = []kgo.Opt{kgo.SeedBrokers(cfg.SeedBrokers...), kgo.Dialer(dial)}
	// add appends o to opts when its field is set (franz-go's defaults
	// otherwise).
	add := func(opts *[]kgo.Opt, set bool, o kgo.Opt) {
		if set {
			*opts = append(*opts, o)
		}
	}
	add(&conn, cfg.ClientID != "", kgo.ClientID(cfg.ClientID))
	add(&conn, len(cfg.SASL) > 0, kgo.SASL(cfg.SASL...))
	add(&conn, cfg.MetadataMaxAge > 0, kgo.MetadataMaxAge(cfg.MetadataMaxAge))
	// franz-go refuses a max age below its min age (5s by default): a
	// shorter metadata_max_age lowers the min age with it.
	add(&conn, cfg.MetadataMaxAge > 0 && cfg.MetadataMaxAge < 5*time.Second, kgo.MetadataMinAge(cfg.MetadataMaxAge))
	add(&conn, cfg.RequestTimeoutOverhead > 0, kgo.RequestTimeoutOverhead(cfg.RequestTimeoutOverhead))
	add(&conn, cfg.ConnIdleTimeout > 0, kgo.ConnIdleTimeout(cfg.ConnIdleTimeout))
	opts := []kgo.Opt{kgo.ConsumeResetOffset(cfg.StartOffset)}
	add(&opts, cfg.RackID != "", kgo.Rack(cfg.RackID))
	add(&opts, cfg.FetchMaxBytes > 0, kgo.FetchMaxBytes(cfg.FetchMaxBytes))
	if cfg.Limits.MaxUnackedBytes > 0 {
		// The first fetches, sized before any record was seen.
		wire, part := c.fetchLimits(int64(cfg.Limits.MaxUnackedBytes))
		opts = append(opts, kgo.WithHooks(&c.sizer), kgo.FetchMaxBytes(wire), kgo.FetchMaxPartitionBytes(part))
	}
	// franz-go reads responses of at most 100 MiB unless told more; a
	// larger fetch_max_bytes needs room for the response around it.
	add(&opts, cfg.FetchMaxBytes > 99<<20, kgo.BrokerMaxReadBytes(min(cfg.FetchMaxBytes+(1<<20), 1<<30)))
	add(&opts, cfg.FetchMinBytes > 0, kgo.FetchMinBytes(cfg.FetchMinBytes))
	add(&opts, cfg.FetchMaxPartitionBytes > 0 && cfg.Limits.MaxUnackedBytes <= 0, kgo.FetchMaxPartitionBytes(cfg.FetchMaxPartitionBytes))
	add(&opts, cfg.FetchMaxWait > 0, kgo.FetchMaxWait(cfg.FetchMaxWait))
	add(&opts, cfg.ReadCommitted, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	// Transaction markers come back with the records, so that the poll
	// loop sees the fetch position past them (dataRecords): they are
	// never handed out.
	opts = append(opts, kgo.KeepControlRecords())
	switch {
	case len(cfg.Partitions) > 0:
		opts = append(opts, kgo.ConsumePartitions(cfg.Partitions))
	case len(cfg.Topics) > 0:
		opts = append(opts, kgo.ConsumeTopics(cfg.Topics...))
		if cfg.Regex {
			opts = append(opts, kgo.ConsumeRegex())
			if len(cfg.Exclude) > 0 {
				opts = append(opts, kgo.ConsumeExcludeTopics(cfg.Exclude...))
			}
		}
	default:
		return nil, nil, errors.New("no topics")
	}
	if cfg.Group != "" {
		opts = append(opts,
			kgo.ConsumerGroup(cfg.Group),
			kgo.DisableAutoCommit(),
			kgo.BlockRebalanceOnPoll(),
			kgo.OnPartitionsAssigned(c.onAssigned),
			kgo.OnPartitionsRevoked(c.onRevoked),
			kgo.OnPartitionsLost(c.onLost),
		)
		add(&opts, cfg.InstanceID != "", kgo.InstanceID(cfg.InstanceID))
		add(&opts, cfg.RebalanceTimeout > 0, kgo.RebalanceTimeout(cfg.RebalanceTimeout))
		add(&opts, cfg.SessionTimeout > 0, kgo.SessionTimeout(cfg.SessionTimeout))
		add(&opts, cfg.HeartbeatInterval > 0, kgo.HeartbeatInterval(cfg.HeartbeatInterval))
	}
	return conn, opts, nil
}

func flatten(m map[string][]int32) []TP {
	var tps []TP
	for t, ps := range m {
		for _, p := range ps {
			tps = append(tps, TP{t, p})
		}
	}
	return tps
}

func (c *Consumer) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	tps := flatten(assigned)
	c.track.Assign(tps)
	c.log.Infof("redpanda: partitions assigned: %v", tps)
}

// onRevoked runs in the group's goroutine before the partitions go: it
// stops handing them out, waits (at most RevokeWait) for the acks of their
// in-flight records, commits what is durable and releases them; acks that
// come later commit nothing, and their records go to the next owner again.
func (c *Consumer) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	tps := flatten(revoked)
	if len(tps) == 0 {
		return
	}
	c.track.Revoke(tps)
	settled := true
	if !c.closing.isSet() {
		wctx, cancel := context.WithTimeout(ctx, RevokeWait(c.cfg.RebalanceTimeout))
		settled = c.track.WaitSettled(wctx, tps)
		cancel()
	}
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, c.commitTimeout())
	err := c.commitLocked(cctx, cl, tps)
	cancel()
	c.track.Release(tps)
	switch {
	case err != nil:
		c.log.Warnf("redpanda: partitions revoked %v; final commit failed, their uncommitted records go to the next owner again: %v", tps, err)
	case !settled:
		c.log.Warnf("redpanda: partitions revoked %v before every in-flight record was acknowledged (waited %s); committed what was, the rest goes to the next owner again", tps, RevokeWait(c.cfg.RebalanceTimeout))
	default:
		c.log.Infof("redpanda: partitions revoked %v, durable offsets committed", tps)
	}
}

// onLost releases partitions the group took away (a fatal group error):
// nothing of them is committed any more.
func (c *Consumer) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	tps := flatten(lost)
	if len(tps) == 0 {
		return
	}
	c.track.Revoke(tps)
	c.commitMu.Lock()
	c.track.Release(tps)
	c.commitMu.Unlock()
	c.log.Warnf("redpanda: partitions lost %v (group session ended); nothing more of them is committed, their uncommitted records go to the next owner again", tps)
}

func (c *Consumer) commitTimeout() time.Duration {
	return max(10*time.Second, c.cfg.CommitPeriod)
}

// Commit commits, synchronously, the durable offsets of the owned
// partitions among tps (all when nil) that moved since their last commit.
// Without a consumer group it does nothing.
func (c *Consumer) Commit(ctx context.Context, tps []TP) error {
	if c.cfg.Group == "" {
		return nil
	}
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.commitTimeout())
	defer cancel()
	err := c.commitLocked(ctx, c.cl, tps)
	if err != nil {
		c.errLog.log("commit", "redpanda: committing offsets failed (retried every commit_period; nothing is committed past an unacknowledged record): %v", err)
	} else {
		c.errLog.ok("commit", "committing offsets")
	}
	return err
}

// commitLocked commits with cl (the group callbacks' own client: they can
// run before New has stored it); callers hold commitMu.
func (c *Consumer) commitLocked(ctx context.Context, cl *kgo.Client, tps []TP) error {
	if c.cfg.Group == "" {
		return nil
	}
	offs := c.track.Committable(tps)
	if len(offs) == 0 {
		return nil
	}
	var rerr error
	cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			rerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
					if rerr == nil {
						rerr = fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, e)
					}
					continue
				}
				if eo, ok := offs[t.Topic][p.Partition]; ok {
					c.track.Committed(TP{t.Topic, p.Partition}, eo.Offset)
				}
			}
		}
	})
	return rerr
}

// pollLoop feeds the tracker. With a consumer group, rebalances are blocked
// from a poll's return until its records are in the tracker
// (BlockRebalanceOnPoll), so a record is never added under an ownership it
// was not fetched in.
func (c *Consumer) pollLoop() {
	defer c.loops.Done()
	idle := time.Duration(0)
	for {
		// Take no more than the tracker has room for: the rest stays
		// in franz-go's buffered fetch (which it does not replace
		// until it is drained), so a fetch is held once, not twice.
		room := c.track.Room()
		if room == 0 {
			select {
			case <-c.pollCtx.Done():
				return
			case <-c.track.Changed():
			case <-time.After(100 * time.Millisecond):
				// Partitions assigned since are counted at the
				// next look.
			}
			continue
		}
		c.sizeFetches()
		fs := c.cl.PollRecords(c.pollCtx, room)
		if c.pollCtx.Err() != nil || fs.IsClientClosed() {
			c.cl.AllowRebalance()
			return
		}
		n := 0
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 {
				n += len(p.Records)
				recs, next := dataRecords(p.Records)
				c.track.Add(TP{p.Topic, p.Partition}, recs, next, p.HighWatermark)
			}
		})
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			if ferr == nil {
				ferr = fmt.Errorf("%s/%d: %w", t, p, err)
			}
		})
		c.cl.AllowRebalance()
		if ferr == nil && n > 0 { // records came: fetching works
			c.errLog.ok("fetch", "fetching")
		} else if ferr != nil {
			c.errLog.log("fetch", "redpanda: fetch failed (the client reconnects by itself; nothing is committed past an unacknowledged record): %v", ferr)
		}
		if n == 0 && ferr != nil {
			// A poll that only failed: back off a little, so that an
			// outage does not spin.
			idle = min(max(2*idle, 50*time.Millisecond), time.Second)
			select {
			case <-c.pollCtx.Done():
				return
			case <-time.After(idle):
			}
		} else {
			idle = 0
		}
	}
}

// dataRecords returns the records of one polled partition without its
// transaction markers (control records, kept by KeepControlRecords), and
// the fetch position after them all: the offset after the last record,
// marker or not, with its leader epoch. franz-go moves its fetch offset
// past every record it decodes, including markers and, under
// read_committed, aborted batches it drops; an aborted batch is always
// followed by its abort marker, so the position after the last marker
// returned is past it too. Committing that position once everything below
// is acknowledged lets a transactional topic's commit reach its end offset
// (KIP-1094). recs is returned as is when it holds no marker.
func dataRecords(recs []*kgo.Record) (data []*kgo.Record, next kgo.EpochOffset) {
	last := recs[len(recs)-1]
	next = kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}
	for k, r := range recs {
		if !r.Attrs.IsControl() {
			continue
		}
		data = slices.Clone(recs[:k])
		for _, r := range recs[k+1:] {
			if !r.Attrs.IsControl() {
				data = append(data, r)
			}
		}
		return data, next
	}
	return recs, next
}

// franz-go's fetch defaults, for a Config that leaves the fields unset.
const (
	defaultFetchMaxBytes     = 50 << 20
	defaultFetchMaxPartBytes = 1 << 20
)

// sizeFetches sizes the fetches franz-go sends next to what the byte
// budget (Limits.MaxUnackedBytes) will have left once the records franz-go
// holds are in the tracker, converted to bytes on the wire at the ratio
// seen so far: a fetch is decompressed whole when it arrives, so a fetch
// of fetch_max_bytes of well-compressed records holds many times that in
// memory. fetch_max_bytes and fetch_max_partition_bytes stay the upper
// bounds; the least asked for is 1 byte, for which a broker still returns
// one record batch. Without a budget it does nothing.
func (c *Consumer) sizeFetches() {
	if c.cfg.Limits.MaxUnackedBytes <= 0 {
		return
	}
	held := c.cl.BufferedFetchBytes() + c.cl.BufferedFetchRecords()*int64(c.cfg.Limits.overhead())
	c.cl.UpdateFetchMaxBytes(c.fetchLimits(int64(c.track.ByteRoom()) - held))
}

// fetchLimits returns the fetch and partition bytes to ask for when room
// bytes of the budget are free.
func (c *Consumer) fetchLimits(room int64) (wire, part int32) {
	maxBytes, maxPart := c.cfg.FetchMaxBytes, c.cfg.FetchMaxPartitionBytes
	if maxBytes <= 0 {
		maxBytes = defaultFetchMaxBytes
	}
	if maxPart <= 0 {
		maxPart = defaultFetchMaxPartBytes
	}
	wire = int32(max(min(float64(room)/c.sizer.costPerWireByte(), float64(maxBytes)), 1))
	return wire, min(wire, maxPart)
}

// fetchSizer learns, from franz-go's fetch hook, what a byte fetched costs
// in memory once decompressed (record cost per byte on the wire).
type fetchSizer struct {
	overhead   int // a record's cost beyond its bytes (Limits.Overhead; 0: RecordOverhead)
	mu         sync.Mutex
	wire, cost int64 // over the batches read, halved as they grow so that the ratio follows the data
}

// initialCostPerWireByte is assumed before the first batch arrives: a
// record of 200 bytes compressed tenfold (the first fetch is small, and the
// ratio is learnt from it).
const initialCostPerWireByte = 32

// fetchSizerWindow is how many wire bytes the ratio is averaged over
// before older batches weigh half.
const fetchSizerWindow = 64 << 20

// OnFetchBatchRead implements kgo.HookFetchBatchRead.
func (f *fetchSizer) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wire += int64(m.CompressedBytes)
	f.cost += int64(m.UncompressedBytes + m.NumRecords*Limits{Overhead: f.overhead}.overhead())
	if f.wire > fetchSizerWindow {
		f.wire, f.cost = f.wire/2, f.cost/2
	}
}

func (f *fetchSizer) costPerWireByte() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.wire <= 0 || f.cost <= 0 {
		return initialCostPerWireByte
	}
	return float64(f.cost) / float64(f.wire)
}

// every runs fn every period until the consumer closes.
func (c *Consumer) every(period time.Duration, fn func()) {
	defer c.loops.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-c.pollCtx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// refreshLag reports each owned partition's lag: its end offset less the
// offset of its oldest record not acknowledged (or, with everything fetched
// acknowledged, the durable offset). It grows while the output refuses
// writes, since polling then stops and the end moves on.
func (c *Consumer) refreshLag() {
	st := c.track.State()
	if len(st) == 0 {
		return
	}
	topics := map[string]bool{}
	for _, s := range st {
		topics[s.TP.Topic] = true
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	ctx, cancel := context.WithTimeout(c.pollCtx, max(c.cfg.LagRefreshPeriod, 5*time.Second))
	defer cancel()
	ends, err := c.adm.ListEndOffsets(ctx, names...)
	if err != nil {
		c.errLog.log("lag", "redpanda: listing end offsets for the lag failed: %v", err)
		return
	}
	c.errLog.ok("lag", "listing end offsets for the lag")
	now := time.Now()
	c.behind.keep(st)
	for _, s := range st {
		e, ok := ends.Lookup(s.TP.Topic, s.TP.Partition)
		if !ok || e.Err != nil {
			continue
		}
		base := s.FirstUnacked
		if base < 0 {
			base = s.Durable
		}
		if base < 0 {
			base = s.Committed
		}
		if base < 0 {
			continue
		}
		c.lag(s.TP, max(e.Offset-base, 0))
		if c.cfg.CommitAge != nil && c.cfg.Group != "" {
			c.cfg.CommitAge(s.TP, c.behind.age(s, e.Offset, now))
		}
	}
}

// commitClock measures each partition's commit age: how long records
// above its committed offset have existed without the commit moving. The
// commit of a partition idle for an hour is an hour old, but it is not
// stuck when a record arrives: the age counts from when the end first went
// past the commit, or from the commit's last move if later.
type commitClock struct {
	since map[TP]time.Time // when the end was first seen past the commit
}

// age returns s's commit age at now given the partition's end offset: 0
// while the commit is at the end, and while nothing was ever committed nor
// consumed (nothing is owed yet).
func (k *commitClock) age(s PartitionState, end int64, now time.Time) time.Duration {
	owed := end > s.Committed && (s.Committed >= 0 || s.Durable >= 0 || s.FirstUnacked >= 0)
	if !owed {
		delete(k.since, s.TP)
		return 0
	}
	if k.since == nil {
		k.since = map[TP]time.Time{}
	}
	from, ok := k.since[s.TP]
	if !ok {
		from = now
		k.since[s.TP] = now
	}
	if s.CommitMoved.After(from) {
		from = s.CommitMoved
	}
	return max(now.Sub(from), 0)
}

// keep forgets the partitions not in st (revoked or lost).
func (k *commitClock) keep(st []PartitionState) {
	owned := make(map[TP]bool, len(st))
	for _, s := range st {
		owned[s.TP] = true
	}
	for tp := range k.since {
		if !owned[tp] {
			delete(k.since, tp)
		}
	}
}

// Next returns the next batch to deliver; see Tracker.Next. A group
// session error does not end it: franz-go rejoins by itself (the lost
// partitions are released by onLost).
func (c *Consumer) Next(ctx context.Context) (*Batch, error) {
	return c.track.Next(ctx)
}

// Handed returns b's records; see Tracker.Handed.
func (c *Consumer) Handed(b *Batch) []*kgo.Record { return c.track.Handed(b) }

// Ack settles a delivery of b; see Tracker.Ack.
func (c *Consumer) Ack(b *Batch, delivery int, err error) bool {
	ok := c.track.Ack(b, delivery, err)
	if ok && err == nil && c.acked != nil {
		select {
		case c.acked <- struct{}{}:
		default: // a commit is already due: it covers this ack too
		}
	}
	return ok
}

// commitLoop commits the durable offsets every CommitPeriod and, with
// CommitOnAck, after acknowledgements, one commit at a time. A commit with
// nothing new to commit sends nothing (Tracker.Committable).
func (c *Consumer) commitLoop() {
	defer c.loops.Done()
	var tick <-chan time.Time
	if c.cfg.CommitPeriod > 0 {
		t := time.NewTicker(c.cfg.CommitPeriod)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-c.pollCtx.Done():
			return
		case <-tick:
		case <-c.acked:
		}
		_ = c.Commit(c.pollCtx, nil)
	}
}

// Tracker returns the consumer's tracker (for tests and metrics).
func (c *Consumer) Tracker() *Tracker { return c.track }

// Client returns the franz-go client (for tests).
func (c *Consumer) Client() *kgo.Client { return c.cl }

// Close stops fetching and handing out, waits (bounded by ctx) for the acks
// of the records in flight, commits what is durable, and leaves the group.
// Benthos calls it once the pipeline has drained (every ack of the input's
// batches resolved) unless its shutdown timed out, so ordinarily every ack
// is in by now and the final commit covers everything delivered.
func (c *Consumer) Close(ctx context.Context) error {
	c.track.Close()
	c.stopPoll()
	c.loops.Wait()
	// Benthos calls Close after every ack of the input's batches resolved
	// (the pipeline drained), or after its shutdown timeout abandoned the
	// rest: either way no more acks are coming, so the wait is short.
	wctx, cancel := context.WithTimeout(ctx, CloseGrace)
	settled := c.track.WaitSettled(wctx, nil)
	cancel()
	cerr := c.Commit(context.WithoutCancel(ctx), nil)
	c.closing.set()
	done := make(chan struct{})
	go func() {
		// Leaving the group revokes every partition: onRevoked commits
		// again (nothing new) without waiting, then releases them.
		c.cl.CloseAllowingRebalance()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		c.log.Warnf("redpanda: leaving the group did not finish before the shutdown deadline")
	}
	if !settled {
		c.log.Warnf("redpanda: closed with records still unacknowledged; they were not committed and will be consumed again")
	}
	return cerr
}
