package peers

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// lazydnsConfig is lazydns's YAML configuration for s: its DoQ server (quinn) on
// s.Addr and the QUIC port, answering test.com and example.com (the names the
// measurement and verify query) from a hosts file; nothing forwards anywhere. lazydns
// configures no ALPN for DoQ, so rustls refuses a ClientHello offering any (TLS alert
// no_application_protocol) and serves one offering none, framing DNS as RFC 9250: a
// real server of the population's alpn=none kind.
func lazydnsConfig(s Spec, hosts string) string {
	var b strings.Builder
	b.WriteString("log:\n  level: info\n  console: true\n  format: text\n")
	b.WriteString("plugins:\n")
	fmt.Fprintf(&b, "  - tag: hosts\n    type: hosts\n    args:\n      files:\n        - %q\n", hosts)
	b.WriteString("  - tag: main_sequence\n    type: sequence\n    args:\n      - exec: $hosts\n      - exec: accept\n")
	fmt.Fprintf(&b, "  - tag: doq_server\n    type: doq_server\n    args:\n      listen: %q\n      entry: main_sequence\n      cert_file: %q\n      key_file: %q\n",
		fmt.Sprintf("%s:%d", s.Addr, s.quicPort()), s.CertFile, s.KeyFile)
	return b.String()
}

// lazydnsNames are the names lazydns's hosts file answers.
var lazydnsNames = []string{strings.TrimSuffix(Zone, "."), "example.com"}

func lazydnsCommand(cfg Config, s Spec) ([]string, error) {
	bin := Binary(cfg.Root, LazyDNS)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s: %w", bin, ErrNotInstalled)
	}
	hosts := filepath.Join(cfg.RunDir, s.Name()+".hosts")
	var lines strings.Builder
	for _, n := range lazydnsNames {
		fmt.Fprintf(&lines, "%s %s\n", cfg.Answer, n)
	}
	if err := os.WriteFile(hosts, []byte(lines.String()), 0o644); err != nil {
		return nil, err
	}
	conf := filepath.Join(cfg.RunDir, s.Name()+".yaml")
	if err := os.WriteFile(conf, []byte(lazydnsConfig(s, hosts)), 0o644); err != nil {
		return nil, err
	}
	return []string{bin, "-c", conf}, nil
}
