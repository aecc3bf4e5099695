package emulator

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Hostile frames: nothing a client sends may crash the emulator.

const stringsTable = "main.default.strs"

var stringsSchema = arrow.NewSchema([]arrow.Field{
	{Name: "s", Type: arrow.BinaryTypes.LargeString, Nullable: true},
}, nil)

// stringsBatch is n rows of "ab" in stringsSchema.
func stringsBatch(n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, stringsSchema)
	defer b.Release()
	for range n {
		b.Field(0).(*array.LargeStringBuilder).Append("ab")
	}
	return b.NewRecordBatch()
}

// recordFrame is rec as a record batch FlightData at offset, written with
// opts (compression); patch may rewrite its body.
func recordFrame(t *testing.T, rec arrow.RecordBatch, offset int64, patch func(body []byte), opts ...ipc.Option) *flight.FlightData {
	t.Helper()
	pl, err := ipc.GetRecordBatchPayload(rec, opts...)
	require.NoError(t, err)
	defer pl.Release()
	var body bytes.Buffer
	require.NoError(t, pl.SerializeBody(&body))
	b := body.Bytes()
	if patch != nil {
		patch(b)
	}
	return &flight.FlightData{DataHeader: bytes.Clone(pl.Meta().Bytes()), DataBody: b, AppMetadata: fmt.Appendf(nil, `{"offset_id":%d}`, offset)}
}

// patchOffsets replaces the LargeString offsets of 5 rows of "ab"
// ([0,2,4,6,8,10]) in body with offs.
func patchOffsets(t *testing.T, offs []int64) func([]byte) {
	return func(body []byte) {
		var want, repl bytes.Buffer
		for i, o := range []int64{0, 2, 4, 6, 8, 10} {
			_ = binary.Write(&want, binary.LittleEndian, o)
			_ = binary.Write(&repl, binary.LittleEndian, offs[i])
		}
		at := bytes.Index(body, want.Bytes())
		require.GreaterOrEqual(t, at, 0, "offsets in the body")
		copy(body[at:], repl.Bytes())
	}
}

// TestCorruptOffsetsAreRefused is issue 19's frame: a record batch whose
// LargeString offsets point past its data buffer ([0,27906,4,6,8,10] for 5
// rows of "ab") passes the IPC reader and used to panic the process in the
// Parquet writer. It is refused with INVALID_ARGUMENT naming the column,
// and a stream on another table and a new stream on the same table keep
// working.
func TestCorruptOffsetsAreRefused(t *testing.T) {
	srv := startEmu(t, func(c *Config) { c.Tables = append(c.Tables, stringsTable+":s STRING") })
	conn := dial(t, srv)

	good, _, err := openPut(t, conn, zerobusToken(t, srv, testTable), testTable, testSchema)
	require.NoError(t, err)
	rec := makeBatch(0, 10)
	defer rec.Release()
	require.NoError(t, good.send(rec, 0))
	good.waitRecords(10)

	five := stringsBatch(5)
	defer five.Release()
	for _, tt := range []struct {
		name string
		offs []int64
		want []string
	}{
		{"past the data (issue 19)", []int64{0, 27906, 4, 6, 8, 10}, []string{"offset 0: invalid record batch: column 0 (s): offsets or lengths out of the bounds of its buffers"}},
		{"decreasing", []int64{0, 4, 2, 6, 8, 10}, []string{"offset 0: invalid record batch: column 0 (s)", "not monotonically non-decreasing"}},
		{"negative", []int64{0, -2, 4, 6, 8, 10}, []string{"offset 0: invalid record batch: column 0 (s)"}},
		// arrow-go's IPC reader checks the last offset itself.
		{"last past the data", []int64{0, 2, 4, 6, 8, 1 << 40}, []string{"malformed Flight data", "out of bounds"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bad, _, err := openPut(t, conn, zerobusToken(t, srv, stringsTable), stringsTable, stringsSchema)
			require.NoError(t, err)
			require.NoError(t, bad.stream.Send(recordFrame(t, five, 0, patchOffsets(t, tt.offs))))
			err = bad.finish()
			requireRefused(t, err, tt.want...)
			t.Log(err)
		})
	}

	// The process, the other stream and the table are alive.
	require.NoError(t, good.send(rec, 1))
	good.waitRecords(20)
	require.NoError(t, good.finish())
	ok, _, err := openPut(t, conn, zerobusToken(t, srv, stringsTable), stringsTable, stringsSchema)
	require.NoError(t, err)
	require.NoError(t, ok.stream.Send(recordFrame(t, five, 0, nil)))
	ok.waitRecords(5)
	require.NoError(t, ok.finish())
	assert.Equal(t, int64(5), rowCount(t, srv, stringsTable), "only the good batch landed")
	assert.Equal(t, int64(20), rowCount(t, srv, testTable))
}

// TestRecoverStreamEndsOnlyTheStream: a panic in a stream's receive loop
// becomes that stream's INTERNAL status, logged with its stack.
func TestRecoverStreamEndsOnlyTheStream(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	loop := func() (err error) {
		defer recoverStream(log, "main.default.t", &err)
		panic("boom") // what a bug in the receive loop does
	}
	err := loop()
	require.Error(t, err)
	assert.Equal(t, codes.Internal, status.Code(err))
	assert.Contains(t, logs.String(), "flight stream panicked")
	assert.Contains(t, logs.String(), "main.default.t")
	assert.Contains(t, logs.String(), "hostile_test.go", "the stack")
}

// TestAdminAPIIsLoopbackOnlyWithoutToken: without an admin token the admin
// API answers a loopback client and refuses any other; with one it needs
// the bearer token from everyone. The workspace API is not affected.
func TestAdminAPIIsLoopbackOnlyWithoutToken(t *testing.T) {
	srv := startEmu(t, nil)
	h := srv.httpHandler()
	call := func(remote, auth, path string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = remote
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	assert.Equal(t, http.StatusOK, call("127.0.0.1:40000", "", "/emulator/v1/tables"))
	assert.Equal(t, http.StatusOK, call("[::1]:40000", "", "/emulator/v1/stats"))
	assert.Equal(t, http.StatusForbidden, call("192.0.2.7:40000", "", "/emulator/v1/tables"))
	assert.Equal(t, http.StatusForbidden, call("172.17.0.1:40000", "", "/emulator/v1/tables/"+testTable+"/rows"))
	assert.Equal(t, http.StatusOK, call("192.0.2.7:40000", "", "/.well-known/databricks-config"), "the workspace API is not the admin API")

	// Over a real connection from loopback (what tests and demo.sh do).
	assert.Equal(t, http.StatusOK, getJSON(t, srv.HTTPURL()+"/emulator/v1/tables", nil))

	tok := startEmu(t, func(c *Config) { c.AdminToken = "s3cret-admin" })
	h = tok.httpHandler()
	assert.Equal(t, http.StatusUnauthorized, call("127.0.0.1:40000", "", "/emulator/v1/tables"), "a token, once set, is needed from loopback too")
	assert.Equal(t, http.StatusUnauthorized, call("192.0.2.7:40000", "Bearer wrong", "/emulator/v1/tables"))
	assert.Equal(t, http.StatusUnauthorized, call("192.0.2.7:40000", "Basic czNjcmV0LWFkbWlu", "/emulator/v1/tables"))
	assert.Equal(t, http.StatusOK, call("192.0.2.7:40000", "Bearer s3cret-admin", "/emulator/v1/tables"))
	assert.Equal(t, http.StatusOK, call("192.0.2.7:40000", "Bearer s3cret-admin", "/emulator/v1/faults"))
}

// TestDecompressionBombIsRefused: a compressed frame whose buffer declares
// an uncompressed length of 1 TiB (found by FuzzDoPutFrame: arrow-go's
// reader allocates the declared length first, and the emulator died of an
// out-of-memory fatal error) is refused with INVALID_ARGUMENT before
// anything is allocated; the same frame, honest, lands.
func TestDecompressionBombIsRefused(t *testing.T) {
	srv := startEmu(t, func(c *Config) { c.Tables = append(c.Tables, stringsTable+":s STRING") })
	conn := dial(t, srv)
	five := stringsBatch(5)
	defer five.Release()
	frame := func(patch func([]byte)) *flight.FlightData { return recordFrame(t, five, 0, patch, ipc.WithZstd()) }
	bomb := func(b []byte) {
		// The offsets buffer of 5 rows: 48 bytes uncompressed, declared in
		// its first 8 bytes.
		var want [8]byte
		binary.LittleEndian.PutUint64(want[:], 48)
		for at := 0; at+8 <= len(b); at += 8 {
			if bytes.Equal(b[at:at+8], want[:]) {
				binary.LittleEndian.PutUint64(b[at:], 1<<40)
				return
			}
		}
		t.Fatal("no buffer declares 48 bytes")
	}

	p, _, err := openPut(t, conn, zerobusToken(t, srv, stringsTable), stringsTable, stringsSchema)
	require.NoError(t, err)
	require.NoError(t, p.stream.Send(frame(bomb)))
	requireRefused(t, p.finish(), "decompresses to 1099511627", "send smaller batches")

	p, _, err = openPut(t, conn, zerobusToken(t, srv, stringsTable), stringsTable, stringsSchema)
	require.NoError(t, err)
	require.NoError(t, p.stream.Send(frame(nil)))
	p.waitRecords(5)
	require.NoError(t, p.finish())
	assert.Equal(t, int64(5), rowCount(t, srv, stringsTable))
}
