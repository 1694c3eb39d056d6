package simquic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"time"
)

// ServeConn serves the QUIC behaviour the population gives addr on port over pc alone:
// one address on a connection of the caller's (an in-process link, e.g. quic-go's
// testutils/simnet under testing/synctest), with the same Transport, TLS and DoQ code as
// Start, and Version Negotiation answered as the demultiplexer answers it. cfg's Listen,
// Ports and MapAddr are not used. Closing the Server closes pc.
func ServeConn(ctx context.Context, cfg Config, pc net.PacketConn, addr netip.Addr, port uint16) (*Server, error) {
	if cfg.Population == nil || cfg.PKI == nil {
		return nil, errors.New("simquic: Config needs Population and PKI")
	}
	r := cfg.Population.Lookup(addr)
	if r == nil || r.Peer != "" || r.RawQUIC() || !r.HasQUICPort(port) {
		return nil, fmt.Errorf("simquic: %s port %d is not a quic-go behaviour of the population", addr, port)
	}
	if cfg.HoldTimeout <= 0 {
		cfg.HoldTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	prof, err := profileOf(r, port)
	if err != nil {
		return nil, fmt.Errorf("simquic: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Server{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, transports: map[sockKey]map[string]*tport{}}
	vc := &vnConn{PacketConn: pc}
	t, err := s.newTransport(prof, vc, pc)
	if err != nil {
		cancel()
		pc.Close()
		return nil, err
	}
	vc.wire = t.wire
	s.transports[sockKey{port: port, v6: addr.Is6()}] = map[string]*tport{prof.key(): t}
	go func() {
		<-ctx.Done()
		s.closeAll()
	}()
	return s, nil
}

// vnConn answers, as the demultiplexer does, every long-header datagram of at least
// minProbeSize bytes whose version is not in wire with Version Negotiation, and passes
// the rest on.
type vnConn struct {
	net.PacketConn
	wire []uint32
}

func (c *vnConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, from, err := c.PacketConn.ReadFrom(b)
		if err != nil {
			return n, from, err
		}
		version, dcid, scid, ok := longHeaderIDs(b[:n])
		if !ok || version == 0 || slices.Contains(c.wire, version) {
			return n, from, nil
		}
		if n >= minProbeSize {
			vn := versionNegotiation(dcid, scid, append(slices.Clone(c.wire), greaseVersion(version)), false)
			_, _ = c.PacketConn.WriteTo(vn, from)
		}
	}
}
