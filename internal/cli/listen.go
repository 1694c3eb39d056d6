package cli

import (
	"net"
)

// CheckListenAddr refuses a listen address that no listener could take, before anything
// starts: a usage error (exit code 2) naming the flag. addr is "host:port" or ":port"
// with a port 0..65535 (0: any free port).
func CheckListenAddr(flagName, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return Usagef("--%s %q: want HOST:PORT or :PORT (%v)", flagName, addr, err)
	}
	if _, err := ParseInt(port, 0, 65535); err != nil {
		if _, lerr := net.LookupPort("tcp", port); lerr != nil || port == "" {
			return Usagef("--%s %q: port %q: want 0..65535 or a service name", flagName, addr, port)
		}
	}
	if ip := net.ParseIP(host); host != "" && ip == nil && !validHostname(host) {
		return Usagef("--%s %q: %q is neither an IP address nor a host name", flagName, addr, host)
	}
	return nil
}

// validHostname says whether s reads as a DNS host name (letters, digits, '-', '.').
func validHostname(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}
