package delayline

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"
)

// The control socket changes path profiles while the line runs: a Unix stream socket
// that takes one request line per connection and answers one line, after the change
// is in effect (the next packet the line decides sees it):
//
//	set PREFIX [rtt=D] [jitter=D] [loss=X]   # override the path of an address or prefix
//	reset [PREFIX]                           # drop every override (or the one of PREFIX)
//	show                                     # the overrides, "; "-separated
//
// A set keeps the attributes it does not name from the path's current profile (the
// table file's, or an earlier override's). Overrides survive a SIGHUP reload of the
// table file and are lost when the line stops. Answers are "ok ..." or "error: ...".

// ErrControl is a request the delay line refused (bad syntax or values).
var ErrControl = errors.New("delay-line control refused the request")

// Control holds the table file's paths and the run-time overrides on top of them, and
// hands every merged table to apply.
type Control struct {
	mu    sync.Mutex
	base  *Table
	over  map[netip.Prefix]Profile
	order []netip.Prefix // overrides in the order first set
	apply func(*Table)
}

// NewControl returns a Control over base; apply receives the merged table after each change.
func NewControl(base *Table, apply func(*Table)) *Control {
	return &Control{base: base, over: map[netip.Prefix]Profile{}, apply: apply}
}

// SetBase replaces the table file's paths (a reload), keeping the overrides.
func (c *Control) SetBase(t *Table) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base = t
	c.apply(c.merged())
}

// merged is base plus the overrides; c.mu held.
func (c *Control) merged() *Table {
	t := c.base.Clone()
	for _, p := range c.order {
		t.Set(p, c.over[p])
	}
	return t
}

// Do carries out one request line and returns the answer (without "ok "); a refused
// request is an ErrControl.
func (c *Control) Do(line string) (string, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return "", fmt.Errorf("%w: empty request (set, reset, show)", ErrControl)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch f[0] {
	case "set":
		if len(f) < 3 {
			return "", fmt.Errorf("%w: set needs a prefix and at least one of rtt=, jitter=, loss=", ErrControl)
		}
		pfx, err := parsePrefix(f[1])
		if err != nil {
			return "", fmt.Errorf("%w: %v", ErrControl, err)
		}
		prof := c.merged().Lookup(pfx.Addr())
		for _, kv := range f[2:] {
			p, err := parseAttrs([]string{kv})
			if err != nil {
				return "", fmt.Errorf("%w: %v", ErrControl, err)
			}
			switch k, _, _ := strings.Cut(kv, "="); k {
			case "rtt":
				prof.OneWay = p.OneWay
			case "jitter":
				prof.Jitter = p.Jitter
			case "loss":
				prof.Loss = p.Loss
			}
		}
		if _, ok := c.over[pfx]; !ok {
			c.order = append(c.order, pfx)
		}
		c.over[pfx] = prof
		c.apply(c.merged())
		return fmt.Sprintf("%v %s", pfx, attrs(prof)), nil
	case "reset":
		switch len(f) {
		case 1:
			c.over, c.order = map[netip.Prefix]Profile{}, nil
		case 2:
			pfx, err := parsePrefix(f[1])
			if err != nil {
				return "", fmt.Errorf("%w: %v", ErrControl, err)
			}
			delete(c.over, pfx)
			for i, p := range c.order {
				if p == pfx {
					c.order = append(c.order[:i], c.order[i+1:]...)
					break
				}
			}
		default:
			return "", fmt.Errorf("%w: reset takes at most one prefix", ErrControl)
		}
		c.apply(c.merged())
		return "reset", nil
	case "show":
		s := make([]string, 0, len(c.order))
		for _, p := range c.order {
			s = append(s, fmt.Sprintf("%v %s", p, attrs(c.over[p])))
		}
		return strings.Join(s, "; "), nil
	}
	return "", fmt.Errorf("%w: unknown request %q (set, reset, show)", ErrControl, f[0])
}

// maxRequest bounds a request line.
const maxRequest = 4096

// ServeControl answers requests on ln until ctx is done (it then closes ln).
func (c *Control) ServeControl(ctx context.Context, ln net.Listener) error {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go c.serveConn(conn)
	}
}

func (c *Control) serveConn(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(&limitReader{r: conn, n: maxRequest})
	line, err := r.ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintf(conn, "error: reading the request: %v\n", err)
		return
	}
	ans, err := c.Do(strings.TrimSpace(line))
	if err != nil {
		fmt.Fprintf(conn, "error: %s\n", strings.TrimPrefix(err.Error(), ErrControl.Error()+": "))
		return
	}
	fmt.Fprintf(conn, "ok %s\n", ans)
}

type limitReader struct {
	r net.Conn
	n int
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("request line too long")
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	k, err := l.r.Read(p)
	l.n -= k
	return k, err
}

// ListenControl opens the control socket at path (replacing a stale one).
func ListenControl(path string) (net.Listener, error) {
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("delay-line control socket: %w", err)
	}
	return ln, nil
}

// ControlRequest sends one request to the control socket at path and returns the
// answer after "ok ". A refusal is an ErrControl; an unreachable socket (no delay line,
// or one without control) is the dial error.
func ControlRequest(ctx context.Context, path, request string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return "", fmt.Errorf("delay-line control: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := fmt.Fprintf(conn, "%s\n", strings.TrimSpace(request)); err != nil {
		return "", fmt.Errorf("delay-line control: %w", err)
	}
	ans, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil && ans == "" {
		return "", fmt.Errorf("delay-line control: reading the answer: %w", err)
	}
	ans = strings.TrimSpace(ans)
	if rest, ok := strings.CutPrefix(ans, "ok"); ok {
		return strings.TrimSpace(rest), nil
	}
	return "", fmt.Errorf("%w: %s", ErrControl, strings.TrimPrefix(ans, "error: "))
}

// Clone returns a copy of the table that Set on either leaves the other unchanged.
func (t *Table) Clone() *Table {
	c := NewTable(t.Default)
	for a, p := range t.exact {
		c.exact[a] = p
	}
	for _, b := range t.lens {
		c.byLen[b] = make(map[netip.Prefix]Profile, len(t.byLen[b]))
		for p, prof := range t.byLen[b] {
			c.byLen[b][p] = prof
		}
	}
	c.lens = append([]int(nil), t.lens...)
	for v, d := range t.Vantage {
		c.Vantage[v] = d
	}
	return c
}
