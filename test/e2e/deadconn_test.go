package e2e

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/testnet"
)

// TestFaultSilentDeadConnection is the fault matrix's "silent dead
// connection" cell, run as the field would meet it: the built binary writes
// about 40 rows/s through a loopback TCP forwarder to the built emulator;
// a few seconds in, every open connection stops forwarding in both
// directions with no FIN and no RST (a NAT or load balancer that dropped
// its state, a crashed host), while new connections pass. At the default
// keepalive the output must notice within 20 s, dial a new connection,
// rebuild its streams and resend what was not acknowledged: every row
// lands, none twice.
//
// The black hole strikes when no byte has crossed for 200 ms, between two
// batches: one that swallowed the acknowledgement of a batch the emulator
// had stored would make the output resend that batch, a duplicate that
// at-least-once delivery allows and this test does not set out to measure.
func TestFaultSilentDeadConnection(t *testing.T) {
	t.Parallel()
	const (
		table    = "main.default.deadconn"
		rows     = 1000 // 25 s at 40 rows/s
		strikeAt = 120  // rows landed before the black hole (about 3 s)
		deadline = 75 * time.Second
	)
	binaries(t) // built first, so the times below are the run's own
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--table", table+":id BIGINT NOT NULL, k STRING")
	u, err := url.Parse(grpcURL)
	require.NoError(t, err)
	bh := testnet.StartBlackHole(t, u.Host)

	input := fmt.Sprintf("generate:\n  count: %d\n  interval: 25ms\n  mapping: |\n    root.id = counter()\n    root.k = \"d-\" + counter().string()\n", rows)
	cfg := writeConfig(t, "DEBUG", input, zerobusOutput("http://"+bh.Addr(), httpURL, table))
	began := time.Now()
	p := start(t, nil, "run", cfg)
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()

	landed := func() int64 {
		ti, err := fetchTableInfo(httpURL, table)
		if err != nil {
			return -1
		}
		return ti.RowCount
	}
	eventually(t, 30*time.Second, 50*time.Millisecond, "rows did not start landing", func() (bool, string) {
		n := landed()
		return n >= strikeAt, fmt.Sprintf("%d rows landed; output:\n%s", n, tail(p.out.String(), 20))
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	silenced, err := bh.SilenceWhenQuiet(ctx, 200*time.Millisecond)
	require.NoError(t, err)
	struck := time.Now()
	acceptedAtStrike, landedAtStrike := bh.Accepted(), landed()
	logAtStrike := len(p.out.String())
	t.Logf("black hole at %s: %d connection(s) silenced, %d rows landed", struck.Sub(began).Round(time.Millisecond), silenced, landedAtStrike)

	// Watch the recovery until the pipeline exits (the input ends after
	// rows rows) or the deadline passes.
	var detected, redialled, healed time.Duration
	var cause string // the reconnect line that detected it
	var exitErr error
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(deadline - time.Since(began))
	exitedOK := false
watch:
	for {
		select {
		case exitErr = <-exited:
			exitedOK = true
			break watch
		case <-timeout:
			break watch
		case <-tick.C:
		}
		since := time.Since(struck)
		if detected == 0 {
			if line := firstLineWith(p.out.String()[logAtStrike:], "reconnected:"); line != "" {
				detected, cause = since, line
			}
		}
		if redialled == 0 && bh.Accepted() > acceptedAtStrike {
			redialled = since
		}
		if healed == 0 && landed() > landedAtStrike {
			healed = since
		}
	}
	require.True(t, exitedOK, "the pipeline did not finish within %s of its start (stalled after the black hole): %d of %d rows landed; detected=%s new_connection=%s healed=%s; output:\n%s",
		deadline, landed(), rows, detected, redialled, healed, tail(p.out.String(), 40))
	require.NoError(t, exitErr, "pipeline exit; output:\n%s", tail(p.out.String(), 40))

	got := readRows(t, httpURL, table)
	perID := map[int64]int{}
	for _, r := range got {
		id, ok := asInt64(r["id"])
		require.True(t, ok, "row without an integer id: %v", r)
		assert.Equal(t, fmt.Sprintf("d-%d", id), r["k"], "row %d stored intact", id)
		perID[id]++
	}
	var missing []int64
	for id := int64(1); id <= rows; id++ {
		if perID[id] == 0 {
			missing = append(missing, id)
		}
	}
	sort.Slice(missing, func(i, j int) bool { return missing[i] < missing[j] })
	dups := len(got) - len(perID)
	faultLine(t, "silent dead connection: rows sent=%d landed=%d distinct=%d missing=%d duplicates=%d; black hole at %s with %d rows landed; detected after %s (stream reconnect logged), new TCP connection after %s, first row landed after %s; connections accepted=%d; pipeline took %s",
		rows, len(got), len(perID), len(missing), dups, struck.Sub(began).Round(time.Millisecond), landedAtStrike,
		detected.Round(time.Millisecond), redialled.Round(time.Millisecond), healed.Round(time.Millisecond), bh.Accepted(), time.Since(began).Round(time.Millisecond))
	t.Log("detected by: ", cause)
	assert.Empty(t, missing, "rows lost (first 20): %v", head(missing, 20))
	assert.Zero(t, dups, "rows stored twice")
	assert.Positive(t, detected, "the dead connection was never detected (no reconnect logged)")
	assert.Less(t, detected, 20*time.Second, "detected within 20 s at the default keepalive")
	assert.Contains(t, cause, "keepalive", "found by the keepalive")
	assert.Positive(t, redialled, "no new connection was dialled after the black hole")
	assert.Positive(t, healed, "no row landed after the black hole")
}

// firstLineWith returns the first line of s containing sub, or "".
func firstLineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
