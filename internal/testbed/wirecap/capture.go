package wirecap

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doqscan/doqscan/internal/ipv4hdr"
	"github.com/doqscan/doqscan/internal/testbed/netns"
)

// tcpdump settings of a capture.
const (
	tcpdumpBin = "tcpdump"
	// SnapLen holds a whole packet of the testbed's 1,500-byte links: the payload size
	// comes from the IP total length, but the QUIC packets coalesced into a datagram can
	// only be told by walking their headers (Packet.QUIC), and a server's Initial
	// carrying a hybrid key share's ServerHello is itself over a thousand bytes.
	SnapLen = 1600
	// BufferKiB is the kernel capture buffer (tcpdump -B): ~80,000 full packets.
	BufferKiB = 131072
	// VantageFilter is what ForVantage captures (the measurements' traffic).
	VantageFilter = "tcp or udp"
	// flushTimeout bounds the wait for the end-of-capture marker in Stop, and
	// exitTimeout the wait for tcpdump to exit after SIGINT.
	flushTimeout = 5 * time.Second
	exitTimeout  = 10 * time.Second
	// stderrLines is how many of tcpdump's stderr lines a capture keeps for errors.
	stderrLines = 40
)

// The end-of-capture marker. Stop injects one IPv4/UDP datagram into the captured
// interface (an AF_PACKET socket, so it appears on the wire as an outgoing frame) and
// waits until tcpdump has written it: the kernel fills the capture ring in order, so
// every packet captured before Stop was called has been written by then. Without it,
// tcpdump exits on SIGINT without reading what is still in its ring (tried: three
// datagrams sent right before SIGINT, 0 written without --immediate-mode).
//
// Each capture sends from a source port of its own (markerPort), so captures running
// at the same time on one interface never take each other's marker for their own; every
// marker is left out of the packets returned.
//
// Its addresses are in 127.0.0.0/8 (RFC 1122 §3.2.1.3: never forwarded, dropped as
// martian by any receiver), its link destination a locally administered MAC that no
// interface has (the receiving side drops it as PACKET_OTHERHOST): it goes nowhere.
var (
	markerSrc = netip.AddrFrom4([4]byte{127, 255, 255, 253})
	markerDst = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 255, 255, 254}), 9) // discard, RFC 863
	markerMAC = [6]byte{0x02, 'w', 'i', 'r', 'e', 'c'}
)

const markerPayload = "doqscan wirecap end-of-capture marker"

// ErrMissingTcpdump is returned by Start when tcpdump is not installed (a missing
// prerequisite: commands map it to exit code 5).
var ErrMissingTcpdump = errors.New("tcpdump not found in PATH (missing prerequisite: apt-get install tcpdump)")

// Stats are tcpdump's own counters, printed when it exits, plus what the parser saw.
// Callers must report drops: a dropped packet can make a span look longer or missing.
type Stats struct {
	Captured         int  // "packets captured" (written to the capture, the marker included)
	ReceivedByFilter int  // "packets received by filter"
	DroppedByKernel  int  // "packets dropped by kernel" (capture buffer full)
	DroppedByIface   int  // "packets dropped by interface" (when tcpdump reports it)
	Packets          int  // IPv4 TCP/UDP packets returned
	Skipped          int  // other records (not IPv4 TCP/UDP)
	Flushed          bool // the end-of-capture marker came through: nothing captured before Stop was lost
}

// Dropped is every packet tcpdump says it lost.
func (s Stats) Dropped() int { return s.DroppedByKernel + s.DroppedByIface }

// Capture is a running tcpdump.
type Capture struct {
	netns, iface string
	cmd          *exec.Cmd
	markerPort   uint16 // source port of this capture's marker

	listening chan struct{} // closed when tcpdump says "listening on"
	exited    chan struct{} // closed when the process has exited (waitErr set)
	waitErr   error
	errDone   chan struct{} // stderr fully read
	outDone   chan struct{} // stdout (the pcap stream) fully read
	marker    chan struct{} // one send per marker seen

	mu      sync.Mutex
	stderr  []string
	pkts    []Packet
	skipped int
	readErr error

	stopOnce sync.Once
	stopPkts []Packet
	stopSt   Stats
	stopErr  error
}

// Start runs tcpdump on iface inside network namespace ns ("" for the current one):
//
//	ip netns exec <ns> tcpdump -i <iface> -n -s 1600 --time-stamp-precision=nano -B 131072 \
//	    --immediate-mode -U -w - '(<filter>) or <end-of-capture marker>'
//
// and returns once tcpdump reports that it is listening. The capture is streamed
// through a pipe and decoded as it comes (no temporary file); it runs until Stop or
// until ctx ends (then tcpdump gets SIGINT). filter is a pcap-filter(7) expression
// ("" captures everything).
func Start(ctx context.Context, ns, iface, filter string) (*Capture, error) {
	if _, err := exec.LookPath(tcpdumpBin); err != nil {
		return nil, ErrMissingTcpdump
	}
	if iface == "" {
		return nil, errors.New("wirecap: no interface given")
	}
	args := []string{tcpdumpBin, "-i", iface, "-n", "-s", strconv.Itoa(SnapLen),
		"--time-stamp-precision=nano", "-B", strconv.Itoa(BufferKiB),
		"--immediate-mode", "-U", "-w", "-"}
	if filter != "" {
		args = append(args, fmt.Sprintf("(%s) or (udp and src host %s and dst host %s)",
			filter, markerSrc, markerDst.Addr()))
	}
	var cmd *exec.Cmd
	if ns == "" {
		cmd = exec.CommandContext(ctx, args[0], args[1:]...)
	} else {
		cmd = netns.Exec(ctx, ns, args...) // ip netns exec execs tcpdump: same PID
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = exitTimeout
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("wirecap: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("wirecap: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	c := &Capture{netns: ns, iface: iface, cmd: cmd, markerPort: uint16(1024 + rand.IntN(65536-1024)),
		listening: make(chan struct{}), exited: make(chan struct{}),
		errDone: make(chan struct{}), outDone: make(chan struct{}), marker: make(chan struct{}, 1)}
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("wirecap: starting tcpdump: %w", err)
	}
	go c.readStderr(errR)
	go c.readPcap(outR)
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	select {
	case <-c.listening:
		return c, nil
	case <-c.exited:
		<-c.errDone
		return nil, fmt.Errorf("wirecap: tcpdump on %s exited before listening (%v): %s", c.where(), c.waitErr, c.stderrTail())
	case <-ctx.Done():
		<-c.exited // cmd.Cancel sent SIGINT
		return nil, fmt.Errorf("wirecap: waiting for tcpdump on %s: %w", c.where(), ctx.Err())
	}
}

// ForVantage captures the traffic of vantage i of testbed instance `instance` on the
// router side of its link (netns.Instance.RouterIf(i) in the router namespace): a
// client's packet is stamped right after the client transmitted it (before the delay
// line), a server's packet right after the delay line released it towards the client.
func ForVantage(ctx context.Context, instance string, vantage int) (*Capture, error) {
	if err := netns.ValidName(instance); err != nil {
		return nil, err
	}
	if vantage < 0 || vantage >= netns.MaxVantages {
		return nil, fmt.Errorf("wirecap: vantage %d out of range 0..%d", vantage, netns.MaxVantages-1)
	}
	in := netns.Instance{Name: instance}
	return Start(ctx, in.Router(), in.RouterIf(vantage), VantageFilter)
}

// ForInternet captures on the internet namespace's side of the router<->internet link
// (netns.Instance.InetIf in <inst>-inet), where every vantage's packets arrive after the
// delay line and the servers' replies leave before it. With ForVantage it splits a span:
// the span's first and last packets at the vantage's link are found here with
// Index.Across, and the server's share is its turns between them (Index.Turns: for a
// single-flight exchange, query arrival to reply departure; a Retry handshake has two
// turns). client = measured − wire(vantage), server = its turns, delay line = the rest
// minus the emulated RTT and the client's own turns.
func ForInternet(ctx context.Context, instance string) (*Capture, error) {
	if err := netns.ValidName(instance); err != nil {
		return nil, err
	}
	in := netns.Instance{Name: instance}
	return Start(ctx, in.Inet(), in.InetIf(), VantageFilter)
}

func (c *Capture) where() string {
	if c.netns == "" {
		return c.iface
	}
	return c.netns + "/" + c.iface
}

// readStderr keeps tcpdump's messages and signals "listening on".
func (c *Capture) readStderr(r io.ReadCloser) {
	defer close(c.errDone)
	defer r.Close()
	sc := bufio.NewScanner(r)
	heard := false
	for sc.Scan() {
		line := sc.Text()
		c.mu.Lock()
		c.stderr = append(c.stderr, line)
		if len(c.stderr) > stderrLines {
			c.stderr = c.stderr[len(c.stderr)-stderrLines:]
		}
		c.mu.Unlock()
		if !heard && strings.Contains(line, "listening on") {
			heard = true
			close(c.listening)
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// readPcap decodes the pcap stream as tcpdump writes it.
func (c *Capture) readPcap(r io.ReadCloser) {
	defer close(c.outDone)
	defer r.Close()
	fail := func(err error) {
		c.mu.Lock()
		c.readErr = err
		c.mu.Unlock()
		_, _ = io.Copy(io.Discard, r) // keep tcpdump from blocking on a full pipe
	}
	rd, err := NewReader(bufio.NewReaderSize(r, 1<<16))
	if err != nil {
		fail(err) // reported by Stop (tcpdump's own error, if it failed, comes first)
		return
	}
	for {
		p, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fail(err)
			break
		}
		if p.Proto == ProtoUDP && p.Src.Addr() == markerSrc && p.Dst == markerDst {
			if p.Src.Port() == c.markerPort {
				select {
				case c.marker <- struct{}{}:
				default:
				}
			}
			continue // ours or another capture's
		}
		c.mu.Lock()
		c.pkts = append(c.pkts, p)
		c.mu.Unlock()
	}
	c.mu.Lock()
	c.skipped = rd.Skipped
	c.mu.Unlock()
}

func (c *Capture) stderrTail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.stderr, " | ")
}

// Done is closed once tcpdump has exited (after Stop, or when the context of Start ended).
func (c *Capture) Done() <-chan struct{} { return c.exited }

// Stop flushes the capture (see the end-of-capture marker), stops tcpdump with SIGINT
// and returns the IPv4 TCP/UDP packets in capture order with tcpdump's counters. A
// second call returns the same.
func (c *Capture) Stop() ([]Packet, Stats, error) {
	c.stopOnce.Do(func() { c.stopPkts, c.stopSt, c.stopErr = c.stop() })
	return c.stopPkts, c.stopSt, c.stopErr
}

func (c *Capture) stop() ([]Packet, Stats, error) {
	var st Stats
	var errs []error
	select {
	case <-c.exited: // ctx ended, or tcpdump died
	default:
		if err := c.injectMarker(); err != nil {
			errs = append(errs, fmt.Errorf("end-of-capture marker: %w", err))
		} else {
			t := time.NewTimer(flushTimeout)
			select {
			case <-c.marker:
				st.Flushed = true
			case <-c.exited:
			case <-t.C:
			}
			t.Stop()
		}
		_ = c.cmd.Process.Signal(os.Interrupt)
	}
	t := time.NewTimer(exitTimeout)
	select {
	case <-c.exited:
	case <-t.C:
		_ = c.cmd.Process.Kill()
		<-c.exited
		errs = append(errs, fmt.Errorf("tcpdump did not exit %v after SIGINT (killed)", exitTimeout))
	}
	t.Stop()
	<-c.errDone
	<-c.outDone
	if c.waitErr != nil {
		errs = append(errs, fmt.Errorf("tcpdump: %w: %s", c.waitErr, c.stderrTail()))
	}
	c.mu.Lock()
	pkts, readErr := c.pkts, c.readErr
	st.Skipped = c.skipped
	lines := append([]string(nil), c.stderr...)
	c.mu.Unlock()
	if readErr != nil {
		errs = append(errs, fmt.Errorf("decoding the capture: %w", readErr))
	}
	parseCounters(lines, &st)
	st.Packets = len(pkts)
	if err := errors.Join(errs...); err != nil {
		return pkts, st, fmt.Errorf("wirecap on %s: %w", c.where(), err)
	}
	return pkts, st, nil
}

// counterRE matches tcpdump's exit summary ("12 packets captured", "0 packets dropped
// by kernel", ...).
var counterRE = regexp.MustCompile(`^(\d+) packets? (captured|received by filter|dropped by kernel|dropped by interface)$`)

func parseCounters(lines []string, st *Stats) {
	for _, l := range lines {
		m := counterRE.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		switch m[2] {
		case "captured":
			st.Captured = n
		case "received by filter":
			st.ReceivedByFilter = n
		case "dropped by kernel":
			st.DroppedByKernel = n
		case "dropped by interface":
			st.DroppedByIface = n
		}
	}
}

// injectMarker transmits the end-of-capture marker on the captured interface.
func (c *Capture) injectMarker() error {
	send := func() error {
		ifi, err := net.InterfaceByName(c.iface)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0) // send only
		if err != nil {
			return fmt.Errorf("AF_PACKET socket: %w", err)
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrLinklayer{Protocol: htons(etherTypeIPv4), Ifindex: ifi.Index, Halen: 6}
		copy(sa.Addr[:], markerMAC[:])
		if err := unix.Sendto(fd, markerPacket(c.markerPort), 0, sa); err != nil {
			return fmt.Errorf("sendto %s: %w", c.iface, err)
		}
		return nil
	}
	if c.netns == "" {
		return send()
	}
	return netns.Do(c.netns, send)
}

// markerPacket builds a marker datagram from source port sport: IPv4 (RFC 791) + UDP
// (RFC 768, checksum 0: none) + markerPayload.
func markerPacket(sport uint16) []byte {
	n := ipv4hdr.MinHeaderLen + udpHeaderLen + len(markerPayload)
	b := make([]byte, n)
	b[0] = ipv4hdr.Version<<4 | ipv4hdr.MinHeaderLen/4
	binary.BigEndian.PutUint16(b[ipv4hdr.TotalLenOffset:], uint16(n))
	b[ipv4hdr.TTLOffset] = 1
	b[ipv4hdr.ProtoOffset] = ProtoUDP
	src, dst := markerSrc.As4(), markerDst.Addr().As4()
	copy(b[ipv4hdr.SrcOffset:], src[:])
	copy(b[ipv4hdr.DstOffset:], dst[:])
	binary.BigEndian.PutUint16(b[ipv4hdr.ChecksumOffset:], ipv4hdr.Checksum(b[:ipv4hdr.MinHeaderLen]))
	u := b[ipv4hdr.MinHeaderLen:]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], markerDst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(udpHeaderLen+len(markerPayload)))
	copy(u[udpHeaderLen:], markerPayload)
	return b
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
