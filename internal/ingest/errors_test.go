package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func statusWith(t *testing.T, c codes.Code, msg string, details ...*errdetails.ErrorInfo) error {
	t.Helper()
	st := status.New(c, msg)
	for _, d := range details {
		var err error
		st, err = st.WithDetails(d)
		require.NoError(t, err)
	}
	return st.Err()
}

func TestClassify(t *testing.T) {
	schemaInfo := &errdetails.ErrorInfo{
		Reason: SchemaValidationReason,
		Domain: "zerobus.databricks.com",
		Metadata: map[string]string{
			"causes":     "FIELD_NOT_IN_TABLE, TYPE_INCOMPATIBLE",
			"error_code": "8001",
		},
	}
	retryInfo, err := status.New(codes.ResourceExhausted, "too many streams").
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(3 * time.Second)})
	require.NoError(t, err)

	tests := []struct {
		name        string
		err         error
		class       Class
		code        codes.Code
		serviceCode string
		causes      []string
		retryAfter  time.Duration
	}{
		{"rotation 6002", statusWith(t, codes.Unavailable, "Stream timeout reached. Error Code: 6002"), Transient, codes.Unavailable, "6002", nil, 0},
		{"plain unavailable", statusWith(t, codes.Unavailable, "connection reset"), Transient, codes.Unavailable, "", nil, 0},
		{"internal", statusWith(t, codes.Internal, "boom"), Transient, codes.Internal, "", nil, 0},
		{"deadline", statusWith(t, codes.DeadlineExceeded, "slow"), Transient, codes.DeadlineExceeded, "", nil, 0},
		{"aborted", statusWith(t, codes.Aborted, "x"), Transient, codes.Aborted, "", nil, 0},
		{"server EOF", io.EOF, Transient, codes.Unknown, "", nil, 0},
		{"wrapped transport error", fmt.Errorf("send: %w", errors.New("broken pipe")), Transient, codes.Unknown, "", nil, 0},
		{"context canceled", context.Canceled, Transient, codes.Canceled, "", nil, 0},
		{"resource exhausted", statusWith(t, codes.ResourceExhausted, "cap"), ConcurrencyReject, codes.ResourceExhausted, "", nil, ResourceExhaustedBackoff},
		{"resource exhausted with RetryInfo", retryInfo.Err(), ConcurrencyReject, codes.ResourceExhausted, "", nil, 3 * time.Second},
		{"pipeline blocked 6006", statusWith(t, codes.Unavailable, "Pipeline creation temporarily blocked. Error Code: 6006"), ConcurrencyReject, codes.Unavailable, "6006", nil, PipelineBlockedBackoff},
		{"schema validation ErrorInfo", statusWith(t, codes.InvalidArgument, "schema mismatch", schemaInfo), FatalConfig, codes.InvalidArgument, "8001", []string{"FIELD_NOT_IN_TABLE", "TYPE_INCOMPATIBLE"}, 0},
		{"schema 8001 text only", statusWith(t, codes.FailedPrecondition, "bad schema Error Code: 8001"), FatalConfig, codes.FailedPrecondition, "8001", nil, 0},
		{"missing grants 4024", statusWith(t, codes.PermissionDenied, "no grants. Error Code: 4024"), FatalConfig, codes.PermissionDenied, "4024", nil, 0},
		{"unauthenticated", statusWith(t, codes.Unauthenticated, "bad token"), FatalConfig, codes.Unauthenticated, "", nil, 0},
		{"not found", statusWith(t, codes.NotFound, "no table"), FatalConfig, codes.NotFound, "", nil, 0},
		{"out of range", statusWith(t, codes.OutOfRange, "x"), FatalConfig, codes.OutOfRange, "", nil, 0},
		{"unimplemented", statusWith(t, codes.Unimplemented, "x"), FatalConfig, codes.Unimplemented, "", nil, 0},
		{"invalid argument", statusWith(t, codes.InvalidArgument, "bad request"), FatalConfig, codes.InvalidArgument, "", nil, 0},
		{"offset gap is poison", statusWith(t, codes.InvalidArgument, "Non-incremental offset: expected 3, actual 5"), Poison, codes.InvalidArgument, "", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Classify(tt.err)
			require.NotNil(t, got)
			assert.Equal(t, tt.class, got.Class, got.Error())
			assert.Equal(t, tt.code, got.Code)
			assert.Equal(t, tt.serviceCode, got.ServiceCode)
			assert.Equal(t, tt.causes, got.Causes)
			assert.Equal(t, tt.retryAfter, got.RetryAfter)
			assert.ErrorIs(t, got, tt.err)
		})
	}
}

func TestClassifyNilAndIdempotent(t *testing.T) {
	assert.Nil(t, Classify(nil))
	first := Classify(status.Error(codes.NotFound, "x"))
	wrapped := fmt.Errorf("open stream 2: %w", first)
	assert.Same(t, first, Classify(wrapped))
	class, ok := ClassOf(wrapped)
	assert.True(t, ok)
	assert.Equal(t, FatalConfig, class)
	_, ok = ClassOf(errors.New("plain"))
	assert.False(t, ok)
}

func TestSchemaMismatchReasonWithoutCausesStillSignals(t *testing.T) {
	err := statusWith(t, codes.InvalidArgument, "mismatch", &errdetails.ErrorInfo{Reason: SchemaValidationReason})
	got := Classify(err)
	assert.Equal(t, FatalConfig, got.Class)
	assert.True(t, got.IsSchemaMismatch())
	assert.Equal(t, ServiceCodeSchemaMismatch, got.ServiceCode)
}

func TestExhaustedIsPoisonAndKeepsCause(t *testing.T) {
	last := status.Error(codes.Unavailable, "down")
	got := exhausted(4, last)
	assert.Equal(t, Poison, got.Class)
	assert.Equal(t, codes.Unavailable, got.Code)
	assert.ErrorIs(t, got, last)
	assert.Contains(t, got.Error(), "4 attempts")
}

func TestErrorString(t *testing.T) {
	e := &Error{Class: ConcurrencyReject, Code: codes.Unavailable, ServiceCode: "6006", RetryAfter: time.Minute, Err: errors.New("blocked")}
	assert.Equal(t, "zerobus concurrency_reject (Unavailable) [error code 6006] retry after 1m0s: blocked", e.Error())
}

// ConcurrencyRejectOf finds a reject at the top of err, under another
// classified error (a refused reconnect fails Poison around it), or in a
// bare gRPC status, and nothing where there is none.
func TestConcurrencyRejectOf(t *testing.T) {
	reject := &Error{Class: ConcurrencyReject, Code: codes.ResourceExhausted, RetryAfter: 7 * time.Second, Err: errors.New("refused")}
	refusedReconnect := fmt.Errorf("acklane: stream failed: %w", &Error{Class: Poison, Code: codes.ResourceExhausted, Err: fmt.Errorf("reconnect refused: %w", reject)})
	require.Same(t, reject, ConcurrencyRejectOf(refusedReconnect))
	require.Same(t, reject, ConcurrencyRejectOf(reject))
	require.NotNil(t, ConcurrencyRejectOf(status.Error(codes.ResourceExhausted, "cap")))
	require.Nil(t, ConcurrencyRejectOf(&Error{Class: Poison, Code: codes.Internal, Err: errors.New("gap")}))
	require.Nil(t, ConcurrencyRejectOf(status.Error(codes.Unavailable, "down")))
	require.Nil(t, ConcurrencyRejectOf(nil))
}
