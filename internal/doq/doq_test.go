package doq

import (
	"bytes"
	"errors"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	msg := []byte{0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, v := range Versions {
		b, err := Frame(v.Framing, msg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadMessage(bytes.NewReader(b), v.Framing, 0)
		if err != nil || !bytes.Equal(got, msg) {
			t.Errorf("%s: got %x, %v", v.ALPN, got, err)
		}
	}
}

func TestReadMessageRejectsBadLengthAndEndlessStreams(t *testing.T) {
	if _, err := ReadMessage(bytes.NewReader([]byte{0, 5, 1, 2}), LengthPrefixed, 0); !errors.Is(err, ErrBadLength) {
		t.Errorf("short stream: %v", err)
	}
	if _, err := ReadMessage(bytes.NewReader([]byte{0, 1, 1, 2}), LengthPrefixed, 0); !errors.Is(err, ErrBadLength) {
		t.Errorf("long stream: %v", err)
	}
	if _, err := ReadMessage(bytes.NewReader(make([]byte, 5000)), Raw, 4096); !errors.Is(err, ErrStreamTooLong) {
		t.Error("stream over the limit accepted")
	}
}

func TestTableOrderAndFraming(t *testing.T) {
	if Versions[0].ALPN != "doq" {
		t.Fatal("RFC 9250 must be offered first")
	}
	for i := 1; i < len(Versions); i++ {
		if Versions[i].Draft > Versions[i-1].Draft && Versions[i-1].Draft >= 0 {
			t.Errorf("%s offered after a lower draft", Versions[i].ALPN)
		}
	}
	// draft-ietf-dprive-dnsoquic-02 §5.2 sends the bare message; -03 §5.2 introduced
	// the 2-octet length field (checked against the drafts' texts).
	for _, a := range []string{"doq-i00", "doq-i01", "doq-i02", "dq"} {
		if f, _ := FramingFor(a); f != Raw {
			t.Errorf("%s should be raw", a)
		}
	}
	for _, a := range []string{"doq", "doq-i12", "doq-i07", "doq-i06", "doq-i03"} {
		if f, _ := FramingFor(a); f != LengthPrefixed {
			t.Errorf("%s should be length-prefixed", a)
		}
	}
	if _, err := FramingFor("h3"); err == nil {
		t.Error("h3 accepted as DoQ")
	}
}

func FuzzReadMessage(f *testing.F) {
	f.Add([]byte{0, 2, 1, 2}, true)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, b []byte, prefixed bool) {
		fr := Raw
		if prefixed {
			fr = LengthPrefixed
		}
		msg, err := ReadMessage(bytes.NewReader(b), fr, 0)
		if err == nil && prefixed && len(msg) != len(b)-2 {
			t.Fatalf("accepted %d bytes as %d", len(b), len(msg))
		}
	})
}
