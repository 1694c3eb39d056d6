package qlogs_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/measure/qlogs"
)

// TestRefusedHandshakeSaysWhy: `qlogs analyze` on the qlog of a handshake the server
// refused (it accepts only ALPN doq, the client offers only doq-i02: TLS alert 120,
// QUIC CRYPTO_ERROR 0x178) prints who closed the connection and why, from the qlog's
// connection_closed event; a completed handshake's line has no close.
func TestRefusedHandshakeSaysWhy(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.52"})
	m, _ := measure.For(measure.DoQ)
	line := func(alpn string) map[string]any {
		t.Helper()
		res := m.Measure(context.Background(), &measure.Request{Addr: s.DoQ, ALPN: []string{alpn}, Timeout: 2 * time.Second, KeyShare: measure.KeyShareX25519})
		if len(res.Qlog) == 0 {
			t.Fatalf("ALPN %s: %s (%v), no qlog", alpn, res.Status, res.Err)
		}
		b, err := json.Marshal(qlogs.AnalyzeBytes(alpn+".sqlog", res.Qlog, 0))
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		t.Logf("ALPN %s: %s", alpn, b)
		return out
	}
	refused := line("doq-i02")
	c, _ := refused["close"].(map[string]any)
	want := map[string]any{"initiator": "remote", "space": "transport", "error": "crypto_error_0x178", "code": 376.0, "tls_alert": 120.0}
	if refused["handshake_complete"] != false || c == nil {
		t.Fatalf("refused handshake: %v, want handshake_complete false and a close", refused)
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("close.%s = %v, want %v (close %v)", k, c[k], v, c)
		}
	}
	if ok := line("doq"); ok["handshake_complete"] != true || ok["close"] != nil {
		t.Errorf("completed handshake: %v, want handshake_complete and no close", ok)
	}
}
