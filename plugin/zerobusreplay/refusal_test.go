package zerobusreplay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	icecatalog "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
)

func TestIsRefusal(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{refuse(errors.New("gaps")), true},
		{fmt.Errorf("wrapped: %w", &catalog.PreconditionError{Table: "a.b.c", Unmet: []catalog.Unmet{{Precondition: catalog.PreIcebergReads, Detail: "off"}}}), true},
		{fmt.Errorf("load table: %w", icecatalog.ErrNoSuchTable), false}, // not converted yet
		{fmt.Errorf("load table: %w", rest.ErrForbidden), true},
		{fmt.Errorf("load table: %w", rest.ErrUnauthorized), true},
		{fmt.Errorf("load table: %w", rest.ErrServerError), false},
		{fmt.Errorf("load table: %w", rest.ErrServiceUnavailable), false},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{context.DeadlineExceeded, false},
	} {
		assert.Equal(t, tc.want, isRefusal(tc.err), "%v", tc.err)
	}
}

// An unreachable workspace is not a refusal: Connect returns the error for
// the engine to retry with back-off, and the input does not end.
func TestUnreachableWorkspaceIsRetried(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	cfg, err := parse(t, fmt.Sprintf("workspace_url: http://%s\ntable: main.raw.t\nclient_id: id\nclient_secret: s\nworkspace_timeout: 2s\n", addr))
	require.NoError(t, err)
	in := newInput(cfg, service.MockResources())
	defer in.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before := refusals.Load()
	err = in.Connect(ctx)
	require.Error(t, err)
	assert.NotErrorIs(t, err, service.ErrEndOfInput)
	assert.False(t, isRefusal(err), "%v", err)
	assert.Equal(t, before, refusals.Load())
}

// Without require_primary_raw a table is still refused when it has no
// Iceberg reads: the REST catalog never serves it, so retrying cannot help.
func TestTableWithoutIcebergReadsIsRefused(t *testing.T) {
	_, err := connectTo(t, "main.raw.plain:id BIGINT NOT NULL", "require_primary_raw: false\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "has no Iceberg reads")
	assert.True(t, isRefusal(err))
}
