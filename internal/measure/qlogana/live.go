package qlogana

import (
	"bytes"
	"encoding/json"
	"sync"
	"time"

	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"
	"github.com/quic-go/quic-go/qlogwriter/jsontext"
)

// LiveView is a qlogwriter.Trace (quic.Config.Tracer's result) that builds a
// connection's ServerView from quic-go's own qlog events as quic-go records them,
// without writing or parsing a qlog: received packets are read from the event values;
// only the events whose JSON the view keeps (the peer's transport parameters, a packet
// carrying CONNECTION_CLOSE) are encoded, by quic-go's own encoder, and read as the
// view of a stored qlog reads them. Encoding and parsing a whole qlog cost a
// verification more CPU than its handshake (docs/verify.md).
type LiveView struct {
	mu        sync.Mutex
	r         serverReader
	producers int
	started   bool
	done      chan struct{}
}

// NewLiveView returns an empty view for one connection (quic-go starts a trace per
// connection attempt: a LiveView per Tracer call).
func NewLiveView() *LiveView { return &LiveView{done: make(chan struct{})} }

// AddProducer implements qlogwriter.Trace.
func (l *LiveView) AddProducer() qlogwriter.Recorder {
	l.mu.Lock()
	l.producers++
	l.started = true
	l.mu.Unlock()
	return &liveRecorder{l: l}
}

type liveRecorder struct {
	l    *LiveView
	once sync.Once
}

func (r *liveRecorder) Close() error {
	r.once.Do(func() {
		r.l.mu.Lock()
		r.l.producers--
		last := r.l.producers == 0
		r.l.mu.Unlock()
		if last {
			close(r.l.done)
		}
	})
	return nil
}

func (r *liveRecorder) RecordEvent(e qlogwriter.Event) {
	switch ev := e.(type) {
	case qlog.PacketReceived:
		r.l.received(&ev)
	case *qlog.PacketReceived:
		r.l.received(ev)
	case qlog.PacketSent:
		r.l.sent(&ev)
	case *qlog.PacketSent:
		r.l.sent(ev)
	case qlog.ParametersSet:
		if ev.Initiator == qlog.InitiatorRemote {
			r.l.encoded(e, r.l.r.parameters)
		}
	case *qlog.ParametersSet:
		if ev.Initiator == qlog.InitiatorRemote {
			r.l.encoded(e, r.l.r.parameters)
		}
	}
}

// encoded hands e's data, as quic-go encodes it, to f.
func (l *LiveView) encoded(e qlogwriter.Event, f func(json.RawMessage)) {
	var buf bytes.Buffer
	if err := e.Encode(jsontext.NewEncoder(&buf), time.Time{}); err != nil {
		return
	}
	l.mu.Lock()
	f(bytes.TrimSpace(buf.Bytes()))
	l.mu.Unlock()
}

// sent notes our Initials' DCID length (a Retry's token carries the one it answers).
func (l *LiveView) sent(p *qlog.PacketSent) {
	if p.Header.PacketType != qlog.PacketTypeInitial {
		return
	}
	l.mu.Lock()
	l.r.sentInitial(p.Header.DestConnectionID.Len())
	l.mu.Unlock()
}

func (l *LiveView) received(p *qlog.PacketReceived) {
	for _, f := range p.Frames {
		if _, ok := f.Frame.(*qlog.ConnectionCloseFrame); ok {
			l.encoded(*p, l.r.received) // rare: the view reads the close as a stored qlog shows it
			return
		}
	}
	rp := receivedView{ptype: string(p.Header.PacketType), length: p.Raw.Length, scidLen: -1}
	switch p.Header.PacketType {
	case qlog.PacketTypeInitial, qlog.PacketTypeHandshake, qlog.PacketType0RTT, qlog.PacketTypeRetry:
		rp.scidLen = p.Header.SrcConnectionID.Len()
	}
	if p.DatagramPayloadChecksum != 0 {
		sum := uint32(p.DatagramPayloadChecksum)
		rp.checksum = &sum
	}
	if p.Header.PacketType == qlog.PacketTypeRetry && p.Header.Token != nil {
		n := len(p.Header.Token.Raw)
		rp.retryTokenLen = &n
	}
	for _, f := range p.Frames {
		fv := frameView{name: frameName(f.Frame)}
		if nt, ok := f.Frame.(*qlog.NewTokenFrame); ok {
			n := len(nt.Token)
			fv.newTokenLen = &n
		}
		rp.frames = append(rp.frames, fv)
	}
	l.mu.Lock()
	l.r.add(rp)
	l.mu.Unlock()
}

// frameName is a frame's qlog name (RFC 9000's frame names in lower snake case, as
// quic-go's qlog writes them).
func frameName(f any) string {
	switch f.(type) {
	case *qlog.PingFrame:
		return "ping"
	case *qlog.AckFrame:
		return "ack"
	case *qlog.ResetStreamFrame:
		return "reset_stream"
	case *qlog.StopSendingFrame:
		return "stop_sending"
	case *qlog.CryptoFrame:
		return "crypto"
	case *qlog.NewTokenFrame:
		return "new_token"
	case *qlog.StreamFrame:
		return "stream"
	case *qlog.MaxDataFrame:
		return "max_data"
	case *qlog.MaxStreamDataFrame:
		return "max_stream_data"
	case *qlog.MaxStreamsFrame:
		return "max_streams"
	case *qlog.DataBlockedFrame:
		return "data_blocked"
	case *qlog.StreamDataBlockedFrame:
		return "stream_data_blocked"
	case *qlog.StreamsBlockedFrame:
		return "streams_blocked"
	case *qlog.NewConnectionIDFrame:
		return "new_connection_id"
	case *qlog.RetireConnectionIDFrame:
		return "retire_connection_id"
	case *qlog.PathChallengeFrame:
		return "path_challenge"
	case *qlog.PathResponseFrame:
		return "path_response"
	case *qlog.ConnectionCloseFrame:
		return "connection_close"
	case *qlog.HandshakeDoneFrame:
		return "handshake_done"
	case *qlog.DatagramFrame:
		return "datagram"
	case *qlog.AckFrequencyFrame:
		return "ack_frequency"
	case *qlog.ImmediateAckFrame:
		return "immediate_ack"
	}
	return "unknown"
}

// View waits (at most wait) until quic-go closed the connection's trace and returns
// what it showed of the server; nil when it showed nothing.
func (l *LiveView) View(wait time.Duration) *ServerView {
	l.mu.Lock()
	started := l.started
	l.mu.Unlock()
	if started {
		t := time.NewTimer(wait)
		select {
		case <-l.done:
		case <-t.C:
		}
		t.Stop()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.r.v
	if v.SCIDLen == nil && v.Params == nil && v.Close == nil && v.FirstDatagram == nil {
		return nil
	}
	return &v
}
