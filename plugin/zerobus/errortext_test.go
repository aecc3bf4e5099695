package zerobus

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An error about an interpolated table names the table a row resolved to,
// and a long value is quoted to a few hundred bytes with its length.
func TestBatchErrorNamesTheResolvedTableAndBoundsValues(t *testing.T) {
	e := startEmulated(t, "main.default.${! this.t }", "", "main.default.a:t STRING, id BIGINT, d DATE")
	big := strings.Repeat("x", 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := e.out.WriteBatch(ctx, service.MessageBatch{
		service.NewMessage([]byte(`{"t":"a","id":1,"d":"` + big + `"}`)),
		service.NewMessage([]byte(`{"t":"a","id":2}`)),
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "table main.default.a ")
	assert.NotContains(t, err.Error(), "${!")
	assert.Contains(t, err.Error(), "… (1048576 bytes)")
	assert.Less(t, len(err.Error()), 2048)
	assert.Len(t, e.rows(t, "main.default.a"), 1)
}
