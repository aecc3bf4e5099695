package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
)

// Our Go client through the same scenarios as the official SDK, against the
// same emulator, judged by the same read-back.

func ourClient(t testing.TB, srv *emulator.Server, secret string, tweak func(*ingest.Config)) *ingest.Client {
	t.Helper()
	cfg := ingest.Config{
		Endpoint:     srv.GRPCURL(),
		WorkspaceURL: srv.HTTPURL(),
		ClientID:     confClientID,
		ClientSecret: secret,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := ingest.NewClient(cfg)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// pushArrow opens a stream, submits rows [0, rows) in batches of batchRows
// (pausing pace between batches), drains and closes.
func pushArrow(t testing.TB, c *ingest.Client, rows, batchRows int64, pace time.Duration) *ingest.ArrowStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := c.OpenArrowStream(ctx, confTable, scenarioSchema)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	var last ingest.Span
	for from := int64(0); from < rows; from += batchRows {
		rec := scenarioBatch(from, min(batchRows, rows-from))
		span, err := s.Submit(ctx, rec)
		rec.Release()
		if err != nil {
			t.Fatalf("submit rows %d..: %v", from, err)
		}
		if span.From != last.To {
			t.Fatalf("span %+v does not follow %+v", span, last)
		}
		last = span
		if pace > 0 {
			time.Sleep(pace)
		}
	}
	if last.To != uint64(rows) {
		t.Fatalf("logical rows end at %d, want %d", last.To, rows)
	}
	if err := s.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if d := s.Durable(); d != uint64(rows) {
		t.Fatalf("durable watermark %d after drain, want %d", d, rows)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return s
}

func TestOursArrowStream(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{})
	pushArrow(t, ourClient(t, srv, confSecret, nil), 20000, 2500, 0)
	checkRows(t, srv, 20000, false)
	if st := tableStats(srv); st.StreamsOpened != 1 || st.BatchesReceived != 8 {
		t.Fatalf("emulator saw %d streams and %d batches, want 1 and 8", st.StreamsOpened, st.BatchesReceived)
	}
}

func TestOursRecoveryArrow(t *testing.T) {
	srv := startEmulator(t, rotationFaults)
	c := ourClient(t, srv, confSecret, func(c *ingest.Config) {
		c.RecoveryBackoff = 100 * time.Millisecond
		c.RecoveryAttempts = 10
	})
	s := pushArrow(t, c, 20000, 500, 100*time.Millisecond)
	st := tableStats(srv)
	if st.StreamsOpened < 3 {
		t.Fatalf("only %d streams opened: the emulator did not rotate the stream mid-run", st.StreamsOpened)
	}
	dup := checkRows(t, srv, 20000, true)
	t.Logf("our client, Arrow, rotation every %v: %d streams (%d reconnects), 20000 rows, %d duplicates (at-least-once)",
		rotationFaults.StreamLifetime, st.StreamsOpened, s.Reconnects(), dup)
}

func TestOursWrongSecret(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{})
	c := ourClient(t, srv, "wrong-secret", func(c *ingest.Config) { c.RecoveryBackoff = sdkBackoff })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	s, err := c.OpenArrowStream(ctx, confTable, scenarioSchema)
	elapsed := time.Since(start)
	if err == nil {
		_ = s.Close()
		t.Fatal("our client opened a stream with a wrong client secret")
	}
	var ze *ingest.Error
	if !errors.As(err, &ze) {
		t.Fatalf("error is not a classified *ingest.Error: %T %v", err, err)
	}
	if ze.Class != ingest.FatalConfig {
		t.Fatalf("wrong secret classified %v, want fatal_config: %v", ze.Class, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "401") && !strings.Contains(msg, "invalid_client") {
		t.Fatalf("error does not say the credentials were refused: %q", msg)
	}
	if strings.Contains(err.Error(), "wrong-secret") {
		t.Fatalf("error leaks the client secret: %q", err.Error())
	}
	st := srv.Stats()
	if st.TokenFailures != 1 || st.TokensIssued != 0 {
		t.Fatalf("token endpoint saw %d refusals and issued %d tokens; a non-retryable error is asked once", st.TokenFailures, st.TokensIssued)
	}
	if elapsed >= sdkBackoff {
		t.Fatalf("took %v to fail: it backed off and retried", elapsed)
	}
	if ts := tableStats(srv); ts.StreamsOpened != 0 {
		t.Fatalf("a stream opened without valid credentials")
	}
	t.Logf("our client error (%v, failed in %v): %v", ze.Class, elapsed.Round(time.Millisecond), err)
}
