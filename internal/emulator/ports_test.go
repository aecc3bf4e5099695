package emulator

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBusyPortNamesEndpointAndFlag holds one port and starts an emulator
// with each listener on it in turn: Start fails naming the endpoint, the
// flag and the address, and says how to get a free port.
func TestBusyPortNamesEndpointAndFlag(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer held.Close()
	busy := held.Addr().String()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"http", Config{HTTPAddr: busy, GRPCAddr: "127.0.0.1:0"}, "workspace HTTP port " + busy + " (--http) is already in use"},
		{"grpc", Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: busy}, "Zerobus gRPC port " + busy + " (--grpc) is already in use"},
		{"s3", Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", S3Addr: busy}, "S3 storage port " + busy + " (--s3) is already in use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir = t.TempDir()
			srv, err := Start(tc.cfg)
			if srv != nil {
				srv.Close()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "127.0.0.1:0 picks a free port")
		})
	}
}

// TestHealthAndAddrFileReportChosenPorts starts two emulators side by side on
// ":0" addresses, S3 at its default: each reports the ports it picked, and
// they differ.
func TestHealthAndAddrFileReportChosenPorts(t *testing.T) {
	var seen []Addresses
	for i := 0; i < 2; i++ {
		srv, err := Start(Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", S3Addr: DefaultS3Addr, DataDir: t.TempDir()})
		require.NoError(t, err)
		t.Cleanup(func() { srv.Close() })

		resp, err := http.Get(srv.HTTPURL() + "/emulator/v1/health")
		require.NoError(t, err)
		var body struct {
			Status    string    `json:"status"`
			Addresses Addresses `json:"addresses"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "ok", body.Status)
		assert.Equal(t, srv.Addresses(), body.Addresses)
		assert.NotContains(t, body.Addresses.S3, ":0", "a real port, not the :0 asked for")

		path := filepath.Join(t.TempDir(), "addr.env")
		require.NoError(t, srv.WriteAddrFile(path))
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, "DATABRICKS_HOST="+srv.HTTPURL()+"\nZEROBUS_ENDPOINT="+srv.GRPCURL()+"\nZEROBUS_EMULATOR_S3="+srv.S3URL()+"\n", string(raw))
		seen = append(seen, body.Addresses)
	}
	assert.NotEqual(t, seen[0].S3, seen[1].S3)
}
