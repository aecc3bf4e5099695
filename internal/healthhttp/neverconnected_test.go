package healthhttp

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog/catalogfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/tablewriter"
)

// An output that never connected and whose open failed is down (503)
// within 2 s of the failure, naming the cause; before its first attempt
// ends it is only "not opened yet" (degraded, 200).
func TestNeverConnectedOutputIsDownWithTheCause(t *testing.T) {
	const table = "main.default.t"
	cat := catalogfake.New()
	cat.Put(table, "id BIGINT", nil)
	unresolved := &ingest.Error{Class: ingest.Transient, Code: codes.Unavailable, Err: &ingest.NetCause{
		Field: ingest.FieldEndpoint, Host: "123.zerobus.nope.invalid", Kind: ingest.NetUnresolved,
		Err: errors.New("rpc error: code = Unavailable desc = name resolver error: produced zero addresses")}}
	opener := ingestfake.NewOpener(ingestfake.Config{})
	opener.SetOpenHook(func(context.Context, int, string, *arrow.Schema) error { return unresolved })
	pc := pool.DefaultConfig()
	pc.MinStreams, pc.MaxStreams = 2, 2
	w := tablewriter.New(tablewriter.Config{Table: table, Pool: pc}, opener, cat, nil, nil)
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	reg := NewRegistry()
	reg.Add("zb", Output{Health: func() []Table { return Tables(table, &tablewriter.Engine{Writer: w}) }})

	code, rep := get(t, reg, Path)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, StatusDegraded, rep.Status)
	assert.Equal(t, "not opened yet", rep.Outputs[0].Tables[0].Reason)

	begun := time.Now()
	require.Error(t, w.Open(context.Background()))
	failed := time.Now()
	assert.Less(t, failed.Sub(begun), 5*time.Second, "the open fails as soon as every stream tried, not after the connect timeout")
	var down time.Duration
	for time.Since(failed) < 5*time.Second {
		if code, rep = get(t, reg, Path); code == http.StatusServiceUnavailable {
			down = time.Since(failed)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NotZero(t, down, "never down: %+v", rep)
	assert.LessOrEqual(t, down, 2*time.Second, "down within 2 s of the failure")
	assert.Equal(t, StatusDown, rep.Status)
	problems := strings.Join(rep.Outputs[0].Problems, "\n")
	assert.Contains(t, problems, "endpoint host 123.zerobus.nope.invalid does not resolve", "the cause is named")
	assert.Contains(t, rep.Outputs[0].Tables[0].Reason, "no stream was ever connected")
	assert.NotContains(t, problems, "not opened yet")
}
