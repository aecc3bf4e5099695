package conformance

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
)

// Scenarios for the emulator's strictness rules that the official SDK
// (native build 1.3.0) can express. Its Arrow API takes only primitive
// column types (ArrowDataType: Boolean … TimestampNanos; no List, Map or
// Struct), so it cannot open a stream with a MAP or VARIANT column at all;
// those rules (list item names, nested VARIANTs, NOT NULL struct fields) are
// covered by the emulator's own tests. docs/real-workspace.md §9 lists every
// rule with its source.

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
	empty := scenarioBatch(5, 0)
	defer empty.Release()
	sdkRefusesAfterGoodBatch(t, empty, "an empty batch", "empty RecordBatch")
}

// sdkRefusesAfterGoodBatch runs the official SDK's Arrow stream over a good
// 5-row batch followed by bad, and asserts that the SDK fails with an error
// containing want (what names the bad batch) and that only the good batch
// reached the emulator: the SDK refused bad before sending it.
func sdkRefusesAfterGoodBatch(t *testing.T, bad arrow.RecordBatch, what, want string) {
	t.Helper()
	srv := startEmulator(t, emulator.Faults{})
	good := scenarioBatch(0, 5)
	defer good.Release()
	file := filepath.Join(t.TempDir(), "batches.ipc")
	writeIPCFile(t, file, []arrow.RecordBatch{good, bad})
	res := runNode(t, time.Minute, "sdk_arrow.js", sdkFlags(srv, confSecret, map[string]string{"ipc-file": file}))
	if res.OK {
		t.Fatalf("official SDK accepted %s", what)
	}
	if !strings.Contains(res.Error, want) {
		t.Fatalf("SDK error on %s does not carry %q: %q", what, want, res.Error)
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

// TestSDKEmptyJSONBatch: the official SDK's record path sends nothing for an
// empty record list (ingestRecordsOffset([]) resolves without an offset), so
// no empty ingest_record_batch reaches the wire; the emulator refuses one
// from any other client (TestEphemeralEmptyBatchIsRefused), as it refuses an
// empty Arrow batch.
func TestSDKEmptyJSONBatch(t *testing.T) {
	srv := startEmulator(t, emulator.Faults{})
	res := runNode(t, time.Minute, "sdk_json.js", sdkFlags(srv, confSecret, map[string]string{
		"rows": "10", "batch-size": "5", "empty-batch-first": "true"}))
	if !res.OK {
		t.Fatalf("official SDK failed: %s", res.Error)
	}
	if got := strings.TrimSpace(string(res.EmptyBatchResult)); got != "null" && got != `"undefined"` {
		t.Fatalf("ingestRecordsOffset([]) returned %s, want no offset", got)
	} else {
		t.Logf("ingestRecordsOffset([]) returned %s", got)
	}
	if st := tableStats(srv); st.BatchesReceived != 2 || st.RowsReceived != 10 {
		t.Fatalf("emulator received %d batches / %d rows, want the 2 non-empty ones (10 rows)", st.BatchesReceived, st.RowsReceived)
	}
	checkRows(t, srv, 10, false)
}

// TestSDKNullInNotNullColumn: a batch with a null in the NOT NULL column id
// fails in the official SDK with arrow-rs's text ("Column 'id' is declared
// as non-nullable but contains null values"), which the emulator's refusal
// of such a batch from any other client carries too
// (TestNullsInNotNullColumnsAreRefused). The SDK refuses it while decoding
// the batch, before sending: only the good batch reaches the wire.
func TestSDKNullInNotNullColumn(t *testing.T) {
	b := array.NewRecordBuilder(memory.DefaultAllocator, scenarioSchema)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{5, 0}, []bool{true, false})
	b.Field(1).AppendNulls(2)
	b.Field(2).AppendNulls(2)
	b.Field(3).AppendNulls(2)
	bad := b.NewRecordBatch()
	defer bad.Release()
	sdkRefusesAfterGoodBatch(t, bad, "a null in a NOT NULL column", "'id' is declared as non-nullable but contains null values")
}

// TestSDKWideTable: the official SDK opens an Arrow stream on a table of
// 2,001 primitive columns and the emulator takes its rows (no column-count
// limit; the 2,000-column limit of the Public Preview docs is about protobuf
// schemas, see serviceSchema in internal/emulator).
func TestSDKWideTable(t *testing.T) {
	const table = "main.default.wide"
	cols := []string{"id BIGINT NOT NULL"}
	fields := []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}
	for i := 0; i < 2000; i++ {
		cols = append(cols, fmt.Sprintf("c%d INT", i))
		fields = append(fields, arrow.Field{Name: fmt.Sprintf("c%d", i), Type: arrow.PrimitiveTypes.Int32, Nullable: true})
	}
	srv := startEmulator(t, emulator.Faults{}, table+":"+strings.Join(cols, ", "))
	schema := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for row := 0; row < 3; row++ {
		b.Field(0).(*array.Int64Builder).Append(int64(row))
		for i := 1; i < len(fields); i++ {
			b.Field(i).(*array.Int32Builder).Append(int32(i + row))
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	file := filepath.Join(t.TempDir(), "wide.ipc")
	writeIPCFile(t, file, []arrow.RecordBatch{rec})
	res := runNode(t, 2*time.Minute, "sdk_arrow.js", sdkFlags(srv, confSecret, map[string]string{"ipc-file": file, "table": table}))
	if !res.OK {
		t.Fatalf("official SDK failed on a 2,001-column table: %s", res.Error)
	}
	if st := srv.Stats().Tables[table]; st.StreamsOpened != 1 || st.RowsReceived != 3 {
		t.Fatalf("emulator: %d streams, %d rows received; want 1 and 3", st.StreamsOpened, st.RowsReceived)
	}
}
