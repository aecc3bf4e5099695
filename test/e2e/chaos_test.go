package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The chaos suite runs the built binaries as a user would: the
// zerobus-emulator with faults (stream rotation, injected errors, ack
// stalls, grants revoked then granted, kill -9 and restart on the same
// ports and data directory) and benthos-zerobus running an http_server →
// zerobus pipeline, fed by a client that retries every request until it is
// answered 200. An http_server with sync_response answers 200 only once the
// output acknowledged the rows, i.e. once they are durable in the table, so
// every id that got a 200 must be read back: 0 acked rows missing. Ids
// retried after a timeout may land twice; the duplicate share is reported,
// not bounded (at-least-once).
//
// `make test` runs the short plan; CHAOS_LONG=1 (`make chaos`) the long one.
// CHAOS_LOG=path writes the pipeline's output there after the run.

const (
	chaosTable = "main.default.chaos"
	chaosCols  = "id BIGINT NOT NULL, k STRING"
	// chaosPrincipal is the service principal the pipeline authenticates
	// as (the emulator's default client id); the grants name it.
	chaosPrincipal = "emulator"
	chaosSecret    = "emulator-secret"
)

// chaosPlan is one run's size and faults. Fault times are fractions of the
// ids acknowledged so far, so every fault strikes with traffic flowing
// whatever the machine's speed.
type chaosPlan struct {
	ids           int           // ids 0..ids-1 are posted
	workers       int           // concurrent client requests
	maxPerRequest int           // a request carries 1..maxPerRequest ids (a JSON array)
	deadline      time.Duration // the client gives up after this long
	errorRates    []string      // --error-rate CODE=p
	lifetime      time.Duration // --stream-lifetime (rotation)
	startDenied   bool          // start without MODIFY on the table; grant once refused
	revokeAt      float64       // revoke MODIFY mid-run at this fraction (0: never)
	deniedFor     time.Duration // writes stay refused this long after the refusal was logged
	stallAt       []float64     // ack_stall on at these fractions …
	stallFor      time.Duration // … for this long
	killAt        []float64     // kill -9 the emulator at these fractions …
	downFor       time.Duration // … and restart it after this long
	gateAt        float64       // ids from here on are posted only after the last fault
}

// chaosPlanFromEnv is the short plan (make test: 600 ids, one kill -9, a
// mid-run revoke, one stall, about half a minute) or, with CHAOS_LONG set,
// the long one (make chaos: 20k ids, writes refused from the start, a
// mid-run revoke, two stalls, two kill -9s, a few minutes).
func chaosPlanFromEnv() (string, chaosPlan) {
	if os.Getenv("CHAOS_LONG") == "" {
		return "short", chaosPlan{
			ids:           600,
			workers:       6,
			maxPerRequest: 3,
			deadline:      90 * time.Second,
			errorRates:    []string{"UNAVAILABLE=0.05"},
			lifetime:      3 * time.Second,
			revokeAt:      0.15,
			deniedFor:     time.Second,
			stallAt:       []float64{0.35},
			stallFor:      4 * time.Second,
			killAt:        []float64{0.55},
			downFor:       2 * time.Second,
			gateAt:        0.85,
		}
	}
	return "long", chaosPlan{
		ids:           20000,
		workers:       12,
		maxPerRequest: 8,
		deadline:      6 * time.Minute,
		errorRates:    []string{"UNAVAILABLE=0.03", "INTERNAL=0.01"},
		lifetime:      4 * time.Second,
		startDenied:   true,
		revokeAt:      0.15,
		deniedFor:     4 * time.Second,
		stallAt:       []float64{0.3, 0.6},
		stallFor:      5 * time.Second,
		killAt:        []float64{0.45, 0.75},
		downFor:       4 * time.Second,
		gateAt:        0.9,
	}
}

func TestChaos(t *testing.T) {
	t.Parallel()
	name, plan := chaosPlanFromEnv()
	binaries(t) // built first, so the times below are the run's own
	begin := time.Now()
	emu := newChaosEmulator(t, plan)
	require.NoError(t, emu.start(!plan.startDenied))
	t.Cleanup(emu.stop)

	inAddr := freeAddr(t)
	cfg := filepath.Join(t.TempDir(), "chaos.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
http:
  enabled: false
input:
  http_server:
    address: %s
    path: /post
    allowed_verbs: [ POST ]
    timeout: 3s
    sync_response:
      status: "200"
  processors:
    - unarchive:
        format: json_array
output:
  zerobus:
    endpoint: %s
    workspace_url: %s
    table: %s
    client_id: %s
    client_secret: %s
    batching:
      count: 100
      period: 10ms
logger:
  level: INFO
`, inAddr, emu.grpcURL(), emu.httpURL(), chaosTable, chaosPrincipal, chaosSecret)), 0o600))
	pipe, exited := startPipeline(t, cfg)
	pid := pipe.cmd.Process.Pid
	waitListening(t, inAddr, pipe, exited)

	ctx, cancel := context.WithTimeout(context.Background(), plan.deadline)
	defer cancel()
	cl := &chaosClient{url: "http://" + inAddr + "/post", acked: map[int64]bool{}, retried: map[int64]bool{},
		http: &http.Client{Timeout: 10 * time.Second}}

	// The fault driver: each fault waits for its share of acked ids, then
	// strikes; the last ids are released only when every fault is over, so
	// the pipeline must have healed for the run to finish.
	var faultErr error
	var faultLog []string
	driverDone := make(chan struct{})
	go func() {
		defer close(driverDone)
		faultErr = runFaults(ctx, plan, emu, pipe, cl, &faultLog)
		if faultErr != nil {
			cancel()
		}
	}()
	cl.run(ctx, plan, driverDone)
	<-driverDone
	clientTook := time.Since(cl.began())
	require.NoError(t, faultErr, "fault driver; pipeline output:\n%s", tail(pipe.out.String(), 60))
	for _, f := range faultLog {
		t.Log("fault:", f)
	}

	// Healed with no restart: the pipeline process is the one started above,
	// still running, and it answered every id. (Asserted, not required, so
	// the read-back below reports what is missing either way.)
	running := true
	select {
	case err := <-exited:
		running = false
		t.Errorf("benthos-zerobus (pid %d) exited during the run (%v):\n%s", pid, err, tail(pipe.out.String(), 60))
	default:
		assert.NoError(t, syscall.Kill(pid, 0), "benthos-zerobus (pid %d) is gone", pid)
	}
	acked := cl.ackedIDs()
	assert.Len(t, acked, plan.ids, "every id is answered 200 before the deadline (the pipeline healed from each fault); pipeline output:\n%s", tail(pipe.out.String(), 60))

	// Stop the pipeline the way a user does; it exits cleanly.
	if running {
		require.NoError(t, pipe.cmd.Process.Signal(os.Interrupt))
		select {
		case err := <-exited:
			assert.NoError(t, err, "benthos-zerobus exit:\n%s", tail(pipe.out.String(), 30))
		case <-time.After(30 * time.Second):
			t.Errorf("benthos-zerobus did not stop within 30s of SIGINT:\n%s", tail(pipe.out.String(), 30))
		}
	}

	// Read back through the emulator's API: limit=0 means every row (the
	// default is 1000), and row_count must agree with it.
	rows := readRows(t, emu.httpURL(), chaosTable)
	assert.Equal(t, int64(len(rows)), readTableInfo(t, emu.httpURL(), chaosTable).RowCount, "rows read back vs row_count")
	stored := map[int64]int{}
	for _, r := range rows {
		id, ok := asInt64(r["id"])
		require.True(t, ok, "row without an integer id: %v", r)
		assert.Equal(t, fmt.Sprintf("c-%d", id), r["k"], "row %d stored intact", id)
		stored[id]++
	}
	var missing []int64
	for id := range acked {
		if stored[id] == 0 {
			missing = append(missing, id)
		}
	}
	sort.Slice(missing, func(i, j int) bool { return missing[i] < missing[j] })
	dups := len(rows) - len(stored)
	// A duplicate of an id the client posted once was redelivered inside
	// the pipeline (a batch the emulator stored but whose ack was lost to
	// a kill, a rotation or an injected error); the others may also be the
	// client's own retries after a timeout.
	internalDups := 0
	cl.mu.Lock()
	for id, n := range stored {
		if n > 1 && !cl.retried[id] {
			internalDups += n - 1
		}
	}
	cl.mu.Unlock()
	share := 0.0
	if len(rows) > 0 {
		share = 100 * float64(dups) / float64(len(rows))
	}
	line := fmt.Sprintf("chaos: plan=%s ids=%d acked=%d stored_rows=%d distinct=%d missing=%d duplicates=%d (%.2f%%, %d of ids posted once) emulator_restarts=%d pipeline_pid=%d (same process throughout) requests=%d refused=%d client_took=%s total=%s (emulator start to read-back)",
		name, plan.ids, len(acked), len(rows), len(stored), len(missing), dups, share, internalDups, emu.restarts, pid,
		cl.requests.Load(), cl.refused.Load(), clientTook.Round(100*time.Millisecond), time.Since(begin).Round(100*time.Millisecond))
	t.Log(line)
	fmt.Println(line)
	if path := os.Getenv("CHAOS_LOG"); path != "" { // the pipeline's output, to read after the run
		assert.NoError(t, os.WriteFile(path, []byte(pipe.out.String()), 0o600))
	}
	assert.Zero(t, len(missing), "acked ids missing from the table (first 20 shown): %v", head(missing, 20))
	assert.Equal(t, len(plan.killAt), emu.restarts, "every kill -9 was followed by a restart")
	for id := range stored {
		assert.True(t, id >= 0 && id < int64(plan.ids), "stored id %d was never posted", id)
	}
}

// runFaults strikes the plan's faults in order of their fractions.
func runFaults(ctx context.Context, plan chaosPlan, emu *chaosEmulator, pipe *proc, cl *chaosClient, log *[]string) error {
	type fault struct {
		at   float64
		name string
		do   func() error
	}
	note := func(format string, args ...any) {
		*log = append(*log, fmt.Sprintf("%6.1fs acked=%d ", time.Since(cl.began()).Seconds(), cl.count.Load())+fmt.Sprintf(format, args...))
	}
	var faults []fault
	if plan.startDenied {
		faults = append(faults, fault{0, "start denied", func() error {
			// The emulator started without MODIFY on the table: the
			// pipeline's first open is refused. Grant once it said so.
			line, err := waitDenied(ctx, pipe, 0)
			if err != nil {
				return fmt.Errorf("started without MODIFY: %w", err)
			}
			note("refused at start, logged: %s", line)
			time.Sleep(plan.deniedFor)
			if err := emu.setModify(true); err != nil {
				return err
			}
			note("MODIFY granted")
			return nil
		}})
	}
	if plan.revokeAt > 0 {
		faults = append(faults, fault{plan.revokeAt, "revoke", func() error {
			from := len(pipe.out.String())
			if err := emu.setModify(false); err != nil {
				return err
			}
			note("MODIFY revoked")
			// Open streams keep writing; the next stream opened (rotation,
			// an injected error) is refused and the pool stops.
			line, err := waitDenied(ctx, pipe, from)
			if err != nil {
				return fmt.Errorf("after revoking MODIFY: %w", err)
			}
			note("refused, logged: %s", line)
			time.Sleep(plan.deniedFor)
			if err := emu.setModify(true); err != nil {
				return err
			}
			note("MODIFY granted")
			return nil
		}})
	}
	for _, at := range plan.stallAt {
		faults = append(faults, fault{at, "ack stall", func() error {
			if err := emu.setAckStall(true); err != nil {
				return err
			}
			note("ack_stall on")
			time.Sleep(plan.stallFor)
			if err := emu.setAckStall(false); err != nil {
				return err
			}
			note("ack_stall off")
			return nil
		}})
	}
	for _, at := range plan.killAt {
		faults = append(faults, fault{at, "kill -9", func() error {
			if err := emu.kill9(); err != nil {
				return err
			}
			note("emulator killed (SIGKILL)")
			time.Sleep(plan.downFor)
			if err := emu.start(true); err != nil {
				return err
			}
			note("emulator restarted on the same ports and data")
			return nil
		}})
	}
	sort.SliceStable(faults, func(i, j int) bool { return faults[i].at < faults[j].at })
	for _, f := range faults {
		want := int64(f.at * float64(plan.ids))
		for cl.count.Load() < want {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s at %.0f%%: only %d of %d ids acked before the deadline", f.name, 100*f.at, cl.count.Load(), want)
			case <-time.After(20 * time.Millisecond):
			}
		}
		if err := f.do(); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	return nil
}

// waitDenied waits (up to 30s) for a line of the pipeline's output after
// byte offset from that reports the refused write actionably: it names the
// table, PERMISSION_DENIED and the missing MODIFY privilege.
func waitDenied(ctx context.Context, pipe *proc, from int) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		out := pipe.out.String()
		for _, l := range strings.Split(out[from:], "\n") {
			if strings.Contains(l, "PERMISSION_DENIED") && strings.Contains(l, chaosTable) && strings.Contains(l, "MODIFY") {
				return strings.TrimSpace(l), nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", fmt.Errorf("no PERMISSION_DENIED line naming %s and MODIFY in the pipeline output within 30s:\n%s", chaosTable, tail(pipe.out.String()[from:], 30))
}

// chaosEmulator is the emulator binary, restartable on the same ports and
// data directory.
type chaosEmulator struct {
	bin                string
	httpAddr, grpcAddr string
	dataDir            string
	plan               chaosPlan
	mu                 sync.Mutex
	p                  *proc
	restarts           int
	starts             int
}

func newChaosEmulator(t *testing.T, plan chaosPlan) *chaosEmulator {
	return &chaosEmulator{bin: emulatorBinary(t), httpAddr: freeAddr(t), grpcAddr: freeAddr(t), dataDir: t.TempDir(), plan: plan}
}

func (e *chaosEmulator) httpURL() string { return "http://" + e.httpAddr }
func (e *chaosEmulator) grpcURL() string { return "http://" + e.grpcAddr }

// start runs the emulator with strict grants: USE CATALOG, USE SCHEMA and
// SELECT always, MODIFY on the table only if modify. Grants live in memory,
// so a restart passes the grants in force.
func (e *chaosEmulator) start(modify bool) error {
	tablePrivs := "SELECT"
	if modify {
		tablePrivs += ",MODIFY"
	}
	args := []string{"--http", e.httpAddr, "--grpc", e.grpcAddr, "--s3", "127.0.0.1:0", "--data", e.dataDir, "--log-level", "warn",
		"--table", chaosTable + ":" + chaosCols,
		"--stream-lifetime", e.plan.lifetime.String(), "--rotation-grace", "1s",
		"--grants", "strict",
		"--grant", chaosPrincipal + ":CATALOG:main:USE CATALOG",
		"--grant", chaosPrincipal + ":SCHEMA:main.default:USE SCHEMA",
		"--grant", chaosPrincipal + ":TABLE:" + chaosTable + ":" + tablePrivs,
	}
	for _, r := range e.plan.errorRates {
		args = append(args, "--error-rate", r)
	}
	cmd := exec.Command(e.bin, args...)
	buf := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start emulator: %w", err)
	}
	p := &proc{cmd: cmd, out: buf}
	e.mu.Lock()
	e.p = p
	if e.starts > 0 {
		e.restarts++
	}
	e.starts++
	e.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(buf.String(), "Zerobus emulator running") {
		if time.Now().After(deadline) {
			return fmt.Errorf("emulator did not start within 30s:\n%s", buf.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// kill9 SIGKILLs the emulator and reaps it.
func (e *chaosEmulator) kill9() error {
	e.mu.Lock()
	p := e.p
	e.mu.Unlock()
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill -9 emulator: %w", err)
	}
	_ = p.cmd.Wait()
	return nil
}

// stop interrupts the running emulator at the end of the test.
func (e *chaosEmulator) stop() {
	e.mu.Lock()
	p := e.p
	e.mu.Unlock()
	if p == nil || p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// setModify grants or revokes MODIFY on the table through the grants
// admin endpoint.
func (e *chaosEmulator) setModify(grant bool) error {
	change := map[string]any{"principal": chaosPrincipal, "securable_type": "TABLE", "full_name": chaosTable}
	if grant {
		change["add"] = []string{"MODIFY"}
	} else {
		change["remove"] = []string{"MODIFY"}
	}
	body, _ := json.Marshal(map[string]any{"changes": []any{change}})
	_, err := e.admin(http.MethodPatch, "/emulator/v1/grants", body)
	return err
}

// setAckStall toggles ack_stall, keeping the other faults: PUT replaces the
// whole fault set, so it starts from GET.
func (e *chaosEmulator) setAckStall(on bool) error {
	cur, err := e.admin(http.MethodGet, "/emulator/v1/faults", nil)
	if err != nil {
		return err
	}
	var f map[string]any
	if err := json.Unmarshal(cur, &f); err != nil {
		return fmt.Errorf("faults: %w", err)
	}
	f["ack_stall"] = on
	body, _ := json.Marshal(f)
	_, err = e.admin(http.MethodPut, "/emulator/v1/faults", body)
	return err
}

func (e *chaosEmulator) admin(method, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequest(method, e.httpURL()+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	return b, nil
}

// chaosClient posts ids as JSON arrays and retries each request until it is
// answered 200, recording the ids of every 200.
type chaosClient struct {
	url      string
	http     *http.Client
	started  atomic.Pointer[time.Time]
	count    atomic.Int64 // ids acked
	requests atomic.Int64
	refused  atomic.Int64 // answers other than 200, and transport errors
	mu       sync.Mutex
	acked    map[int64]bool
	retried  map[int64]bool // ids posted more than once
}

func (c *chaosClient) began() time.Time {
	if p := c.started.Load(); p != nil {
		return *p
	}
	return time.Now()
}

// run posts every id, in requests of 1..maxPerRequest ids, with
// plan.workers requests in flight. Requests with ids at or beyond gateAt
// wait for gate. It returns when every request got its 200 or ctx ends.
func (c *chaosClient) run(ctx context.Context, plan chaosPlan, gate <-chan struct{}) {
	now := time.Now()
	c.started.Store(&now)
	work := make(chan []int64)
	go func() {
		defer close(work)
		gated := int64(plan.gateAt * float64(plan.ids))
		for next, n := int64(0), 0; next < int64(plan.ids); n++ {
			size := int64(1 + n%plan.maxPerRequest)
			if next+size > int64(plan.ids) {
				size = int64(plan.ids) - next
			}
			if next+size > gated {
				select {
				case <-gate:
				case <-ctx.Done():
					return
				}
			}
			ids := make([]int64, size)
			for i := range ids {
				ids[i] = next + int64(i)
			}
			select {
			case work <- ids:
			case <-ctx.Done():
				return
			}
			next += size
		}
	}()
	var wg sync.WaitGroup
	for range plan.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ids := range work {
				if !c.postUntil200(ctx, ids) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// postUntil200 posts ids until answered 200 (then records them) or ctx
// ends, backing off 50ms doubling to 1s between attempts.
func (c *chaosClient) postUntil200(ctx context.Context, ids []int64) bool {
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"k":"c-%d"}`, id, id)
	}
	b.WriteByte(']')
	body := b.String()
	wait := 50 * time.Millisecond
	for ctx.Err() == nil {
		c.requests.Add(1)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(body))
		if err != nil {
			return false
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.http.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				c.mu.Lock()
				for _, id := range ids {
					c.acked[id] = true
				}
				c.mu.Unlock()
				c.count.Add(int64(len(ids)))
				return true
			}
		}
		c.refused.Add(1)
		c.mu.Lock()
		for _, id := range ids {
			c.retried[id] = true
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
	return false
}

func (c *chaosClient) ackedIDs() map[int64]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int64]bool, len(c.acked))
	for id := range c.acked {
		out[id] = true
	}
	return out
}

// startPipeline runs `benthos-zerobus run cfg`, its output captured. The
// returned channel receives its exit; the test's cleanup interrupts it
// (then kills it) if it still runs.
func startPipeline(t *testing.T, cfg string) (*proc, <-chan error) {
	t.Helper()
	cmd := exec.Command(binary(t), "run", cfg)
	buf := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if syscall.Kill(cmd.Process.Pid, 0) != nil {
			return
		}
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	return &proc{cmd: cmd, out: buf}, exited
}

// waitListening waits until the pipeline's http_server accepts requests.
func waitListening(t *testing.T, addr string, pipe *proc, exited <-chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/not-a-path")
		if err == nil {
			resp.Body.Close()
			return
		}
		select {
		case err := <-exited:
			t.Fatalf("benthos-zerobus exited before its http_server came up (%v):\n%s", err, pipe.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pipeline's http_server on %s did not come up: %v\n%s", addr, err, pipe.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func head(ids []int64, n int) []int64 {
	if len(ids) > n {
		return ids[:n]
	}
	return ids
}
