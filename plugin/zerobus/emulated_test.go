package zerobus

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

// emulated is the output over the in-process emulator, with the production
// clients (the real ingest client and Unity Catalog backend) on loopback.
type emulated struct {
	srv  *emulator.Server
	out  *output
	yaml string // the output's config
}

// startEmulated starts an emulator holding tables ("cat.sch.tbl:col TYPE,
// …") and an output writing table on it with extraYAML knobs, connected.
func startEmulated(t *testing.T, table, extraYAML string, tables ...string) *emulated {
	t.Helper()
	srv, err := emulator.Start(emulator.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(), Tables: tables})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return &emulated{srv: srv, out: connectOutput(t, srv, table, extraYAML), yaml: outputYAMLOn(srv, table, extraYAML)}
}

// connectOutput is a connected output writing table on srv with extraYAML
// knobs, closed when the test ends.
func connectOutput(t *testing.T, srv *emulator.Server, table, extraYAML string) *output {
	t.Helper()
	cfg, err := parseYAML(t, outputYAMLOn(srv, table, extraYAML))
	require.NoError(t, err)
	o, err := newOutput(cfg, service.MockResources(), deps{})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = o.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(t, o.Connect(ctx))
	return o
}

// rows reads back table's stored rows (none while it does not exist).
func (e *emulated) rows(t *testing.T, table string) []map[string]any {
	t.Helper()
	if _, ok := e.srv.Registry().Get(table); !ok {
		return nil
	}
	rows, err := e.srv.TableRows(table, 0)
	require.NoError(t, err)
	return rows
}

// write writes batch and returns the indices it failed (nil: acknowledged
// whole); an error that is not a batch error (a nack of the whole batch)
// fails the test, as it would send the good rows again.
func (e *emulated) write(t *testing.T, batch service.MessageBatch) map[int]error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idx := batch.Index()
	err := e.out.WriteBatch(ctx, batch)
	if err == nil {
		return nil
	}
	var berr *service.BatchError
	require.True(t, errors.As(err, &berr), "a whole-batch error re-sends the good rows: %v", err)
	failed := map[int]error{}
	berr.WalkMessagesIndexedBy(idx, func(i int, _ *service.Message, err error) bool {
		if err != nil {
			failed[i] = err
		}
		return true
	})
	return failed
}

// outputYAMLOn is the config of an output writing table on srv.
func outputYAMLOn(srv *emulator.Server, table, extraYAML string) string {
	return fmt.Sprintf("endpoint: %s\nworkspace_url: %s\ntable: %s\nclient_id: %s\nclient_secret: %s\n%s",
		srv.GRPCURL(), srv.HTTPURL(), table, emulator.DefaultClientID, emulator.DefaultClientSecret, extraYAML)
}
