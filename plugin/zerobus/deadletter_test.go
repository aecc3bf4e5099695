package zerobus

import (
	"fmt"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	dlTarget = "main.default.events"
	dlTable  = "main.default.events_dlq"
	dlYAML   = "catalog:\n  provision: true\n  warehouse_id: wh\ndead_letter:\n  table: " + dlTable + "\n  include_payload: false\n"
)

// twentyBad is 200 messages of which every tenth (20) has a number for the
// STRING column msg.
func twentyBad() service.MessageBatch {
	batch := make(service.MessageBatch, 200)
	for i := range batch {
		msg := `"ok"`
		if i%10 == 0 {
			msg = "5"
		}
		batch[i] = service.NewMessage([]byte(fmt.Sprintf(`{"id":%d,"msg":%s}`, i, msg)))
	}
	return batch
}

// The dead-letter table the output provisions admits dead letters without
// payloads: 200 rows with 20 bad leave 180 rows in the table and 20 dead
// letters, and the batch is acknowledged whole.
func TestDeadLettersWithoutPayloadUnderProvisioning(t *testing.T) {
	e := startEmulated(t, dlTarget, dlYAML, dlTarget+":id BIGINT NOT NULL, msg STRING")
	require.Empty(t, e.write(t, twentyBad()), "every bad row is dead-lettered")
	assert.Len(t, e.rows(t, dlTarget), 180)
	dead := e.rows(t, dlTable)
	require.Len(t, dead, 20)
	for _, d := range dead {
		assert.Nil(t, d["payload"])
		assert.Equal(t, "msg", d["column_name"])
		assert.Contains(t, d["error"], "STRING")
	}
}

// A dead-letter table that refuses dead letters (made by hand with payload
// NOT NULL) never multiplies the good rows: the bad rows alone fail back to
// the pipeline, every time, and the 180 good rows stay written once.
func TestBrokenDeadLetterTableFailsOnlyBadRows(t *testing.T) {
	e := startEmulated(t, dlTarget, dlYAML, dlTarget+":id BIGINT NOT NULL, msg STRING",
		dlTable+":source_table STRING NOT NULL, message_index INT NOT NULL, column_name STRING NOT NULL, error STRING NOT NULL, payload STRING NOT NULL")
	batch := twentyBad()
	for round := 0; round < 3; round++ {
		failed := e.write(t, batch)
		require.Len(t, failed, 20, "round %d: only the bad rows fail", round)
		for i, err := range failed {
			if round == 0 {
				assert.Zero(t, i%10, "message %d is a good row", i)
			}
			assert.Contains(t, err.Error(), "dead-letter table refused it")
		}
		// Benthos retries only the failed messages.
		var again service.MessageBatch
		for i := range batch {
			if _, ok := failed[i]; ok {
				again = append(again, batch[i])
			}
		}
		batch = again
	}
	assert.Len(t, e.rows(t, dlTarget), 180, "the good rows are written exactly once")
	assert.Empty(t, e.rows(t, dlTable))
}
