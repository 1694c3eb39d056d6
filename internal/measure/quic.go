package measure

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/doqscan/doqscan/internal/kstamp"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
	"github.com/doqscan/doqscan/internal/measure/rtt"
)

// qlogTraceWait bounds how long we wait for quic-go to flush a connection's qlog after
// closing it (the writer drains a buffered channel); qlogTraceGrace bounds it further to
// a little after the exchange's deadline, so that an exchange ends at its deadline even
// when its writer is starved of CPU (then the qlog ends where the writer got to and is
// marked truncated).
const (
	qlogTraceWait  = time.Second
	qlogTraceGrace = 50 * time.Millisecond
)

// maxTraces bounds the traces of one dial: quic-go starts a new connection (and a new
// trace) after Version Negotiation (RFC 9000 §6.2); a hostile server cannot make more.
const maxTraces = 4

// Receive windows of a DoQ/DoH3 connection: a stream holds the largest DoQ message
// (65,535 bytes and its length prefix, RFC 9250 §4.2) or DoH response without waiting for
// a window update.
const (
	quicStreamWindow = 128 << 10
	quicConnWindow   = 256 << 10
)

// QlogLimit bounds the qlog of one exchange in memory (all its connection attempts
// together, the truncation record included): a normal exchange's qlog is 10-40 KB, a
// hostile server's flood of packets or frames would otherwise grow it without end (every
// packet and every skipped HTTP/3 frame is a record). A qlog that reaches the bound ends
// with its last complete record and a qlogana.TruncatedEvent record
// (Result.QlogTruncated); events after the cut are dropped before they are encoded.
const QlogLimit = 256 << 10

// qlogMarkReserve is the part of QlogLimit kept for the truncation record (it takes
// ~110 bytes) and the arrivals record (qlogana.ArrivalsRecord of at most
// kstamp.MaxDatagrams datagrams, ~52 bytes each).
const qlogMarkReserve = 256 + 64*kstamp.MaxDatagrams

// qlogBuffer collects the JSON-SEQ qlogs of one dial in memory: one trace per
// connection attempt, concatenated in order (each trace has its own header with a
// wall-clock reference time, which qlogana uses to put them on one time line). The
// traces share one budget: once it is spent, every later event of every trace is dropped.
type qlogBuffer struct {
	mu      sync.Mutex // guards everything below and every trace's buffer
	traces  []*traceBuf
	limit   int // bytes for records (QlogLimit less the truncation record's reserve)
	used    int
	cutAt   time.Time // when the budget ran out (zero: never)
	dropped int64     // records encoded but cut
	full    atomic.Bool
	skipped atomic.Int64 // events dropped before encoding
	odcid   []byte       // the first trace's original destination connection ID
	// deadline is the exchange's (zero: none): bytes waits for the writers until
	// qlogTraceGrace after it.
	deadline time.Time
}

type traceBuf struct {
	q        *qlogBuffer
	buf      bytes.Buffer
	recStart int       // offset of the record being written
	created  time.Time // the trace's reference time, within microseconds
	closed   chan struct{}
	once     sync.Once
}

// Write appends the encoder's output. Records start with a write beginning with the
// record separator (qlogwriter writes it alone, or at the head of the trace header; the
// JSON inside never holds it). The write that would pass the budget cuts the trace back
// to the end of its last complete record; everything after is discarded.
func (t *traceBuf) Write(p []byte) (int, error) {
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	begins := len(p) > 0 && p[0] == qlogwriter.RecordSeparator
	if q.full.Load() {
		if begins {
			q.dropped++
		}
		return len(p), nil
	}
	if begins {
		t.recStart = t.buf.Len()
	}
	if q.used+len(p) > q.limit {
		q.full.Store(true)
		q.cutAt = time.Now()
		q.used -= t.buf.Len() - t.recStart
		t.buf.Truncate(t.recStart)
		q.dropped++
		return len(p), nil
	}
	t.buf.Write(p)
	q.used += len(p)
	return len(p), nil
}

func (t *traceBuf) Close() error {
	t.once.Do(func() { close(t.closed) })
	return nil
}

func newQlogBuffer() *qlogBuffer { return newQlogBufferLimit(QlogLimit) }

func newQlogBufferLimit(limit int) *qlogBuffer {
	return &qlogBuffer{limit: max(limit-qlogMarkReserve, 0)}
}

// tracer is a quic.Config.Tracer writing the client connection's qlog into b.
func (b *qlogBuffer) tracer(_ context.Context, isClient bool, odcid quic.ConnectionID) qlogwriter.Trace {
	t := &traceBuf{q: b, closed: make(chan struct{}), created: time.Now()}
	b.mu.Lock()
	if len(b.traces) >= maxTraces {
		b.mu.Unlock()
		return nil
	}
	if len(b.traces) == 0 {
		b.odcid = odcid.Bytes()
	}
	b.traces = append(b.traces, t)
	b.mu.Unlock()
	fs := qlogwriter.NewConnectionFileSeq(t, isClient, odcid) // writes the header (t.Write locks b.mu)
	go fs.Run()
	return &boundedTrace{fs: fs, q: b}
}

// boundedTrace hands out recorders that drop events once the qlog is full, so that a
// flood costs neither encoding nor the connection goroutine's wait on the writer.
type boundedTrace struct {
	fs *qlogwriter.FileSeq
	q  *qlogBuffer
}

func (t *boundedTrace) AddProducer() qlogwriter.Recorder {
	r := t.fs.AddProducer()
	if r == nil {
		return nil
	}
	return &boundedRecorder{Recorder: r, q: t.q}
}

type boundedRecorder struct {
	qlogwriter.Recorder
	q *qlogBuffer
}

func (r *boundedRecorder) RecordEvent(e qlogwriter.Event) {
	if r.q.full.Load() {
		r.q.skipped.Add(1)
		return
	}
	r.Recorder.RecordEvent(e)
}

// bytes waits for every trace to be closed (its connection is closed), at most until
// qlogTraceGrace after the exchange's deadline, and returns them followed by extra
// (doqscan's own records; nothing when there is no trace), and whether they were cut
// (then a qlogana.TruncatedEvent record ends them): by the budget, or because a writer
// had not finished (its trace ends with its last complete record).
func (b *qlogBuffer) bytes(extra []byte) ([]byte, bool) {
	b.mu.Lock()
	traces := append([]*traceBuf(nil), b.traces...)
	b.mu.Unlock()
	b.mu.Lock()
	wait := qlogTraceWait
	if !b.deadline.IsZero() {
		wait = min(wait, max(time.Until(b.deadline.Add(qlogTraceGrace)), 0))
	}
	b.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	unfinished := false
	for _, t := range traces {
		select {
		case <-t.closed:
			continue
		default:
		}
		select {
		case <-t.closed:
		case <-timer.C:
			unfinished = true
		}
		if unfinished {
			break
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []byte
	var last *traceBuf
	for _, t := range traces {
		p := t.buf.Bytes()
		if unfinished && !isClosed(t.closed) && len(p) > 0 && p[len(p)-1] != '\n' {
			p = p[:t.recStart] // the writer is inside a record: keep the complete ones
		}
		if len(p) > 0 {
			out = append(out, p...)
			last = t
		}
	}
	if len(out) > 0 {
		out = append(out, extra...)
	}
	if !b.full.Load() && !unfinished {
		return out, false
	}
	cutAt := b.cutAt
	if !b.full.Load() {
		cutAt = time.Now()
	}
	at := 0.0
	if last != nil && cutAt.After(last.created) {
		at = float64(cutAt.Sub(last.created).Nanoseconds()) / 1e6
	}
	return append(out, qlogana.TruncatedRecord(at, b.limit+qlogMarkReserve, b.dropped+b.skipped.Load())...), true
}

// finishPhases, when set (by benchmarks), receives when finishQUIC began for res and how
// long its steps took: closing the connection, collecting the qlog, analysing it.
var finishPhases func(res *Result, began time.Time, closing, qlogWait, analysis time.Duration)

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// quicConn is a dialled QUIC connection with the transport and the socket under it,
// which close with it, and the socket's kernel timestamps (internal/kstamp; empty on a
// socket without them, where the qlog's times are taken instead).
type quicConn struct {
	*quic.Conn
	tr  *quic.Transport
	pc  net.PacketConn
	log *kstamp.Log
}

func (c *quicConn) close() {
	_ = c.CloseWithError(0, "")
	_ = c.tr.Close()
	_ = c.pc.Close()
}

// dialQUIC dials a QUIC connection for DoQ/DoH3 with req's state: the warm-up's QUIC
// version and NEW_TOKEN token (so neither Version Negotiation nor Retry can affect the
// measured handshake, the study's Sect. 2), and its session ticket in resumed/0-RTT modes.
// The handshake time runs from the first Initial's send to the arrival (kernel
// timestamp) of the datagram whose packet completed the handshake, in every mode (0-RTT
// too, where the dial returns before the handshake completes): the qlog names that
// datagram by its checksum (finishQUIC), so neither building the ClientHello, nor our
// processing of the server's flight, nor a datagram that arrived after it (0.5-RTT data,
// an answer to 0-RTT data) is counted. Until finishQUIC has the qlog, and where there is
// none (qlog false: no qlog is recorded), the handshake ends at the last arrival before
// the dial returned.
func dialQUIC(ctx context.Context, req *Request, res *Result, alpn []string, ql *qlogBuffer, qlog bool) (*quicConn, error) {
	tconf, err := tlsConfig(req, alpn)
	if err != nil {
		return nil, err
	}
	qconf := &quic.Config{
		HandshakeIdleTimeout: req.timeout(),
		MaxIdleTimeout:       req.timeout(),
		Tracer:               ql.tracer,
		// Fixed receive windows: what a server can make us buffer (e.g. out of order)
		// stays small, where quic-go's auto-tuning would grow it to 6 MB per stream and
		// 15 MB per connection for a fast sender.
		InitialStreamReceiveWindow:     quicStreamWindow,
		MaxStreamReceiveWindow:         quicStreamWindow,
		InitialConnectionReceiveWindow: quicConnWindow,
		MaxConnectionReceiveWindow:     quicConnWindow,
	}
	qconf.InitialPacketSize = req.InitialPacketSize
	if !qlog {
		qconf.Tracer = nil
	}
	var tokens *recordingTokenStore
	if req.Peer != nil {
		tokens = &recordingTokenStore{TokenStore: req.Peer.Tokens}
		qconf.TokenStore = tokens
		if v := req.Peer.version(); v != 0 {
			qconf.Versions = []quic.Version{v}
		}
	}
	if d, ok := ctx.Deadline(); ok {
		ql.mu.Lock()
		ql.deadline = d
		ql.mu.Unlock()
	}
	res.StartedAt = time.Now()
	defer func() {
		// quic-go's qlog does not log the token of sent packets: ask the store.
		res.TokenUsed = boolp(tokens != nil && tokens.popped())
	}()
	listen := req.listenPacket
	if listen == nil {
		listen = listenStamped
	}
	pc, log, err := listen(req.Addr)
	if err != nil {
		return nil, err
	}
	res.Local = AddrPortOf(pc.LocalAddr())
	tr := &quic.Transport{Conn: pc}
	qc := &quicConn{tr: tr, pc: pc, log: log}
	log.Arm()
	udpAddr := net.UDPAddrFromAddrPort(req.Addr)
	var conn *quic.Conn
	if req.Mode == Mode0RTT {
		conn, err = tr.DialEarly(ctx, udpAddr, tconf, qconf)
	} else {
		conn, err = tr.Dial(ctx, udpAddr, tconf, qconf)
	}
	if err != nil {
		_ = tr.Close()
		_ = pc.Close()
		return nil, err
	}
	qc.Conn = conn
	if req.Mode != Mode0RTT {
		done := time.Now()
		res.HandshakeWall, res.HasHandshake = done.Sub(res.StartedAt), true
		if first, ok := log.FirstSent(); ok {
			if k, ok := log.Arrival(first, done); ok {
				res.Handshake, res.handshakeStamped = k.Sub(first), true
				res.CryptoFrom, res.CryptoTo = first, k
			}
		}
		recordQUICState(req, res, conn)
	}
	return qc, nil
}

// arrivalsRecord is the qlog record of when the connection's long-header datagrams
// reached the host (qlogana.ArrivalsEvent), empty when there were none: with it the
// analysis times the server's packets by their arrival, not by when our busy client got
// to them, in the stored qlog as in a file `qlogs export` writes.
func arrivalsRecord(log *kstamp.Log) []byte {
	ds := log.Datagrams()
	if len(ds) == 0 {
		return nil
	}
	arr := make([]qlogana.Arrival, len(ds))
	for i, d := range ds {
		arr[i] = qlogana.Arrival{Checksum: d.Sum, At: d.At}
	}
	return qlogana.ArrivalsRecord(arr)
}

// stampHandshake ends the handshake at the kernel arrival of the datagram the qlog says
// completed it (Trace.CompletedBy), from the socket's first write; false when the log
// has no such datagram (then the handshake keeps what it had).
func stampHandshake(res *Result, log *kstamp.Log, tr *qlogana.Trace) bool {
	sum, ok := tr.CompletedBy()
	if !ok || log == nil {
		return false
	}
	first, ok := log.FirstSent()
	if !ok {
		return false
	}
	k, ok := log.ArrivalOfDatagram(sum, first)
	if !ok {
		return false
	}
	res.Handshake, res.handshakeStamped = k.Sub(first), true
	res.CryptoFrom, res.CryptoTo = first, k
	return true
}

// listenStamped opens the UDP socket of a connection to addr, bound to the route's
// source address (so that the socket, and Result.Local, names the address the packets
// carry, not the wildcard), with kernel receive timestamps.
func listenStamped(addr netip.AddrPort) (net.PacketConn, *kstamp.Log, error) {
	network := "udp4"
	if addr.Addr().Is6() && !addr.Addr().Is4In6() {
		network = "udp6"
	}
	src, err := rtt.SourceFor(addr)
	if err != nil {
		return nil, nil, err
	}
	uc, err := net.ListenUDP(network, &net.UDPAddr{IP: src.AsSlice()})
	if err != nil {
		return nil, nil, err
	}
	pc, err := kstamp.NewPacketConn(uc)
	if err != nil {
		uc.Close()
		return nil, nil, err
	}
	return pc, &pc.Log, nil
}

// recordQUICState copies what the connection negotiated into res.
func recordQUICState(req *Request, res *Result, conn *quic.Conn) {
	st := conn.ConnectionState()
	res.QUICVersion = uint32(st.Version)
	res.TLSVersion, res.TLSCipher = st.TLS.Version, tlsCipherName(st.TLS.CipherSuite)
	res.ALPN = st.TLS.NegotiatedProtocol
	res.Resumed, res.Used0RTT = boolp(st.TLS.DidResume), boolp(st.Used0RTT)
	if req.Peer != nil && st.Version != 0 {
		req.Peer.setVersion(st.Version)
	}
}

// finishQUIC closes conn, collects the qlog and takes the handshake time and the
// token/Retry/VN flags from it. The handshake ends at the kernel arrival of the datagram
// the qlog names (stampHandshake); failing that, at the last arrival before the dial
// returned (dialQUIC), else at the qlog's own time of completion (quic-go's connection
// goroutine takes it when it got to the packet), else the wall clock around the dial
// (HandshakeWall).
func finishQUIC(conn *quicConn, res *Result, ql *qlogBuffer) {
	start := time.Now()
	if conn != nil {
		conn.close()
	}
	closed := time.Now()
	var arrivals []byte
	if conn != nil && conn.log != nil {
		arrivals = arrivalsRecord(conn.log)
	}
	res.Qlog, res.QlogTruncated = ql.bytes(arrivals)
	if finishPhases != nil {
		collected := time.Now()
		defer func() {
			finishPhases(res, start, closed.Sub(start), collected.Sub(closed), time.Since(collected))
		}()
	}
	ql.mu.Lock()
	res.ODCID = ql.odcid
	ql.mu.Unlock()
	if len(res.Qlog) == 0 {
		if res.HasHandshake && !res.handshakeStamped {
			res.Handshake = res.HandshakeWall
		}
		return
	}
	tr, err := qlogana.Parse(res.Qlog)
	var a *qlogana.Analysis
	if err == nil {
		a, err = tr.Analyze()
	}
	if err != nil {
		if res.HasHandshake && !res.handshakeStamped {
			res.Handshake = res.HandshakeWall
		}
		return
	}
	res.QlogTrace, res.QlogAnalysis = tr, a
	// A Retry or Version Negotiation comes before the handshake completes, a NEW_TOKEN
	// frame after it: a connection whose handshake did not complete (nothing answered,
	// or it failed) cannot tell that none came (nil), only that one did.
	res.TokenReceived = shown(a.TokenReceived, a.HandshakeComplete)
	if a.TokenUsed {
		res.TokenUsed = boolp(true)
	}
	res.RetrySeen, res.VNSeen = shown(a.Retry, a.HandshakeComplete), shown(a.VersionNegotiation, a.HandshakeComplete)
	if a.HandshakeNS > 0 {
		res.HasHandshake = true // 0-RTT: the handshake completed after the wait for it ended
	}
	if !res.HasHandshake {
		return
	}
	var log *kstamp.Log
	if conn != nil {
		log = conn.log
	}
	switch {
	case stampHandshake(res, log, tr):
	case res.handshakeStamped:
	case a.HandshakeNS > 0:
		res.Handshake = time.Duration(a.HandshakeNS)
	default:
		res.Handshake = res.HandshakeWall
	}
}

// recordingTokenStore remembers whether the connection took a token from the store,
// i.e. whether its first Initial carried a NEW_TOKEN token (RFC 9000 §8.1.3).
type recordingTokenStore struct {
	quic.TokenStore
	mu   sync.Mutex
	used bool
}

func (s *recordingTokenStore) Pop(key string) *quic.ClientToken {
	t := s.TokenStore.Pop(key)
	if t != nil {
		s.mu.Lock()
		s.used = true
		s.mu.Unlock()
	}
	return t
}

func (s *recordingTokenStore) popped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}
