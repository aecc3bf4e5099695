package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp"
	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp/healthhttptest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/testnet"
)

// workspaceRig is the emulator process, a black hole in front of its
// workspace listener (OAuth token endpoint and Unity Catalog REST, one HTTP
// listener in the emulator) through which the pipeline reaches the
// workspace, and the pipeline, which reaches the Zerobus endpoint directly.
// The test reads the emulator's stats and sets its faults on the direct
// address, so it sees the emulator while the pipeline's workspace is down.
type workspaceRig struct {
	httpURL string // the emulator, directly
	ws      *testnet.BlackHole
	pipe    *proc
	health  string // the pipeline's health endpoint
	rows    int
}

const workspaceTable = "main.default.ws"

// startWorkspaceRig starts the rig: tokens living ttl, streams rotated after
// lifetime (from the start: a stream's lifetime counts from its open), rows
// generated at 40 rows/s.
func startWorkspaceRig(t *testing.T, ttl, lifetime time.Duration, rows int) *workspaceRig {
	t.Helper()
	binaries(t)
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--token-ttl", ttl.String(), "--table", workspaceTable+":id BIGINT NOT NULL, k STRING")
	putFaults(t, httpURL, fmt.Sprintf(`{"stream_lifetime":%q,"rotation_grace":"300ms"}`, lifetime))
	u, err := url.Parse(httpURL)
	require.NoError(t, err)
	ws := testnet.StartBlackHole(t, u.Host)
	addr := freeAddr(t)
	cfg := filepath.Join(t.TempDir(), "ws.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
http:
  address: %s
logger:
  level: DEBUG
input:
  generate:
    count: %d
    interval: 25ms
    mapping: |
      root.id = counter()
      root.k = "w-" + counter().string()
output:
  zerobus:
    endpoint: %s
    workspace_url: http://%s
    table: %s
    client_id: %s
    client_secret: %s
    close_timeout: 2s
    batching:
      count: 10
      period: 250ms
`, addr, rows, grpcURL, ws.Addr(), workspaceTable, emulator.DefaultClientID, emulator.DefaultClientSecret)), 0o600))
	pipe, _ := startPipeline(t, cfg)
	return &workspaceRig{httpURL: httpURL, ws: ws, pipe: pipe, health: "http://" + addr + healthhttp.Path, rows: rows}
}

func (r *workspaceRig) landed() int64 { return rowCount(r.httpURL, workspaceTable) }

// waitAllLanded waits until every row landed, then reads them back: stored
// rows, distinct ids and duplicates.
func (r *workspaceRig) waitAllLanded(t *testing.T, wait time.Duration) (stored, distinct, dups int) {
	t.Helper()
	waitEveryRow(t, wait, "not every row landed", r.httpURL, workspaceTable, r.rows, nil,
		func() string { return tail(r.pipe.out.String(), 20) })
	time.Sleep(300 * time.Millisecond) // a duplicate would land just after the last row
	return rowStats(t, r.httpURL, workspaceTable)
}

// The workspace (token endpoint and Unity Catalog) goes down mid-run while
// the Zerobus endpoint stays up. The streams open keep writing (nothing
// needs the workspace until a stream reopens); the server's rotations then
// need a fresh token (tokens live 3 s here), which fails while the workspace
// is down: the writer backs off and explains it once, health says the table
// is not writable, and once the workspace is back everything heals. No row
// lost, none twice.
func TestFaultWorkspaceDown(t *testing.T) {
	t.Parallel()
	const down = 8 * time.Second
	rows := 600
	r := startWorkspaceRig(t, 3*time.Second, 4*time.Second, rows)
	eventually(t, 30*time.Second, 50*time.Millisecond, "never healthy and writing", func() (bool, string) {
		code, rep, err := healthhttptest.Fetch(r.health)
		return err == nil && code == http.StatusOK && r.landed() >= 40, describeHealth(code, rep, err) + "\n" + tail(r.pipe.out.String(), 10)
	})

	logFrom := len(r.pipe.out.String())
	r.ws.SetDown(true)
	downAt, landedAtDown := time.Now(), r.landed()
	// While the open streams last: rows keep landing.
	var firstLandedDown time.Duration
	var unhealthy time.Duration
	var lastHealth string
	for time.Since(downAt) < down {
		if firstLandedDown == 0 && r.landed() > landedAtDown {
			firstLandedDown = time.Since(downAt)
		}
		if code, body := httpGet(r.health); code == http.StatusServiceUnavailable {
			if unhealthy == 0 {
				unhealthy = time.Since(downAt)
			}
			lastHealth = body
		}
		time.Sleep(50 * time.Millisecond)
	}
	landedDown := r.landed() - landedAtDown
	st := streamStats(t, r.httpURL, workspaceTable)
	r.ws.SetDown(false)
	back := time.Now()
	faultLog := r.pipe.out.String()[logFrom:]
	var healthy time.Duration
	eventually(t, 60*time.Second, 50*time.Millisecond, "never healthy again after the workspace came back", func() (bool, string) {
		code, rep, err := healthhttptest.Fetch(r.health)
		if err == nil && code == http.StatusOK && healthy == 0 {
			healthy = time.Since(back)
		}
		return healthy > 0, describeHealth(code, rep, err)
	})
	stored, distinct, dups := r.waitAllLanded(t, 60*time.Second)
	explained := countLines(faultLog, "What to do")
	engineLines := countLines(faultLog, "Failed to connect")
	retries := countLines(faultLog, "reconnect attempt", "token request")
	lastErr := strings.TrimSpace(firstLineWith(lastHealth, "last_error"))
	faultLine(t, "workspace down for %s (Zerobus up; tokens live 3s, streams rotate every 4s): rows landed while down=%d (first after %s); health 503 after %s, last report while down: %s; explanations=%d, engine 'Failed to connect' lines=%d, client reconnect warnings naming the token request=%d; healthy %s after the workspace was back; rows sent=%d landed=%d distinct=%d dups=%d; streams opened before the workspace came back=%d",
		down, landedDown, firstLandedDown.Round(10*time.Millisecond), unhealthy.Round(10*time.Millisecond), lastErr,
		explained, engineLines, retries, healthy.Round(10*time.Millisecond), rows, stored, distinct, dups, st.StreamsOpened)
	assert.Positive(t, landedDown, "the open streams kept writing while the workspace was down")
	assert.Positive(t, unhealthy, "health says the table is not writable once its streams needed the workspace")
	assert.Contains(t, lastErr, "token request", "health names what is down: the workspace's token endpoint")
	assert.Positive(t, retries, "the reconnects' failures name the token request")
	// The outage is one lost connection, then its cause (the token
	// request): at most one engine line for each, not one per step.
	assert.LessOrEqual(t, engineLines, 2, "the engine's error line once per cause:\n%s", tail(faultLog, 20))
	// The writer explains the outage (no stream connected) once per cause,
	// naming what to check.
	assert.GreaterOrEqual(t, explained, 1, "the outage explained, with what to do:\n%s", tail(faultLog, 20))
	assert.LessOrEqual(t, explained, 2, "explained once per cause, not per reconnect:\n%s", tail(faultLog, 20))
	assert.Less(t, healthy, 20*time.Second, "healed within a back-off step")
	assert.Equal(t, rows, distinct, "every row landed")
	assertAtLeastOnce(t, emulatorStats(t, r.httpURL).Tables[workspaceTable], dups) // rotations, a 300 ms close period
}

// Tokens expire while the pipeline runs. The official SDK takes a token when
// it opens a stream and keeps it for the stream's life: get_headers is
// called in create_flight_client, on the first open and on each reconnect
// (databricks/zerobus-sdk rust/sdk/src/arrow_stream.rs); nothing refreshes
// the token of an open stream, and nothing in the SDK handles a stream
// closed for an expired token other than as any retryable close. So the
// emulator checks tokens at stream open only, and this cell makes expiry
// bite where it can: tokens live 2 s, the server rotates streams every 3 s,
// so every reopen comes after the token it would reuse has expired. Each
// reopen must fetch a fresh token: no open refused UNAUTHENTICATED, no row
// lost, none twice.
func TestFaultTokenExpiryAcrossRotations(t *testing.T) {
	t.Parallel()
	rows := 400
	if os.Getenv("CHAOS_LONG") != "" {
		rows = 800
	}
	r := startWorkspaceRig(t, 2*time.Second, 3*time.Second, rows)
	began := time.Now()
	stored, distinct, dups := r.waitAllLanded(t, 90*time.Second)
	st := emulatorStats(t, r.httpURL)
	ts := streamStats(t, r.httpURL, workspaceTable)
	logs := r.pipe.out.String()
	unauth := countLines(logs, "nauthenticated") + countLines(logs, "UNAUTHENTICATED")
	faultLine(t, "tokens living 2s, streams rotated every 3s: rows sent=%d landed=%d distinct=%d dups=%d over %s; streams opened=%d, tokens issued=%d, token requests refused=%d, UNAUTHENTICATED lines=%d",
		rows, stored, distinct, dups, time.Since(began).Round(100*time.Millisecond), ts.StreamsOpened, st.TokensIssued, st.TokenFailures, unauth)
	assert.Greater(t, ts.StreamsOpened, int64(4), "the rotations reopened streams")
	// The pool's streams open (and rotate) together and share a token
	// fetched for the table; a reopen with the token it had would be
	// refused UNAUTHENTICATED (the emulator checks expiry at open).
	assert.GreaterOrEqual(t, 2*st.TokensIssued, ts.StreamsOpened, "reopens after expiry fetched fresh tokens")
	assert.Zero(t, unauth, "no open refused for an expired token:\n%s", firstLineWith(logs, "nauthenticated"))
	assert.Equal(t, rows, distinct, "every row landed")
	assertAtLeastOnce(t, emulatorStats(t, r.httpURL).Tables[workspaceTable], dups) // rotations, a 300 ms close period
}
