package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp"
	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp/healthhttptest"
)

// The fault matrix of the table writer's lifecycle, cell by cell, against
// the built binaries: the zerobus-emulator (its fault API injects the
// fault) and benthos-zerobus running a generate → zerobus pipeline. Each
// test logs one "fault:" line with what it measured (rows sent, landed,
// duplicates, stream opens, time to detect, time to heal) for the
// reliability table.

// faultLine logs and prints one measurement line.
func faultLine(t *testing.T, format string, args ...any) {
	t.Helper()
	line := "fault: " + fmt.Sprintf(format, args...)
	t.Log(line)
	fmt.Println(line)
}

// streamsOpened is the emulator's count of streams opened on table.
func streamsOpened(t *testing.T, httpURL, table string) int64 {
	t.Helper()
	for name, ts := range emulatorStats(t, httpURL).Tables {
		if strings.EqualFold(name, table) {
			return ts.StreamsOpened
		}
	}
	return 0
}

// countLines counts the lines of s that contain every one of want.
func countLines(s string, want ...string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		ok := true
		for _, w := range want {
			if !strings.Contains(l, w) {
				ok = false
				break
			}
		}
		if ok {
			n++
		}
	}
	return n
}

// rowStats reads back table's rows: how many are stored, how many distinct
// ids, and the duplicates.
func rowStats(t *testing.T, httpURL, table string) (stored, distinct, dups int) {
	t.Helper()
	rows := readRows(t, httpURL, table)
	seen := map[int64]int{}
	for _, r := range rows {
		id, ok := asInt64(r["id"])
		require.True(t, ok, "row without an integer id: %v", r)
		seen[id]++
	}
	return len(rows), len(seen), len(rows) - len(seen)
}

// waitEveryRow waits until every one of rows distinct ids is in table:
// the table's row_count counts duplicates, so it is read first (cheap) and
// the ids only once it reaches rows. poll, when set, sees each row_count.
func waitEveryRow(t *testing.T, wait time.Duration, msg, httpURL, table string, rows int, poll func(n int64), logs func() string) {
	t.Helper()
	eventually(t, wait, 20*time.Millisecond, msg, func() (bool, string) {
		n := rowCount(httpURL, table)
		if poll != nil {
			poll(n)
		}
		if n < int64(rows) {
			return false, fmt.Sprintf("row_count %d of %d\n%s", n, rows, logs())
		}
		_, distinct, _ := rowStats(t, httpURL, table)
		return distinct >= rows, fmt.Sprintf("row_count %d, %d distinct of %d\n%s", n, distinct, rows, logs())
	})
}

// rowCount is the emulator's row_count of table (0 when unreadable).
func rowCount(httpURL, table string) int64 {
	ti, err := fetchTableInfo(httpURL, table)
	if err != nil {
		return 0
	}
	return ti.RowCount
}

// A permanent error mid-stream (every batch refused PERMISSION_DENIED while
// streams still open fine) must not become a reopen storm nor nack the
// batches into the input: the batches are held, the writer backs off 1 s →
// 60 s across open→fail cycles (≤ 12 opens in 8 s), says once what to do,
// and heals within one back-off step once the fault is cleared, every row
// landing exactly once.
func TestFaultPermanentMidStream(t *testing.T) {
	t.Parallel()
	const rows = 2000
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--table", eventsTable+":"+eventsCols)
	cfg := writeConfig(t, "INFO", `generate:
  count: 2000
  interval: 2ms
  mapping: 'root = {"id": counter(), "msg": "m"}'`,
		zerobusOutput(grpcURL, httpURL, eventsTable, "batching:\n  count: 50\n  period: 20ms\n"))
	pipe, exited := startPipeline(t, cfg)
	eventually(t, 30*time.Second, 20*time.Millisecond, "rows never started landing", func() (bool, string) {
		n := rowCount(httpURL, eventsTable)
		return n >= 200, fmt.Sprintf("row_count %d\n%s", n, tail(pipe.out.String(), 20))
	})

	opensBefore := streamsOpened(t, httpURL, eventsTable)
	logFrom := len(pipe.out.String())
	faultAt := time.Now()
	putFaults(t, httpURL, `{"error_rate":{"PERMISSION_DENIED":1}}`)
	landedAtFault := rowCount(httpURL, eventsTable)
	time.Sleep(8 * time.Second) // the fault's duration, as in the issue
	opens := streamsOpened(t, httpURL, eventsTable) - opensBefore
	landedDuring := rowCount(httpURL, eventsTable) - landedAtFault
	putFaults(t, httpURL, `{}`)
	cleared := time.Now()
	faultLog := pipe.out.String()[logFrom:]

	var healed time.Duration
	waitEveryRow(t, 30*time.Second, "the pipeline never healed after the fault was cleared", httpURL, eventsTable, rows, func(n int64) {
		if healed == 0 && n > landedAtFault+landedDuring {
			healed = time.Since(cleared)
		}
	}, func() string { return tail(pipe.out.String(), 30) })
	all := time.Since(cleared)
	select {
	case err := <-exited:
		t.Logf("pipeline exited: %v", err)
	default:
	}
	stored, distinct, dups := rowStats(t, httpURL, eventsTable)
	explained := countLines(faultLog, "MODIFY")
	nacked := countLines(faultLog, "Failed to send message")
	faultLine(t, "permanent mid-stream (PERMISSION_DENIED on every batch for 8s): rows sent=%d landed=%d distinct=%d dups=%d; stream opens in the 8s=%d; explanations naming MODIFY=%d; nacked batches=%d; rows landed during the fault=%d; heal (first row after clear)=%s; all rows landed %s after clear (fault began %s before)",
		rows, stored, distinct, dups, opens, explained, nacked, landedDuring, healed.Round(10*time.Millisecond), all.Round(10*time.Millisecond), cleared.Sub(faultAt).Round(10*time.Millisecond))

	assert.LessOrEqual(t, opens, int64(12), "stream opens in the 8 s of the fault (a reopen storm otherwise)")
	assert.Zero(t, nacked, "no batch is nacked into the input while the fault lasts (held):\n%s", tail(faultLog, 8))
	assert.Equal(t, 1, explained, "one explanation naming what to do (grant MODIFY):\n%s", tail(faultLog, 8))
	assert.Equal(t, rows, distinct, "every row landed")
	// A refused batch ends its stream at once: batches before it that the
	// emulator stored but had not acked yet are resent (16 rows once, on a
	// loaded machine).
	assertAtLeastOnce(t, emulatorStats(t, httpURL).Tables[eventsTable], dups)
	assert.Less(t, healed, 10*time.Second, "healed within one back-off step of the clear")
}

// blackHole listens on loopback and accepts connections that it never
// answers: a peer that is reachable but silent.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// sigterm sends SIGTERM to the pipeline and returns how long it took to
// exit (failing the test if it is still running after limit).
func sigterm(t *testing.T, pipe *proc, exited <-chan error, limit time.Duration) time.Duration {
	t.Helper()
	sent := time.Now()
	require.NoError(t, pipe.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
		return time.Since(sent)
	case <-time.After(limit):
		t.Fatalf("benthos-zerobus still running %s after SIGTERM:\n%s", limit, tail(pipe.out.String(), 40))
	}
	return 0
}

// SIGTERM in any state exits within close_timeout + 1 s, logging once how
// many rows were delivered and how many were handed back (and will be
// redelivered).
func TestFaultSIGTERM(t *testing.T) {
	t.Parallel()
	const closeTimeout = 2 * time.Second
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--table", eventsTable+":"+eventsCols)
	input := `generate:
  count: 10
  interval: ""
  batch_size: 10
  mapping: 'root = {"id": counter(), "msg": "m"}'`
	extra := "close_timeout: 2s\nbatching:\n  count: 10\n  period: 10ms\n"
	for _, tc := range []struct {
		name string
		// setup returns the output block and waits until the state holds.
		setup func(t *testing.T) string
		ready func(pipe *proc) bool
		// connects: the output connected before the SIGTERM, so the
		// engine's "is now active" line is in the log; for an output that
		// never connected it may be too, but only right after the
		// output's line saying it never connected.
		connects bool
	}{
		{"workspace unreachable", func(t *testing.T) string {
			return zerobusOutput(grpcURL, "http://"+blackHole(t), eventsTable, extra)
		}, func(*proc) bool { return true }, false},
		{"endpoint unreachable while connecting", func(t *testing.T) string {
			return zerobusOutput("http://"+blackHole(t), httpURL, eventsTable, extra)
		}, func(*proc) bool { return true }, false},
		{"acks stalled", func(t *testing.T) string {
			putFaults(t, httpURL, `{"ack_stall":true}`)
			t.Cleanup(func() { putFaults(t, httpURL, `{}`) })
			return zerobusOutput(grpcURL, httpURL, eventsTable, extra)
		}, func(*proc) bool {
			for name, ts := range emulatorStats(t, httpURL).Tables {
				if strings.EqualFold(name, eventsTable) && ts.BatchesReceived > 0 {
					return true
				}
			}
			return false
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := tc.setup(t)
			pipe, exited := startPipeline(t, writeConfig(t, "INFO", input, out))
			// Let the pipeline reach the state: started, the rows taken
			// from the input, the writer connecting or waiting for acks.
			eventually(t, 20*time.Second, 50*time.Millisecond, "the pipeline never reached the state", func() (bool, string) {
				s := pipe.out.String()
				return strings.Contains(s, "zerobus output settings") && tc.ready(pipe), tail(s, 20)
			})
			time.Sleep(time.Second) // in the state for a while, as a user's SIGTERM would find it
			took := sigterm(t, pipe, exited, 30*time.Second)
			logs := pipe.out.String()
			notDelivered := countLines(logs, "not delivered")
			closed := strings.TrimSpace(firstLineWith(logs, "zerobus: closed"))
			faultLine(t, "SIGTERM %s: exit after %s (close_timeout %s); 'not delivered' lines=%d; %s", tc.name, took.Round(10*time.Millisecond), closeTimeout, notDelivered, closed)
			assert.LessOrEqual(t, took, closeTimeout+time.Second, "exit within close_timeout + 1 s:\n%s", tail(logs, 30))
			assert.Equal(t, 1, notDelivered, "one line says how many rows were not delivered:\n%s", tail(logs, 30))
			// Held (never sent) when the output never connected; sent and
			// not confirmed when the acks stalled.
			how := "10 held and never sent"
			if tc.connects {
				how = "10 sent but not confirmed durable"
			}
			assert.Equal(t, 1, countLines(logs, "zerobus: closed; "+eventsTable+": 0 rows delivered, 10 rows not delivered ("+how, "handed back to the input, nacked"), "it counts the 10 pending rows, none delivered:\n%s", tail(logs, 30))
			engine, explained := engineActiveExplained(logs)
			if tc.connects {
				assert.Equal(t, 1, engine, "the engine's 'is now active' line for an output that connected:\n%s", tail(logs, 30))
				return
			}
			assert.LessOrEqual(t, engine, 1, "the engine's line at most once:\n%s", tail(logs, 30))
			assert.True(t, explained, "the engine's line only right after the output's line saying it never connected:\n%s", tail(logs, 30))
		})
	}
}

// A table that does not exist, without provisioning: the output backs off
// 1 s doubling (not a retry every second), says once what to do, and
// writes as soon as the table is created, within one back-off step.
func TestFaultMissingTableBacksOff(t *testing.T) {
	t.Parallel()
	const table, rows = "main.default.late", 100
	httpURL, grpcURL, _ := startEmulatorProcess(t)
	pipe, _ := startPipeline(t, writeConfig(t, "DEBUG", `generate:
  count: 100
  interval: 10ms
  mapping: 'root = {"id": counter(), "msg": "m"}'`, zerobusOutput(grpcURL, httpURL, table)))
	eventually(t, 20*time.Second, 20*time.Millisecond, "the output never reported the missing table", func() (bool, string) {
		s := pipe.out.String()
		return strings.Contains(s, "Failed to connect"), tail(s, 20)
	})
	first := time.Now()
	time.Sleep(9 * time.Second) // watch the retries for a while
	logs := pipe.out.String()
	// The first attempt, then one debug line per later attempt; the
	// engine's own "Failed to connect" line comes once per cause.
	attempts := 1 + countLines(logs, "still failing")
	engineLines := countLines(logs, "Failed to connect")
	explained := countLines(logs, "What to do", "catalog.provision: true")

	created := time.Now()
	require.NoError(t, ucAt(t, httpURL, "wh-late").Execute(t.Context(), "CREATE TABLE "+table+" ("+eventsCols+")"))
	waitEveryRow(t, 30*time.Second, "the rows never landed after the table was created", httpURL, table, rows, nil,
		func() string { return tail(pipe.out.String(), 20) })
	healed := time.Since(created)
	stored, distinct, dups := rowStats(t, httpURL, table)
	faultLine(t, "missing table (provision off): connect attempts in the first %s=%d; explanations=%d; engine 'Failed to connect' lines=%d; rows sent=%d landed=%d distinct=%d dups=%d; all rows landed %s after CREATE TABLE",
		created.Sub(first).Round(100*time.Millisecond), attempts, explained, engineLines, rows, stored, distinct, dups, healed.Round(10*time.Millisecond))
	assert.LessOrEqual(t, attempts, 5, "1 s, 2 s, 4 s, 8 s: not a retry every second:\n%s", tail(logs, 20))
	assert.Equal(t, 1, engineLines, "the engine's error line once per cause, not at each back-off step:\n%s", tail(logs, 20))
	assert.Equal(t, 1, explained, "one explanation naming what to do:\n%s", tail(logs, 20))
	assert.Equal(t, rows, distinct)
	assert.Zero(t, dups)
	assert.Less(t, healed, 17*time.Second, "healed within one back-off step (the wait in force is at most 16 s here)")
}

// httpGet fetches url, returning its status and body ("" and 0 on error).
func httpGet(url string) (int, string) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The Zerobus endpoint dies (kill -9) under traffic: within 2 s the health
// endpoint says 503 naming the lost connection, the engine's connection
// status says not connected (/ready 503, output_connection_lost counted),
// and once it is back everything heals with every row landed.
func TestFaultEndpointDownHealth(t *testing.T) {
	t.Parallel()
	binaries(t)
	emu := newChaosEmulator(t, chaosPlan{lifetime: time.Hour})
	require.NoError(t, emu.start(true))
	t.Cleanup(emu.stop)
	addr := freeAddr(t)
	const rows = 1200
	cfg := filepath.Join(t.TempDir(), "down.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
http:
  address: %s
metrics:
  prometheus: {}
logger:
  level: INFO
input:
  generate:
    count: %d
    interval: 25ms
    mapping: 'root = {"id": counter(), "k": "c-%%d".format(counter())}'
output:
  label: zb
  zerobus:
    endpoint: %s
    workspace_url: %s
    table: %s
    client_id: %s
    client_secret: %s
    batching:
      count: 10
      period: 50ms
`, addr, rows, emu.grpcURL(), emu.httpURL(), chaosTable, chaosPrincipal, chaosSecret)), 0o600))
	pipe, _ := startPipeline(t, cfg)
	base := "http://" + addr
	eventually(t, 30*time.Second, 50*time.Millisecond, "never healthy and writing", func() (bool, string) {
		code, rep, err := healthhttptest.Fetch(base + healthhttp.Path)
		return err == nil && code == http.StatusOK && rep.Status == healthhttp.StatusUp && rowCount(emu.httpURL(), chaosTable) > 40,
			describeHealth(code, rep, err) + "\n" + tail(pipe.out.String(), 10)
	})
	_, metrics := httpGet(base + "/metrics")
	lostBefore := promValue(metrics, "output_connection_lost")

	require.NoError(t, emu.kill9())
	killed := time.Now()
	var health, ready, lost time.Duration
	var lastHealth string
	deadline := killed.Add(10 * time.Second)
	for time.Now().Before(deadline) && (health == 0 || ready == 0 || lost == 0) {
		if health == 0 {
			if code, body := httpGet(base + healthhttp.Path); code == http.StatusServiceUnavailable {
				health, lastHealth = time.Since(killed), body
			}
		}
		if ready == 0 {
			if code, _ := httpGet(base + "/ready"); code == http.StatusServiceUnavailable {
				ready = time.Since(killed)
			}
		}
		if lost == 0 {
			if _, m := httpGet(base + "/metrics"); promValue(m, "output_connection_lost") > lostBefore {
				lost = time.Since(killed)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // down for a while
	require.NoError(t, emu.start(true))
	restarted := time.Now()
	var healed time.Duration
	eventually(t, 60*time.Second, 50*time.Millisecond, "never healthy again after the endpoint came back", func() (bool, string) {
		code, rep, err := healthhttptest.Fetch(base + healthhttp.Path)
		rcode, _ := httpGet(base + "/ready")
		ok := err == nil && code == http.StatusOK && rep.Status == healthhttp.StatusUp && rcode == http.StatusOK
		if ok && healed == 0 {
			healed = time.Since(restarted)
		}
		return ok, fmt.Sprintf("health %s; ready %d\n%s", describeHealth(code, rep, err), rcode, tail(pipe.out.String(), 10))
	})
	waitEveryRow(t, 60*time.Second, "not every row landed", emu.httpURL(), chaosTable, rows, nil, func() string { return "" })
	stored, distinct, dups := rowStats(t, emu.httpURL(), chaosTable)
	faultLine(t, "endpoint killed (kill -9) under 40 rows/s: health 503 after %s, /ready 503 after %s, output_connection_lost after %s; down %s; healthy again %s after restart; rows sent=%d landed=%d distinct=%d dups=%d",
		health.Round(10*time.Millisecond), ready.Round(10*time.Millisecond), lost.Round(10*time.Millisecond), restarted.Sub(killed).Round(100*time.Millisecond), healed.Round(10*time.Millisecond), rows, stored, distinct, dups)
	assert.NotZero(t, health, "health never said 503")
	assert.LessOrEqual(t, health, 2*time.Second, "health reflects the outage within 2 s")
	assert.Contains(t, lastHealth, "no stream connected", "the report names the lost connection")
	assert.NotZero(t, ready, "/ready never said 503")
	assert.LessOrEqual(t, ready, 2*time.Second, "the connection status reflects it within 2 s")
	assert.NotZero(t, lost)
	assert.LessOrEqual(t, lost, 2*time.Second, "output_connection_lost within 2 s")
	assert.Equal(t, rows, distinct, "every row landed")
}

// Acks stall: the streams stay up, zerobus_pending_offsets climbs live as
// batches are written into the stall (not only when a wait starts or ends),
// health says 503 once the oldest rows wait past ack.timeout, and the rows
// land once acks are back.
func TestFaultAckStall(t *testing.T) {
	t.Parallel()
	const ackTimeout = 2 * time.Second
	srv := startEmulator(t, emulator.Faults{}, eventsTable+":"+eventsCols)
	produce, ctx, hs, metrics := startOneStreamRig(t, srv, ackTimeout.String())
	scrape := func() float64 {
		return promValue(metrics(), "zerobus_pending_offsets", `table="`+eventsTable+`"`)
	}
	require.NoError(t, produce(ctx, service.MessageBatch{service.NewMessage([]byte(`{"id":0,"msg":"a"}`))}))

	require.NoError(t, srv.SetFaults(emulator.Faults{AckStall: true}))
	stalled := time.Now()
	results := make(chan error, 20)
	var seen []float64
	for i := 1; i <= 5; i++ {
		batch := service.MessageBatch{}
		for j := 0; j < 10; j++ {
			batch = append(batch, service.NewMessage([]byte(fmt.Sprintf(`{"id":%d,"msg":"s"}`, i*100+j))))
		}
		go func() { results <- produce(ctx, batch) }()
		want := float64(10 * i)
		eventually(t, 5*time.Second, 10*time.Millisecond, "pending offsets did not climb with the stalled batch", func() (bool, string) {
			v := scrape()
			return v >= want, fmt.Sprintf("zerobus_pending_offsets %v, want %v", v, want)
		})
		seen = append(seen, scrape())
	}
	var unhealthy time.Duration
	eventually(t, 15*time.Second, 20*time.Millisecond, "health never said 503 during the stall", func() (bool, string) {
		c, r, err := healthhttptest.Fetch(hs.URL + healthhttp.Path)
		if err == nil && c == http.StatusServiceUnavailable {
			unhealthy = time.Since(stalled)
			return true, ""
		}
		return false, describeHealth(c, r, err)
	})
	require.NoError(t, srv.SetFaults(emulator.Faults{}))
	nacked := 0
	for range 5 {
		if err := <-results; err != nil {
			nacked++ // past ack.timeout: nacked, redelivered by a real input
		}
	}
	faultLine(t, "ack stall: zerobus_pending_offsets while batches queue into the stall=%v; health 503 after %s (ack.timeout %s); batches nacked at ack.timeout=%d of 5",
		seen, unhealthy.Round(10*time.Millisecond), ackTimeout, nacked)
	assert.Equal(t, []float64{10, 20, 30, 40, 50}, seen, "the gauge climbs live")
	assert.GreaterOrEqual(t, unhealthy, ackTimeout, "not before ack.timeout")
	assert.Less(t, unhealthy, ackTimeout+2*time.Second, "soon after ack.timeout")
	eventually(t, 15*time.Second, 50*time.Millisecond, "never healthy after the stall", func() (bool, string) {
		c, r, err := healthhttptest.Fetch(hs.URL + healthhttp.Path)
		return err == nil && c == http.StatusOK, describeHealth(c, r, err)
	})
}

// streamStats is the emulator's counters of table.
func streamStats(t *testing.T, httpURL, table string) emulator.TableStats {
	t.Helper()
	for name, ts := range emulatorStats(t, httpURL).Tables {
		if strings.EqualFold(name, table) {
			return ts
		}
	}
	return emulator.TableStats{}
}

// Transient errors mid-stream (UNAVAILABLE, INTERNAL on a share of the
// batches) and a concurrency cap that refuses new streams while rotations
// force reopens: retried with back-off inside the streams, the service's
// hint honoured (no storm of refused opens), nothing lost.
func TestFaultTransientAndThrottling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, faults string
		atStart      bool // in force from the first open, not mid-stream
	}{
		{"transient", `{"error_rate":{"UNAVAILABLE":0.2,"INTERNAL":0.1}}`, false},
		// The pool wants two streams, the table admits one: the second
		// open is refused RESOURCE_EXHAUSTED and retried after the hint.
		{"throttling", `{"max_streams_per_table":1}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const rows = 1500
			httpURL, grpcURL, _ := startEmulatorProcess(t, "--table", eventsTable+":"+eventsCols)
			if tc.atStart {
				putFaults(t, httpURL, tc.faults)
			}
			pipe, _ := startPipeline(t, writeConfig(t, "INFO", `generate:
  count: 1500
  interval: 4ms
  mapping: 'root = {"id": counter(), "msg": "m"}'`,
				zerobusOutput(grpcURL, httpURL, eventsTable, "batching:\n  count: 25\n  period: 20ms\n")))
			eventually(t, 30*time.Second, 20*time.Millisecond, "rows never started landing", func() (bool, string) {
				n := rowCount(httpURL, eventsTable)
				return n >= 100, fmt.Sprintf("row_count %d\n%s", n, tail(pipe.out.String(), 20))
			})
			before := streamStats(t, httpURL, eventsTable)
			logFrom := len(pipe.out.String())
			if tc.atStart {
				before, logFrom = emulator.TableStats{}, 0
			}
			putFaults(t, httpURL, tc.faults)
			time.Sleep(5 * time.Second) // the fault's duration
			during := streamStats(t, httpURL, eventsTable)
			putFaults(t, httpURL, `{}`)
			cleared := time.Now()
			waitEveryRow(t, 40*time.Second, "not every row landed", httpURL, eventsTable, rows, nil,
				func() string { return tail(pipe.out.String(), 20) })
			all := time.Since(cleared)
			// The last rows may still be in flight when row_count first
			// reaches rows (duplicates count too): settle, then read back.
			time.Sleep(500 * time.Millisecond)
			stored, distinct, dups := rowStats(t, httpURL, eventsTable)
			faultLog := pipe.out.String()[logFrom:]
			opens, rejected := during.StreamsOpened-before.StreamsOpened, during.StreamsRejected-before.StreamsRejected
			faultLine(t, "%s (%s, then 5s more): rows sent=%d landed=%d distinct=%d dups=%d; stream opens during=%d, refused opens=%d; nacked batches=%d; all rows landed %s after clear",
				tc.name, tc.faults, rows, stored, distinct, dups, opens, rejected, countLines(faultLog, "Failed to send message"), all.Round(10*time.Millisecond))
			assert.Equal(t, rows, distinct, "nothing lost")
			assertAtLeastOnce(t, emulatorStats(t, httpURL).Tables[eventsTable], dups)
			assert.LessOrEqual(t, rejected, int64(10), "the service's hint is honoured: no storm of refused opens")
		})
	}
}

// emulatorOn runs the emulator binary on fixed ports and data directory
// (so it can be restarted in place) with extra flags; stop kills it.
func emulatorOn(t *testing.T, httpAddr, grpcAddr, dataDir string, extra ...string) (stop func()) {
	t.Helper()
	args := append([]string{"--http", httpAddr, "--grpc", grpcAddr, "--s3", freeAddr(t), "--data", dataDir, "--log-level", "warn",
		"--table", eventsTable + ":" + eventsCols}, extra...)
	p := startBinary(t, emulatorBinary(t), nil, args...)
	eventually(t, 30*time.Second, 20*time.Millisecond, "emulator did not start", func() (bool, string) {
		out := p.out.String()
		return strings.Contains(out, "Zerobus emulator running"), out
	})
	return func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// OAuth refused (the secret the pipeline holds is not the workspace's):
// backed off 1 s doubling with one explanation naming the credentials,
// healed without a restart once the workspace accepts it. Tokens expiring
// every few seconds mid-run: renewed, nothing lost.
func TestFaultOAuth(t *testing.T) {
	t.Parallel()
	t.Run("refused then accepted", func(t *testing.T) {
		const rows = 200
		httpAddr, grpcAddr, data := freeAddr(t), freeAddr(t), t.TempDir()
		stop := emulatorOn(t, httpAddr, grpcAddr, data, "--client-secret", "the-right-one")
		out := fmt.Sprintf("zerobus:\n  endpoint: http://%s\n  workspace_url: http://%s\n  table: %s\n  client_id: %s\n  client_secret: rotated-secret\n",
			grpcAddr, httpAddr, eventsTable, emulator.DefaultClientID)
		pipe, _ := startPipeline(t, writeConfig(t, "DEBUG", `generate:
  count: 200
  interval: 10ms
  mapping: 'root = {"id": counter(), "msg": "m"}'`, out))
		eventually(t, 30*time.Second, 20*time.Millisecond, "the refusal was never reported", func() (bool, string) {
			s := pipe.out.String()
			return strings.Contains(s, "Failed to connect"), tail(s, 20)
		})
		time.Sleep(8 * time.Second)
		logs := pipe.out.String()
		attempts := 1 + countLines(logs, "still failing")
		engineLines := countLines(logs, "Failed to connect")
		explained := countLines(logs, "What to do", "client_secret")
		stop()
		emulatorOn(t, httpAddr, grpcAddr, data, "--client-secret", "rotated-secret")
		fixed := time.Now()
		waitEveryRow(t, 40*time.Second, "never healed once the secret was accepted", "http://"+httpAddr, eventsTable, rows, nil,
			func() string { return tail(pipe.out.String(), 20) })
		healed := time.Since(fixed)
		_, distinct, dups := rowStats(t, "http://"+httpAddr, eventsTable)
		faultLine(t, "OAuth refused (invalid_client) for 8s: connect attempts=%d; explanations naming client_secret=%d; engine 'Failed to connect' lines=%d; all %d rows landed %s after the workspace accepted the secret (distinct=%d dups=%d)",
			attempts, explained, engineLines, rows, healed.Round(10*time.Millisecond), distinct, dups)
		assert.LessOrEqual(t, attempts, 6, "backed off, not retried every second:\n%s", tail(logs, 20))
		assert.Equal(t, 1, engineLines, "the engine's error line once per cause, not at each back-off step:\n%s", tail(logs, 20))
		assert.Equal(t, 1, explained, "one explanation naming the credentials:\n%s", tail(logs, 20))
		assert.Equal(t, rows, distinct)
		assert.Less(t, healed, 20*time.Second, "healed within one back-off step")
	})
	t.Run("tokens expire mid-run", func(t *testing.T) {
		const rows = 1000
		httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
		emulatorOn(t, httpAddr, grpcAddr, t.TempDir(), "--token-ttl", "3s")
		pipe, _ := startPipeline(t, writeConfig(t, "INFO", `generate:
  count: 1000
  interval: 10ms
  mapping: 'root = {"id": counter(), "msg": "m"}'`, zerobusOutput("http://"+grpcAddr, "http://"+httpAddr, eventsTable, "batching:\n  count: 20\n  period: 20ms\n")))
		began := time.Now()
		waitEveryRow(t, 45*time.Second, "not every row landed", "http://"+httpAddr, eventsTable, rows, nil,
			func() string { return tail(pipe.out.String(), 20) })
		_, distinct, dups := rowStats(t, "http://"+httpAddr, eventsTable)
		st := emulatorStats(t, "http://"+httpAddr)
		faultLine(t, "tokens expiring every 3s: %d rows over %s, distinct=%d dups=%d, tokens issued=%d, refused=%d, nacked batches=%d",
			rows, time.Since(began).Round(100*time.Millisecond), distinct, dups, st.TokensIssued, st.TokenFailures, countLines(pipe.out.String(), "Failed to send message"))
		assert.Equal(t, rows, distinct)
		assert.Zero(t, countLines(pipe.out.String(), "Failed to send message"), "no batch failed for an expired token")
	})
}
