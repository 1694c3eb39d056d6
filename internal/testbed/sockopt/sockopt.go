// Package sockopt holds socket settings the testbed's servers share.
package sockopt

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// SetBuffers sets the socket's buffers to n bytes, beyond net.core.rmem_max/wmem_max with
// SO_RCVBUFFORCE/SO_SNDBUFFORCE when privileged (the testbed runs as root), else as large
// as the limits allow. A /16 sweep arrives in bursts the default buffers drop.
func SetBuffers(conn *net.UDPConn, n int) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var rerr, werr error
	if err := rc.Control(func(fd uintptr) {
		rerr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
		werr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, n)
	}); err != nil {
		return err
	}
	if rerr != nil {
		rerr = conn.SetReadBuffer(n)
	}
	if werr != nil {
		werr = conn.SetWriteBuffer(n)
	}
	return errors.Join(rerr, werr)
}
