// Package zbpb holds the generated protobuf and gRPC code for the Zerobus
// record path (/databricks.zerobus.Zerobus/EphemeralStream). The client in
// internal/zerobus and the emulator's server side both use it.
package zbpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative zerobus.proto
