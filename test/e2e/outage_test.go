package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp"
)

// warnOrError matches a warning or error line of the binary's log.
var warnOrError = regexp.MustCompile(`level=(warn|warning|error)\b`)

// outageConfig writes a pipeline config: rows rows of `generate` one every
// interval into eventsTable through endpoint (the workspace at httpURL),
// with the HTTP server on addr (health) and the logger at INFO.
func outageConfig(t *testing.T, addr, endpoint, httpURL string, rows int, interval string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "outage.yaml")
	y := fmt.Sprintf(`http:
  address: %s
logger:
  level: INFO
input:
  generate:
    count: %d
    interval: %s
    mapping: 'root = {"id": counter(), "msg": "m"}'
output:
  label: zb
%s`, addr, rows, interval, indentBy(zerobusOutput(endpoint, httpURL, eventsTable, "batching:\n  count: 10\n  period: 100ms"), 2))
	require.NoError(t, os.WriteFile(cfg, []byte(y), 0o600))
	return cfg
}

// outageWatch follows a pipeline in an outage: when the first line naming
// the cause came, and when health first said 503 naming it.
type outageWatch struct {
	named, down  time.Duration
	health       string
	namedLine    string
	sawNotOpened bool
}

func (w *outageWatch) poll(pipe *proc, base string, since time.Time, cause string) {
	logs := pipe.out.String()
	if w.named == 0 {
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, cause) && strings.Contains(l, "What to do") {
				w.named, w.namedLine = time.Since(since), l
				break
			}
		}
	}
	if w.down == 0 {
		code, body := httpGet(base + healthhttp.Path)
		if strings.Contains(body, "not opened yet") {
			w.sawNotOpened = true
		}
		if code == http.StatusServiceUnavailable && strings.Contains(body, cause) {
			w.down, w.health = time.Since(since), body
		}
	}
}

// An endpoint whose host does not resolve, the workspace reachable: within
// 5 s the log names the host and says what to check, health says 503
// `down` with the cause, the engine never says the output is active, and
// over 20 s the warnings and errors are a handful, not one a second.
func TestFaultEndpointUnresolvable(t *testing.T) {
	t.Parallel()
	httpURL, _, _ := startEmulatorProcess(t, "--table", eventsTable+":"+eventsCols)
	addr := freeAddr(t)
	const host = "123.zerobus.nope.invalid"
	pipe, exited := startPipeline(t, outageConfig(t, addr, "https://"+host, httpURL, 200, "50ms"))
	waitListening(t, addr, pipe, exited)
	base := "http://" + addr
	eventually(t, 20*time.Second, 10*time.Millisecond, "the output never started connecting", func() (bool, string) {
		return strings.Contains(pipe.out.String(), "zerobus output settings"), tail(pipe.out.String(), 10)
	})
	begun := time.Now()
	cause := "endpoint host " + host + " does not resolve"
	var w outageWatch
	const watch = 20 * time.Second
	for time.Since(begun) < watch {
		w.poll(pipe, base, begun, cause)
		time.Sleep(50 * time.Millisecond)
	}
	logs := pipe.out.String()
	loud := 0
	for _, l := range strings.Split(logs, "\n") {
		if warnOrError.MatchString(l) {
			loud++
		}
	}
	faultLine(t, "endpoint %s does not resolve: cause named after %s, health 503 naming it after %s; warn/error lines in %s=%d; 'is now active' lines=%d",
		host, w.named.Round(10*time.Millisecond), w.down.Round(10*time.Millisecond), watch, loud, countLines(logs, "is now active", "zerobus"))
	require.NotZero(t, w.named, "the cause was never named:\n%s", tail(logs, 20))
	assert.LessOrEqual(t, w.named, 5*time.Second, "the cause named within 5 s of the first attempt")
	assert.Contains(t, w.namedLine, "check `endpoint`", "and what to check")
	require.NotZero(t, w.down, "health never said 503 naming the cause:\n%s", tail(logs, 20))
	assert.LessOrEqual(t, w.down-w.named, 2*time.Second, "health down within 2 s of the failure")
	assert.Contains(t, w.health, `"status": "down"`)
	assert.Equal(t, 1, countLines(logs, "Failed to connect", cause), "the engine's error names the cause, once:\n%s", tail(logs, 20))
	assert.Zero(t, countLines(logs, "Output type zerobus is now active"), "never connected: never active")
	assert.LessOrEqual(t, loud, 5, "a handful of warnings and errors, not one a second:\n%s", tail(logs, 20))
}

// SIGTERM to an output whose endpoint never resolved, with batches held:
// the process exits within close_timeout + 1 s, the held rows are nacked
// (the close line counts them: none delivered, 10 held and handed back; the
// input redelivers them), and the output says once that it never
// connected. Benthos v4.60's output loop reads no batch until Connect
// returns nil and logs "is now active" when it does; blocking in Connect
// until the engine's soft stop instead leaves the held batches unread until
// its forced stop at 3/4 of shutdown_timeout (measured: exit 15.0 s, the
// rows never counted). So the engine's line may follow, but only right
// after the output's line saying what it means.
func TestFaultSIGTERMNeverConnected(t *testing.T) {
	const closeTimeout = 2 * time.Second
	httpURL, _, _ := startEmulatorProcess(t, "--table", eventsTable+":"+eventsCols)
	const host = "123.zerobus.nope.invalid"
	input := `generate:
  count: 10
  interval: ""
  batch_size: 10
  mapping: 'root = {"id": counter(), "msg": "m"}'`
	out := zerobusOutput("https://"+host, httpURL, eventsTable, "close_timeout: 2s\nbatching:\n  count: 10\n  period: 10ms\n")
	pipe, exited := startPipeline(t, writeConfig(t, "INFO", input, out))
	cause := "endpoint host " + host + " does not resolve"
	eventually(t, 20*time.Second, 50*time.Millisecond, "the output never failed to connect", func() (bool, string) {
		return countLines(pipe.out.String(), "Failed to connect", cause) > 0, tail(pipe.out.String(), 20)
	})
	time.Sleep(time.Second) // held a while, as a user's SIGTERM would find it
	took := sigterm(t, pipe, exited, 30*time.Second)
	logs := pipe.out.String()
	engine, explained := engineActiveExplained(logs)
	faultLine(t, "SIGTERM, endpoint %s never resolved: exit after %s (close_timeout %s); engine 'is now active' lines=%d, each right after the output's line: %v; %s",
		host, took.Round(10*time.Millisecond), closeTimeout, engine, explained, strings.TrimSpace(firstLineWith(logs, "zerobus: closed")))
	assert.LessOrEqual(t, took, closeTimeout+time.Second, "exit within close_timeout + 1 s:\n%s", tail(logs, 30))
	assert.Equal(t, 1, countLines(logs, "zerobus: closed;"), "one close line:\n%s", tail(logs, 30))
	assert.Equal(t, 1, countLines(logs, "zerobus: closed; "+eventsTable+": 0 rows delivered, 10 rows not delivered (10 held and never sent", "handed back to the input, nacked"),
		"the close line says no row was delivered and the 10 held rows were handed back:\n%s", tail(logs, 30))
	assert.Zero(t, countLines(logs, "was delivered"), "never that every row was delivered:\n%s", tail(logs, 30))
	assert.Equal(t, 1, countLines(logs, "stopping before table "+eventsTable+" ever connected", "being handed back"), "the output says once that it never connected and hands the held rows back:\n%s", tail(logs, 30))
	assert.LessOrEqual(t, engine, 1, "the engine's line at most once:\n%s", tail(logs, 30))
	assert.True(t, explained, "the engine's line only right after the output's line saying it never connected:\n%s", tail(logs, 30))
	assert.Zero(t, emulatorStats(t, httpURL).Tables[eventsTable].RowsAcked, "nothing written")
}

// engineActiveLine is the engine's line that the output is active (not the
// output's own line quoting it, escaped).
const engineActiveLine = `msg="Output type zerobus is now active"`

// engineActiveExplained counts the engine's "is now active" lines and
// reports whether each directly follows the output's line saying that it
// never connected and what the engine's line means.
func engineActiveExplained(logs string) (n int, explained bool) {
	explained = true
	var prev string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, engineActiveLine) {
			n++
			if !strings.Contains(prev, "ever connected") || !strings.Contains(prev, "marks only that hand-back") {
				explained = false
			}
		}
		if strings.TrimSpace(l) != "" {
			prev = l
		}
	}
	return n, explained
}

// laterListener reserves a loopback port that refuses connections until
// open is called; it then forwards every connection to upstream.
type laterListener struct {
	addr, upstream string
	mu             sync.Mutex
	ln             net.Listener
}

func (l *laterListener) open(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", l.addr)
	require.NoError(t, err)
	l.mu.Lock()
	l.ln = ln
	l.mu.Unlock()
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", l.upstream)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
}

// An endpoint that refuses connections (nothing listens on its port yet),
// the workspace reachable: the cause is named (the address refusing), then
// something starts listening there and the output heals by itself,
// without a restart, every row landing exactly once.
func TestFaultEndpointRefusedThenListening(t *testing.T) {
	t.Parallel()
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--table", eventsTable+":"+eventsCols)
	later := &laterListener{addr: freeAddr(t), upstream: strings.TrimPrefix(grpcURL, "http://")}
	addr := freeAddr(t)
	const rows = 100
	pipe, exited := startPipeline(t, outageConfig(t, addr, "http://"+later.addr, httpURL, rows, "50ms"))
	waitListening(t, addr, pipe, exited)
	base := "http://" + addr
	eventually(t, 20*time.Second, 10*time.Millisecond, "the output never started connecting", func() (bool, string) {
		return strings.Contains(pipe.out.String(), "zerobus output settings"), tail(pipe.out.String(), 10)
	})
	begun := time.Now()
	cause := "endpoint address " + later.addr + " refused the connection"
	var w outageWatch
	for time.Since(begun) < 8*time.Second {
		w.poll(pipe, base, begun, cause)
		time.Sleep(50 * time.Millisecond)
	}
	later.open(t)
	opened := time.Now()
	var up time.Duration // when health said up again
	waitEveryRow(t, 30*time.Second, "not every row landed after the endpoint started listening", httpURL, eventsTable, rows, func(int64) {
		if code, body := httpGet(base + healthhttp.Path); up == 0 && code == http.StatusOK && strings.Contains(body, `"status": "up"`) {
			up = time.Since(opened)
		}
	}, func() string { return tail(pipe.out.String(), 10) })
	healed := time.Since(opened)
	logs := pipe.out.String()
	_, distinct, dups := rowStats(t, httpURL, eventsTable)
	faultLine(t, "endpoint %s refused, listening after 8 s: cause named after %s, health 503 naming it after %s; health up %s and all %d rows landed %s after it listened (dups=%d); healing lines=%d; 'is now active' lines=%d",
		later.addr, w.named.Round(10*time.Millisecond), w.down.Round(10*time.Millisecond), up.Round(10*time.Millisecond), rows, healed.Round(10*time.Millisecond), dups,
		countLines(logs, "writing again after"), countLines(logs, "is now active", "zerobus"))
	require.NotZero(t, w.named, "the cause was never named:\n%s", tail(logs, 20))
	assert.LessOrEqual(t, w.named, 5*time.Second, "the cause named within 5 s:\n%s", tail(logs, 40))
	require.NotZero(t, w.down, "health never said 503 naming the cause:\n%s", tail(logs, 20))
	assert.LessOrEqual(t, w.down-w.named, 2*time.Second)
	assert.Equal(t, rows, distinct, "every row landed")
	assert.Zero(t, dups, "exactly once")
	assert.Less(t, healed, 20*time.Second, "healed within a back-off step of the endpoint listening")
	assert.Equal(t, 1, countLines(logs, "writing again after"), "one line says it heals:\n%s", tail(logs, 20))
	assert.NotZero(t, up, "health said up again once it healed")
}
