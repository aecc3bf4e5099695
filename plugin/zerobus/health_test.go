package zerobus

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp"
	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp/healthhttptest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/tablewriter"
)

// With an interpolated table, a batch whose every table's streams stopped
// is ErrNotConnected (the engine then reports the output disconnected), and
// Connect reopens the writers the router holds.
func TestRoutedStoppedStreamsReportNotConnected(t *testing.T) {
	y := strings.Replace(minimalYAML, "table: main.default.events", `table: main.default.${! this.t }`, 1)
	cfg, err := parseYAML(t, y)
	require.NoError(t, err)
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, "", nil)
	h.cat.Put("main.default.a", "t STRING, msg STRING", nil)
	o, err := newOutput(cfg, service.MockResources(), deps{opener: h.opener, catalog: h.cat})
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, o.Connect(ctx))
	require.NoError(t, o.WriteBatch(ctx, msgs(`{"t":"a","msg":"1"}`)))
	for _, s := range h.opener.Streams() {
		s.Poison(&ingest.Error{Class: ingest.FatalConfig, Err: errors.New("PERMISSION_DENIED")})
	}
	require.Eventually(t, func() bool {
		hs := o.eng.Load().Router.Health()
		return len(hs) == 1 && hs[0].State == tablewriter.StateStopped
	}, 10*time.Second, 5*time.Millisecond)
	require.ErrorIs(t, o.WriteBatch(ctx, msgs(`{"t":"a","msg":"2"}`)), service.ErrNotConnected)
	err = o.Connect(ctx)
	var bo *service.ErrBackOff
	require.ErrorAs(t, err, &bo, "the lifecycle backs off after a permanent failure")
	time.Sleep(bo.Wait) // as the engine does
	require.NoError(t, o.Connect(ctx), "Connect reopens the table's writer")
	assert.Equal(t, tablewriter.StateUp, o.eng.Load().Router.Health()[0].State)
	require.NoError(t, o.WriteBatch(ctx, msgs(`{"t":"a","msg":"2"}`)))
}

// The output adds itself to the health endpoint of its manager under its
// label, and leaves it on Close.
func TestOutputHealthEndpoint(t *testing.T) {
	mux := http.NewServeMux()
	b := service.NewStreamBuilder()
	b.SetHTTPMux(mux)
	require.NoError(t, b.SetLoggerYAML("level: none"))
	// Two zerobus outputs on one server: one endpoint lists both.
	require.NoError(t, b.AddOutputYAML(`
broker:
  outputs:
    - label: first
      zerobus:
        endpoint: http://127.0.0.1:1
        workspace_url: http://127.0.0.1:2
        table: main.default.one
        client_id: id
        client_secret: secret
    - label: second
      zerobus:
        endpoint: http://127.0.0.1:1
        workspace_url: http://127.0.0.1:2
        table: main.default.two
        client_id: id
        client_secret: secret
`))
	_, err := b.AddProducerFunc()
	require.NoError(t, err)
	s, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// stop stops the stream once: at the end of the test, or, after a
	// failed assertion, in the cleanup, so that the outputs do not keep
	// running: they hold a share of the process's soft memory limit other
	// tests read.
	stop := sync.OnceValue(func() error {
		err := s.StopWithin(10 * time.Second)
		cancel()
		<-done
		return err
	})
	t.Cleanup(func() { _ = stop() })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var rep healthhttp.Report
	var last atomic.Value // what the last poll saw (the poller may still run when Eventually gives up)
	if !assert.Eventually(t, func() bool {
		// Until Run has built the outputs nothing is mounted (404): poll
		// without failing the test from the poller.
		code, r, err := healthhttptest.Fetch(srv.URL + healthhttp.Path)
		if err != nil {
			last.Store(err.Error())
			return false
		}
		rep = r
		last.Store(fmt.Sprintf("HTTP %d with %d outputs", code, len(r.Outputs)))
		return code == http.StatusServiceUnavailable && len(r.Outputs) == 2
	}, 10*time.Second, 50*time.Millisecond) {
		t.Fatalf("nothing listens on the endpoints, so both outputs fail to open; yet the endpoint never said 503 with both outputs (last: %v)", last.Load())
	}
	assert.Equal(t, "first", rep.Outputs[0].Label)
	assert.Equal(t, "second", rep.Outputs[1].Label)
	if assert.Len(t, rep.Outputs[0].Tables, 1, "%+v", rep.Outputs[0]) {
		assert.Equal(t, "main.default.one", rep.Outputs[0].Tables[0].Table)
	}
	assert.NotEmpty(t, rep.Outputs[0].Problems)
	require.NoError(t, stop())
	code, rep := healthhttptest.Get(t, srv.URL+healthhttp.Path)
	assert.Equal(t, http.StatusOK, code)
	assert.Empty(t, rep.Outputs, "closed outputs leave the endpoint")
}
