package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// sendBatches sends batches of per rows (ids from 0) at offsets 0, 1, … as
// fast as the stream takes them.
func sendBatches(t *testing.T, p *putStream, batches, per int) {
	t.Helper()
	for i := range batches {
		rec := makeBatch(i*per, per)
		err := p.send(rec, int64(i))
		rec.Release()
		require.NoError(t, err)
	}
}

// startOpen starts an emulator configured by mutate and returns it with a
// function that opens one more stream on testTable (requiring success).
func startOpen(t *testing.T, mutate func(*Config)) (*Server, func() *putStream) {
	t.Helper()
	srv := startEmu(t, mutate)
	conn := dial(t, srv)
	tok := zerobusToken(t, srv, testTable)
	return srv, func() *putStream {
		t.Helper()
		p, _, err := openPut(t, conn, tok, testTable, testSchema)
		require.NoError(t, err)
		return p
	}
}

func TestStreamRowQuotaBackpressure(t *testing.T) {
	// 2,000 rows/s per stream; 2,000 rows take at least 1 s, less the
	// slack an idle stream starts with, to be acked whatever the client
	// does, and the stream's achieved rate says so.
	srv, open := startOpen(t, func(c *Config) { c.Faults.StreamMaxRowsPerSec = 2000 })
	p := open()

	start := time.Now()
	sendBatches(t, p, 10, 200)
	p.waitRecords(2000)
	took := time.Since(start)
	require.NoError(t, p.finish())

	assert.GreaterOrEqual(t, took, time.Second-quotaSlack-50*time.Millisecond, "2,000 rows at 2,000 rows/s are acked no faster than the quota")
	st := srv.Stats().Tables[testTable]
	assert.EqualValues(t, 2000, st.RowCount, "throttled, not dropped")
	require.Len(t, st.Streams, 1)
	s := st.Streams[0]
	assert.False(t, s.Active)
	assert.EqualValues(t, 2000, s.Rows)
	assert.Positive(t, s.Bytes)
	// First to last request spans 9 of the 10 batches' budgets.
	assert.InDelta(t, 2000, s.RowsPerSec, 400, "achieved rate at the quota: %+v", s)
	assert.Positive(t, s.ThrottledMS)
}

func TestStreamQuotaIsPerStream(t *testing.T) {
	// Two streams at 2,000 rows/s each carry 2,000 rows in about the time
	// one carries 1,000: the quota is per stream, not per table.
	srv, open := startOpen(t, func(c *Config) { c.Faults.StreamMaxRowsPerSec = 2000 })
	p1, p2 := open(), open()
	start := time.Now()
	sendBatches(t, p1, 10, 100)
	sendBatches(t, p2, 10, 100)
	p1.waitRecords(1000)
	p2.waitRecords(1000)
	took := time.Since(start)
	require.NoError(t, p1.finish())
	require.NoError(t, p2.finish())
	assert.Less(t, took, 900*time.Millisecond, "2 × 1,000 rows on two 2,000 rows/s streams")
	assert.Len(t, srv.Stats().Tables[testTable].Streams, 2)
}

func TestStreamMBQuotaBackpressure(t *testing.T) {
	// A 0.05 MB/s (50,000 bytes/s) quota holds the stream to that many
	// bytes of frames per second.
	srv, open := startOpen(t, func(c *Config) { c.Faults.StreamMaxMBPerSec = 0.05 })
	p := open()
	start := time.Now()
	sendBatches(t, p, 5, 200)
	p.waitRecords(1000)
	took := time.Since(start)
	require.NoError(t, p.finish())
	s := srv.Stats().Tables[testTable].Streams[0]
	want := time.Duration(float64(s.Bytes) / 50_000 * float64(time.Second))
	assert.GreaterOrEqual(t, took, want-quotaSlack-50*time.Millisecond, "%d bytes at 50,000 bytes/s", s.Bytes)
	assert.InDelta(t, 0.05, s.MBPerSec, 0.02, "%+v", s)
}

func TestStreamQuotaRejectMode(t *testing.T) {
	// Reject mode: a stream more than a second's worth over its quota fails
	// RESOURCE_EXHAUSTED with a retry hint; the refused batch is not stored
	// and what was acked before it stays.
	srv, open := startOpen(t, func(c *Config) {
		c.Faults.StreamMaxRowsPerSec = 1000
		c.Faults.StreamQuotaMode = QuotaReject
	})
	p := open()
	// 1,000 rows fit the one-second burst; the next 500 do not.
	sendBatches(t, p, 3, 500)
	_, err := p.awaitRecords(1500)
	require.Error(t, err)
	st, _ := status.FromError(unwrapStatus(err))
	require.Equal(t, codes.ResourceExhausted, st.Code(), "%v", err)
	var hint *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			hint = ri
		}
	}
	require.NotNil(t, hint, "the refusal carries a RetryInfo")
	assert.Positive(t, hint.GetRetryDelay().AsDuration())
	assert.LessOrEqual(t, hint.GetRetryDelay().AsDuration(), 2*time.Second)

	// The two batches before it were stored (their commit may still be
	// under way when the stream ends); the refused one never is.
	require.Eventually(t, func() bool { return srv.Stats().Tables[testTable].RowCount == 1000 }, 10*time.Second, 10*time.Millisecond)
	tst := srv.Stats().Tables[testTable]
	assert.EqualValues(t, 1000, tst.RowsReceived, "the refused batch was not received")
	require.Len(t, tst.Streams, 1)
	assert.EqualValues(t, 1, tst.Streams[0].Rejected)
}

// unwrapStatus digs the gRPC status out of awaitRecords' wrapped error.
func unwrapStatus(err error) error {
	for e := err; e != nil; {
		if _, ok := status.FromError(e); ok {
			return e
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
	return err
}

func TestStreamQuotaThroughAdminAPI(t *testing.T) {
	srv := startEmu(t, nil)
	put := func(body string) int {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPut, srv.HTTPURL()+"/emulator/v1/faults", bytes.NewBufferString(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+workspaceToken(t, srv))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, put(`{"stream_max_rows_per_sec":15000,"stream_max_mb_per_sec":100,"stream_quota_mode":"resource_exhausted"}`))
	f := srv.Faults()
	assert.EqualValues(t, 15000, f.StreamMaxRowsPerSec)
	assert.InDelta(t, 100, f.StreamMaxMBPerSec, 0)
	assert.Equal(t, QuotaReject, f.StreamQuotaMode)
	b, err := json.Marshal(f)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"stream_max_rows_per_sec":15000`)
	assert.Contains(t, string(b), `"stream_max_mb_per_sec":100`)

	assert.Equal(t, http.StatusBadRequest, put(`{"stream_max_rows_per_sec":-1}`))
	assert.Equal(t, http.StatusBadRequest, put(`{"stream_quota_mode":"drop"}`))
	assert.EqualValues(t, 15000, srv.Faults().StreamMaxRowsPerSec, "a refused change changes nothing")
}

func TestQuotaRejectAdmitsOneLargeRequestOnAnIdleStream(t *testing.T) {
	// A request that alone costs more than quotaBurst (2,000 rows at
	// 1,000 rows/s) is taken by a stream whose budget is paid up; refusing
	// it would refuse it on every stream, for ever, and a client that
	// retries RESOURCE_EXHAUSTED (the SDK does) would never get through.
	// The next request waits for the budget like any other.
	f := &Faults{StreamMaxRowsPerSec: 1000, StreamQuotaMode: QuotaReject}
	var q quota
	_, err := q.take(context.Background(), f, 2000, 0)
	require.NoError(t, err, "one 2 s request on an idle stream")
	_, err = q.take(context.Background(), f, 1, 0)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "the stream is 2 s ahead of its budget")
}
