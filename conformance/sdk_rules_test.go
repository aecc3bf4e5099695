package conformance

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

// Scenarios for the emulator's strictness rules that the official SDK
// (native build 1.3.0) can express. Its Arrow API takes only primitive
// column types (ArrowDataType: Boolean … TimestampNanos; no List, Map or
// Struct), so it cannot open a stream with a MAP or VARIANT column at all;
// those rules are covered by the emulator's own tests.

// TestSDKGrantsPermissionDenied: with strict grants and none held, the SDK
// fails at stream creation with the emulator's PERMISSION_DENIED text, which
// names the missing privilege; after the grants, the same run lands its
// rows with no emulator restart.
func TestSDKGrantsPermissionDenied(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{})
	srv.SetGrantsStrict(true)
	res := runNode(t, time.Minute, "sdk_arrow.js", sdkFlags(srv, confSecret, map[string]string{"rows": "10"}))
	if res.OK {
		t.Fatal("official SDK wrote without grants")
	}
	for _, want := range []string{"PERMISSION_DENIED", "USE CATALOG on Catalog 'main'"} {
		if !strings.Contains(res.Error, want) {
			t.Fatalf("SDK error does not carry %q: %q", want, res.Error)
		}
	}
	if ts := tableStats(srv); ts.StreamsOpened != 0 || ts.RowCount != 0 {
		t.Fatalf("a stream opened (%d) or rows landed (%d) without grants", ts.StreamsOpened, ts.RowCount)
	}
	t.Logf("official SDK error without grants (%d tokens asked): %s", srv.Stats().TokensIssued, res.Error)

	if err := srv.UpdateGrants(
		emulator.GrantChange{Principal: confClientID, SecurableType: emulator.SecurableCatalog, FullName: "main", Add: []string{emulator.PrivUseCatalog}},
		emulator.GrantChange{Principal: confClientID, SecurableType: emulator.SecurableSchema, FullName: "main.default", Add: []string{emulator.PrivUseSchema}},
		emulator.GrantChange{Principal: confClientID, SecurableType: emulator.SecurableTable, FullName: confTable, Add: []string{emulator.PrivSelect, emulator.PrivModify}},
	); err != nil {
		t.Fatal(err)
	}
	res = runNode(t, time.Minute, "sdk_arrow.js", sdkFlags(srv, confSecret, map[string]string{"rows": "10"}))
	if !res.OK {
		t.Fatalf("official SDK failed after the grants: %s", res.Error)
	}
	checkRows(t, srv, 10, false)
}

// TestSDKEmptyBatch: the official SDK refuses a 0-row batch itself ("Cannot
// ingest an empty RecordBatch (zero rows)"), so no empty frame reaches the
// wire; the emulator refuses one from any other client (TestEmptyBatchIsRefused).
func TestSDKEmptyBatch(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{})
	good, empty := scenarioBatch(0, 5), scenarioBatch(5, 0)
	defer good.Release()
	defer empty.Release()
	file := filepath.Join(t.TempDir(), "batches.ipc")
	writeIPCFile(t, file, []arrow.RecordBatch{good, empty})
	res := runNode(t, time.Minute, "sdk_arrow.js", sdkFlags(srv, confSecret, map[string]string{"ipc-file": file}))
	if res.OK {
		t.Fatal("official SDK accepted an empty batch")
	}
	if !strings.Contains(res.Error, "empty RecordBatch") {
		t.Fatalf("SDK error does not say the batch is empty: %q", res.Error)
	}
	if st := tableStats(srv); st.BatchesReceived != 1 || st.RowsReceived != 5 {
		t.Fatalf("emulator received %d batches / %d rows, want only the 5-row batch", st.BatchesReceived, st.RowsReceived)
	}
}

// TestSDKNonPrintableTableName: the official SDK sends a table name with a
// tab in x-databricks-zerobus-table-name; the emulator refuses the stream
// INVALID_ARGUMENT naming the byte, and the SDK gives up without opening one.
func TestSDKNonPrintableTableName(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{})
	res := runNode(t, time.Minute, "sdk_arrow.js", sdkFlags(srv, confSecret, map[string]string{
		"rows": "10", "table": strings.Replace(confTable, "t1", "t\t1", 1)}))
	if res.OK {
		t.Fatal("official SDK wrote to a table name with a tab")
	}
	for _, want := range []string{"invalid argument", "non-printable character (byte 0x09"} {
		if !strings.Contains(res.Error, want) {
			t.Fatalf("SDK error does not carry %q: %q", want, res.Error)
		}
	}
	if ts := tableStats(srv); ts.StreamsOpened != 0 {
		t.Fatalf("%d streams opened", ts.StreamsOpened)
	}
}
