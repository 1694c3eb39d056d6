package population

import (
	"testing"
	"time"
)

func TestHandshakeRTTs(t *testing.T) {
	p := loadCommitted(t)
	one := func(class string) (r *Record) {
		t.Helper()
		rs := p.ByClass(class)
		if len(rs) == 0 {
			t.Fatalf("no %s hosts", class)
		}
		return rs[0]
	}
	type c struct {
		class, phase string
		client       ClientHello
		want         int
	}
	big, mid := p.Certs["chain-big"], p.Certs["chain-mid"]
	if !big.ExceedsAmplification(ClientMLKEM) || !big.ExceedsAmplification(ClientX25519) {
		t.Fatalf("chain-big (%d bytes) must exceed both budgets", big.ApproxChainBytes())
	}
	if !mid.ExceedsAmplification(ClientX25519) || mid.ExceedsAmplification(ClientMLKEM) {
		t.Fatalf("chain-mid (%d bytes) must exceed only the one-Initial budget", mid.ApproxChainBytes())
	}
	for _, tc := range []c{
		{"doq", PhaseWarmup, ClientMLKEM, 1},
		{"doq", PhaseMeasured, ClientMLKEM, 1},
		{"doq-retry", PhaseWarmup, ClientMLKEM, 2},
		{"doq-retry", PhaseMeasured, ClientMLKEM, 1},
		{"doq-v2only", PhaseWarmup, ClientX25519, 2},
		{"doq-v2only", PhaseMeasured, ClientX25519, 1},
		{"doq-bigchain-honour", PhaseWarmup, ClientMLKEM, 2},
		{"doq-bigchain-honour", PhaseMeasured, ClientMLKEM, 1},
		{"doq-bigchain-ignore", PhaseMeasured, ClientMLKEM, 2},
		{"doq-bigchain-ignore", PhaseMeasured, ClientX25519, 2},
		{"doq-midchain-ignore", PhaseMeasured, ClientX25519, 2},
		{"doq-midchain-ignore", PhaseMeasured, ClientMLKEM, 1},
		{"doq-midchain-honour", PhaseMeasured, ClientX25519, 1},
		{"peer-aioquic-retry", PhaseMeasured, ClientMLKEM, 2},
		{"peer-aioquic-bigchain", PhaseMeasured, ClientMLKEM, 2},
	} {
		r := one(tc.class)
		got, ok := p.HandshakeRTTs(r.Prefix.Addr(), r.QUICPorts[0], ProtoDoQ, tc.phase, tc.client)
		if !ok || got != tc.want {
			t.Errorf("%s %s %s: %d (%v), want %d", tc.class, tc.phase, tc.client.Name, got, ok, tc.want)
		}
	}
	for _, class := range []string{"doq", "doq-retry", "doq-bigchain-ignore"} {
		r := one(class)
		for _, phase := range []string{PhaseWarmup, PhaseMeasured} {
			q, _ := p.HandshakeRTTs(r.Prefix.Addr(), r.QUICPorts[0], ProtoDoQ, phase, ClientMLKEM)
			h, ok := p.HandshakeRTTs(r.Prefix.Addr(), r.DoH3, ProtoDoH3, phase, ClientMLKEM)
			if !ok || h != q || r.DoH3 == 0 {
				t.Errorf("%s %s: DoH3 %d (%v) on %d, DoQ %d: the same QUIC behaviour must give the same count", class, phase, h, ok, r.DoH3, q)
			}
		}
	}
	r := one("dns-full")
	a := r.Prefix.Addr()
	for proto, want := range map[string]int{ProtoDoUDP: 0, ProtoDoTCP: 1, ProtoDoT: 2, ProtoDoH: 2} {
		port := uint16(53)
		switch proto {
		case ProtoDoT:
			port = r.DoT
		case ProtoDoH:
			port = r.DoH
		}
		if got, ok := p.HandshakeRTTs(a, port, proto, PhaseMeasured, ClientMLKEM); !ok || got != want {
			t.Errorf("%s: %d %v, want %d", proto, got, ok, want)
		}
	}
	if _, ok := p.HandshakeRTTs(a, 784, ProtoDoQ, PhaseWarmup, ClientMLKEM); ok {
		t.Error("DoQ handshake predicted for a host without DoQ")
	}
	h := one("quic-h3")
	if _, ok := p.HandshakeRTTs(h.Prefix.Addr(), 784, ProtoDoQ, PhaseWarmup, ClientMLKEM); ok {
		t.Error("DoQ handshake predicted for an h3-only host")
	}
}

// TestHandshakeTimeModel: TCP slow start adds a round trip to DoT/DoH exactly when the
// server's flight exceeds the initial window, and an amplification stall on a path longer
// than the client's initial PTO costs the PTO instead of a round trip.
func TestHandshakeTimeModel(t *testing.T) {
	p := loadCommitted(t)
	for _, r := range p.Records {
		if r.Hostile != "" || r.Peer != "" {
			continue
		}
		a := r.Prefix.Addr()
		rtt := p.PathOf(a).RTT
		for _, client := range []ClientHello{ClientX25519, ClientMLKEM} {
			if r.DoT != 0 {
				n, _ := p.HandshakeRTTs(a, r.DoT, ProtoDoT, PhaseMeasured, client)
				want := 2
				if p.Certs[r.Cert].ServerFlightBytes(client) > TCPInitialWindow {
					want = 3
				}
				if n != want {
					t.Errorf("%s DoT %s (flight %d bytes): %d round trips, want %d", r.Class, client.Name,
						p.Certs[r.Cert].ServerFlightBytes(client), n, want)
				}
			}
			for _, port := range r.QUICPorts {
				for _, phase := range []string{PhaseWarmup, PhaseMeasured} {
					n, ok := p.HandshakeRTTs(a, port, ProtoDoQ, phase, client)
					if !ok {
						continue
					}
					d, _ := p.HandshakeTime(a, port, ProtoDoQ, phase, client)
					want := time.Duration(n) * rtt
					stalls := p.Stalls(a, port, ProtoDoQ, phase, client)
					if stalls && rtt > ClientInitialPTO {
						want = time.Duration(n-1)*rtt + ClientInitialPTO
					}
					if flight := p.Certs[r.Cert].ServerFlightBytes(client); !stalls && flight > PacerBurstPackets*1252 {
						want += time.Duration((flight+1251)/1252-PacerBurstPackets) * PacerInterval
					}
					if d != want {
						t.Errorf("%s:%d %s %s: %v, want %v", r.Class, port, phase, client.Name, d, want)
					}
				}
			}
		}
	}
	// The committed population exercises both corrections.
	big := p.Certs["chain-big"]
	if big.ServerFlightBytes(ClientX25519) > TCPInitialWindow || big.ServerFlightBytes(ClientMLKEM) <= TCPInitialWindow {
		t.Errorf("chain-big flight %d/%d bytes: expected to exceed the %d-byte initial window with ML-KEM only",
			big.ServerFlightBytes(ClientX25519), big.ServerFlightBytes(ClientMLKEM), TCPInitialWindow)
	}
	long := false
	for _, r := range p.ByClass("doq-midchain-honour") {
		a := r.Prefix.Addr()
		long = long || (p.Stalls(a, r.QUICPorts[0], ProtoDoQ, PhaseWarmup, ClientX25519) && p.PathOf(a).RTT > ClientInitialPTO)
	}
	if !long {
		t.Error("no stalled handshake on a path longer than the initial PTO in the committed population")
	}
}
