package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

// One pipeline routes generated rows by a metadata field into three tables
// it provisions; each table holds exactly its rows.
func TestRoutingIntoThreeProvisionedTables(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{})
	const n = 300
	b := service.NewStreamBuilder()
	require.NoError(t, b.SetLoggerYAML("level: warn"))
	require.NoError(t, b.AddInputYAML(fmt.Sprintf(`generate:
  count: %d
  interval: ""
  batch_size: 50
  mapping: |
    root.id = counter() - 1
    root.msg = "row " + (counter() - 1).string()
    meta region = ["eu", "us", "ap"].index((counter() - 1) %% 3)
`, n)))
	require.NoError(t, b.AddOutputYAML(outputYAML(srv, `main.routed.events_${! meta("region") }`, "catalog:\n  provision: true\n  warehouse_id: wh-e2e\n")))
	s, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, s.Run(ctx), "the pipeline ends when generate is done")

	regions := []string{"eu", "us", "ap"}
	total := 0
	for r, region := range regions {
		table := "main.routed.events_" + region
		rows := rowsByID(t, srv, table)
		total += len(rows)
		for id := range rows {
			assert.Equal(t, r, int(id)%3, "row %d is in %s", id, table)
		}
		assert.Len(t, rows, n/3, "table %s holds exactly its rows", table)
	}
	assert.Equal(t, n, total)
}

// With a dead_letter table, an HTTP gateway request with a good and a bad
// row lands the good row, dead-letters the bad one with its error, and is
// answered 200 once: a client retrying until 200 duplicates nothing.
func TestDeadLetterTableGatewayAnswers200Once(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{}, eventsTable+":"+eventsCols)
	addr := freeAddr(t)
	b := service.NewStreamBuilder()
	require.NoError(t, b.SetLoggerYAML("level: warn"))
	require.NoError(t, b.AddInputYAML(fmt.Sprintf(`http_server:
  address: %s
  path: /ingest
  sync_response:
    status: "200"
processors:
  - unarchive:
      format: json_array
`, addr)))
	require.NoError(t, b.AddOutputYAML(outputYAML(srv, eventsTable, "batching:\n  count: 0\ndead_letter:\n  table: main.default.events_dlq\ncatalog:\n  provision: true\n  warehouse_id: wh-e2e\n")))
	_, stop := startStream(t, b)
	defer func() { _ = stop() }()

	body := `[{"id":1,"msg":"good"},{"id":"two","msg":"bad id"}]`
	var resp *http.Response
	require.Eventually(t, func() bool {
		r, err := http.Post("http://"+addr+"/ingest", "application/json", bytes.NewBufferString(body))
		if err != nil {
			return false
		}
		resp = r
		return true
	}, 10*time.Second, 50*time.Millisecond)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "one request, answered 200")

	rows := rowsByID(t, srv, eventsTable)
	assert.Len(t, rows, 1)
	assert.Contains(t, rows, int64(1))
	dl, err := srv.TableRows("main.default.events_dlq", 0)
	require.NoError(t, err)
	require.Len(t, dl, 1)
	assert.Equal(t, eventsTable, dl[0]["source_table"])
	assert.Equal(t, "id", dl[0]["column_name"])
	idx, _ := asInt64(dl[0]["message_index"])
	assert.Equal(t, int64(1), idx)
	var payload map[string]any
	require.NoError(t, json.Unmarshal([]byte(fmt.Sprint(dl[0]["payload"])), &payload))
	assert.Equal(t, "two", payload["id"])
	assert.True(t, strings.Contains(fmt.Sprint(dl[0]["error"]), "BIGINT"), "the error says why: %v", dl[0]["error"])
}
