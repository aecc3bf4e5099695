package conformance

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

// The official Zerobus SDK (native build 1.3.0, driven through node) against
// a fresh emulator per scenario; the emulator's read-back is the judge.

func TestSDKJSONStream(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{})
	res := runNode(t, 2*time.Minute, "sdk_json.js", sdkFlags(srv, confSecret, map[string]string{"rows": "5000"}))
	if !res.OK {
		t.Fatalf("official SDK JSON stream failed: %s\n%s", res.Error, res.Stderr)
	}
	if res.Requests != 5000 || res.LastOffset != 4999 || res.Unacked != 0 {
		t.Fatalf("SDK reported requests=%d last_offset=%d unacked=%d, want 5000/4999/0", res.Requests, res.LastOffset, res.Unacked)
	}
	checkRows(t, srv, 5000, false)
}

func TestSDKArrowStream(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{})
	res := runNode(t, 2*time.Minute, "sdk_arrow.js", sdkFlags(srv, confSecret, map[string]string{"rows": "20000", "batch-rows": "2500"}))
	if !res.OK {
		t.Fatalf("official SDK Arrow stream failed: %s\n%s", res.Error, res.Stderr)
	}
	if res.Batches != 8 || res.LastOffset != 7 || res.Unacked != 0 {
		t.Fatalf("SDK reported batches=%d last_offset=%d unacked=%d, want 8/7/0", res.Batches, res.LastOffset, res.Unacked)
	}
	checkRows(t, srv, 20000, false)
	if st := tableStats(srv); st.StreamsOpened != 1 || st.BatchesReceived != 8 {
		t.Fatalf("emulator saw %d streams and %d batches, want 1 and 8", st.StreamsOpened, st.BatchesReceived)
	}
}

// rotationFaults rotate every stream after 700ms, announcing 300ms to drain.
var rotationFaults = emulator.Faults{StreamLifetime: 700 * time.Millisecond, RotationGrace: 300 * time.Millisecond}

func TestSDKRecoveryArrow(t *testing.T) {
	srv := startEmulator(t, rotationFaults)
	// 40 batches of 500 rows, one every 100ms: the run spans several stream lifetimes.
	res := runNode(t, 3*time.Minute, "sdk_arrow.js", sdkFlags(srv, confSecret, map[string]string{
		"rows": "20000", "batch-rows": "500", "pace-ms": "100",
		"recovery": "true", "recovery-backoff-ms": "100", "recovery-retries": "10",
	}))
	if !res.OK {
		t.Fatalf("official SDK Arrow stream did not recover from rotation: %s\n%s", res.Error, res.Stderr)
	}
	st := tableStats(srv)
	if st.StreamsOpened < 3 {
		t.Fatalf("only %d streams opened: the emulator did not rotate the stream mid-run", st.StreamsOpened)
	}
	dup := checkRows(t, srv, 20000, true)
	t.Logf("official SDK, Arrow, rotation every %v: %d streams, 20000 rows, %d duplicates (at-least-once)", rotationFaults.StreamLifetime, st.StreamsOpened, dup)
}

func TestSDKRecoveryJSON(t *testing.T) {
	srv := startEmulator(t, rotationFaults)
	res := runNode(t, 3*time.Minute, "sdk_json.js", sdkFlags(srv, confSecret, map[string]string{
		"rows": "5000", "batch-size": "50", "pace-ms": "50", "pace-every": "1",
		"recovery": "true", "recovery-backoff-ms": "100", "recovery-retries": "10",
	}))
	if !res.OK {
		t.Fatalf("official SDK JSON stream did not recover from rotation: %s\n%s", res.Error, res.Stderr)
	}
	st := tableStats(srv)
	if st.StreamsOpened < 3 {
		t.Fatalf("only %d streams opened: the emulator did not rotate the stream mid-run", st.StreamsOpened)
	}
	dup := checkRows(t, srv, 5000, true)
	t.Logf("official SDK, JSON, rotation every %v: %d streams, 5000 rows, %d duplicates (at-least-once)", rotationFaults.StreamLifetime, st.StreamsOpened, dup)
}

// sdkBackoff is the recovery backoff given to the SDK in the wrong-secret
// scenario: had the SDK classified the refusal as retryable it would sleep
// this long and ask for a token again (it does so for a 5xx token response:
// see TestSDKRetriesTransientTokenFailure).
const sdkBackoff = 5 * time.Second

func TestSDKWrongSecret(t *testing.T) {
	for _, script := range []string{"sdk_arrow.js", "sdk_json.js"} {
		t.Run(script, func(t *testing.T) {
			srv := startEmulator(t, emulator.Faults{})
			res := runNode(t, time.Minute, script, sdkFlags(srv, "wrong-secret", map[string]string{
				"rows": "10", "recovery": "true", "recovery-backoff-ms": strconv.Itoa(int(sdkBackoff.Milliseconds())),
			}))
			if res.OK {
				t.Fatal("official SDK succeeded with a wrong client secret")
			}
			if !strings.Contains(res.Error, "401") || !strings.Contains(res.Error, "invalid_client") {
				t.Fatalf("error does not say the credentials were refused: %q", res.Error)
			}
			if res.Retryable != nil && *res.Retryable {
				t.Fatalf("SDK classified a refused secret as retryable: %q", res.Error)
			}
			st := srv.Stats()
			if st.TokenFailures != 1 || st.TokensIssued != 0 {
				t.Fatalf("token endpoint saw %d refusals and issued %d tokens; a non-retryable error is asked once",
					st.TokenFailures, st.TokensIssued)
			}
			if took := time.Duration(res.ElapsedMS) * time.Millisecond; took >= sdkBackoff {
				t.Fatalf("SDK took %v to fail: it backed off and retried", took)
			}
			if ts := tableStats(srv); ts.StreamsOpened != 0 || ts.RowCount != 0 {
				t.Fatalf("a stream opened (%d) or rows landed (%d) without valid credentials", ts.StreamsOpened, ts.RowCount)
			}
			t.Logf("official SDK error (non-retryable, failed %dms after creating the SDK; node ran %v): %s", res.ElapsedMS, res.Elapsed.Round(time.Millisecond), res.Error)
		})
	}
}

// TestSDKRetriesTransientTokenFailure is the control for TestSDKWrongSecret:
// it shows the SDK does back off and retry when the token endpoint fails with
// a retryable 503, so the single attempt seen there is a classification.
func TestSDKRetriesTransientTokenFailure(t *testing.T) {
	r := startRecorder(t)
	r.failTokens(503)
	res := runNode(t, time.Minute, "sdk_arrow.js", map[string]string{
		"endpoint": "http://" + r.grpcAddr, "workspace-url": r.httpURL, "client-id": "c", "client-secret": "s",
		"table": confTable, "rows": "10", "recovery": "true", "recovery-backoff-ms": "200", "recovery-retries": "2",
	})
	if res.OK {
		t.Fatal("SDK succeeded although the token endpoint always fails")
	}
	toks, _ := r.snapshot()
	if len(toks) < 2 {
		t.Fatalf("SDK asked for a token %d time(s) after a 503; want retries (error: %s)", len(toks), res.Error)
	}
	if !strings.Contains(res.Error, "503") {
		t.Fatalf("error does not carry the 503: %q", res.Error)
	}
}
