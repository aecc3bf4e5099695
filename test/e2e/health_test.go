package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
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

// describeHealth says what one poll of the endpoint saw, for the message
// of a poll that never saw what it waited for.
func describeHealth(code int, rep healthhttp.Report, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("HTTP %d: %+v", code, rep)
}

// startOneStreamRig runs a zerobus output labelled zb into eventsTable of
// srv on one stream, without output batching and with the given
// ack.timeout, serving the health endpoint and prometheus metrics: it
// returns the batch producer, the test's server of the engine's HTTP mux,
// and a scrape of /metrics.
func startOneStreamRig(t *testing.T, srv *emulator.Server, ackTimeout string) (produce service.MessageBatchHandlerFunc, ctx context.Context, hs *httptest.Server, scrape func() string) {
	t.Helper()
	mux := http.NewServeMux()
	b := newStream(t, "label: zb\n"+outputYAML(srv, eventsTable, "batching:\n  count: 0\nack:\n  timeout: "+ackTimeout+"\nstreams:\n  min: 1\n  max: 1\n"))
	b.SetHTTPMux(mux)
	require.NoError(t, b.SetMetricsYAML("prometheus: {}"))
	produce, ctx, stop := startProducer(t, b)
	t.Cleanup(func() { _ = stop() })
	hs = httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	scrape = func() string {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	return produce, ctx, hs, scrape
}

// The slow-ack branch, end to end: while the service stops acking, the
// streams stay up, the rows stay pending and their age passes ack.timeout:
// the endpoint says 503 and names the slow ack, the ack-age gauge climbs and
// the lane counts retries, and nothing is poisoned or rebuilt. Acks back,
// it is 200 again.
func TestHealthEndpointSlowAck(t *testing.T) {
	t.Parallel()
	srv := startEmulator(t, emulator.Faults{}, eventsTable+":"+eventsCols)
	produce, ctx, hs, scrape := startOneStreamRig(t, srv, "1s")
	tbl := `table="` + eventsTable + `"`

	require.NoError(t, produce(ctx, service.MessageBatch{service.NewMessage([]byte(`{"id":1,"msg":"a"}`))}))
	code, rep := healthhttptest.Get(t, hs.URL+healthhttp.Path)
	require.Equal(t, http.StatusOK, code, "%+v", rep)
	require.Len(t, rep.Outputs, 1)
	assert.Equal(t, "zb", rep.Outputs[0].Label)
	assert.Equal(t, healthhttp.StatusUp, rep.Status)
	require.Len(t, rep.Outputs[0].Tables, 1, "%+v", rep)
	require.NotEmpty(t, rep.Outputs[0].Tables[0].Streams, "%+v", rep)
	st := rep.Outputs[0].Tables[0].Streams[0]
	assert.Equal(t, "up", st.State)
	require.NotNil(t, st.LastAckAgeSeconds, "a stream that confirmed rows has a last ack")

	require.NoError(t, srv.SetFaults(emulator.Faults{AckStall: true}))
	stalled := make(chan error, 1)
	go func() {
		stalled <- produce(ctx, service.MessageBatch{service.NewMessage([]byte(`{"id":2,"msg":"b"}`))})
	}()
	eventually(t, 15*time.Second, 100*time.Millisecond, "rows pending past ack.timeout never made the endpoint say 503", func() (bool, string) {
		c, r, err := healthhttptest.Fetch(hs.URL + healthhttp.Path)
		if err != nil {
			return false, describeHealth(c, r, err)
		}
		code, rep = c, r
		return code == http.StatusServiceUnavailable, describeHealth(c, r, err)
	})
	require.Len(t, rep.Outputs, 1, "%+v", rep)
	require.Len(t, rep.Outputs[0].Tables, 1, "%+v", rep)
	require.NotEmpty(t, rep.Outputs[0].Tables[0].Streams, "%+v", rep)
	require.NotEmpty(t, rep.Outputs[0].Problems)
	assert.Contains(t, rep.Outputs[0].Problems[0], "durable ack")
	tr := rep.Outputs[0].Tables[0]
	assert.Equal(t, "up", tr.State, "a slow ack is not a failed stream")
	assert.Greater(t, tr.Streams[0].PendingRows, uint64(0))
	assert.Greater(t, tr.OldestPendingAgeSeconds, 1.0)
	require.Error(t, <-stalled, "a batch not durable within ack.timeout is nacked")
	require.Eventually(t, func() bool {
		text := scrape()
		return promValue(text, "zerobus_ack_age_ms", tbl) > 1000 && promValue(text, "zerobus_ack_lane_retry_total", tbl) > 0
	}, 15*time.Second, 100*time.Millisecond, "the ack-age gauge climbs and the lane counts retries")
	text := scrape()
	assert.Zero(t, promValue(text, "zerobus_ack_lane_poisoned_total", tbl), "slow, not poisoned")
	assert.Zero(t, promValue(text, "zerobus_stream_rebuilds_total", tbl))
	assert.Zero(t, promValue(text, "zerobus_stream_state", tbl), "the stream is up")

	require.NoError(t, srv.SetFaults(emulator.Faults{}))
	eventually(t, 15*time.Second, 100*time.Millisecond, "acks back, yet the endpoint never said healthy", func() (bool, string) {
		c, r, err := healthhttptest.Fetch(hs.URL + healthhttp.Path)
		return err == nil && c == http.StatusOK, describeHealth(c, r, err)
	})
	require.NoError(t, produce(ctx, service.MessageBatch{service.NewMessage([]byte(`{"id":3,"msg":"c"}`))}))
}

// The poisoned/stopped branch through the real Benthos CLI and its HTTP
// server: streams that die and may not reopen (grants revoked) make the
// output report not connected (RunningStreamSummary.ConnectionStatuses),
// its streams stopped on /zerobus/health (503) and zerobus_stream_state 2;
// once the grant is back it is connected and healthy again, no restart.
func TestConnectionStatusFollowsStoppedStreams(t *testing.T) {
	t.Parallel()
	p := emulator.DefaultClientID
	all := []emulator.Grant{
		{Principal: p, SecurableType: "CATALOG", FullName: "main", Privileges: []string{"USE CATALOG"}},
		{Principal: p, SecurableType: "SCHEMA", FullName: "main.default", Privileges: []string{"USE SCHEMA"}},
		{Principal: p, SecurableType: "TABLE", FullName: eventsTable, Privileges: []string{"SELECT", "MODIFY"}},
	}
	srv, err := emulator.Start(emulator.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(),
		Tables: []string{eventsTable + ":" + eventsCols},
		Grants: emulator.GrantsConfig{Strict: true, Grants: all},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	addr := freeAddr(t)
	conf := filepath.Join(t.TempDir(), "health.yaml")
	out := strings.ReplaceAll("label: zb\n"+outputYAML(srv, eventsTable, "batching:\n  count: 0\n"), "\n", "\n  ")
	// The CLI arms an os.Exit(1) for shutdown_timeout+1s after every run,
	// even a clean one: in this test process it must never fire.
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(`
shutdown_timeout: 1h
http:
  address: %s
logger:
  level: none
input:
  generate:
    interval: 20ms
    mapping: 'root = {"id": counter(), "msg": "m"}'
output:
  %s
`, addr, out)), 0o600))
	var summary atomic.Pointer[service.RunningStreamSummary]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = service.RunCLIToCode(ctx, service.CLIOptSetArgs("benthos-zerobus", "-c", conf),
			service.CLIOptOnStreamStart(func(s *service.RunningStreamSummary) error {
				summary.Store(s)
				return nil
			}))
	}()
	defer func() {
		// A cancelled context stops the CLI without closing the pipeline
		// (it would keep writing in this process): stop it as a signal
		// does, gracefully. Its handler is installed before the stream
		// starts, so the signal never reaches the test process.
		if summary.Load() != nil {
			_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("the CLI did not stop on SIGINT")
		}
		cancel()
		<-done
	}()
	status := func() (active bool, err error, ok bool) {
		s := summary.Load()
		if s == nil {
			return false, nil, false
		}
		for _, c := range s.ConnectionStatuses() {
			if c.Label() == "zb" {
				return c.Active(), c.Err(), true
			}
		}
		return false, nil, false
	}
	url := "http://" + addr + healthhttp.Path + "?label=zb"
	healthy := func() (bool, string) {
		active, cerr, ok := status()
		if !ok || !active {
			return false, fmt.Sprintf("connection status: known %v, active %v, error %v", ok, active, cerr)
		}
		code, rep, err := healthhttptest.Fetch(url)
		return err == nil && code == http.StatusOK && rep.Status == healthhttp.StatusUp, describeHealth(code, rep, err)
	}
	eventually(t, 30*time.Second, 100*time.Millisecond, "never connected and healthy", healthy)

	// Revoke MODIFY, and kill the streams: their reopens are refused.
	require.NoError(t, srv.UpdateGrants(emulator.GrantChange{Principal: p, SecurableType: "TABLE", FullName: eventsTable, Remove: []string{"MODIFY"}}))
	require.NoError(t, srv.SetFaults(emulator.Faults{ErrorRate: map[string]float64{"INTERNAL": 1}}))
	// The engine marks the output failing with ErrNotConnected when a write
	// says so, then with Connect's error: the refusal, naming the grant.
	eventually(t, 30*time.Second, 100*time.Millisecond, "not connected while the streams are stopped, with the cause: never so", func() (bool, string) {
		active, err, ok := status()
		return ok && !active && err != nil && strings.Contains(err.Error(), "MODIFY"),
			fmt.Sprintf("connection status: known %v, active %v, error %v", ok, active, err)
	})
	eventually(t, 30*time.Second, 100*time.Millisecond, "the endpoint never said 503 with the table stopped", func() (bool, string) {
		code, rep, err := healthhttptest.Fetch(url)
		return err == nil && code == http.StatusServiceUnavailable && len(rep.Outputs) == 1 &&
			len(rep.Outputs[0].Tables) == 1 && rep.Outputs[0].Tables[0].State == "stopped", describeHealth(code, rep, err)
	})

	require.NoError(t, srv.SetFaults(emulator.Faults{}))
	require.NoError(t, srv.UpdateGrants(emulator.GrantChange{Principal: p, SecurableType: "TABLE", FullName: eventsTable, Add: []string{"MODIFY"}}))
	eventually(t, 60*time.Second, 100*time.Millisecond, "never connected and healthy again after the grant", healthy)
}

// The built binary serves /zerobus/health next to /ping on its HTTP server,
// one report listing both zerobus outputs of a fan-out by label.
func TestBinaryServesHealthEndpoint(t *testing.T) {
	t.Parallel()
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--table", eventsTable+":"+eventsCols)
	addr := freeAddr(t)
	zb := func(label string) string {
		return fmt.Sprintf(`
        - label: %s
          zerobus:
            endpoint: %s
            workspace_url: %s
            table: %s
            client_id: %s
            client_secret: %s`, label, grpcURL, httpURL, eventsTable, emulator.DefaultClientID, emulator.DefaultClientSecret)
	}
	conf := filepath.Join(t.TempDir(), "health.yaml")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(`
http:
  address: %s
input:
  generate:
    interval: 20ms
    mapping: 'root = {"id": counter(), "msg": "m"}'
output:
  broker:
    pattern: fan_out
    outputs:%s%s
`, addr, zb("first"), zb("second"))), 0o600))
	p := start(t, nil, "-c", conf)
	var rep healthhttp.Report
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + healthhttp.Path)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		rep = healthhttp.Report{}
		if json.NewDecoder(resp.Body).Decode(&rep) != nil || resp.StatusCode != http.StatusOK || len(rep.Outputs) != 2 {
			return false
		}
		for _, o := range rep.Outputs {
			if o.Status != healthhttp.StatusUp || len(o.Tables) != 1 || len(o.Tables[0].Streams) == 0 || o.Tables[0].Streams[0].LastAckAgeSeconds == nil {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "both outputs up and acking: %+v\n%s", &rep, p.out)
	assert.Equal(t, "first", rep.Outputs[0].Label)
	assert.Equal(t, "second", rep.Outputs[1].Label)
	code, one := healthhttptest.Get(t, "http://"+addr+healthhttp.Path+"?label=second")
	assert.Equal(t, http.StatusOK, code)
	require.Len(t, one.Outputs, 1)
	assert.Equal(t, "second", one.Outputs[0].Label)
	resp, err := http.Get("http://" + addr + "/ping")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the endpoint lives beside /ping")
}
