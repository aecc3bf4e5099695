// Package zbpb holds the generated protobuf and gRPC code for the Zerobus
// record path (/databricks.zerobus.Zerobus/EphemeralStream), written from
// docs/protocol.md#record-path-ephemeralstream. The emulator serves it (the
// official SDK's JSON path runs against it in conformance/); the client in
// internal/ingest writes the Arrow path only and does not use it.
package zbpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative zerobus.proto
