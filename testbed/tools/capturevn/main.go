// Command capturevn captures real QUIC Version Negotiation packets from the
// third-party stacks the testbed runs (quic-go via CoreDNS, quinn via hickory-dns,
// aioquic, ngtcp2), for the probe package's parser tests.
//
// It starts each stack on a loopback address with internal/testbed/peers, sends one
// 1200-byte long-header Initial carrying a reserved version (RFC 9000 §15: 0x?a?a?a?a)
// with an 8..20-byte DCID, and writes the first UDP datagram that comes back to
// <out>/<stack>.bin, byte for byte, plus <out>/<stack>.txt (hex and parsed fields).
//
//	go run ./testbed/tools/capturevn -out internal/probe/testdata/peervn
//
// Needs the peers installed (scripts/install-peers.sh). Only loopback addresses are used.
package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/certs/certtest"
	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/quicver"
	"github.com/doqscan/doqscan/internal/testbed/peers"
)

// Probe fields (RFC 9000 §17.2 long header, §14.1 1200-byte minimum for Initials,
// §17.2 connection IDs up to 20 bytes; FIELD-NOTES: servers ignore datagrams below
// 1200 bytes or with a DCID outside 8..20 bytes).
const (
	reservedVersion = 0x1a2a3a4a // RFC 9000 §15: reserved versions 0x?a?a?a?a force negotiation
	datagramSize    = 1200       // RFC 9000 §14.1
	longHeaderForm  = 0x80       // RFC 9000 §17.2: header form bit
	fixedBit        = 0x40       // RFC 9000 §17.2: fixed bit
	initialType     = 0x00       // RFC 9000 §17.2.2: packet type Initial (bits 0x30)
	pnLen4          = 0x03       // packet number length 4 (bits 0x03)
)

var (
	dcid = []byte("doqscan-vnprobe!") // 16 bytes, echoed back as the VN packet's SCID
	scid = []byte("capturvn")         // 8 bytes, echoed back as the VN packet's DCID
)

func main() {
	out := flag.String("out", "internal/probe/testdata/peervn", "directory for <stack>.bin and <stack>.txt")
	var timeout time.Duration
	cli.DurationVar(flag.CommandLine, &timeout, "timeout", 3*time.Second, time.Millisecond, time.Minute, "wait this long for each reply")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), *out, timeout, log); err != nil {
		log.Error("capturevn failed", "err", err)
		os.Exit(1)
	}
}

type target struct {
	stack string
	spec  peers.Spec
}

func run(ctx context.Context, out string, timeout time.Duration, log *slog.Logger) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "capturevn")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cert, key, err := selfSigned(tmp)
	if err != nil {
		return err
	}
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	targets := []target{
		{"quic-go", peers.Spec{Kind: peers.CoreDNS, Addr: a("127.77.0.1"), DNSPort: 53, QUICPorts: []uint16{7841}, CertFile: cert, KeyFile: key}},
		{"quinn", peers.Spec{Kind: peers.Hickory, Addr: a("127.77.0.2"), QUICPorts: []uint16{7842}, CertFile: cert, KeyFile: key}},
		{"aioquic", peers.Spec{Kind: peers.Aioquic, Addr: a("127.77.0.3"), QUICPorts: []uint16{7843}, CertFile: cert, KeyFile: key,
			Upstream: netip.AddrPortFrom(a("127.77.0.1"), 53)}},
		{"ngtcp2", peers.Spec{Kind: peers.Ngtcp2, Addr: a("127.77.0.4"), QUICPorts: []uint16{7844}, CertFile: cert, KeyFile: key}},
	}
	specs := make([]peers.Spec, len(targets))
	for i, t := range targets {
		specs[i] = t.spec
	}
	set, err := peers.Start(ctx, peers.Config{RunDir: filepath.Join(tmp, "run"), Log: log}, specs)
	if err != nil {
		return err
	}
	defer set.Stop()

	probe := initial()
	var errs []error
	for _, t := range targets {
		reply, err := exchange(netip.AddrPortFrom(t.spec.Addr, t.spec.QUICPorts[0]), probe, timeout)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t.stack, err))
			continue
		}
		desc, err := describe(reply)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: reply is not a Version Negotiation packet: %w", t.stack, err))
		}
		bin := filepath.Join(out, t.stack+".bin")
		if err := os.WriteFile(bin, reply, 0o644); err != nil {
			return err
		}
		txt := fmt.Sprintf("stack: %s (%s %s)\nprobe: %d-byte Initial, version 0x%08x, DCID %q, SCID %q\nreply: %d bytes\n%s\nhex:\n%s",
			t.stack, t.spec.Kind, peers.Versions[t.spec.Kind], len(probe), reservedVersion, dcid, scid, len(reply), desc, hex.Dump(reply))
		if err := os.WriteFile(filepath.Join(out, t.stack+".txt"), []byte(txt), 0o644); err != nil {
			return err
		}
		log.Info("captured", "stack", t.stack, "bytes", len(reply), "file", bin)
	}
	return errors.Join(errs...)
}

// initial builds the probe: a long-header Initial with a reserved version, an empty
// token, a 4-byte packet number and zero padding up to 1200 bytes. Only the invariant
// fields (RFC 8999 §5.1) matter: the server cannot read the rest of an unknown version.
func initial() []byte {
	b := []byte{longHeaderForm | fixedBit | initialType | pnLen4}
	b = binary.BigEndian.AppendUint32(b, reservedVersion)
	b = append(b, byte(len(dcid)))
	b = append(b, dcid...)
	b = append(b, byte(len(scid)))
	b = append(b, scid...)
	b = append(b, 0x00) // token length (varint 0)
	rest := datagramSize - len(b) - 2
	b = binary.BigEndian.AppendUint16(b, 0x4000|uint16(rest)) // 2-byte varint length
	b = append(b, 0, 0, 0, 0)                                 // packet number
	return append(b, make([]byte, datagramSize-len(b))...)
}

func exchange(to netip.AddrPort, probe []byte, timeout time.Duration) ([]byte, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.Write(probe); err != nil {
		return nil, err
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return nil, fmt.Errorf("no reply within %v: %w", timeout, err)
	}
	return buf[:n], nil
}

// describe parses a Version Negotiation packet (RFC 9000 §17.2.1) for the .txt file.
func describe(p []byte) (string, error) {
	if len(p) < 7 || p[0]&longHeaderForm == 0 {
		return "", errors.New("not a long header")
	}
	if v := binary.BigEndian.Uint32(p[1:5]); v != 0 {
		return "", fmt.Errorf("version 0x%08x, want 0", v)
	}
	i := 5
	d := int(p[i])
	if i+1+d >= len(p) {
		return "", errors.New("truncated DCID")
	}
	dc := p[i+1 : i+1+d]
	i += 1 + d
	s := int(p[i])
	if i+1+s > len(p) {
		return "", errors.New("truncated SCID")
	}
	sc := p[i+1 : i+1+s]
	i += 1 + s
	if (len(p)-i)%4 != 0 {
		return "", fmt.Errorf("%d version bytes, not a multiple of 4", len(p)-i)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "first byte: 0x%02x (unused bits are random)\nDCID: %q (echoes the probe's SCID: %v)\nSCID: %q (echoes the probe's DCID: %v)\nsupported versions:",
		p[0], dc, string(dc) == string(scid), sc, string(sc) == string(dcid))
	for ; i < len(p); i += 4 {
		v := binary.BigEndian.Uint32(p[i:])
		fmt.Fprintf(&b, " 0x%08x%s", v, versionName(v))
	}
	return b.String(), nil
}

// versionName annotates a version that quicver names ("(v1)", "(grease)", "(draft-29)").
func versionName(v uint32) string {
	if n := quicver.Name(v); n != fmt.Sprintf("0x%08x", v) {
		return "(" + n + ")"
	}
	return ""
}

func selfSigned(dir string) (cert, key string, err error) {
	c, k, err := certtest.SelfSigned(certtest.ECDSA, "test.com")
	if err != nil {
		return "", "", err
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	return cert, key, certtest.WriteFiles(cert, key, [][]byte{c.Raw}, k)
}
