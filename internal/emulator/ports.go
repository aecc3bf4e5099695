package emulator

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
)

// listenOn opens one of the emulator's listeners. A failure names the
// endpoint, its flag and the address, and for a port held by another
// process says how to get a free one, so that a script starting the
// emulator (scripts/demo.sh) can show the user the emulator's own words.
func listenOn(what, flag, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln, nil
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("emulator: %s port %s (--%s) is already in use by another process: "+
			"stop it, or pass --%s with another address (127.0.0.1:0 picks a free port; --addr-file reports it): %w",
			what, addr, flag, flag, err)
	}
	return nil, fmt.Errorf("emulator: listen %s %s (--%s): %w", what, addr, flag, err)
}

// Addresses are the URLs of a running emulator's three listeners, as
// served by GET /emulator/v1/health and written by WriteAddrFile.
type Addresses struct {
	HTTP string `json:"http"` // the workspace URL (DATABRICKS_HOST)
	GRPC string `json:"grpc"` // the Zerobus endpoint (ZEROBUS_ENDPOINT)
	S3   string `json:"s3"`   // the S3-compatible storage endpoint
	// Kafka is the embedded Kafka broker's host:port (seed_brokers), empty
	// without --kafka.
	Kafka string `json:"kafka,omitempty"`
	// SchemaRegistry is the embedded Schema Registry's base URL
	// (schema_registry_decode's url), empty without --schema-registry.
	SchemaRegistry string `json:"schema_registry,omitempty"`
}

// Addresses reports the URLs the emulator listens on, with the ports it
// picked for any ":0" address.
func (s *Server) Addresses() Addresses {
	return Addresses{HTTP: s.HTTPURL(), GRPC: s.GRPCURL(), S3: s.S3URL(), Kafka: s.KafkaAddr(), SchemaRegistry: s.SchemaRegistryURL()}
}

// handleHealth is the readiness endpoint: it answers 200 once every
// listener is bound and serving (the HTTP server is the last one started),
// with the addresses.
func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	workspace.WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "addresses": s.Addresses()})
}

// WriteAddrFile writes the emulator's addresses to path as shell variable
// assignments (DATABRICKS_HOST, ZEROBUS_ENDPOINT, ZEROBUS_EMULATOR_S3, and
// with --kafka KAFKA_BROKERS, with --schema-registry SCHEMA_REGISTRY_URL),
// atomically: a reader polling for the file sees it whole or not at all.
func (s *Server) WriteAddrFile(path string) error {
	a := s.Addresses()
	body := fmt.Sprintf("DATABRICKS_HOST=%s\nZEROBUS_ENDPOINT=%s\nZEROBUS_EMULATOR_S3=%s\n", a.HTTP, a.GRPC, a.S3)
	if a.Kafka != "" {
		body += "KAFKA_BROKERS=" + a.Kafka + "\n"
	}
	if a.SchemaRegistry != "" {
		body += "SCHEMA_REGISTRY_URL=" + a.SchemaRegistry + "\n"
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".addr-*")
	if err != nil {
		return fmt.Errorf("emulator: --addr-file: %w", err)
	}
	if _, err := tmp.WriteString(body); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("emulator: --addr-file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("emulator: --addr-file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("emulator: --addr-file: %w", err)
	}
	return nil
}
