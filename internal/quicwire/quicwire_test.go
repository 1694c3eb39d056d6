package quicwire

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/certs/certtest"
	"github.com/doqscan/doqscan/internal/quicver"
)

// recordingConn keeps a copy of every datagram read.
type recordingConn struct {
	net.PacketConn
	mu   sync.Mutex
	read [][]byte
}

func (c *recordingConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, a, err := c.PacketConn.ReadFrom(p)
	if err == nil {
		c.mu.Lock()
		c.read = append(c.read, append([]byte(nil), p[:n]...))
		c.mu.Unlock()
	}
	return n, a, err
}

// handshakeDatagrams runs one quic-go handshake of version v on loopback and returns the
// datagrams the client read.
func handshakeDatagrams(t *testing.T, v quic.Version) [][]byte {
	t.Helper()
	leaf, key := certtest.SelfSignedLeaf(t, certtest.ECDSA, "localhost")
	srvConf := &tls.Config{Certificates: []tls.Certificate{certtest.TLS(leaf, key)}, NextProtos: []string{"doq"}}
	qconf := &quic.Config{Versions: []quic.Version{v}}
	ln, err := quic.ListenAddr("127.0.0.1:0", srvConf, qconf)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		if c, err := ln.Accept(ctx); err == nil {
			<-c.Context().Done()
		}
	}()
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	rc := &recordingConn{PacketConn: udp}
	tr := &quic.Transport{Conn: rc}
	defer tr.Close()
	conn, err := tr.Dial(ctx, ln.Addr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"doq"},
		CurvePreferences: []tls.CurveID{tls.X25519}}, qconf)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.CloseWithError(0, "")
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.read
}

// TestPacketsOfARealHandshake: quic-go's server flight, v1 and v2, read without keys:
// the first datagram is an Initial (the ServerHello) with Handshake packets coalesced
// behind it, the lengths of a datagram's packets add up to the datagram, and a snap
// length that cuts the datagram after the first packet's header still gives its type.
func TestPacketsOfARealHandshake(t *testing.T) {
	for _, v := range []quic.Version{quic.Version1, quic.Version2} {
		t.Run(v.String(), func(t *testing.T) {
			dgs := handshakeDatagrams(t, v)
			if len(dgs) == 0 {
				t.Fatal("no datagram read")
			}
			first := Packets(dgs[0], 0)
			if len(first) < 2 || first[0].Type != Initial || first[1].Type != Handshake {
				t.Fatalf("first datagram (%d bytes): %+v, want an Initial, then Handshake", len(dgs[0]), first)
			}
			if first[0].Version != uint32(v) {
				t.Errorf("version %#x, want %#x", first[0].Version, uint32(v))
			}
			handshake := 0
			scid := string(first[0].SCID)
			if scid == "" {
				t.Errorf("the server's Initial shows no SCID: %+v", first[0])
			}
			for i, dg := range dgs {
				pkts := Packets(dg, 0)
				sum := 0
				for _, p := range pkts {
					sum += p.Len
					if p.Type == Unknown {
						t.Errorf("datagram %d: an unknown packet: %+v", i, pkts)
					}
					if p.Type != Short && string(p.SCID) != scid {
						t.Errorf("datagram %d: %v packet with SCID %x, the connection's is %x", i, p.Type, p.SCID, scid)
					}
				}
				if sum != len(dg) {
					t.Errorf("datagram %d: packets %+v add up to %d bytes of %d", i, pkts, sum, len(dg))
				}
				if Has(pkts, Handshake) {
					handshake++
				}
			}
			if handshake == 0 {
				t.Error("no datagram with a Handshake packet")
			}
			cut := Packets(dgs[0][:first[0].Len+5], len(dgs[0]))
			if len(cut) != 2 || cut[1].Type != Handshake || cut[1].Len != 0 {
				t.Errorf("cut after the second packet's version: %+v, want the Initial whole and a Handshake of unknown length", cut)
			}
			if cut := Packets(dgs[0][:first[0].Len], len(dgs[0])); len(cut) != 1 {
				t.Errorf("cut after the first packet: %+v, want only the Initial", cut)
			}
			if other := Packets(handshakeDatagrams(t, v)[0], 0); len(other) == 0 || string(other[0].SCID) == scid {
				t.Errorf("a second connection's first packet %+v has the first's SCID %x", other, scid)
			}
		})
	}
}

func TestPacketsShortAndUnknown(t *testing.T) {
	if p := Packets([]byte{0x40, 1, 2, 3}, 0); len(p) != 1 || p[0].Type != Short || p[0].Len != 4 {
		t.Errorf("short header: %+v", p)
	}
	if p := Packets([]byte{0x40, 1, 2}, 100); len(p) != 1 || p[0].Len != 100 {
		t.Errorf("short header of a 100-byte datagram cut at 3: %+v", p)
	}
	if p := Packets([]byte{0xc0, 0x1a, 0x2a, 0x3a, 0x4a, 0, 0}, 0); len(p) != 1 || p[0].Type != Unknown || p[0].Version != quicver.ProbeGrease {
		t.Errorf("unknown version: %+v", p)
	}
	// RFC 8999: the connection IDs of any version, up to 255 bytes each.
	long := append([]byte{0xc0, 0x1a, 0x2a, 0x3a, 0x4a, 2, 9, 9, 21}, make([]byte, 21)...)
	long[len(long)-1] = 7
	if p := Packets(long, 1200); len(p) != 1 || p[0].Type != Unknown || len(p[0].SCID) != 21 || p[0].SCID[20] != 7 {
		t.Errorf("unknown version's 21-byte SCID: %+v", p)
	}
	if p := Packets(long[:len(long)-1], 1200); len(p) != 1 || p[0].SCID != nil {
		t.Errorf("an SCID cut short: %+v", p)
	}
	copy(long[1:5], []byte{0, 0, 0, 1}) // QUIC v1 bounds connection IDs to 20 bytes
	if p := Packets(long, 1200); len(p) != 1 || p[0].Type != Initial || p[0].SCID != nil || p[0].Len != 0 {
		t.Errorf("v1 with a 21-byte SCID: %+v", p)
	}
	if p := Packets([]byte{0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 0); len(p) != 1 || p[0].Type != VersionNegotiation {
		t.Errorf("version negotiation: %+v", p)
	}
	if p := Packets(nil, 0); len(p) != 0 {
		t.Errorf("empty datagram: %+v", p)
	}
}

// FuzzPackets: any bytes, any claimed size: no panic, lengths within the datagram.
func FuzzPackets(f *testing.F) {
	f.Add([]byte{0xc0, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0x40, 0x10}, 0)
	f.Add([]byte{0xe0, 0, 0, 0, 1, 0, 0, 0x44, 0}, 2000)
	f.Add([]byte{0xd0, 0x6b, 0x33, 0x43, 0xcf, 20}, 1200)
	f.Fuzz(func(t *testing.T, b []byte, size int) {
		if size < 0 || size > 1<<16 {
			size = 0
		}
		total := 0
		for _, p := range Packets(b, size) {
			if p.Len < 0 {
				t.Fatalf("negative length: %+v", p)
			}
			if len(p.SCID) > 255 || (len(p.SCID) > maxCIDLen && p.Type != Unknown && p.Type != VersionNegotiation) {
				t.Fatalf("an SCID of %d bytes: %+v", len(p.SCID), p)
			}
			total += p.Len
		}
		if total > max(size, len(b)) {
			t.Fatalf("packets of %d bytes in a datagram of %d", total, max(size, len(b)))
		}
	})
}
