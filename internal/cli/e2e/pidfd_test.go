package e2e

import (
	"time"

	"golang.org/x/sys/unix"
)

func unixPidfdOpen(pid int) (int, error) { return unix.PidfdOpen(pid, 0) }

// pollReadable waits until fd is readable (a pidfd: the process ended) or limit passes.
func pollReadable(fd int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left.Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0
	}
}
