package e2e

// Kafka in, Delta out under faults of the consumer (issue 25): kill -9 of
// the binary under load, and a consumer group scaling in and out. Short
// forms in make test, long forms (CHAOS_LONG, make chaos) with the issue's
// counts.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

// TestKafkaKillNineUnderLoad kills the binary with SIGKILL three times at
// random points while it works through a backlog. After each kill, for
// every partition, every record below the group's committed offset is in
// the table (a commit never runs ahead of what is durable). A fourth run
// lands every record: 0 missing. The duplicates are reported beside the
// records that were durable but not yet committed at the kills (which a
// restart must read again), and are never more than those.
func TestKafkaKillNineUnderLoad(t *testing.T) {
	t.Parallel()
	killNineUnderLoad(t, false)
}

// TestKafkaKillNineUnderLoadPacked is TestKafkaKillNineUnderLoad with
// record packs (pack_records: one message per batch, no processors,
// positions from coverage): a pack is acknowledged only once all its
// records are durable, so the same holds.
func TestKafkaKillNineUnderLoadPacked(t *testing.T) {
	t.Parallel()
	killNineUnderLoad(t, true)
}

func killNineUnderLoad(t *testing.T, packed bool) {
	const parts = 6
	n := 30_000
	if packed {
		// Packs land 30,000 records before the first commit_period:
		// five times as many, and commits on every acknowledgement, so
		// that the kills fall among commits.
		n = 150_000
	}
	if chaosLong() {
		n = 300_000
	}
	seed := time.Now().UnixNano()
	r := rand.New(rand.NewPCG(uint64(seed), 25))
	t.Logf("seed %d", seed)
	b := startKafkaBroker(t, kafkaTopic, parts)
	require.NoError(t, b.produce(kafkaTopic, parts, 0, n, func(i int) []byte { return kafkaValue(i, 200) }))
	// A killed member stays in the group until its session times out, and
	// the next run's join would wait for that; with a static member id
	// (instance_id, as a Kubernetes StatefulSet's pod name) the restarted
	// process takes the killed one's place at once.
	const member = "instance_id: kill-nine\nsession_timeout: 6s\nheartbeat_interval: 1s"
	var srv *emulator.Server
	var config string
	if packed {
		srv = startEmulator(t, emulator.Faults{})
		config = kafkaPackedPipeline(srv, b.addr, kafkaTopic, kafkaTable, member+"\ncommit_on_ack: true")
	} else {
		srv = startEmulator(t, emulator.Faults{}, kafkaTable+":"+kafkaCols)
		config = kafkaPipeline(srv, b.addr, kafkaTopic, kafkaTable, "", member, "")
	}

	var inFlight []int
	var prevCommitted map[int32]int64
	for k := 0; k < 3; k++ {
		// The k-th kill lands somewhere in the k-th quarter of the backlog.
		at := int64(float64(n) * randomBetween(r, float64(k)/4+0.05, float64(k+1)/4))
		p := startKafkaProduct(t, config, fmt.Sprintf("run%d", k))
		waitRows(t, srv, kafkaTable, at, 120*time.Second, p.out.String)
		kill9(p)
		// Batches the emulator had received may still be stored after the
		// kill: wait until the table stops growing.
		settle(srv, kafkaTable)
		committed, _, err := b.offsets(kafkaTopic, kafkaGroup)
		require.NoError(t, err)
		l := readLanded(t, srv, kafkaTable)
		missing, saw := countMissing(l.missingBelow(committed))
		require.Zero(t, missing, "kill %d: records below the committed offsets are not in the table: %s", k+1, saw)
		for p, c := range prevCommitted {
			assert.GreaterOrEqual(t, committed[p], c, "kill %d: partition %d's commit went back", k+1, p)
		}
		prevCommitted = committed
		inFlight = append(inFlight, l.aboveCommitted(committed))
		t.Logf("kill %d at %d rows: committed %d, durable beyond the commits %d", k+1, l.rows, sumOffsets(committed), inFlight[k])
	}

	p := startKafkaProduct(t, config, "final")
	_, end, err := b.offsets(kafkaTopic, kafkaGroup)
	require.NoError(t, err)
	waitAllLanded(t, srv, kafkaTable, end, 180*time.Second, p.out.String)
	waitCommittedAtEnd(t, b, kafkaTopic, kafkaGroup, 60*time.Second)
	code, err := terminate(p, 60*time.Second)
	require.NoError(t, err)
	assert.Equal(t, 0, code, tail(p.out.String(), 30))
	l := readLanded(t, srv, kafkaTable)
	missing, saw := countMissing(l.missingBelow(end))
	assert.Zero(t, missing, saw)
	dups, inFlightSum := 0, 0
	for _, d := range l.duplicates() {
		dups += d
	}
	for _, f := range inFlight {
		inFlightSum += f
	}
	assert.LessOrEqual(t, dups, inFlightSum, "duplicates come only from records durable but not committed at a kill")
	faultLine(t, "kafka kill -9 ×3 under load (%d records, %d partitions, record packs %t): 0 missing, %d duplicates; durable but uncommitted at the kills %v (sum %d); every commit at every kill covered by the table",
		n, parts, packed, dups, inFlight, inFlightSum)
}

// settle waits (up to 10 s) until table's row count holds still for a
// second.
func settle(srv *emulator.Server, table string) {
	last, since := tableRowCount(srv, table), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if c := tableRowCount(srv, table); c != last {
			last, since = c, time.Now()
		} else if time.Since(since) >= time.Second {
			return
		}
	}
}

// TestKafkaConsumerGroupScaleOut: three instances of the binary share a
// consumer group on 12 partitions while records arrive at a steady rate.
// A third of the way through one instance is stopped (SIGTERM), at two
// thirds a fourth joins. Every record lands (0 missing); duplicates come
// only from partitions that moved between instances (rows of more than one
// instance); once all stop, the committed offsets are the end offsets.
func TestKafkaConsumerGroupScaleOut(t *testing.T) {
	t.Parallel()
	const parts = 12
	n, rate := 30_000, 3000
	if chaosLong() {
		n, rate = 300_000, 10_000
	}
	srv := startEmulator(t, emulator.Faults{}, kafkaTable+":"+kafkaCols)
	b := startKafkaBroker(t, kafkaTopic, parts)
	config := kafkaPipeline(srv, b.addr, kafkaTopic, kafkaTable, "", "", "")
	procs := map[string]*proc{}
	for _, name := range []string{"a", "b", "c"} {
		procs[name] = startKafkaProduct(t, config, name)
	}
	logs := func() string {
		s := ""
		for name, p := range procs {
			s += "== " + name + "\n" + tail(p.out.String(), 8) + "\n"
		}
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := b.cluster.WaitGroupStable(ctx, kafkaGroup, 3)
	require.NoError(t, err, "three members in the group:\n%s", logs())

	// A steady producer: rate records/s in steps of a tenth of a second.
	began := time.Now()
	step := rate / 10
	var events []string
	for produced := 0; produced < n; produced += step {
		require.NoError(t, b.produce(kafkaTopic, parts, produced, min(step, n-produced), func(i int) []byte { return kafkaValue(i, 200) }))
		switch {
		case produced < n/3 && produced+step >= n/3:
			code, err := terminate(procs["b"], 60*time.Second)
			require.NoError(t, err)
			assert.Equal(t, 0, code, "instance b stops cleanly:\n%s", tail(procs["b"].out.String(), 20))
			events = append(events, fmt.Sprintf("b stopped at %d produced, %d landed", produced+step, tableRowCount(srv, kafkaTable)))
			delete(procs, "b")
		case produced < 2*n/3 && produced+step >= 2*n/3:
			procs["d"] = startKafkaProduct(t, config, "d")
			events = append(events, fmt.Sprintf("d started at %d produced, %d landed", produced+step, tableRowCount(srv, kafkaTable)))
		}
		time.Sleep(time.Until(began.Add(time.Duration(produced+step) * time.Second / time.Duration(rate))))
	}
	_, end, err := b.offsets(kafkaTopic, kafkaGroup)
	require.NoError(t, err)
	waitAllLanded(t, srv, kafkaTable, end, 180*time.Second, logs)
	waitCommittedAtEnd(t, b, kafkaTopic, kafkaGroup, 60*time.Second)
	for name, p := range procs {
		code, err := terminate(p, 60*time.Second)
		require.NoError(t, err)
		assert.Equal(t, 0, code, "instance %s:\n%s", name, tail(p.out.String(), 20))
	}
	committed, end, err := b.offsets(kafkaTopic, kafkaGroup)
	require.NoError(t, err)
	assert.Equal(t, end, committed, "once all stop, the committed offsets are the end offsets")

	l := readLanded(t, srv, kafkaTable)
	missing, saw := countMissing(l.missingBelow(end))
	assert.Zero(t, missing, saw)
	dups := l.duplicates()
	var moved []int32
	total := 0
	for p := int32(0); p < parts; p++ {
		if len(l.instances[p]) > 1 {
			moved = append(moved, p)
		}
		total += dups[p]
		if dups[p] > 0 {
			assert.Greater(t, len(l.instances[p]), 1, "partition %d has %d duplicates but never moved", p, dups[p])
		}
	}
	sort.Slice(moved, func(i, j int) bool { return moved[i] < moved[j] })
	faultLine(t, "kafka consumer group (3 instances, %d partitions, %d records at %d/s; %s): 0 missing, %d duplicates, all in partitions that moved %v (%d of %d moved); committed == end %d",
		parts, n, rate, events, total, moved, len(moved), parts, sumOffsets(committed))
}
