package pool_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
	"github.com/benthos-zerobus/benthos-zerobus/internal/zerobus"
	"github.com/benthos-zerobus/benthos-zerobus/internal/zerobus/zerobusfake"
)

// A stream whose reconnect the service refused for concurrency fails as
// Poison with RetryAfter (see zerobus.ArrowStream.recover): the member must
// not open a replacement before RetryAfter, or every reject costs one more
// open at the service that just asked us to back off.
func TestRebuildAfterRefusedReconnectHonoursRetryAfter(t *testing.T) {
	const retryAfter = 300 * time.Millisecond
	ctx := testCtx(t)
	o := zerobusfake.NewOpener(zerobusfake.Config{ManualAck: true})
	p := pool.New(o, table, zerobusfake.TestSchema, fastConfig(1), nil)
	defer closeNow(p)
	require.NoError(t, p.Connect(ctx))
	tk := write(t, ctx, p, "", 5)

	refused := &zerobus.Error{Class: zerobus.Poison, Code: codes.ResourceExhausted,
		ServiceCode: zerobus.ServiceCodePipelineBlocked, RetryAfter: retryAfter,
		Err: errors.New("reconnect refused")}
	failedAt := time.Now()
	o.Streams()[0].Poison(refused)
	require.Error(t, tk.Wait(ctx))

	require.NoError(t, o.WaitOpenAttempts(ctx, 2))
	attempts := o.AttemptTimes()
	assert.GreaterOrEqual(t, attempts[1].Sub(failedAt), retryAfter,
		"the rebuild waited for the service's RetryAfter")
}

// A stream that fails while idle (no rows pending, so its lane never sees
// it) is found dead by the next Submit. Submit accepted nothing, so Write
// retries on a healthy or rebuilt member instead of failing the batch.
func TestWriteAfterIdleStreamDiedUsesARebuiltStream(t *testing.T) {
	ctx := testCtx(t)
	o := zerobusfake.NewOpener(zerobusfake.Config{})
	p := pool.New(o, table, zerobusfake.TestSchema, fastConfig(1), nil)
	defer closeNow(p)
	require.NoError(t, p.Connect(ctx))
	o.Streams()[0].Poison(nil)

	tk := write(t, ctx, p, "", 3)
	require.NoError(t, tk.Wait(ctx))
	assert.Equal(t, uint64(2), tk.Generation, "the rows went to the rebuilt stream")
	assert.Equal(t, uint64(0), o.Streams()[0].Submitted(), "nothing was accepted by the dead stream")
}
