//go:build !linux

package kafkain

import (
	"syscall"
	"time"
)

// userTimeoutControl is a no-op off Linux: TCP_USER_TIMEOUT is Linux's.
func userTimeoutControl(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
