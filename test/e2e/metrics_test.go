package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

// promValue is the value of the series of name whose labels include every
// label in want (`k="v"` pairs), summed over the series that match.
func promValue(text, name string, want ...string) float64 {
	var sum float64
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{([^}]*)\} (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		if hasLabels(m[1], want) {
			v, _ := strconv.ParseFloat(m[2], 64)
			sum += v
		}
	}
	return sum
}

// TestMetricsCountEachFault drives one pipeline through a concurrency
// reject, stream rotations, injected UNAVAILABLE errors and a stream that
// exhausts its reconnect budget (a rebuild), and asserts each counter
// moved, each counting what it is; every per-stream series exists at 0 from
// start-up with {table, stream} labels.
func TestMetricsCountEachFault(t *testing.T) {
	t.Parallel()
	srv := startEmulator(t, emulator.Faults{MaxStreamsPerTable: 1}, eventsTable+":"+eventsCols)
	mux := http.NewServeMux()
	b := newStream(t, outputYAML(srv, eventsTable, "batching:\n  count: 0\n"))
	b.SetHTTPMux(mux)
	require.NoError(t, b.SetMetricsYAML("prometheus: {}"))
	produce, ctx, stop := startProducer(t, b)
	defer func() { _ = stop() }()
	scrape := func() string {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	tbl := `table="` + eventsTable + `"`

	// Start-up: the table admits one stream, the pool wants two.
	produceIDs(t, ctx, produce, 0, 200, 50)
	text := scrape()
	for _, name := range []string{"zerobus_ack_lane_poisoned_total", "zerobus_stream_rebuilds_total", "zerobus_ack_lane_retry_total", "zerobus_concurrency_rejects_total", "zerobus_pending_offsets"} {
		for _, stream := range []string{"0", "1"} {
			assert.True(t, promHas(text, name, tbl, `stream="`+stream+`"`), "%s{stream=%s} exists from start-up", name, stream)
		}
	}
	for _, cause := range []string{"rotation", "transient", "reject"} {
		assert.True(t, promHas(text, "zerobus_stream_reconnects_total", tbl, `stream="0"`, `cause="`+cause+`"`), "reconnects{cause=%s} exists from start-up", cause)
	}
	assert.Greater(t, promValue(text, "zerobus_concurrency_rejects_total", tbl), 0.0, "the refused open is a reject")
	assert.Zero(t, promValue(text, "zerobus_ack_lane_poisoned_total", tbl), "a reject is not a poisoned stream")

	// Rotation and injected UNAVAILABLE: reconnects inside the client.
	require.NoError(t, srv.SetFaults(emulator.Faults{StreamLifetime: 300 * time.Millisecond, RotationGrace: 100 * time.Millisecond,
		ErrorRate: map[string]float64{"UNAVAILABLE": 0.1}}))
	phase := time.Now()
	reconnected := func(cause string) bool {
		return promValue(scrape(), "zerobus_stream_reconnects_total", tbl, `cause="`+cause+`"`) > 0
	}
	next := 200
	for ; next < 2200 && !(reconnected("rotation") && reconnected("transient")); next += 100 {
		produceIDs(t, ctx, produce, next, next+100, 25)
		time.Sleep(50 * time.Millisecond)
	}
	text = scrape()
	assert.Greater(t, promValue(text, "zerobus_stream_reconnects_total", tbl, `cause="rotation"`), 0.0)
	assert.Greater(t, promValue(text, "zerobus_stream_reconnects_total", tbl, `cause="transient"`), 0.0)
	require.NoError(t, srv.SetFaults(emulator.Faults{}))
	t.Logf("rotation and errors: %s", time.Since(phase).Round(time.Millisecond))
	phase = time.Now()

	// The service goes away for longer than a stream's reconnect budget:
	// the stream is poisoned and the pool rebuilds it; once the service is
	// back (same ports, same data) the rows written meanwhile land.
	httpAddr, grpcAddr := strings.TrimPrefix(srv.HTTPURL(), "http://"), strings.TrimPrefix(srv.GRPCURL(), "http://")
	dataDir := srv.DataDir()
	require.NoError(t, srv.Close())
	done := make(chan struct{})
	// On a failure below, the cleanup stops the stream and waits for this
	// producer: it must not outlive the test (a t.Errorf after the test
	// ended panics the whole test binary).
	t.Cleanup(func() { _ = stop(); <-done })
	go func() {
		defer close(done)
		// A batch whose stream died is nacked: an input redelivers it, so
		// this producer sends it again until it is acknowledged.
		var batch service.MessageBatch
		for id := next; id < next+50; id++ {
			batch = append(batch, service.NewMessage([]byte(fmt.Sprintf(`{"id":%d,"msg":"m%d"}`, id, id))))
		}
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
			if produce(ctx, batch.DeepCopy()) == nil {
				return
			}
			if ctx.Err() != nil {
				return // the stream stopped: the rows check below says what is missing
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("the batch written during the outage was never acknowledged")
	}()
	require.Eventually(t, func() bool {
		return promValue(scrape(), "zerobus_stream_rebuilds_total", tbl) > 0
	}, 45*time.Second, 200*time.Millisecond, "a stream out of reconnects is rebuilt")
	t.Logf("rebuild seen after %s", time.Since(phase).Round(time.Millisecond))
	srv2, err := emulator.Start(emulator.Config{HTTPAddr: httpAddr, GRPCAddr: grpcAddr, DataDir: dataDir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv2.Close() })
	<-done
	t.Logf("rows landed %s after the restart", time.Since(phase).Round(time.Millisecond))
	text = scrape()
	assert.Greater(t, promValue(text, "zerobus_ack_lane_poisoned_total", tbl), 0.0, "the stream that exhausted its budget counts as poisoned")
	rows := rowsByID(t, srv2, eventsTable)
	for id := int64(0); id < int64(next+50); id++ {
		require.Contains(t, rows, id, "row %d acknowledged but missing", id)
	}
	require.NoError(t, stop())
}

// promHas reports whether a series of name has every label in want.
func promHas(text, name string, want ...string) bool {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{([^}]*)\} `)
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		if hasLabels(m[1], want) {
			return true
		}
	}
	return false
}

func hasLabels(labels string, want []string) bool {
	for _, w := range want {
		if !regexp.MustCompile(`(^|,)` + regexp.QuoteMeta(w) + `(,|$)`).MatchString(labels) {
			return false
		}
	}
	return true
}
