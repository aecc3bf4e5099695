package tablewriter

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// A row whose encoding alone passes the service's 10 MiB request cap fails
// alone, naming its message index and its largest column, before anything
// is sent; the other rows of its batch land.
func TestOverCapRowFailsAlone(t *testing.T) {
	h := newHarness(t, ingestfake.Config{KeepRecords: true}, nil, nil)
	huge := `{"id":2,"msg":"` + strings.Repeat("x", ingest.MaxRequestBytes+1) + `"}`
	failed := h.write(t, rows(`{"id":1,"msg":"a"}`, huge, `{"id":3,"msg":"c"}`))
	require.Len(t, failed, 1)
	assert.Contains(t, failed[1], "message 1")
	assert.Contains(t, failed[1], `column "msg"`)
	assert.Contains(t, failed[1], "cap")
	ids, _ := submittedColumn(t, h.opener, "id")
	assert.ElementsMatch(t, []string{"1", "3"}, ids, "the good rows landed, the huge one was never sent")
}
