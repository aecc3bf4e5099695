// Package arrowipc writes and reads the Arrow IPC Schema message, the
// flatbuffer that FlightData #0 of every Zerobus DoPut call carries in
// data_header, and reads the row count of the RecordBatch messages that
// follow it.
//
// It exists because the Zerobus Flight server expects map columns as
// Map<entries: Struct<keys NOT NULL, values>>, the canonical schema the
// Databricks Arrow Flight server builds from Delta (databricks/zerobus-sdk
// rust/sdk/src/schema.rs, arrow_schema_from_uc_columns; Rust SDK changelog
// v2.0.0), while arrow-go v18 hard-codes entries{key, value} for every map it
// writes and renames map children to key/value when it reads. So:
//
//   - SchemaMessage writes the message itself, with the canonical map names;
//     the record batch messages that follow are still arrow-go's (they carry
//     no names), and arrow-go's readers decode them after this schema.
//   - ReadSchema decodes a Schema message into a Field tree that keeps every
//     child's name, for the emulator to check what the service checks. It is
//     hardened for untrusted input.
//   - RecordBatchRows reads a RecordBatch message's row count without its
//     body, as hardened: the emulator's ack-only mode counts rows with it.
//
// All three follow the Arrow format's Schema.fbs and Message.fbs
// (MetadataVersion V5, little endian); format.go lists the table slots and
// enum values used.
// The flatbuffer tables are written and read by hand with
// github.com/google/flatbuffers/go's Builder, not generated code.
package arrowipc
