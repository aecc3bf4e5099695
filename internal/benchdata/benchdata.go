// Package benchdata holds the table and the Avro schema of the events the
// converter, table-writer and whole-process benchmarks share (arrowconv's
// BenchmarkAvroFastPath, tablewriter's BenchmarkWriteAvroFastPath,
// test/e2e's BenchmarkKafkaAvro), so that their numbers are of the same
// rows. Only benchmarks import it.
package benchdata

// EventColumns are the events' table: the kinds a Kafka topic carries.
const EventColumns = "id BIGINT NOT NULL, user_id STRING, event STRING, amount DECIMAL(12,2), price DOUBLE, " +
	"qty INT, ok BOOLEAN, ts TIMESTAMP, tags ARRAY<STRING>, attrs MAP<STRING, STRING>"

// EventAvroSchema is EventColumns as a registry Avro schema.
const EventAvroSchema = `{"type":"record","name":"Event","fields":[
 {"name":"id","type":"long"},
 {"name":"user_id","type":["null","string"]},
 {"name":"event","type":["null","string"]},
 {"name":"amount","type":["null",{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}]},
 {"name":"price","type":["null","double"]},
 {"name":"qty","type":["null","int"]},
 {"name":"ok","type":["null","boolean"]},
 {"name":"ts","type":["null",{"type":"long","logicalType":"timestamp-micros"}]},
 {"name":"tags","type":["null",{"type":"array","items":"string"}]},
 {"name":"attrs","type":["null",{"type":"map","values":"string"}]}]}`
