package ingest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// testChannels returns channels whose connections are never used for a
// call (grpc.NewClient dials lazily; nothing listens on port 1), counting
// dials and redials.
func testChannels(t *testing.T) (cs *channels, dials *atomic.Int32, redials *atomic.Int32) {
	t.Helper()
	dials, redials = &atomic.Int32{}, &atomic.Int32{}
	cs, err := newChannels(func() (*grpc.ClientConn, error) {
		dials.Add(1)
		return grpc.NewClient("passthrough:///127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	}, func(uint64, error) { redials.Add(1) })
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.close() })
	return cs, dials, redials
}

func TestChannelsReplaceOncePerGeneration(t *testing.T) {
	cs, dials, redials := testChannels(t)
	first := cs.acquire()
	require.Equal(t, uint64(1), first.gen)

	// Eight streams on the dead connection fail at once; one replacement.
	var wg sync.WaitGroup
	var replaced atomic.Int32
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, err := cs.replace(first.gen, errors.New("dead")); err == nil && ok {
				replaced.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int32(1), replaced.Load())
	assert.Equal(t, int32(1), redials.Load())
	assert.Equal(t, int32(2), dials.Load())
	assert.Equal(t, uint64(2), cs.gen())

	// The retired connection stays open while a call holds it, and closes
	// after the last.
	assert.NotEqual(t, connectivity.Shutdown, first.conn.GetState(), "closed under a live call")
	cs.release(first)
	assert.Equal(t, connectivity.Shutdown, first.conn.GetState(), "retired and unused: closed")

	// A late failure naming the old generation changes nothing.
	ok, err := cs.replace(1, errors.New("late"))
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Equal(t, uint64(2), cs.gen())
}

func TestChannelsHoldReleasesWithTheCall(t *testing.T) {
	cs, _, _ := testChannels(t)
	ch := cs.acquire()
	ctx, cancel := context.WithCancel(context.Background())
	cs.hold(ctx, ch)
	_, err := cs.replace(ch.gen, errors.New("dead"))
	require.NoError(t, err)
	assert.NotEqual(t, connectivity.Shutdown, ch.conn.GetState())
	cancel() // the call ends
	require.Eventually(t, func() bool { return ch.conn.GetState() == connectivity.Shutdown }, 10*time.Second, 5*time.Millisecond,
		"the retired connection closes once its call's context ended")
}

func TestChannelsCloseClosesRetiredToo(t *testing.T) {
	cs, _, _ := testChannels(t)
	old := cs.acquire() // a call that never ends
	_, err := cs.replace(old.gen, errors.New("dead"))
	require.NoError(t, err)
	cur := cs.acquire()
	require.NoError(t, cs.close())
	assert.Equal(t, connectivity.Shutdown, old.conn.GetState())
	assert.Equal(t, connectivity.Shutdown, cur.conn.GetState())
	ok, err := cs.replace(cur.gen, errors.New("after close"))
	require.NoError(t, err)
	assert.False(t, ok, "no replacement after close")
}

func TestTransportSuspect(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  *Error
		want bool
	}{
		{"no ready signal, no ack", &Error{Class: Transient, Code: codes.DeadlineExceeded}, true},
		// gRPC closed the transport itself (keepalive, reset, EOF) and
		// dials a new one for the next call.
		{"keepalive or reset", &Error{Class: Transient, Code: codes.Unavailable}, false},
		{"rotation", rotationReason, false},
		{"service-coded unavailable", &Error{Class: Transient, Code: codes.Unavailable, ServiceCode: "6006"}, false},
		{"internal", &Error{Class: Transient, Code: codes.Internal}, false},
		{"cancelled", &Error{Class: Transient, Code: codes.Canceled}, false},
		{"refused", &Error{Class: FatalConfig, Code: codes.PermissionDenied}, false},
		{"nil", nil, false},
	} {
		assert.Equal(t, tc.want, transportSuspect(tc.err), tc.name)
	}
}

func TestKeepaliveDefaultsAndFloor(t *testing.T) {
	k := Keepalive{}.withDefaults()
	assert.Equal(t, DefaultKeepaliveTime, k.Time)
	assert.Equal(t, DefaultKeepaliveTimeout, k.Timeout)
	assert.Equal(t, 15*time.Second, Keepalive{}.DetectionBound())
	assert.Equal(t, MinKeepaliveTime, Keepalive{Time: time.Second, Timeout: time.Second}.withDefaults().Time, "grpc-go's floor")
	assert.Equal(t, 31*time.Second, Keepalive{Time: 30 * time.Second, Timeout: time.Second}.DetectionBound())
}
