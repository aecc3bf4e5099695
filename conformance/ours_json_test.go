package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
)

// scenarioJSON is row id of the scenario table as a JSON record, byte for
// byte the text sdk_json.js sends (JSON.stringify, keys in that order).
func scenarioJSON(id int64) string {
	name := []byte("null")
	if n := scenarioName(id); n != nil {
		name, _ = json.Marshal(*n)
	}
	return fmt.Sprintf(`{"id":%d,"name":%s,"score":%s,"flag":%t}`,
		id, name, strconv.FormatFloat(float64(id)/2, 'f', -1, 64), id%2 == 0)
}

// jsonPusher drives our JSON record stream the way the official SDK's
// recovery does: it keeps every request until it is acked and, when the
// stream rotates or fails transiently, opens a new stream and resends the
// unacked requests in order (offsets restart at 0 per stream).
type jsonPusher struct {
	t       testing.TB
	c       *ingest.Client
	s       *ingest.JSONStream
	pending []pendingReq
	streams int
}

type pendingReq struct {
	recs   []string
	offset int64 // on the current stream
}

func (p *jsonPusher) open(ctx context.Context) {
	p.t.Helper()
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		s, err := p.c.OpenJSONStream(ctx, confTable)
		if err == nil {
			p.s = s
			p.streams++
			return
		}
		last = err
		if c, _ := ingest.ClassOf(err); c != ingest.Transient {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.t.Fatalf("open JSON stream: %v", last)
}

// recover waits (bounded) for the old stream's outstanding acks, drops what
// they cover, and resends the rest on a new stream.
func (p *jsonPusher) recover(ctx context.Context, cause error) {
	p.t.Helper()
	if c, ok := ingest.ClassOf(cause); ok && c != ingest.Transient {
		p.t.Fatalf("non-transient JSON stream error: %v", cause)
	}
	if n := len(p.pending); n > 0 {
		_, grace := p.s.Closing()
		wctx, cancel := context.WithTimeout(ctx, max(grace, 100*time.Millisecond))
		_ = p.s.WaitForOffset(wctx, p.pending[n-1].offset)
		cancel()
	}
	p.dropAcked()
	_ = p.s.Close()
	for {
		p.open(ctx)
		if err := p.resend(ctx); err == nil {
			return
		} else if c, _ := ingest.ClassOf(err); c != ingest.Transient {
			p.t.Fatalf("resend: %v", err)
		}
		_ = p.s.Close()
	}
}

func (p *jsonPusher) dropAcked() {
	acked := p.s.Acked()
	i := 0
	for i < len(p.pending) && p.pending[i].offset <= acked {
		i++
	}
	p.pending = p.pending[i:]
}

func (p *jsonPusher) resend(ctx context.Context) error {
	for i := range p.pending {
		off, err := p.s.Ingest(ctx, p.pending[i].recs)
		if err != nil {
			return err
		}
		p.pending[i].offset = off
	}
	return nil
}

func (p *jsonPusher) send(ctx context.Context, recs []string) {
	p.t.Helper()
	p.dropAcked()
	if closing, _ := p.s.Closing(); closing {
		p.recover(ctx, errors.New("close signal"))
	}
	p.pending = append(p.pending, pendingReq{recs: recs})
	off, err := p.s.Ingest(ctx, recs)
	if err != nil {
		p.recover(ctx, err) // resends the request just queued
		return
	}
	p.pending[len(p.pending)-1].offset = off
}

func (p *jsonPusher) flush(ctx context.Context) {
	p.t.Helper()
	for len(p.pending) > 0 {
		err := p.s.WaitForOffset(ctx, p.pending[len(p.pending)-1].offset)
		if err == nil {
			p.pending = nil
			break
		}
		if ctx.Err() != nil {
			p.t.Fatalf("flush: %v", err)
		}
		p.recover(ctx, err)
	}
	_ = p.s.Close()
}

func pushJSON(t testing.TB, c *ingest.Client, rows, perRequest int64, pace time.Duration) *jsonPusher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := &jsonPusher{t: t, c: c}
	p.open(ctx)
	for from := int64(0); from < rows; from += perRequest {
		var recs []string
		for id := from; id < min(from+perRequest, rows); id++ {
			recs = append(recs, scenarioJSON(id))
		}
		p.send(ctx, recs)
		if pace > 0 {
			time.Sleep(pace)
		}
	}
	p.flush(ctx)
	return p
}

func TestOursJSONStream(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{})
	p := pushJSON(t, ourClient(t, srv, confSecret, nil), 5000, 1, 0)
	if p.streams != 1 {
		t.Fatalf("%d streams opened without faults, want 1", p.streams)
	}
	checkRows(t, srv, 5000, false)
}

func TestOursRecoveryJSON(t *testing.T) {
	srv := startEmulator(t, rotationFaults)
	p := pushJSON(t, ourClient(t, srv, confSecret, nil), 5000, 50, 50*time.Millisecond)
	st := tableStats(srv)
	if st.StreamsOpened < 3 {
		t.Fatalf("only %d streams opened: the emulator did not rotate the stream mid-run", st.StreamsOpened)
	}
	dup := checkRows(t, srv, 5000, true)
	t.Logf("our client, JSON, rotation every %v: %d streams, 5000 rows, %d duplicates (at-least-once)", rotationFaults.StreamLifetime, p.streams, dup)
}

func TestOursWrongSecretJSON(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{})
	c := ourClient(t, srv, "wrong-secret", nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.OpenJSONStream(ctx, confTable)
	if err == nil {
		_ = s.Close()
		t.Fatal("our client opened a JSON stream with a wrong client secret")
	}
	var ze *ingest.Error
	if !errors.As(err, &ze) || ze.Class != ingest.FatalConfig {
		t.Fatalf("wrong secret: want a fatal_config *ingest.Error, got %T %v", err, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "401") && !strings.Contains(msg, "invalid_client") {
		t.Fatalf("error does not say the credentials were refused: %q", msg)
	}
	if st := srv.Stats(); st.TokenFailures != 1 || st.TokensIssued != 0 {
		t.Fatalf("token endpoint saw %d refusals and issued %d tokens; a non-retryable error is asked once", st.TokenFailures, st.TokensIssued)
	}
}
