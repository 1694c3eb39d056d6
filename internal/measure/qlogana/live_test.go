package qlogana_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/doqscan/doqscan/internal/certs/certtest"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
)

// tee records every event to both traces.
type tee struct{ a, b qlogwriter.Trace }

func (t tee) AddProducer() qlogwriter.Recorder {
	return teeRec{t.a.AddProducer(), t.b.AddProducer()}
}

type teeRec struct{ a, b qlogwriter.Recorder }

func (r teeRec) RecordEvent(e qlogwriter.Event) { r.a.RecordEvent(e); r.b.RecordEvent(e) }
func (r teeRec) Close() error                   { r.a.Close(); return r.b.Close() }

type closeBuf struct {
	bytes.Buffer
	done chan struct{}
}

func (b *closeBuf) Close() error { close(b.done); return nil }

// TestLiveViewEqualsStoredQlog: for the same connections (a completed handshake with a
// Retry, a NEW_TOKEN and an answer; and one refused for its ALPN), the view LiveView
// builds from quic-go's events equals the one read from the qlog quic-go wrote of them.
func TestLiveViewEqualsStoredQlog(t *testing.T) {
	root := certtest.NewRoot(t, "root")
	leaf, key := root.Leaf(t, certtest.ECDSA, "doq.test")
	cert := tls.Certificate{Certificate: [][]byte{leaf.Raw, root.Cert.Raw}, PrivateKey: key}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: pc, VerifySourceAddress: func(net.Addr) bool { return true }}
	defer tr.Close()
	ln, err := tr.Listen(&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"doq"}}, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			go func() {
				s, err := c.AcceptStream(context.Background())
				if err == nil {
					buf := make([]byte, 64)
					n, _ := s.Read(buf)
					_, _ = s.Write(buf[:n])
					_ = s.Close()
				}
				time.Sleep(200 * time.Millisecond)
				_ = c.CloseWithError(0, "")
			}()
		}
	}()
	for _, alpn := range []string{"doq", "h3"} {
		live := qlogana.NewLiveView()
		stored := &closeBuf{done: make(chan struct{})}
		qconf := &quic.Config{Tracer: func(_ context.Context, isClient bool, odcid quic.ConnectionID) qlogwriter.Trace {
			fs := qlogwriter.NewConnectionFileSeq(stored, isClient, odcid)
			go fs.Run()
			return tee{fs, live}
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := quic.DialAddr(ctx, pc.LocalAddr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{alpn}}, qconf)
		if err == nil {
			s, err := c.OpenStreamSync(ctx)
			if err == nil {
				_, _ = s.Write([]byte("hello"))
				_ = s.Close()
				_, _ = s.Read(make([]byte, 64))
			}
			time.Sleep(50 * time.Millisecond) // the server's NEW_TOKEN and 1-RTT packets
			_ = c.CloseWithError(0, "")
		} else if alpn == "doq" {
			t.Fatal(err)
		}
		cancel()
		select {
		case <-stored.done:
		case <-time.After(5 * time.Second):
			t.Fatal("the stored trace did not end")
		}
		got := live.View(5 * time.Second)
		tr, err := qlogana.Parse(stored.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		want := tr.Server()
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if got == nil || !bytes.Equal(g, w) {
			t.Errorf("ALPN %s: live view\n%s\nstored qlog's\n%s", alpn, g, w)
		}
		// Both connections got a Retry (VerifySourceAddress); the refused one has no
		// NEW_TOKEN or parameters.
		if want.RetryTokenLen == nil || want.RetryODCIDLen == nil || alpn == "doq" && (want.NewTokenLen == nil || want.Params == nil) {
			t.Fatalf("ALPN %s: the view lacks the Retry, its ODCID, NEW_TOKEN or parameters: %s", alpn, w)
		}
		// quic-go's Retry token: 32-byte salt, 16-byte tag, the ASN.1 of (retry, the
		// client's address, time, RTT 0, ODCID, the Retry's SCID): 81 bytes beside the
		// ODCID with quic-go's 4-byte connection IDs for a 4-byte address, 93 for a
		// 16-byte one (an IPv4 client as a dual-stack socket reports it).
		if d := *want.RetryTokenLen - *want.RetryODCIDLen; alpn == "doq" && d != 81 && d != 93 {
			t.Errorf("ALPN doq: Retry token %d bytes for a %d-byte ODCID, want 81 or 93 more", *want.RetryTokenLen, *want.RetryODCIDLen)
		}
		if alpn == "h3" && (want.Close == nil || want.Close.TLSAlert == nil || *want.Close.TLSAlert != 120) {
			t.Errorf("ALPN h3: no close for the refused ALPN: %s", w)
		}
	}
}
