package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"time"
)

// Route is what zmap needs to send on a raw socket: the interface, the source address
// and the Ethernet address of the next hop.
type Route struct {
	Interface  string
	SourceIP   string
	Gateway    string // next hop; empty when on-link
	GatewayMAC string
}

// DiscoverRoute asks the kernel (ip -j route get) how dst is reached from the current
// network namespace and resolves the next hop's MAC from the neighbour table, poking
// the gateway (never a target) with one UDP datagram to its discard port if the entry is
// missing. It is
// how zprobe finds -i/-S/-G inside the testbed's vantage namespace.
func DiscoverRoute(ctx context.Context, dst netip.Addr) (Route, error) {
	var r Route
	out, err := exec.CommandContext(ctx, "ip", "-j", "route", "get", dst.String()).Output()
	if err != nil {
		return r, fmt.Errorf("ip route get %s: %w", dst, err)
	}
	var routes []struct {
		Dev     string `json:"dev"`
		Gateway string `json:"gateway"`
		PrefSrc string `json:"prefsrc"`
	}
	if err := json.Unmarshal(out, &routes); err != nil || len(routes) == 0 {
		return r, fmt.Errorf("ip route get %s: unexpected output %q", dst, out)
	}
	r.Interface, r.SourceIP, r.Gateway = routes[0].Dev, routes[0].PrefSrc, routes[0].Gateway
	hop := r.Gateway
	if hop == "" {
		hop = dst.String()
	}
	deadline := time.Now().Add(3 * time.Second)
	poked := false
	for {
		mac, err := neighbour(ctx, r.Interface, hop)
		if err != nil {
			return r, err
		}
		if mac != "" {
			r.GatewayMAC = mac
			return r, nil
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("no neighbour entry for next hop %s on %s (is the namespace up?)", hop, r.Interface)
		}
		if !poked && r.Gateway != "" {
			// Resolving the next hop's MAC: the kernel ARPs for it on the first datagram.
			if c, err := net.Dial("udp", net.JoinHostPort(hop, "9")); err == nil {
				c.Write([]byte{0}) //nolint:errcheck // only makes the kernel pick a route; nothing is expected back
				c.Close()
			}
			poked = true
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(50 * time.Millisecond): // poll the neighbour table
		}
	}
}

func neighbour(ctx context.Context, dev, addr string) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", "-j", "neigh", "show", "dev", dev, "to", addr).Output()
	if err != nil {
		return "", fmt.Errorf("ip neigh show: %w", err)
	}
	var ns []struct {
		LLAddr string   `json:"lladdr"`
		State  []string `json:"state"`
	}
	if err := json.Unmarshal(out, &ns); err != nil {
		return "", fmt.Errorf("ip neigh show: %w", err)
	}
	for _, n := range ns {
		if n.LLAddr != "" {
			return n.LLAddr, nil
		}
	}
	return "", nil
}
