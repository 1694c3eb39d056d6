package qlogana

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestParseClose: connection_closed events of every vintage read into one Close.
func TestParseClose(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	for _, c := range []struct {
		name, data string
		want       Close
	}{
		{"quic-go today, TLS alert", `{"initiator":"remote","connection_error":"crypto_error_0x178","reason":""}`,
			Close{Initiator: "remote", Space: "transport", Error: "crypto_error_0x178", Code: u(0x178), TLSAlert: u(120)}},
		{"quic-go today, named", `{"initiator":"remote","connection_error":"connection_refused","reason":"busy"}`,
			Close{Initiator: "remote", Space: "transport", Error: "connection_refused", Code: u(2), Reason: "busy"}},
		{"quic-go today, unknown code", `{"initiator":"remote","connection_error":"unknown","error_code":4660,"reason":"x"}`,
			Close{Initiator: "remote", Space: "transport", Code: u(4660), Reason: "x"}},
		{"quic-go today, application", `{"initiator":"local","application_error":"unknown","error_code":0,"reason":""}`,
			Close{Initiator: "local", Space: "application", Code: u(0)}},
		{"quic-go today, idle timeout", `{"initiator":"local","trigger":"idle_timeout"}`,
			Close{Initiator: "local", Trigger: "idle_timeout"}},
		{"draft-02, idle timeout", `{"owner":"local","trigger":"idle_timeout"}`,
			Close{Initiator: "local", Trigger: "idle_timeout"}},
		{"draft-02, application", `{"owner":"local","application_code":0,"reason":""}`,
			Close{Initiator: "local", Space: "application", Code: u(0)}},
		{"draft-02, numeric crypto error", `{"owner":"remote","connection_code":376}`,
			Close{Initiator: "remote", Space: "transport", Error: "crypto_error_0x178", Code: u(0x178), TLSAlert: u(120)}},
	} {
		got := parseClose(json.RawMessage(c.data))
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(c.want)
		if string(gb) != string(wb) {
			t.Errorf("%s: %s, want %s", c.name, gb, wb)
		}
	}
	if parseClose(json.RawMessage(`[1,2]`)) != nil {
		t.Error("an array read as a close")
	}
}

// TestCloseOfTheStudysQlogs: the draft-02 fixtures of 2021 keep their close: every one
// ends with an idle timeout (no reply) or our application close (after a Retry).
func TestCloseOfTheStudysQlogs(t *testing.T) {
	files, _ := filepath.Glob("testdata/dns-analysis-2021/qlogs/*")
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		c := tr.Close
		if c == nil || c.Initiator != "local" || (c.Trigger != "idle_timeout" && c.Space != "application") {
			t.Errorf("%s: close %+v, want ours: an idle timeout or an application close", filepath.Base(f), c)
		}
	}
}
