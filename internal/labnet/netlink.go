package labnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// errNoRoute: the kernel has no usable route (unreachable, prohibit, blackhole).
var errNoRoute = errors.New("no route")

// request sends one netlink request on a fresh NETLINK_ROUTE socket and returns the
// reply's bytes.
func request(msgType uint16, body []byte) ([]byte, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	const seq = 1
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	msg = append(msg, body...)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], msgType)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(msg[8:], seq)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("netlink send: %w", err)
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("netlink receive: %w", err)
		}
		return buf[:n], nil
	}
}

// routeGet returns the output interface index of the kernel's route to dst.
func routeGet(dst netip.Addr) (int, error) {
	fam, bits := uint8(unix.AF_INET), uint8(32)
	if dst.Is6() {
		fam, bits = unix.AF_INET6, 128
	}
	a := dst.AsSlice()
	body := make([]byte, unix.SizeofRtMsg+unix.SizeofRtAttr+len(a))
	body[0], body[1] = fam, bits // rtm_family, rtm_dst_len
	at := body[unix.SizeofRtMsg:]
	binary.NativeEndian.PutUint16(at[0:], uint16(unix.SizeofRtAttr+len(a)))
	binary.NativeEndian.PutUint16(at[2:], unix.RTA_DST)
	copy(at[unix.SizeofRtAttr:], a)
	reply, err := request(unix.RTM_GETROUTE, body)
	if err != nil {
		return 0, err
	}
	return parseRouteReply(reply)
}

// linkGet returns the name and alias of interface index.
func linkGet(index int) (name, alias string, err error) {
	body := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(body[4:], uint32(int32(index))) // ifi_index
	reply, err := request(unix.RTM_GETLINK, body)
	if err != nil {
		return "", "", err
	}
	return parseLinkReply(reply)
}

// message returns the one netlink message of a reply, or the error it carries.
func message(b []byte, want uint16) (syscall.NetlinkMessage, error) {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return syscall.NetlinkMessage{}, fmt.Errorf("netlink reply: %w", err)
	}
	if len(msgs) == 0 {
		return syscall.NetlinkMessage{}, errors.New("netlink reply: empty")
	}
	m := msgs[0]
	switch m.Header.Type {
	case unix.NLMSG_ERROR:
		if len(m.Data) < 4 {
			return m, errors.New("netlink reply: short error message")
		}
		errno := -int32(binary.NativeEndian.Uint32(m.Data))
		if errno <= 0 {
			return m, errors.New("netlink reply: an acknowledgement, not an answer")
		}
		return m, syscall.Errno(errno)
	case want:
		return m, nil
	}
	return m, fmt.Errorf("netlink reply: message type %d, want %d", m.Header.Type, want)
}

// parseRouteReply reads an RTM_NEWROUTE reply's output interface; the errors the kernel
// gives for a destination without a usable route become errNoRoute.
func parseRouteReply(b []byte) (int, error) {
	m, err := message(b, unix.RTM_NEWROUTE)
	switch {
	case errors.Is(err, unix.ENETUNREACH), errors.Is(err, unix.EHOSTUNREACH),
		errors.Is(err, unix.EACCES), errors.Is(err, unix.EINVAL):
		return 0, errNoRoute // unreachable, prohibit, blackhole
	case err != nil:
		return 0, fmt.Errorf("route lookup: %w", err)
	}
	if len(m.Data) < unix.SizeofRtMsg {
		return 0, errors.New("route lookup: short reply")
	}
	switch rtype := m.Data[7]; rtype { // rtm_type
	case unix.RTN_UNREACHABLE, unix.RTN_PROHIBIT, unix.RTN_BLACKHOLE:
		return 0, errNoRoute
	}
	attrs, err := parseAttrs(m.Data[unix.SizeofRtMsg:])
	if err != nil {
		return 0, fmt.Errorf("route lookup: %w", err)
	}
	if v := attrs[unix.RTA_OIF]; len(v) >= 4 {
		return int(int32(binary.NativeEndian.Uint32(v))), nil
	}
	return 0, errors.New("route lookup: the reply names no output interface")
}

// parseLinkReply reads an RTM_NEWLINK reply's interface name and alias.
func parseLinkReply(b []byte) (name, alias string, err error) {
	m, err := message(b, unix.RTM_NEWLINK)
	if err != nil {
		return "", "", fmt.Errorf("link lookup: %w", err)
	}
	if len(m.Data) < unix.SizeofIfInfomsg {
		return "", "", errors.New("link lookup: short reply")
	}
	attrs, err := parseAttrs(m.Data[unix.SizeofIfInfomsg:])
	if err != nil {
		return "", "", fmt.Errorf("link lookup: %w", err)
	}
	str := func(v []byte) string {
		for i, c := range v {
			if c == 0 {
				return string(v[:i])
			}
		}
		return string(v)
	}
	name, alias = str(attrs[unix.IFLA_IFNAME]), str(attrs[unix.IFLA_IFALIAS])
	if name == "" {
		return "", "", errors.New("link lookup: the reply names no interface")
	}
	return name, alias, nil
}

// parseAttrs reads a run of route attributes (struct rtattr: length, type, value padded
// to 4 bytes) by type. syscall.ParseNetlinkRouteAttr is not used: it panics on an
// attribute whose padding runs past the end of the message.
func parseAttrs(b []byte) (map[uint16][]byte, error) {
	out := map[uint16][]byte{}
	for len(b) >= unix.SizeofRtAttr {
		l := int(binary.NativeEndian.Uint16(b[0:]))
		typ := binary.NativeEndian.Uint16(b[2:]) & nlaTypeMask
		if l < unix.SizeofRtAttr || l > len(b) {
			return nil, fmt.Errorf("attribute length %d out of range (%d bytes left)", l, len(b))
		}
		out[typ] = b[unix.SizeofRtAttr:l]
		b = b[min((l+3)&^3, len(b)):]
	}
	return out, nil
}

// nlaTypeMask strips the NLA_F_NESTED and NLA_F_NET_BYTEORDER flags from a type.
const nlaTypeMask = 0x3fff
