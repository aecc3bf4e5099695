package arrowconv

import (
	"fmt"
	"strings"
	"testing"
)

// kafkaRowDefs and kafkaRows are the Kafka benchmark's records
// (test/e2e BenchmarkKafka): about 194 bytes of JSON each, for the events
// table.
const kafkaRowDefs = "id BIGINT NOT NULL, msg STRING, level STRING, ts TIMESTAMP"

func kafkaRows(n int) [][]byte {
	rows := make([][]byte, n)
	m := strings.Repeat("m", 128)
	for i := range rows {
		rows[i] = fmt.Appendf(nil, `{"id":%d,"msg":"%s","level":"info","ts":"2026-01-02T03:04:05Z"}`, i, m)
	}
	return rows
}

// BenchmarkConvertKafkaRecord converts batches of the Kafka benchmark's
// records: the converter's share of the output's CPU per row there.
func BenchmarkConvertKafkaRecord(b *testing.B) {
	c := mustConverter(b, kafkaRowDefs, Options{})
	rows := kafkaRows(benchN)
	b.SetBytes(int64(totalLen(rows)))
	benchBatches(b, func() (Result, error) { return c.ConvertJSON(rows) })
}
