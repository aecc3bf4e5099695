package tablewriter

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/benthos-zerobus/benthos-zerobus/internal/backoff"
	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// unresolvedEndpoint is the error an open meets while the endpoint's host
// does not resolve, as the client names it.
var unresolvedEndpoint = &ingest.Error{Class: ingest.Transient, Code: codes.Unavailable, Err: &ingest.NetCause{
	Field: ingest.FieldEndpoint, Host: "123.zerobus.nope.invalid", Kind: ingest.NetUnresolved,
	Err: errors.New("rpc error: code = Unavailable desc = name resolver error: produced zero addresses")}}

// A one-hour outage of the endpoint, on a clock 120 times faster than
// real time (the lifecycle's clock, and the writer's open gate scaled to
// it; 30 s of real time): the table's log has at most 20 lines at info
// level and above, the healing line included; after 5 minutes the streams
// open at most 3 times a minute, however many there are; and the cause
// is named in the explanation from the first failure. The engine's Connect
// loop is played by the test: Open, then the wait it asks for.
func TestOneHourOutageIsQuiet(t *testing.T) {
	const (
		scale  = 120
		outage = time.Hour
	)
	cat := catalogfake.New()
	cat.Put(testTable, "id BIGINT NOT NULL, msg STRING", nil)
	opener := ingestfake.NewOpener(ingestfake.Config{})
	opener.SetOpenHook(func(context.Context, int, string, *arrow.Schema) error { return unresolvedEndpoint })
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	w := New(Config{Table: testTable, Pool: testPoolConfig()}, opener, cat, log, nil)
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	start := time.Now()
	virtual := func(at time.Time) time.Duration { return at.Sub(start) * scale }
	w.life.now = func() time.Time { return start.Add(virtual(time.Now())) }
	w.cfg.Pool.OpenGate = backoff.NewGate(TransientBackoffInitial/scale, TransientBackoffMax/scale, backoff.DefaultJitter)

	ctx := context.Background()
	opens := 0
	var firstFailure time.Duration
	for virtual(time.Now()) < outage {
		err := w.Open(ctx)
		require.Error(t, err, "the endpoint does not resolve")
		if firstFailure == 0 {
			firstFailure = virtual(time.Now())
			assert.Contains(t, err.Error(), "endpoint host 123.zerobus.nope.invalid does not resolve", "the error the engine logs names the cause")
			assert.Contains(t, err.Error(), "check `endpoint`")
		}
		opens++
		wait, ok := RetryAfter(err)
		require.True(t, ok, "%v", err)
		time.Sleep(max(wait/scale, time.Millisecond))
	}
	attempts := opener.AttemptTimes()
	opener.SetOpenHook(nil) // the name resolves again
	healedAt := time.Now()
	require.Eventually(t, func() bool {
		if err := w.Open(ctx); err != nil {
			wait, _ := RetryAfter(err)
			time.Sleep(max(wait/scale, time.Millisecond))
			return false
		}
		_, err := w.Write(ctx, rows(`{"id":1,"msg":"back"}`), nil)
		return err == nil
	}, 30*time.Second, time.Millisecond, "never healed")
	healed := virtual(time.Now()) - virtual(healedAt)

	// Attempts in any minute from the fifth on.
	worst := 0
	for i, at := range attempts {
		if virtual(at) < 5*time.Minute {
			continue
		}
		n := 0
		for _, later := range attempts[i:] {
			if virtual(later)-virtual(at) < time.Minute {
				n++
			}
		}
		worst = max(worst, n)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	explained := strings.Count(logs.String(), "What to do")
	t.Logf("one-hour outage (virtual, x%d): %d stream opens, %d writer opens, worst minute after 5 min %d opens; %d log lines (info+); healed %s (virtual) after the name resolved",
		scale, len(attempts), opens, worst, len(lines), healed.Round(time.Second))
	for _, l := range lines {
		t.Log(l)
	}
	assert.Less(t, firstFailure, 5*time.Second*scale, "sanity: the first open fails at once")
	assert.LessOrEqual(t, worst, 3, "at most 3 opens a minute after 5 minutes")
	assert.LessOrEqual(t, len(attempts), 200, "a few opens a minute, not one a second")
	assert.LessOrEqual(t, len(lines), 20, "at most 20 lines for the hour, the healing line included")
	assert.Equal(t, 1, explained, "the cause explained once")
	assert.Equal(t, 1, strings.Count(logs.String(), "writing again after"), "one healing line")
	assert.Contains(t, logs.String(), "check `endpoint`: host 123.zerobus.nope.invalid does not resolve from this machine; a typo, or DNS/proxy settings")
	assert.LessOrEqual(t, healed, time.Minute+10*time.Second, "healed within a gate step and a writer step (30 s each, at most)")
}
