// End-to-end test of the opt-out page in a real headless Chromium, driven through
// chromedriver's W3C WebDriver API (a few JSON calls; no browser download, no library).
// Without chromium and chromedriver installed the test skips with the reason.
package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/optout"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

const (
	chromiumPath     = "/usr/bin/chromium"
	chromedriverPath = "/usr/bin/chromedriver"
	elementKey       = "element-6066-11e4-a52e-4f735466cecf" // W3C WebDriver §12 web element identifier
)

type webDriver struct {
	t       *testing.T
	base    string
	session string
}

func (d *webDriver) call(method, path string, body any) json.RawMessage {
	d.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, d.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("webdriver %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out struct {
		Value json.RawMessage `json:"value"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil || resp.StatusCode != 200 {
		d.t.Fatalf("webdriver %s %s: status %d: %s", method, path, resp.StatusCode, raw)
	}
	return out.Value
}

func (d *webDriver) find(css string) string {
	d.t.Helper()
	var el map[string]string
	json.Unmarshal(d.call("POST", "/session/"+d.session+"/element", map[string]string{"using": "css selector", "value": css}), &el)
	return el[elementKey]
}

func (d *webDriver) typeInto(css, text string) {
	el := d.find(css)
	d.call("POST", "/session/"+d.session+"/element/"+el+"/clear", map[string]any{})
	d.call("POST", "/session/"+d.session+"/element/"+el+"/value", map[string]string{"text": text})
}

func (d *webDriver) text(css string) string {
	var s string
	json.Unmarshal(d.call("GET", "/session/"+d.session+"/element/"+d.find(css)+"/text", nil), &s)
	return s
}

func (d *webDriver) open(url string) {
	d.call("POST", "/session/"+d.session+"/url", map[string]string{"url": url})
}

func (d *webDriver) submit() {
	// Clicking navigates; WebDriver's click returns after the new page has loaded.
	d.call("POST", "/session/"+d.session+"/element/"+d.find("#submit")+"/click", map[string]any{})
}

func startBrowser(t *testing.T) *webDriver {
	for _, p := range []string{chromiumPath, chromedriverPath} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s is not installed (apt-get install chromium chromium-driver; ./dev install does)", p)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, chromedriverPath, fmt.Sprintf("--port=%d", port), "--allowed-ips=127.0.0.1")
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	// chromedriver announces readiness on stdout.
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "started successfully") {
				ready <- true
				io.Copy(io.Discard, stdout)
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("chromedriver exited before it was ready")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("chromedriver not ready after 30 s")
	}
	d := &webDriver{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	profile := t.TempDir()
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{"binary": chromiumPath, "args": []string{
			"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--disable-dev-shm-usage", "--user-data-dir=" + filepath.Join(profile, "p")}}}}}
	json.Unmarshal(d.call("POST", "/session", caps), &sess)
	d.session = sess.SessionID
	// A submit's navigation may still be under way when click returns on a loaded machine:
	// element look-ups wait (W3C WebDriver §9 implicit wait) until the new page has it.
	d.call("POST", "/session/"+d.session+"/timeouts", map[string]int{"implicit": 15000, "pageLoad": 30000})
	t.Cleanup(func() { d.call("DELETE", "/session/"+d.session, nil) })
	return d
}

func TestBrowserOptOut(t *testing.T) {
	d := startBrowser(t)
	dir := t.TempDir()
	// The default policy (own range): the browser connects from 127.0.0.1.
	srv := &optout.Server{Store: storetest.Open(t), BlocklistDir: dir, Info: optout.DefaultInfo, PostsPerMinute: 600,
		Burst: 50, Policy: optout.PolicyOwnRange, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)

	// Bad inputs are refused with a clear message and nothing is stored.
	bad := []struct{ rng, note, msg string }{
		{"example.com", "", "not an IP address"},
		{"10.0.0.0/8", "", "prefix too large"},
		{"198.19.42.0/24", "<script>alert(1)</script>", "HTML or script"},
	}
	for _, b := range bad {
		d.open(hs.URL + "/")
		d.typeInto("#range", b.rng)
		d.typeInto("#email", "noc@example.net")
		d.typeInto("#note", b.note)
		d.submit()
		if got := d.text("#error"); !strings.Contains(got, b.msg) {
			t.Errorf("range %q note %q: error %q, want %q", b.rng, b.note, got, b.msg)
		}
	}
	if reqs, _ := optout.Accepted(context.Background(), srv.Store); len(reqs) != 0 {
		t.Fatalf("refused inputs were stored: %v", reqs)
	}

	// A request for a range the browser is not in: recorded, pending, not excluded.
	d.open(hs.URL + "/")
	if got := d.text("#source"); got != "127.0.0.1" {
		t.Errorf("the page says the visitor's address is %q, want 127.0.0.1", got)
	}
	d.typeInto("#range", "198.19.43.0/24")
	d.typeInto("#email", "noc@example.net")
	d.submit()
	if got := d.text("#pending"); !strings.Contains(got, "198.19.43.0/24 is recorded") || !strings.Contains(got, "waits for review") {
		t.Fatalf("pending page %q", got)
	}

	// A good request from inside its range: confirmation, database row, blocklist line.
	d.open(hs.URL + "/")
	if !strings.Contains(d.text("#excluded"), "0") {
		t.Errorf("excluded count before: %q", d.text("#excluded"))
	}
	d.typeInto("#range", "127.0.0.0/24")
	d.typeInto("#email", "noc@example.net")
	d.typeInto("#note", "our lab network")
	d.submit()
	if got := d.text("#confirmation"); !strings.Contains(got, "127.0.0.0/24 is excluded") {
		t.Fatalf("confirmation %q", got)
	}
	reqs, err := optout.Accepted(context.Background(), srv.Store)
	if err != nil || len(reqs) != 1 || reqs[0].Prefix.String() != "127.0.0.0/24" || reqs[0].Note != "our lab network" {
		t.Fatalf("stored %+v, %v", reqs, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, optout.OptOutFile))
	if !strings.Contains(string(b), "\n127.0.0.0/24 # ") || strings.Contains(string(b), "198.19.43.0") {
		t.Fatalf("blocklist file lacks the accepted range or has the pending one:\n%s", b)
	}
	d.open(hs.URL + "/")
	if got := d.text("#excluded"); got != "1" {
		t.Errorf("excluded count after: %q", got)
	}
}
