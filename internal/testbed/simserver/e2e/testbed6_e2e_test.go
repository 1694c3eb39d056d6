package e2e_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// The IPv6 half has a third-party server, and the tests below reach it like every
// simserver address.
func TestIPv6PopulationHasAPeer(t *testing.T) {
	pop := requireSimserver(t).Population
	for _, r := range pop.Records6 {
		if r.Peer != "" {
			t.Logf("IPv6 peer: %s %s (%s)", r.Prefix, r.Peer, r.Class)
			return
		}
	}
	t.Fatal("no third-party peer in the population's IPv6 half")
}

// Every IPv6 QUIC endpoint of the population answers a DoQ (or HTTP/3) handshake over
// IPv6 through the delay line, from the address it was sent to (quic-go's client drops
// datagrams from any other source), with its record's ALPN and certificate; a dual-stack
// twin presents the very certificate of its IPv4 address.
func TestIPv6QUICEndpoints(t *testing.T) {
	pop := requireSimserver(t).Population
	pop6 := pop.IPv6()
	if len(pop6.Records) == 0 {
		t.Fatal("the population has no IPv6 half")
	}
	n := 0
	for _, ep := range pop6.QUICEndpoints() {
		want := pop6.ExpectVerify(ep.Addr, ep.Port)
		if want.Class != population.OutcomeDoQVerified {
			continue
		}
		n++
		t.Run(ep.Addr.String()+"/"+strconv.Itoa(int(ep.Port)), func(t *testing.T) {
			testbed.RequirePeer(t, pop, pop.Lookup(ep.Addr))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, _, err := dialDoQ(ctx, ep.Addr, ep.Port, nil, false, nil)
			if err != nil {
				t.Fatalf("handshake over IPv6: %v", err)
			}
			defer conn.CloseWithError(0, "")
			st := conn.ConnectionState()
			if st.TLS.NegotiatedProtocol != want.ALPN {
				t.Errorf("ALPN %q, ground truth %q", st.TLS.NegotiatedProtocol, want.ALPN)
			}
			m, err := doqQuery(conn)
			if err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
				t.Fatalf("DoQ query over IPv6: %v %v", m, err)
			}
			r := pop.Lookup(ep.Addr)
			if !r.Twin.IsValid() {
				return
			}
			conn4, _, err := dialDoQ(ctx, r.Twin, ep.Port, nil, false, nil)
			if err != nil {
				t.Fatalf("twin %s: %v", r.Twin, err)
			}
			defer conn4.CloseWithError(0, "")
			leaf6 := st.TLS.PeerCertificates[0].Raw
			leaf4 := conn4.ConnectionState().TLS.PeerCertificates[0].Raw
			if !bytes.Equal(leaf4, leaf6) {
				t.Errorf("twin %s presents another certificate than %s", r.Twin, ep.Addr)
			}
		})
	}
	if n == 0 {
		t.Fatal("no IPv6 DoQ endpoint in the population")
	}
}

// Plain DNS (UDP and TCP) and DoT on every IPv6 DNS server of the population, with the
// rcode the ground truth says; a QUIC port of a silent IPv6 address stays silent.
func TestIPv6PlainDNSAndDoT(t *testing.T) {
	pop := requireSimserver(t).Population
	pop6 := pop.IPv6()
	noPeers := testbed.PeersMissing(t, pop)
	for _, transport := range []string{"udp", "tcp"} {
		for _, a := range pop6.DNSServers(transport) {
			r := pop.Lookup(a)
			if r.Hostile != "" {
				continue
			}
			if r.Peer != "" && noPeers != nil {
				t.Logf("SKIP %s: a %s peer, and the testbed starts none: %v", a, r.Peer, noPeers)
				continue
			}
			c := &dns.Client{Net: transport, Timeout: 3 * time.Second}
			m, _, err := queryA(c, a)
			if err != nil {
				t.Errorf("%s %s: %v", transport, a, err)
				continue
			}
			if want := dns.StringToRcode[r.RCode]; m.Rcode != want {
				t.Errorf("%s %s: rcode %s, ground truth %s", transport, a, dns.RcodeToString[m.Rcode], r.RCode)
			}
		}
	}
	for _, r := range pop6.Records {
		if r.DoT == 0 || r.Hostile != "" {
			continue
		}
		if r.Peer != "" && noPeers != nil {
			t.Logf("SKIP %s: a %s peer, and the testbed starts none: %v", r.Prefix, r.Peer, noPeers)
			continue
		}
		a := r.Prefix.Addr()
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 3 * time.Second},
			Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"dot"}}}
		c, err := d.Dial("tcp", net.JoinHostPort(a.String(), strconv.Itoa(int(r.DoT))))
		if err != nil {
			t.Errorf("DoT %s: %v", a, err)
			continue
		}
		c.Close()
	}
	// An unlisted address of the IPv6 half: nothing answers.
	silent := pop6.Prefix.Addr().Next().Next().Next()
	if pop.Lookup(silent) != nil {
		t.Fatalf("%s is listed; pick another silent address", silent)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if conn, _, err := dialDoQ(ctx, silent, 853, nil, false, nil); err == nil {
		conn.CloseWithError(0, "")
		t.Errorf("silent %s answered a DoQ handshake", silent)
	}
}

// Through the delay line, DoQ handshakes over IPv6 take the round trips the ground truth
// predicts, as TestDoQRoundTripsThroughDelayLine asserts over IPv4.
func TestIPv6DoQRoundTripsThroughDelayLine(t *testing.T) {
	pop := requireSimserver(t).Population
	pop6 := pop.IPv6()
	for _, class := range []string{"doq", "doq-retry", "doq-bigchain-honour", "doq-bigchain-ignore"} {
		rs := pop6.ByClass(class)
		if len(rs) == 0 {
			t.Fatalf("no IPv6 %s", class)
		}
		r := rs[0]
		a, port := r.Prefix.Addr(), r.QUICPorts[0]
		path := pop.PathOf(a)
		if path.RTT < minCountableRTT || path.Loss > 0 {
			t.Fatalf("IPv6 %s is on path %s (%v, loss %v): cannot count round trips", class, path.Name, path.RTT, path.Loss)
		}
		client := population.ClientX25519
		t.Run(class, func(t *testing.T) {
			wantW, _ := pop6.HandshakeRTTs(a, port, population.ProtoDoQ, population.PhaseWarmup, client)
			wantM, _ := pop6.HandshakeRTTs(a, port, population.ProtoDoQ, population.PhaseMeasured, client)
			checkHandshakeRounds(t, a, port, true, path, wantW, wantM)
		})
	}
}
